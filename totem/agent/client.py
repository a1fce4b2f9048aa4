"""Outgoing HTTP/1.1 to model providers, on asyncio streams.

Owns: connecting (TCP, TLS with the default context) under a timeout; sending one request;
reading the status line and headers within limits; the body framings (Content-Length, chunked,
read until close) with a read timeout between chunks; closing the socket at once when the caller
is cancelled (abort) or leaves early; `request_json` for small calls (model lists) with a size
cap; and `stream_chat`, which drives `stream.py` over a live chat-completions response.

Must not: log, or put request headers (Authorization) into any message or exception; retry (the
agent loop decides, from `ProviderError.retry`); parse chunks itself (stream.py does); use threads.
One connection per request (`Connection: close`), so no pool and nothing left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import socket
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from totem.agent.stream import (
    KIND_CONNECTION,
    KIND_INVALID_RESPONSE,
    ChatAccumulator,
    NdjsonDecoder,
    ProviderError,
    SseDecoder,
    StreamEnd,
    StreamEvent,
    classify_http_error,
)

CONNECT_TIMEOUT_SECONDS = 10.0
# A local model may load for minutes before its first byte (LM Studio JIT, Ollama).
READ_TIMEOUT_SECONDS = 300.0
# Keep-alive comments (DeepSeek queues up to ~10 min) must not hold a stream open forever.
KEEPALIVE_TIMEOUT_SECONDS = 900.0
REQUEST_TIMEOUT_SECONDS = 30.0
CLOSE_TIMEOUT_SECONDS = 1.0
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADER_LINES = 100
# StreamReader's line limit: bounds the status line, each header line and chunk-size lines.
MAX_LINE_BYTES = 16 * 1024
READ_CHUNK_BYTES = 64 * 1024
MAX_ERROR_BODY_BYTES = 64 * 1024
MAX_JSON_BYTES = 16 * 1024 * 1024
# Parsing a large JSON answer (OpenRouter's model list) would hold the loop too long.
JSON_THREAD_BYTES = 1024 * 1024
USER_AGENT = "Totem"
_FORBIDDEN_IN_HEADERS = ("\r", "\n", "\0")


class ProviderConnectionError(ProviderError):
    """The network failed: refused, timed out, reset, closed early, TLS or name resolution.
    The message names the host and the reason, never a header."""

    def __init__(self, host: str, reason: str, *, retry: bool = True, connected: bool = False) -> None:
        prefix = f"The connection to {host} failed" if connected else f"Could not connect to {host}"
        super().__init__(f"{prefix}: {reason}", kind=KIND_CONNECTION, retry=retry)
        self.host = host
        self.reason = reason


@dataclass(frozen=True, slots=True)
class _Target:
    https: bool
    host: str
    port: int
    path: str

    @property
    def label(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.https else 80
        return host if self.port == default else f"{host}:{self.port}"


class StreamResponse:
    """A response whose body is still on the socket: `status`, `reason`, `headers` (lower-case
    names, repeated fields joined with ", "), and the body through `iter_bytes()` or `read()`."""

    def __init__(self, reader: asyncio.StreamReader, target: _Target, status: int, reason: str,
                 headers: dict[str, str], framing: str, length: int | None,
                 read_timeout: float) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self._reader = reader
        self._target = target
        self._framing = framing
        self._left = length or 0
        self._in_chunk = False
        self._read_timeout = read_timeout
        self.complete = framing == "empty"

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        """Yield the body as it arrives. Raises ProviderConnectionError on a read timeout, a reset
        or a body that ends before its framing says, ProviderError on broken chunked framing."""
        while piece := await self._next_piece():
            yield piece

    async def read(self, max_bytes: int) -> bytes:
        """The whole body; raises ProviderError when it passes `max_bytes` (checked before reading
        when Content-Length says so) and the errors of iter_bytes."""
        if self._framing == "length" and self._left > max_bytes:
            raise self._too_large(max_bytes)
        body = bytearray()
        while piece := await self._next_piece():
            body += piece
            if len(body) > max_bytes:
                raise self._too_large(max_bytes)
            await asyncio.sleep(0)  # buffered reads do not yield; let other tasks run
        return bytes(body)

    async def read_prefix(self, max_bytes: int) -> bytes:
        """Up to `max_bytes` of the body, for error messages: never raises on a broken body."""
        body = bytearray()
        with contextlib.suppress(ProviderError):
            while len(body) < max_bytes and (piece := await self._next_piece()):
                body += piece
        return bytes(body[:max_bytes])

    async def _next_piece(self) -> bytes:
        """The next piece of the body, b"" once it is complete."""
        if self.complete:
            return b""
        if self._framing == "close":
            data = await self._read(READ_CHUNK_BYTES)
            self.complete = not data
            return data
        if self._framing == "chunked" and self._left == 0 and not await self._next_chunk():
            self.complete = True
            return b""
        if self._left == 0:
            self.complete = True
            return b""
        data = await self._read(min(self._left, READ_CHUNK_BYTES))
        if not data:
            raise self._cut()
        self._left -= len(data)
        return data

    async def _next_chunk(self) -> bool:
        # RFC 9112 section 7.1: size line (hex, optional extensions), data, CRLF; size 0 ends,
        # followed by trailer fields and a blank line.
        if self._in_chunk and await self._readline() not in (b"\r\n", b"\n"):
            raise self._broken("a chunk does not end with CRLF")
        self._left = self._chunk_size(await self._readline())
        self._in_chunk = True
        if self._left:
            return True
        for _ in range(MAX_HEADER_LINES):
            line = await self._readline()
            if not line:
                raise self._cut()
            if line in (b"\r\n", b"\n"):
                return False
        raise self._broken("too many trailer lines")

    def _chunk_size(self, line: bytes) -> int:
        if not line.endswith(b"\n"):
            raise self._cut()
        text = line.split(b";", 1)[0].strip()
        if not text or any(c not in b"0123456789abcdefABCDEF" for c in text):
            raise self._broken("a chunk size is not a hexadecimal number")
        return int(text, 16)

    async def _read(self, size: int) -> bytes:
        return await _guarded(self._target, self._read_timeout, self._reader.read(size), True)

    async def _readline(self) -> bytes:
        return await _guarded(self._target, self._read_timeout, self._reader.readline(), True)

    def _cut(self) -> ProviderConnectionError:
        return ProviderConnectionError(self._target.label, "the response ended before its body was complete",
                                       connected=True)

    def _broken(self, reason: str) -> ProviderError:
        return ProviderError(f"The response from {self._target.label} is malformed: {reason}",
                             kind=KIND_INVALID_RESPONSE, retry=True)

    def _too_large(self, max_bytes: int) -> ProviderError:
        return ProviderError(f"The response from {self._target.label} is larger than {max_bytes} bytes",
                             kind=KIND_INVALID_RESPONSE, retry=False)


@contextlib.asynccontextmanager
async def open_stream(method: str, url: str, headers: Mapping[str, str] | None = None,
                      json_body: Any = None, connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
                      read_timeout: float = READ_TIMEOUT_SECONDS) -> AsyncIterator[StreamResponse]:
    """Send one request and give its response with the body unread:
    `async with open_stream("POST", url, headers, body) as response:`.

    The socket closes when the block ends: at once (abort) when the block raises, is cancelled or
    leaves the body unread, gracefully otherwise. Raises ValueError for a bad URL or header,
    ProviderConnectionError for network failures (retry=True for refused, reset, timeouts) and
    ProviderError for a malformed response head."""
    target = _parse_url(url)
    request = _build_request(method, target, headers or {}, json_body)
    reader, writer = await _connect(target, connect_timeout)
    try:
        writer.write(request)
        await _guarded(target, read_timeout, writer.drain(), True)
        response = await _read_head(reader, target, method, read_timeout)
        yield response
    except BaseException:
        writer.transport.abort()
        raise
    if response.complete:
        await _close(writer)
    else:
        writer.transport.abort()


async def request_json(method: str, url: str, headers: Mapping[str, str] | None = None,
                       json_body: Any = None, timeout: float = REQUEST_TIMEOUT_SECONDS,
                       max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A small non-streaming call (a models list): returns the parsed JSON (None for no body).

    Raises ProviderError from `classify_http_error` for a non-2xx status, ProviderError when the
    body passes `max_bytes` or is not JSON, and ProviderConnectionError for network failures or
    when the whole call takes longer than `timeout`."""
    target = _parse_url(url)
    try:
        async with asyncio.timeout(timeout):
            async with open_stream(method, url, {"Accept": "application/json", **(headers or {})},
                                   json_body, timeout, timeout) as response:
                if not 200 <= response.status < 300:
                    body = await response.read_prefix(MAX_ERROR_BODY_BYTES)
                    raise classify_http_error(response.status, response.headers, body)
                body = await response.read(max_bytes)
    except TimeoutError:
        raise ProviderConnectionError(target.label, f"no complete answer within {timeout:g} s",
                                      connected=True) from None
    if not body.strip():
        return None
    try:
        if len(body) > JSON_THREAD_BYTES:
            return await asyncio.to_thread(json.loads, body)
        return json.loads(body)
    except ValueError:
        raise ProviderError(f"The response from {target.label} is not JSON",
                            kind=KIND_INVALID_RESPONSE, retry=False) from None


