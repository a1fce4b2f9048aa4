"""Child processes: one command with a working folder, a minimal environment, a timeout, an
output cap, and a kill of its whole process group.

A command runs as a child in its own session (`start_new_session=True`, so its own process
group), stdin closed, stdout and stderr merged into one pipe. Its environment is built here from
nothing but PATH, HOME, USER, LANG, TERM and SHELL, so the server's configuration, token and
provider keys never reach it; git inside it has the repository's own programs (fsmonitor,
hooks) turned off through GIT_CONFIG_COUNT, because a `.git/config` in a cloned project could
otherwise make a plain `git status` run a program (needs git >= 2.31, which reads these
variables; older gits ignore them).

Output is read as it comes: each chunk goes to `on_output`, decoded with an incremental UTF-8
decoder, and into a bounded buffer that keeps the first and the last half of the cap, so a
command that prints gigabytes keeps memory flat.

The command ends when its first process (the shell) exits. Processes it left running in its
group (`server &`) are then stopped, like everything of the group on a timeout or when the
awaiting task is cancelled (abort): SIGTERM to the group, SIGKILL after a grace, the leader
reaped. Orphaned members are reaped by init; a process that starts its own session (setsid,
a daemon) leaves the group and cannot be reached: an honest limit of process groups.

The pipes are read through a SubprocessProtocol (the machinery under
`asyncio.create_subprocess_exec`) rather than `Process.wait()`, because in current Python
releases `wait()` also waits for the pipes to close: a backgrounded grandchild holding stdout
would hide the shell's exit until the timeout.

Must not: decide whether a command is allowed (permissions does) or whether the folder is inside
the project (the caller checks it with boundary), scrub secrets from the output (the caller
does), or pass any of the server's environment beyond the variables named here.
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import os
import pwd
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_OUTPUT_CAP_BYTES = 30_000
# Between SIGTERM and SIGKILL of the group: time for a program to clean up (2 s on a timeout).
KILL_GRACE_S = 2.0
# On abort the session must stop within a second, so the grace is shorter.
ABORT_GRACE_S = 0.5
# How often a stopping group is checked during the grace.
KILL_POLL_S = 0.02
# A process in uninterruptible sleep may outlive SIGKILL for a while; do not wait for ever.
REAP_TIMEOUT_S = 5.0
# After the shell exits, how long its output pipe may stay open (held by a background process)
# before the processes left in the group are stopped.
LINGER_S = 0.3
# After the group is stopped, how long to wait for the last output still in the pipe.
DRAIN_S = 1.0
# The shell that runs a command line: bash where it is installed (the tool is named bash, and
# models write bash), else the system's /bin/sh. shellwords.py understands only what both read
# alike, so the permission decision does not depend on which one it is.
SHELL_CANDIDATES = ("/bin/bash", "/usr/bin/bash", "/bin/sh")
SHELL_PATH = "/bin/sh"
DEFAULT_LANG = "C.UTF-8"
# git reads these as if they were `-c` options: the strongest layer, over the repository's own.
GIT_SAFETY = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.fsmonitor",
    "GIT_CONFIG_VALUE_0": "false",
    "GIT_CONFIG_KEY_1": "core.hooksPath",
    "GIT_CONFIG_VALUE_1": "/dev/null",
}


class CommandError(Exception):
    """A command that could not start (missing program or folder); the message says why."""


@dataclass(frozen=True)
class CommandResult:
    """How a command ended."""

    exit_code: int | None  # the shell's status; -N when a signal N ended it; None if never reaped
    output: str  # stdout and stderr merged; head and tail with a line saying what was cut
    timed_out: bool
    killed: bool  # Totem had to signal processes of the group (timeout or left-over processes)
    duration_s: float
    cut_bytes: int = 0  # bytes left out of `output` from the middle


def minimal_environment() -> dict[str, str]:
    """The whole environment of a command or terminal: no key, token or setting of the server."""
    account = _account()
    env = {
        "PATH": _absolute_path(os.environ.get("PATH") or os.defpath),
        "HOME": os.environ.get("HOME") or (account.pw_dir if account else "/"),
        "USER": os.environ.get("USER") or (account.pw_name if account else ""),
        "LANG": os.environ.get("LANG") or DEFAULT_LANG,
        "TERM": "dumb",
        "SHELL": os.environ.get("SHELL") or SHELL_PATH,
    }
    env.update(GIT_SAFETY)
    return {key: value for key, value in env.items() if value}


def _absolute_path(path: str) -> str:
    """PATH without its empty and relative entries: those would find a program of the project
    (`ls` in the working folder) before the system's."""
    return os.pathsep.join(entry for entry in path.split(os.pathsep) if os.path.isabs(entry))


