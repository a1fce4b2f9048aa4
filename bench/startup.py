"""Benchmark of the server process: start-up time, idle memory and the speed of a small API read.

Owns `running_server()`, which spawns the real launcher (`python totem.py --config ...`) with a
temporary config.ini, data folder and free port, and always terminates the process and removes
the folder, whatever happens; other benchmark modules may import it. Requests go over
`http.client` (start-up polling, memory) and raw asyncio streams (throughput, so that the client
is cheap next to the server). It measures and reports; it asserts nothing and changes nothing in
totem/.

Figures:
- start-up: from spawning the process to the first `GET /api/account` answered 200, to the
  first `GET /api/projects` (the page's next request, answered from the store before the core
  is built) and, for information, to the first `GET /api/providers`, which waits for the core
  (the agent and the services, loaded once the server listens); with the
  bytecode cached as on any second `make run` (a temporary PYTHONPYCACHEPREFIX, so nothing is
  written into the repository), and once more without writing bytecode
  (PYTHONDONTWRITEBYTECODE=1, as some sandboxes and containers set it): then Totem's own modules
  are compiled at every start unless totem/__pycache__ exists; two floors (`python -c pass` and
  `import asyncio`) show how much of the time is the interpreter's;
- idle RSS (VmRSS of /proc/<pid>/status, in MB of 10**6 bytes) a moment after start and after
  ~100 API requests;
- `GET /api/projects` over keep-alive connections (one, then several at once): requests per
  second with p50 and p99 latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "totem.py")
HOST = "127.0.0.1"

STARTUP_RUNS = 10
UNCACHED_STARTUP_RUNS = 5
STARTUP_TARGET_S = 0.15
PROJECTS_TARGET_S = 0.2  # spawn to the first Projects|list answered
CORE_PATH = "/api/providers"  # an action that waits for the core
FLOOR_RUNS = 5
RSS_TARGET_MB = 40.0
IDLE_SETTLE_S = 1.5
RSS_REQUESTS = 100
REQUESTS_PER_CONNECTION = 10
THROUGHPUT_PATH = "/api/projects"
THROUGHPUT_SECONDS = 2.0
WARMUP_REQUESTS = 100
CONCURRENT_CONNECTIONS = 4

POLL_INTERVAL_S = 0.002
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 5.0
LOG_TAIL_BYTES = 2000

# Variables that would slow the server down or change what it does; the bench measures a plain
# `make run`, not a debugging session. The bytecode ones are set per measurement.
DEBUG_ENV = ("PYTHONASYNCIODEBUG", "PYTHONDEVMODE", "PYTHONTRACEMALLOC", "PYTHONPROFILEIMPORTTIME",
             "PYTHONWARNINGS", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")


class BenchError(Exception):
    """The server could not be started or answered something unexpected."""


@dataclass
class Server:
    """A spawned server: its process, port, the time it was spawned and where its log goes."""

    process: subprocess.Popen
    port: int
    spawned_at: float
    log_path: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - LOG_TAIL_BYTES))
                return handle.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""


def free_port() -> int:
    """A port that was free a moment ago (bound to port 0, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def write_config(folder: str, port: int, extra: Mapping[str, str] | None = None) -> str:
    """A config.ini for a spawned server; `extra` adds keys of [totem] (sandbox = off ...)."""
    path = os.path.join(folder, "config.ini")
    with open(path, "w", encoding="utf-8") as handle:
        # No sign-in: the figures are the server's own work, not a token check per request.
        handle.write(f"[totem]\nlisten = {HOST}\nport = {port}\ntoken = none\n"
                     f"data = {os.path.join(folder, 'data')}\n")
        handle.writelines(f"{key} = {value}\n" for key, value in (extra or {}).items())
    return path


def server_env(pycache_prefix: str | None = None) -> dict[str, str]:
    """The environment of a spawned interpreter: bytecode cached under `pycache_prefix`, or not
    written at all when it is None."""
    env = dict(os.environ)
    for name in DEBUG_ENV:
        env.pop(name, None)
    if pycache_prefix is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = pycache_prefix
    return env


def stop_process(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within STOP_TIMEOUT_S."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def running_server(env: dict[str, str], extra_args: tuple[str, ...] = (), config: Mapping[str, str] | None = None):
    """Spawn `python [extra_args] totem.py --config <temp>` in `env` (see server_env) and yield
    a Server.

    The process is terminated and the temporary folder removed on exit, exceptions and
    KeyboardInterrupt included. It does not wait for the server to answer: see wait_until_ready.
    """
    with tempfile.TemporaryDirectory(prefix="totem-bench-") as folder:
        port = free_port()
        config_path = write_config(folder, port, config)
        log_path = os.path.join(folder, "server.log")
        with open(log_path, "wb") as log:
            command = [sys.executable, *extra_args, LAUNCHER, "--config", config_path]
            spawned_at = time.perf_counter()
            process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                       stdout=log, stderr=subprocess.STDOUT)
            try:
                yield Server(process, port, spawned_at, log_path)
            finally:
                stop_process(process)


def get(connection: http.client.HTTPConnection, path: str) -> tuple[int, bytes]:
    connection.request("GET", path)
    response = connection.getresponse()
    return response.status, response.read()


def wait_until_ready(server: Server, path: str = "/api/account") -> float:
    """Seconds from the spawn to the first 200 for `GET path`, polling every POLL_INTERVAL_S.

    Raises BenchError when the server exits, answers something else, or takes START_TIMEOUT_S.
    """
    deadline = server.spawned_at + START_TIMEOUT_S
    while True:
        connection = http.client.HTTPConnection(HOST, server.port, timeout=REQUEST_TIMEOUT_S)
        try:
            status, body = get(connection, path)
        except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected):
            status = None
        finally:
            connection.close()
        if status == 200:
            return time.perf_counter() - server.spawned_at
        if status is not None:
            raise BenchError(f"GET {path} answered {status}: {body[:200]!r}")
        if server.process.poll() is not None:
            raise BenchError(f"the server exited with {server.process.returncode}:\n{server.log_tail()}")
        if time.perf_counter() > deadline:
            raise BenchError(f"the server did not answer within {START_TIMEOUT_S} s:\n"
                             f"{server.log_tail()}")
        time.sleep(POLL_INTERVAL_S)


