"""The terminal of a session, with a real pty and a real shell, through the HTTP API and the
WebSocket: start, type and read, resize, reattach with the scrollback, stop and exit, the
environment, scrubbing, a flood of output, bounds and the end of the shell with its session."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import resource
import subprocess
import time

from tests.utils import MS, TotemCase, call, next_event, open_ws
from totem.process import terminal

KEY = "sk-term-NEVER-LEAK-0123456789abcdef"


def typed(text: str) -> dict:
    return {"data": base64.b64encode(text.encode()).decode()}


def read(path: str) -> str:
    with open(path) as stream:
        return stream.read()


class TerminalCase(TotemCase):
    settings = {"terminalshell": "/bin/sh"}

    async def asyncSetUp(self):
        await super().asyncSetUp()
        project = await self.open_project()
        self.project = project
        self.session = await self.create_session(project["id"])
        self.sid = self.session["id"]
        self.ws = await open_ws(self.app)
        self.addAsyncCleanup(self.ws.close)
        await self.ws.send(json.dumps({"type": "subscribe", "sessionid": self.sid}))
        self.output = ""
        self.events: list[dict] = []

    async def start(self, **size) -> dict:
        answer = await call(self.app, "sessions_terminal", {"start": True, **size}, ident=self.sid)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    async def type(self, text: str) -> None:
        answer = await call(self.app, "sessions_terminalinput", typed(text), ident=self.sid)
        self.assertEqual(answer.status, 200, answer.body)

    async def read_until(self, wanted: str, timeout_ms: float = 5000) -> str:
        deadline = time.monotonic() + timeout_ms * MS
        while wanted not in self.output:
            left = deadline - time.monotonic()
            if left <= 0:
                self.fail(f"{wanted!r} never came; the terminal showed {self.output[-500:]!r}")
            event = await next_event(self.ws, left / MS)
            self.events.append(event)
            if event["type"] == "terminal.output":
                self.output += event["data"]["text"]
        return self.output

    async def exit_event(self, timeout_ms: float = 5000) -> dict:
        deadline = time.monotonic() + timeout_ms * MS
        while True:
            event = await next_event(self.ws, max(deadline - time.monotonic(), 0.001) / MS)
            if event["type"] == "terminal.output":
                self.output += event["data"]["text"]
            if event["type"] == "terminal.exit":
                return event


class TerminalTest(TerminalCase):
    async def test_type_a_command_and_read_its_output(self):
        """A started shell runs in the project folder; what it prints arrives as terminal.output."""
        state = await self.start()
        self.assertEqual(state["status"], "running")
        await self.type("echo hello-$((6*7)); pwd\n")
        output = await self.read_until(self.project["path"])
        self.assertIn("hello-42", output)

    async def test_the_shell_owns_its_terminal(self):
        """The pty is the shell's controlling terminal: `tty` names it and job control works."""
        await self.start()
        await self.type("tty; echo done-$((1+1))-$?\n")
        output = await self.read_until("done-2-")
        self.assertIn("/dev/pts/", output)
        self.assertIn("done-2-0", output)

    async def test_resize(self):
        """The size given at the start and on resize is what `stty size` reads."""
        await self.start(columns=100, rows=30)
        await self.type("stty size\n")
        await self.read_until("30 100")
        answer = await call(self.app, "sessions_terminalresize", {"columns": 120, "rows": 40}, ident=self.sid)
        self.assertEqual(answer.status, 200)
        await self.type("stty size\n")
        await self.read_until("40 120")

    async def test_reattach_gets_the_scrollback(self):
        """Opening again (without start) reattaches: the same shell, with what it printed."""
        await self.start()
        await self.type("echo first-$((1+1)); X=kept\n")
        await self.read_until("first-2")
        again = await call(self.app, "sessions_terminal", {}, ident=self.sid)
        self.assertEqual(again.json()["status"], "running")
        self.assertIn("first-2", again.json()["output"])
        restart = await call(self.app, "sessions_terminal", {"start": True}, ident=self.sid)
        self.assertIn("first-2", restart.json()["output"])  # start on a running shell reattaches
        await self.type("echo value-$X\n")
        await self.read_until("value-kept")

    async def test_stop_sends_the_exit_event(self):
        """Stopping hangs up the shell and its group; terminal.exit follows; typing is refused."""
        await self.start()
        await self.type("sleep 300 &\necho bg-$((1+1))-$$.\n")
        group = re.search(r"bg-2-(\d+)\.", await self.read_until("bg-2-")).group(1)
        answer = await call(self.app, "sessions_terminalstop", {}, ident=self.sid)
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.json()["status"], "exited")
        event = await self.exit_event()
        self.assertIn("status", event["data"])
        refused = await call(self.app, "sessions_terminalinput", typed("echo x\n"), ident=self.sid)
        self.assertEqual(refused.status, 400)
        await asyncio.sleep(100 * MS)
        processes = subprocess.run(["ps", "-eo", "pgid,args"], capture_output=True, text=True, check=True).stdout
        self.assertFalse([line for line in processes.splitlines() if line.split()[:1] == [group]])

    async def test_shell_that_exits_by_itself(self):
        """`exit 3` ends the shell: terminal.exit with status 3, the state says exited."""
        await self.start()
        await self.type("exit 3\n")
        event = await self.exit_event()
        self.assertEqual(event["data"]["status"], 3)
        state = (await call(self.app, "sessions_terminal", {}, ident=self.sid)).json()
        self.assertEqual((state["status"], state["exit"]), ("exited", 3))

    async def test_environment_holds_nothing_of_the_server(self):
        """The shell gets the minimal environment and TERM=xterm-256color, nothing else."""
        os.environ["TOTEM_SECRET_PROBE"] = "server-only-value"
        self.addCleanup(os.environ.pop, "TOTEM_SECRET_PROBE", None)
        await self.start()
        await self.type("env | sed 's/^/ENV:/'; echo env-$((1+1))\n")
        output = await self.read_until("env-2\r\n")
        self.assertIn("TERM=xterm-256color", output)
        self.assertNotIn("server-only-value", output)
        names = {line[4:].split("=", 1)[0] for line in output.replace("\r", "").split("\n")
                 if line.startswith("ENV:") and "=" in line}
        self.assertIn("PATH", names)
        self.assertLessEqual(names - {"PATH", "HOME", "USER", "LANG", "TERM", "SHELL", "PWD", "OLDPWD",
                                      "SHLVL", "_", "PS1", "PS2", "PS4", "OPTIND", "IFS", "PPID"}
                             - {name for name in names if name.startswith("GIT_")}, set())

    async def test_input_over_the_limit_is_refused(self):
        """Input over MAX_INPUT_BYTES, and input that is not base64, are 400 and change nothing."""
        await self.start()
        big = {"data": base64.b64encode(b"x" * (terminal.MAX_INPUT_BYTES + 1)).decode()}
        self.assertEqual((await call(self.app, "sessions_terminalinput", big, ident=self.sid)).status, 400)
        bad = await call(self.app, "sessions_terminalinput", {"data": "not base64!"}, ident=self.sid)
        self.assertEqual(bad.status, 400)
        self.assertIn("base64", bad.body.decode())
        for body in ({"columns": 1, "rows": 10}, {"columns": 80, "rows": 0}, {"columns": 80}):
            self.assertEqual((await call(self.app, "sessions_terminalresize", body, ident=self.sid)).status, 400)

    async def test_no_shell_yet(self):
        """Without start nothing runs: the state is none and typing is refused with a reason."""
        state = await call(self.app, "sessions_terminal", {}, ident=self.sid)
        self.assertEqual(state.json(), {"status": "none", "output": ""})
        refused = await call(self.app, "sessions_terminalinput", typed("ls\n"), ident=self.sid)
        self.assertEqual(refused.status, 400)
        self.assertIn("open the terminal", refused.body.decode())

    async def test_removing_the_session_ends_the_shell(self):
        """The shell and what it started end with their session."""
        await self.start()
        await self.type("echo $$ > shell.pid; sleep 300\n")
        pidfile = os.path.join(self.project["path"], "shell.pid")
        for _ in range(200):
            if os.path.exists(pidfile) and read(pidfile).strip():
                break
            await asyncio.sleep(10 * MS)
        pid = int(read(pidfile))
        answer = await call(self.app, "sessions_remove", {}, ident=self.sid)
        self.assertEqual(answer.status, 200)
        for _ in range(200):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            await asyncio.sleep(10 * MS)
        else:
            self.fail("the shell outlived its session")

    async def test_unknown_session(self):
        answer = await call(self.app, "sessions_terminal", {"start": True}, ident="nosuchsession")
        self.assertEqual(answer.status, 404)


