"""Outgoing HTTP/1.1 to model providers, on asyncio streams.

Owns: connecting (TCP, TLS with the default context) under a timeout; sending one request;
a read timeout on every read of the response; turning network failures and `httpwire.WireError`
into ProviderConnectionError or ProviderError; closing the socket at once when the caller is
cancelled (abort) or leaves early; `request_json` for small calls (model lists) with a size cap;
and `stream_chat`, which sends a chat request shaped by the provider's kind (`kinds/`) and feeds
the live answer, through the kind's decoder, to the chunk accumulator (`stream.py`).

Must not: log, or put request headers (the key's) into any message or exception; retry (the
agent loop decides, from `ProviderError.retry`); read HTTP framing itself (httpwire.py does),
frame or parse chunks (the kind's decoder, sse.py and stream.py do), or ask which kind a
provider is; use threads. One connection per request
(`Connection: close`), so no pool and nothing left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from totem import httpwire
from totem.agent.bodies import BodyEncoder
from totem.agent.provider_errors import KIND_CONNECTION, KIND_INVALID_RESPONSE, ProviderError, classify_http_error
from totem.agent.stream import AnswerDecoder, ChatAccumulator, StreamEnd, StreamEvent, join_deltas

CONNECT_TIMEOUT_SECONDS = 10.0
# A local model may load for minutes before its first byte (LM Studio JIT, Ollama).
READ_TIMEOUT_SECONDS = 300.0
# Keep-alive comments (DeepSeek queues up to ~10 min) must not hold a stream open forever.
KEEPALIVE_TIMEOUT_SECONDS = 900.0
REQUEST_TIMEOUT_SECONDS = 30.0
MAX_ERROR_BODY_BYTES = 64 * 1024
# A read that took longer than this waited for the network (a buffered one takes microseconds).
READ_WAITED_S = 0.00002
# How long a stream may keep the loop to itself while its reads return from the buffer.
HOLD_LOOP_S = 0.001
MAX_JSON_BYTES = 16 * 1024 * 1024
# Parsing a large JSON answer (OpenRouter's model list) would hold the loop too long.
JSON_THREAD_BYTES = 1024 * 1024
WRITE_BATCH_BYTES = 256 * 1024
USER_AGENT = "Totem"
_FORBIDDEN_IN_HEADERS = ("\r", "\n", "\0")


class StreamingKind(Protocol):
    """What `stream_chat` needs of a provider kind (every `ProviderKind` of kinds/ has it): the
    client knows no kind, so the kinds may use the client without a circle."""

    def stream_request(self, body: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]: ...

    def auth_headers(self, key: str) -> dict[str, str]: ...

    def decoder(self, accumulator: ChatAccumulator) -> AnswerDecoder: ...


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
    names, repeated fields joined with ", "), and the body through `next_piece()`, `iter_bytes()`
    or `read()`."""

    def __init__(self, wire: httpwire.WireResponse, target: _Target, read_timeout: float) -> None:
        self.status = wire.status
        self.reason = wire.reason
        self.headers = wire.headers
        self._wire = wire
        self._target = target
        self._read_timeout = read_timeout

    @property
    def complete(self) -> bool:
        """True once the body has been read to its end (at once when there is none)."""
        return self._wire.complete

    async def iter_bytes(self) -> AsyncGenerator[bytes, None]:
        """Yield the body as it arrives; raises what next_piece raises."""
        while piece := await self.next_piece():
            yield piece

    async def read(self, max_bytes: int) -> bytes:
        """The whole body; raises ProviderError when it passes `max_bytes` (checked before reading
        when Content-Length says so) and the errors of iter_bytes."""
        if self._wire.length is not None and self._wire.length > max_bytes:
            raise self._too_large(max_bytes)
        body = bytearray()
        while piece := await self.next_piece():
            body += piece
            if len(body) > max_bytes:
                raise self._too_large(max_bytes)
            await asyncio.sleep(0)  # buffered reads do not yield; let other tasks run
        return bytes(body)

    async def read_prefix(self, max_bytes: int) -> bytes:
        """Up to `max_bytes` of the body, for error messages: never raises on a broken body."""
        body = bytearray()
        with contextlib.suppress(ProviderError):
            while len(body) < max_bytes and (piece := await self.next_piece()):
                body += piece
        return bytes(body[:max_bytes])

    async def next_piece(self) -> bytes:
        """The next piece of the body as it arrives (what one read brought), b"" once it is
        complete. Raises ProviderConnectionError on a read timeout, a reset or a body that ends
        before its framing says, ProviderError on broken chunked framing."""
        try:  # not _network_errors, a generator made for every piece
            return await self._wire.next_piece()
        except (httpwire.WireError, TimeoutError, OSError, ssl.SSLError) as exc:
            raise _network_error(exc, self._target, self._read_timeout, in_body=True) from None

    def _too_large(self, max_bytes: int) -> ProviderError:
        return ProviderError(f"The response from {self._target.label} is larger than {max_bytes} bytes",
                             kind=KIND_INVALID_RESPONSE, retry=False)


