"""A flood of terminal output against a viewer that reads slowly, through the real server, a
real shell on a pty and a real WebSocket client, with a second session streaming an answer from
the scripted model at the same time.

The viewer is never dropped: the terminal publishes only while the slowest follower has taken
what it was sent, so the shell's writes block instead of the server's queues filling. The
output arrives whole and in order, the scrollback of a reattach starts with the dropped-output
marker once it overflowed, and every event of the other session arrives too.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time

from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from tests.model_server import ScriptedModel, Stream, chunk, finish_chunk, usage_chunk
from tests.test_terminal import typed
from tests.utils import MS, TotemCase, call, ws_url
from totem.process import terminal

KEY = "sk-test-flood-0123456789abcdef"
FLOOD_LINES = 1_200_000  # `seq` output: about 10 MB on the pty, forty scrollbacks
ANSWER_DELTAS = 200
VIEWER_RCVBUF_BYTES = 4096  # the kernel holds little for the viewer: the server sees it behind
VIEWER_CHARS_PER_S = 4_000_000  # the viewer's pace: it pauses after each terminal.output as long
DONE = "flood-done-42"
PROMPT = re.compile(r"^[#$] ")


async def slow_viewer(app):
    """A WebSocket client whose socket buffers as little as the system allows and that keeps
    at most one message unread, so that the server, not the kernel, sees how slowly it reads."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, VIEWER_RCVBUF_BYTES)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", app.port))
    return await ws_connect(ws_url(app), sock=sock, max_queue=1, compression=None)


class TerminalFloodTest(TotemCase):
    # A queue bound of 1 MB: what the flood has the viewer wait for must stay far below it (the
    # terminal used to publish up to 1 MB every 5 ms, whatever the viewer took).
    settings = {"terminalshell": "/bin/sh", "wsqueuebytes": 1024 * 1024}

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.model = await ScriptedModel().__aenter__()
        self.addAsyncCleanup(self.model.__aexit__, None, None, None)
        project = await self.open_project()
        self.shell_session = (await self.create_session(project["id"], "shell"))["id"]
        self.answer_session = (await self.create_session(project["id"], "answer"))["id"]
        answer = await call(self.app, "providers_save", {"name": "Scripted", "kind": "openai",
                                                         "url": self.model.url, "key": KEY})
        self.assertEqual(answer.status, 200, answer.body)
        self.modelref = f"{answer.json()['id']}/scripted-model"

    async def test_flood_keeps_the_slow_viewer_and_the_other_session(self):
        """`seq 1 1200000` in the terminal, read slowly, while another session streams: the viewer
        is not closed, the output arrives whole and in order, the scrollback starts with the
        dropped marker, and the other session's deltas all arrive, in order, then its idle."""
        viewer = await slow_viewer(self.app)
        self.addAsyncCleanup(viewer.close)
        for sessionid in (self.shell_session, self.answer_session):
            await viewer.send(json.dumps({"type": "subscribe", "sessionid": sessionid}))
        opened = await call(self.app, "sessions_terminal", {"start": True}, ident=self.shell_session)
        self.assertEqual(opened.status, 200, opened.body)
        pieces = [f"{index:04d};" for index in range(ANSWER_DELTAS)]
        self.model.script(Stream([chunk({"role": "assistant", "content": ""})]
                                 + [chunk({"content": piece}) for piece in pieces]
                                 + [finish_chunk(), usage_chunk()], interval=2 * MS))
        typed_in = await call(self.app, "sessions_terminalinput",
                              typed(f"seq 1 {FLOOD_LINES}; echo {DONE[:-3]}-$((40+2))\n"), ident=self.shell_session)
        self.assertEqual(typed_in.status, 200, typed_in.body)
        prompted = await call(self.app, "sessions_prompt", {"text": "go", "model": self.modelref},
                              ident=self.answer_session)
        self.assertEqual(prompted.status, 200, prompted.body)

        output, deltas, idle = [], [], False
        deadline = time.monotonic() + 120_000 * MS
        tail = ""
        try:
            while not (idle and DONE in tail):
                left = deadline - time.monotonic()
                self.assertGreater(left, 0, f"the flood did not end; last output {tail[-200:]!r}")
                event = json.loads(await asyncio.wait_for(viewer.recv(), left))
                if event["type"] == "terminal.output":
                    output.append(event["data"]["text"])
                    tail = (tail + event["data"]["text"])[-200:]
                    await asyncio.sleep(len(event["data"]["text"]) / VIEWER_CHARS_PER_S)
                elif event["sessionid"] == self.answer_session:
                    if event["type"] == "part.delta":
                        deltas.append(event["data"]["text"])
                    elif event["type"] == "session.status" and event["data"]["status"] == "idle":
                        idle = True
                    self.assertNotEqual(event["type"], "error", event)
        except ConnectionClosed as exc:
            self.fail(f"the viewer was closed: {exc}")

        # The shell's first prompt may come after the echo of what was typed, before "1".
        lines = "".join(output).split("\r\n")
        numbers = [int(line) for line in (PROMPT.sub("", line) for line in lines) if line.isdigit()]
        self.assertEqual(numbers, list(range(1, FLOOD_LINES + 1)))  # whole, in order
        self.assertEqual("".join(deltas), "".join(pieces))
        state = (await call(self.app, "sessions_terminal", {}, ident=self.shell_session)).json()
        self.assertTrue(state["output"].startswith(terminal.DROPPED_MARKER), state["output"][:100])
        self.assertLessEqual(len(state["output"]), terminal.SCROLLBACK_CHARS)
        kept = [int(line) for line in state["output"].split("\r\n")[2:] if line.isdigit()]
        self.assertEqual(kept, list(range(kept[0], FLOOD_LINES + 1)))  # the newest, in order
        self.assertIn(DONE, state["output"])
