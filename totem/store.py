"""The sqlite database: schema, migrations and every query.

Owns the one sqlite file in the data folder (WAL mode, foreign keys on, removal cascading).
Writes go to one writer thread fed by a queue, each batch inside `BEGIN IMMEDIATE`; reads run
on a small pool of threads with one connection each. Results come back to the event loop as
futures, so nothing here blocks the loop. Nothing outside this module writes SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import secrets
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from .errors import StorageFull, out_of_space
from .rows import (
    AttachmentInfo,
    AttachmentRow,
    MessageRow,
    PartRow,
    ProjectRow,
    ProviderRow,
    RuleRow,
    ScheduleRow,
    SessionRow,
    SnapshotRow,
)

DATABASE_FILE = "totem.db"
READ_THREADS = 2
MAX_WRITE_BATCH = 256
BUSY_TIMEOUT_MS = 10_000
MAX_SQL_VARIABLES = 900  # ids per IN (...) list, under every sqlite build's limit
ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
# What the JSON of a message or a part adds to its stored text and data (keys, ids, times), in
# the size of a page of messages.
JSON_OVERHEAD_BYTES = 200
# Every commit writes whole pages: a flush of streamed text writes its piece plus the leaf that
# holds it and the header page, so a smaller page than sqlite's 4 KB halves what each flush adds
# beyond its text (bench/flush.py: 4 KB pages 2.1x the text, 2 KB 1.5x; 300 bytes a flush, 17x
# and 10x), at the price of more pages for a big message or attachment to read.
PAGE_BYTES = 2048
# A piece's id is its part's number shifted by this many bits, plus its place in the part.
PIECE_BITS = 20
MAX_PIECES = (1 << PIECE_BITS) - 1
MAX_SERVER_PINS = 16  # approvals of one project MCP server whose manifest is kept

# Each entry moves the schema one version up; never edit one that has shipped.
log = logging.getLogger("totem.store")
BLOB_STEP_BYTES = 1 << 20  # a large value is written in steps of this size (attachments)

MIGRATIONS = (
    """
    CREATE TABLE projects (
        id TEXT PRIMARY KEY,
        path TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        created INTEGER NOT NULL,
        opened INTEGER NOT NULL
    );
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        projectid TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'idle',
        mode TEXT NOT NULL DEFAULT 'build',
        autoaccept INTEGER NOT NULL DEFAULT 0,
        model TEXT,
        worktree TEXT,
        created INTEGER NOT NULL,
        updated INTEGER NOT NULL
    );
    CREATE INDEX sessions_by_project ON sessions(projectid, updated);
    CREATE TABLE messages (
        id TEXT PRIMARY KEY,
        sessionid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        model TEXT,
        usage TEXT,
        data TEXT NOT NULL DEFAULT '{}',
        created INTEGER NOT NULL,
        finished INTEGER
    );
    CREATE INDEX messages_by_session ON messages(sessionid, id);
    CREATE TABLE parts (
        id TEXT PRIMARY KEY,
        messageid TEXT NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        sessionid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        text TEXT NOT NULL DEFAULT '',
        data TEXT NOT NULL DEFAULT '{}',
        created INTEGER NOT NULL,
        updated INTEGER NOT NULL,
        closed INTEGER
    );
    CREATE INDEX parts_by_message ON parts(messageid, id);
    CREATE INDEX parts_open ON parts(closed) WHERE closed IS NULL;
    CREATE TABLE rules (
        id TEXT PRIMARY KEY,
        projectid TEXT REFERENCES projects(id) ON DELETE CASCADE,
        tool TEXT NOT NULL,
        pattern TEXT NOT NULL,
        action TEXT NOT NULL,
        created INTEGER NOT NULL
    );
    CREATE TABLE providers (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        url TEXT NOT NULL,
        secret BLOB,
        data TEXT NOT NULL DEFAULT '{}',
        created INTEGER NOT NULL,
        updated INTEGER NOT NULL
    );
    CREATE TABLE settings (
        projectid TEXT REFERENCES projects(id) ON DELETE CASCADE,
        sessionid TEXT REFERENCES sessions(id) ON DELETE CASCADE,
        key TEXT NOT NULL,
        value TEXT NOT NULL
    );
    CREATE UNIQUE INDEX settings_scope ON settings(ifnull(projectid, ''), ifnull(sessionid, ''), key);
    CREATE TABLE schedules (
        id TEXT PRIMARY KEY,
        projectid TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
        data TEXT NOT NULL DEFAULT '{}',
        created INTEGER NOT NULL,
        updated INTEGER NOT NULL
    );
    CREATE TABLE attachments (
        id TEXT PRIMARY KEY,
        sessionid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        messageid TEXT REFERENCES messages(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        mime TEXT NOT NULL,
        size INTEGER NOT NULL,
        data BLOB NOT NULL,
        created INTEGER NOT NULL
    );
    CREATE TABLE snapshots (
        id TEXT PRIMARY KEY,
        sessionid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        messageid TEXT REFERENCES messages(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        before BLOB,
        after BLOB,
        created INTEGER NOT NULL
    );
    CREATE TABLE todos (
        sessionid TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
        items TEXT NOT NULL DEFAULT '[]',
        updated INTEGER NOT NULL
    );
    CREATE TABLE logins (
        hash TEXT PRIMARY KEY,
        created INTEGER NOT NULL
    );
    """,
    # 2: why a session's last run failed, for whoever opens the session later.
    """
    ALTER TABLE sessions ADD COLUMN error TEXT;
    """,
    # 3: streamed text stored as the pieces each flush appended, so a long answer is written
    # once instead of whole at every flush; a part's text is its own column then its pieces.
    """
    CREATE TABLE part_texts (
        partid TEXT NOT NULL REFERENCES parts(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        text TEXT NOT NULL,
        PRIMARY KEY (partid, seq)
    ) WITHOUT ROWID;
    """,
    # 4: a page of a project's sessions read straight from the index, in the order of the list
    # (updated, then id): the old index left every tie on updated to a sort (issue 11).
    """
    DROP INDEX sessions_by_project;
    CREATE INDEX sessions_by_project ON sessions(projectid, updated, id);
    """,
    # 5: pieces keyed by one integer (the part's number, then the piece's place), so a flush
    # writes the piece and the leaf that holds it, not also the entry of a second key; a part
    # takes a number when its first piece arrives. Removing a part removes its pieces.
    """
    ALTER TABLE parts ADD COLUMN num INTEGER;
    CREATE UNIQUE INDEX parts_by_num ON parts(num) WHERE num IS NOT NULL;
    CREATE TABLE part_pieces (
        id INTEGER PRIMARY KEY,
        text TEXT NOT NULL
    );
    UPDATE parts SET num = rowid WHERE id IN (SELECT partid FROM part_texts);
    INSERT INTO part_pieces (id, text)
        SELECT (parts.num << 20) | part_texts.seq, part_texts.text
        FROM part_texts JOIN parts ON parts.id = part_texts.partid;
    DROP TABLE part_texts;
    CREATE TRIGGER part_pieces_go_with_part AFTER DELETE ON parts WHEN old.num IS NOT NULL
    BEGIN
        DELETE FROM part_pieces WHERE id BETWEEN old.num << 20 AND (old.num << 20) | 1048575;
    END;
    """,
    # 6: snapshots as rows of hashes (the content is in the data folder, snapshots.py), with
    # the part that made the change; messages an undo took back; the redo of a session's undo.
    """
    DROP TABLE snapshots;
    CREATE TABLE snapshots (
        id TEXT PRIMARY KEY,
        sessionid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        messageid TEXT REFERENCES messages(id) ON DELETE CASCADE,
        partid TEXT,
        path TEXT NOT NULL,
        before TEXT,
        after TEXT,
        tool TEXT NOT NULL,
        note TEXT NOT NULL DEFAULT '',
        reverted INTEGER NOT NULL DEFAULT 0,
        created INTEGER NOT NULL
    );
    CREATE INDEX snapshots_by_session ON snapshots(sessionid, id);
    ALTER TABLE messages ADD COLUMN reverted INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN redo TEXT;
    """,
    # 7: the schedule a session was run for (its runs' sessions stay when it goes).
    """
    ALTER TABLE sessions ADD COLUMN schedule TEXT;
    CREATE INDEX schedules_by_project ON schedules(projectid, id);
    """,
    # 8: the session whose run handed this one its work (a sub-agent's, the task tool).
    """
    ALTER TABLE sessions ADD COLUMN parent TEXT;
    CREATE INDEX sessions_by_parent ON sessions(parent);
    """,
    # 9: MCP-only tokens, by the SHA-256 of the token (shown once when it is made).
    """
    CREATE TABLE mcptokens (
        id TEXT PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        created INTEGER NOT NULL
    );
    """,
    # 10: what an "always" approval of a project MCP server covered (its pin's manifest), to say
    # what changed when the pin no longer matches.
    """
    CREATE TABLE server_pins (
        id TEXT PRIMARY KEY,
        projectid TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
        server TEXT NOT NULL,
        digest TEXT NOT NULL,
        manifest TEXT NOT NULL,
        created INTEGER NOT NULL
    );
    CREATE UNIQUE INDEX server_pins_by_digest ON server_pins(projectid, digest);
    CREATE INDEX server_pins_by_server ON server_pins(projectid, server, id);
    """,
    # 11: the journal of an undo, redo or Save as in progress: written before the first file is
    # touched, cleared in the transaction that records the outcome; a start after a kill
    # completes what it names.
    """
    ALTER TABLE sessions ADD COLUMN restoring TEXT;
    """,
    # 12: an attachment's content last in its row: sqlite keeps a zeroblob lazy only as the last
    # value of a record, and the content is written into one in steps (a column after it made
    # sqlite fill 15 MB of zeros in memory, twice).
    """
    CREATE TABLE attachments_moved (
        id TEXT PRIMARY KEY,
        sessionid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        messageid TEXT REFERENCES messages(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        mime TEXT NOT NULL,
        size INTEGER NOT NULL,
        created INTEGER NOT NULL,
        data BLOB NOT NULL
    );
    INSERT INTO attachments_moved (id, sessionid, messageid, name, mime, size, created, data)
        SELECT id, sessionid, messageid, name, mime, size, created, data FROM attachments;
    DROP TABLE attachments;
    ALTER TABLE attachments_moved RENAME TO attachments;
    """,
)


# Why a run that was going on when the process died did not end (set by the next start).
STOPPED_DURING_RUN = "Totem stopped during this run (killed or crashed); the run did not finish"


def now_ms() -> int:
    """Milliseconds since the epoch: the one time format of the API and the database."""
    return time.time_ns() // 1_000_000


def _base36(value: int, width: int) -> str:
    digits = []
    for _ in range(width):
        value, rest = divmod(value, 36)
        digits.append(ID_ALPHABET[rest])
    return "".join(reversed(digits))


class IdMaker:
    """Short ids that sort by creation time, also within one millisecond."""

    def __init__(self):
        self._last = 0
        self._sequence = 0
        self._lock = threading.Lock()

    def new(self) -> str:
        with self._lock:
            ms = now_ms()
            if ms <= self._last:
                self._sequence += 1
                ms = self._last
            else:
                self._last, self._sequence = ms, 0
            sequence = self._sequence
        random_part = "".join(secrets.choice(ID_ALPHABET) for _ in range(4))
        return _base36(ms, 9) + _base36(sequence, 3) + random_part


def connect(path: str) -> sqlite3.Connection:
    """A connection with the pragmas that every connection of Totem uses."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema to the newest version; returns it. Raises RuntimeError for a newer file."""
    if conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0] == 0:
        conn.execute(f"PRAGMA page_size = {PAGE_BYTES}")  # only a new file takes it
    conn.execute("PRAGMA journal_mode = WAL")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise RuntimeError(f"the database is of a newer Totem (schema {version}); update Totem")
    for number in range(version, len(MIGRATIONS)):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(MIGRATIONS[number]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return len(MIGRATIONS)


def _statements(script: str) -> list[str]:
    """The statements of a script, a trigger's body (semicolons inside) kept whole."""
    statements, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                statements.append(pending)
            pending = ""
    if pending.strip(" \n;"):
        raise ValueError(f"an incomplete statement in a migration: {pending.strip()[:60]}")
    return statements


def _interrupted_changes(conn: sqlite3.Connection) -> list[dict]:
    rows = conn.execute(
        "SELECT parts.id, parts.data, projects.path FROM parts JOIN sessions ON sessions.id = parts.sessionid "
        "JOIN projects ON projects.id = sessions.projectid WHERE parts.closed IS NULL AND parts.kind = 'tool'")
    found = []
    for partid, data, root in rows:
        decoded = json.loads(data) if data else {}
        if decoded.get("journal"):
            found.append({"id": partid, "data": decoded, "root": root})
    return found


def _recover_after_crash(conn: sqlite3.Connection) -> None:
    # A run that was streaming when the process died left parts open and its session running.
    stamp = now_ms()
    conn.execute("UPDATE parts SET status = 'error', closed = ?, updated = ? WHERE closed IS NULL",
                 (stamp, stamp))
    conn.execute("UPDATE messages SET finished = ? WHERE finished IS NULL", (stamp,))
    # Its run did not end: the session reads as failed, and its last message says where it
    # stopped and why, as a run that failed says it (agent.loop, mark_run_end).
    conn.execute("UPDATE messages SET data = json_set(data, '$.ended', 'error', '$.error', ?) WHERE id IN ("
                 "SELECT (SELECT id FROM messages WHERE sessionid = sessions.id ORDER BY id DESC LIMIT 1) "
                 "FROM sessions WHERE status = 'running')", (STOPPED_DURING_RUN,))
    conn.execute("UPDATE sessions SET status = 'error', error = ? WHERE status = 'running'", (STOPPED_DURING_RUN,))
    # Prompts that waited for a run are said, not run: they stay in the conversation.
    conn.execute("UPDATE messages SET data = json_remove(data, '$.queued') "
                 "WHERE role = 'user' AND json_extract(data, '$.queued') IS NOT NULL")


def _rows(cursor) -> list[dict]:
    return [dict(row) for row in cursor.fetchall()]


def _row(cursor) -> dict | None:
    row = cursor.fetchone()
    return dict(row) if row is not None else None


class Store:
    """The database of one Totem process."""

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, DATABASE_FILE)
        self.ids = IdMaker()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._local = threading.local()
        self._readers = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="totem-read")
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_lock = threading.Lock()
        # Tool parts a crash left open with a journal of file changes: {id, data, root}, for the
        # restart to record from the disk whether the change landed (agent/recovery.py).
        self.interrupted: list[dict] = []
        self._full_since: float | None = None  # since when writes fail for want of space

    # -- life cycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Create or migrate the database and start the writer. Raises RuntimeError, sqlite3.Error."""
        await asyncio.to_thread(self._open_sync)

    def _open_sync(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        conn = connect(self.path)
        try:
            migrate(conn)
            conn.execute("BEGIN IMMEDIATE")
            self.interrupted = _interrupted_changes(conn)
            _recover_after_crash(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        self._writer = threading.Thread(target=self._write_loop, args=(conn,), name="totem-write", daemon=True)
        self._writer.start()

    async def close(self) -> None:
        if self._writer is not None:
            self._jobs.put(None)
            await asyncio.to_thread(self._writer.join)
            self._writer = None
        await asyncio.to_thread(self._readers.shutdown, True)
        with self._reader_lock:
            for conn in self._reader_conns:
                conn.close()
            self._reader_conns.clear()

    # -- the two doors: read and write --------------------------------------------------------

    async def read(self, fn, *args):
        """Run fn(conn, *args) on a reader thread and return its result."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._read_sync, fn, args)

    def _read_sync(self, fn, args):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
            with self._reader_lock:
                self._reader_conns.append(conn)
        return fn(conn, *args)

    async def write(self, fn, *args):
        """Run fn(conn, *args) in the writer's transaction and return its result.

        Raises what fn raised (its changes are rolled back) or sqlite3.Error from the commit.
        """
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put((fn, args, loop, future))
        try:
            result = await future
        except sqlite3.Error as exc:
            if out_of_space(exc):
                raise self._full() from None
            raise
        if self._full_since is not None:
            log.warning("the database takes writes again (%s)", os.path.dirname(self.path))
            self._full_since = None
        return result

    def _full(self) -> StorageFull:
        """The error of a write refused for want of space, logged once until writes work again."""
        full = StorageFull(os.path.dirname(self.path))
        if self._full_since is None:
            self._full_since = time.monotonic()
            log.warning("the database cannot grow: %s; writes fail until there is space", full.errors[0][1])
        return full

    def _write_loop(self, conn: sqlite3.Connection) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                break
            batch = [job]
            stop = False
            while len(batch) < MAX_WRITE_BATCH:
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            self._run_batch(conn, batch)
            if stop:
                break
        conn.close()

    def _run_batch(self, conn: sqlite3.Connection, batch) -> None:
        results = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, args, _loop, _future in batch:
                conn.execute("SAVEPOINT job")
                try:
                    results.append((True, fn(conn, *args)))
                    conn.execute("RELEASE job")
                except Exception as exc:  # handed to the caller; the batch goes on
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    results.append((False, exc))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            results = [(False, exc)] * len(batch)
        for (ok, value), (_fn, _args, loop, future) in zip(results, batch, strict=True):
            loop.call_soon_threadsafe(_settle, future, ok, value)

    # -- projects -----------------------------------------------------------------------------

    async def list_projects(self) -> list[ProjectRow]:
        return await self.read(lambda c: _rows(c.execute(
            "SELECT * FROM projects ORDER BY opened DESC, id")))

    async def get_project(self, projectid: str) -> ProjectRow | None:
        return await self.read(lambda c: _row(c.execute("SELECT * FROM projects WHERE id = ?", (projectid,))))

    async def open_project(self, path: str, name: str) -> tuple[ProjectRow, bool]:
        """The project of a folder, created if new; returns (project, created)."""
        newid = self.ids.new()

        def run(c):
            stamp = now_ms()
            existing = _row(c.execute("SELECT * FROM projects WHERE path = ?", (path,)))
            if existing is not None:
                c.execute("UPDATE projects SET opened = ? WHERE id = ?", (stamp, existing["id"]))
                existing["opened"] = stamp
                return existing, False
            c.execute("INSERT INTO projects (id, path, name, created, opened) VALUES (?, ?, ?, ?, ?)",
                      (newid, path, name, stamp, stamp))
            return _row(c.execute("SELECT * FROM projects WHERE id = ?", (newid,))), True
        return await self.write(run)

    async def remove_project(self, projectid: str) -> bool:
        return await self.write(lambda c: c.execute(
            "DELETE FROM projects WHERE id = ?", (projectid,)).rowcount > 0)

    # -- sessions -----------------------------------------------------------------------------

    async def child_sessions(self, sessionid: str) -> list[str]:
        """The ids of the sessions that a session's runs handed work to (sub-agents)."""
        return await self.read(lambda c: [row[0] for row in c.execute(
            "SELECT id FROM sessions WHERE parent = ? ORDER BY created", (sessionid,))])

    async def list_sessions(self, projectid: str) -> list[SessionRow]:
        """Every session of a project, the most recently changed first."""
        return await self.read(lambda c: _rows(c.execute(
            "SELECT * FROM sessions WHERE projectid = ? ORDER BY updated DESC, id DESC", (projectid,))))

    async def session_page(self, projectid: str, limit: int,
                           before: str | None = None) -> tuple[list[SessionRow], bool] | None:
        """`(sessions, more)`: at most `limit` sessions of a project, the most recently changed
        first, after the session `before` in that order. None when there is no such project, or
        `before` names no session of it. Read from the index sessions_by_project alone."""
        def run(c):
            if c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None:
                return None
            if before is None:
                rows = _rows(c.execute(
                    "SELECT * FROM sessions WHERE projectid = ? ORDER BY updated DESC, id DESC LIMIT ?",
                    (projectid, limit + 1)))
            else:
                anchor = c.execute("SELECT updated, id FROM sessions WHERE id = ? AND projectid = ?",
                                   (before, projectid)).fetchone()
                if anchor is None:
                    return None
                rows = _rows(c.execute(
                    "SELECT * FROM sessions WHERE projectid = ? AND (updated, id) < (?, ?) "
                    "ORDER BY updated DESC, id DESC LIMIT ?", (projectid, anchor[0], anchor[1], limit + 1)))
            return rows[:limit], len(rows) > limit
        return await self.read(run)

    async def get_session(self, sessionid: str) -> SessionRow | None:
        return await self.read(lambda c: _row(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,))))

    async def create_session(self, projectid: str, name: str, parent: str | None = None,
                             worktree: str | None = None, mode: str = "build") -> SessionRow | None:
        """A new idle session (a sub-agent's with its `parent`, working in the parent's
        `worktree`), or None when the project is gone."""
        newid = self.ids.new()

        def run(c):
            if c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None:
                return None
            stamp = now_ms()
            c.execute("INSERT INTO sessions (id, projectid, name, created, updated, parent, worktree, mode) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (newid, projectid, name, stamp, stamp, parent, worktree, mode))
            return _row(c.execute("SELECT * FROM sessions WHERE id = ?", (newid,)))
        return await self.write(run)

    async def set_session_worktree(self, sessionid: str, path: str | None) -> SessionRow | None:
        def run(c):
            c.execute("UPDATE sessions SET worktree = ?, updated = ? WHERE id = ?", (path, now_ms(), sessionid))
            return _row(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)))
        return await self.write(run)

    async def rename_session(self, sessionid: str, name: str) -> SessionRow | None:
        def run(c):
            c.execute("UPDATE sessions SET name = ?, updated = ? WHERE id = ?", (name, now_ms(), sessionid))
            return _row(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)))
        return await self.write(run)

    async def set_session_status(self, sessionid: str, status: str, error: str | None = None) -> SessionRow | None:
        """Set the status; `error` says why a run failed (None clears it)."""
        def run(c):
            c.execute("UPDATE sessions SET status = ?, error = ?, updated = ? WHERE id = ?",
                      (status, error, now_ms(), sessionid))
            return _row(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)))
        return await self.write(run)

    async def remove_session(self, sessionid: str) -> bool:
        return await self.write(lambda c: c.execute(
            "DELETE FROM sessions WHERE id = ?", (sessionid,)).rowcount > 0)

    # -- messages and parts -------------------------------------------------------------------

    async def list_messages(self, sessionid: str, before: str | None, limit: int,
                            max_bytes: int | None = None) -> tuple[list[MessageRow], bool]:
        """`(messages, more)`: the newest `limit` messages older than `before`, oldest first, with
        their parts. With `max_bytes`, also no more messages than fit in about that many bytes of
        stored text and data (the newest message always comes, however big); the size of each
        message is summed in SQL before any part is read, so a page never loads what it leaves out.
        """
        def run(c):
            if before:
                rows = _rows(c.execute(
                    "SELECT * FROM messages WHERE sessionid = ? AND id < ? ORDER BY id DESC LIMIT ?",
                    (sessionid, before, limit + 1)))
            else:
                rows = _rows(c.execute(
                    "SELECT * FROM messages WHERE sessionid = ? ORDER BY id DESC LIMIT ?",
                    (sessionid, limit + 1)))
            more = len(rows) > limit
            rows = rows[:limit]
            if max_bytes is not None and rows:
                sizes = _part_sizes(c, [r["id"] for r in rows])
                total = 0
                for count, row in enumerate(rows):
                    total += _row_size(row) + sizes.get(row["id"], 0)
                    if count and total > max_bytes:
                        rows, more = rows[:count], True
                        break
            rows.reverse()
            return _with_parts(c, rows), more
        return await self.read(run)

    async def add_message(self, sessionid: str, role: str, model: str | None = None, data: dict | None = None,
                          newid: str | None = None) -> MessageRow:
        newid = newid or self.ids.new()

        def run(c):
            c.execute("INSERT INTO messages (id, sessionid, role, model, data, created) VALUES (?, ?, ?, ?, ?, ?)",
                      (newid, sessionid, role, model, json.dumps(data or {}), now_ms()))
            return _decode_message(_row(c.execute("SELECT * FROM messages WHERE id = ?", (newid,))))
        return await self.write(run)

    async def add_part(self, messageid: str, sessionid: str, kind: str, status: str,
                       text: str = "", data: dict | None = None, closed: bool = False) -> PartRow:
        newid = self.ids.new()

        def run(c):
            stamp = now_ms()
            c.execute("INSERT INTO parts (id, messageid, sessionid, kind, status, text, data, created, updated, closed)"
                      " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      (newid, messageid, sessionid, kind, status, text, json.dumps(data or {}), stamp, stamp,
                       stamp if closed else None))
            return _decode_part(_row(c.execute("SELECT * FROM parts WHERE id = ?", (newid,))))
        return await self.write(run)

    async def update_part(self, partid: str, *, text: str | None = None, status: str | None = None,
                          data: dict | None = None, close: bool = False,
                          append: str | None = None) -> PartRow | None:
        """Change a part; `text` replaces its whole text (pieces included), `append` adds a piece,
        `close` stamps it complete. Returns the part with its text, None when it is gone."""
        def run(c):
            stamp = now_ms()
            if text is not None:
                _drop_pieces(c, partid)
            if append:
                _add_piece(c, partid, append)
            sets, values = ["updated = ?"], [stamp]
            for column, value in (("text", text), ("status", status)):
                if value is not None:
                    sets.append(f"{column} = ?")
                    values.append(value)
            if data is not None:
                sets.append("data = ?")
                values.append(json.dumps(data))
            if close:
                sets.append("closed = ?")
                values.append(stamp)
            c.execute(f"UPDATE parts SET {', '.join(sets)} WHERE id = ?", (*values, partid))
            row = _row(c.execute("SELECT * FROM parts WHERE id = ?", (partid,)))
            if row:
                _join_pieces(c, [row])
            return _decode_part(row) if row else None
        return await self.write(run)

    async def append_part_texts(self, pieces: list[tuple[str, str]]) -> None:
        """Store text streamed into open parts since their last flush, in one transaction: each
        as a new piece of its part (a closed or removed part takes none)."""
        def run(c):
            for partid, text in pieces:
                if text and c.execute("SELECT 1 FROM parts WHERE id = ? AND closed IS NULL",
                                      (partid,)).fetchone():
                    _add_piece(c, partid, text)
        await self.write(run)

    async def finish_message(self, messageid: str, usage: dict | None, data: dict) -> None:
        await self.write(lambda c: c.execute(
            "UPDATE messages SET usage = ?, data = ?, finished = ? WHERE id = ?",
            (json.dumps(usage) if usage is not None else None, json.dumps(data), now_ms(), messageid)))

    async def mark_run_end(self, sessionid: str, promptid: str, mark: dict) -> MessageRow | None:
        """Add `mark` to the data of the last message of the run of the prompt `promptid` (its
        newest answer, else the prompt itself): where an aborted or failed run stopped, kept with
        the conversation. Returns that message (without its parts), or None."""
        def run(c):
            row = c.execute("SELECT id FROM messages WHERE sessionid = ? AND role = 'assistant' AND "
                            "json_extract(data, '$.prompt') = ? ORDER BY id DESC LIMIT 1",
                            (sessionid, promptid)).fetchone()
            target = row[0] if row else promptid
            found = _row(c.execute("SELECT * FROM messages WHERE id = ? AND sessionid = ?", (target, sessionid)))
            if found is None:
                return None
            message = _decode_message(found)
            message["data"] = message["data"] | mark
            c.execute("UPDATE messages SET data = ? WHERE id = ?", (json.dumps(message["data"]), target))
            return message
        return await self.write(run)

    async def set_message_queued(self, messageid: str, queued: bool) -> None:
        """Mark a user message as waiting for the current run to end, or not any more."""
        def run(c):
            row = c.execute("SELECT data FROM messages WHERE id = ?", (messageid,)).fetchone()
            if row is None:
                return
            data = json.loads(row[0]) if row[0] else {}
            data.pop("queued", None)
            if queued:
                data["queued"] = True
            c.execute("UPDATE messages SET data = ? WHERE id = ?", (json.dumps(data), messageid))
        await self.write(run)

    async def remove_message(self, messageid: str) -> bool:
        """Remove a message with its parts, attachments and file changes."""
        return await self.write(lambda c: c.execute("DELETE FROM messages WHERE id = ?", (messageid,)).rowcount > 0)

    async def session_tokens(self, sessionid: str) -> dict:
        """`{input, output, estimated, cost}`: the tokens of a session's answers, summed
        (estimated when any answer's count was), and the cost in USD of those whose price was
        known; without `cost` when none was."""
        def run(c):
            row = c.execute(
                "SELECT ifnull(sum(json_extract(data, '$.tokens.input')), 0), "
                "ifnull(sum(json_extract(data, '$.tokens.output')), 0), "
                "ifnull(max(json_extract(data, '$.tokens.estimated')), 0), "
                "total(json_extract(data, '$.tokens.cost')), count(json_extract(data, '$.tokens.cost')) "
                "FROM messages WHERE sessionid = ? AND role = 'assistant'", (sessionid,)).fetchone()
            tokens = {"input": row[0], "output": row[1], "estimated": bool(row[2])}
            # Rounded as each answer's cost is (agent/answers.py COST_DIGITS): the rest is float noise.
            return tokens | ({"cost": round(row[3], 8)} if row[4] else {})
        return await self.read(run)

    async def count_messages(self, sessionid: str) -> int:
        return await self.read(lambda c: c.execute(
            "SELECT count(*) FROM messages WHERE sessionid = ?", (sessionid,)).fetchone()[0])

    async def set_session_options(self, sessionid: str, model: str | None, mode: str, autoaccept: bool) -> None:
        await self.write(lambda c: c.execute(
            "UPDATE sessions SET model = ?, mode = ?, autoaccept = ?, updated = ? WHERE id = ?",
            (model, mode, int(autoaccept), now_ms(), sessionid)))

    async def session_history(self, sessionid: str) -> list[MessageRow]:
        """Every message of a session with its parts, oldest first (for the model's context);
        none that an undo took back, none that waits for the current run to end."""
        messages, _last = await self.history_after(sessionid, None)
        return messages

    async def history_after(self, sessionid: str, after: str | None) -> tuple[list[MessageRow], str | None]:
        """`(messages, last)`: what session_history gives of the messages after the id `after`
        (all with None), and the id of the newest message read (left out or not), for the next
        call: a run reads only what its last step added."""
        def run(c):
            rows = _rows(c.execute("SELECT * FROM messages WHERE sessionid = ? AND id > ? ORDER BY id",
                                   (sessionid, after or "")))
            last = rows[-1]["id"] if rows else after
            rows = [row for row in rows if not row.get("reverted")]
            messages = [message for message in _with_parts(c, rows) if not message["data"].get("queued")]
            return messages, last
        return await self.read(run)

    # -- attachments --------------------------------------------------------------------------

    async def add_attachments(self, sessionid: str, messageid: str, files: list[tuple[str, str, bytes]],
                              ) -> list[AttachmentInfo]:
        """Store files of a prompt; returns [{id, name, mime, size}]."""
        ids = [self.ids.new() for _ in files]

        def run(c):
            stamp = now_ms()
            for newid, (name, mime, data) in zip(ids, files, strict=True):
                # Written in steps into a blob of its size: binding a 15 MB file would copy it whole.
                rowid = c.execute("INSERT INTO attachments (id, sessionid, messageid, name, mime, size, data, created)"
                                  " VALUES (?, ?, ?, ?, ?, ?, zeroblob(?), ?)",
                                  (newid, sessionid, messageid, name, mime, len(data), len(data), stamp)).lastrowid
                if data:
                    view = memoryview(data)
                    with c.blobopen("attachments", "data", rowid) as blob:
                        for start in range(0, len(view), BLOB_STEP_BYTES):
                            blob.write(view[start:start + BLOB_STEP_BYTES])
            return [{"id": newid, "name": name, "mime": mime, "size": len(data)}
                    for newid, (name, mime, data) in zip(ids, files, strict=True)]
        return await self.write(run)

    async def attachment_info(self, attachmentid: str) -> dict | None:
        """`{id, name, mime, size}` of an attachment, without its content."""
        return await self.read(lambda c: _row(c.execute(
            "SELECT id, name, mime, size FROM attachments WHERE id = ?", (attachmentid,))))

    async def get_attachment(self, attachmentid: str) -> AttachmentRow | None:
        return await self.read(lambda c: _row(c.execute(
            "SELECT * FROM attachments WHERE id = ?", (attachmentid,))))

    # -- permission rules ---------------------------------------------------------------------

    async def list_rules(self, projectid: str | None) -> list[RuleRow]:
        """The saved rules of a project (projectid) or the global saved rules (None), oldest first."""
        if projectid is None:
            return await self.read(lambda c: _rows(c.execute(
                "SELECT * FROM rules WHERE projectid IS NULL ORDER BY id")))
        return await self.read(lambda c: _rows(c.execute(
            "SELECT * FROM rules WHERE projectid = ? ORDER BY id", (projectid,))))

    async def add_rule(self, projectid: str | None, tool: str, pattern: str, action: str) -> RuleRow | None:
        """Save a rule (the same tool and pattern replaces the old action); None when the project is gone."""
        newid = self.ids.new()

        def run(c):
            if (projectid is not None
                    and c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None):
                return None
            c.execute("DELETE FROM rules WHERE ifnull(projectid, '') = ifnull(?, '') AND tool = ? AND pattern = ?",
                      (projectid, tool, pattern))
            c.execute("INSERT INTO rules (id, projectid, tool, pattern, action, created) VALUES (?, ?, ?, ?, ?, ?)",
                      (newid, projectid, tool, pattern, action, now_ms()))
            return _row(c.execute("SELECT * FROM rules WHERE id = ?", (newid,)))
        return await self.write(run)

    async def get_rule(self, ruleid: str) -> RuleRow | None:
        return await self.read(lambda c: _row(c.execute("SELECT * FROM rules WHERE id = ?", (ruleid,))))

    async def remove_rule(self, ruleid: str) -> bool:
        return await self.write(lambda c: c.execute("DELETE FROM rules WHERE id = ?", (ruleid,)).rowcount > 0)

    # -- approvals of project MCP servers -------------------------------------------------------

    async def add_server_pin(self, projectid: str, server: str, digest: str, manifest: dict) -> bool:
        """Keep what an "always" approval of a server covered (the newest MAX_SERVER_PINS of
        each server of a project); False when the project is gone."""
        newid = self.ids.new()

        def run(c):
            if c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None:
                return False
            c.execute("DELETE FROM server_pins WHERE projectid = ? AND digest = ?", (projectid, digest))
            c.execute("INSERT INTO server_pins (id, projectid, server, digest, manifest, created) "
                      "VALUES (?, ?, ?, ?, ?, ?)", (newid, projectid, server, digest, json.dumps(manifest), now_ms()))
            c.execute("DELETE FROM server_pins WHERE projectid = ? AND server = ? AND id NOT IN "
                      "(SELECT id FROM server_pins WHERE projectid = ? AND server = ? ORDER BY id DESC LIMIT ?)",
                      (projectid, server, projectid, server, MAX_SERVER_PINS))
            return True
        return await self.write(run)

    async def server_pins(self, projectid: str) -> list[dict]:
        """`[{server, digest, manifest, created}]` of a project's approved servers, newest first."""
        def run(c):
            return [{"server": row["server"], "digest": row["digest"], "manifest": json.loads(row["manifest"]),
                     "created": row["created"]}
                    for row in c.execute("SELECT * FROM server_pins WHERE projectid = ? ORDER BY id DESC",
                                         (projectid,))]
        return await self.read(run)

    # -- todos --------------------------------------------------------------------------------

    async def get_todos(self, sessionid: str) -> list:
        def run(c):
            row = c.execute("SELECT items FROM todos WHERE sessionid = ?", (sessionid,)).fetchone()
            return json.loads(row[0]) if row else []
        return await self.read(run)

    async def set_todos(self, sessionid: str, items: list) -> None:
        await self.write(lambda c: c.execute(
            "INSERT INTO todos (sessionid, items, updated) VALUES (?, ?, ?) "
            "ON CONFLICT(sessionid) DO UPDATE SET items = excluded.items, updated = excluded.updated",
            (sessionid, json.dumps(items), now_ms())))

    # -- providers ----------------------------------------------------------------------------

    async def list_providers(self) -> list[ProviderRow]:
        return await self.read(lambda c: [_decode_provider(r) for r in _rows(c.execute(
            "SELECT * FROM providers ORDER BY created, id"))])

    async def get_provider(self, providerid: str) -> ProviderRow | None:
        def run(c):
            row = _row(c.execute("SELECT * FROM providers WHERE id = ?", (providerid,)))
            return _decode_provider(row) if row else None
        return await self.read(run)

    async def save_provider(self, providerid: str | None, name: str, kind: str, url: str,
                            secret: bytes | None, keep_secret: bool, data: dict) -> ProviderRow | None:
        """Create (providerid None) or change a provider; None when the id is unknown.

        With keep_secret the stored (encrypted) key stays as it is; otherwise it becomes `secret`.
        """
        newid = providerid or self.ids.new()

        def run(c):
            stamp = now_ms()
            if providerid is None:
                c.execute("INSERT INTO providers (id, name, kind, url, secret, data, created, updated)"
                          " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          (newid, name, kind, url, secret, json.dumps(data), stamp, stamp))
            elif keep_secret:
                if c.execute("UPDATE providers SET name = ?, kind = ?, url = ?, data = ?, updated = ? WHERE id = ?",
                             (name, kind, url, json.dumps(data), stamp, newid)).rowcount == 0:
                    return None
            elif c.execute("UPDATE providers SET name = ?, kind = ?, url = ?, secret = ?, data = ?, updated = ?"
                           " WHERE id = ?", (name, kind, url, secret, json.dumps(data), stamp, newid)).rowcount == 0:
                return None
            return _decode_provider(_row(c.execute("SELECT * FROM providers WHERE id = ?", (newid,))))
        return await self.write(run)

    async def remove_provider(self, providerid: str) -> bool:
        return await self.write(lambda c: c.execute(
            "DELETE FROM providers WHERE id = ?", (providerid,)).rowcount > 0)

    # -- logins -------------------------------------------------------------------------------

    async def add_login(self, digest: str) -> None:
        await self.write(lambda c: c.execute(
            "INSERT OR REPLACE INTO logins (hash, created) VALUES (?, ?)", (digest, now_ms())))

    async def has_login(self, digest: str) -> bool:
        return await self.read(lambda c: c.execute(
            "SELECT 1 FROM logins WHERE hash = ?", (digest,)).fetchone() is not None)

    async def remove_login(self, digest: str) -> None:
        await self.write(lambda c: c.execute("DELETE FROM logins WHERE hash = ?", (digest,)))

    # -- MCP-only tokens ---------------------------------------------------------------------

    async def add_mcp_token(self, digest: str, name: str) -> dict:
        row = {"id": self.ids.new(), "name": name, "created": now_ms()}
        await self.write(lambda c: c.execute(
            "INSERT INTO mcptokens (id, hash, name, created) VALUES (?, ?, ?, ?)",
            (row["id"], digest, name, row["created"])))
        return row

    async def has_mcp_token(self, digest: str) -> bool:
        return await self.read(lambda c: c.execute(
            "SELECT 1 FROM mcptokens WHERE hash = ?", (digest,)).fetchone() is not None)

    async def list_mcp_tokens(self) -> list[dict]:
        return await self.read(lambda c: [dict(row) for row in c.execute(
            "SELECT id, name, created FROM mcptokens ORDER BY id")])

    async def remove_mcp_token(self, tokenid: str) -> bool:
        return await self.write(lambda c: c.execute(
            "DELETE FROM mcptokens WHERE id = ?", (tokenid,)).rowcount > 0)

    # -- counts, for tests of cascading removal and for the account ------------------------

    # -- snapshots ----------------------------------------------------------------------------

    async def add_snapshots(self, rows: list[dict]) -> None:
        """Record file changes: {sessionid, messageid, partid, path, before, after, tool, note}."""
        ids = [self.ids.new() for _ in rows]

        def run(c):
            stamp = now_ms()
            c.executemany(
                "INSERT INTO snapshots (id, sessionid, messageid, partid, path, before, after, tool, note, created)"
                " SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ?)",
                [(newid, row["sessionid"], row["messageid"], row["partid"], row["path"], row["before"],
                  row["after"], row["tool"], row["note"], stamp, row["sessionid"])
                 for newid, row in zip(ids, rows, strict=True)])
        await self.write(run)

    async def session_snapshots(self, sessionid: str) -> list[SnapshotRow]:
        """Every file change of a session, oldest first."""
        def run(c):
            rows = _rows(c.execute("SELECT * FROM snapshots WHERE sessionid = ? ORDER BY id", (sessionid,)))
            for row in rows:
                row["reverted"] = bool(row["reverted"])
            return rows
        return await self.read(run)

    async def snapshot_digests(self, projectid: str) -> set[str]:
        """The contents that the rows of a project's sessions name."""
        def run(c):
            found = set()
            for before, after in c.execute(
                    "SELECT before, after FROM snapshots WHERE sessionid IN "
                    "(SELECT id FROM sessions WHERE projectid = ?)", (projectid,)):
                found.update(value for value in (before, after) if value)
            return found
        return await self.read(run)

    async def set_reverted(self, sessionid: str, messageids: list[str], reverted: bool,
                           redo: str | None, recovered: str | None = None) -> SessionRow | None:
        """Mark (or unmark) messages and their file changes as taken back, set the session's
        redo (JSON, None: none) and clear its journal (set_restoring), in one transaction. The
        messages' `recovered` note (what a start completed after a kill) is set, or cleared
        when None."""
        def run(c):
            flag = int(reverted)
            for start in range(0, len(messageids), MAX_SQL_VARIABLES):
                chunk = messageids[start:start + MAX_SQL_VARIABLES]
                marks = ",".join("?" * len(chunk))
                c.execute(f"UPDATE snapshots SET reverted = ? WHERE sessionid = ? AND messageid IN ({marks})",
                          (flag, sessionid, *chunk))
                c.execute(f"UPDATE messages SET reverted = ? WHERE sessionid = ? AND id IN ({marks})",
                          (flag, sessionid, *chunk))
                if recovered is None:
                    c.execute(f"UPDATE messages SET data = json_remove(data, '$.recovered') WHERE sessionid = ? "
                              f"AND id IN ({marks}) AND json_extract(data, '$.recovered') IS NOT NULL",
                              (sessionid, *chunk))
                else:
                    c.execute(f"UPDATE messages SET data = json_set(data, '$.recovered', ?) WHERE sessionid = ? "
                              f"AND id IN ({marks})", (recovered, sessionid, *chunk))
            c.execute("UPDATE sessions SET redo = ?, restoring = NULL, updated = ? WHERE id = ?",
                      (redo, now_ms(), sessionid))
            return _row(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)))
        return await self.write(run)

    async def set_restoring(self, sessionid: str, journal: str | None) -> bool:
        """Store (None: clear) the journal of a file operation of the session before it touches
        a file; False when the session is gone."""
        return await self.write(lambda c: c.execute("UPDATE sessions SET restoring = ? WHERE id = ?",
                                                    (journal, sessionid)).rowcount == 1)

    async def pending_restores(self) -> list[tuple[str, dict]]:
        """(session id, journal) of each session whose file operation a kill interrupted (its
        journal is still stored)."""
        def run(c):
            rows = c.execute("SELECT id, restoring FROM sessions WHERE restoring IS NOT NULL ORDER BY id")
            return [(sessionid, json.loads(journal)) for sessionid, journal in rows]
        return await self.read(run)

    async def message_ids(self, sessionid: str, reverted: bool | None = None) -> list[str]:
        """The ids of a session's messages, oldest first (only those taken back, or not)."""
        if reverted is None:
            return await self.read(lambda c: [row[0] for row in c.execute(
                "SELECT id FROM messages WHERE sessionid = ? ORDER BY id", (sessionid,))])
        return await self.read(lambda c: [row[0] for row in c.execute(
            "SELECT id FROM messages WHERE sessionid = ? AND reverted = ? ORDER BY id", (sessionid, int(reverted)))])

    async def drop_reverted(self, sessionid: str) -> int:
        """Remove the messages an undo took back (their parts, attachments and file changes go
        with them) and forget the redo; returns how many messages went."""
        def run(c):
            gone = c.execute("DELETE FROM messages WHERE sessionid = ? AND reverted = 1", (sessionid,)).rowcount
            c.execute("UPDATE sessions SET redo = NULL WHERE id = ? AND redo IS NOT NULL", (sessionid,))
            return gone
        return await self.write(run)

    async def get_parts(self, partids: list[str]) -> dict[str, PartRow]:
        """Parts by id (those that exist), with their text."""
        def run(c):
            found: dict[str, PartRow] = {}
            for start in range(0, len(partids), MAX_SQL_VARIABLES):
                chunk = partids[start:start + MAX_SQL_VARIABLES]
                rows = _rows(c.execute(f"SELECT * FROM parts WHERE id IN ({','.join('?' * len(chunk))})", chunk))
                _join_pieces(c, rows)
                found.update((row["id"], _decode_part(row)) for row in rows)
            return found
        return await self.read(run)

    async def fork_session(self, sessionid: str, upto: str | None, name: str) -> SessionRow | None:
        """A new session with the messages of another up to `upto` (all without), their parts
        and attachments copied under new ids; messages an undo took back and changes that wait
        or run are not carried. None when the session (or `upto` in it) does not exist."""
        newid = self.ids.new()
        new = self.ids.new

        def run(c):
            source = _row(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)))
            if source is None:
                return None
            if upto is not None and c.execute("SELECT 1 FROM messages WHERE id = ? AND sessionid = ?",
                                              (upto, sessionid)).fetchone() is None:
                return None
            stamp = now_ms()
            c.execute("INSERT INTO sessions (id, projectid, name, mode, autoaccept, model, created, updated)"
                      " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                      (newid, source["projectid"], name, source["mode"], source["autoaccept"], source["model"],
                       stamp, stamp))
            messages = _rows(c.execute(
                "SELECT * FROM messages WHERE sessionid = ? AND reverted = 0 AND id <= ? ORDER BY id",
                (sessionid, upto or "\uffff")))
            for message in messages:
                copy = new()
                renamed = {attachment["id"]: new() for attachment in _rows(c.execute(
                    "SELECT id FROM attachments WHERE messageid = ?", (message["id"],)))}
                c.execute("INSERT INTO messages (id, sessionid, role, model, usage, data, created, finished)"
                          " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          (copy, newid, message["role"], message["model"], message["usage"],
                           _renamed_attachments(message["data"], renamed), message["created"],
                           message["finished"] or stamp))
                parts = _rows(c.execute("SELECT * FROM parts WHERE messageid = ? ORDER BY id", (message["id"],)))
                _join_pieces(c, parts)
                for part in parts:
                    status = part["status"] if part["closed"] is not None else "error"
                    c.execute("INSERT INTO parts (id, messageid, sessionid, kind, status, text, data, created,"
                              " updated, closed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                              (new(), copy, newid, part["kind"], status, part["text"], part["data"],
                               part["created"], stamp, part["closed"] or stamp))
                for attachment in _rows(c.execute("SELECT * FROM attachments WHERE messageid = ? ORDER BY id",
                                                  (message["id"],))):
                    c.execute("INSERT INTO attachments (id, sessionid, messageid, name, mime, size, data, created)"
                              " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                              (renamed[attachment["id"]], newid, copy, attachment["name"], attachment["mime"],
                               attachment["size"], attachment["data"], stamp))
            todos = c.execute("SELECT items FROM todos WHERE sessionid = ?", (sessionid,)).fetchone()
            if todos is not None:
                c.execute("INSERT INTO todos (sessionid, items, updated) VALUES (?, ?, ?)", (newid, todos[0], stamp))
            return _row(c.execute("SELECT * FROM sessions WHERE id = ?", (newid,)))
        return await self.write(run)

    # -- settings -----------------------------------------------------------------------------

    async def settings_layers(self, projectid: str | None, sessionid: str | None) -> dict[str, dict]:
        """`{all, project, session}`: the values set at each layer (decoded JSON)."""
        def run(c):
            layers: dict[str, dict] = {"all": {}, "project": {}, "session": {}}
            for key, value in c.execute(
                    "SELECT key, value FROM settings WHERE projectid IS NULL AND sessionid IS NULL"):
                layers["all"][key] = json.loads(value)
            if projectid:
                for key, value in c.execute("SELECT key, value FROM settings WHERE projectid = ? AND sessionid IS NULL",
                                            (projectid,)):
                    layers["project"][key] = json.loads(value)
            if sessionid:
                for key, value in c.execute("SELECT key, value FROM settings WHERE sessionid = ?", (sessionid,)):
                    layers["session"][key] = json.loads(value)
            return layers
        return await self.read(run)

    async def set_setting(self, projectid: str | None, sessionid: str | None, key: str, value: str | None) -> None:
        """Set (JSON text) or clear (None) one value at one layer."""
        def run(c):
            c.execute("DELETE FROM settings WHERE ifnull(projectid, '') = ifnull(?, '') "
                      "AND ifnull(sessionid, '') = ifnull(?, '') AND key = ?", (projectid, sessionid, key))
            if value is not None:
                c.execute("INSERT INTO settings (projectid, sessionid, key, value) VALUES (?, ?, ?, ?)",
                          (projectid, sessionid, key, value))
        await self.write(run)

    # -- schedules ----------------------------------------------------------------------------

    async def list_schedules(self, projectid: str | None = None) -> list[ScheduleRow]:
        """The schedules of a project (of every project without one), oldest first."""
        def run(c):
            if projectid is None:
                rows = _rows(c.execute("SELECT * FROM schedules ORDER BY id"))
            else:
                rows = _rows(c.execute("SELECT * FROM schedules WHERE projectid = ? ORDER BY id", (projectid,)))
            return [_decode_schedule(row) for row in rows]
        return await self.read(run)

    async def get_schedule(self, scheduleid: str) -> ScheduleRow | None:
        def run(c):
            row = _row(c.execute("SELECT * FROM schedules WHERE id = ?", (scheduleid,)))
            return _decode_schedule(row) if row else None
        return await self.read(run)

    async def save_schedule(self, scheduleid: str | None, projectid: str, data: dict) -> ScheduleRow | None:
        """Create (scheduleid None) or replace a schedule's data; None when the project or the
        schedule is gone."""
        newid = scheduleid or self.ids.new()

        def run(c):
            stamp = now_ms()
            if c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None:
                return None
            if scheduleid is None:
                c.execute("INSERT INTO schedules (id, projectid, data, created, updated) VALUES (?, ?, ?, ?, ?)",
                          (newid, projectid, json.dumps(data), stamp, stamp))
            elif c.execute("UPDATE schedules SET data = ?, updated = ? WHERE id = ? AND projectid = ?",
                           (json.dumps(data), stamp, newid, projectid)).rowcount == 0:
                return None
            return _decode_schedule(_row(c.execute("SELECT * FROM schedules WHERE id = ?", (newid,))))
        return await self.write(run)

    async def remove_schedule(self, scheduleid: str) -> bool:
        return await self.write(lambda c: c.execute(
            "DELETE FROM schedules WHERE id = ?", (scheduleid,)).rowcount > 0)

    async def create_scheduled_session(self, projectid: str, name: str, scheduleid: str) -> SessionRow | None:
        """A new idle session marked as a run of a schedule, or None when the project is gone."""
        newid = self.ids.new()

        def run(c):
            if c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None:
                return None
            stamp = now_ms()
            c.execute("INSERT INTO sessions (id, projectid, name, schedule, created, updated)"
                      " VALUES (?, ?, ?, ?, ?, ?)", (newid, projectid, name, scheduleid, stamp, stamp))
            return _row(c.execute("SELECT * FROM sessions WHERE id = ?", (newid,)))
        return await self.write(run)

    async def count_rows(self, table: str, column: str, value: str) -> int:
        if table not in {"sessions", "messages", "parts", "rules", "settings", "schedules",
                         "attachments", "snapshots", "todos"}:
            raise ValueError(f"unknown table {table}")
        if column not in {"projectid", "sessionid", "messageid"}:
            raise ValueError(f"unknown column {column}")
        return await self.read(lambda c: c.execute(
            f"SELECT count(*) FROM {table} WHERE {column} = ?", (value,)).fetchone()[0])


