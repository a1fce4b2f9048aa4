"""`python totem.py run` end to end: the real server, the scripted model, the client as its own
process. Streamed output, exit codes, --json, an ask with and without --reject-asks, Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from tests.model_server import reply
from tests.test_loop import LoopCase
from tests.utils import MS, TOKEN, TotemCase, call

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CliCase(LoopCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.token_file = os.path.join(self.tmp, "token")
        with open(self.token_file, "w") as handle:
            handle.write("")  # no token configured: a loopback client needs none

    async def start(self, *args: str, stdin: bytes | None = None):
        argv = [sys.executable, os.path.join(ROOT, "totem.py"), "run", "--url", f"http://127.0.0.1:{self.app.port}",
                "--config", os.path.join(self.tmp, "none.ini"), "--token-file", self.token_file,
                "--project", self.project["path"], "--model", self.modelref, *args]
        return await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    async def finish(self, process, stdin: bytes | None = None, timeout_ms: float = 20_000):
        out, err = await asyncio.wait_for(process.communicate(stdin), timeout_ms * MS)
        return process.returncode, out.decode(), err.decode()


class CliTest(CliCase):
    async def test_streams_the_answer_and_exits_0(self):
        self.model.script(reply(tool_calls=[("read", {"path": "a.txt"})]), reply("The file says hello."))
        code, out, err = await self.finish(await self.start("What is in a.txt?"))
        self.assertEqual(code, 0, err)
        self.assertIn("The file says hello.", out)
        self.assertIn("[read] done", err)
        self.assertEqual(self.model.requests[0].body["messages"][-1]["content"], "What is in a.txt?")

    async def test_prompt_on_stdin_and_json_lines(self):
        self.model.script(reply("from stdin"))
        process = await self.start("--json", stdin=b"a prompt on stdin\n")
        code, out, err = await self.finish(process, b"a prompt on stdin\n")
        self.assertEqual(code, 0, err)
        events = [json.loads(line) for line in out.splitlines() if line.strip()]
        self.assertIn("part.delta", [event["type"] for event in events])
        self.assertEqual(events[-1]["type"], "session.status")
        self.assertEqual(events[-1]["data"]["status"], "idle")

    async def test_an_error_exits_1(self):
        code, _out, err = await self.finish(await self.start("--model", "nosuchprovider/model", "hi"))
        self.assertEqual(code, 1)
        self.assertIn("model", err)

    async def test_an_ask_with_reject_asks_is_rejected(self):
        self.model.script(reply(tool_calls=[("write", {"path": "x.txt", "content": "x"})]), reply("ok then"))
        code, out, err = await self.finish(await self.start("--reject-asks", "write x"))
        self.assertEqual(code, 0, err)
        self.assertIn("rejected", err)
        self.assertFalse(os.path.exists(os.path.join(self.project["path"], "x.txt")))
        self.assertIn("ok then", out)

    async def test_an_ask_waits_for_the_person_and_is_never_approved_by_the_client(self):
        self.model.script(reply(tool_calls=[("write", {"path": "y.txt", "content": "y"})]), reply("written"))
        process = await self.start("write y")
        seen = b""
        while b"waits for your approval" not in seen:
            seen += await asyncio.wait_for(process.stderr.readline(), 20)
        sessions = (await call(self.app, "sessions", query=f"projectid={self.project['id']}",
                               )).json()["sessions"]
        newest = sessions[0]["id"]
        asks = self.app.runs.questions.waiting(newest)
        self.assertEqual(len(asks), 1)
        self.assertFalse(os.path.exists(os.path.join(self.project["path"], "y.txt")))
        answer = await call(self.app, "permissions_reply", {"reply": "once"}, ident=asks[0].id)
        self.assertEqual(answer.status, 200, answer.body)
        code, out, err = await self.finish(process)
        self.assertEqual(code, 0, err)
        self.assertIn("written", out)
        self.assertTrue(os.path.exists(os.path.join(self.project["path"], "y.txt")))

    async def test_ctrl_c_aborts_the_run_and_exits_130(self):
        slow = reply("a long answer " * 50)
        slow.interval = 0.1
        self.model.script(slow)
        process = await self.start("talk")
        first = await asyncio.wait_for(process.stdout.read(8), 20)
        self.assertTrue(first)
        process.send_signal(signal.SIGINT)
        code, _out, err = await self.finish(process)
        self.assertEqual(code, 130, err)
        self.assertIn("aborted", err)
        sessions = (await call(self.app, "sessions", query=f"projectid={self.project['id']}",
                               )).json()["sessions"]
        for _ in range(200):
            if not self.app.runs.is_running(sessions[0]["id"]):
                break
            await asyncio.sleep(10 * MS)
        self.assertFalse(self.app.runs.is_running(sessions[0]["id"]))


class CliTokenTest(TotemCase):
    settings = {"token": TOKEN}

    async def run_with(self, token: str) -> tuple[int, str]:
        token_file = os.path.join(self.tmp, "token")
        with open(token_file, "w") as handle:
            handle.write(token + "\n")
        project = self.folder("proj")
        process = await asyncio.create_subprocess_exec(
            sys.executable, os.path.join(ROOT, "totem.py"), "run", "--url", f"http://127.0.0.1:{self.app.port}",
            "--config", os.path.join(self.tmp, "none.ini"), "--token-file", token_file, "--project", project, "hi",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _out, err = await asyncio.wait_for(process.communicate(), 20)
        return process.returncode, err.decode()

    async def test_the_token_comes_from_the_file(self):
        """A wrong token is refused (401); the right one gets through to the prompt, which then
        needs a model (400): the token reached the server without the command line holding it."""
        code, err = await self.run_with("wrong-token-wrong-token")
        self.assertEqual(code, 1)
        self.assertIn("401", err)
        code, err = await self.run_with(TOKEN)
        self.assertEqual(code, 1)
        self.assertIn("model", err)
        self.assertNotIn("401", err)
