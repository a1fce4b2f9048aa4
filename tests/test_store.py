"""The sqlite store: WAL with a reader in another process, cascading removal and migrations."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest
import unittest.mock
from urllib.request import pathname2url

from tests.utils import MS, TotemCase, call
from totem.store import DATABASE_FILE, MIGRATIONS, Store, connect, migrate

READER_MS = 20_000
WRITTEN_SESSIONS = 60
WRITERS = 4

# A second process that reads the database read-only, in a loop, while the server writes. Each
# read is one transaction; it reports every count it saw and every error it met.
READER = r"""
import json, sqlite3, sys, time
path, target, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0, isolation_level=None)
print("ready", flush=True)
seen, errors = [], []
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    try:
        conn.execute("BEGIN")
        total = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
        joined = conn.execute(
            "SELECT count(*) FROM sessions JOIN projects ON projects.id = sessions.projectid").fetchone()[0]
        names = conn.execute("SELECT count(*) FROM sessions WHERE name LIKE 'reader-%'").fetchone()[0]
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        errors.append(str(exc))
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        continue
    if not seen or seen[-1] != [total, joined, names]:
        seen.append([total, joined, names])
    if total >= target:
        break
conn.close()
print(json.dumps({"seen": seen, "errors": errors}), flush=True)
"""


def database_path(app) -> str:
    return os.path.join(app.config.data, DATABASE_FILE)


def schema(conn: sqlite3.Connection) -> list[tuple]:
    return [tuple(row) for row in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")]


class ConcurrentReaderTest(TotemCase):
    async def test_reader_process_while_writing_consistent(self):
        """A read-only reader in another process never meets `database is locked` and sees whole writes."""
        project = await self.open_project()
        uri_path = pathname2url(database_path(self.app))
        reader = subprocess.Popen([sys.executable, "-c", READER, uri_path, str(WRITTEN_SESSIONS),
                                   str(READER_MS * MS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ready = await asyncio.wait_for(asyncio.to_thread(reader.stdout.readline), READER_MS * MS)
            self.assertEqual(ready, "ready\n")

            async def writer(number: int) -> None:
                for index in range(WRITTEN_SESSIONS // WRITERS):
                    answer = await call(self.app, "sessions_create",
                                        {"projectid": project["id"], "name": f"reader-{number}-{index}"})
                    self.assertEqual(answer.status, 200, answer.body)

            await asyncio.gather(*(writer(number) for number in range(WRITERS)))
            stdout, stderr = await asyncio.wait_for(asyncio.to_thread(reader.communicate), READER_MS * MS)
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.communicate()
        self.assertEqual(reader.returncode, 0, stderr)
        report = json.loads(stdout)
        self.assertEqual(report["errors"], [])
        seen = report["seen"]
        self.assertTrue(seen)
        for total, joined, names in seen:
            self.assertEqual(total, joined)  # never a session without its project
            self.assertEqual(total, names)
        totals = [total for total, _joined, _names in seen]
        self.assertEqual(totals, sorted(totals))  # counts only grow
        self.assertEqual(totals[-1], WRITTEN_SESSIONS)

    async def test_wal_mode_on(self):
        """The database is in WAL mode, seen from a connection of another program."""
        with contextlib.closing(sqlite3.connect(database_path(self.app))) as conn:
            self.assertEqual(conn.execute("PRAGMA journal_mode").fetchone()[0], "wal")
            self.assertEqual(conn.execute("PRAGMA user_version").fetchone()[0], len(MIGRATIONS))
        self.assertTrue(os.path.exists(database_path(self.app) + "-wal"))


class CascadeTest(TotemCase):
    """Removing a project or a session removes everything that hangs from it."""

    TABLES = ("sessions", "messages", "parts", "rules", "settings", "schedules", "attachments",
              "snapshots", "todos")

    async def fill(self, project: dict) -> list[dict]:
        """Two sessions, each with a message, parts and a row in every dependent table."""
        sessions = [await self.create_session(project["id"], name) for name in ("one", "two")]
        for session in sessions:
            message = await self.app.store.add_message(session["id"], "user", data={"text": "hi"})
            await self.app.store.add_part(message["id"], session["id"], "text", "done", "hi", closed=True)
            await self.app.store.add_part(message["id"], session["id"], "tool", "running")
            self.insert_dependents(project["id"], session["id"], message["id"])
        return sessions

    def insert_dependents(self, projectid: str, sessionid: str, messageid: str) -> None:
        stamp = int(time.time() * 1000)
        with contextlib.closing(connect(database_path(self.app))) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO rules (id, projectid, tool, pattern, action, created)"
                         " VALUES (?, ?, 'bash', 'ls *', 'allow', ?)", (f"r-{sessionid}", projectid, stamp))
            conn.execute("INSERT INTO settings (projectid, sessionid, key, value) VALUES (?, ?, 'model', '\"m\"')",
                         (projectid, sessionid))
            conn.execute("INSERT INTO schedules (id, projectid, created, updated) VALUES (?, ?, ?, ?)",
                         (f"c-{sessionid}", projectid, stamp, stamp))
            conn.execute("INSERT INTO attachments (id, sessionid, messageid, name, mime, size, data, created)"
                         " VALUES (?, ?, ?, 'a.txt', 'text/plain', 1, x'41', ?)",
                         (f"a-{sessionid}", sessionid, messageid, stamp))
            conn.execute("INSERT INTO snapshots (id, sessionid, messageid, path, before, after, tool, created)"
                         " VALUES (?, ?, ?, 'a.txt', 'aa', 'bb', 'write', ?)",
                         (f"s-{sessionid}", sessionid, messageid, stamp))
            conn.execute("INSERT INTO todos (sessionid, items, updated) VALUES (?, '[]', ?)", (sessionid, stamp))
            conn.execute("COMMIT")

    async def count(self, table: str, column: str, value: str) -> int:
        return await self.app.store.count_rows(table, column, value)

    async def session_counts(self, sessionid: str) -> dict[str, int]:
        return {table: await self.count(table, "sessionid", sessionid)
                for table in ("messages", "parts", "attachments", "snapshots", "todos", "settings")}

    async def test_project_remove_cascades(self):
        """Removing a project removes its sessions, messages, parts, rules, settings and the rest."""
        project = await self.open_project("gone")
        other = await self.open_project("kept")
        sessions = await self.fill(project)
        kept = await self.fill(other)
        self.assertEqual(await self.count("sessions", "projectid", project["id"]), 2)
        self.assertEqual(await self.session_counts(sessions[0]["id"]),
                         {"messages": 1, "parts": 2, "attachments": 1, "snapshots": 1, "todos": 1, "settings": 1})

        answer = await call(self.app, "projects_remove", {}, ident=project["id"])
        self.assertEqual(answer.json(), {"success": True, "value": project["id"]})

        for table in ("sessions", "rules", "settings", "schedules"):
            self.assertEqual(await self.count(table, "projectid", project["id"]), 0, table)
        for session in sessions:
            self.assertEqual(set((await self.session_counts(session["id"])).values()), {0})
        for session in kept:
            self.assertEqual(set((await self.session_counts(session["id"])).values()), {1, 2})
        self.assertEqual(await self.count("sessions", "projectid", other["id"]), 2)
        self.assertEqual(await self.count("rules", "projectid", other["id"]), 2)

    async def test_session_remove_cascades(self):
        """Removing a session removes its messages, parts, attachments, snapshots and todos only."""
        project = await self.open_project()
        gone, kept = await self.fill(project)
        answer = await call(self.app, "sessions_remove", {}, ident=gone["id"])
        self.assertEqual(answer.json(), {"success": True, "value": gone["id"]})
        self.assertEqual(set((await self.session_counts(gone["id"])).values()), {0})
        self.assertEqual(await self.session_counts(kept["id"]),
                         {"messages": 1, "parts": 2, "attachments": 1, "snapshots": 1, "todos": 1, "settings": 1})
        self.assertEqual(await self.count("rules", "projectid", project["id"]), 2)
        self.assertEqual(await self.count("sessions", "projectid", project["id"]), 1)

    async def test_foreign_keys_enforced(self):
        """A session cannot point at a project that does not exist (foreign keys are on)."""
        with self.assertRaises(sqlite3.IntegrityError):
            await self.app.store.write(lambda c: c.execute(
                "INSERT INTO sessions (id, projectid, name, created, updated) VALUES ('x', 'nope', 'n', 0, 0)"))
        answer = await call(self.app, "sessions_create", {"projectid": "nope"})
        self.assertEqual(answer.status, 404)


class MigrationTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-store-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.path = os.path.join(self.tmp, DATABASE_FILE)

    def test_migrate_twice_noop(self):
        """A migration run a second time changes nothing: same version, same schema, same rows."""
        with contextlib.closing(connect(self.path)) as conn:
            self.assertEqual(migrate(conn), len(MIGRATIONS))
            first = schema(conn)
            conn.execute("INSERT INTO projects (id, path, name, created, opened) VALUES ('p', '/x', 'x', 1, 1)")
        with contextlib.closing(connect(self.path)) as conn:
            self.assertEqual(migrate(conn), len(MIGRATIONS))
            self.assertEqual(schema(conn), first)
            self.assertEqual(conn.execute("PRAGMA user_version").fetchone()[0], len(MIGRATIONS))
            self.assertEqual([tuple(row) for row in conn.execute("SELECT id FROM projects")], [("p",)])

    def test_migrate_from_first_version_keeps_rows(self):
        """A database of schema 1 is brought up to date with its rows kept (sessions gain error)."""
        with contextlib.closing(connect(self.path)) as conn:
            conn.executescript(MIGRATIONS[0] + "; PRAGMA user_version = 1;")
            conn.execute("INSERT INTO projects (id, path, name, created, opened) VALUES ('p', '/x', 'x', 1, 1)")
            conn.execute("INSERT INTO sessions (id, projectid, name, created, updated) VALUES ('s', 'p', 'n', 1, 1)")
        with contextlib.closing(connect(self.path)) as conn:
            self.assertEqual(migrate(conn), len(MIGRATIONS))
            row = conn.execute("SELECT id, name, error FROM sessions").fetchone()
            self.assertEqual(tuple(row), ("s", "n", None))

    def test_migrate_moves_attachment_content_last_and_keeps_it(self):
        """Schema 12 puts an attachment's content last in its row (where sqlite keeps a zeroblob
        lazy); the attachments stored before keep every value."""
        with contextlib.closing(connect(self.path)) as conn:
            conn.executescript("".join(MIGRATIONS[:11]) + "; PRAGMA user_version = 11;")
            conn.execute("INSERT INTO projects (id, path, name, created, opened) VALUES ('p', '/x', 'x', 1, 1)")
            conn.execute("INSERT INTO sessions (id, projectid, name, created, updated) VALUES ('s', 'p', 'n', 1, 1)")
            conn.execute("INSERT INTO messages (id, sessionid, role, created) VALUES ('m', 's', 'user', 1)")
            conn.execute("INSERT INTO attachments (id, sessionid, messageid, name, mime, size, data, created) "
                         "VALUES ('a', 's', 'm', 'f.bin', 'application/octet-stream', 3, x'010203', 7)")
        with contextlib.closing(connect(self.path)) as conn:
            self.assertEqual(migrate(conn), len(MIGRATIONS))
            columns = [row[1] for row in conn.execute("PRAGMA table_info(attachments)")]
            self.assertEqual(columns[-1], "data")
            row = conn.execute("SELECT id, sessionid, messageid, name, mime, size, data, created FROM attachments")
            self.assertEqual(tuple(row.fetchone()), ("a", "s", "m", "f.bin", "application/octet-stream", 3,
                                                     b"\x01\x02\x03", 7))
            self.assertEqual(conn.execute("PRAGMA foreign_key_check").fetchall(), [])
            conn.execute("DELETE FROM sessions")
            self.assertEqual(conn.execute("SELECT count(*) FROM attachments").fetchone()[0], 0)  # still cascades

    async def test_store_reopen_keeps_data(self):
        """Opening the store again on the same folder migrates nothing and keeps the rows."""
        store = Store(self.tmp)
        await store.open()
        try:
            project, created = await store.open_project("/x", "x")
            self.assertTrue(created)
        finally:
            await store.close()
        store = Store(self.tmp)
        await store.open()
        try:
            self.assertEqual([row["id"] for row in await store.list_projects()], [project["id"]])
        finally:
            await store.close()

    async def test_newer_schema_refused(self):
        """A database of a newer schema version refuses to open with a clear RuntimeError."""
        with contextlib.closing(connect(self.path)) as conn:
            migrate(conn)
            conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 7}")
        store = Store(self.tmp)
        try:
            with self.assertRaises(RuntimeError) as caught:
                await store.open()
        finally:
            await store.close()
        self.assertIn("newer", str(caught.exception))
        self.assertIn(str(len(MIGRATIONS) + 7), str(caught.exception))
        with contextlib.closing(sqlite3.connect(self.path)) as conn:
            self.assertEqual(conn.execute("PRAGMA user_version").fetchone()[0], len(MIGRATIONS) + 7)

    def test_failed_migration_rolls_back(self):
        """A migration that fails halfway leaves the version and the schema as they were."""
        with contextlib.closing(connect(self.path)) as conn:
            conn.execute("CREATE TABLE projects (id TEXT PRIMARY KEY)")  # in the way of migration 1
            before = schema(conn)
            with self.assertRaises(sqlite3.OperationalError):
                migrate(conn)
            self.assertEqual(conn.execute("PRAGMA user_version").fetchone()[0], 0)
            self.assertEqual(schema(conn), before)


class PiecesTest(unittest.IsolatedAsyncioTestCase):
    """Streamed text stored as pieces keyed by the part's number: kept in order, replaced,
    folded, counted in a page's size, and gone with their part however it goes."""

    async def asyncSetUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-pieces-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.store = Store(self.tmp)
        await self.store.open()
        self.addAsyncCleanup(self.store.close)
        project, _ = await self.store.open_project(self.tmp, "p")
        self.project = project
        self.session = await self.store.create_session(project["id"], "s")
        self.message = await self.store.add_message(self.session["id"], "assistant")

    async def open_part(self) -> dict:
        return await self.store.add_part(self.message["id"], self.session["id"], "text", "running")

    async def texts(self) -> list[str]:
        messages, _ = await self.store.list_messages(self.session["id"], None, 10)
        return [part["text"] for part in messages[0]["parts"]]

    def piece_count(self) -> int:
        with contextlib.closing(connect(os.path.join(self.tmp, DATABASE_FILE))) as conn:
            return conn.execute("SELECT count(*) FROM part_pieces").fetchone()[0]

    async def test_pieces_of_two_parts_stay_apart_and_in_order(self):
        first, second = await self.open_part(), await self.open_part()
        for number in range(12):  # past 9: the order is numeric, not textual
            await self.store.append_part_texts([(first["id"], f"a{number} "), (second["id"], f"b{number} ")])
        self.assertEqual(await self.texts(), ["".join(f"a{n} " for n in range(12)),
                                              "".join(f"b{n} " for n in range(12))])
        self.assertNotIn("num", (await self.store.update_part(first["id"], status="done")))

    async def test_replacing_the_text_drops_the_pieces(self):
        part = await self.open_part()
        await self.store.append_part_texts([(part["id"], "streamed")])
        changed = await self.store.update_part(part["id"], text="whole", close=True)
        self.assertEqual(changed["text"], "whole")
        self.assertEqual(self.piece_count(), 0)
        await self.store.append_part_texts([(part["id"], "late")])  # closed: takes none
        self.assertEqual(await self.texts(), ["whole"])

    async def test_a_full_part_folds_its_pieces_into_its_text(self):
        part = await self.open_part()
        with unittest.mock.patch.multiple("totem.store.parts", PIECE_BITS=2, MAX_PIECES=3):
            for number in range(10):
                await self.store.append_part_texts([(part["id"], str(number))])
            self.assertEqual(await self.texts(), ["0123456789"])
        self.assertLessEqual(self.piece_count(), 3)

    async def test_a_page_counts_the_pieces_in_its_size(self):
        older = await self.store.add_message(self.session["id"], "user")
        await self.store.add_part(older["id"], self.session["id"], "text", "done", text="small", closed=True)
        newer = await self.store.add_message(self.session["id"], "assistant")
        part = await self.store.add_part(newer["id"], self.session["id"], "text", "running")
        await self.store.append_part_texts([(part["id"], "x" * 50_000)])
        page, more = await self.store.list_messages(self.session["id"], None, 10, max_bytes=10_000)
        self.assertEqual(([m["id"] for m in page], more), ([newer["id"]], True))

    async def test_pieces_go_with_a_removed_project(self):
        part = await self.open_part()
        await self.store.append_part_texts([(part["id"], "x" * 5000)])
        self.assertEqual(self.piece_count(), 1)
        await self.store.remove_project(self.project["id"])
        self.assertEqual(self.piece_count(), 0)

    def test_a_new_database_takes_small_pages_and_an_old_one_keeps_its_own(self):
        from totem.store import PAGE_BYTES
        with contextlib.closing(connect(os.path.join(self.tmp, DATABASE_FILE))) as conn:
            self.assertEqual(conn.execute("PRAGMA page_size").fetchone()[0], PAGE_BYTES)
        old = os.path.join(self.tmp, "old.db")
        with contextlib.closing(connect(old)) as conn:
            conn.execute("PRAGMA page_size = 4096")
            conn.executescript(MIGRATIONS[0])
            conn.execute("PRAGMA user_version = 1")
        with contextlib.closing(connect(old)) as conn:
            migrate(conn)
            self.assertEqual(conn.execute("PRAGMA page_size").fetchone()[0], 4096)