@functools.cache
def command_shell() -> str:
    """The absolute path of the shell that runs command lines (see SHELL_CANDIDATES)."""
    for candidate in SHELL_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return SHELL_PATH


def shell_argv(command: str) -> list[str]:
    """The argv that runs a command line: `<shell> -c <line>`, no startup files read."""
    return [command_shell(), "-c", command]


async def run_command(command: str | Sequence[str], *, cwd: str, timeout_s: float | None,
                      output_cap_bytes: int, on_output: Callable[[str], None] | None = None,
                      env: Mapping[str, str] | None = None) -> CommandResult:
    """Run a shell line (through `shell_argv()`) or an argv list in `cwd` and collect its output.

    `on_output` receives the decoded text as it comes (never an empty string). `env` adds
    variables over `minimal_environment()`; the server's own environment is never passed.
    A timeout stops the whole group and returns a result with `timed_out`; `timeout_s` None
    waits for ever. Cancelling the awaiting task stops the group, then re-raises.

    Raises CommandError when the command cannot start, ValueError for an empty argv or a cap
    under 2 bytes, and whatever `on_output` raises (after stopping the group).
    """
    argv = shell_argv(command) if isinstance(command, str) else list(command)
    if not argv:
        raise ValueError("empty command")
    if output_cap_bytes < 2:
        raise ValueError("the output cap must be at least 2 bytes")
    child_env = minimal_environment()
    child_env.update(env or {})
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    try:
        transport, collector = await loop.subprocess_exec(
            lambda: _Collector(output_cap_bytes, on_output), *argv, cwd=cwd, env=child_env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise CommandError(f"the command could not start: {exc.strerror or exc}{where}") from None
    child = _Child(transport)
    timed_out = killed = False
    try:
        try:
            async with asyncio.timeout(timeout_s):
                await collector.until(collector.exited)
                await collector.until(collector.closed, LINGER_S)
        except TimeoutError:
            timed_out = True
        # The shell is gone (or out of time): stop whatever is left of its group.
        killed = await kill_group(child)
        await collector.until(collector.closed, DRAIN_S)
    except BaseException:  # cancelled (abort) or on_output failed: nothing may outlive the call
        await kill_group(child, ABORT_GRACE_S)
        raise
    finally:
        transport.close()
    collector.finish()
    if collector.failed.done():
        raise collector.failed.result()
    output, cut = collector.buffer.text()
    return CommandResult(exit_code=child.returncode, output=output, timed_out=timed_out,
                         killed=killed, duration_s=time.monotonic() - started, cut_bytes=cut)


async def kill_group(process, grace_s: float = KILL_GRACE_S) -> bool:
    """Stop the process group that `process` leads and reap `process`.

    `process` is anything with `pid` and `returncode` (an `asyncio.subprocess.Process` started
    with `start_new_session=True`, so that its pid is the group id). The group gets SIGTERM,
    then SIGKILL if a member still runs after `grace_s`; if the wait is cancelled, SIGKILL goes
    at once before the cancellation goes on. Returns whether any running process was signalled.
    Raises nothing of its own.
    """
    loop = asyncio.get_running_loop()
    pgid = process.pid
    if not group_running(pgid):
        await _reaped(process, loop.time() + REAP_TIMEOUT_S)
        return False
    _signal_group(pgid, signal.SIGTERM)
    try:
        deadline = loop.time() + grace_s
        while loop.time() < deadline:
            if process.returncode is not None and not group_running(pgid):
                return True
            await asyncio.sleep(KILL_POLL_S)
        _signal_group(pgid, signal.SIGKILL)
        await _reaped(process, loop.time() + REAP_TIMEOUT_S)
    except BaseException:
        _signal_group(pgid, signal.SIGKILL)
        raise
    return True


def group_running(pgid: int) -> bool:
    """Whether a process of the group still runs; zombies waiting to be reaped do not count.

    Without /proc a zombie cannot be told apart, so any member counts.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc/self"):
        return True
    return any(state != "Z" for state in group_states(pgid).values())


def group_states(pgid: int) -> dict[int, str]:
    """`{pid: state letter}` of the members of a process group, read from /proc (Linux)."""
    states = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read().decode("ascii", "replace")
        except OSError:  # it ended while we looked
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # the name in parentheses may hold spaces
        if len(fields) > 2 and fields[2] == str(pgid):
            states[int(name)] = fields[0]
    return states


class OutputBuffer:
    """The first and the last half of the cap of a byte stream, and how much was in between."""

    def __init__(self, cap: int):
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if len(data) >= self.tail_cap:
            self.tail = bytearray(data[-self.tail_cap:])
        elif data:
            self.tail += data
            del self.tail[:-self.tail_cap]

    def text(self) -> tuple[str, int]:
        """The kept text and the number of bytes cut from the middle (0 when all was kept).

        The cut falls on character boundaries: a character split by it counts as cut.
        """
        cut = self.total - len(self.head) - len(self.tail)
        if cut == 0:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace"), 0
        head = _without_partial_end(bytes(self.head))
        tail = _without_partial_start(bytes(self.tail))
        cut = self.total - len(head) - len(tail)
        marker = f"[... {cut} bytes of output cut here ...]"
        head_text = head.decode("utf-8", "replace")
        joint = "" if not head_text or head_text.endswith("\n") else "\n"
        return f"{head_text}{joint}{marker}\n{tail.decode('utf-8', 'replace')}", cut


class _Collector(asyncio.SubprocessProtocol):
    """Receives the merged output and the exit of one child, on the event loop."""

    def __init__(self, cap: int, on_output: Callable[[str], None] | None):
        loop = asyncio.get_running_loop()
        self.buffer = OutputBuffer(cap)
        self.on_output = on_output
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.exited = loop.create_future()
        self.closed = loop.create_future()  # the output pipe reached its end
        self.failed = loop.create_future()  # on_output raised: its exception is the result

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.buffer.add(data)
        self._send(self.decoder.decode(data))

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def finish(self) -> None:
        """Pass on a character the decoder still holds (an incomplete one, as U+FFFD)."""
        self._send(self.decoder.decode(b"", True))

    async def until(self, future: asyncio.Future, timeout_s: float | None = None) -> None:
        """Wait for `future` (at most `timeout_s`); raise at once what on_output raised."""
        await asyncio.wait((future, self.failed), timeout=timeout_s,
                           return_when=asyncio.FIRST_COMPLETED)
        if self.failed.done():
            raise self.failed.result()

    def _send(self, text: str) -> None:
        if not text or self.on_output is None or self.failed.done():
            return
        try:
            self.on_output(text)
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting task, not lost in the loop
            self.failed.set_result(exc)


class _Child:
    """The pid and exit status of a child started through `loop.subprocess_exec`."""

    def __init__(self, transport: asyncio.SubprocessTransport):
        self._transport = transport
        self.pid = transport.get_pid()

    @property
    def returncode(self) -> int | None:
        return self._transport.get_returncode()


async def _reaped(process, deadline: float) -> None:
    loop = asyncio.get_running_loop()
    while process.returncode is None and loop.time() < deadline:
        await asyncio.sleep(KILL_POLL_S)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _account():
    try:
        return pwd.getpwuid(os.getuid())
    except KeyError:  # a uid without an entry, as in some containers
        return None


def _without_partial_end(data: bytes) -> bytes:
    """`data` without a UTF-8 character that the end cuts in two."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back for the lead
            continue
        needed = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else \
            4 if byte >> 3 == 0b11110 else 1
        return data[:-back] if needed > back else data
    return data


def _without_partial_start(data: bytes) -> bytes:
    """`data` without the continuation bytes of a character that the start cuts in two."""
    start = 0
    while start < min(3, len(data)) and data[start] & 0xC0 == 0x80:
        start += 1
    return data[start:]
