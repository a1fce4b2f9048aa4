"""`python totem.py run` end to end: the real server (with an access token), the scripted
model, the client as its own process without a terminal. Streamed output, standard input, each
exit code, each signal, `--format json` against its documented shape, and the token never in
any output (`finish` checks every run)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import threading

from tests.model_server import HttpError, ScriptedModel, chunk, models_fixture, reply
from tests.utils import MS, TOKEN, TotemCase, call, next_event, open_ws

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AUTH = {"Authorization": f"Bearer {TOKEN}"}
KEY = "sk-test-NEVER-LEAK-cli-0123456789abcdef"
EVENT_WAIT_MS = 20_000
# The keys of the object `--format json` prints (README, `totem run`).
RESULT_KEYS = {"sessionid", "messageid", "status", "exit", "error", "text", "tokens", "files", "questions"}


class CliCase(TotemCase):
    """A server with a token, a project with a.txt, the scripted model as a saved provider, and
    a WebSocket of the test's own that sees every session.updated."""

    settings = {"token": TOKEN}

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.model = await ScriptedModel().__aenter__()
        self.addAsyncCleanup(self.model.__aexit__, None, None, None)
        self.app.runs.steps.backoff_first_s = 0.01
        root = self.folder("proj")
        with open(os.path.join(root, "a.txt"), "w") as handle:
            handle.write("hello world\nsecond line\n")
        self.project = await self.api("projects_open", {"path": root})
        self.provider = await self.api("providers_save", {"name": "Scripted", "kind": "openai",
                                                          "url": self.model.url, "key": KEY})
        self.modelref = f"{self.provider['id']}/scripted-model"
        self.token_file = os.path.join(self.tmp, "token")
        with open(self.token_file, "w") as handle:
            handle.write(TOKEN + "\n")
        self.ws = await open_ws(self.app, additional_headers=AUTH)
        self.addAsyncCleanup(self.ws.close)

    async def api(self, name: str, body=None, ident: str | None = None, query: str = ""):
        answer = await call(self.app, name, body, ident, query, headers=AUTH)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    async def start(self, *args: str, stdin=None, model: bool = True, stdout=asyncio.subprocess.PIPE):
        """The client as a process: `stdin` None (/dev/null), bytes (a pipe written by finish)
        or a socket (what a Node parent gives)."""
        argv = [sys.executable, os.path.join(ROOT, "totem.py"), "run", "--url", f"http://127.0.0.1:{self.app.port}",
                "--config", os.path.join(self.tmp, "none.ini"), "--token-file", self.token_file,
                "--project", self.project["path"], *(("--model", self.modelref) if model else ()), *args]
        given = asyncio.subprocess.PIPE if isinstance(stdin, bytes) else stdin
        return await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL if stdin is None else given,
            stdout=stdout, stderr=asyncio.subprocess.PIPE)

    async def finish(self, process, stdin: bytes | None = None, timeout_ms: float = 20_000):
        """The exit code, stdout and stderr; neither ever holds the token or the provider key."""
        out, err = await asyncio.wait_for(process.communicate(stdin), timeout_ms * MS)
        out, err = (out or b"").decode(), err.decode()
        for secret in (TOKEN, KEY):
            self.assertNotIn(secret, out + err)
        return process.returncode, out, err

    async def told(self, process, words: str, timeout_ms: float = 20_000) -> str:
        """What the client wrote on stderr up to the first line that holds `words`."""
        lines = []
        while not lines or words not in lines[-1]:
            line = await asyncio.wait_for(process.stderr.readline(), timeout_ms * MS)
            if not line:
                raise AssertionError(f"the client ended before it said {words!r}: {''.join(lines)}")
            lines.append(line.decode())
        for secret in (TOKEN, KEY):
            self.assertNotIn(secret, "".join(lines))
        return "".join(lines)

    async def newest_session(self) -> str:
        return (await self.api("sessions", query=f"projectid={self.project['id']}"))["sessions"][0]["id"]

    async def event(self, wanted, timeout_ms: float = EVENT_WAIT_MS) -> dict:
        """The next event on the test's WebSocket for which `wanted(event)` holds."""
        while True:
            event = await next_event(self.ws, timeout_ms)
            if wanted(event):
                return event

    async def waiting_question(self, kind: str = "permission.ask") -> dict:
        """The question the client's run asks, seen as events: the client's new session is
        announced to every connection; subscribing to it sends the question (again, if it was
        asked already)."""
        created = await self.event(lambda event: event["type"] == "session.updated")
        sessionid = created["data"]["session"]["id"]
        await self.ws.send(json.dumps({"type": "subscribe", "sessionid": sessionid}))
        return await self.event(lambda event: event["type"] == kind and event["sessionid"] == sessionid)