async def stream_chat(url: str, key: str | None, body: Mapping[str, Any], *,
                      native_ollama: bool = False, headers: Mapping[str, str] | None = None,
                      connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
                      read_timeout: float = READ_TIMEOUT_SECONDS,
                      keepalive_timeout: float = KEEPALIVE_TIMEOUT_SECONDS,
                      ) -> AsyncIterator[StreamEvent]:
    """Stream one chat answer as normalized events, ending with `StreamEnd(result)`.

    `url` is the full endpoint (`.../v1/chat/completions`, or Ollama's `.../api/chat` with
    `native_ollama=True`). Sets `stream: true` and, for OpenAI-compatible endpoints,
    `stream_options.include_usage`. Before streaming, raises ProviderError (classify_http_error)
    on a non-2xx status and ProviderConnectionError when the host cannot be reached. After the
    200, failures (in-stream errors, a reset, a read timeout, a cut stream) arrive as a
    `StreamError` event, then `StreamEnd` with the partial result. Use it inside
    `contextlib.aclosing(...)` so that leaving the loop early closes the socket at once;
    cancelling the consuming task does too."""
    request_headers = {"Accept": "application/x-ndjson" if native_ollama else "text/event-stream",
                       **(headers or {})}
    if key:
        request_headers["Authorization"] = f"Bearer {key}"
    accumulator = ChatAccumulator()
    async with open_stream("POST", url, request_headers, _streaming_body(body, native_ollama),
                           connect_timeout, read_timeout) as response:
        if not 200 <= response.status < 300:
            error_body = await response.read_prefix(MAX_ERROR_BODY_BYTES)
            raise classify_http_error(response.status, response.headers, error_body)
        decoder = _AnswerDecoder(accumulator, native_ollama, keepalive_timeout)
        events: list[StreamEvent] = []
        try:
            if not native_ollama and _is_json(response.headers.get("content-type", "")):
                # The server ignored `stream: true` and sent one whole chat.completion.
                events = accumulator.feed_completion(json.loads(await response.read(MAX_JSON_BYTES)))
            else:
                async with contextlib.aclosing(response.iter_bytes()) as pieces:
                    async for piece in pieces:
                        for event in decoder.feed(piece):
                            yield event
                        if accumulator.failed or accumulator.saw_done:
                            break  # an error is terminal and nothing after [DONE] matters
                        # A read returns at once while bytes are buffered: without this a fast
                        # provider would hold the loop for the whole burst.
                        await asyncio.sleep(0)
                events = decoder.close()
        except ProviderError as exc:
            events = accumulator.fail(exc.message, retry=exc.retry, kind=exc.kind)
        except ValueError as exc:  # StreamFormatError, or a whole answer that is not JSON
            events = accumulator.fail(f"The provider's stream is malformed: {exc}", retry=True,
                                      kind=KIND_INVALID_RESPONSE)
        for event in events + accumulator.finish():
            yield event
    yield StreamEnd(accumulator.result())


