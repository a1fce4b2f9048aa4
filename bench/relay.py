"""Benchmark of many sessions at once: SESSIONS answers streamed together, each to
CLIENTS_PER_SESSION WebSocket clients, and the memory of IDLE_CLIENTS idle clients.

Spawns the real server (bench/startup.py's `running_server`) and, in this process, the scripted
model of bench/agent.py (`TimedModel`: each delta's text is the perf_counter_ns() of its write)
and the `websockets` clients, so one clock serves both ends. It measures and reports; it asserts
nothing and changes nothing in totem/.

Figures:
- idle clients: the server's RSS (VmRSS) after IDLE_CLIENTS more WebSocket connections opened and
  each subscribed to a session, minus before (the < 20 MB target); the connections are closed
  before the streaming;
- many sessions: SESSIONS prompts at once, each answered by the model with STREAM_DELTAS text
  deltas written one by one, SESSION_RATE a second on a fixed schedule, each session followed
  by CLIENTS_PER_SESSION connections of its own. The sessions are independent, as different
  providers' streams are: session i writes i / SESSIONS of an interval after session 0. The
  relay's write-to-receipt over every delta at every client: p50 and p99 (the < 5 ms target;
  two loopback hops, the server, the client's parsing, and on a shared machine the scheduler);
  the server's CPU time (/proc/<pid>/stat) over CPU_WINDOW_S while every session streams, as a
  percentage of one core (the < 30 % target);
- the same in lockstep (informative): BURST_DELTAS deltas per session, all SESSIONS writing in
  the same instant, so every delta waits behind those of the other sessions (the server relays
  them one after the other, the clients read them one after the other): the worst case of
  the pacing, its p50 and p99.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time

from agent import (
    API_TIMEOUT_S,
    PROMPT,
    RUN_TIMEOUT_S,
    TimedDeltas,
    TimedModel,
    api,
    cpu_seconds,
    latencies_ms,
    read_status_kb,
    subscribe_synced,
)
from startup import HOST, ROOT, BenchError, measured_on_server, percentile
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.model_server import MODEL_ID

SESSIONS = 20
CLIENTS_PER_SESSION = 3
SESSION_RATE = 100  # deltas a second the model sends each session
STREAM_DELTAS = 700  # each answer: 7 s at that rate
CPU_WINDOW_S = 4.0  # measured once every session streams, well before the first one ends
BURST_DELTAS = 300  # each answer of the lockstep run
RELAY_P99_TARGET_MS = 5.0
CPU_TARGET_PERCENT = 30.0
IDLE_CLIENTS = 200
IDLE_TARGET_MB = 20.0
IDLE_SETTLE_S = 1.0  # after the connections open, before RSS is read
CONNECT_BATCH = 20  # connections opened at once (the listen backlog is not what is measured)


class Client:
    """One WebSocket connection that follows one session and keeps (receipt ns, raw frame) of
    each of its part.delta frames until the session is idle again."""

    def __init__(self, ws, sessionid: str) -> None:
        self.ws = ws
        self.sessionid = sessionid
        self.deltas: list[tuple[int, str]] = []
        self.first = asyncio.Event()  # set with the first delta

    async def collect(self) -> None:
        """Read until the session is idle. Raises BenchError when the run ends otherwise or the
        server closes the connection."""
        recv, clock, deltas = self.ws.recv, time.perf_counter_ns, self.deltas
        try:
            while True:
                raw = await recv()
                now = clock()
                if '"part.delta"' in raw:  # parsed afterwards, to keep the client cheap
                    deltas.append((now, raw))
                    self.first.set()
                    continue
                event = json.loads(raw)
                if event["sessionid"] != self.sessionid:
                    continue  # session.status is sent to every connection
                if event["type"] == "session.status":
                    status = event["data"]["status"]
                    if status == "idle":
                        return
                    if status != "running":
                        raise BenchError(f"a run ended {status}")
                elif event["type"] == "error":
                    raise BenchError(f"a run failed: {event['data']['message']}")
        except ConnectionClosed as exc:
            raise BenchError(f"the server closed a WebSocket after {len(deltas)} deltas: "
                             f"{exc.rcvd.code if exc.rcvd else ''}") from None


async def open_clients(stack: contextlib.AsyncExitStack, port: int, sessionids: list[str],
                       tag: str) -> list:
    """One connection per entry of `sessionids`, each subscribed to it, opened CONNECT_BATCH
    at a time; they close with `stack`, all at once.

    A client buffers what it has not read (max_queue=None): one that stops reading once its
    session is idle still has the other sessions' status events coming, and with a bounded
    queue it would stop reading its socket and never see the server's close frame."""
    sockets: list = []

    async def close_all() -> None:
        await asyncio.gather(*(ws.close() for ws in sockets))

    stack.push_async_callback(close_all)
    for start in range(0, len(sessionids), CONNECT_BATCH):
        batch = sessionids[start:start + CONNECT_BATCH]
        opened = await asyncio.gather(*(
            stack.enter_async_context(ws_connect(f"ws://{HOST}:{port}/ws/", compression=None,
                                                 max_queue=None, open_timeout=API_TIMEOUT_S))
            for _ in batch))
        await asyncio.gather(*(subscribe_synced(ws, sessionid, f"bench-{tag}-{start + index}")
                               for index, (ws, sessionid) in enumerate(zip(opened, batch, strict=True))))
        sockets += opened
    return sockets