def measured_on_server(*runs: Callable[[Server], Awaitable[list[tuple]]],
                       config: Mapping[str, str] | None = None) -> list[tuple]:
    """Spawn a server (bytecode cached in a temporary folder; `config`: more keys of its
    config.ini), wait until it answers, and run each `run(server)` in turn: their rows. A
    BenchError carries the tail of the server's log."""
    with (tempfile.TemporaryDirectory(prefix="totem-bench-pyc-") as pycache,
          running_server(server_env(pycache), config=config) as server):
        wait_until_ready(server)
        rows: list[tuple] = []
        try:
            for run in runs:
                rows += asyncio.run(run(server))
        except BenchError as exc:
            raise BenchError(f"{exc}\nserver log:\n{server.log_tail()}") from None
        return rows


def read_rss_mb(pid: int) -> float | None:
    """VmRSS of a process in MB (10**6 bytes), or None where /proc is not available."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        return None
    return None


def send_api_requests(port: int, count: int) -> None:
    """`count` small API reads, alternating two actions, on a new connection every few requests."""
    paths = ("/api/account", "/api/projects")
    connection = None
    try:
        for index in range(count):
            if index % REQUESTS_PER_CONNECTION == 0:
                if connection is not None:
                    connection.close()
                connection = http.client.HTTPConnection(HOST, port, timeout=REQUEST_TIMEOUT_S)
            path = paths[index % len(paths)]
            status, body = get(connection, path)
            if status != 200:
                raise BenchError(f"GET {path} answered {status}: {body[:200]!r}")
    finally:
        if connection is not None:
            connection.close()


# -- throughput over asyncio streams ---------------------------------------------------------


async def fetch(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> None:
    """Send one keep-alive request and read its answer whole. Raises BenchError unless 200."""
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, _, header_text = head.decode("latin-1").partition("\r\n")
    length = 0
    for line in header_text.split("\r\n"):
        name, _, value = line.partition(":")
        if name.lower() == "content-length":
            length = int(value)
    body = await reader.readexactly(length)
    if status_line.split(" ", 2)[1] != "200":
        raise BenchError(f"{status_line}: {body[:200]!r}")


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of sorted values."""
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


async def run_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes,
                     count: int = 0, stop_at: float = 0.0) -> list[float]:
    """Send `request` `count` times, or until perf_counter() reaches `stop_at`: the latencies."""
    latencies = []
    while len(latencies) < count or time.perf_counter() < stop_at:
        began = time.perf_counter()
        await fetch(reader, writer, request)
        latencies.append(time.perf_counter() - began)
    return latencies


async def measure_throughput(port: int, path: str, connections: int,
                             seconds: float) -> tuple[float, float, float]:
    """(requests per second, p50 ms, p99 ms) of `GET path` on `connections` keep-alive connections.

    Raises BenchError for an answer other than 200, TimeoutError when the server stalls.
    """
    request = f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode("latin-1")
    streams = []
    try:
        async with asyncio.timeout(seconds + 2 * REQUEST_TIMEOUT_S):
            for _ in range(connections):
                streams.append(await asyncio.open_connection(HOST, port))
            await asyncio.gather(*(run_client(reader, writer, request, count=WARMUP_REQUESTS)
                                   for reader, writer in streams))
            started = time.perf_counter()
            stop_at = started + seconds
            results = await asyncio.gather(*(run_client(reader, writer, request, stop_at=stop_at)
                                             for reader, writer in streams))
            elapsed = time.perf_counter() - started
    finally:
        for _, writer in streams:
            writer.close()
        for _, writer in streams:
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
    latencies = sorted(latency for result in results for latency in result)
    return (len(latencies) / elapsed, percentile(latencies, 0.50) * 1000,
            percentile(latencies, 0.99) * 1000)