def _streaming_body(body: Mapping[str, Any], native_ollama: bool) -> dict[str, Any]:
    request = dict(body)
    request["stream"] = True
    if not native_ollama:
        options = request.get("stream_options")
        request["stream_options"] = {**(options if isinstance(options, dict) else {}),
                                     "include_usage": True}
    return request


class _AnswerDecoder:
    """Frames body pieces (SSE or NDJSON) into accumulator events, and fails the answer when only
    keep-alive comments arrive for longer than `keepalive_timeout`."""

    def __init__(self, accumulator: ChatAccumulator, native_ollama: bool, keepalive_timeout: float) -> None:
        self._accumulator = accumulator
        self._native = native_ollama
        self._keepalive_timeout = keepalive_timeout
        self._sse = SseDecoder()
        self._ndjson = NdjsonDecoder()
        self._clock = asyncio.get_running_loop().time
        self._last_data = self._clock()

    def feed(self, piece: bytes) -> list[StreamEvent]:
        """Events completed by this piece; raises StreamFormatError on broken framing."""
        accumulator = self._accumulator
        if self._native:
            items = self._ndjson.feed(piece)
            events = [e for line in items for e in accumulator.feed(line)]
        else:
            items = self._sse.feed(piece)
            events = [e for sse_event in items for e in accumulator.feed_sse(sse_event)]
        if items:
            self._last_data = self._clock()
        elif self._clock() - self._last_data > self._keepalive_timeout:
            events += accumulator.fail(
                f"The provider sent only keep-alive comments for {self._keepalive_timeout:g} s.",
                retry=True, kind=KIND_CONNECTION)
        return events

    def close(self) -> list[StreamEvent]:
        """End of body: Ollama's last line may lack its newline."""
        if not self._native:
            return []
        return [e for line in self._ndjson.close() for e in self._accumulator.feed(line)]


