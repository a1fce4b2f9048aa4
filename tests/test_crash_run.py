"""A server killed in the middle of a run: the restart closes what was open and keeps the text."""

import asyncio
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import unittest
from types import SimpleNamespace

from tests.model_server import ScriptedModel, Stream, chunk
from tests.utils import MS, call
from totem.store import STOPPED_DURING_RUN

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DELTA = "abcdefghij"
INTERVAL_S = 0.05


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class CrashDuringRunTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-crash-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.port = free_port()
        self.config = os.path.join(self.tmp, "config.ini")
        with open(self.config, "w") as handle:
            handle.write(f"[totem]\nport = {self.port}\ndata = {self.tmp}/data\ntoken = none\n")
        os.makedirs(os.path.join(self.tmp, "proj"))
        self.server = SimpleNamespace(port=self.port)

    async def start(self):
        process = await asyncio.create_subprocess_exec(
            sys.executable, os.path.join(ROOT, "totem.py"), "--config", self.config,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        line = await asyncio.wait_for(process.stdout.readline(), 10000 * MS)
        self.assertIn(b"listening", line)
        return process

    async def test_kill_mid_run_restart_closes_parts(self):
        """After kill -9 mid-stream, the part is closed as error, the session idle, older text kept."""
        async with ScriptedModel() as model:
            chunks = [chunk({"role": "assistant", "content": ""})] + [chunk({"content": DELTA}) for _ in range(400)]
            model.script(Stream(chunks, interval=INTERVAL_S))
            process = await self.start()
            try:
                project = (await call(self.server, "projects_open", {"path": os.path.join(self.tmp, "proj")})).json()
                session = (await call(self.server, "sessions_create", {"projectid": project["id"]})).json()
                provider = (await call(self.server, "providers_save",
                                       {"name": "m", "kind": "openai", "url": model.url})).json()
                answer = await call(self.server, "sessions_prompt",
                                    {"text": "go", "model": f"{provider['id']}/m"}, ident=session["id"])
                self.assertEqual(answer.status, 200, answer.body)
                for _ in range(500):
                    if model.requests:
                        break
                    await asyncio.sleep(10 * MS)
                streamed_since = time.monotonic()
                await asyncio.sleep(2.5)
                killed_after = time.monotonic() - streamed_since
                process.send_signal(signal.SIGKILL)
                await process.wait()
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        process = await self.start()
        try:
            session_now = (await call(self.server, "sessions_read", ident=session["id"])).json()
            # The run the kill ended reads as failed, with the reason, on the session and its answer.
            self.assertEqual((session_now["status"], session_now["error"]), ("error", STOPPED_DURING_RUN))
            messages = (await call(self.server, "sessions_messages", ident=session["id"])).json()["messages"]
            self.assertEqual((messages[-1]["data"]["ended"], messages[-1]["data"]["error"]),
                             ("error", STOPPED_DURING_RUN))
            part = messages[-1]["parts"][0]
            self.assertEqual(part["status"], "error")
            self.assertIsNotNone(part["closed"])
            # Everything streamed more than a second before the kill was stored.
            older_than_a_second = int((killed_after - 1.0 - 0.3) / INTERVAL_S) * len(DELTA)
            self.assertGreaterEqual(len(part["text"]), older_than_a_second)
            self.assertTrue(part["text"] and set(part["text"]) <= set(DELTA))
        finally:
            process.send_signal(signal.SIGTERM)
            await process.wait()