def session_view(row: SessionRow) -> dict:
    """The one shape of a session in answers and events."""
    return {"id": row["id"], "projectid": row["projectid"], "name": row["name"], "status": row["status"],
            "mode": row["mode"], "autoaccept": bool(row["autoaccept"]), "model": row["model"],
            "worktree": row["worktree"], "created": row["created"], "updated": row["updated"],
            "error": row["error"], "redo": bool(row["redo"]), "schedule": row["schedule"],
            "parent": row["parent"]}


def _settle(future: asyncio.Future, ok: bool, value) -> None:
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _with_parts(c, rows: list[dict]) -> list[MessageRow]:
    """Message rows decoded, each with its parts (their text joined from the pieces)."""
    parts: list[dict] = []
    ids = [row["id"] for row in rows]
    for start in range(0, len(ids), 500):  # sqlite's limit on the number of parameters
        chunk = ids[start:start + 500]
        parts += _rows(c.execute(f"SELECT * FROM parts WHERE messageid IN ({','.join('?' * len(chunk))}) "
                                 "ORDER BY id", chunk))
    _join_pieces(c, parts)
    by_message: dict[str, list] = {row["id"]: [] for row in rows}
    for part in parts:
        by_message[part["messageid"]].append(_decode_part(part))
    messages: list[MessageRow] = []
    for row in rows:
        message = _decode_message(row)
        message["parts"] = by_message[row["id"]]
        messages.append(message)  # type: ignore[arg-type]  # a decoded row is a MessageRow
    return messages


