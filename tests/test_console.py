"""What the server's console says, by config.ini's `loglevel`: the real launcher, a real
WebSocket client. A page's connection is a debug line, never an info one, and the WebSocket
library's own debug lines (each request's headers, the cookie among them) never appear."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import unittest

import websockets

from tests.utils import MS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "totem.py")
COOKIE = "totem_session=a-cookie-the-console-must-never-show"


class ConsoleTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-console-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    async def console(self, level: str | None) -> str:
        """Start Totem at `level` (config.ini's default without), open a WebSocket that sends a
        message the server refuses (its refusal is a warning, logged before the close), stop
        Totem; returns what it wrote to stderr."""
        config = os.path.join(self.tmp, f"config-{level}.ini")
        with open(config, "w") as handle:
            handle.write(f"[totem]\nport = 0\ntoken = none\ndata = {self.tmp}/data-{level}\n"
                         + (f"loglevel = {level}\n" if level else ""))
        env = {key: value for key, value in os.environ.items() if key != "PYTHONASYNCIODEBUG"}
        process = await asyncio.create_subprocess_exec(
            sys.executable, LAUNCHER, "--config", config, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
        try:
            line = (await asyncio.wait_for(process.stdout.readline(), 20_000 * MS)).decode()
            base = line.split("listening on ", 1)[1].split()[0].rstrip("/")
            url = base.replace("http://", "ws://") + "/ws/"
            async with websockets.connect(url, origin=base, additional_headers={"Cookie": COOKIE}) as ws:
                await ws.send('{"type": "hello"}')
                with self.assertRaises(websockets.ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 20_000 * MS)
        finally:
            process.terminate()
            _out, err = await process.communicate()
        return err.decode()

    async def test_connections_are_debug_lines_and_headers_never_shown(self):
        for level in (None, "info", "warning", "debug"):
            with self.subTest(level=level):
                said = await self.console(level)
                refused = "WebSocket message refused" in said
                self.assertEqual(refused, level != "error", said)  # the connection did live
                self.assertEqual("connection open" in said, level == "debug", said)
                self.assertNotIn("a-cookie-the-console-must-never-show", said)
                self.assertNotIn("Sec-WebSocket-Key", said)
                if level == "warning":
                    self.assertNotIn(" INFO ", said)  # the sandbox's start-up line is info
