"""Benchmark of the other sessions' relay while one session's terminal floods.

Spawns the real server (bench/startup.py's `running_server`, `terminalshell = /bin/sh`) and, in
this process, the scripted model of bench/agent.py and the `websockets` clients. One session's
Terminal panel runs `yes | head -c 200M` (FLOOD_BYTES, 300 MB on the pty: each "y\\n" becomes
"y\\r\\n"), followed by a viewer that reads as fast as it can; meanwhile SESSIONS other sessions
stream paced answers to CLIENTS_PER_SESSION clients each, exactly as bench/relay.py's "many
sessions" figure (`stream_sessions`), whose write-to-receipt p99 is the figure here (the < 10 ms
target). Then the terminal is stopped. It measures and reports; it asserts nothing.

Figures: the other sessions' write-to-receipt p50, p99 and max during the flood; the flood's
pace at the viewer (characters a second, while the others streamed); whether the viewer was
closed (it must not be).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import tempfile
import time

import relay
from agent import API_TIMEOUT_S, TimedModel, api
from startup import HOST, ROOT, BenchError, measured_on_server, percentile
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.model_server import MODEL_ID

FLOOD_BYTES = 200 * 1024 * 1024
SESSIONS = 5
RELAY_P99_TARGET_MS = 10.0
FLOOD_START_CHARS = 1024 * 1024  # the flood is under way once the viewer has this much


class Viewer:
    """The terminal's viewer: reads as fast as it can and counts what the flood sent (the
    characters of its frames, JSON included)."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.chars = 0
        self.closed: str | None = None
        self.started = asyncio.Event()

    async def read(self) -> None:
        try:
            async for raw in self.ws:
                # Not parsed: the clients share this process, and their receipt times with it.
                if '"terminal.output"' in raw[:40]:
                    self.chars += len(raw)
                    if self.chars >= FLOOD_START_CHARS:
                        self.started.set()
        except ConnectionClosed as exc:
            self.closed = f"{exc.rcvd.code if exc.rcvd else ''} {exc.rcvd.reason if exc.rcvd else ''}"


async def measure(port: int, pid: int, project_dir: str) -> list[tuple]:
    async with TimedModel() as model:
        provider = await api(port, "providers_save", {"name": "Bench", "kind": "openai", "url": model.url})
        modelref = f"{provider['id']}/{MODEL_ID}"
        project = await api(port, "projects_open", {"path": project_dir})
        shell = (await api(port, "sessions_create", {"projectid": project["id"]}))["id"]
        others = [(await api(port, "sessions_create", {"projectid": project["id"]}))["id"] for _ in range(SESSIONS)]
        async with ws_connect(f"ws://{HOST}:{port}/ws/", compression=None, open_timeout=API_TIMEOUT_S) as ws:
            await ws.send(json.dumps({"type": "subscribe", "sessionid": shell}))
            viewer = Viewer(ws)
            reading = asyncio.create_task(viewer.read())
            try:
                await api(port, "sessions_terminal", {"start": True}, shell)
                command = f"yes | head -c {FLOOD_BYTES}\n".encode()
                await api(port, "sessions_terminalinput", {"data": base64.b64encode(command).decode()}, shell)
                async with asyncio.timeout(API_TIMEOUT_S):
                    await viewer.started.wait()
                began, chars = time.perf_counter(), viewer.chars
                latencies, _ = await relay.stream_sessions(port, pid, model, others, modelref,
                                                           relay.STREAM_DELTAS, False)
                pace = (viewer.chars - chars) / (time.perf_counter() - began)
                if viewer.chars >= FLOOD_BYTES * 1.5:
                    raise BenchError("the flood ended before the other sessions did")
                await api_post(port, "sessions_terminalstop", shell)
            finally:
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)
    label = (f"terminal flood: {SESSIONS} other sessions, {relay.SESSION_RATE} deltas/s each, during "
             f"yes | head -c {FLOOD_BYTES >> 20}M")
    p99 = percentile(latencies, 0.99)
    return [(f"{label}, write to receipt p50", percentile(latencies, 0.50), "ms", "", None),
            (f"{label}, write to receipt p99", p99, "ms", f"< {RELAY_P99_TARGET_MS:g}", p99 < RELAY_P99_TARGET_MS),
            (f"{label}, write to receipt max", latencies[-1], "ms", "", None),
            ("terminal flood: its pace at the viewer meanwhile", pace / 1e6, "M chars/s", "", None),
            ("terminal flood: the viewer closed", viewer.closed or "no", "", "no", viewer.closed is None)]


async def api_post(port: int, name: str, ident: str) -> None:
    """POST an action that takes no body (Sessions|terminalstop)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(f"POST /api/{name}/{ident} HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n"
                     "Content-Length: 0\r\n\r\n".encode("latin-1"))
        await writer.drain()
        async with asyncio.timeout(API_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
    finally:
        writer.close()
    if b" 200 " not in head.split(b"\r\n", 1)[0]:
        raise BenchError(f"{name} answered {head[:200]!r}")


def main() -> list[tuple]:
    with tempfile.TemporaryDirectory(prefix="totem-bench-project-") as project_dir:
        return measured_on_server(lambda server: measure(server.port, server.pid, os.path.realpath(project_dir)),
                                  config={"terminalshell": "/bin/sh"})


if __name__ == "__main__":
    for row in main():
        print(row)