class CliTest(CliCase):
    async def test_streams_the_answer_and_exits_0(self):
        self.model.script(reply(tool_calls=[("read", {"path": "a.txt"})]), reply("The file says hello."))
        code, out, err = await self.finish(await self.start("What is in a.txt?"))
        self.assertEqual(code, 0, err)
        self.assertIn("The file says hello.", out)
        self.assertIn("[read] done", err)
        self.assertEqual(self.model.requests[0].body["messages"][-1]["content"], "What is in a.txt?")

    async def test_prompt_on_stdin_alone_and_json_lines(self):
        self.model.script(reply("from stdin"))
        code, out, err = await self.finish(await self.start("--format", "jsonl", stdin=b""), b"a prompt on stdin\n")
        self.assertEqual(code, 0, err)
        self.assertEqual(self.model.requests[0].body["messages"][-1]["content"], "a prompt on stdin\n")
        events = [json.loads(line) for line in out.splitlines()]  # every line is one event
        self.assertIn("part.delta", [event["type"] for event in events])
        self.assertEqual(events[-1]["type"], "session.status")
        self.assertEqual(events[-1]["data"]["status"], "idle")

    async def test_a_refused_prompt_exits_1(self):
        code, _out, err = await self.finish(await self.start("--model", "nosuchprovider/model", "hi"))
        self.assertEqual(code, 1)
        self.assertIn("model", err)

    async def test_a_failed_run_exits_1_and_says_why(self):
        """The run ends in error (the provider refuses the key): exit 1, the reason on stderr,
        and in the JSON object status failed with the error."""
        self.model.script(HttpError({"error": {"message": "Incorrect API key provided"}}, 401))
        code, out, err = await self.finish(await self.start("hi"))
        self.assertEqual(code, 1, err)
        self.assertIn("Incorrect API key provided", err)
        self.model.script(HttpError({"error": {"message": "Incorrect API key provided"}}, 401))
        code, out, err = await self.finish(await self.start("--format", "json", "hi"))
        self.assertEqual(code, 1, err)
        result = json.loads(out)
        self.assertEqual((result["status"], result["exit"]), ("failed", 1))
        self.assertIn("Incorrect API key provided", result["error"])
        self.assertEqual((await self.api("sessions_read", ident=result["sessionid"]))["status"], "error")

    async def test_an_ask_with_reject_asks_is_rejected_and_exits_3(self):
        """The work was refused: the run ends idle, but the exit code says a question was rejected."""
        self.model.script(reply(tool_calls=[("write", {"path": "x.txt", "content": "x"})]), reply("ok then"))
        code, out, err = await self.finish(await self.start("--reject-asks", "write x"))
        self.assertEqual(code, 3, err)
        self.assertIn("rejected", err)
        self.assertFalse(os.path.exists(os.path.join(self.project["path"], "x.txt")))
        self.assertIn("ok then", out)

    async def test_a_question_nobody_can_answer_exits_3(self):
        """The ask tool's question with --reject-asks: answered that nobody is here, exit 3."""
        self.model.script(reply(tool_calls=[("ask", {"question": "Which colour?", "options": ["red", "blue"]})]),
                          reply("I chose red."))
        code, out, err = await self.finish(await self.start("--format", "json", "--reject-asks", "paint it"))
        self.assertEqual(code, 3, err)
        result = json.loads(out)
        self.assertEqual((result["status"], result["text"]), ("refused", "I chose red."))
        self.assertEqual(result["questions"], [{"kind": "question", "tool": "ask", "asked": "Which colour?",
                                                "answer": "nobody is here to answer; decide yourself"}])

    async def test_a_question_answered_in_the_screen_is_in_the_result(self):
        self.model.script(reply(tool_calls=[("ask", {"question": "Which colour?", "options": ["red", "blue"]})]),
                          reply("Blue it is."))
        process = await self.start("--format", "json", "paint it")
        asked = await self.waiting_question("question.ask")
        await self.api("questions_reply", {"answer": "blue"}, ident=asked["data"]["id"])
        code, out, err = await self.finish(process)
        self.assertEqual(code, 0, err)
        result = json.loads(out)
        self.assertEqual((result["status"], result["text"]), ("done", "Blue it is."))
        self.assertEqual(result["questions"], [{"kind": "question", "tool": "ask", "asked": "Which colour?",
                                                "answer": "blue"}])

    async def test_an_ask_waits_for_the_person_and_is_never_approved_by_the_client(self):
        """Without --reject-asks the question waits; approved elsewhere, the run goes on, and the
        JSON object lists the changed file and the answer given."""
        self.model.script(reply(tool_calls=[("write", {"path": "y.txt", "content": "y"})]), reply("written"))
        process = await self.start("--format", "json", "write y")
        ask = await self.waiting_question()
        self.assertFalse(os.path.exists(os.path.join(self.project["path"], "y.txt")))
        self.assertEqual((await self.api("sessions_read", ident=ask["sessionid"]))["waiting"], 1)
        await self.api("permissions_reply", {"reply": "once"}, ident=ask["data"]["id"])
        code, out, err = await self.finish(process)
        self.assertEqual(code, 0, err)
        self.assertIn("waits for your approval", err)
        self.assertTrue(os.path.exists(os.path.join(self.project["path"], "y.txt")))
        result = json.loads(out)
        self.assertEqual(set(result), RESULT_KEYS)
        self.assertEqual((result["sessionid"], result["status"], result["text"]), (ask["sessionid"], "done", "written"))
        self.assertEqual(result["files"], ["y.txt"])
        self.assertEqual(result["questions"], [{"kind": "permission", "tool": "write", "asked": "y.txt",
                                                "answer": "once"}])

    async def test_ctrl_c_while_it_streams_aborts_the_run_and_exits_130(self):
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
        sessionid = await self.newest_session()
        # The client exits once Sessions|abort answered, and that answers once the run ended.
        self.assertFalse(self.app.runs.is_running(sessionid))
        self.assertEqual((await self.api("sessions_read", ident=sessionid))["status"], "aborted")