@contextlib.asynccontextmanager
async def open_stream(method: str, url: str, headers: Mapping[str, str] | None = None,
                      json_body: Any = None, connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
                      read_timeout: float = READ_TIMEOUT_SECONDS,
                      encoder: BodyEncoder | None = None) -> AsyncIterator[StreamResponse]:
    """Send one request and give its response with the body unread:
    `async with open_stream("POST", url, headers, body) as response:`.

    The socket closes when the block ends: at once (abort) when the block raises, is cancelled or
    leaves the body unread, gracefully otherwise. Raises ValueError for a bad URL or header,
    ProviderConnectionError for network failures (retry=True for refused, reset, timeouts) and
    ProviderError for a malformed response head."""
    target = _parse_url(url)
    request = _build_request(method, target, headers or {}, json_body, encoder)
    reader, writer = await _connect(target, connect_timeout)
    try:
        with _network_errors(target, read_timeout):
            async with asyncio.timeout(read_timeout):
                await _write_request(writer, request)
            wire = await httpwire.read_response(reader, method, read_timeout)
            response = StreamResponse(wire, target, read_timeout)
        yield response
    except BaseException:
        writer.transport.abort()
        raise
    if response.complete:
        await httpwire.close_gracefully(writer)
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


async def stream_chat(kind: StreamingKind, url: str, key: str | None, body: Mapping[str, Any], *,
                      headers: Mapping[str, str] | None = None,
                      connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
                      read_timeout: float = READ_TIMEOUT_SECONDS,
                      keepalive_timeout: float = KEEPALIVE_TIMEOUT_SECONDS,
                      encoder: BodyEncoder | None = None,
                      ) -> AsyncGenerator[StreamEvent, None]:
    """Stream one chat answer as normalized events, ending with `StreamEnd(result)`.

    `url` is the full endpoint (`target.url`); the `kind` adds what its streaming request needs
    (`stream: true`, the Accept header, stream options) and frames the answer (SSE, NDJSON).
    Before streaming, raises ProviderError (classify_http_error) on a non-2xx status and
    ProviderConnectionError when the host cannot be reached. After the 200, failures (in-stream
    errors, a reset, a read timeout, a cut stream) arrive as a `StreamError` event, then
    `StreamEnd` with the partial result. Use it inside `contextlib.aclosing(...)` so that leaving
    the loop early closes the socket at once; cancelling the consuming task does too."""
    kind_headers, request_body = kind.stream_request(body)
    request_headers = {**kind_headers, **(headers or {})}
    if key:
        request_headers.update(kind.auth_headers(key))  # the kind's headers, never the body or the URL
    accumulator = ChatAccumulator()
    async with open_stream("POST", url, request_headers, request_body,
                           connect_timeout, read_timeout, encoder) as response:
        if not 200 <= response.status < 300:
            error_body = await response.read_prefix(MAX_ERROR_BODY_BYTES)
            raise classify_http_error(response.status, response.headers, error_body)
        decoder = kind.decoder(accumulator)
        keepalive = _KeepAlive(accumulator, keepalive_timeout)
        events: list[StreamEvent] = []
        try:
            if _is_json(response.headers.get("content-type", "")):
                # The server ignored `stream: true` and sent one whole answer.
                events = decoder.whole(json.loads(await response.read(MAX_JSON_BYTES)))
            else:
                turns = _LoopShare()
                while piece := await turns.read(response):
                    # The deltas of one read leave as one: a part.delta each, not one per chunk.
                    for event in join_deltas(decoder.feed(piece)) + keepalive.check():
                        yield event
                    if accumulator.failed or accumulator.saw_done:
                        break  # an error is terminal and nothing after [DONE] matters
                    await turns.share()
                events = decoder.close()
        except ProviderError as exc:
            events = accumulator.fail(exc.message, retry=exc.retry, kind=exc.kind)
        except ValueError as exc:  # StreamFormatError, or a whole answer that is not JSON
            events = accumulator.fail(f"The provider's stream is malformed: {exc}", retry=True,
                                      kind=KIND_INVALID_RESPONSE)
        for event in events + accumulator.finish():
            yield event
    yield StreamEnd(accumulator.result())