class PiecesMigrationTest(unittest.TestCase):
    def test_pieces_of_schema_four_move_to_the_numbered_table(self):
        """Text stored as pieces under schema 4 reads the same after the migration."""
        tmp = tempfile.mkdtemp(prefix="totem-pieces-migration-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        path = os.path.join(tmp, DATABASE_FILE)
        with contextlib.closing(connect(path)) as conn:
            for number in range(4):
                conn.executescript(MIGRATIONS[number])
            conn.execute("PRAGMA user_version = 4")
            conn.execute("INSERT INTO projects VALUES ('p', '/x', 'x', 1, 1)")
            conn.execute("INSERT INTO sessions (id, projectid, name, created, updated) VALUES ('s', 'p', 'n', 1, 1)")
            conn.execute("INSERT INTO messages (id, sessionid, role, created) VALUES ('m', 's', 'assistant', 1)")
            for partid in ("a", "b"):
                conn.execute("INSERT INTO parts (id, messageid, sessionid, kind, status, text, created, updated)"
                             " VALUES (?, 'm', 's', 'text', 'done', 'head ', 1, 1)", (partid,))
            for seq in (1, 2, 10):
                conn.execute("INSERT INTO part_texts VALUES ('a', ?, ?)", (seq, f"<{seq}>"))
        store = Store(tmp)

        async def read():
            await store.open()
            try:
                messages, _ = await store.list_messages("s", None, 10)
                return [part["text"] for part in messages[0]["parts"]]
            finally:
                await store.close()
        self.assertEqual(asyncio.run(read()), ["head <1><2><10>", "head "])
        with contextlib.closing(connect(path)) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
            self.assertNotIn("part_texts", tables)

    def test_an_unfinished_statement_in_a_script_is_refused(self):
        from totem.store.schema import _statements
        self.assertEqual(len(_statements("CREATE TABLE a (x); CREATE TRIGGER t AFTER DELETE ON a "
                                         "BEGIN DELETE FROM a; DELETE FROM a; END;")), 2)
        with self.assertRaises(ValueError):
            _statements("CREATE TABLE a (x); CREATE TRIGGER t AFTER DELETE ON a BEGIN DELETE FROM a;")
