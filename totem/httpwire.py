"""The client side of HTTP/1.1 on asyncio streams, shared by the provider client
(agent/client.py) and the fetch tool (tools/fetch.py).

Owns: reading one response: the status line (HTTP/1.x and a three-digit code, RFC 9112 section
4); the header fields within MAX_HEADER_BYTES and MAX_HEADER_LINES, names lower-cased and
repeated fields joined with ", "; skipping interim 1xx responses; the body framing of RFC 9112
section 6.3 (no body for a HEAD request, 204 or 304; chunked, with extensions and trailers;
Content-Length; read until close); and handing the body out in pieces, with an optional timeout
on every single read (one timer per response, not one per read: `_ReadDeadline`). A chunked body
is read in pieces of up to READ_CHUNK_BYTES and unframed here, so a burst of small chunks costs
one read, not three awaited reads each. Also the connection chores both callers share: the system's TLS context,
loaded once and off the loop; a short phrase for a socket failure; closing a connection
gracefully within CLOSE_TIMEOUT_SECONDS.

Must not: open connections or choose addresses, build requests, decode content codings, log,
or know about providers, tools, retries or the sentences a person reads. A response that breaks
the protocol raises one neutral `WireError(reason)` that each caller turns into its own error;
socket failures (OSError, ssl.SSLError) and the read timeout (TimeoutError) pass through
unchanged, for the caller to describe (`socket_reason` helps).

Callers open the stream with `asyncio.open_connection(..., limit=MAX_LINE_BYTES)`: the reader's
limit is what bounds the status line, each header line and each chunk-size line.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import ssl
from collections.abc import Awaitable
from typing import TypeVar

MAX_HEADER_BYTES = 64 * 1024
MAX_HEADER_LINES = 100
# StreamReader's line limit (the caller passes it to open_connection).
MAX_LINE_BYTES = 16 * 1024
READ_CHUNK_BYTES = 64 * 1024
CLOSE_TIMEOUT_SECONDS = 1.0
# The reasons of a WireError with closed=True; callers may show them after a host name.
NO_ANSWER = "the server closed the connection without answering"
CUT_SHORT = "the response ended before its body was complete"

_LINE_ENDS = (b"\r\n", b"\n")
_HEX_DIGITS = b"0123456789abcdefABCDEF"
# Body framings (RFC 9112 section 6.3).
_EMPTY, _LENGTH, _CHUNKED, _CLOSE = "empty", "length", "chunked", "close"
# Where a chunked body is (RFC 9112 section 7.1).
_SIZE_LINE, _DATA, _DATA_END, _TRAILERS = "size line", "data", "data end", "trailers"
_T = TypeVar("_T")


class WireError(Exception):
    """The response breaks HTTP/1.1. `reason` is a short phrase that names no host. `closed` is
    True when the peer closed the connection before the response was complete (NO_ANSWER or
    CUT_SHORT: a network failure) and False when the bytes themselves are malformed."""

    def __init__(self, reason: str, *, closed: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.closed = closed


async def read_response(reader: asyncio.StreamReader, method: str = "GET",
                        read_timeout: float | None = None) -> WireResponse:
    """Read the status line and header fields of the next final response (interim 1xx
    responses are read and dropped) and return it with its body still on the stream.

    `method` is the request's (a HEAD response has no body); `read_timeout` bounds every single
    read, None for no bound. Raises WireError (closed=True when the stream ends before a status
    line), TimeoutError, OSError and ssl.SSLError."""
    deadline = _ReadDeadline(read_timeout)
    total = 0
    while True:
        line = await _readline(reader, deadline)
        if not line:
            raise WireError(NO_ANSWER, closed=True)
        total += len(line)
        status, reason = _parse_status_line(line)
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADER_LINES + 1):
            raw = await _readline(reader, deadline)
            total += len(raw)
            if total > MAX_HEADER_BYTES:
                raise WireError(f"the headers are longer than {MAX_HEADER_BYTES} bytes")
            if raw in (*_LINE_ENDS, b""):
                break
            name, colon, value = raw.decode("latin-1").partition(":")
            if not colon or not name.strip():
                raise WireError("a header line has no name")
            key, value = name.strip().lower(), value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        else:
            raise WireError(f"more than {MAX_HEADER_LINES} header lines")
        if 100 <= status < 200:
            continue  # 100 Continue and 103 Early Hints come before the answer
        return WireResponse(reader, status, reason, headers, method, read_timeout, deadline)


class _ReadDeadline:
    """The read timeout of one response: every read waits at most `timeout` seconds, with a
    single timer for all of them instead of an `asyncio.timeout()` (a timer scheduled and
    cancelled) per read, which cost more than the rest of a streamed delta's reading.

    Each read only notes its own expiry; the timer, when it fires, either finds no read waiting
    (and the next read arms it again), or a read that began later (and moves to its expiry), or
    an expired read, whose task it cancels; that read then raises TimeoutError, as
    `asyncio.timeout()` does (a cancellation from elsewhere stays a cancellation)."""

    def __init__(self, timeout: float | None) -> None:
        self._timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None  # the task of the read that waits, if any
        self._expiry = 0.0
        self._expired = False

    async def wait(self, awaitable: Awaitable[_T]) -> _T:
        """Await one read within the timeout. Raises TimeoutError when it takes longer."""
        if self._timeout is None:
            return await awaitable
        loop = self._loop = self._loop or asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # reads run in tasks
        self._task, self._expiry = task, loop.time() + self._timeout
        if self._timer is None:
            self._timer = loop.call_at(self._expiry, self._check)
        cancelling = task.cancelling()
        try:
            return await awaitable
        except asyncio.CancelledError:
            if self._expired:
                self._expired = False
                if task.uncancel() <= cancelling:
                    raise TimeoutError from None
            raise
        finally:
            self._task = None

    def stop(self) -> None:
        """No more reads: drop the timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._task is None or self._loop is None:
            return
        if self._loop.time() < self._expiry:
            self._timer = self._loop.call_at(self._expiry, self._check)
            return
        self._expired = True
        self._task.cancel()