async def measure_idle(port: int, pid: int, sessionids: list[str]) -> list[tuple]:
    """The server's RSS for IDLE_CLIENTS more subscribed connections that do nothing."""
    async with contextlib.AsyncExitStack() as warm:
        # The first connection imports websockets into the server: not the clients' cost.
        await open_clients(warm, port, sessionids[:1], "warm")
        await asyncio.sleep(IDLE_SETTLE_S)
        before = read_status_kb(pid, "VmRSS")
        async with contextlib.AsyncExitStack() as stack:
            await open_clients(stack, port, [sessionids[i % len(sessionids)] for i in range(IDLE_CLIENTS)],
                               "idle")
            await asyncio.sleep(IDLE_SETTLE_S)
            after = read_status_kb(pid, "VmRSS")
    if before is None or after is None:
        return [(f"relay: {IDLE_CLIENTS} idle WebSocket clients, server RSS added", "n/a", "MB",
                 f"< {IDLE_TARGET_MB:g}", None)]
    added = (after - before) * 1024 / 1e6
    return [(f"relay: {IDLE_CLIENTS} idle WebSocket clients, server RSS added", added, "MB",
             f"< {IDLE_TARGET_MB:g}", added < IDLE_TARGET_MB),
            (f"relay: {IDLE_CLIENTS} idle WebSocket clients, per client", added * 1e3 / IDLE_CLIENTS,
             "KB", "", None)]