def _parse_url(url: str) -> _Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("the provider URL must be an http:// or https:// address with a host")
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target(https, parts.hostname, port, path)


def _build_request(method: str, target: _Target, headers: Mapping[str, str], json_body: Any) -> bytes:
    body = b"" if json_body is None else json.dumps(
        json_body, ensure_ascii=False, separators=(",", ":")).encode()
    fields = {"host": ("Host", target.host_header), "user-agent": ("User-Agent", USER_AGENT),
              "accept": ("Accept", "*/*"), "accept-encoding": ("Accept-Encoding", "identity")}
    if json_body is not None:
        fields["content-type"] = ("Content-Type", "application/json")
    for name, value in headers.items():
        if any(c in name + value for c in _FORBIDDEN_IN_HEADERS) or not name.strip():
            # Never echo the value: it may be the API key.
            raise ValueError(f"the request header {name.strip()[:40]!r} contains a line break")
        fields[name.lower()] = (name, value)
    # We own the framing: one request, one connection, a body length we computed.
    fields["content-length"] = ("Content-Length", str(len(body)))
    fields["connection"] = ("Connection", "close")
    if method.upper() in ("GET", "HEAD") and not body:
        del fields["content-length"]
    if any(c in method for c in " \r\n\0"):
        raise ValueError("the request method is invalid")
    head = f"{method} {target.path} HTTP/1.1\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in fields.values()) + "\r\n"
    return head.encode("utf-8") + body


@functools.cache
def _default_tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


async def _tls_context() -> ssl.SSLContext:
    # Loading the system CA store takes ~50 ms: once per process, and off the loop.
    if _default_tls_context.cache_info().currsize:
        return _default_tls_context()
    return await asyncio.to_thread(_default_tls_context)