class WireResponse:
    """A response whose head is read: `status`, `reason` (the phrase, "" when absent) and
    `headers`. `length` is the Content-Length when that frames the body, None otherwise;
    `complete` turns True once `next_piece` has reached the end of the body (at once for a
    response without one). Raises WireError from the constructor for an invalid Content-Length.

    One response per connection: what follows a chunked body on the stream is read and dropped."""

    def __init__(self, reader: asyncio.StreamReader, status: int, reason: str,
                 headers: dict[str, str], method: str = "GET",
                 read_timeout: float | None = None, deadline: _ReadDeadline | None = None) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self._reader = reader
        self._deadline = deadline or _ReadDeadline(read_timeout)
        self._framing, self._left = _framing(method, status, headers)
        self.length = self._left if self._framing == _LENGTH else None
        # A chunked body: the bytes read and not unframed yet, and where the framing is.
        self._raw = b""
        self._at_byte = 0  # where the bytes not unframed yet begin in _raw
        self._at = _SIZE_LINE
        self._trailers = 0
        self._error: WireError | None = None  # found after data that was handed out first
        self.complete = self._framing == _EMPTY
        if self.complete:
            self._deadline.stop()

    async def next_piece(self) -> bytes:
        """The next piece of the body (what one read of at most READ_CHUNK_BYTES brought, its
        chunked framing taken off), b"" once it is complete. Raises WireError (closed=True when
        the stream ends before the body does), TimeoutError, OSError and ssl.SSLError."""
        if self.complete:
            return b""
        if self._framing == _CHUNKED:
            return await self._next_chunked()
        if self._framing == _CLOSE:
            data = await self._read(READ_CHUNK_BYTES)
            if not data:
                self._finish()
            return data
        if not self._left:
            self._finish()
            return b""
        data = await self._read(min(self._left, READ_CHUNK_BYTES))
        if not data:
            raise WireError(CUT_SHORT, closed=True)
        self._left -= len(data)
        return data

    async def _next_chunked(self) -> bytes:
        if self._error is not None:
            raise self._error
        while True:
            piece = self._unframe(False)
            if piece or self.complete:
                return piece
            data = await self._read(READ_CHUNK_BYTES)
            if not data:
                return self._unframe(True)  # raises unless the body ended among the trailers
            self._raw, self._at_byte = self._raw[self._at_byte:] + data, 0

    def _unframe(self, eof: bool) -> bytes:
        """The chunk data that the bytes read so far hold, their framing taken off; `eof` when
        the stream has ended. RFC 9112 section 7.1: a hexadecimal size line (extensions after
        ";"), the data and CRLF; size 0 ends the body, then trailer fields and a blank line.
        The data before a framing error is returned first, and the error raised at the next call."""
        pieces: list[bytes] = []
        try:
            self._unframe_into(pieces, eof)
        except WireError as exc:
            if not pieces:
                raise
            self._error = exc
        return b"".join(pieces)

    def _unframe_into(self, pieces: list[bytes], eof: bool) -> None:
        raw = self._raw  # read from self._at_byte on: an offset, so a burst of chunks is not copied
        while True:
            if self._at == _DATA:
                start = self._at_byte
                data = raw[start:start + self._left]
                if not data:
                    if eof:
                        raise WireError(CUT_SHORT, closed=True)
                    return
                pieces.append(data)
                self._at_byte += len(data)
                self._left -= len(data)
                if self._left:
                    return
                self._at = _DATA_END
                continue
            line = self._take_line(eof)
            if line is None:
                return
            if self._at == _DATA_END:
                if line not in _LINE_ENDS:
                    raise WireError("a chunk does not end with CRLF")
                self._at = _SIZE_LINE
            elif self._at == _SIZE_LINE:
                if not line.endswith(b"\n"):
                    raise WireError(CUT_SHORT, closed=True)
                size = line.split(b";", 1)[0].strip()
                if not size or any(c not in _HEX_DIGITS for c in size):
                    raise WireError("a chunk size is not a hexadecimal number")
                self._left = int(size, 16)
                self._at = _DATA if self._left else _TRAILERS
            elif line in (*_LINE_ENDS, b""):
                # Trailer fields are dropped. Once the last chunk is in, the body is whole (RFC
                # 9112 section 8), so a stream that ends among the trailers ends it too.
                self._finish()
                return
            else:
                self._trailers += 1
                if self._trailers >= MAX_HEADER_LINES:
                    raise WireError("too many trailer lines")

    def _take_line(self, eof: bool) -> bytes | None:
        """The next line of the bytes read, with its end; None until it is complete; at the end
        of the stream, what is left (b"" for nothing), as StreamReader.readline gives it.
        Raises WireError past MAX_LINE_BYTES, as the reader's limit does."""
        start = self._at_byte
        end = self._raw.find(b"\n", start)
        if end - start > MAX_LINE_BYTES or (end < 0 and len(self._raw) - start > MAX_LINE_BYTES):
            raise WireError(f"a line is longer than {MAX_LINE_BYTES} bytes")
        if end < 0 and not eof:
            return None
        end = end + 1 if end >= 0 else len(self._raw)
        self._at_byte = end
        return self._raw[start:end]

    def _finish(self) -> None:
        self.complete = True
        self._raw, self._at_byte = b"", 0
        self._deadline.stop()

    async def _read(self, size: int) -> bytes:
        return await self._deadline.wait(self._reader.read(size))


