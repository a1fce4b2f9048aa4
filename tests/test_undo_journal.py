"""Undo, redo and Save as as transactions: a journal stored before the first file is touched, and
a start that completes what a stop interrupted (the real server in this process; the stop is an
exception at the moment a kill would land, and the start is `Changes.recover`)."""

import json
import os

from tests.test_snapshots import SnapshotCase
from totem.tools import files as file_io

FILES = 40


class Stopped(BaseException):
    """The process stopping at this instant (nothing of Totem catches a BaseException)."""


class InterruptedRestoreTest(SnapshotCase):
    async def changed_by_one_command(self):
        """A message whose bash command rewrote FILES files: (its id, the old texts)."""
        old = {f"f{index:02}.txt": f"old {index}\n" for index in range(FILES)}
        for name, text in old.items():
            self.put(name, text)
        messageid, _ = await self.turn([("bash", {"command": "for f in f*.txt; do echo new > $f; done"})])
        self.assertEqual({self.text(name) for name in old}, {"new\n"})
        return messageid, old

    def stop_after(self, writes: int, method="apply_restore"):
        """Make the snapshots' `method` stop the process after `writes` writes of its plan, with
        the temporary file of the next one made: the state a kill leaves mid-restore."""
        real = getattr(self.app.snapshots, method)
        seen = {}

        def stopping(projectid, root, plan):
            seen["plan"] = plan
            done = plan.done
            for write in plan.writes[:writes]:
                self.app.snapshots._put(projectid, root, write, done)
            following = plan.writes[writes]
            folder = os.path.dirname(os.path.join(root, following["path"]))
            with open(os.path.join(folder, following["temp"]), "wb") as handle:
                handle.write(b"half")
            raise Stopped()
        setattr(self.app.snapshots, method, stopping)
        self.addCleanup(setattr, self.app.snapshots, method, real)
        return seen

    async def stored_session(self):
        return await self.app.store.get_session(self.session["id"])

    def temp_files(self):
        return [name for _top, _dirs, names in os.walk(self.root) for name in names if file_io.is_temp_name(name)]

    async def interrupted_undo(self, messageid, writes):
        self.stop_after(writes)
        with self.assertRaises(Stopped):
            await self.app.services.changes.undo(self.session["id"], messageid)
        self.app.snapshots.apply_restore = type(self.app.snapshots).apply_restore.__get__(self.app.snapshots)

    async def test_undo_stopped_midway_is_completed_at_start_and_says_so(self):
        """Stopped after 15 of 40 files (and the 16th's temporary file made): the journal is
        stored and the message not yet taken back; the start restores the other 25, removes the
        temporary file, takes the message back with a note, and redo works from there."""
        messageid, old = await self.changed_by_one_command()
        await self.interrupted_undo(messageid, 15)
        session = await self.stored_session()
        journal = json.loads(session["restoring"])
        self.assertEqual((journal["kind"], len(journal["plan"]["writes"])), ("undo", FILES))
        self.assertEqual(sum(self.text(name) != "new\n" for name in old), 15)
        self.assertEqual(len(self.temp_files()), 1)
        self.assertFalse(any(message["reverted"] for message in await self.messages()))

        self.assertEqual(await self.app.services.changes.recover(), 1)
        self.assertEqual({name: self.text(name) for name in old}, old)
        self.assertEqual(self.temp_files(), [])
        self.assertIsNone((await self.stored_session())["restoring"])
        messages = await self.messages()
        taken = [message for message in messages if message["id"] >= messageid]
        self.assertTrue(all(message["reverted"] for message in taken))
        self.assertIn("completed when Totem started again", taken[0]["data"]["recovered"])
        self.assertTrue((await self.read_session())["redo"])

        done = await self.redo()
        self.assertEqual(len(done["restored"]), FILES)
        self.assertEqual({self.text(name) for name in old}, {"new\n"})
        self.assertNotIn("recovered", (await self.messages())[0]["data"])  # a clean redo clears the note

    async def test_undo_stopped_before_any_write_or_after_all(self):
        """Stopped before its first write, or after its last write and before its record: the
        start completes it the same way (every file old, the message taken back)."""
        for writes in (0, FILES - 1):
            with self.subTest(writes=writes):
                messageid, old = await self.changed_by_one_command()
                await self.interrupted_undo(messageid, writes)
                await self.app.services.changes.recover()
                self.assertEqual({name: self.text(name) for name in old}, old)
                self.assertEqual(self.temp_files(), [])
                self.assertTrue((await self.messages())[-2]["reverted"])

    async def test_file_changed_while_stopped_is_left_and_named(self):
        """A file the person changed between the stop and the start holds neither content: it
        is left as it is, named in the message's note, and undo with force can restore it."""
        messageid, old = await self.changed_by_one_command()
        await self.interrupted_undo(messageid, 10)
        self.put("f30.txt", "the person's\n")
        await self.app.services.changes.recover()
        self.assertEqual(self.text("f30.txt"), "the person's\n")
        self.assertEqual(sum(self.text(name) == text for name, text in old.items()), FILES - 1)
        note = [message for message in await self.messages() if message["id"] == messageid][0]["data"]["recovered"]
        self.assertIn("f30.txt", note)
        again = await self.undo(messageid, force=True)
        self.assertEqual(again["restored"], ["f30.txt"])
        self.assertEqual(self.text("f30.txt"), old["f30.txt"])

    async def test_redo_stopped_midway_is_completed_at_start(self):
        """A redo stopped after 5 files is completed by the start: every file new again, the
        messages back, nothing left to redo."""
        messageid, old = await self.changed_by_one_command()
        await self.undo(messageid)
        self.stop_after(5)
        with self.assertRaises(Stopped):
            await self.app.services.changes.redo(self.session["id"])
        self.assertEqual(json.loads((await self.stored_session())["restoring"])["kind"], "redo")
        await self.app.services.changes.recover()
        self.assertEqual({self.text(name) for name in old}, {"new\n"})
        self.assertFalse(any(message["reverted"] for message in await self.messages()))
        self.assertFalse((await self.read_session())["redo"])
        self.assertEqual(self.temp_files(), [])

    async def test_save_as_stopped_before_its_record_is_recorded_at_start(self):
        """Save as stopped after its write and before its change was recorded: the start records
        it, so that undo of the message still takes it back."""
        await self.turn(text="show code", final="```\nx\n```")
        messageid = (await self.messages())[1]["id"]
        real = self.app.snapshots.record_files

        async def stopping(scope, priors):
            raise Stopped()
        self.app.snapshots.record_files = stopping
        with self.assertRaises(Stopped):
            await self.app.services.changes.save_as(self.session["id"], messageid, "a.txt", "saved\n", replace=True)
        self.app.snapshots.record_files = real
        self.assertEqual(self.text("a.txt"), "saved\n")
        self.assertEqual(await self.rows(), [])
        await self.app.services.changes.recover()
        self.assertEqual([(row["path"], row["tool"]) for row in await self.rows()], [("a.txt", "saveas")])
        self.assertIsNone((await self.stored_session())["restoring"])
        await self.undo(messageid)
        self.assertEqual(self.text("a.txt"), "hello world\nsecond line\n")

    async def test_a_second_undo_during_one_is_refused(self):
        """While an undo of the session is under way (its journal stored), another undo, redo or
        Save as of the session is refused with 409 and changes nothing."""
        messageid, old = await self.changed_by_one_command()
        changes = self.app.services.changes
        changes._busy.add(self.session["id"])
        try:
            answer = await self.undo(messageid, status=409)
            self.assertIn("in progress", json.dumps(answer))
            await self.save_as(messageid, "other.txt", "x\n", status=409)
        finally:
            changes._busy.discard(self.session["id"])
        self.assertEqual({self.text(name) for name in old}, {"new\n"})
        self.assertFalse(self.exists("other.txt"))
