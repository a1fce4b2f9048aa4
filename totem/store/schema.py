"""The schema: its migrations, the connection every part of Totem opens, and the repair a start
makes after a crash."""

from __future__ import annotations

import json
import sqlite3

from totem.clock import now_ms
from totem.rows import InterruptedChange

DATABASE_FILE = "totem.db"
BUSY_TIMEOUT_MS = 10_000
# Every commit writes whole pages: a flush of streamed text writes its piece plus the leaf that
# holds it and the header page, so a smaller page than sqlite's 4 KB halves what each flush adds
# beyond its text (bench/flush.py: 4 KB pages 2.1x the text, 2 KB 1.5x; 300 bytes a flush, 17x
# and 10x), at the price of more pages for a big message or attachment to read.
PAGE_BYTES = 2048

# Each entry moves the schema one version up; never edit one that has shipped.
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
    # 13: the marker of a session's data envelopes, chosen at its first run and kept: an earlier
    # tool result then reads the same in every later request (what a provider's cache reuses).
    """
    ALTER TABLE sessions ADD COLUMN marker TEXT;
    """,
    # 14: the session a fork was made from (kept as an id when that one is removed: the fork
    # still says it is one), so that the list tells a fork from its original.
    """
    ALTER TABLE sessions ADD COLUMN forkof TEXT;
    """,
)

STOPPED_DURING_RUN = "Totem stopped during this run (killed or crashed); the run did not finish"


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


def interrupted_changes(conn: sqlite3.Connection) -> list[InterruptedChange]:
    rows = conn.execute(
        "SELECT parts.id, parts.data, projects.path FROM parts JOIN sessions ON sessions.id = parts.sessionid "
        "JOIN projects ON projects.id = sessions.projectid WHERE parts.closed IS NULL AND parts.kind = 'tool'")
    found: list[InterruptedChange] = []
    for partid, data, root in rows:
        decoded = json.loads(data) if data else {}
        if decoded.get("journal"):
            found.append({"id": partid, "data": decoded, "root": root})
    return found


def recover_after_crash(conn: sqlite3.Connection) -> None:
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
