"""The recorder with a real store: streamed text is stored as the pieces each flush appended,
never the whole part again; the flush follows the oldest unflushed delta, whatever the loop's
lag; a close stores only the tail; a failed flush is repaired at the close; events follow."""

import asyncio
import contextlib
import os
import tempfile
import time
import unittest

from totem.agent.recorder import Recorder
from totem.store import Store, connect


class ListHub:
    def __init__(self):
        self.events = []

    def publish(self, event):
        self.events.append(event)


class RecorderTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.store = Store(self.tmp.name)
        await self.store.open()
        self.addAsyncCleanup(self.store.close)
        project, _ = await self.store.open_project(self.tmp.name, "p")
        self.session = await self.store.create_session(project["id"], "s")
        self.message = await self.store.add_message(self.session["id"], "assistant")
        self.hub = ListHub()
        self.recorder = Recorder(self.store, self.hub, flush_after_s=3600)  # flushed by hand
        self.addAsyncCleanup(self.recorder.stop)
        self.written: list[str] = []
        append = self.store.append_part_texts

        async def counted(pieces):
            self.written += [text for _, text in pieces]
            await append(pieces)
        self.store.append_part_texts = counted

    async def stored_text(self, partid: str) -> str:
        messages, _ = await self.store.list_messages(self.session["id"], None, 10)
        return next(p["text"] for m in messages for p in m["parts"] if p["id"] == partid)

    async def test_each_flush_stores_only_what_was_appended(self):
        """Ten flushes of a growing answer write each character once; the close writes the tail."""
        part = await self.recorder.open(self.session["id"], self.message["id"], "text")
        expected = ""
        for number in range(10):
            piece = f"piece {number} " * 100
            self.recorder.append(part, piece)
            expected += piece
            await self.recorder.flush()
            self.assertEqual(await self.stored_text(part.id), expected)
        self.assertEqual(sum(map(len, self.written)), len(expected))
        self.recorder.append(part, "the end")
        await self.recorder.close(part, "done")
        self.assertEqual(await self.stored_text(part.id), expected + "the end")
        kinds = [type(event).__name__ for event in self.hub.events]
        self.assertEqual(kinds[0], "PartCreated")
        self.assertEqual(kinds[-2:], ["PartUpdated", "PartClosed"])
        self.assertEqual(self.hub.events[-2].part["text"], expected + "the end")

    async def test_a_part_closed_before_any_flush_is_written_once(self):
        """A short part never flushed is stored whole at its close, as one text."""
        part = await self.recorder.open(self.session["id"], self.message["id"], "text")
        self.recorder.append(part, "short")
        await self.recorder.close(part, "done")
        self.assertEqual(self.written, [])
        self.assertEqual(await self.stored_text(part.id), "short")

    async def test_a_failed_flush_is_repaired_at_the_close(self):
        """When a flush cannot be stored, the close stores the whole text again."""
        part = await self.recorder.open(self.session["id"], self.message["id"], "text")
        self.recorder.append(part, "one ")
        await self.recorder.flush()

        async def broken(pieces):
            raise OSError("disk full")
        self.store.append_part_texts = broken
        self.recorder.append(part, "two ")
        with self.assertLogs("totem.agent", "ERROR"):
            await self.recorder.flush()
        self.recorder.append(part, "three")
        await self.recorder.close(part, "done")
        self.assertEqual(await self.stored_text(part.id), "one two three")

    async def test_flush_follows_the_oldest_delta_even_after_the_loop_lagged(self):
        """The flusher wakes at the oldest unflushed delta's deadline: after a stall of the loop
        longer than the bound, the text is stored at the first chance, not a bound later."""
        self.recorder.flush_after_s = 0.05
        part = await self.recorder.open(self.session["id"], self.message["id"], "text")
        self.recorder.append(part, "before the stall")
        time.sleep(0.2)  # the loop is blocked past the deadline  # noqa: ASYNC251
        for _ in range(100):
            await asyncio.sleep(0.005)
            if self.written:
                break
        self.assertEqual(self.written, ["before the stall"])
        self.assertIsNone(part.since)

    async def test_pieces_survive_a_crash(self):
        """An open part's stored pieces are its text after a restart closes it as error."""
        part = await self.recorder.open(self.session["id"], self.message["id"], "text")
        self.recorder.append(part, "streamed ")
        await self.recorder.flush()
        self.recorder.append(part, "lost in memory")
        await self.recorder.stop()
        await self.store.close()
        store = Store(self.tmp.name)
        await store.open()  # recovery closes parts left open
        self.addAsyncCleanup(store.close)
        messages, _ = await store.list_messages(self.session["id"], None, 10)
        recovered = messages[0]["parts"][0]
        self.assertEqual((recovered["text"], recovered["status"]), ("streamed ", "error"))
        with contextlib.closing(connect(os.path.join(self.tmp.name, "totem.db"))) as conn:
            self.assertEqual(conn.execute("SELECT count(*) FROM part_pieces").fetchone()[0], 1)

    async def test_pieces_go_with_their_session(self):
        """Removing the session removes the stored pieces of its parts."""
        part = await self.recorder.open(self.session["id"], self.message["id"], "text")
        self.recorder.append(part, "x" * 1000)
        await self.recorder.flush()
        await self.recorder.close(part, "done")
        await self.store.remove_session(self.session["id"])
        with contextlib.closing(connect(os.path.join(self.tmp.name, "totem.db"))) as conn:
            self.assertEqual(conn.execute("SELECT count(*) FROM part_pieces").fetchone()[0], 0)
