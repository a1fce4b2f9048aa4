"""Benchmark of the server's memory against clients that do not read and against a big prompt.

Spawns the real server (bench/startup.py's `running_server`, default settings) and, in this
process, the scripted model of tests/model_server.py. Memory is read from /proc/<pid>/status of
the spawned server: VmRSS (what it holds now) and VmHWM (its peak), the peak being reset before
each measurement by writing 5 to /proc/<pid>/clear_refs (Linux 4.0 and later). MB are 10**6
bytes. It measures and reports; it asserts nothing and changes nothing in totem/.

Figures:
- slow readers: a session filled with PAGE_PROMPTS prompts of PROMPT_CHARS characters (the
  longest text a prompt takes), so that its first page of Sessions|messages is about 4 MB; then
  SLOW_READERS raw sockets (a receive buffer as small as the system allows) each send
  `GET /api/sessions_messages/{id}` at once and read nothing. Once each has its answer's head
  (peeked at, not read), the server's RSS (the < 150 MB target) and its peak while they were
  served; how many got the page (200) and how many were refused for now (503 with Retry-After).
  Then they close, and the RSS a moment later (memory given back);
- a big prompt: Sessions|prompt with a body of PROMPT_BODY_BYTES (a short text and one
  attachment, base64, as the page sends a file), answered by the scripted model: the server's
  peak RSS while it is read, decoded, stored and answered, above its RSS just before (the
  <= 2x the body target).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import sys
import time

from agent import API_TIMEOUT_S, api, read_status_kb
from startup import HOST, ROOT, BenchError, measured_on_server

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # for tests.model_server, which imports nothing of Totem

from tests.model_server import MODEL_ID, ScriptedModel, reply

PROMPT_CHARS = 1_000_000  # the longest text of Sessions|prompt
PAGE_PROMPTS = 5  # a first page of about 4 MB (its byte bound), and more before it
SLOW_READERS = 200
SLOW_RCVBUF_BYTES = 4096  # the kernel rounds it up to its minimum
RSS_TARGET_MB = 150.0
PROMPT_BODY_BYTES = 20_000_000
PROMPT_PEAK_TARGET = 2.0  # times the body
SETTLE_S = 1.0  # after the last head arrived, or the last socket closed, before RSS is read
HEADS_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 60.0
CONNECT_BATCH = 50  # connections opened at once (the listen backlog is not what is measured)
POLL_S = 0.05


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    kb = read_status_kb(pid, field)
    if kb is None:
        raise BenchError("no /proc/<pid>/status here: the memory figures need Linux")
    return kb * 1024 / 1e6


def reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS; False where the kernel does not allow it."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


async def wait_idle(port: int, sessionid: str) -> None:
    """Poll Sessions|read until the session's run (and what was queued behind it) has ended."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        session = await api(port, "sessions_read", ident=sessionid)
        if session["status"] == "idle":
            return
        if session["status"] not in ("running", "queued"):
            raise BenchError(f"the run ended {session['status']}: {session.get('error')}")
        await asyncio.sleep(POLL_S)
    raise BenchError(f"the run did not end within {RUN_TIMEOUT_S} s")


class SlowReader:
    """A raw socket that sends one request and never reads (only peeks at the answer's head)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_RCVBUF_BYTES)
        self.sock.setblocking(False)

    async def send(self, path: str) -> None:
        loop = asyncio.get_running_loop()
        await loop.sock_connect(self.sock, (HOST, self.port))
        head = f"GET {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n\r\n"
        await loop.sock_sendall(self.sock, head.encode("latin-1"))

    def status(self) -> int | None:
        """The answer's status once its head has arrived, else None."""
        try:
            data = self.sock.recv(4096, socket.MSG_PEEK)
        except BlockingIOError:
            return None
        if b"\r\n\r\n" not in data and len(data) < 4096:
            return None
        return int(data.split(b" ", 2)[1])

    def close(self) -> None:
        self.sock.close()


async def fill_page(port: int, model: ScriptedModel, sessionid: str, modelref: str) -> None:
    for index in range(PAGE_PROMPTS):
        model.script(reply("noted"))
        await api(port, "sessions_prompt", {"text": f"{index:03d}" + "x" * (PROMPT_CHARS - 3), "model": modelref},
                  sessionid)
        await wait_idle(port, sessionid)


