"""`python totem.py run` end to end: the real server, the scripted model, the client as its own
process. Streamed output, exit codes, --json, an ask with and without --reject-asks, Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from tests.model_server import models_fixture, reply
from tests.test_loop import LoopCase
from tests.utils import MS, TOKEN, TotemCase, call

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CliCase(LoopCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.token_file = os.path.join(self.tmp, "token")
        with open(self.token_file, "w") as handle:
            handle.write("")  # no token configured: a loopback client needs none

    async def start(self, *args: str, stdin: bytes | None = None, model: bool = True):
        argv = [sys.executable, os.path.join(ROOT, "totem.py"), "run", "--url", f"http://127.0.0.1:{self.app.port}",
                "--config", os.path.join(self.tmp, "none.ini"), "--token-file", self.token_file,
                "--project", self.project["path"], *(("--model", self.modelref) if model else ()), *args]
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

    async def test_an_ask_with_reject_asks_is_rejected_and_exits_3(self):
        """The work was refused: the run ends idle, but the exit code says a question was rejected."""
        self.model.script(reply(tool_calls=[("write", {"path": "x.txt", "content": "x"})]), reply("ok then"))
        code, out, err = await self.finish(await self.start("--reject-asks", "write x"))
        self.assertEqual(code, 3, err)
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


class CliScriptTest(CliCase):
    """What scripts and CI jobs need: standard input with the argument, each signal, each exit
    code, the final JSON object, and the token never printed."""

    def assert_no_token(self, *outputs: str) -> None:
        for output in outputs:
            self.assertNotIn(TOKEN, output)

    async def newest_session(self) -> str:
        sessions = (await call(self.app, "sessions", query=f"projectid={self.project['id']}")).json()["sessions"]
        return sessions[0]["id"]

    async def test_standard_input_comes_after_the_argument_as_a_fenced_block(self):
        self.model.script(reply("reviewed"))
        piped = b"diff --git a/x b/x\n+```js\n+code\n"
        code, out, err = await self.finish(await self.start("review this", stdin=piped), piped)
        self.assertEqual(code, 0, err)
        sent = self.model.requests[0].body["messages"][-1]["content"]
        # A fence longer than the run of backticks inside, so that the input cannot close it.
        self.assertEqual(sent, "review this\n\n````\ndiff --git a/x b/x\n+```js\n+code\n````\n")
        self.assert_no_token(out, err)

    async def test_usage_errors_exit_2(self):
        for args, stdin, words in ((("--format", "xml", "hi"), None, "invalid choice"), ((), b"  \n", "no prompt"),
                                   (("--nosuchflag", "hi"), None, "unrecognized arguments")):
            code, out, err = await self.finish(await self.start(*args, stdin=stdin), stdin)
            self.assertEqual(code, 2, (args, err))
            self.assertIn(words, err)
            self.assert_no_token(out, err)

    async def test_json_prints_one_object_with_the_result(self):
        """`--format json`: one object at the end, in the documented shape, and nothing else."""
        self.model.script(reply(tool_calls=[("write", {"path": "new.txt", "content": "n\n"})]),
                          reply("Wrote new.txt."))
        code, out, err = await self.finish(await self.start("--format", "json", "--reject-asks", "make new.txt"))
        self.assertEqual(code, 3, err)
        result = json.loads(out)
        self.assertEqual(set(result), {"sessionid", "messageid", "status", "exit", "error", "text", "tokens", "files",
                                       "questions"})
        self.assertEqual((result["status"], result["exit"], result["error"]), ("refused", 3, None))
        self.assertEqual(result["sessionid"], await self.newest_session())
        self.assertEqual(result["text"], "Wrote new.txt.")
        self.assertEqual(set(result["tokens"]), {"input", "output", "cost"})
        self.assertGreater(result["tokens"]["output"], 0)
        self.assertEqual(result["files"], [])
        self.assertEqual(result["questions"], [{"kind": "permission", "tool": "write", "asked": "new.txt",
                                                "answer": "reject"}])
        self.assertRegex(result["messageid"], r"^\w+$")
        self.assert_no_token(out, err)

    async def json_run(self, *args: str, model: bool = False) -> dict:
        code, out, err = await self.finish(await self.start("--format", "json", *args, model=model))
        self.assertEqual(code, 0, err)
        return json.loads(out)

    async def test_continue_and_the_default_model(self):
        """--continue prompts the project's latest session with its model; a new session without
        --model takes the model of the project's latest session that has one; with none, the
        server's refusal names the model (exit 1)."""
        code, _out, err = await self.finish(await self.start("hi", model=False))
        self.assertEqual(code, 1)
        self.assertIn("model", err)
        self.model.script(reply("first"), reply("second"), reply("third"))
        first = await self.json_run("one", model=True)
        second = await self.json_run("--continue", "two")
        self.assertEqual(second["sessionid"], first["sessionid"])
        self.assertEqual(second["text"], "second")
        third = await self.json_run("three")
        self.assertNotEqual(third["sessionid"], first["sessionid"])
        self.assertEqual(third["text"], "third")
        sent = [request.body["messages"][-1]["content"] for request in self.model.requests]
        self.assertEqual(sent, ["one", "two", "three"])
        self.assertEqual(len(self.model.requests[1].body["messages"]), 4)  # system, one, first, two

    async def test_models_lists_the_references(self):
        """--models lists each `<providerid>/<model>` of the providers' own lists; a provider that
        cannot list says why on stderr."""
        code, out, err = await self.finish(await self.start("--models", model=False))
        self.assertEqual((code, out), (0, ""), err)
        self.assertIn("Scripted: ", err)  # the scripted server serves no list yet
        self.model.serve_models("openai_v1_models")
        listed = models_fixture("openai_v1_models")["data"][0]["id"]
        code, out, err = await self.finish(await self.start("--models", model=False))
        self.assertEqual(code, 0, err)
        self.assertIn(f"{self.provider['id']}/{listed}\tScripted", out.splitlines())
        code, out, err = await self.finish(await self.start("--models", "--format", "json", model=False))
        self.assertIn({"id": f"{self.provider['id']}/{listed}", "provider": "Scripted"}, json.loads(out))

    async def test_file_command_and_agent(self):
        """--file attaches a file; --command runs a project command with the text as its
        arguments; --agent gives the prompt a project agent; a missing file is a usage error."""
        notes = os.path.join(self.tmp, "notes.md")
        with open(notes, "w") as handle:
            handle.write("the attached words 7421\n")
        os.makedirs(os.path.join(self.project["path"], ".totem", "commands"))
        os.makedirs(os.path.join(self.project["path"], ".totem", "agents"))
        with open(os.path.join(self.project["path"], ".totem", "commands", "greet.md"), "w") as handle:
            handle.write("Greet $ARGUMENTS warmly.\n")
        with open(os.path.join(self.project["path"], ".totem", "agents", "terse.md"), "w") as handle:
            handle.write("Answer in one word, terse agent 5150.\n")
        self.model.script(reply("read"), reply("greeted"), reply("ok"))
        await self.json_run("--file", notes, "read this", model=True)
        self.assertIn("the attached words 7421", json.dumps(self.model.requests[-1].body))
        await self.json_run("--command", "greet", "the team", model=True)
        self.assertIn("Greet the team warmly.", json.dumps(self.model.requests[-1].body))
        await self.json_run("--agent", "terse", "hello", model=True)
        self.assertIn("terse agent 5150", json.dumps(self.model.requests[-1].body))
        code, _out, err = await self.finish(await self.start("--file", os.path.join(self.tmp, "nope"), "x"))
        self.assertEqual(code, 2)
        self.assertIn("--file", err)

    async def test_each_signal_aborts_the_server_run_and_leaves_no_question(self):
        """SIGINT, SIGTERM and SIGHUP while a question waits: the client says which, exits 130,
        and the server's run is aborted with its question gone (nobody can approve it later)."""
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            with self.subTest(signal=number.name):
                self.model.script(reply(tool_calls=[("write", {"path": "w.txt", "content": "w"})]))
                process = await self.start("write w")
                seen = b""
                while b"waits for your approval" not in seen:
                    line = await asyncio.wait_for(process.stderr.readline(), 20)
                    self.assertTrue(line, seen)
                    seen += line
                sessionid = await self.newest_session()
                self.assertEqual(len(self.app.runs.questions.waiting(sessionid)), 1)
                process.send_signal(number)
                code, out, err = await self.finish(process)
                self.assertEqual(code, 130, err)
                self.assertIn(f"interrupted ({number.name}); the run was aborted", err)
                for _ in range(2000):  # the abort was answered; the run's task ends right after
                    if not self.app.runs.is_running(sessionid):
                        break
                    await asyncio.sleep(5 * MS)
                self.assertFalse(self.app.runs.is_running(sessionid))
                self.assertEqual(self.app.runs.questions.waiting(sessionid), [])
                read = (await call(self.app, "sessions_read", ident=sessionid)).json()
                self.assertIn(read["status"], ("aborted", "idle"))
                self.assertFalse(os.path.exists(os.path.join(self.project["path"], "w.txt")))
                self.assert_no_token(out, err, seen.decode())


class CliTokenTest(TotemCase):
    settings = {"token": TOKEN}

    async def run_with(self, token: str, *args: str) -> tuple[int, str]:
        token_file = os.path.join(self.tmp, "token")
        with open(token_file, "w") as handle:
            handle.write(token + "\n")
        project = self.folder("proj")
        process = await asyncio.create_subprocess_exec(
            sys.executable, os.path.join(ROOT, "totem.py"), "run", "--url", f"http://127.0.0.1:{self.app.port}",
            "--config", os.path.join(self.tmp, "none.ini"), "--token-file", token_file, "--project", project,
            *args, "hi", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 20)
        self.assertNotIn(token, out.decode() + err.decode())  # never printed, on any path
        return process.returncode, err.decode()

    async def test_no_format_prints_the_token(self):
        """Each output format, on the refused prompt's path (no model): exit 1, token not shown."""
        for output in ("text", "json", "jsonl"):
            code, err = await self.run_with(TOKEN, "--format", output)
            self.assertEqual(code, 1, (output, err))

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
