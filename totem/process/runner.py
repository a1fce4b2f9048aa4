"""Child processes: every process the server starts, in its own process group, with a working
folder, an explicit environment, a timeout, output caps, and a kill of its whole group.

Two ways in, one way through: `run_command` for the agent's commands (a shell line or an argv,
the minimal environment built here, stdout and stderr merged and decoded as text) and
`run_process` for the server's own helpers, git and the search tool (an argv, the caller's
explicit environment, stdout and stderr apart as raw bytes, stdin closed or fed). Both start the
child through `_spawn` and wait for it through `_supervise`. The third way, `spawn_terminal`,
starts the person's shell of the Terminal panel on a pty that becomes its controlling terminal
(the caller reads and writes the pty; `end_terminal` hangs up the group, then kills it). The
fourth, `spawn_server`, starts a program that the server talks to over its open stdin and stdout
for as long as it is needed (a project's MCP server; `end_server` closes its stdin, then stops its
group). No other module of the package starts a process (tests/test_process_starts.py checks the source).

A child runs in its own session (`start_new_session=True`, so its own process group). Its
environment is only ever the one given: `run_command` builds it from nothing but PATH, HOME,
USER, LANG, TERM and SHELL, so the server's configuration, token and provider keys never reach
it; git inside it has the repository's own programs (fsmonitor, hooks) turned off through
GIT_CONFIG_COUNT, because a `.git/config` in a cloned project could otherwise make a plain
`git status` run a program (needs git >= 2.31, which reads these variables; older gits ignore
them). The server's own environment is never inherited.

Output is read as it comes into bounded buffers, so a child that prints gigabytes keeps memory
flat: `run_command` keeps the first and the last half of its cap and hands each chunk, decoded
with an incremental UTF-8 decoder, to `on_output`; `run_process` keeps the first bytes of each
stream up to its cap and may hand each stdout chunk to a reader that says when it has enough.

The child ends when its first process (the leader: the shell, git, rg) exits. Processes it left
running in its group (`server &`) are then stopped, like everything of the group on a timeout,
when the reader has enough, or when the awaiting task is cancelled (abort): SIGTERM to the
group, SIGKILL after a grace, the leader reaped. Orphaned members are reaped by init; a process
that starts its own session (setsid, a daemon) leaves the group and cannot be reached, except
in the sandbox: `run_command` and `spawn_server` take a `confine` (sandbox.py's) that turns the
argv into a `Launch` (bwrap and its PID namespace, which ends with the leader, or the launcher
that stays as a subreaper), with the descriptors the child inherits, a `started` step once it
runs, a `spawner` (the thread whose Landlock domain it must inherit) and a `release` once it
has ended.

The pipes are read through a SubprocessProtocol (the machinery under
`asyncio.create_subprocess_exec`) rather than `Process.wait()`, because in current Python
releases `wait()` also waits for the pipes to close: a backgrounded grandchild holding stdout
would hide the leader's exit until the timeout.

Must not: decide whether a command is allowed (permissions does) or whether the folder is inside
the project (the caller checks it with boundary), scrub secrets from the output (the caller
does), or pass any of the server's environment to a child beyond what the caller names.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import functools
import os
import pwd
import signal
import struct
import sys
import termios
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
# After the leader exits, how long its output pipes may stay open (held by a background
# process) before the processes left in the group are stopped.
LINGER_S = 0.3
# After the group is stopped, how long to wait for the last output still in the pipes.
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
_STDOUT, _STDERR = 1, 2


class CommandError(Exception):
    """A command that could not start (missing program or folder); the message says why."""


@dataclass(frozen=True)
class Launch:
    """How a confined child starts (sandbox.py builds it): the argv that wraps the child's own,
    what its environment adds, the descriptors it inherits, and what to do once it has ended."""

    argv: list[str]
    env: Mapping[str, str] = field(default_factory=dict)
    pass_fds: tuple[int, ...] = ()
    release: Callable[[], Awaitable[None]] | None = None
    # Called with the leader's pid once it runs, before anything else waits on it (the
    # sandbox puts the command in its cgroup, then lets it go on). Raises to stop the child.
    started: Callable[[int], Awaitable[None]] | None = None
    # Runs a coroutine function (the start and the watch of the child) where the child must be
    # forked from: the sandbox's thread that holds a Landlock domain, which a child inherits.
    spawner: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]] | None = None


# Turns a child's argv into its Launch; raises CommandError to refuse it.
Confine = Callable[[list[str]], Awaitable[Launch]]


@dataclass(frozen=True)
class CommandResult:
    """How a command ended."""

    exit_code: int | None  # the shell's status; -N when a signal N ended it; None if never reaped
    output: str  # stdout and stderr merged; head and tail with a line saying what was cut
    timed_out: bool
    killed: bool  # Totem had to signal processes of the group (timeout or left-over processes)
    duration_s: float
    cut_bytes: int = 0  # bytes left out of `output` from the middle


@dataclass(frozen=True)
class ProcessResult:
    """How a `run_process` child ended, with what it wrote."""

    returncode: int | None  # the leader's status; -N when a signal N ended it; None if never reaped
    stdout: bytes  # the first `stdout_cap` bytes of stdout
    stderr: bytes  # the first `stderr_cap` bytes of stderr
    timed_out: bool
    killed: bool  # processes of the group had to be signalled (timeout, stop, left-overs)
    stopped: bool = False  # `on_stdout` had read enough and the group was stopped
    stdout_cut: int = 0  # bytes of stdout past the cap, not kept
    stderr_cut: int = 0  # bytes of stderr past the cap, not kept


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
                      env: Mapping[str, str] | None = None, confine: Confine | None = None) -> CommandResult:
    """Run a shell line (through `shell_argv()`) or an argv list in `cwd` and collect its output.

    `on_output` receives the decoded text as it comes (never an empty string). `env` adds
    variables over `minimal_environment()`; the server's own environment is never passed.
    `confine` (the sandbox's) wraps the argv; its release runs once the child has ended.
    A timeout stops the whole group and returns a result with `timed_out`; `timeout_s` None
    waits for ever. Cancelling the awaiting task stops the group, then re-raises.

    Raises CommandError when the command cannot start or `confine` refuses it, ValueError for an
    empty argv or a cap under 2 bytes, and whatever `on_output` raises (after stopping the group).
    """
    argv = shell_argv(command) if isinstance(command, str) else list(command)
    if not argv:
        raise ValueError("empty command")
    if output_cap_bytes < 2:
        raise ValueError("the output cap must be at least 2 bytes")
    launch = await confine(argv) if confine is not None else Launch(argv)
    child_env = minimal_environment()
    child_env.update(env or {})
    child_env.update(launch.env)
    # With a spawner the child is watched from another thread's loop: its output comes back here.
    sink = _TextSink(output_cap_bytes, _on_this_loop(on_output) if launch.spawner and on_output else on_output)
    started = time.monotonic()

    async def execute() -> tuple[int | None, bool, bool]:
        try:
            transport, collector = await _spawn(launch.argv, cwd, child_env, {_STDOUT: sink},
                                                merge_stderr=True, pass_fds=launch.pass_fds)
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise CommandError(f"the command could not start: {exc.strerror or exc}{where}") from None
        await _started(launch, transport)
        return await _supervise(transport, collector, timeout_s, KILL_GRACE_S)

    try:
        if launch.spawner is None:
            returncode, timed_out, killed = await execute()
        else:
            returncode, timed_out, killed = await launch.spawner(execute)
    finally:
        if launch.release is not None:
            await asyncio.shield(launch.release())
    sink.on_output = on_output
    sink.finish()
    output, cut = sink.buffer.text()
    return CommandResult(exit_code=returncode, output=output, timed_out=timed_out,
                         killed=killed, duration_s=time.monotonic() - started, cut_bytes=cut)


async def run_process(argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                      timeout_s: float | None, stdout_cap: int, stderr_cap: int,
                      stdin_bytes: bytes | None = None,
                      on_stdout: Callable[[bytes], bool | None] | None = None,
                      kill_grace_s: float = KILL_GRACE_S) -> ProcessResult:
    """Run an argv (no shell) in `cwd` with exactly `env`; collect stdout and stderr as bytes.

    The environment is the caller's whole choice and must be given: nothing of the server's is
    added. stdin is closed, or with `stdin_bytes` fed those bytes and then closed. Of each output
    stream the first `stdout_cap` / `stderr_cap` bytes are kept and the rest only counted.
    `on_stdout`, when given, gets every chunk of stdout as it comes (the kept head aside); when it
    returns True it has read enough: the group is stopped at once, the rest is not read and the
    result has `stopped`. When the leader exits, what it left in its group is stopped; a timeout
    stops the group after `kill_grace_s` at most and returns a result with `timed_out`
    (`timeout_s` None waits for ever); cancelling the awaiting task stops the group (a grace of
    at most ABORT_GRACE_S), then re-raises.

    Raises OSError as `loop.subprocess_exec` does when the program or the folder cannot be used
    (FileNotFoundError for either: the caller words the message), ValueError for an empty argv,
    a negative cap or no `env`, and whatever `on_stdout` raises (after stopping the group).
    """
    argv = list(argv)
    if not argv:
        raise ValueError("empty command")
    if stdout_cap < 0 or stderr_cap < 0:
        raise ValueError("an output cap cannot be negative")
    if env is None:  # asyncio would pass the server's own environment on
        raise ValueError("a child's environment must be given")
    stdout, stderr = _HeadBuffer(stdout_cap), _HeadBuffer(stderr_cap)

    def read_stdout(data: bytes) -> bool | None:
        stdout.add(data)
        return on_stdout(data) if on_stdout is not None else None

    transport, collector = await _spawn(argv, cwd, dict(env),
                                        {_STDOUT: read_stdout, _STDERR: stderr.add},
                                        stdin_bytes=stdin_bytes)
    returncode, timed_out, killed = await _supervise(transport, collector, timeout_s, kill_grace_s)
    return ProcessResult(returncode=returncode, stdout=bytes(stdout.kept),
                         stderr=bytes(stderr.kept), timed_out=timed_out, killed=killed,
                         stopped=collector.stopped.done(), stdout_cut=stdout.cut,
                         stderr_cut=stderr.cut)


def _on_this_loop(callback: Callable[[str], None]) -> Callable[[str], None]:
    """`callback`, called on the running loop whatever thread calls the result (in order)."""
    loop = asyncio.get_running_loop()

    def send(text: str) -> None:
        loop.call_soon_threadsafe(callback, text)
    return send


async def _started(launch: Launch, transport: asyncio.SubprocessTransport) -> None:
    """Run the launch's `started` on a child that runs; if it fails or is cancelled, the
    child's group is stopped before the error goes on."""
    if launch.started is None:
        return
    try:
        await launch.started(transport.get_pid())
    except BaseException:
        try:
            await kill_group(_Child(transport), ABORT_GRACE_S)
        finally:
            transport.close()
        raise


async def _spawn(argv: list[str], cwd: str, env: dict[str, str],
                 sinks: Mapping[int, Callable[[bytes], bool | None]], *,
                 merge_stderr: bool = False, stdin_bytes: bytes | None = None, keep_stdin: bool = False,
                 pass_fds: Sequence[int] = (),
                 ) -> tuple[asyncio.SubprocessTransport, _Collector]:
    """Start `argv` in a session of its own, reading the pipes of `sinks` (1, and 2 unless
    `merge_stderr`); stdin is closed, fed `stdin_bytes`, or with `keep_stdin` left open for the
    caller; the descriptors `pass_fds` (a sandbox's rulesets) stay open in the child. The one
    place of the package that starts a process. Raises OSError."""
    loop = asyncio.get_running_loop()
    piped = stdin_bytes is not None or keep_stdin
    stdin = asyncio.subprocess.PIPE if piped else asyncio.subprocess.DEVNULL
    stderr = asyncio.subprocess.STDOUT if merge_stderr else \
        asyncio.subprocess.PIPE if _STDERR in sinks else asyncio.subprocess.DEVNULL
    start = asyncio.ensure_future(loop.subprocess_exec(
        lambda: _Collector(sinks), *argv, cwd=cwd, env=env, stdin=stdin,
        stdout=asyncio.subprocess.PIPE, stderr=stderr, start_new_session=True, pass_fds=tuple(pass_fds)))
    try:
        transport, collector = await asyncio.shield(start)
    except asyncio.CancelledError:
        await _stop_started(start)
        raise
    if stdin_bytes is not None:
        pipe = transport.get_pipe_transport(0)
        assert isinstance(pipe, asyncio.WriteTransport)
        # Buffered by the transport and written as the child reads; a child that exits without
        # reading only ends the pipe (EPIPE), the result stays its own.
        pipe.write(stdin_bytes)
        pipe.write_eof()
    return transport, collector


@dataclass
class ServerChild:
    """A program the server talks to over its standard streams for as long as it is needed (a
    project's MCP server): its process group, its stdin, its exit and the end of its stderr."""

    pid: int
    transport: asyncio.SubprocessTransport
    collector: _Collector
    stderr: OutputBuffer
    release: Callable[[], Awaitable[None]] | None = None  # the sandbox's, once it has ended

    @property
    def exited(self) -> asyncio.Future:
        return self.collector.exited

    @property
    def returncode(self) -> int | None:
        return self.transport.get_returncode()

    def write(self, data: bytes) -> None:
        """Send bytes to its stdin (buffered by the transport). Raises ConnectionError once
        the child has gone."""
        pipe = self.transport.get_pipe_transport(0)
        if pipe is None or pipe.is_closing() or self.exited.done():
            raise ConnectionError("the program has ended")
        assert isinstance(pipe, asyncio.WriteTransport)
        pipe.write(data)

    def stderr_text(self) -> str:
        """What it wrote to stderr, its first and last lines (for an error message)."""
        return self.stderr.text()[0].strip()


async def spawn_server(argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                       on_stdout: Callable[[bytes], None], stderr_cap: int = 4096,
                       confine: Confine | None = None) -> ServerChild:
    """Start `argv` (no shell) in `cwd` with exactly `env` (and what `confine` adds), its stdin
    open for `write`, every chunk of its stdout given to `on_stdout` and `stderr_cap` bytes of
    its stderr kept (head and tail). It runs until `end_server`. Raises OSError
    (FileNotFoundError for a missing program or folder), CommandError when `confine` refuses
    it, and ValueError for an empty argv."""
    argv = list(argv)
    if not argv:
        raise ValueError("empty command")
    launch = await confine(argv) if confine is not None else Launch(argv)
    if launch.spawner is not None:  # its pipes and its exit are watched here, on this loop
        raise ValueError("a server child is started on the loop that talks to it, not by a spawner")
    stderr = OutputBuffer(stderr_cap)

    def read_stdout(data: bytes) -> None:
        on_stdout(data)

    try:
        transport, collector = await _spawn(launch.argv, cwd, dict(env) | dict(launch.env),
                                            {_STDOUT: read_stdout, _STDERR: stderr.add}, keep_stdin=True,
                                            pass_fds=launch.pass_fds)
        await _started(launch, transport)
    except BaseException:
        if launch.release is not None:
            await asyncio.shield(launch.release())
        raise
    return ServerChild(transport.get_pid(), transport, collector, stderr, launch.release)


async def end_server(child: ServerChild, grace_s: float = ABORT_GRACE_S) -> None:
    """Stop a server child as its protocol expects: close its stdin, give it `grace_s` to
    exit, then stop its whole group (SIGTERM, then SIGKILL). Raises nothing of its own."""
    pipe = child.transport.get_pipe_transport(0)
    if pipe is not None and not pipe.is_closing():
        pipe.close()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(child.exited), grace_s)
    try:
        await kill_group(_Child(child.transport), grace_s)
    finally:
        child.transport.close()
        release, child.release = child.release, None
        if release is not None:
            await asyncio.shield(release())