def _decode_message(row: dict) -> dict:
    row["reverted"] = bool(row.get("reverted"))
    row["usage"] = json.loads(row["usage"]) if row.get("usage") else None
    row["data"] = json.loads(row["data"]) if row.get("data") else {}
    return row


def _renamed_attachments(data: str, renamed: dict[str, str]) -> str:
    """A message's data (JSON) naming the copies of its attachments instead of the originals."""
    if not renamed:
        return data
    decoded = json.loads(data) if data else {}
    for item in decoded.get("attachments") or ():
        if isinstance(item, dict) and item.get("id") in renamed:
            item["id"] = renamed[item["id"]]
    return json.dumps(decoded)


def _decode_schedule(row: dict) -> dict:
    row["data"] = json.loads(row["data"]) if row.get("data") else {}
    return row


def _decode_provider(row: dict) -> dict:
    row["data"] = json.loads(row["data"]) if row.get("data") else {}
    return row


def _piece_range(num: int) -> tuple[int, int]:
    return num << PIECE_BITS, (num << PIECE_BITS) | MAX_PIECES


def _part_number(c, partid: str) -> int | None:
    row = c.execute("SELECT num FROM parts WHERE id = ?", (partid,)).fetchone()
    if row is None:
        return None
    if row[0] is not None:
        return row[0]
    num = c.execute("SELECT ifnull(max(num), 0) + 1 FROM parts WHERE num IS NOT NULL").fetchone()[0]
    c.execute("UPDATE parts SET num = ? WHERE id = ?", (num, partid))
    return num


