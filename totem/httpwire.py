"""The client side of HTTP/1.1 on asyncio streams, shared by the provider client
(agent/client.py) and the fetch tool (tools/fetch.py).

Owns: reading one response: the status line (HTTP/1.x and a three-digit code, RFC 9112 section
4); the header fields within MAX_HEADER_BYTES and MAX_HEADER_LINES, names lower-cased and
repeated fields joined with ", "; skipping interim 1xx responses; the body framing of RFC 9112
section 6.3 (no body for a HEAD request, 204 or 304; chunked, with extensions and trailers;
Content-Length; read until close); and handing the body out in pieces, with an optional timeout
on every single read. Also the connection chores both callers share: the system's TLS context,
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
    total = 0
    while True:
        line = await _readline(reader, read_timeout)
        if not line:
            raise WireError(NO_ANSWER, closed=True)
        total += len(line)
        status, reason = _parse_status_line(line)
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADER_LINES + 1):
            raw = await _readline(reader, read_timeout)
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
        return WireResponse(reader, status, reason, headers, method, read_timeout)


class WireResponse:
    """A response whose head is read: `status`, `reason` (the phrase, "" when absent) and
    `headers`. `length` is the Content-Length when that frames the body, None otherwise;
    `complete` turns True once `next_piece` has reached the end of the body (at once for a
    response without one). Raises WireError from the constructor for an invalid Content-Length."""

    def __init__(self, reader: asyncio.StreamReader, status: int, reason: str,
                 headers: dict[str, str], method: str = "GET",
                 read_timeout: float | None = None) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self._reader = reader
        self._read_timeout = read_timeout
        self._framing, self._left = _framing(method, status, headers)
        self.length = self._left if self._framing == _LENGTH else None
        self._in_chunk = False
        self.complete = self._framing == _EMPTY

    async def next_piece(self) -> bytes:
        """The next piece of the body (at most READ_CHUNK_BYTES), b"" once it is complete.
        Raises WireError (closed=True when the stream ends before the body does), TimeoutError,
        OSError and ssl.SSLError."""
        if self.complete:
            return b""
        if self._framing == _CLOSE:
            data = await self._read(READ_CHUNK_BYTES)
            self.complete = not data
            return data
        if self._framing == _CHUNKED and not self._left and not await self._next_chunk():
            self.complete = True
            return b""
        if not self._left:
            self.complete = True
            return b""
        data = await self._read(min(self._left, READ_CHUNK_BYTES))
        if not data:
            raise WireError(CUT_SHORT, closed=True)
        self._left -= len(data)
        return data

    async def _next_chunk(self) -> bool:
        # RFC 9112 section 7.1: a hexadecimal size line (extensions after ";"), the data and
        # CRLF; size 0 ends the body, then trailer fields and a blank line.
        if self._in_chunk and await self._readline() not in _LINE_ENDS:
            raise WireError("a chunk does not end with CRLF")
        line = await self._readline()
        if not line.endswith(b"\n"):
            raise WireError(CUT_SHORT, closed=True)
        size = line.split(b";", 1)[0].strip()
        if not size or any(c not in _HEX_DIGITS for c in size):
            raise WireError("a chunk size is not a hexadecimal number")
        self._left, self._in_chunk = int(size, 16), True
        if self._left:
            return True
        # Trailer fields are dropped. Once the last chunk is in, the body is whole (RFC 9112
        # section 8), so a stream that ends among the trailers ends it too.
        for _ in range(MAX_HEADER_LINES):
            if await self._readline() in (*_LINE_ENDS, b""):
                return False
        raise WireError("too many trailer lines")

    async def _read(self, size: int) -> bytes:
        async with asyncio.timeout(self._read_timeout):
            return await self._reader.read(size)

    async def _readline(self) -> bytes:
        return await _readline(self._reader, self._read_timeout)


async def _readline(reader: asyncio.StreamReader, timeout: float | None) -> bytes:
    try:
        async with asyncio.timeout(timeout):
            return await reader.readline()
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