# A terminal's shell must own its pty as its controlling terminal (job control, Ctrl-C): the
# child is a session leader (start_new_session) that claims the pty on its standard input, then
# becomes the shell. A fresh interpreter does it, so nothing runs between fork and exec in this
# process (a fork of a process with threads may deadlock).
_CONTROLLING_TTY = ("import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
                    "os.execvp(sys.argv[1], sys.argv[1:])")


@dataclass
class TerminalChild:
    """A shell on a pty: its process group, the master side (non-blocking) and its exit."""

    pid: int
    fd: int
    exited: asyncio.Future  # the exit status (negative: killed by that signal)
    transport: asyncio.SubprocessTransport


class _TerminalProtocol(asyncio.SubprocessProtocol):
    def __init__(self, exited: asyncio.Future):
        self.exited = exited
        self.transport: asyncio.SubprocessTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def process_exited(self) -> None:
        if not self.exited.done() and self.transport is not None:
            self.exited.set_result(self.transport.get_returncode())


def set_terminal_size(fd: int, columns: int, rows: int) -> None:
    """Tell a pty its size; its foreground processes get SIGWINCH. Raises OSError."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


async def spawn_terminal(argv: Sequence[str], *, cwd: str, env: Mapping[str, str], columns: int,
                         rows: int) -> TerminalChild:
    """Start `argv` on a new pty of `columns` x `rows`, in a session of its own with the pty as
    its controlling terminal and exactly `env`. Raises OSError."""
    loop = asyncio.get_running_loop()
    master, slave = os.openpty()
    try:
        set_terminal_size(master, columns, rows)
        os.set_blocking(master, False)
        exited = loop.create_future()
        transport, _protocol = await loop.subprocess_exec(
            lambda: _TerminalProtocol(exited), sys.executable, "-I", "-S", "-c", _CONTROLLING_TTY, *argv,
            cwd=cwd, env=dict(env), stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return TerminalChild(transport.get_pid(), master, exited, transport)


async def end_terminal(child: TerminalChild, grace_s: float = ABORT_GRACE_S) -> object:
    """Hang up a terminal's process group, then kill what is left of it; returns the exit
    status of its shell (None if it could not be reaped)."""
    loop = asyncio.get_running_loop()
    _signal_group(child.pid, signal.SIGHUP)
    deadline = loop.time() + grace_s
    while loop.time() < deadline and (not child.exited.done() or group_running(child.pid)):
        await asyncio.sleep(KILL_POLL_S)
    if group_running(child.pid) or not child.exited.done():
        _signal_group(child.pid, signal.SIGKILL)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(child.exited), REAP_TIMEOUT_S)
    child.transport.close()
    return child.exited.result() if child.exited.done() else None


async def _stop_started(start: asyncio.Future) -> None:
    """Stop the group of a child whose start was cancelled while asyncio connected its pipes.

    The child runs from the fork on; asyncio's own clean-up of a cancelled start would kill the
    leader alone and then wait for pipes that the rest of its group may hold for ever. So the
    start is let finish (a second cancellation changes nothing: the first is raised after),
    then the group goes like any other. Raises nothing of its own.
    """
    while not start.done():
        try:
            await asyncio.wait((start,))
        except asyncio.CancelledError:
            continue
    if start.cancelled() or start.exception() is not None:
        return
    transport, _ = start.result()
    try:
        await kill_group(_Child(transport), ABORT_GRACE_S)
    finally:
        transport.close()


async def _supervise(transport: asyncio.SubprocessTransport, collector: _Collector,
                     timeout_s: float | None, grace_s: float) -> tuple[int | None, bool, bool]:
    """Wait for a child's leader and pipes; then stop whatever is left of its group.

    Returns (returncode, timed_out, killed). Whatever happens, nothing of the group outlives
    the call: a cancellation or a sink's error stops the group, then goes on. Raises what a sink
    raised.
    """
    child = _Child(transport)
    timed_out = killed = False
    try:
        try:
            async with asyncio.timeout(timeout_s):
                await collector.until(collector.exited)
                await collector.until(collector.closed, LINGER_S)
        except TimeoutError:
            timed_out = True
        # The leader is gone (or out of time, or read enough): stop what is left of its group.
        killed = await kill_group(child, grace_s)
        await collector.until(collector.closed, DRAIN_S)
    except BaseException:  # cancelled (abort) or a sink failed: nothing may outlive the call
        await kill_group(child, min(grace_s, ABORT_GRACE_S))
        raise
    finally:
        transport.close()
    if collector.failed.done():
        raise collector.failed.result()
    return child.returncode, timed_out, killed


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
    # While its leader runs (a command being stopped, a probe cancelled), one read says so; the
    # scan of every process is for a group whose leader is gone.
    if _leader_running(pgid):
        return True
    return any(state != "Z" for state in group_states(pgid).values())


def _leader_running(pgid: int) -> bool:
    """Whether process `pgid` runs (is no zombie) and is still in group `pgid`; False when that
    cannot be read (gone, or its pid now another process's outside the group)."""
    fields = _stat_fields(str(pgid))
    return fields is not None and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X")


def group_states(pgid: int) -> dict[int, str]:
    """`{pid: state letter}` of the members of a process group, read from /proc (Linux)."""
    # Every process of the machine is read, at each command's end whose group outlived its leader.
    states = {}
    group = str(pgid).encode()
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := _stat_fields(name)) is not None and fields[2] == group:
            states[int(name)] = fields[0].decode("ascii", "replace")
    return states