async def stream_sessions(port: int, pid: int, model: TimedModel, sessionids: list[str],
                          modelref: str, deltas: int, lockstep: bool) -> tuple[list[float], float | None]:
    """One answer of `deltas` paced deltas in every session at once, CLIENTS_PER_SESSION
    connections following each: the write-to-receipt of every delta at every client (ms,
    sorted) and the server's CPU over CPU_WINDOW_S as a percentage of one core (None without
    /proc, or in lockstep, which is too short for it)."""
    interval = 1 / SESSION_RATE
    followed = [sessionid for sessionid in sessionids for _ in range(CLIENTS_PER_SESSION)]
    async with contextlib.AsyncExitStack() as stack:
        sockets = await open_clients(stack, port, followed, f"stream-{lockstep}")
        clients = [Client(ws, sessionid) for ws, sessionid in zip(sockets, followed, strict=True)]
        model.script(*[TimedDeltas(deltas, 1, interval, 0.0 if lockstep else interval * index / len(sessionids))
                       for index in range(len(sessionids))])
        tasks = [asyncio.create_task(client.collect()) for client in clients]
        percent = None
        try:
            async with asyncio.timeout(RUN_TIMEOUT_S):
                await asyncio.gather(*(api(port, "sessions_prompt", {"text": PROMPT, "model": modelref},
                                           sessionid) for sessionid in sessionids))
                if not lockstep:
                    await asyncio.gather(*(client.first.wait() for client in clients))
                    cpu_before, began = cpu_seconds(pid), time.perf_counter()
                    await asyncio.sleep(CPU_WINDOW_S)
                    cpu_after, window = cpu_seconds(pid), time.perf_counter() - began
                    if any(task.done() for task in tasks):
                        raise BenchError(f"a session ended within the {CPU_WINDOW_S:g} s CPU window")
                    if cpu_before is not None and cpu_after is not None:
                        percent = (cpu_after - cpu_before) / window * 100
                await asyncio.gather(*tasks)
        except TimeoutError:
            raise BenchError(f"the sessions did not end within {RUN_TIMEOUT_S} s") from None
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    latencies = sorted(value for client in clients for value in latencies_ms(client.deltas))
    expected = len(clients) * deltas
    if len(latencies) != expected:
        raise BenchError(f"the clients received {len(latencies)} deltas of {expected}")
    return latencies, percent


async def measure_sessions(port: int, pid: int, model: TimedModel, sessionids: list[str],
                           modelref: str) -> list[tuple]:
    """SESSIONS paced answers at once, CLIENTS_PER_SESSION connections each: independent, then
    in lockstep."""
    label = (f"relay: {SESSIONS} sessions at once, {SESSION_RATE} deltas/s each, "
             f"{CLIENTS_PER_SESSION} clients each")
    latencies, percent = await stream_sessions(port, pid, model, sessionids, modelref, STREAM_DELTAS, False)
    p99 = percentile(latencies, 0.99)
    rows = [(f"{label}, write to receipt p50", percentile(latencies, 0.50), "ms", "", None),
            (f"{label}, write to receipt p99", p99, "ms", f"< {RELAY_P99_TARGET_MS:g}",
             p99 < RELAY_P99_TARGET_MS),
            (f"{label}, write to receipt max", latencies[-1], "ms", "", None)]
    if percent is not None:
        rows.append((f"{label}, server CPU (% of one core)", percent, "%", f"< {CPU_TARGET_PERCENT:g}",
                     percent < CPU_TARGET_PERCENT))
    burst, _ = await stream_sessions(port, pid, model, sessionids, modelref, BURST_DELTAS, True)
    rows += [(f"relay: the same in lockstep (all {SESSIONS} write at once), write to receipt p50",
              percentile(burst, 0.50), "ms", "", None),
             (f"relay: the same in lockstep (all {SESSIONS} write at once), write to receipt p99",
              percentile(burst, 0.99), "ms", "", None)]
    return rows


async def measure(port: int, pid: int, project_dir: str) -> list[tuple]:
    async with TimedModel() as model:
        provider = await api(port, "providers_save", {"name": "Bench", "kind": "openai", "url": model.url})
        project = await api(port, "projects_open", {"path": project_dir})
        sessionids = [(await api(port, "sessions_create", {"projectid": project["id"]}))["id"]
                      for _ in range(SESSIONS)]
        rows = await measure_idle(port, pid, sessionids)
        rows += await measure_sessions(port, pid, model, sessionids, f"{provider['id']}/{MODEL_ID}")
    if model.errors:
        raise BenchError(f"the scripted model saw bad requests: {model.errors[:3]!r}")
    return rows


def main() -> list[tuple]:
    with tempfile.TemporaryDirectory(prefix="totem-bench-project-") as project_dir:
        return measured_on_server(lambda server: measure(server.port, server.pid, os.path.realpath(project_dir)))


if __name__ == "__main__":
    for row in main():
        print(row)
