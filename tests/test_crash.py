"""Crash safety and start-up refusals, with `python totem.py` as a real process.

A process killed with SIGKILL while it writes must lose nothing that it answered 200 for, and a
bad configuration must stop the start with one line that names the key."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

from tests.utils import MS, call
from totem.store import DATABASE_FILE, STOPPED_DURING_RUN

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "totem.py")
START_MS = 15_000
EXIT_MS = 10_000
POLL_MS = 10
ACKNOWLEDGED_SESSIONS = 40
WORKERS = 4
SESSIONS_PER_PROJECT = 3


def free_port() -> int:
    """A port that was free a moment ago (the server needs to know it before it starts)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TotemProcess:
    """`python totem.py --config <tmp>/config.ini`, with its output in files."""

    def __init__(self, folder: str, name: str, settings: dict[str, str]):
        self.folder = folder
        self.config = os.path.join(folder, f"{name}.ini")
        self.stdout_path = os.path.join(folder, f"{name}.out")
        self.stderr_path = os.path.join(folder, f"{name}.err")
        port = settings.get("port", "0")
        self.port = int(port) if port.isdigit() else 0
        with open(self.config, "w", encoding="utf-8") as handle:
            handle.write("[totem]\n")
            for key, value in settings.items():
                handle.write(f"{key} = {value}\n")
        self.process: subprocess.Popen | None = None

    def launch(self) -> None:
        # As a person starts it: asyncio's debug mode of the test run would add its own warnings
        # (a slow callback on a loaded machine) to the output these tests read line by line.
        env = {key: value for key, value in os.environ.items() if key != "PYTHONASYNCIODEBUG"}
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen([sys.executable, LAUNCHER, "--config", self.config], env=env,
                                            cwd=self.folder, stdout=out, stderr=err, stdin=subprocess.DEVNULL)

    def output(self) -> tuple[str, str]:
        with open(self.stdout_path, encoding="utf-8", errors="replace") as out, \
                open(self.stderr_path, encoding="utf-8", errors="replace") as err:
            return out.read(), err.read()

    async def started(self) -> None:
        """Wait for the listening line. Raises AssertionError if the process exits or hangs."""
        deadline = time.monotonic() + START_MS * MS
        while time.monotonic() < deadline:
            stdout, stderr = self.output()
            if "Totem is listening on" in stdout:
                return
            if self.process.poll() is not None:
                raise AssertionError(f"totem exited with {self.process.returncode}: {stderr}")
            await asyncio.sleep(POLL_MS * MS)
        raise AssertionError(f"totem did not start: {self.output()}")

    async def exited(self) -> int:
        """Wait for the process to end on its own; returns its exit code."""
        deadline = time.monotonic() + EXIT_MS * MS
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"totem did not exit: {self.output()}")
            await asyncio.sleep(POLL_MS * MS)
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a power cut of the process."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    async def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return await self.exited()