def _stat_fields(pid: str) -> list[bytes] | None:
    """The state, parent and group of a process (the first fields of /proc/<pid>/stat after its
    name), None when it cannot be read (it ended while we looked). Read with a bare descriptor and
    kept as bytes: a buffered file object per process made a scan of them all twice as slow."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        stat = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = stat[stat.rfind(b")") + 2:].split(None, 3)  # the name in parentheses may hold spaces
    return fields if len(fields) > 2 else None


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


class _HeadBuffer:
    """The first `cap` bytes of a byte stream, and how many came after them."""

    def __init__(self, cap: int):
        self.cap = cap
        self.kept = bytearray()
        self.cut = 0

    def add(self, data: bytes) -> None:
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += data[:room]
        self.cut += max(len(data) - max(room, 0), 0)


class _TextSink:
    """run_command's reading of the merged output: an OutputBuffer, and text for on_output."""

    def __init__(self, cap: int, on_output: Callable[[str], None] | None):
        self.buffer = OutputBuffer(cap)
        self.on_output = on_output
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def __call__(self, data: bytes) -> None:
        self.buffer.add(data)
        self._send(self.decoder.decode(data))

    def finish(self) -> None:
        """Pass on a character the decoder still holds (an incomplete one, as U+FFFD)."""
        self._send(self.decoder.decode(b"", True))

    def _send(self, text: str) -> None:
        if text and self.on_output is not None:
            self.on_output(text)


