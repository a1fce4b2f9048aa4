"""Benchmark of reading a long conversation: the first page of Sessions|messages of a session
with 10,000 parts, over HTTP on loopback.

Runs the real app in this process (tests/utils.py's `running_totem`, a temporary data folder)
and fills one session through the store as runs leave it: PARTS parts in assistant messages of
PARTS_PER_MESSAGE parts (text, reasoning and tool parts with input and output) after a user
message each. Then it times `GET /api/sessions_messages/{id}` (the default page: the newest
messages that fit the page's byte bound), each on a new connection: the median and the largest
of ROUNDS, against the 20 ms target. It measures and reports; it asserts nothing.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.utils import call, running_totem  # noqa: E402

PARTS = 10_000
PARTS_PER_MESSAGE = 5
ROUNDS = 30
TARGET_MS = 20.0


async def fill(app, sessionid: str) -> int:
    store = app.store
    parts = 0
    while parts < PARTS:
        user = await store.add_message(sessionid, "user")
        await store.add_part(user["id"], sessionid, "text", "done", text=f"step {parts}: go on", closed=True)
        answer = await store.add_message(sessionid, "assistant", model="bench/model")
        for index in range(PARTS_PER_MESSAGE - 1):
            kind = "tool" if index else "reasoning"
            data = {"tool": "read", "callid": f"c{parts}", "input": {"path": "src/app.js"},
                    "output": "x" * 400} if kind == "tool" else {}
            await store.add_part(answer["id"], sessionid, kind, "done", text="thinking " * 20 if not index else "",
                                 data=data, closed=True)
        await store.add_part(answer["id"], sessionid, "text", "done", text="The answer. " * 30, closed=True)
        parts += PARTS_PER_MESSAGE + 1
    return parts


async def measure() -> list[tuple]:
    with tempfile.TemporaryDirectory(prefix="totem-bench-messages-") as folder:
        project_dir = os.path.join(folder, "project")
        os.makedirs(project_dir)
        async with running_totem(folder) as app:
            project = (await call(app, "projects_open", {"path": project_dir})).json()
            session = (await call(app, "sessions_create", {"projectid": project["id"]})).json()
            parts = await fill(app, session["id"])
            times, sizes = [], []
            for _ in range(ROUNDS):
                began = time.perf_counter()
                answer = await call(app, "sessions_messages", ident=session["id"])
                times.append((time.perf_counter() - began) * 1000)
                sizes.append(len(answer.body))
            shown = len(answer.json()["messages"])
    median = statistics.median(times)
    return [(f"messages: first page of a session with {parts:,} parts, median of {ROUNDS}", median, "ms",
             f"< {TARGET_MS:g} ms", median < TARGET_MS),
            ("messages: the same, largest", max(times), "ms", "", None),
            ("messages: that page", f"{shown} messages, {sizes[-1]:,} bytes", "", "", None)]


def main() -> list[tuple]:
    return asyncio.run(measure())


if __name__ == "__main__":
    for row in main():
        print(row)