class ProcessCase(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-crash-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.data = os.path.join(self.tmp, "data")
        self.processes: list[TotemProcess] = []
        self.addCleanup(self._kill_all)

    def _kill_all(self):
        for process in self.processes:
            process.kill()

    def make(self, name: str, **settings) -> TotemProcess:
        values = {"listen": "127.0.0.1", "port": str(free_port()), "data": self.data, "token": "none"}
        values.update({key: str(value) for key, value in settings.items()})
        process = TotemProcess(self.tmp, name, values)
        self.processes.append(process)
        return process

    async def start(self, name: str, **settings) -> TotemProcess:
        process = self.make(name, **settings)
        process.launch()
        await process.started()
        return process

    def folder(self, name: str) -> str:
        path = os.path.join(self.tmp, "work", name)
        os.makedirs(path, exist_ok=True)
        return path

    async def refused(self, name: str = "refused", **settings) -> str:
        """Start with these settings; assert a non-zero exit and one line; return that line."""
        process = self.make(name, **settings)
        process.launch()
        code = await process.exited()
        stdout, stderr = process.output()
        self.assertNotEqual(code, 0, stderr)
        self.assertNotIn("listening", stdout)
        lines = [line for line in stderr.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, stderr)
        self.assertNotIn("Traceback", stderr)
        return lines[0]


class CrashTest(ProcessCase):
    async def write_until_killed(self, process: TotemProcess) -> tuple[set[str], set[tuple[str, str]]]:
        """Workers open projects and create sessions; SIGKILL lands while they are writing."""
        projects: set[str] = set()
        sessions: set[tuple[str, str]] = set()
        failures: list[str] = []

        async def worker(number: int) -> None:
            for round_ in range(10_000):
                try:
                    answer = await call(process, "projects_open", {"path": self.folder(f"w{number}-{round_}")})
                    if answer.status != 200:
                        failures.append(f"projects_open {answer.status} {answer.body!r}")
                        return
                    projectid = answer.json()["id"]
                    projects.add(projectid)
                    for index in range(SESSIONS_PER_PROJECT):
                        answer = await call(process, "sessions_create", {"projectid": projectid, "name": f"s{index}"})
                        if answer.status != 200:
                            failures.append(f"sessions_create {answer.status} {answer.body!r}")
                            return
                        sessions.add((projectid, answer.json()["id"]))
                except (OSError, asyncio.IncompleteReadError):
                    return  # the server is gone: what it answered before is what counts

        tasks = [asyncio.create_task(worker(number)) for number in range(WORKERS)]
        deadline = time.monotonic() + START_MS * MS
        while len(sessions) < ACKNOWLEDGED_SESSIONS and not failures and time.monotonic() < deadline:
            await asyncio.sleep(POLL_MS * MS / 10)
        process.kill()
        await asyncio.gather(*tasks)
        self.assertEqual(failures, [])
        self.assertGreaterEqual(len(sessions), ACKNOWLEDGED_SESSIONS)
        return projects, sessions

    async def test_crash_kill9_keeps_answered_writes(self):
        """After SIGKILL mid-write, every project and session answered 200 is there on restart."""
        first = await self.start("first")
        projects, sessions = await self.write_until_killed(first)
        self.assertEqual(first.process.returncode, -signal.SIGKILL)

        second = await self.start("second")  # same data folder, another port
        answer = await call(second, "projects")
        self.assertEqual(answer.status, 200, answer.body)
        listed = {project["id"] for project in answer.json()}
        self.assertLessEqual(projects, listed)
        found: set[tuple[str, str]] = set()
        for projectid in listed:
            answer = await call(second, "sessions", query=f"projectid={projectid}")
            self.assertEqual(answer.status, 200, answer.body)
            found.update((projectid, session["id"]) for session in answer.json()["sessions"])
        self.assertLessEqual(sessions, found)
        self.assertEqual(await second.terminate(), 0)
        self.assertNotIn("Traceback", second.output()[1])

        with contextlib.closing(sqlite3.connect(os.path.join(self.data, DATABASE_FILE))) as conn:
            self.assertEqual(conn.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            self.assertEqual(conn.execute("PRAGMA foreign_key_check").fetchall(), [])

    async def test_crash_open_parts_closed_on_restart(self):
        """Parts left open by a crash are closed as `error`; their session and its last message read as failed, with the reason."""
        first = await self.start("first")
        answer = await call(first, "projects_open", {"path": self.folder("p")})
        projectid = answer.json()["id"]
        answer = await call(first, "sessions_create", {"projectid": projectid})
        sessionid = answer.json()["id"]
        first.kill()
        # What a run streaming at the moment of the kill leaves behind.
        with contextlib.closing(sqlite3.connect(os.path.join(self.data, DATABASE_FILE))) as conn, conn:
            stamp = int(time.time() * 1000)
            conn.execute("UPDATE sessions SET status = 'running' WHERE id = ?", (sessionid,))
            conn.execute("INSERT INTO messages (id, sessionid, role, created) VALUES ('m1', ?, 'assistant', ?)",
                         (sessionid, stamp))
            conn.execute("INSERT INTO parts (id, messageid, sessionid, kind, status, text, created, updated)"
                         " VALUES ('p1', 'm1', ?, 'text', 'running', 'half a sen', ?, ?)",
                         (sessionid, stamp, stamp))

        second = await self.start("second")
        answer = await call(second, "sessions_read", ident=sessionid)
        self.assertEqual((answer.json()["status"], answer.json()["error"]), ("error", STOPPED_DURING_RUN))
        answer = await call(second, "sessions_messages", ident=sessionid)
        [message] = answer.json()["messages"]
        self.assertEqual(message["data"], {"ended": "error", "error": STOPPED_DURING_RUN})
        [part] = message["parts"]
        self.assertEqual((part["status"], part["text"]), ("error", "half a sen"))
        self.assertIsNotNone(part["closed"])
        self.assertIsNotNone(message["finished"])


    async def test_crash_during_a_scheduled_run_reads_failed_in_schedules(self):
        """A scheduled run that a kill ended is listed as failed, with the reason, not as idle."""
        first = await self.start("first")
        projectid = (await call(first, "projects_open", {"path": self.folder("p")})).json()["id"]
        provider = (await call(first, "providers_save", {"name": "Local", "kind": "openai",
                                                         "url": "http://127.0.0.1:9/v1"})).json()["id"]
        saved = await call(first, "schedules_save", {"projectid": projectid, "name": "Nightly", "prompt": "check",
                                                     "model": f"{provider}/m", "kind": "interval", "interval": 60})
        self.assertEqual(saved.status, 200, saved.body)
        sessionid = (await call(first, "sessions_create", {"projectid": projectid})).json()["id"]
        first.kill()
        # What a scheduled run streaming at the moment of the kill leaves behind.
        with contextlib.closing(sqlite3.connect(os.path.join(self.data, DATABASE_FILE))) as conn, conn:
            stamp = int(time.time() * 1000)
            conn.execute("UPDATE sessions SET status = 'running', schedule = ? WHERE id = ?",
                         (saved.json()["id"], sessionid))
            conn.execute("UPDATE schedules SET data = json_set(data, '$.last', json(?)) WHERE id = ?",
                         (f'{{"status": "started", "sessionid": "{sessionid}", "time": {stamp}, "note": ""}}',
                          saved.json()["id"]))
        second = await self.start("second")
        [schedule] = (await call(second, "schedules", query=f"projectid={projectid}")).json()
        self.assertEqual((schedule["last"]["status"], schedule["last"]["note"]), ("failed", STOPPED_DURING_RUN))

class StartRefusalTest(ProcessCase):
    async def test_config_bad_value_one_line(self):
        """A bad config value prints one line naming the key (and the value, unless it is the
        token's) and exits non-zero."""
        cases = (("port", "abc"), ("port", "70000"), ("failures", "0"), ("token", "short"),
                 ("cookiesecure", "maybe"), ("listen", "example.com"), ("headtimeout", "-1"))
        # The processes run side by side: each start costs an interpreter.
        lines = await asyncio.gather(*(self.refused(f"bad{number}", **{key: value})
                                       for number, (key, value) in enumerate(cases)))
        for (key, value), line in zip(cases, lines, strict=True):
            with self.subTest(key=key, value=value):
                self.assertIn(f"'{key}'", line)
                if key == "token":
                    self.assertNotIn(value, line)  # a secret is never quoted back
                else:
                    self.assertIn(value, line)

    async def test_config_unknown_key_one_line(self):
        """An unknown key prints one line naming it and exits non-zero."""
        line = await self.refused(colour="blue")
        self.assertIn("'colour'", line)

    async def test_config_missing_file_one_line(self):
        """A --config that names no file prints one line and exits non-zero."""
        process = self.make("missing")
        os.remove(process.config)
        process.launch()
        self.assertNotEqual(await process.exited(), 0)
        lines = [line for line in process.output()[1].splitlines() if line.strip()]
        self.assertEqual(len(lines), 1)
        self.assertIn(process.config, lines[0])

    async def test_listen_all_without_token_refused(self):
        """listen = 0.0.0.0 with token = none refuses to start with a clear line."""
        line = await self.refused(listen="0.0.0.0", token="none")
        self.assertIn("'listen'", line)
        self.assertIn("0.0.0.0", line)
        self.assertIn("token", line)

    async def test_port_in_use_one_line(self):
        """A port that is taken prints one line and exits non-zero."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            line = await self.refused(port=sock.getsockname()[1])
        self.assertIn("cannot listen", line)

    async def test_newer_database_refused(self):
        """A database of a newer schema stops the start with one line, and is left as it was."""
        first = await self.start("first")
        self.assertEqual(await first.terminate(), 0)
        path = os.path.join(self.data, DATABASE_FILE)
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA user_version = 999")
        line = await self.refused()
        self.assertIn("newer", line)
        with contextlib.closing(sqlite3.connect(path)) as conn:
            self.assertEqual(conn.execute("PRAGMA user_version").fetchone()[0], 999)
