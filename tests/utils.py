"""Test helpers: the real server on a free loopback port, and small real clients for it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
import unittest
from dataclasses import dataclass

from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from totem.app import App
from totem.config import parse_values
from totem.events import PartDelta

# Every wait in the tests is expressed in this unit; raise TOTEM_TEST_SLOWDOWN on a slow machine.
MS = 0.001 * float(os.environ.get("TOTEM_TEST_SLOWDOWN", "1"))
TOKEN = "correct-horse-battery-staple"
JSON_TYPE = "application/json"


@contextlib.asynccontextmanager
async def running_totem(tmpdir: str, rules: dict | None = None, **settings):
    """Start the real app on 127.0.0.1 port 0 with a temporary data folder; yield the App.

    `rules` is the [rules] section of the configuration (NAME -> "ACTION TOOL PATTERN"). Without
    a `token` setting the server has none (`token = none`): tests of the sign-in give one."""
    raw = {"listen": "127.0.0.1", "port": "0", "data": os.path.join(tmpdir, "data"), "token": "none",
           "instructions": os.path.join(tmpdir, "personal", "AGENTS.md")}  # never the tester's own
    raw.update({key: str(value) for key, value in settings.items()})
    app = App(parse_values(raw, tmpdir, rules))
    await app.start()
    try:
        await app.ready()  # the core too: tests reach for the runs, the services and the jobs
        yield app
    finally:
        await app.stop()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    raw_headers: list[tuple[str, str]]

    def json(self):
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


async def read_answer(reader: asyncio.StreamReader, head_only: bool = False) -> Answer:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    raw_headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            raw_headers.append((name.strip(), value.strip()))
    headers = {name.lower(): value for name, value in raw_headers}
    length = int(headers.get("content-length", "0"))
    body = b"" if head_only else await reader.readexactly(length)
    return Answer(status, headers, body, raw_headers)


async def request(app, method: str, path: str, body=None, headers: dict | None = None,
                  raw_body: bytes | None = None, host: str | None = None,
                  content_type: str | None = JSON_TYPE) -> Answer:
    """One HTTP request on a new connection; JSON-encodes `body`.

    A request with `body` or `raw_body` (even b"") carries `content_type` unless it is None or
    `headers` name a Content-Type themselves; a request with neither carries no Content-Type."""
    reader, writer = await asyncio.open_connection("127.0.0.1", app.port)
    try:
        payload = raw_body if raw_body is not None else (b"" if body is None else json.dumps(body).encode())
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{app.port}'}",
                 "Connection: close"]
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        if payload or method == "POST":
            lines.append(f"Content-Length: {len(payload)}")
        has_type = any(name.lower() == "content-type" for name in (headers or {}))
        if (body is not None or raw_body is not None) and content_type is not None and not has_type:
            lines.append(f"Content-Type: {content_type}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
        await writer.drain()
        return await read_answer(reader, head_only=method == "HEAD")
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def call(app, name: str, body=None, ident: str | None = None, query: str = "", headers=None,
               method: str | None = None) -> Answer:
    """Call an API action: POST with a body, GET without one (unless method says otherwise)."""
    path = f"/api/{name}" + (f"/{ident}" if ident else "") + (f"?{query}" if query else "")
    return await request(app, method or ("POST" if body is not None else "GET"), path, body, headers)


def ws_url(app) -> str:
    return f"ws://127.0.0.1:{app.port}/ws/"


async def open_ws(app, **kwargs):
    """A client of /ws/. It reads everything it is sent unless a test bounds its queue (max_queue)
    to play a slow reader: a bounded client that a test left unread stops reading its socket, so
    it never sees the server's close and its own close() waits out close_timeout (10 s)."""
    kwargs.setdefault("max_queue", None)
    return await ws_connect(ws_url(app), **kwargs)


async def next_event(ws, timeout_ms: float = 2000) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout_ms * MS))


