"""Benchmark of the agent loop: the relay of streamed text, the cost of a step, the request size.

Spawns the real server (bench/startup.py's `running_server`, a temporary data folder and free
port) and, in this process on loopback, the scripted model of tests/model_server.py (stdlib and
asyncio only, so the runtime venv is enough) and a `websockets` client subscribed to the
sessions. Every timestamp is taken in this process (the model writes, the client receives), so
one clock serves both ends. It measures and reports; it asserts nothing and changes nothing in
totem/.

Figures:
- the size of the first request body of a fresh session (all tools declared), of its `tools`
  array alone and of its system prompt;
- relay, flood: the model streams RELAY_DELTAS text deltas as FastStream does (64 KB writes, as
  fast as the socket takes them), each delta's text being the perf_counter_ns() of its write;
  FLOOD_RUNS times, each figure the median of the runs. Deltas per second delivered to the
  client (first write to last receipt); the time from the model's write of its last chunk of
  text to the client's receipt of it (what a person waits for the end of a fast answer, the
  <= 50 ms target: the server must keep up with the model, or the kernel buffers hold the rest
  of the stream); the server's CPU time per delta (/proc/<pid>/stat, 10 ms ticks; the <= 30 us
  target); the p50/p99 of write-to-receipt are informative only: under a flood the kernel
  buffers hold much of the stream at once, so they measure the queue;
- relay, paced: PACED_DELTAS deltas written one by one every PACED_INTERVAL_S, as a provider
  sends tokens: write-to-receipt p50/p99 (two loopback hops, the server, the client's parsing),
  then the same pacing through a bare asyncio echo process (the floor: two loopback hops through
  a Python process that does nothing). What the server adds is the difference, the < 1 ms
  target at p99; on a busy machine both p99s mostly measure the scheduler;
- the server's RSS before the relay and its peak (VmHWM) after it;
- per-step overhead: a STEPS-step run where each answer is one `read` of a small file (a
  different file each time, so the loop guard never asks), then a final text answer; from the
  model's side, the time from the last byte of one answer written to the next request read
  whole (tool run, storage, history and request building, connecting): median and p99;
- tool round trip: the same over ROUND_TRIP_STEPS `read` calls of those small files (auto-allowed;
  each file read again at another offset, so that no call repeats one before it), the <= 4 ms
  target at the median: the time the server takes between a model answer's tool call and the
  next request to the model (the answer's end stored, the call decided, run and stored, the next
  request built and sent), with the p90 and the max for information;
- bash: the same for STEPS + 1 allowed `true` commands, spawn included; the first alone (the
  project's first command also starts its folder watch and takes the capture for Undo, once),
  then the median and p99 of the others. The server runs with `sandbox = off`: what the sandbox
  adds to a command is bench/sandbox.py's figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

from startup import HOST, ROOT, BenchError, measured_on_server, percentile, server_env
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # for tests.model_server, which imports nothing of Totem

from tests.model_server import (
    FAST_WRITE_BYTES,
    MODEL_ID,
    ScriptedModel,
    _send_head,
    chunk,
    encode_events,
    finish_chunk,
    reply,
    usage_chunk,
)

RELAY_DELTAS = 20_000
RELAY_RATE_TARGET = 20_000  # deltas per second, at least
FLOOD_RUNS = 3  # the machine is shared: each flood figure is the median of these runs
FLOOD_END_TARGET_MS = 50.0  # the model's last chunk to the client's receipt of it, at most
FLOOD_CPU_TARGET_US = 30.0  # the server's CPU per delta, at most
PACED_DELTAS = 1_000
PACED_INTERVAL_S = 0.002
RELAY_ADDED_P99_TARGET_MS = 1.0
STEPS = 20
STEP_TARGET_MS = 15.0
ROUND_TRIP_STEPS = 45  # under config.ini's default step limit of 50
ROUND_TRIP_TARGET_MS = 4.0  # issue: a cheap tool's round trip, at most (the median)
BASH_TARGET_MS = 20.0  # issue: one allowed bash tool round trip
FILE_LINES = 20
PEER_REQUEST_BYTES = 32 * 1024  # what a popular peer sends as its first request
STAMP_WIDTH = 16  # digits of a delta's timestamp: fixed, so that joined deltas can be split
API_TIMEOUT_S = 10.0
RUN_TIMEOUT_S = 30.0
PROMPT = "Read the files and tell me what they say."


# -- the scripted model, with timestamps ------------------------------------------------------


@dataclass
class TimedDeltas:
    """`count` content deltas whose text is the perf_counter_ns() of their write, zero-padded to
    STAMP_WIDTH digits. `per_write` deltas leave in each write; with `interval`, the writes are
    that far apart, else as fast as the socket takes them (as FastStream). With a `phase` too,
    the writes are on a schedule instead of a pause after each: at `phase` seconds past each
    multiple of `interval` on the loop's clock, so that streams keep their offsets to each
    other (the same phase: they write in the same instant) and a late write shifts nothing."""
    count: int
    per_write: int = 1
    interval: float = 0.0
    phase: float | None = None


class TimedModel(ScriptedModel):
    """ScriptedModel that also answers TimedDeltas and notes, per chat request, when it was read
    whole, before this process parses it (`arrivals`), and when the last byte of its answer was
    written (`ends`), in ns."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[int] = []
        self.ends: list[int] = []

    async def _respond(self, request, reader, writer) -> None:
        is_chat = request.method == "POST" and request.path.endswith("/chat/completions")
        if is_chat:
            self.arrivals.append(request.read_ns)  # its parsing here is not the server's time
        await super()._respond(request, reader, writer)
        if is_chat:
            self.ends.append(time.perf_counter_ns())

    async def _send(self, response, reader, writer) -> None:
        if isinstance(response, TimedDeltas):
            await self._send_timed(writer, response)
        else:
            await super()._send(response, reader, writer)

    async def _send_timed(self, writer: asyncio.StreamWriter, timed: TimedDeltas) -> None:
        marker = "@" * STAMP_WIDTH
        before, after = encode_events([chunk({"content": marker})], done=False).split(marker.encode())
        head = encode_events([chunk({"role": "assistant", "content": ""})], done=False)
        tail = encode_events([finish_chunk(), usage_chunk(10, timed.count)])
        await _send_head(writer, 200, {"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache", "Transfer-Encoding": "chunked"})
        await _write_chunk(writer, head)
        loop = asyncio.get_running_loop()
        due = None
        if timed.phase is not None:
            due = (loop.time() // timed.interval + 1) * timed.interval + timed.phase
            await asyncio.sleep(due - loop.time())
        left = timed.count
        while left:
            batch = min(left, timed.per_write)
            stamp = b"%0*d" % (STAMP_WIDTH, time.perf_counter_ns())
            await _write_chunk(writer, (before + stamp + after) * batch)
            left -= batch
            if due is None:
                await asyncio.sleep(timed.interval)
            else:
                due += timed.interval
                await asyncio.sleep(max(0.0, due - loop.time()))
        await _write_chunk(writer, tail)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
    await writer.drain()


def deltas_per_write(budget: int = FAST_WRITE_BYTES) -> int:
    """How many timestamped deltas fit in one FastStream-sized write."""
    one = encode_events([chunk({"content": "0" * STAMP_WIDTH})], done=False)
    return max(1, budget // len(one))


# -- a small API client -----------------------------------------------------------------------


async def api(port: int, name: str, body=None, ident: str | None = None):
    """Call `/api/name[/ident]` (POST with a JSON body, GET without); the JSON answer.
    Raises BenchError unless 200."""
    path = f"/api/{name}" + (f"/{ident}" if ident else "")
    payload = b"" if body is None else json.dumps(body).encode()
    method = "GET" if body is None else "POST"
    head = (f"{method} {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n")
    async with asyncio.timeout(API_TIMEOUT_S):
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            writer.write(head.encode("latin-1") + payload)
            await writer.drain()
            answer = await reader.readuntil(b"\r\n\r\n")
            lines = answer.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ")[1])
            length = 0
            for line in lines[1:]:
                key, _, value = line.partition(":")
                if key.strip().lower() == "content-length":
                    length = int(value)
            data = await reader.readexactly(length)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
    if status != 200:
        raise BenchError(f"{method} {path} answered {status}: {data[:300]!r}")
    return json.loads(data)


async def subscribe_synced(ws, sessionid: str, marker: str) -> None:
    """Subscribe `ws` to a session and return once the server has acted on it: a subscription to
    an unknown id (`marker`) after it answers an error event, and the server handles a
    connection's messages in order. Raises TimeoutError after API_TIMEOUT_S."""
    await ws.send(json.dumps({"type": "subscribe", "sessionid": sessionid}))
    await ws.send(json.dumps({"type": "subscribe", "sessionid": marker}))
    async with asyncio.timeout(API_TIMEOUT_S):
        while True:
            event = json.loads(await ws.recv())
            if event["type"] == "error" and event["sessionid"] == marker:
                return


class Bench:
    """The server's port, the model, the WebSocket and the project of one measurement."""

    def __init__(self, port: int, model: TimedModel, ws, project: dict, modelref: str) -> None:
        self.port = port
        self.model = model
        self.ws = ws
        self.project = project
        self.modelref = modelref
        self.syncs = 0

    async def new_session(self) -> str:
        """A session, subscribed (see subscribe_synced)."""
        session = await api(self.port, "sessions_create", {"projectid": self.project["id"]})
        self.syncs += 1
        await subscribe_synced(self.ws, session["id"], f"bench-sync-{self.syncs}")
        return session["id"]

    async def run(self, sessionid: str, *responses) -> list[tuple[int, str]]:
        """Script the answers, send the prompt and collect (receipt ns, raw frame) of every
        part.delta of the session until it is idle again. Raises BenchError when the run ends
        otherwise or the client is dropped."""
        self.model.script(*responses)
        await api(self.port, "sessions_prompt", {"text": PROMPT, "model": self.modelref}, sessionid)
        deltas = []
        recv = self.ws.recv
        clock = time.perf_counter_ns
        try:
            async with asyncio.timeout(RUN_TIMEOUT_S):
                while True:
                    raw = await recv()
                    now = clock()
                    if '"part.delta"' in raw:  # parsed afterwards, to keep the client cheap
                        deltas.append((now, raw))
                        continue
                    event = json.loads(raw)
                    if event["type"] == "session.status" and event["sessionid"] == sessionid:
                        status = event["data"]["status"]
                        if status == "idle":
                            return deltas
                        if status != "running":
                            raise BenchError(f"the run ended {status}")
                    elif event["type"] == "error" and event["sessionid"] == sessionid:
                        raise BenchError(f"the run failed: {event['data']['message']}")
        except ConnectionClosed as exc:
            raise BenchError(f"the server closed the WebSocket after {len(deltas)} deltas: "
                             f"{exc.rcvd.code if exc.rcvd else ''} {exc.rcvd.reason if exc.rcvd else ''}"
                             ) from None
        except TimeoutError:
            raise BenchError(f"the run did not end within {RUN_TIMEOUT_S} s "
                             f"({len(deltas)} deltas received)") from None


def delta_stamps(raw: str) -> list[int]:
    """The write times (perf_counter_ns) of the model deltas one part.delta frame carries."""
    text = json.loads(raw)["data"]["text"]
    return [int(text[start:start + STAMP_WIDTH]) for start in range(0, len(text), STAMP_WIDTH)]


def latencies_ms(deltas: list[tuple[int, str]]) -> list[float]:
    """Write-to-receipt of every model delta (a frame may carry several), in ms, sorted."""
    result = [(received - stamp) / 1e6 for received, raw in deltas for stamp in delta_stamps(raw)]
    result.sort()
    return result


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of a process so far (/proc/<pid>/stat), or None without /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_status_kb(pid: int, field: str) -> int | None:
    """A `kB` line of /proc/<pid>/status (VmHWM, VmRSS), or None where /proc is not available."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# -- the floor: what two loopback hops through any Python process cost here --------------------

ECHO_SERVER = """
import asyncio

async def handle(reader, writer):
    while data := await reader.read(65536):
        writer.write(data)
    writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def echo_floor() -> list[float]:
    """Write-to-receipt in ms (sorted) of PACED_DELTAS stamps sent every PACED_INTERVAL_S through
    a bare asyncio echo process: the same two loopback hops and one Python process as the relay,
    with nothing done in between; what the machine costs, not Totem."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", ECHO_SERVER, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, env=server_env(None))
    writer = None
    try:
        async with asyncio.timeout(API_TIMEOUT_S + PACED_DELTAS * PACED_INTERVAL_S * 4):
            port = int(await process.stdout.readline())
            reader, writer = await asyncio.open_connection(HOST, port)
            result = []
            for _ in range(PACED_DELTAS):
                writer.write(b"%0*d" % (STAMP_WIDTH, time.perf_counter_ns()))
                await writer.drain()
                stamp = int(await reader.readexactly(STAMP_WIDTH))
                result.append((time.perf_counter_ns() - stamp) / 1e6)
                await asyncio.sleep(PACED_INTERVAL_S)
    finally:
        if writer is not None:
            writer.close()
        if process.returncode is None:
            process.kill()
        await process.wait()
    result.sort()
    return result


# -- the measurements -------------------------------------------------------------------------


async def measure_request(bench: Bench) -> list[tuple]:
    """A first short run (it warms the server up too): the size of the request a new session
    sends."""
    first = len(bench.model.requests)
    await bench.run(await bench.new_session(), reply("Hello."))
    request = bench.model.requests[first]
    tools = request.body.get("tools", [])
    # Serialized as the server does (client._build_request), so these are bytes of the body.
    tools_bytes = len(json.dumps(tools, ensure_ascii=False, separators=(",", ":")).encode())
    rows = [("request: first body of a session", len(request.raw_body), "bytes",
             f"< {PEER_REQUEST_BYTES:,} (a peer)", len(request.raw_body) < PEER_REQUEST_BYTES),
            (f"request: its tools array ({len(tools)} tools)", tools_bytes, "bytes", "", None)]
    system = request.body["messages"][0]
    if system.get("role") == "system" and isinstance(system.get("content"), str):
        rows.append(("request: its system prompt", len(system["content"].encode()), "bytes", "",
                     None))
    return rows


async def flood_once(bench: Bench, pid: int) -> dict[str, float]:
    """One flood of RELAY_DELTAS deltas: its figures by name (see measure_flood)."""
    sessionid = await bench.new_session()
    began = time.perf_counter_ns()
    server_cpu, bench_cpu = cpu_seconds(pid), time.process_time()
    deltas = await bench.run(sessionid, TimedDeltas(RELAY_DELTAS, deltas_per_write()))
    server_after, bench_after = cpu_seconds(pid), time.process_time()
    ended = time.perf_counter_ns()
    latencies = latencies_ms(deltas)
    if len(latencies) != RELAY_DELTAS:
        raise BenchError(f"the client received {len(latencies)} deltas of {RELAY_DELTAS}")
    # The first frame's first stamp is the model's first write of a delta, the last frame's
    # last stamp its last write of one.
    first_write, last_write = delta_stamps(deltas[0][1])[0], delta_stamps(deltas[-1][1])[-1]
    figures = {"rate": RELAY_DELTAS / ((deltas[-1][0] - first_write) / 1e9),
               "end": (deltas[-1][0] - last_write) / 1e6,
               "p50": percentile(latencies, 0.50), "p99": percentile(latencies, 0.99),
               "idle": (ended - began) / 1e9, "frames": len(deltas),
               "bench_cpu": (bench_after - bench_cpu) / RELAY_DELTAS * 1e6}
    if server_cpu is not None and server_after is not None:
        figures["server_cpu"] = (server_after - server_cpu) / RELAY_DELTAS * 1e6
    return figures


async def measure_flood(bench: Bench, pid: int) -> list[tuple]:
    """FLOOD_RUNS floods of RELAY_DELTAS deltas as fast as the socket takes them: the rate the
    client gets them at, how long after the model's last chunk the last one arrives, and what
    the server spends on each; the median of the runs."""
    runs = [await flood_once(bench, pid) for _ in range(FLOOD_RUNS)]

    def median(name: str) -> float:
        return statistics.median(run[name] for run in runs)

    rate, end = median("rate"), median("end")
    label = f"relay: flood of {RELAY_DELTAS:,} deltas (median of {FLOOD_RUNS})"
    rows = [(f"{label}, delivered to the client", rate, "deltas/s", f">= {RELAY_RATE_TARGET:,}",
             rate >= RELAY_RATE_TARGET),
            ("relay: flood, last delta received after the model's last chunk", end, "ms",
             f"<= {FLOOD_END_TARGET_MS:g}", end <= FLOOD_END_TARGET_MS),
            ("relay: flood, part.delta frames the client got (the deltas of one read go as one)",
             median("frames"), "frames", "", None),
            ("relay: flood, write to receipt p50 (mostly queueing)", median("p50"), "ms", "", None),
            ("relay: flood, write to receipt p99 (mostly queueing)", median("p99"), "ms", "", None),
            ("relay: flood, prompt to idle", median("idle"), "s", "", None)]
    if all("server_cpu" in run for run in runs):
        cpu = median("server_cpu")
        rows.append(("relay: flood, server CPU per delta", cpu, "us", f"<= {FLOOD_CPU_TARGET_US:g}",
                     cpu <= FLOOD_CPU_TARGET_US))
    rows.append(("relay: flood, bench CPU per delta (model and client)", median("bench_cpu"), "us", "",
                 None))
    return rows


async def measure_paced(bench: Bench) -> list[tuple]:
    """PACED_DELTAS deltas one by one, then the same pacing through a bare echo process: what
    the server adds to a delta is the difference."""
    sessionid = await bench.new_session()
    paced = latencies_ms(await bench.run(sessionid, TimedDeltas(PACED_DELTAS, 1, PACED_INTERVAL_S)))
    floor = await echo_floor()
    label = f"relay: {PACED_DELTAS:,} deltas every {PACED_INTERVAL_S * 1000:g} ms, write to receipt"
    floor_label = "floor: a bare asyncio echo process, same pacing"
    added_p99 = percentile(paced, 0.99) - percentile(floor, 0.99)
    return [(f"{label} p50", percentile(paced, 0.50), "ms", "", None),
            (f"{label} p99", percentile(paced, 0.99), "ms", "", None),
            (f"{floor_label}, p50", percentile(floor, 0.50), "ms", "", None),
            (f"{floor_label}, p99", percentile(floor, 0.99), "ms", "", None),
            ("relay: what the server adds at p50 (relay - floor)",
             percentile(paced, 0.50) - percentile(floor, 0.50), "ms", "", None),
            ("relay: what the server adds at p99 (relay - floor)", added_p99, "ms",
             f"< {RELAY_ADDED_P99_TARGET_MS:g}", added_p99 < RELAY_ADDED_P99_TARGET_MS)]


async def step_gaps(bench: Bench, calls: list[tuple[str, dict]], final: str) -> list[float]:
    """Run one model answer per call, then a final text, in a new session: the gaps in ms from
    the last byte of each answer to the next model request (the time the server takes)."""
    model = bench.model
    sessionid = await bench.new_session()
    first = len(model.ends)
    # Each answer leaves in one write, so the server never waits for the rest of it.
    answers = [reply(tool_calls=[call], max_piece=1 << 20) for call in calls]
    await bench.run(sessionid, *answers, reply(final, max_piece=1 << 20))
    ends, arrivals = model.ends[first:], model.arrivals[first:]
    if len(arrivals) != len(calls) + 1:
        raise BenchError(f"{len(arrivals)} model requests for {len(calls)} steps, not {len(calls) + 1}")
    return [(arrivals[i + 1] - ends[i]) / 1e6 for i in range(len(calls))]  # in the order of the calls


def gap_rows(label: str, gaps: list[float], target_ms: float) -> list[tuple]:
    gaps = sorted(gaps)
    median, worst = statistics.median(gaps), percentile(gaps, 0.99)
    return [(f"{label}, median", median, "ms", f"< {target_ms:g}", median < target_ms),
            (f"{label}, p99 (= max)", worst, "ms", f"< {target_ms:g}", worst < target_ms)]


async def measure_steps(bench: Bench) -> list[tuple]:
    """A STEPS-step run of `read` calls: the time the server takes between model calls."""
    gaps = await step_gaps(bench, [("read", {"path": f"f{i:02d}.txt"}) for i in range(STEPS)], "They say hello.")
    return gap_rows(f"step: answer's last byte to next request, {STEPS} reads", gaps, STEP_TARGET_MS) + [
        ("step: last request body of that run", len(bench.model.requests[-1].raw_body), "bytes", "", None)]


async def measure_round_trip(bench: Bench) -> list[tuple]:
    """ROUND_TRIP_STEPS `read` calls of small files: the server's time from a tool call to the
    next model request."""
    calls = [("read", {"path": f"f{i % STEPS:02d}.txt", "offset": 1 + i // STEPS}) for i in range(ROUND_TRIP_STEPS)]
    gaps = sorted(await step_gaps(bench, calls, "They say hello."))
    median = statistics.median(gaps)
    label = f"tool round trip: a `read` of a small file, median of {len(gaps)} steps"
    return [(label, median, "ms", f"<= {ROUND_TRIP_TARGET_MS:g}", median <= ROUND_TRIP_TARGET_MS),
            ("tool round trip: p90", percentile(gaps, 0.90), "ms", "", None),
            ("tool round trip: max", gaps[-1], "ms", "", None)]


async def measure_bash(bench: Bench) -> list[tuple]:
    """STEPS allowed `true` commands: the server's whole bash round trip, spawn included."""
    await api(bench.port, "permissions_save", {"projectid": bench.project["id"], "tool": "bash",
                                               "pattern": "true *", "action": "allow"})
    # Different arguments each time, so the loop guard (same call three times) stays quiet.
    first, *gaps = await step_gaps(bench, [("bash", {"command": f"true {i}"}) for i in range(STEPS + 1)], "Done.")
    # The project's first command also starts its folder watch and takes the capture for Undo.
    return [("bash: the project's first command (starts its watch and Undo capture)", first, "ms", "", None),
            *gap_rows(f"bash: allowed `true` round trip (sandbox = off), {STEPS} calls after it", gaps,
                      BASH_TARGET_MS)]


async def measure(port: int, pid: int, project_dir: str) -> list[tuple]:
    async with TimedModel() as model:
        provider = await api(port, "providers_save", {"name": "Bench", "kind": "openai",
                                                      "url": model.url})
        project = await api(port, "projects_open", {"path": project_dir})
        async with ws_connect(f"ws://{HOST}:{port}/ws/", compression=None,
                              open_timeout=API_TIMEOUT_S) as ws:
            bench = Bench(port, model, ws, project, f"{provider['id']}/{MODEL_ID}")
            rows = await measure_request(bench)
            rss_before = read_status_kb(pid, "VmRSS")
            rows += await measure_flood(bench, pid)
            rows += await measure_paced(bench)
            hwm = read_status_kb(pid, "VmHWM")
            if rss_before is not None:
                rows.append(("relay: server RSS before it", rss_before * 1024 / 1e6, "MB", "", None))
            rows.append(("relay: server peak RSS (VmHWM) after it",
                         hwm * 1024 / 1e6 if hwm is not None else "n/a", "MB", "", None))
            rows += await measure_steps(bench)
            rows += await measure_round_trip(bench)
            rows += await measure_bash(bench)
    if model.errors:
        raise BenchError(f"the scripted model saw bad requests: {model.errors[:3]!r}")
    return rows


def main() -> list[tuple]:
    with tempfile.TemporaryDirectory(prefix="totem-bench-project-") as project_dir:
        for index in range(STEPS):
            with open(os.path.join(project_dir, f"f{index:02d}.txt"), "w", encoding="utf-8") as handle:
                handle.writelines(f"file {index}, line {line}: hello\n" for line in range(FILE_LINES))
        # The server's own cost per step: the sandbox's is bench/sandbox.py's figure.
        return measured_on_server(lambda server: measure(server.port, server.pid, os.path.realpath(project_dir)),
                                  config={"sandbox": "off"})


if __name__ == "__main__":
    for row in main():
        print(row)
