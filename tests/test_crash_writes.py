"""File changes a crash interrupted: each write records its journal before changing anything; on
restart the outcome is read from the disk (the content hash), Totem's temporary files are
removed, and they are never listed in the project's files."""

import hashlib
import os
import tempfile
import unittest

from tests.model_server import reply
from tests.test_loop import LoopCase
from tests.utils import call
from totem.agent.recovery import recover_changes
from totem.store import Store
from totem.tools.files import is_temp_name, new_temp_name


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class RecoveryTest(unittest.IsolatedAsyncioTestCase):
    """A database left as a crash leaves it: tool parts open, with journals."""

    async def asyncSetUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.root = os.path.realpath(os.path.join(self.tmp.name, "proj"))
        os.makedirs(os.path.join(self.root, "src"))
        self.data = os.path.join(self.tmp.name, "data")
        store = Store(self.data)
        await store.open()
        project, _ = await store.open_project(self.root, "proj")
        session = await store.create_session(project["id"], "s")
        self.message = await store.add_message(session["id"], "assistant")
        self.store, self.sessionid = store, session["id"]

    async def crashed_part(self, journal: list[dict]) -> str:
        part = await self.store.add_part(self.message["id"], self.sessionid, "tool", "running",
                                         data={"tool": "write", "journal": journal})
        return part["id"]

    async def restart(self) -> Store:
        await self.store.close()
        store = Store(self.data)
        await store.open()
        self.addAsyncCleanup(store.close)
        self.assertEqual(len(store.interrupted), 1)  # the one part left open with a journal
        self.assertEqual(await recover_changes(store), 1)
        self.assertEqual(store.interrupted, [])
        return store

    async def part(self, store: Store, partid: str) -> dict:
        messages, _ = await store.list_messages(self.sessionid, None, 10)
        return next(p for m in messages for p in m["parts"] if p["id"] == partid)

    async def test_a_write_that_landed_is_done_and_its_temp_files_go(self):
        """The file has its new content: the part is done; a temporary file beside it is removed."""
        with open(os.path.join(self.root, "src", "a.py"), "wb") as handle:
            handle.write(b"new\n")
        temp = os.path.join(self.root, "src", new_temp_name())
        with open(temp, "wb") as handle:
            handle.write(b"half")
        other = os.path.join(self.root, "src", ".totem-notours.tmp")  # not one of our names
        open(other, "w").close()
        landed = await self.crashed_part([{"path": "src/a.py", "sha256": sha(b"new\n"),
                                           "temp": os.path.basename(temp)}])
        store = await self.restart()
        part = await self.part(store, landed)
        self.assertEqual(part["status"], "done")
        self.assertIn("every change was found on disk", part["data"]["recovered"])
        self.assertNotIn("error", part["data"])
        self.assertFalse(os.path.exists(temp))
        self.assertTrue(os.path.exists(other))

    async def test_a_write_that_did_not_land_stays_error_and_says_which(self):
        """A patch of two files of which one has its new content: error, naming the other."""
        with open(os.path.join(self.root, "a.txt"), "wb") as handle:
            handle.write(b"new a\n")
        with open(os.path.join(self.root, "b.txt"), "wb") as handle:
            handle.write(b"old b\n")
        partid = await self.crashed_part([
            {"path": "a.txt", "sha256": sha(b"new a\n"), "temp": new_temp_name()},
            {"path": "b.txt", "sha256": sha(b"new b\n"), "temp": new_temp_name()},
            {"path": "gone.txt", "sha256": None}])
        with open(os.path.join(self.root, "gone.txt"), "w") as handle:
            handle.write("still here\n")
        store = await self.restart()
        part = await self.part(store, partid)
        self.assertEqual(part["status"], "error")
        self.assertIn("b.txt does not have its new content", part["data"]["error"])
        self.assertIn("gone.txt was not removed", part["data"]["error"])
        self.assertNotIn("a.txt", part["data"]["error"])

    async def test_a_journal_path_outside_is_not_followed(self):
        """A journal entry that leads outside the project is reported, nothing there is touched."""
        outside = os.path.join(self.tmp.name, "outside")
        os.makedirs(outside)
        stray = os.path.join(outside, new_temp_name())
        open(stray, "w").close()
        partid = await self.crashed_part([{"path": "../outside/x", "sha256": sha(b"x"),
                                           "temp": os.path.basename(stray)}])
        store = await self.restart()
        self.assertEqual((await self.part(store, partid))["status"], "error")
        self.assertTrue(os.path.exists(stray))


class JournalTest(LoopCase):
    async def test_write_records_its_journal_and_leaves_no_temp_file(self):
        """A write stores what it will leave on disk before writing; afterwards no temporary
        file remains, and Projects|files never lists one."""
        self.model.script(reply(tool_calls=[("write", {"path": "src/new.txt", "content": "hello\n"})]),
                          reply("done"))
        await self.prompt(autoaccept=True)
        await self.events_until("idle")
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        part = stored[1]["parts"][0]
        self.assertEqual(part["status"], "done")
        (entry,) = part["data"]["journal"]
        self.assertEqual((entry["path"], entry["sha256"]), ("src/new.txt", sha(b"hello\n")))
        self.assertTrue(is_temp_name(entry["temp"]))
        folder = os.path.join(self.folder("proj"), "src")
        self.assertEqual(sorted(os.listdir(folder)), ["new.txt"])
        open(os.path.join(folder, new_temp_name()), "w").close()  # a write in progress
        listed = (await call(self.app, "projects_files", ident=self.project["id"], query="path=src")).json()
        self.assertEqual([item["name"] for item in listed["items"]], ["new.txt"])