class TerminalScrubTest(TerminalCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        answer = await call(self.app, "providers_save", {"name": "P", "kind": "openai",
                                                         "url": "http://127.0.0.1:9/v1", "key": KEY})
        self.assertEqual(answer.status, 200, answer.body)

    async def test_key_echoed_arrives_scrubbed(self):
        """A key printed in two writes, or with colour codes inside it, never reaches a client or
        the scrollback."""
        half = len(KEY) // 2
        await self.start()
        await self.type(f"printf '%s' '{KEY[:half]}'; sleep 0.05; printf '%s\\n' '{KEY[half:]}'; "
                        f"printf '{KEY[:half]}\\033[31m{KEY[half:]}\\033[0m\\n'; echo scrub-$((1+1))\n")
        output = await self.read_until("scrub-2\r\n")
        state = (await call(self.app, "sessions_terminal", {}, ident=self.sid)).json()
        for text in (output, state["output"]):
            self.assertNotIn(KEY, text.replace("\x1b[31m", "").replace("\x1b[0m", ""))
            self.assertIn("[secret:", text)


    async def test_the_start_of_a_key_shows_once_the_shell_is_quiet(self):
        """Output that may still become a key is held while more may come, and shows once the
        shell has been quiet a moment: the person sees what they typed."""
        await self.start()
        start = KEY[:6]
        await self.type(f"printf 'typed %s' '{start}'\n")
        await self.read_until(f"typed {start}", 20_000)
        self.assertNotIn(KEY, self.output)


class TerminalFloodTest(TerminalCase):
    async def test_a_flood_keeps_memory_flat_and_events_bounded(self):
        """`yes | head -c 30M` through the pty: all of it arrives, in order, no more than one
        event per BATCH_S, and the server's memory grows by a bounded amount."""
        await self.start()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        await self.type("yes | head -c 30M; echo pty-$((40+3))\n")
        received, events, tail = 0, 0, ""
        while "pty-43" not in tail:
            event = await next_event(self.ws, 60_000)
            if event["type"] != "terminal.output":
                continue
            events += 1
            received += len(event["data"]["text"])
            tail = (tail + event["data"]["text"])[-200:]
        elapsed = time.monotonic() - started
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        self.assertGreater(received, 30_000_000)  # every "y\n" became "y\r\n" on the pty
        self.assertLessEqual(events, elapsed / terminal.BATCH_S + 5)
        self.assertLess(grown_mb, 150, f"the server grew by {grown_mb:.0f} MB")
        state = (await call(self.app, "sessions_terminal", {}, ident=self.sid)).json()
        self.assertLessEqual(len(state["output"]), terminal.SCROLLBACK_CHARS)
