"""The interactive terminal of each session: the person's own shell on a pty, never the model's.

Owns one shell per session (`terminalshell`, else the login shell, else /bin/sh) started through
the runner on a pty in the session's folder, with the agent's minimal environment plus
`TERM=xterm-256color`: no key, token or setting of the server. Its output is read with
`loop.add_reader` (the pty is non-blocking; nothing waits on the loop), decoded, scrubbed like
tool output (a secret split across reads, or broken by colour codes, is still caught), kept as a
bounded scrollback and published as `terminal.output`, in order. `terminal.exit` says how the
shell ended.

A flood (`yes`) never drops the person's view and never starves the other sessions: output is
published in batches of at most MAX_BATCH_CHARS, one per BATCH_S (scrubbing and encoding one
takes about a millisecond, so the loop is never held for long), and only while the slowest
client that follows the session has less than MAX_INFLIGHT_BYTES sent and not taken
(`Hub.backlog`); meanwhile what was read waits, and past MAX_PENDING_CHARS the pty is not read
at all, so the shell's own writes block: the flood runs at the pace of the slowest viewer, and
nothing is lost on the way. The scrollback (what a reattach gets) keeps the last
SCROLLBACK_CHARS; once it has dropped older output it starts with DROPPED_MARKER.

Input is written as the person typed it, bounded, and buffered (bounded too) when the shell
does not read. Stopping hangs up the shell's process group, then kills what is left; a shell
ends with its session and when the server stops.

Must not: be reachable by the model or MCP (no tool types into it), or start a process any
other way than `runner.spawn_terminal`.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import errno
import os
import pwd
from collections import deque
from dataclasses import dataclass, field

from totem.events import TerminalExit, TerminalOutput
from totem.process import runner
from totem.security.vault import QuietScrub, ScrubStream

SCROLLBACK_CHARS = 256 * 1024
DROPPED_MARKER = "[earlier output was dropped from the scrollback]\r\n"
BATCH_S = 0.005  # output is gathered this long before it is sent, and the viewers looked at as often
READ_BYTES = 64 * 1024  # one read per loop turn
MAX_BATCH_CHARS = 64 * 1024  # published per BATCH_S at most (one terminal.output)
MAX_PENDING_CHARS = 256 * 1024  # read and not published: past it the pty is not read
MAX_INFLIGHT_BYTES = 256 * 1024  # sent to the slowest viewer and not taken: past it nothing is published
MAX_INPUT_BYTES = 64 * 1024
MAX_UNWRITTEN_BYTES = 1024 * 1024
MIN_COLUMNS, MAX_COLUMNS = 2, 1000
MIN_ROWS, MAX_ROWS = 1, 500
TERMINAL_TYPE = "xterm-256color"


class TerminalError(Exception):
    """No shell to talk to, or one that cannot take more; the message is for the person."""


def login_shell(configured: str = "") -> str:
    """The shell of the terminal: `terminalshell`, else the account's login shell or $SHELL,
    else /bin/sh."""
    if configured:
        return configured
    try:
        account_shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        account_shell = ""
    for candidate in (os.environ.get("SHELL", ""), account_shell):
        if candidate and os.path.isabs(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return runner.SHELL_PATH


def terminal_environment() -> dict[str, str]:
    return runner.minimal_environment() | {"TERM": TERMINAL_TYPE}


@dataclass
class _Shell:
    sessionid: str
    child: runner.TerminalChild
    scrub: ScrubStream | QuietScrub
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))
    scrollback: deque[str] = field(default_factory=deque)
    kept: int = 0  # characters in the scrollback
    dropped: bool = False  # the scrollback has lost its beginning
    pending: deque[str] = field(default_factory=deque)
    pending_chars: int = 0
    unwritten: bytearray = field(default_factory=bytearray)
    flush: asyncio.TimerHandle | None = None  # the next _send
    reading: bool = False
    writing: bool = False
    status: str = "running"  # running, exited
    exit: object = None

    def keep(self, text: str) -> None:
        self.scrollback.append(text)
        self.kept += len(text)
        while self.kept > SCROLLBACK_CHARS and len(self.scrollback) > 1:
            self.kept -= len(self.scrollback.popleft())
            self.dropped = True
        if self.kept > SCROLLBACK_CHARS:  # one piece alone is too long: keep its tail
            tail = self.scrollback[0][-SCROLLBACK_CHARS:]
            self.scrollback[0], self.kept = tail, len(tail)
            self.dropped = True

    def output(self) -> str:
        """The scrollback, at most SCROLLBACK_CHARS with the marker."""
        text = "".join(self.scrollback)
        if not self.dropped:
            return text
        return DROPPED_MARKER + text[max(0, len(text) + len(DROPPED_MARKER) - SCROLLBACK_CHARS):]

    def take_batch(self) -> str:
        """What was read and not sent yet, from the oldest, up to about MAX_BATCH_CHARS."""
        pieces, size = [], 0
        while self.pending and size < MAX_BATCH_CHARS:
            piece = self.pending.popleft()
            if size + len(piece) > MAX_BATCH_CHARS:
                cut = MAX_BATCH_CHARS - size
                piece, rest = piece[:cut], piece[cut:]
                self.pending.appendleft(rest)
            pieces.append(piece)
            size += len(piece)
        self.pending_chars -= size
        return "".join(pieces)


class Terminals:
    """The shells of every session of one Totem."""

    def __init__(self, hub, scrubber, shell: str = ""):
        self.hub = hub
        self.scrubber = scrubber  # () -> the current vault.Scrubber
        self.shell = shell
        self._shells: dict[str, _Shell] = {}
        self._waits: set[asyncio.Task] = set()

    def state(self, sessionid: str) -> dict:
        shell = self._shells.get(sessionid)
        if shell is None:
            return {"status": "none", "output": ""}
        answer: dict[str, object] = {"status": shell.status, "output": shell.output()}
        if shell.status == "exited":
            answer["exit"] = shell.exit
        return answer

    async def open(self, sessionid: str, cwd: str, start: bool, columns: int, rows: int) -> dict:
        """Reattach to a session's shell (`{status, output}` with the scrollback), or start
        one when `start` and none runs. Raises TerminalError when the shell cannot start."""
        shell = self._shells.get(sessionid)
        if shell is not None and shell.status == "running":
            self.resize(sessionid, columns, rows)
            return self.state(sessionid)
        if not start:
            return self.state(sessionid)
        program = login_shell(self.shell)
        if not os.access(program, os.X_OK):
            raise TerminalError(f"the terminal shell {program} is not an executable program")
        try:
            child = await runner.spawn_terminal([program], cwd=cwd, env=terminal_environment(),
                                                columns=columns, rows=rows)
        except OSError as exc:
            raise TerminalError(f"the shell could not start: {exc.strerror or exc}") from None
        stream = self.scrubber().stream()
        shell = _Shell(sessionid, child, stream)
        # What the scrubber holds back (it may begin a key) shows once the shell is quiet.
        shell.scrub = QuietScrub(stream, lambda tail: self._show(shell, tail), asyncio.get_running_loop().call_later)
        self._shells[sessionid] = shell
        self._read(shell)
        wait = asyncio.get_running_loop().create_task(self._wait(shell), name=f"terminal {sessionid}")
        self._waits.add(wait)
        wait.add_done_callback(self._waits.discard)
        return self.state(sessionid)

    def write(self, sessionid: str, data: bytes) -> None:
        """Type into the shell. Raises TerminalError (no shell, too much, a shell that does not
        read)."""
        shell = self._running(sessionid)
        if len(data) > MAX_INPUT_BYTES:
            raise TerminalError(f"at most {MAX_INPUT_BYTES} bytes of input at once")
        if len(shell.unwritten) + len(data) > MAX_UNWRITTEN_BYTES:
            raise TerminalError("the shell is not reading its input; wait or stop it")
        shell.unwritten += data
        self._write(shell)

    def resize(self, sessionid: str, columns: int, rows: int) -> None:
        shell = self._running(sessionid)
        with contextlib.suppress(OSError):
            runner.set_terminal_size(shell.child.fd, columns, rows)

    async def stop(self, sessionid: str) -> dict:
        """End a session's shell: hang-up, then kill of its process group. Raises
        TerminalError when none runs."""
        shell = self._running(sessionid)
        await runner.end_terminal(shell.child)
        await self._ended(shell)
        return self.state(sessionid)

    async def forget_session(self, sessionid: str) -> None:
        """End and forget the shell of a removed session."""
        shell = self._shells.get(sessionid)
        if shell is not None and shell.status == "running":
            await runner.end_terminal(shell.child)
            await self._ended(shell)
        self._shells.pop(sessionid, None)

    async def stop_all(self) -> None:
        for sessionid in list(self._shells):
            await self.forget_session(sessionid)

    # -- the pty ----------------------------------------------------------------------------

    def _running(self, sessionid: str) -> _Shell:
        shell = self._shells.get(sessionid)
        if shell is None or shell.status != "running":
            raise TerminalError("no shell runs in this session; open the terminal first")
        return shell

    def _read(self, shell: _Shell) -> None:
        if not shell.reading and shell.status == "running":
            asyncio.get_running_loop().add_reader(shell.child.fd, self._readable, shell)
            shell.reading = True

    def _pause(self, shell: _Shell) -> None:
        if shell.reading:
            asyncio.get_running_loop().remove_reader(shell.child.fd)
            shell.reading = False

    def _readable(self, shell: _Shell) -> None:
        try:
            data = os.read(shell.child.fd, READ_BYTES)
        except BlockingIOError:
            return
        except OSError as exc:  # EIO: every process holding the pty's other side has gone
            if exc.errno != errno.EIO:
                raise
            data = b""
        if not data:
            self._pause(shell)
            self._queue(shell, shell.decoder.decode(b"", final=True))
            return
        self._queue(shell, shell.decoder.decode(data))

    def _queue(self, shell: _Shell, text: str) -> None:
        if text:
            shell.pending.append(text)
            shell.pending_chars += len(text)
        if shell.pending_chars > MAX_PENDING_CHARS:
            self._pause(shell)  # the sends read again
        if shell.flush is None:
            shell.flush = asyncio.get_running_loop().call_later(BATCH_S, self._send, shell)

    def _send(self, shell: _Shell) -> None:
        """Publish one batch of what was read, if the slowest viewer has taken enough of what it
        was sent; come back BATCH_S later while more waits. Read again once there is room."""
        shell.flush = None
        loop = asyncio.get_running_loop()
        if self.hub.backlog(shell.sessionid) > MAX_INFLIGHT_BYTES:
            shell.flush = loop.call_later(BATCH_S, self._send, shell)
            return
        self._publish(shell, shell.take_batch())
        if shell.pending:
            shell.flush = loop.call_later(BATCH_S, self._send, shell)
        if shell.status == "running" and not shell.reading and shell.pending_chars <= MAX_PENDING_CHARS:
            self._read(shell)

    def _publish(self, shell: _Shell, raw: str, final: bool = False) -> None:
        self._show(shell, shell.scrub.feed(raw) + (shell.scrub.flush() if final else ""))

    def _show(self, shell: _Shell, text: str) -> None:
        if text:
            shell.keep(text)
            self.hub.publish(TerminalOutput(shell.sessionid, text))

    def _write(self, shell: _Shell) -> None:
        loop = asyncio.get_running_loop()
        while shell.unwritten:
            try:
                written = os.write(shell.child.fd, shell.unwritten)
            except BlockingIOError:
                break
            except OSError:
                shell.unwritten.clear()
                break
            del shell.unwritten[:written]
        if shell.unwritten and not shell.writing:
            loop.add_writer(shell.child.fd, self._write, shell)
            shell.writing = True
        elif not shell.unwritten and shell.writing:
            loop.remove_writer(shell.child.fd)
            shell.writing = False

    async def _wait(self, shell: _Shell) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(shell.child.exited)
        await self._ended(shell)

    async def _ended(self, shell: _Shell) -> None:
        if shell.status != "running":
            return
        # What the shell printed last is still in the pty: read it before closing.
        with contextlib.suppress(OSError):
            while True:
                data = os.read(shell.child.fd, READ_BYTES)
                if not data:
                    break
                shell.pending.append(shell.decoder.decode(data))
        shell.pending.append(shell.decoder.decode(b"", final=True))
        shell.status = "exited"
        shell.exit = shell.child.exited.result() if shell.child.exited.done() else None
        self._pause(shell)
        if shell.writing:
            asyncio.get_running_loop().remove_writer(shell.child.fd)
            shell.writing = False
        if shell.flush is not None:
            shell.flush.cancel()
            shell.flush = None
        # The rest at once: the shell has ended, what is left is bounded (pending, and the pty's
        # buffer), and terminal.exit must come after all of it.
        raw = "".join(shell.pending)
        shell.pending.clear()
        shell.pending_chars = 0
        self._publish(shell, raw, final=True)
        with contextlib.suppress(OSError):
            os.close(shell.child.fd)
        shell.child.transport.close()
        self.hub.publish(TerminalExit(shell.sessionid, shell.exit))