async def _readline(reader: asyncio.StreamReader, deadline: _ReadDeadline) -> bytes:
    try:
        return await deadline.wait(reader.readline())
    except ValueError:  # StreamReader.readline wraps its LimitOverrunError in ValueError
        raise WireError(f"a line is longer than {MAX_LINE_BYTES} bytes") from None


def _parse_status_line(line: bytes) -> tuple[int, str]:
    parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or len(parts[1]) != 3 \
            or not (parts[1].isascii() and parts[1].isdigit()):
        raise WireError("the status line is not HTTP/1.x")
    return int(parts[1]), parts[2] if len(parts) > 2 else ""


def _framing(method: str, status: int, headers: dict[str, str]) -> tuple[str, int]:
    """The framing of the body and the Content-Length (0 when another framing applies)."""
    # RFC 9112 section 6.3, in its order of precedence.
    if method.upper() == "HEAD" or status in (204, 304):
        return _EMPTY, 0
    if "transfer-encoding" in headers:
        # A coding other than chunked last means the body runs until the connection closes.
        last = headers["transfer-encoding"].split(",")[-1].strip().lower()
        return (_CHUNKED, 0) if last == "chunked" else (_CLOSE, 0)
    if "content-length" in headers:
        values = {v.strip() for v in headers["content-length"].split(",")}
        if len(values) != 1 or not all(v.isascii() and v.isdigit() for v in values):
            raise WireError("the Content-Length header is invalid")
        length = int(values.pop())
        return (_LENGTH, length) if length else (_EMPTY, 0)
    return _CLOSE, 0


# -- the connection ------------------------------------------------------------------------


async def system_tls_context() -> ssl.SSLContext:
    """The default client TLS context (the system's CA store, host names checked), shared."""
    # Loading the system CA store takes ~50 ms: once per process, and off the loop.
    if _system_tls.cache_info().currsize:
        return _system_tls()
    return await asyncio.to_thread(_system_tls)


@functools.cache
def _system_tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def socket_reason(exc: OSError) -> str:
    """A short phrase for a failed connect, read or write ("connection refused", ...)."""
    text = str(exc)
    if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED:
        return "connection refused"
    if isinstance(exc, ConnectionResetError) or exc.errno == errno.ECONNRESET:
        return "connection reset"
    if isinstance(exc, (BrokenPipeError, ConnectionAbortedError)):
        return "the connection was closed by the other side"
    if isinstance(exc, TimeoutError) or exc.errno == errno.ETIMEDOUT:
        return "timed out"
    if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return "network unreachable"
    if exc.errno is None and "Connect call failed" in text:
        # open_connection tried every address of a name and joins their failures in one
        # "Multiple exceptions: ..." error that has no errno.
        return "connection refused"
    return exc.strerror or text or type(exc).__name__


async def close_gracefully(writer: asyncio.StreamWriter) -> None:
    """Close the connection, waiting at most CLOSE_TIMEOUT_SECONDS; never raises."""
    writer.close()
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
            await writer.wait_closed()
    except (TimeoutError, OSError, ssl.SSLError):
        writer.transport.abort()  # a TLS peer that never answers close_notify