class CliEndsTest(CliCase):
    async def test_a_client_that_cannot_write_aborts_its_run(self):
        """The reader of the answer goes away in the middle of it: the client says so, exits 1,
        and aborts the server's run rather than leave it going without anyone."""
        release = threading.Event()
        self.addCleanup(release.set)
        self.model.script(reply(tool_calls=[("write", {"path": "z.txt", "content": "z"})]),
                          reply("the answer nobody reads", release=release, hold_after=2))
        reading, writing = os.pipe()
        process = await self.start("write z", stdout=writing)
        os.close(writing)
        ask = await self.waiting_question()
        os.close(reading)  # the next write of the client fails (EPIPE)
        await self.api("permissions_reply", {"reply": "once"}, ident=ask["data"]["id"])
        code, _out, err = await self.finish(process)
        self.assertEqual(code, 1, err)
        self.assertIn("cannot write the answer", err)
        ended = await self.event(lambda event: event["type"] == "session.status"
                                 and event["data"]["status"] != "running")
        self.assertEqual(ended["data"]["status"], "aborted")
        self.assertEqual((await self.api("sessions_read", ident=ask["sessionid"]))["status"], "aborted")


    async def test_a_result_that_cannot_be_written_exits_1(self):
        self.model.script(reply("done"))
        reading, writing = os.pipe()
        process = await self.start("--format", "json", "hi", stdout=writing)
        os.close(writing)
        os.close(reading)
        code, _out, err = await self.finish(process)
        self.assertEqual(code, 1, err)
        self.assertIn("cannot write the result", err)
        self.assertEqual((await self.api("sessions", query=f"projectid={self.project['id']}"))["sessions"][0]["status"],
                         "idle")  # the run itself ended well