def _add_piece(c, partid: str, text: str) -> None:
    num = _part_number(c, partid)
    if num is None:
        return
    low, high = _piece_range(num)
    last = c.execute("SELECT max(id) FROM part_pieces WHERE id BETWEEN ? AND ?", (low, high)).fetchone()[0]
    if last == high:  # a part of a million pieces: fold them into its text and start again
        _fold_pieces(c, partid, num)
        last = None
    c.execute("INSERT INTO part_pieces (id, text) VALUES (?, ?)", ((last or low) + 1, text))


def _fold_pieces(c, partid: str, num: int) -> None:
    low, high = _piece_range(num)
    c.execute("UPDATE parts SET text = text || ifnull((SELECT group_concat(text, '') FROM "
              "(SELECT text FROM part_pieces WHERE id BETWEEN ? AND ? ORDER BY id)), '') WHERE id = ?",
              (low, high, partid))
    c.execute("DELETE FROM part_pieces WHERE id BETWEEN ? AND ?", (low, high))


def _drop_pieces(c, partid: str) -> None:
    row = c.execute("SELECT num FROM parts WHERE id = ?", (partid,)).fetchone()
    if row is not None and row[0] is not None:
        c.execute("DELETE FROM part_pieces WHERE id BETWEEN ? AND ?", _piece_range(row[0]))


