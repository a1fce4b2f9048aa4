"""A full disk is a state, not a crash: the data folder and the project on a small tmpfs (when the
tests run as root), filled until a run of write tools meets the end of the space.

What must hold: the run ends with a sentence that names the folder and the space left, its parts
closed and its final status published; the session never stays running; abort and writes of the
API never answer 500 (507 with the reason); a file that a tool wrote has its change recorded, or
was put back; the log has one line per kind of failure, no traceback; and once space returns,
everything works without a restart."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import os
import subprocess
import tempfile
import unittest

from tests.model_server import Stall, reply, text_chunks
from tests.test_loop import LoopCase
from tests.utils import MS, call, next_event, run_ended
from totem.errors import StorageFull

TMPFS_BYTES = 24 * 1024 * 1024
FILE_BYTES = 150_000
WRITES = 40
LEFT_BYTES = 1_500_000  # what the filler leaves: room for a few writes, not for all


def can_mount() -> bool:
    return os.geteuid() == 0


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@unittest.skipUnless(can_mount(), "a tmpfs is mounted only when the tests run as root")
class DiskFullTest(LoopCase):
    def make_tmp(self) -> str:
        tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-full-"))
        self.addCleanup(os.rmdir, tmp)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", tmp],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            self.skipTest(f"no tmpfs here: {mounted.stderr.strip()}")
        self.addCleanup(subprocess.run, ["umount", "-l", tmp], check=True)
        return tmp

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.logs = Records()
        logging.getLogger("totem").addHandler(self.logs)
        self.addCleanup(logging.getLogger("totem").removeHandler, self.logs)
        self.filler = os.path.join(self.tmp, "filler")

    def fill(self, leave: int) -> None:
        """Fill the file system, then give back `leave` bytes."""
        with open(self.filler, "wb") as handle:
            block = b"\0" * (1 << 16)
            try:
                while True:
                    handle.write(block)
                    handle.flush()
            except OSError as exc:
                self.assertEqual(exc.errno, errno.ENOSPC)
        size = os.path.getsize(self.filler)
        os.truncate(self.filler, max(0, size - leave))

    def script_writes(self, count: int, prefix: str) -> list[str]:
        names = [f"out/{prefix}{index}.txt" for index in range(count)]
        self.model.script(*[reply(tool_calls=[("write", {"path": name, "content": f"{name}\n" + "w" * FILE_BYTES})])
                            for name in names], reply("all written"))
        return names

    async def run_to_the_end(self, text: str) -> dict:
        answer = await self.prompt(text, autoaccept=True)
        self.assertEqual(answer.status, 200, answer.body)
        while True:
            event = await next_event(self.ws, 60_000)
            if event["type"] == "session.status" and event["data"]["status"] != "running":
                break
        await run_ended(self.app, self.session["id"])
        read = await call(self.app, "sessions_read", ident=self.session["id"])
        self.assertEqual(read.status, 200, read.body)
        return read.json()

    async def test_a_run_of_writes_that_fills_the_disk_ends_cleanly_and_recovers(self):
        self.fill(LEFT_BYTES)
        names = self.script_writes(WRITES, "a")
        session = await self.run_to_the_end("write them all")

        # The run ended with the reason, and nothing says running.
        self.assertEqual(session["status"], "error", session)
        self.assertIn("the disk is full", session["error"])
        self.assertIn(self.tmp, session["error"])
        self.assertIn("free", session["error"])
        self.assertFalse(self.app.runs.is_running(self.session["id"]))
        self.assertEqual(self.app.runs.recorder.open_parts(self.session["id"]), [])
        aborted = await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")
        self.assertNotEqual(aborted.status, 500, aborted.body)

        # Every file a tool left on disk has its change recorded (Undo knows it).
        on_disk = [name for name in names if os.path.exists(os.path.join(self.project["path"], name))]
        self.assertLess(len(on_disk), WRITES)
        rows = {row["path"]: row["after"] for row in await self.app.store.session_snapshots(self.session["id"])}
        for name in on_disk:
            with open(os.path.join(self.project["path"], name), "rb") as handle:
                self.assertEqual(rows.get(name), hashlib.sha256(handle.read()).hexdigest(), name)

        # A write of the API while the disk is full: 507 with the reason, never 500.
        self.fill(0)
        big = await call(self.app, "sessions_prompt", {"text": "x" * 900_000, "model": self.modelref},
                         ident=self.session["id"])
        self.assertEqual(big.status, 507, big.body)
        self.assertIn("the disk is full", big.json()[0]["error"])
        self.assertFalse(self.app.runs.is_running(self.session["id"]))

        # The log: a line per kind of failure, no traceback.
        self.assertEqual([record.getMessage() for record in self.logs.records if record.exc_info], [])
        self.assertLess(len(self.logs.records), 12, [record.getMessage() for record in self.logs.records])

        # Space comes back: the same server works, without a restart.
        os.unlink(self.filler)
        self.model.forget_script()
        again = self.script_writes(2, "b")
        session = await self.run_to_the_end("once more")
        self.assertEqual((session["status"], session["error"]), ("idle", None))
        for name in again:
            self.assertTrue(os.path.exists(os.path.join(self.project["path"], name)))
        undone = await call(self.app, "sessions_undo", {"messageid": (await self.last_prompt())}, ident=self.session["id"])
        self.assertEqual(undone.status, 200, undone.body)
        self.assertEqual(sorted(undone.json()["restored"]), again)

    async def last_prompt(self) -> str:
        messages = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        return [message for message in messages if message["role"] == "user"][-1]["id"]


class FullAtTheSeamsTest(LoopCase):
    """The same states with the failure injected where the store and the files meet the disk
    (for any account; the tmpfs test above needs root)."""

    async def test_a_write_whose_record_fails_for_space_is_put_back(self):
        """The store refuses the record of a write's change for want of space: the file is put
        back as it was, the part says so, and the run ends with the reason."""
        store = self.app.store

        async def full(rows):
            raise StorageFull(os.path.dirname(store.path))
        store.add_snapshots = full
        self.model.script(reply(tool_calls=[("write", {"path": "a.txt", "content": "replaced\n"})]), reply("done"))
        answer = await self.prompt("write", autoaccept=True)
        self.assertEqual(answer.status, 200, answer.body)
        await self.events_until("error", 20_000)
        await run_ended(self.app, self.session["id"])
        with open(os.path.join(self.project["path"], "a.txt")) as handle:
            self.assertEqual(handle.read(), "hello world\nsecond line\n")
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertIn("the disk is full", session["error"])
        [part] = [part for message in (await call(self.app, "sessions_messages", ident=self.session["id"])).json()[
            "messages"] for part in message["parts"] if part["kind"] == "tool"]
        self.assertEqual(part["status"], "error")
        self.assertIn("so it was undone", part["data"]["snapshot"]["error"])

    async def test_a_run_whose_end_cannot_be_stored_does_not_stay_running(self):
        """Every write of the run's end fails for space (it is aborted then): abort answers
        200, the run is forgotten, its status is published, and Sessions|read says error
        instead of running."""
        self.model.script(Stall(text_chunks("half an answer", 2)))
        answer = await self.prompt("hello")
        self.assertEqual(answer.status, 200, answer.body)
        for _ in range(4000):  # until the model was asked
            if self.model.requests:
                break
            await asyncio.sleep(5 * MS)
        store = self.app.store

        async def full(*args, **kwargs):
            raise StorageFull(os.path.dirname(store.path))
        for name in ("set_session_status", "update_part", "mark_run_end", "finish_message", "append_part_texts"):
            self.addCleanup(setattr, store, name, getattr(store, name))
            setattr(store, name, full)
        aborted = await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")
        self.assertEqual(aborted.status, 200, aborted.body)
        await self.events_until("aborted", 20_000)
        await run_ended(self.app, self.session["id"])
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual(session["status"], "error")
        self.assertIn("could not be stored", session["error"])