class CliSignalTest(CliCase):
    """SIGINT, SIGTERM and SIGHUP (each its own test) while a permission question waits: the
    client says which, exits 130, and the server's run ends aborted with no question left open
    (nobody can approve it later)."""

    async def signal_while_a_question_waits(self, number: signal.Signals, *args: str) -> tuple[str, dict]:
        self.model.script(reply(tool_calls=[("write", {"path": "w.txt", "content": "w"})]))
        process = await self.start(*args, "write w")
        ask = await self.waiting_question()
        sessionid = ask["sessionid"]
        self.assertEqual((await self.api("sessions_read", ident=sessionid))["waiting"], 1)
        # The test's connection may hear the question before the client's does: signal once the
        # client has it, so that its result can list it.
        told = await self.told(process, "waits for your approval")
        process.send_signal(number)
        code, out, err = await self.finish(process)
        err = told + err
        self.assertEqual(code, 130, err)
        self.assertIn(f"interrupted ({number.name}); the run was aborted", err)
        replied = await self.event(lambda event: event["type"] == "permission.replied")
        self.assertEqual(replied["data"], {"id": ask["data"]["id"], "reply": "reject"})
        ended = await self.event(lambda event: event["type"] == "session.status" and event["sessionid"] == sessionid)
        self.assertEqual(ended["data"]["status"], "aborted")
        session = await self.api("sessions_read", ident=sessionid)
        self.assertEqual((session["status"], session["waiting"]), ("aborted", 0))
        self.assertEqual(self.app.runs.questions.waiting(sessionid), [])
        self.assertFalse(os.path.exists(os.path.join(self.project["path"], "w.txt")))
        return out, ask

    async def test_sigint(self):
        await self.signal_while_a_question_waits(signal.SIGINT)

    async def test_sigterm(self):
        """Also with --format json: the object still comes, status interrupted, exit 130, and
        the question that the abort ended without an answer."""
        out, ask = await self.signal_while_a_question_waits(signal.SIGTERM, "--format", "json")
        result = json.loads(out)
        self.assertEqual((result["sessionid"], result["status"], result["exit"]), (ask["sessionid"], "interrupted", 130))
        self.assertEqual(result["questions"], [{"kind": "permission", "tool": "write", "asked": "w.txt",
                                                "answer": None}])

    async def test_sighup(self):
        await self.signal_while_a_question_waits(signal.SIGHUP)


    async def test_a_signal_before_the_prompt_ends_the_client_at_once(self):
        """Blocked reading a standard input that never ends, the client still ends on SIGTERM:
        exit 130, nothing sent, no session made."""
        process = await self.start("review this", stdin=b"")
        await handlers_installed(process.pid, signal.SIGTERM)
        process.send_signal(signal.SIGTERM)
        code, out, err = await self.finish(process)
        self.assertEqual((code, out), (130, ""), err)
        self.assertIn("interrupted (SIGTERM) before the prompt was sent; nothing ran", err)
        self.assertEqual((await self.api("sessions", query=f"projectid={self.project['id']}"))["sessions"], [])
        self.assertEqual(self.model.requests, [])


