"""Benchmark of a prompt in a long session: what the other requests wait while it starts.

Fills a session with MESSAGES messages through the store (as bench/messages.py does: a user
message, then an assistant step with a tool call and its 400-character output and a text, in
turn), in this process on a temporary data folder. Then it spawns the real server on that folder
(bench/startup.py's configuration: no sign-in, `sandbox = off`) and, in this process, the
scripted model of bench/agent.py with a models list that gives the model a WINDOW-token window
(so that the request is pruned to fit, as a long session's is). A client sends `GET
/api/account` (Account|read, a cheap read) on a fresh connection every PROBE_INTERVAL_S; then the
prompt goes (`POST /api/sessions_prompt`), the model answers with a short text, and the session
goes idle.

Figures: of the probe requests sent between the prompt and the idle status, the largest wait
(sent to answered whole; the < 50 ms target) and the p99, with the same two figures while nothing
runs, for comparison; the time from the prompt to the model's request read whole, and that
request's size. It measures and reports; it asserts nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from agent import API_TIMEOUT_S, Bench, TimedModel, api, subscribe_synced
from startup import (
    HOST,
    LAUNCHER,
    ROOT,
    BenchError,
    Server,
    free_port,
    percentile,
    server_env,
    stop_process,
    wait_until_ready,
)
from websockets.asyncio.client import connect as ws_connect

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.model_server import MODEL_ID, reply
from tests.utils import call, running_totem

MESSAGES = 5_000
OUTPUT_CHARS = 400
WINDOW = 400_000  # tokens: the history does not fit whole, its old outputs are pruned
PROBE_INTERVAL_S = 0.005
IDLE_PROBE_S = 1.0  # probes while nothing runs, for comparison
TARGET_MS = 50.0
WHOLE = 1 << 20


async def fill(folder: str, project_dir: str) -> tuple[str, str]:
    """A project and a session of MESSAGES messages in the data folder of `folder`: their ids."""
    async with running_totem(folder) as app:
        project = (await call(app, "projects_open", {"path": project_dir})).json()
        session = (await call(app, "sessions_create", {"projectid": project["id"]})).json()
        store = app.store
        for step in range(MESSAGES // 2):
            user = await store.add_message(session["id"], "user")
            await store.add_part(user["id"], session["id"], "text", "done", text=f"step {step}: go on", closed=True)
            answer = await store.add_message(session["id"], "assistant", model="bench/model")
            data = {"tool": "read", "callid": f"c{step}", "input": {"path": f"src/file{step % 50}.js"},
                    "output": f"{step}: " + "x" * OUTPUT_CHARS}
            await store.add_part(answer["id"], session["id"], "tool", "done", data=data, closed=True)
            await store.add_part(answer["id"], session["id"], "text", "done", text=f"Read part {step}. " * 4,
                                 closed=True)
        return project["id"], session["id"]


@contextlib.contextmanager
def spawned(folder: str):
    """The real server on the data folder of `folder`."""
    port = free_port()
    config = os.path.join(folder, "config.ini")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(f"[totem]\nlisten = {HOST}\nport = {port}\ntoken = none\n"
                     f"data = {os.path.join(folder, 'data')}\nsandbox = off\n")
    log_path = os.path.join(folder, "server.log")
    with (tempfile.TemporaryDirectory(prefix="totem-bench-pyc-") as pycache, open(log_path, "wb") as log):
        began = time.perf_counter()
        process = subprocess.Popen([sys.executable, LAUNCHER, "--config", config], cwd=ROOT,
                                   env=server_env(pycache), stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT)
        try:
            server = Server(process, port, began, log_path)
            wait_until_ready(server)
            yield server
        finally:
            stop_process(process)


async def probe_once(port: int) -> float:
    """One `GET /api/account` on a new connection: ms from sending to the answer read whole."""
    began = time.perf_counter()
    async with asyncio.timeout(API_TIMEOUT_S):
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            writer.write(f"GET /api/account HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise BenchError(f"GET /api/account answered {head[:40]!r}")
            await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
    return (time.perf_counter() - began) * 1000


async def probes(port: int, stop: asyncio.Event, waits: list[tuple[float, float]]) -> None:
    """Probe every PROBE_INTERVAL_S until `stop`: (sent at, wait in ms) of each."""
    while not stop.is_set():
        sent = time.perf_counter()
        waits.append((sent, await probe_once(port)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), PROBE_INTERVAL_S)


async def measure(port: int, sessionid: str, project: dict) -> list[tuple]:
    async with TimedModel() as model:
        model.serve_json("GET", "/v1/models", {"data": [
            {"id": MODEL_ID, "name": "Scripted", "context_length": WINDOW, "supported_parameters": ["tools"],
             "architecture": {"output_modalities": ["text"]}}]})
        provider = await api(port, "providers_save", {"name": "Bench", "kind": "openrouter", "url": model.url,
                                                      "key": "sk-or-bench-0123456789"})
        idle: list[tuple[float, float]] = []
        stop = asyncio.Event()
        task = asyncio.create_task(probes(port, stop, idle))
        await asyncio.sleep(IDLE_PROBE_S)
        stop.set()
        await task
        async with ws_connect(f"ws://{HOST}:{port}/ws/", compression=None, open_timeout=API_TIMEOUT_S) as ws:
            bench = Bench(port, model, ws, project, f"{provider['id']}/{MODEL_ID}")
            await subscribe_synced(ws, sessionid, "bench-sync")
            during: list[tuple[float, float]] = []
            stop = asyncio.Event()
            task = asyncio.create_task(probes(port, stop, during))
            await asyncio.sleep(0.05)
            began = time.perf_counter()
            first = len(model.requests)
            try:
                await bench.run(sessionid, reply("Done: the long session goes on.", max_piece=WHOLE))
            finally:
                stop.set()
                await task
            ended = time.perf_counter()
    chats = [r for r in model.requests[first:] if r.method == "POST" and r.path.endswith("/chat/completions")]
    if len(chats) != 1:
        raise BenchError(f"{len(chats)} model requests, not 1 (a compaction?)")
    arrival_ms = (model.arrivals[-1] / 1e9 - began) * 1000
    prompt = sorted(wait for sent, wait in during if began <= sent <= ended)
    quiet = sorted(wait for _sent, wait in idle)
    body = chats[0].body
    pruned = sum(1 for m in body["messages"] if m["role"] == "tool" and "removed to fit" in m["content"])
    return [
        (f"long prompt: {MESSAGES:,} messages, largest wait of a probe during the prompt", prompt[-1], "ms",
         f"< {TARGET_MS:g} ms", prompt[-1] < TARGET_MS),
        (f"long prompt: p99 wait of the {len(prompt)} probes during the prompt", percentile(prompt, 0.99), "ms",
         "", None),
        ("long prompt: median wait of those probes", statistics.median(prompt), "ms", "", None),
        (f"long prompt: probes while idle ({len(quiet)}), largest / p99",
         f"{quiet[-1]:.1f} / {percentile(quiet, 0.99):.1f}", "ms", "", None),
        ("long prompt: prompt sent to the model's request read whole", arrival_ms, "ms", "", None),
        ("long prompt: prompt sent to idle", (ended - began) * 1000, "ms", "", None),
        ("long prompt: the model's request", f"{len(chats[0].raw_body):,} bytes, {len(body['messages'])} "
         f"messages, {pruned} outputs pruned", "", "", None),
    ]


def main() -> list[tuple]:
    with tempfile.TemporaryDirectory(prefix="totem-bench-long-prompt-") as folder:
        project_dir = os.path.join(folder, "project")
        os.makedirs(project_dir)
        projectid, sessionid = asyncio.run(fill(folder, project_dir))
        with spawned(folder) as server:
            try:
                return asyncio.run(measure(server.port, sessionid, {"id": projectid}))
            except BenchError as exc:
                raise BenchError(f"{exc}\nserver log:\n{server.log_tail()}") from None


if __name__ == "__main__":
    for row in main():
        print(json.dumps(row))