async def measure_slow_readers(port: int, pid: int, sessionid: str) -> list[tuple]:
    await asyncio.sleep(SETTLE_S)
    idle = rss_mb(pid)
    peaked = reset_peak(pid)
    readers = [SlowReader(port) for _ in range(SLOW_READERS)]
    try:
        path = f"/api/sessions_messages/{sessionid}"
        for start in range(0, SLOW_READERS, CONNECT_BATCH):
            await asyncio.gather(*(reader.send(path) for reader in readers[start:start + CONNECT_BATCH]))
        deadline = time.monotonic() + HEADS_TIMEOUT_S
        while (statuses := [reader.status() for reader in readers]).count(None):
            if time.monotonic() > deadline:
                raise BenchError(f"{statuses.count(None)} of {SLOW_READERS} slow readers had no answer "
                                 f"within {HEADS_TIMEOUT_S} s")
            await asyncio.sleep(POLL_S)
        await asyncio.sleep(SETTLE_S)
        held = rss_mb(pid)
        peak = rss_mb(pid, "VmHWM") if peaked else None
    finally:
        for reader in readers:
            reader.close()
    await asyncio.sleep(SETTLE_S)
    after = rss_mb(pid)
    label = f"memory: {SLOW_READERS} slow readers of a 4 MB page"
    counts = ", ".join(f"{statuses.count(code)} x {code}" for code in sorted(set(statuses)))
    return [("memory: server RSS idle, before them", idle, "MB", "", None),
            (f"{label}, server RSS", held, "MB", f"< {RSS_TARGET_MB:g}", held < RSS_TARGET_MB),
            (f"{label}, server peak RSS (VmHWM)", peak if peak is not None else "n/a", "MB", "", None),
            (f"{label}, answers", counts, "", "", None),
            (f"{label}, server RSS {SETTLE_S:g} s after they closed", after, "MB", "", None)]


def big_prompt(modelref: str) -> bytes:
    """A Sessions|prompt body of PROMPT_BODY_BYTES: a short text and one base64 attachment."""
    shell = {"text": "Look at this file", "model": modelref,
             "attachments": [{"name": "blob.bin", "mime": "application/octet-stream", "data": ""}]}
    room = PROMPT_BODY_BYTES - len(json.dumps(shell).encode())
    content = bytes(range(256)) * (room * 3 // 4 // 256 + 1)
    shell["attachments"][0]["data"] = base64.b64encode(content[:room // 4 * 3]).decode()
    return json.dumps(shell).encode()


async def post(port: int, path: str, body: bytes) -> int:
    """POST a JSON body on a new connection: the answer's status."""
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
        async with asyncio.timeout(API_TIMEOUT_S * 3):
            answer = await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return int(answer.split(b" ", 2)[1])


async def measure_prompt(port: int, pid: int, model: ScriptedModel, sessionid: str, modelref: str) -> list[tuple]:
    body = big_prompt(modelref)
    await asyncio.sleep(SETTLE_S)
    before = rss_mb(pid)
    if not reset_peak(pid):
        return [("memory: peak for a 20 MB prompt", "n/a (no clear_refs)", "", "", None)]
    model.script(reply("seen"))
    status = await post(port, f"/api/sessions_prompt/{sessionid}", body)
    if status != 200:
        raise BenchError(f"the big prompt answered {status}")
    await wait_idle(port, sessionid)
    added = rss_mb(pid, "VmHWM") - before
    size = len(body) / 1e6
    return [(f"memory: a {size:.0f} MB prompt, server peak RSS (VmHWM) above before", added, "MB",
             f"<= {PROMPT_PEAK_TARGET * size:g}", added <= PROMPT_PEAK_TARGET * size),
            ("memory: the same, as a multiple of the body", added / size, "x", "", None)]


async def measure(port: int, pid: int, project_dir: str) -> list[tuple]:
    async with ScriptedModel() as model:
        provider = await api(port, "providers_save", {"name": "Bench", "kind": "openai", "url": model.url})
        modelref = f"{provider['id']}/{MODEL_ID}"
        project = await api(port, "projects_open", {"path": project_dir})
        prompted = (await api(port, "sessions_create", {"projectid": project["id"]}))["id"]
        rows = await measure_prompt(port, pid, model, prompted, modelref)
        paged = (await api(port, "sessions_create", {"projectid": project["id"]}))["id"]
        await fill_page(port, model, paged, modelref)
        rows += await measure_slow_readers(port, pid, paged)
    return rows


def main() -> list[tuple]:
    import tempfile
    with tempfile.TemporaryDirectory(prefix="totem-bench-project-") as project_dir:
        return measured_on_server(lambda server: measure(server.port, server.pid, os.path.realpath(project_dir)))


if __name__ == "__main__":
    for row in main():
        print(row)