def _row_size(row: dict) -> int:
    return sum(len(value) for value in row.values() if isinstance(value, str)) + JSON_OVERHEAD_BYTES


def _part_sizes(c, messageids: list[str]) -> dict[str, int]:
    """The bytes of stored text and data of the parts of each message (pieces included)."""
    sizes: dict[str, int] = {}
    for start in range(0, len(messageids), MAX_SQL_VARIABLES):
        chunk = messageids[start:start + MAX_SQL_VARIABLES]
        marks = ",".join("?" * len(chunk))
        for messageid, size in c.execute(
                "SELECT parts.messageid, sum(length(CAST(parts.text AS BLOB)) + length(CAST(parts.data AS BLOB))"
                f" + {JSON_OVERHEAD_BYTES} + ifnull((SELECT sum(length(CAST(part_pieces.text AS BLOB)))"
                f" FROM part_pieces WHERE part_pieces.id BETWEEN parts.num << {PIECE_BITS}"
                f" AND (parts.num << {PIECE_BITS}) | {MAX_PIECES}), 0))"
                f" FROM parts WHERE parts.messageid IN ({marks}) GROUP BY parts.messageid", chunk):
            sizes[messageid] = size or 0
    return sizes


def _join_pieces(c, parts: list[dict]) -> None:
    """Each part's text followed by its stored pieces, in order."""
    for part in parts:
        num = part.pop("num", None)
        if num is None:
            continue
        texts = [row[0] for row in c.execute(
            "SELECT text FROM part_pieces WHERE id BETWEEN ? AND ? ORDER BY id", _piece_range(num))]
        if texts:
            part["text"] = (part["text"] or "") + "".join(texts)


def _decode_part(row: dict) -> dict:
    row.pop("num", None)  # where its pieces are: the store's business alone
    row["data"] = json.loads(row["data"]) if row.get("data") else {}
    return row