async def handlers_installed(pid: int, number: signal.Signals, timeout_ms: float = 20_000) -> None:
    """Wait until the process catches `number` (its SigCgt mask in /proc): the client's
    handlers are in place, so the signal tests what they do and not Python's default."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms * MS
    while loop.time() < deadline:
        with open(f"/proc/{pid}/status") as handle:
            caught = next(int(line.split()[1], 16) for line in handle if line.startswith("SigCgt:"))
        if caught & (1 << (number - 1)):
            return
        await asyncio.sleep(5 * MS)
    raise AssertionError(f"process {pid} does not catch {number.name}")


class CliScriptTest(CliCase):
    """What scripts and CI jobs need: standard input with the argument, the usage errors, the
    final JSON object, the session flags."""

    async def test_standard_input_comes_after_the_argument_as_a_fenced_block(self):
        self.model.script(reply("reviewed"))
        piped = b"diff --git a/x b/x\n+```js\n+code\n"
        code, out, err = await self.finish(await self.start("review this", stdin=b""), piped)
        self.assertEqual(code, 0, err)
        sent = self.model.requests[0].body["messages"][-1]["content"]
        # A fence longer than the run of backticks inside, so that the input cannot close it.
        self.assertEqual(sent, "review this\n\n````\ndiff --git a/x b/x\n+```js\n+code\n````\n")

    async def test_standard_input_from_a_socket_and_not_utf8(self):
        """A Node or libuv parent gives its child a socket, not a pipe: it is read the same; a
        byte that is not UTF-8 becomes U+FFFD instead of ending the client."""
        self.model.script(reply("reviewed"))
        ours, theirs = socket.socketpair()
        with ours, theirs:
            process = await self.start("review this", stdin=theirs)
            theirs.close()
            ours.sendall(b"caf\xe9\n")
            ours.shutdown(socket.SHUT_WR)
            code, _out, err = await self.finish(process)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.model.requests[0].body["messages"][-1]["content"], "review this\n\n```\ncaf\ufffd\n```\n")

    async def test_usage_errors_exit_2(self):
        for args, stdin, words in ((("--format", "xml", "hi"), None, "invalid choice"), ((), b"  \n", "no prompt"),
                                   (("--nosuchflag", "hi"), None, "unrecognized arguments"),
                                   (("--session", "a", "--continue", "hi"), None, "not allowed with")):
            code, _out, err = await self.finish(await self.start(*args, stdin=stdin), stdin)
            self.assertEqual(code, 2, (args, err))
            self.assertIn(words, err)
        self.assertEqual(self.model.requests, [])

    async def test_a_config_with_port_0_is_a_usage_error_not_a_connection(self):
        """`port = 0` means a port picked at each start: the client says so (exit 2) instead of
        connecting to port 0, and the config's token is not printed."""
        config = os.path.join(self.tmp, "config.ini")
        with open(config, "w") as handle:
            handle.write(f"[totem]\nport = 0\ntoken = {TOKEN}\ndata = {self.tmp}/data\n")
        process = await asyncio.create_subprocess_exec(
            sys.executable, os.path.join(ROOT, "totem.py"), "run", "--config", config, "--project",
            self.project["path"], "hi", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        code, out, err = await self.finish(process)
        self.assertEqual((code, out), (2, ""))
        self.assertIn("config.ini says port = 0", err)
        self.assertIn("--url", err)
        self.assertEqual((await self.api("sessions", query=f"projectid={self.project['id']}"))["sessions"], [])

    async def test_help_documents_the_exit_codes(self):
        code, out, err = await self.finish(await self.start("--help"))
        self.assertEqual(code, 0, err)
        flat = " ".join(out.split())
        self.assertIn("exit codes: 0 done, 1 failed, 2 usage, 3 a question was rejected or could not be answered, "
                      "130 interrupted (SIGINT, SIGTERM and SIGHUP abort the server's run first)", flat)
        self.assertIn("--format {text,json,jsonl}", flat)

    async def test_json_prints_one_object_with_the_result(self):
        """`--format json`: one object at the end, in the documented shape, and nothing else."""
        self.model.script(reply(tool_calls=[("write", {"path": "new.txt", "content": "n\n"})]),
                          reply("Wrote new.txt."))
        code, out, err = await self.finish(await self.start("--format", "json", "--reject-asks", "make new.txt"))
        self.assertEqual(code, 3, err)
        result = json.loads(out)
        self.assertEqual(set(result), RESULT_KEYS)
        self.assertEqual((result["status"], result["exit"], result["error"]), ("refused", 3, None))
        self.assertEqual(result["sessionid"], await self.newest_session())
        self.assertEqual(result["text"], "Wrote new.txt.")
        self.assertEqual(set(result["tokens"]), {"input", "output", "cost"})
        self.assertGreater(result["tokens"]["output"], 0)
        self.assertEqual(result["files"], [])
        self.assertEqual(result["questions"], [{"kind": "permission", "tool": "write", "asked": "new.txt",
                                                "answer": "reject"}])
        messages = (await self.api("sessions_messages", ident=result["sessionid"]))["messages"]
        self.assertEqual(result["messageid"], messages[-1]["id"])
        self.assertEqual(messages[-1]["role"], "assistant")

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

    async def test_a_new_session_of_a_project_without_one_takes_the_model_of_config_ini(self):
        """config.ini's `model` when nothing else names one (without it the same run exits 1:
        test_continue_and_the_default_model); the project's latest session's model comes first."""
        config = os.path.join(self.tmp, "with-model.ini")
        with open(config, "w") as handle:
            handle.write(f"[totem]\nmodel = {self.modelref}\n")
        self.model.script(reply("from config"), reply("from the latest session"))
        first = await self.json_run("--config", config, "one")
        self.assertEqual((first["text"], first["status"]), ("from config", "done"))
        self.assertEqual((await self.api("sessions_read", ident=first["sessionid"]))["model"], self.modelref)
        with open(config, "w") as handle:
            handle.write("[totem]\nmodel = nosuch/model\n")
        second = await self.json_run("--config", config, "two")
        self.assertNotEqual(second["sessionid"], first["sessionid"])
        self.assertEqual(second["text"], "from the latest session")

    async def test_session_prompts_that_session(self):
        """--session ID prompts that session (with its model); an unknown one exits 1, saying so."""
        self.model.script(reply("first"), reply("again"))
        first = await self.json_run("one", model=True)
        again = await self.json_run("--session", first["sessionid"], "two")
        self.assertEqual((again["sessionid"], again["text"]), (first["sessionid"], "again"))
        code, _out, err = await self.finish(await self.start("--session", "nosuchsession", "three"))
        self.assertEqual(code, 1)
        self.assertIn("404", err)
        self.assertEqual(len(self.model.requests), 2)

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


class CliUnattendedTest(CliCase):
    """What a CI job lets its run do without anyone there, said up front and for that run only."""

    async def test_allow_runs_that_command_and_stores_nothing(self):
        self.model.script(reply(tool_calls=[("bash", {"command": "echo from-ci"})]), reply("Ran it."))
        code, out, err = await self.finish(await self.start("--format", "json", "--reject-asks",
                                                            "--allow", "echo from-ci", "run it"))
        self.assertEqual(code, 0, err)
        result = json.loads(out)
        self.assertEqual((result["status"], result["questions"]), ("done", []))
        messages = (await self.api("sessions_messages", ident=result["sessionid"]))["messages"]
        tool = next(part for message in messages for part in message["parts"] if part["kind"] == "tool")
        self.assertEqual((tool["status"], tool["data"]["decision"]["rule"]["layer"]), ("done", "run"))
        self.assertIn("from-ci", tool["text"])
        rules = await self.api("permissions", query=f"projectid={self.project['id']}")
        self.assertFalse([rule for rule in rules if "from-ci" in rule["pattern"]], rules)
        # Control: the same job without --allow is refused (exit 3).
        self.model.script(reply(tool_calls=[("bash", {"command": "echo from-ci"})]), reply("Refused."))
        code, _out, err = await self.finish(await self.start("--reject-asks", "run it"))
        self.assertEqual(code, 3, err)

    async def test_allow_takes_any_tool_by_name_and_autoaccept_edits(self):
        """`Bash(echo *)` and `write(out.txt)` by the tool's name; --autoaccept lets the other
        edit through (the session keeps it on, as the prompt box's switch does)."""
        self.model.script(reply(tool_calls=[("bash", {"command": "echo two"})]),
                          reply(tool_calls=[("write", {"path": "out.txt", "content": "o\n"})]),
                          reply(tool_calls=[("write", {"path": "other.txt", "content": "p\n"})]), reply("Done."))
        code, out, err = await self.finish(await self.start("--format", "json", "--reject-asks", "--allow",
                                                            "Bash(echo *)", "--allow", "write(out.txt)", "go"))
        result = json.loads(out)
        self.assertEqual((code, [q["asked"] for q in result["questions"]]), (3, ["other.txt"]), err)
        user = next(m for m in (await self.api("sessions_messages", ident=result["sessionid"]))["messages"]
                    if m["role"] == "user")
        self.assertEqual(user["data"]["allow"], [{"tool": "bash", "pattern": "echo *"},
                                                 {"tool": "write", "pattern": "out.txt"}])
        self.model.script(reply(tool_calls=[("write", {"path": "other.txt", "content": "p\n"})]), reply("Done."))
        code, out, err = await self.finish(await self.start("--format", "json", "--reject-asks", "--autoaccept", "go"))
        result = json.loads(out)
        self.assertEqual((code, result["questions"]), (0, []), err)
        for name, content in (("out.txt", "o\n"), ("other.txt", "p\n")):
            with open(os.path.join(self.project["path"], name)) as handle:
                self.assertEqual(handle.read(), content)
        self.assertTrue((await self.api("sessions_read", ident=result["sessionid"]))["autoaccept"])

    async def test_max_cost_ends_the_run_and_exits_1(self):
        def step(number: int):
            stream = reply(tool_calls=[("grep", {"pattern": f"line {number}"})], usage=False)
            stream.events.append(chunk(usage={"prompt_tokens": 10, "completion_tokens": 5, "cost": 0.03},
                                       choices=False))
            return stream
        self.model.script(step(1), step(2), step(3), reply("never"))
        code, out, err = await self.finish(await self.start("--format", "json", "--max-cost", "0.05", "look"))
        result = json.loads(out)
        self.assertEqual((code, result["status"], result["exit"]), (1, "failed", 1), err)
        self.assertIn("spending limit of $0.0500", result["error"])
        self.assertEqual(len(self.model.requests), 2)
        self.assertAlmostEqual(result["tokens"]["cost"], 0.06)

    async def test_bad_flags_exit_2_and_a_bad_rule_exits_1_with_the_servers_reason(self):
        for args, words in ((("--max-cost", "-1", "hi"), "US dollars"), (("--max-cost", "nan", "hi"), "US dollars"),
                            (("--max-cost", "lots", "hi"), "US dollars"), (("--allow", " ", "hi"), "TOOL(PATTERN)")):
            with self.subTest(args=args):
                code, _out, err = await self.finish(await self.start(*args))
                self.assertEqual(code, 2, err)
                self.assertIn(words, err)
        code, _out, err = await self.finish(await self.start("--allow", "nosuch(x)", "hi"))
        self.assertEqual(code, 1, err)
        self.assertIn("allow[0].tool", err)
        self.assertEqual(self.model.requests, [])


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