# -- the figures -----------------------------------------------------------------------------


def measure_startup(env: dict[str, str], runs: int, path: str = "/api/account") -> list[float]:
    """Spawn-to-first-200 for `GET path` of `runs` fresh servers, after one untimed run (fills a
    bytecode cache)."""
    times = []
    for run in range(runs + 1):
        with running_server(env) as server:
            elapsed = wait_until_ready(server, path)
        if run:
            times.append(elapsed)
    return times


def measure_floor(env: dict[str, str], code: str) -> float:
    """Median seconds of `python -c code`, after one untimed run: a floor under the start-up."""
    times = []
    for _ in range(FLOOR_RUNS + 1):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)
        times.append(time.perf_counter() - began)
    return statistics.median(times[1:])


def target_row(name: str, value: float | None, unit: str, limit: float) -> tuple:
    target = f"< {limit:g} {unit}"
    if value is None:
        return (name, "n/a", unit, target, None)
    return (name, value, unit, target, value < limit)


def main() -> list[tuple]:
    with tempfile.TemporaryDirectory(prefix="totem-bench-pyc-") as pycache:
        return measure_all(server_env(pycache))


def measure_all(env: dict[str, str]) -> list[tuple]:
    rows = []
    times = measure_startup(env, STARTUP_RUNS)
    rows.append(target_row(f"startup: spawn to first 200, median of {len(times)}",
                           statistics.median(times), "s", STARTUP_TARGET_S))
    rows.append(target_row(f"startup: spawn to first 200, max of {len(times)}",
                           max(times), "s", STARTUP_TARGET_S))
    projects = measure_startup(env, STARTUP_RUNS, THROUGHPUT_PATH)
    rows.append(target_row(f"startup: spawn to first 200 of GET {THROUGHPUT_PATH}, median of {len(projects)}",
                           statistics.median(projects), "s", PROJECTS_TARGET_S))
    rows.append(target_row(f"startup: spawn to first 200 of GET {THROUGHPUT_PATH}, max of {len(projects)}",
                           max(projects), "s", PROJECTS_TARGET_S))
    # The other actions need the core (the agent and the services), which loads once the server listens.
    core = measure_startup(env, STARTUP_RUNS, CORE_PATH)
    rows.append((f"startup: spawn to first 200 of GET {CORE_PATH} (the core built), median of {len(core)}",
                 statistics.median(core), "s", "", None))
    uncached = measure_startup(server_env(None), UNCACHED_STARTUP_RUNS)
    rows.append(target_row(f"startup, PYTHONDONTWRITEBYTECODE=1: median of {len(uncached)}",
                           statistics.median(uncached), "s", STARTUP_TARGET_S))
    rows.append(("floor: `python -c pass`, median", measure_floor(env, "pass"), "s", "", None))
    rows.append(("floor: `python -c 'import asyncio'`, median", measure_floor(env, "import asyncio"),
                 "s", "", None))

    with running_server(env) as server:
        wait_until_ready(server)
        time.sleep(IDLE_SETTLE_S)
        rows.append(target_row(f"idle RSS, {IDLE_SETTLE_S:g} s after start", read_rss_mb(server.pid),
                               "MB", RSS_TARGET_MB))
        send_api_requests(server.port, RSS_REQUESTS)
        rows.append(target_row(f"idle RSS, after {RSS_REQUESTS} API requests", read_rss_mb(server.pid),
                               "MB", RSS_TARGET_MB))
        total = RSS_REQUESTS
        for connections in (1, CONCURRENT_CONNECTIONS):
            rps, p50, p99 = asyncio.run(measure_throughput(server.port, THROUGHPUT_PATH, connections,
                                                           THROUGHPUT_SECONDS))
            total += round(rps * THROUGHPUT_SECONDS) + WARMUP_REQUESTS * connections
            label = f"GET {THROUGHPUT_PATH}, {connections} keep-alive conn."
            rows.append((f"{label}: throughput", rps, "req/s", "", None))
            rows.append((f"{label}: p50 latency", p50, "ms", "", None))
            rows.append((f"{label}: p99 latency", p99, "ms", "", None))
        rows.append(target_row(f"RSS after ~{total:,} requests", read_rss_mb(server.pid), "MB",
                               RSS_TARGET_MB))
    return rows


if __name__ == "__main__":
    for row in main():
        print(row)
