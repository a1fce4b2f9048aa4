"""The write volume of streaming a slow, long answer: a 300 KB text arriving over 30 one-second
flushes, through the real recorder and the real sqlite store, in this process.

Two figures against the text's size: the text handed to the store, and the bytes written to
the database files (the `wchar` of /proc/self/io: every write() of sqlite, WAL frames included;
nothing else writes meanwhile). For comparison, the same answer stored the old way, the whole
text rewritten at every flush.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from totem.agent.recorder import Recorder
from totem.store import Store

ANSWER_BYTES = 300 * 1024
FLUSHES = 30
DELTA_CHARS = 40  # a token or a few: what one streamed delta carries
TARGET_RATIO = 2.0


class _NoHub:
    def publish(self, event) -> None:
        pass


def written_bytes() -> int | None:
    try:
        with open("/proc/self/io") as handle:
            for line in handle:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


async def _stream(folder: str, whole: bool) -> tuple[int, int | None]:
    """(text bytes handed to the store, bytes written by sqlite) for one answer."""
    store = Store(folder)
    await store.open()
    try:
        project, _ = await store.open_project(folder, "bench")
        session = await store.create_session(project["id"], "bench")
        message = await store.add_message(session["id"], "assistant")
        recorder = Recorder(store, _NoHub(), flush_after_s=3600)
        part = await recorder.open(session["id"], message["id"], "text")
        handed = 0
        real_append = store.append_part_texts

        async def counted(pieces):
            nonlocal handed
            handed += sum(len(text.encode()) for _, text in pieces)
            await real_append(pieces)
        store.append_part_texts = counted
        before = written_bytes()
        per_flush = ANSWER_BYTES // FLUSHES
        text = ""
        for _ in range(FLUSHES):
            for _ in range(per_flush // DELTA_CHARS):
                delta = "x" * (DELTA_CHARS - 1) + "\n"
                text += delta
                recorder.append(part, delta)
            if whole:  # the old flush: the part's whole text again
                handed += len(text.encode())
                part.since = None
                await store.update_part(part.id, text=text)
            else:
                await recorder.flush()
        await recorder.close(part, "done")
        after = written_bytes()
        await recorder.stop()
        return handed, (after - before) if before is not None and after is not None else None
    finally:
        await store.close()


def main() -> list[tuple]:
    rows = []
    for label, whole in (("pieces (now)", False), ("whole text at every flush (before)", True)):
        with tempfile.TemporaryDirectory(prefix="totem-bench-flush-") as folder:
            handed, written = asyncio.run(_stream(folder, whole))
        target = f"< {TARGET_RATIO:g}" if not whole else ""
        rows.append((f"flush: 300 KB over {FLUSHES} flushes, {label}: text to the store / text",
                     handed / ANSWER_BYTES, "x", target, handed / ANSWER_BYTES < TARGET_RATIO if not whole else None))
        if written is not None:
            rows.append((f"flush: 300 KB over {FLUSHES} flushes, {label}: bytes sqlite wrote / text",
                         written / ANSWER_BYTES, "x", target,
                         written / ANSWER_BYTES < TARGET_RATIO if not whole else None))
    return rows


if __name__ == "__main__":
    for row in main():
        print(row)