class _LoopShare:
    """Lets the loop run while a fast provider's bytes are buffered. A read returns at once while
    bytes wait in the buffer, so a burst would hold the loop; a read that had to wait let it run
    already, and yielding after it too would cost a loop turn for every paced delta."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._ran = clock()  # when the loop last ran other tasks, as far as we know

    async def read(self, response: StreamResponse) -> bytes:
        asked = self._clock()
        piece = await response.next_piece()
        now = self._clock()
        if now - asked > READ_WAITED_S:
            self._ran = now  # it waited for the network: the loop ran meanwhile
        return piece

    async def share(self) -> None:
        if self._clock() - self._ran > HOLD_LOOP_S:
            await asyncio.sleep(0)
            self._ran = self._clock()


class _KeepAlive:
    """Fails the answer when only keep-alive comments arrive for longer than `timeout`: data is
    whatever the accumulator counts as a chunk, whichever framing brought it."""

    def __init__(self, accumulator: ChatAccumulator, timeout: float) -> None:
        self._accumulator = accumulator
        self._timeout = timeout
        self._clock = asyncio.get_running_loop().time
        self._last_data = self._clock()
        self._chunks = accumulator.chunks

    def check(self) -> list[StreamEvent]:
        """After a piece of the body: the failure when data has been missing too long."""
        if self._accumulator.chunks != self._chunks:
            self._chunks, self._last_data = self._accumulator.chunks, self._clock()
            return []
        if self._clock() - self._last_data > self._timeout:
            return self._accumulator.fail(
                f"The provider sent only keep-alive comments for {self._timeout:g} s.",
                retry=True, kind=KIND_CONNECTION)
        return []


def _parse_url(url: str) -> _Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("the provider URL must be an http:// or https:// address with a host")
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target(https, parts.hostname, port, path)


async def _write_request(writer: asyncio.StreamWriter, pieces: list[bytes]) -> None:
    """Write the pieces of a request in batches of about WRITE_BATCH_BYTES, each when the socket
    has taken the last: a body of megabytes is never joined whole, nor copied whole into the
    transport's buffer."""
    batch: list[bytes] = []
    size = 0
    for piece in pieces:
        batch.append(piece)
        size += len(piece)
        if size >= WRITE_BATCH_BYTES:
            writer.write(b"".join(batch))
            batch, size = [], 0
            await writer.drain()
    if batch:
        writer.write(b"".join(batch))
    await writer.drain()


def _build_request(method: str, target: _Target, headers: Mapping[str, str], json_body: Any,
                   encoder: BodyEncoder | None = None) -> list[bytes]:
    """The request's head and body, in pieces (see _write_request)."""
    pieces = [] if json_body is None else (encoder or BodyEncoder()).encode_pieces(json_body)
    length = sum(map(len, pieces))
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
    fields["content-length"] = ("Content-Length", str(length))
    fields["connection"] = ("Connection", "close")
    if method.upper() in ("GET", "HEAD") and not length:
        del fields["content-length"]
    if any(c in method for c in " \r\n\0"):
        raise ValueError("the request method is invalid")
    head = f"{method} {target.path} HTTP/1.1\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in fields.values()) + "\r\n"
    return [head.encode("utf-8"), *pieces]


async def _connect(target: _Target, timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    context = await httpwire.system_tls_context() if target.https else None
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.open_connection(
                target.host, target.port, ssl=context, limit=httpwire.MAX_LINE_BYTES,
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
        raise ProviderConnectionError(target.label, httpwire.socket_reason(exc)) from None


@contextlib.contextmanager
def _network_errors(target: _Target, read_timeout: float, *, in_body: bool = False) -> Iterator[None]:
    """Turn network failures into ProviderConnectionError and a response that breaks HTTP into
    ProviderError (see _network_error)."""
    try:
        yield
    except (httpwire.WireError, TimeoutError, OSError, ssl.SSLError) as exc:
        raise _network_error(exc, target, read_timeout, in_body=in_body) from None


def _network_error(exc: httpwire.WireError | OSError, target: _Target, read_timeout: float, *,
                   in_body: bool = False) -> ProviderError:
    """The ProviderError of a network failure (retryable) or of a response that breaks HTTP; a
    broken body after a good head may be a proxy's hiccup, so only that one is worth another
    try."""
    if isinstance(exc, httpwire.WireError):
        if exc.closed:
            return ProviderConnectionError(target.label, exc.reason, connected=True)
        return ProviderError(f"The response from {target.label} is malformed: {exc.reason}",
                             kind=KIND_INVALID_RESPONSE, retry=in_body)
    if isinstance(exc, TimeoutError):
        return ProviderConnectionError(target.label, f"no data for {read_timeout:g} s (read timed out)",
                                       connected=True)
    return ProviderConnectionError(target.label, httpwire.socket_reason(exc), connected=True)


def _is_json(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "application/json"