class TotemCase(unittest.IsolatedAsyncioTestCase):
    """A test with a running Totem in `self.app` and a temporary folder in `self.tmp`."""

    settings: dict = {}
    rules: dict | None = None  # the [rules] section of the configuration

    async def asyncSetUp(self):
        self.tmp = self.make_tmp()
        self._server = running_totem(self.tmp, self.rules, **self.settings)
        self.app = await self._server.__aenter__()

    async def asyncTearDown(self):
        await self._server.__aexit__(None, None, None)

    def make_tmp(self) -> str:
        """The test's temporary folder (the data folder and the projects go in it), removed after."""
        tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-test-"))
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        return tmp

    def folder(self, name: str) -> str:
        path = os.path.join(self.tmp, name)
        os.makedirs(path, exist_ok=True)
        return path

    async def open_project(self, name: str = "project") -> dict:
        answer = await call(self.app, "projects_open", {"path": self.folder(name)})
        assert answer.status == 200, answer.body
        return answer.json()

    async def create_session(self, projectid: str, name: str | None = None) -> dict:
        body = {"projectid": projectid} | ({"name": name} if name else {})
        answer = await call(self.app, "sessions_create", body)
        assert answer.status == 200, answer.body
        return answer.json()


def process_stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command's name (state first, then the parent,
    the group, the session, the terminal, its group, the flags), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat[stat.rfind(b")") + 2:].split()


def ended(pid: int) -> bool:
    """Whether process `pid` is over: gone, or a zombie that another process is left to reap (an
    orphan's, init's business, however slow init is to do it). A zombie of this process is not
    over: reaping its own children is the test process's business."""
    fields = process_stat(pid)
    return fields is None or (fields[0] == b"Z" and int(fields[1]) != os.getpid())


PF_KTHREAD = 0x00200000


def command_line(pid: int) -> bytes:
    """The argv of process `pid` as /proc/<pid>/cmdline has it (NUL after each), b"" once it is
    over and for a kernel thread. In the middle of an exec the file reads empty for a moment
    (the new image has no arguments yet): that read is taken again, else a live process would
    look gone."""
    for _ in range(1000):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read()
        except OSError:
            return b""
        fields = process_stat(pid)
        if argv or fields is None or fields[0] == b"Z" or int(fields[6]) & PF_KTHREAD:
            return argv
        time.sleep(1 * MS)
    return b""


def wait_until_ended(pid: int, what) -> None:
    """Poll until process `pid` is over (see `ended`): killed, and reaped by us or, for an orphan,
    left to init. `what` names it in the failure (text, or a callable for what is known only then)."""
    deadline = time.monotonic() + 10_000 * MS
    while time.monotonic() < deadline:
        if ended(pid):
            return
        time.sleep(20 * MS)
    raise AssertionError(f"{what() if callable(what) else what} is still alive")


async def run_ended(app, sessionid: str, timeout_ms: float = 20_000) -> None:
    """Wait until the session has no run (its run and any queued after it ended)."""
    deadline = time.monotonic() + timeout_ms * MS
    while time.monotonic() < deadline:
        if not app.runs.is_running(sessionid):
            return
        await asyncio.sleep(5 * MS)
    raise AssertionError(f"session {sessionid} is still running")


# A client that does not read takes what the sockets of both ends buffer (a few MB on loopback)
# before anything waits in the server: events are published until it is dropped, within this.
MAX_PUBLISHED_BYTES = 64 * 1024 * 1024


async def publish_until_dropped(app, sessionid: str, size: int) -> int:
    """Publish part.delta events of `size` characters (each starting with its index) to a
    client that does not read, without letting the loop run, until the server drops it as too
    slow; returns how many were published. Fails if it never is."""
    with unittest.TestCase().assertLogs("totem.websocket", logging.INFO) as logs:
        for index in range(MAX_PUBLISHED_BYTES // size):
            app.hub.publish(PartDelta(sessionid, "p", f"{index:06d}" + "y" * (size - 6)))
            if logs.records:
                break
    messages = [record.getMessage() for record in logs.records]
    assert [message[:30] for message in messages] == ["WebSocket client too slow, clo"], messages
    return index + 1


async def read_until_closed(ws) -> list[dict]:
    received = []
    try:
        while True:
            received.append(await next_event(ws))
    except ConnectionClosed:
        return received