class _Collector(asyncio.SubprocessProtocol):
    """Receives the output pipes and the exit of one child, on the event loop.

    Each pipe read has a sink: a function given every chunk. A sink that returns True has read
    enough (`stopped`); one that raises has failed (`failed` holds its exception, for the
    awaiting task, not lost in the loop's handler). After either, chunks are dropped.
    """

    def __init__(self, sinks: Mapping[int, Callable[[bytes], bool | None]]):
        loop = asyncio.get_running_loop()
        self.sinks = dict(sinks)
        self.open = set(self.sinks)
        self.exited = loop.create_future()
        self.closed = loop.create_future()  # every output pipe reached its end
        self.failed = loop.create_future()  # a sink raised: its exception is the result
        self.stopped = loop.create_future()  # a sink read enough
        if not self.open:
            self.closed.set_result(None)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if self.failed.done() or self.stopped.done():
            return
        try:
            enough = self.sinks[fd](data)
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting task
            self.failed.set_result(exc)
            return
        if enough:
            self.stopped.set_result(None)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self.open.discard(fd)  # stdin (fd 0) is not among them
        if not self.open and not self.closed.done():
            self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    async def until(self, future: asyncio.Future, timeout_s: float | None = None) -> None:
        """Wait for `future` (at most `timeout_s`), or until a sink has read enough; raise at
        once what a sink raised."""
        await asyncio.wait((future, self.failed, self.stopped), timeout=timeout_s,
                           return_when=asyncio.FIRST_COMPLETED)
        if self.failed.done():
            raise self.failed.result()


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