async def _connect(target: _Target, timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    context = await _tls_context() if target.https else None
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.open_connection(
                target.host, target.port, ssl=context, limit=MAX_LINE_BYTES,
                server_hostname=target.host if context else None)
    except TimeoutError:
        raise ProviderConnectionError(target.label, f"timed out after {timeout:g} s") from None
    except ssl.SSLCertVerificationError as exc:
        raise ProviderConnectionError(target.label, f"its TLS certificate is not valid ({exc.verify_message})",
                                      retry=False) from None
    except ssl.SSLError as exc:
        raise ProviderConnectionError(target.label, f"the TLS handshake failed ({exc.reason})",
                                      retry=False) from None
    except socket.gaierror as exc:
        # EAI_AGAIN is a resolver hiccup; other codes mean the name is wrong.
        raise ProviderConnectionError(target.label, "the host name could not be resolved",
                                      retry=exc.errno == socket.EAI_AGAIN) from None
    except OSError as exc:
        raise ProviderConnectionError(target.label, _os_reason(exc)) from None


async def _guarded(target: _Target, timeout: float, operation: Any, connected: bool) -> Any:
    """Await a socket operation under a timeout, turning network failures into
    ProviderConnectionError (retryable)."""
    try:
        async with asyncio.timeout(timeout):
            return await operation
    except TimeoutError:
        raise ProviderConnectionError(target.label, f"no data for {timeout:g} s (read timed out)",
                                      connected=connected) from None
    except asyncio.IncompleteReadError:
        raise ProviderConnectionError(target.label, "the connection closed mid-response",
                                      connected=connected) from None
    except asyncio.LimitOverrunError:
        raise ProviderError(f"The response from {target.label} has a line longer than {MAX_LINE_BYTES} bytes",
                            kind=KIND_INVALID_RESPONSE, retry=False) from None
    except ValueError as exc:  # StreamReader.readline wraps LimitOverrunError in ValueError
        raise ProviderError(f"The response from {target.label} is malformed: {exc}",
                            kind=KIND_INVALID_RESPONSE, retry=False) from None
    except (OSError, ssl.SSLError) as exc:
        raise ProviderConnectionError(target.label, _os_reason(exc), connected=connected) from None


def _os_reason(exc: OSError) -> str:
    text = str(exc)
    if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED or \
            "Connect call failed" in text:
        return "connection refused"
    if isinstance(exc, ConnectionResetError) or exc.errno == errno.ECONNRESET:
        return "connection reset"
    if isinstance(exc, (BrokenPipeError, ConnectionAbortedError)):
        return "the connection was closed by the other side"
    if isinstance(exc, TimeoutError) or exc.errno == errno.ETIMEDOUT:
        return "timed out"
    return exc.strerror or text or type(exc).__name__


async def _read_head(reader: asyncio.StreamReader, target: _Target, method: str,
                     timeout: float) -> StreamResponse:
    total = 0
    while True:
        line = await _guarded(target, timeout, reader.readline(), True)
        if not line:
            raise ProviderConnectionError(target.label, "the server closed the connection without answering",
                                          connected=True)
        status, reason = _parse_status_line(line, target)
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADER_LINES + 1):
            raw = await _guarded(target, timeout, reader.readline(), True)
            total += len(raw)
            if total > MAX_HEADER_BYTES:
                raise _malformed(target, f"the headers are longer than {MAX_HEADER_BYTES} bytes")
            if raw in (b"\r\n", b"\n", b""):
                break
            name, colon, value = raw.decode("latin-1").partition(":")
            if not colon or not name.strip():
                raise _malformed(target, "a header line has no name")
            key, value = name.strip().lower(), value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        else:
            raise _malformed(target, f"more than {MAX_HEADER_LINES} header lines")
        if 100 <= status < 200:
            continue  # 100 Continue / 103 Early Hints come before the real answer
        framing, length = _framing(method, status, headers, target)
        return StreamResponse(reader, target, status, reason, headers, framing, length, timeout)


def _parse_status_line(line: bytes, target: _Target) -> tuple[int, str]:
    parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise _malformed(target, "the status line is not HTTP/1.x")
    return int(parts[1]), parts[2] if len(parts) > 2 else ""


def _framing(method: str, status: int, headers: dict[str, str], target: _Target) -> tuple[str, int | None]:
    if method.upper() == "HEAD" or status in (204, 304):
        return "empty", None
    if "transfer-encoding" in headers:
        codings = [c.strip().lower() for c in headers["transfer-encoding"].split(",")]
        if codings[-1] == "chunked":
            return "chunked", None
        return "close", None  # RFC 9112 6.3: not chunked last means read until close
    if "content-length" in headers:
        values = {v.strip() for v in headers["content-length"].split(",")}
        if len(values) != 1 or not next(iter(values)).isdigit():
            raise _malformed(target, "the Content-Length header is invalid")
        length = int(values.pop())
        return ("length", length) if length else ("empty", None)
    return "close", None


def _malformed(target: _Target, reason: str) -> ProviderError:
    return ProviderError(f"The response from {target.label} is malformed: {reason}",
                         kind=KIND_INVALID_RESPONSE, retry=False)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
            await writer.wait_closed()
    except (TimeoutError, OSError, ssl.SSLError):
        writer.transport.abort()  # a TLS peer that never answers close_notify


def _is_json(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "application/json"
