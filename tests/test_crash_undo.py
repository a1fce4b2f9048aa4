"""SIGKILL during an undo of hundreds of files, with `python totem.py` as a real process: after the
next start the undo is whole or was never made, the message says which, and no temporary file of
Totem's is left in the project or in the data folder."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import sqlite3
import time

from tests.model_server import ScriptedModel, reply
from tests.test_crash import ProcessCase
from tests.utils import MS, call
from totem.clock import IdMaker
from totem.store import DATABASE_FILE
from totem.tools.files import is_temp_name
from totem.workspace.snapshots import SNAPSHOTS_DIR, Blobs

FILES = 400
TRIALS = 4
TEMP_GONE_MS = 10_000
CAPTURE_FILES = 3000
CAPTURE_FILE_BYTES = 4096


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class KillDuringUndoTest(ProcessCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.project = self.folder("big")
        self.ids = IdMaker()
        self.outcomes: list[str] = []

    async def session_of_a_command(self, trial: int) -> tuple[str, str, str]:
        """A session whose one message rewrote FILES files, as a bash command leaves it
        (rows in the store, the old contents kept): (projectid, sessionid, messageid)."""
        server = await self.start(f"setup{trial}")
        projectid = (await call(server, "projects_open", {"path": self.project})).json()["id"]
        sessionid = (await call(server, "sessions_create", {"projectid": projectid})).json()["id"]
        self.assertEqual(await server.terminate(), 0)
        blobs = Blobs(os.path.join(self.data, SNAPSHOTS_DIR))
        messageid = self.ids.new()
        stamp = int(time.time() * 1000)
        rows = []
        for index in range(FILES):
            name = f"src/{index % 7}/f{index}.txt"
            old, new = f"old {trial} {index}\n", f"new {trial} {index}\n"
            os.makedirs(os.path.dirname(os.path.join(self.project, name)), exist_ok=True)
            with open(os.path.join(self.project, name), "w") as handle:
                handle.write(new)
            self.assertEqual(blobs.put(projectid, old.encode()), sha(old))
            rows.append((self.ids.new(), sessionid, messageid, name, sha(old), sha(new), stamp))
        with contextlib.closing(sqlite3.connect(os.path.join(self.data, DATABASE_FILE))) as conn, conn:
            conn.execute("INSERT INTO messages (id, sessionid, role, data, created, finished) "
                         "VALUES (?, ?, 'user', '{}', ?, ?)", (messageid, sessionid, stamp, stamp))
            conn.executemany("INSERT INTO snapshots (id, sessionid, messageid, partid, path, before, after, tool, "
                             "note, created) VALUES (?, ?, ?, NULL, ?, ?, ?, 'bash', '', ?)", rows)
        return projectid, sessionid, messageid

    def contents(self, trial: int) -> str:
        """"old" when every file has its old content, "new" when every one has its new one,
        else what the mix is."""
        found = set()
        for index in range(FILES):
            with open(os.path.join(self.project, f"src/{index % 7}/f{index}.txt")) as handle:
                text = handle.read()
            found.add("old" if text == f"old {trial} {index}\n" else "new" if text == f"new {trial} {index}\n"
                      else f"other: {text!r}")
        return found.pop() if len(found) == 1 else f"mixed {sorted(found)}"

    def journal_stored(self, sessionid: str) -> bool:
        with contextlib.closing(sqlite3.connect(os.path.join(self.data, DATABASE_FILE))) as conn:
            return conn.execute("SELECT restoring FROM sessions WHERE id = ?", (sessionid,)).fetchone()[0] is not None

    def temp_files(self) -> list[str]:
        found = [os.path.join(top, name) for top, _dirs, names in os.walk(self.project)
                 for name in names if is_temp_name(name)]
        found += [os.path.join(top, name) for top, _dirs, names in os.walk(os.path.join(self.data, SNAPSHOTS_DIR))
                  for name in names if name.endswith(".tmp")]
        return found

    async def undo_killed_after(self, trial: int, delay_s: float | None) -> tuple[str, str, float]:
        """One trial: an undo killed `delay_s` after it was asked (None: not killed), then a new
        start. Returns (where the kill landed, what the start left, how long the call took)."""
        _projectid, sessionid, messageid = await self.session_of_a_command(trial)
        server = await self.start(f"undo{trial}")
        started = time.monotonic()
        undo = asyncio.create_task(call(server, "sessions_undo", {"messageid": messageid}, ident=sessionid))
        if delay_s is None:
            self.assertEqual((await undo).status, 200)
        else:
            await asyncio.sleep(delay_s)  # where the kill lands varies; what must hold does not
            server.kill()
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                await undo
        took = time.monotonic() - started
        journal = self.journal_stored(sessionid)

        restarted = await self.start(f"after{trial}")
        answer = await call(restarted, "sessions_messages", ident=sessionid)
        self.assertEqual(answer.status, 200, answer.body)
        [message] = answer.json()["messages"]
        state = self.contents(trial)
        self.assertEqual(state, "old" if message["reverted"] else "new", (journal, message))
        if journal:
            self.assertIn("completed when Totem started again", message["data"]["recovered"])
        self.assertFalse(self.journal_stored(sessionid))
        deadline = time.monotonic() + TEMP_GONE_MS * MS
        while self.temp_files() and time.monotonic() < deadline:
            await asyncio.sleep(20 * MS)
        self.assertEqual(self.temp_files(), [])
        self.assertEqual(await restarted.terminate(), 0)
        landed = "during" if journal else "after" if message["reverted"] else "before"
        return landed, state, took

    async def test_kill_at_any_instant_of_an_undo_leaves_all_or_nothing(self):
        """Kills spread over an undo of 400 files (the spread narrows on the window where files
        are being written): each start leaves every file old with the message taken back, or
        every file new with the message as it was; no temporary file anywhere."""
        _landed, _state, whole = await self.undo_killed_after(0, None)
        low, high = 0.0, whole
        landings = []
        rng = random.Random(29)
        for trial in range(1, TRIALS + 1):
            delay = rng.uniform(low, high)
            landed, _state, _took = await self.undo_killed_after(trial, delay)
            landings.append(landed)
            if landed == "before":
                low = delay
            elif landed == "after":
                high = delay
        print(f"\nkills during an undo of {FILES} files ({whole:.2f} s whole): "
              f"{landings.count('before')} before its journal, {landings.count('during')} while it wrote, "
              f"{landings.count('after')} after it ended; 0 half-restored, 0 temporary files left")


class KillDuringCaptureTest(ProcessCase):
    async def test_kill_during_a_tree_capture_leaves_no_temporary_file(self):
        """SIGKILL while the first capture of a big tree keeps its contents: the next start removes
        every temporary file of the snapshot store (one that the kill left in the middle of a
        write is planted too, so the sweep is shown whatever instant the kill hit), and the next
        command's capture works."""
        project = self.folder("tree")
        for index in range(CAPTURE_FILES):
            with open(os.path.join(project, f"f{index:04}.bin"), "wb") as handle:
                handle.write(os.urandom(CAPTURE_FILE_BYTES))
        snapshots_dir = os.path.join(self.data, SNAPSHOTS_DIR)
        async with ScriptedModel() as model:
            model.script(reply(tool_calls=[("bash", {"command": "true"})]), reply("done"))
            server = await self.start("capture")
            projectid = (await call(server, "projects_open", {"path": project})).json()["id"]
            sessionid = (await call(server, "sessions_create", {"projectid": projectid})).json()["id"]
            provider = (await call(server, "providers_save", {"name": "m", "kind": "openai",
                                                              "url": model.url})).json()["id"]
            rule = await call(server, "permissions_save", {"projectid": projectid, "tool": "bash",
                                                           "pattern": "true", "action": "allow"})
            self.assertEqual(rule.status, 200, rule.body)
            answer = await call(server, "sessions_prompt", {"text": "go", "model": f"{provider}/m"}, ident=sessionid)
            self.assertEqual(answer.status, 200, answer.body)
            deadline = time.monotonic() + TEMP_GONE_MS * MS
            while self.kept(snapshots_dir, projectid) < CAPTURE_FILES // 4 and time.monotonic() < deadline:
                await asyncio.sleep(2 * MS)  # until the capture is well under way
            server.kill()
        shard = os.path.join(snapshots_dir, projectid, "ab")
        os.makedirs(shard, exist_ok=True)
        planted = os.path.join(shard, "c" * 62 + ".0123abcd.tmp")
        with open(planted, "wb") as handle:
            handle.write(b"half a content")

        async with ScriptedModel() as model:
            model.script(reply(tool_calls=[("bash", {"command": "true"})]), reply("done"))
            restarted = await self.start("after")
            self.assertEqual((await call(restarted, "sessions_read", ident=sessionid)).status, 200)
            deadline = time.monotonic() + TEMP_GONE_MS * MS
            while self.temp_files() and time.monotonic() < deadline:
                await asyncio.sleep(20 * MS)
            self.assertEqual(self.temp_files(), [])
            provider = (await call(restarted, "providers_save", {"name": "m2", "kind": "openai",
                                                                 "url": model.url})).json()["id"]
            answer = await call(restarted, "sessions_prompt", {"text": "again", "model": f"{provider}/m"},
                                ident=sessionid)
            self.assertEqual(answer.status, 200, answer.body)
            deadline = time.monotonic() + TEMP_GONE_MS * MS
            while (await call(restarted, "sessions_read", ident=sessionid)).json()["status"] == "running" \
                    and time.monotonic() < deadline:
                await asyncio.sleep(20 * MS)
            self.assertEqual((await call(restarted, "sessions_read", ident=sessionid)).json()["status"], "idle")
            self.assertEqual(await restarted.terminate(), 0)

    def kept(self, folder: str, projectid: str) -> int:
        return sum(len(names) for _top, _dirs, names in os.walk(os.path.join(folder, projectid)))

    def temp_files(self) -> list[str]:
        return [os.path.join(top, name) for top, _dirs, names in os.walk(os.path.join(self.data, SNAPSHOTS_DIR))
                for name in names if name.endswith(".tmp")]
