"""HTTP/1.1 on asyncio streams: parsing with limits, keep-alive, responses and static files.

Owns the wire: it reads request heads and bodies within size and time limits, parses a JSON body
(declared application/json, no key twice), writes responses with the security headers that every
answer carries, and serves files from `static/` without a way out of that folder. It knows
nothing of authentication, actions or the database: a handler given to `HttpServer` decides what
each request gets. A handler may take over the connection (the WebSocket upgrade) by returning
None.

Memory stays bounded against any client (issue 11): a big JSON body is decoded off the loop, an
answer is written in pieces with a write timeout (a client that stops reading is cut off and its
buffered bytes dropped), and after a large body or answer the freed memory is handed back to the
operating system where the C library allows it.

Memory stays bounded against many clients too: what waits to be sent, HTTP answers and the
WebSocket queues of every connection together, is held within one `SendBudget` (config key
sendbudgetmb). A large answer takes its share before it is written and gives it back piece by
piece as the client takes it; one that does not fit waits a moment for it (an action that knows
its answer will be large reserves before building it: `Request.reserve`), then is refused with
503 and Retry-After. At most `maxconnections` connections are served at once; past that, a new
one gets a 503 at once and is closed.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import ctypes
import functools
import hashlib
import json
import logging
import mimetypes
import os
import re
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, unquote

from totem.errors import ApiError, BadRequest, UnsupportedMediaType, error_body

log = logging.getLogger("totem.httpd")

MAX_REQUEST_LINE_BYTES = 8 * 1024
MAX_HEAD_BYTES = 32 * 1024
MAX_HEADERS = 100
MAX_BODY_BYTES = 20 * 1024 * 1024
MAX_QUERY_FIELDS = 100
READ_CHUNK_BYTES = 64 * 1024
WRITE_TIMEOUT_SECONDS = 30  # the default of the config key writetimeout
# An answer is handed to the transport in pieces this big, each waiting for the client to take
# the one before: the transport buffers at most one piece over its high-water mark.
WRITE_CHUNK_BYTES = 256 * 1024
# A JSON body above this size is decoded on a worker thread (a 20 MB prompt stalled the loop),
# its strings of LONG_STRING_BYTES or more DECODE_STEP_BYTES at a time, when at most
# MAX_SCANNED_STRINGS strings and escapes are met and at most MAX_SKELETON_BYTES are left.
THREAD_DECODE_BYTES = 1024 * 1024
LONG_STRING_BYTES = 64 * 1024
DECODE_STEP_BYTES = 1024 * 1024
MAX_SCANNED_STRINGS = 20_000
MAX_SKELETON_BYTES = 2 * 1024 * 1024
# After a body or an answer of this size the freed memory is given back (malloc_trim).
TRIM_AFTER_BYTES = 1024 * 1024
# Blocks of this size or more are mapped on their own (glibc's M_MMAP_THRESHOLD): freeing one
# gives it back to the system at once. glibc would otherwise raise its threshold after the first
# large free, so that 200 answers of 4 MB left 650 MB in its heap after they were sent.
MMAP_THRESHOLD_BYTES = 1024 * 1024
# The budget of what waits to be sent (config key sendbudgetmb): an answer up to this size goes
# without it (bounded by maxconnections); a larger one waits at most BUDGET_WAIT_S for its share,
# then is refused with 503 and Retry-After: RETRY_AFTER_S.
SEND_BUDGET_MB = 64
FREE_ANSWER_BYTES = 64 * 1024
BUDGET_WAIT_S = 1.0
RETRY_AFTER_S = 2
MAX_CONNECTIONS = 512  # the default of the config key maxconnections
# A connection refused past maxconnections: how long, and how much of its request, is read and
# dropped after the 503, so that closing does not reset the connection before the 503 is read.
REFUSED_LINGER_S = 1.0
REFUSED_LINGER_BYTES = 64 * 1024
# A connection closed with its request (or its body) unread, as after a 413: the same, longer and
# up to twice the largest body, so that a client that sends its whole body before it reads the
# answer (most do) gets the answer and not a reset (a web server's lingering close).
UNREAD_LINGER_S = 2.0
UNREAD_LINGER_BYTES = 2 * MAX_BODY_BYTES
# The only type of a request body (DESIGN.md: `+` actions take a JSON body). Requiring it also
# means a cross-origin form (text/plain, form-urlencoded) never reaches an action's parser.
JSON_MEDIA_TYPE = "application/json"
MAX_ECHOED_CHARS = 80  # of a bad Content-Type or a duplicate key, quoted back in the error

# Sent with every answer, errors and static files included (security text, "The server").
# Our pages use no inline script or style, so the policy can forbid them: a model's Markdown
# image or a link cannot carry data to another origin.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'")
SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
)

STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
}

_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class HttpError(Exception):
    """A request that cannot be parsed or read; answered with `status` and closed."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


class BudgetExceeded(ApiError):
    """The answer cannot be sent now: what waits to be sent already takes the send budget."""

    status = 503

    def __init__(self) -> None:
        super().__init__(("", "the server is busy sending other answers; try again shortly"),
                         headers={"Retry-After": str(RETRY_AFTER_S)})


class SendBudget:
    """The bytes that wait to be sent, all connections together, held within `limit`.

    A share is taken before the bytes are handed to a connection and given back once the
    client has taken them. A share that does not fit is refused, except when nothing else is
    held (one answer larger than the whole budget still goes, alone). Waiters are served in
    order. Loop-only: not thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, size: int, own: int) -> bool:
        return self.held + size <= self.limit or self.held == own

    def take_now(self, size: int, own: int = 0) -> bool:
        """Take `size` bytes if they fit now (`own`: what the caller holds already, which does
        not count as someone else's when the budget is full); whether they were taken."""
        if not self._fits(size, own):
            return False
        self.held += size
        return True

    def force(self, size: int) -> None:
        """Take `size` bytes whatever is held (a connection's one frame beyond the budget)."""
        self.held += size

    async def take(self, size: int, timeout: float) -> bool:
        """Take `size` bytes, waiting at most `timeout` seconds for them; whether they were
        taken. Cancelled, it takes nothing."""
        if not self._waiters and self.take_now(size):
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(waiter)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            self._abandon(entry)
            raise
        if waiter.done():  # given, perhaps just as the time ran out
            return True
        self._abandon(entry)
        return False

    def _abandon(self, entry: tuple[int, asyncio.Future[None]]) -> None:
        size, waiter = entry
        if waiter.done():
            self.give(size)
        else:
            self._waiters.remove(entry)
            waiter.cancel()
            self._wake()

    def give(self, size: int) -> None:
        """Give back `size` bytes taken before."""
        self.held -= size
        if self.held < 0:
            raise RuntimeError("more was given back to the send budget than was taken")
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self._fits(self._waiters[0][0], 0):
            size, waiter = self._waiters.popleft()
            self.held += size
            waiter.set_result(None)


@dataclass
class Request:
    """One parsed request. The body is read on demand with `read_body()`."""

    method: str
    target: str
    path: str
    query: dict[str, str]
    headers: list[tuple[str, str]]
    client: str
    version: str
    content_length: int = 0
    raw_head: bytes = field(default=b"", repr=False)
    _connection: _Connection | None = field(default=None, repr=False)
    _body: bytes | bytearray | None = field(default=None, repr=False)
    reserved: int = 0  # bytes of the send budget taken for the answer (`reserve`)
    _parsed: bool = field(default=False, repr=False)

    def header(self, name: str) -> str | None:
        """The value of a header (case-insensitive), or None."""
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value
        return None

    async def read_body(self) -> bytes | bytearray:
        """Read the whole body within the body time limit (a bytearray once read).

        Raises HttpError(408) when the client is too slow.
        """
        if self._body is None:
            if self.content_length == 0 or self._connection is None:
                self._body = b""
            else:
                self._body = await self._connection.read_exact(self.content_length)
        return self._body

    async def json(self) -> Any:
        """The body parsed as JSON (once: the raw body is dropped after it).

        Raises UnsupportedMediaType (415, before the body is read) unless the request has one
        Content-Type of application/json (parameters such as charset allowed, any case), and
        BadRequest for an empty or malformed body or an object with a key given twice.
        """
        check_json_type(self.headers)
        if self._parsed:
            raise RuntimeError("the body was parsed already")
        body = await self.read_body()
        self._parsed = True
        if not body:
            raise BadRequest(("body", "a JSON object is required"))
        # The raw body is let go once parsed (read_body gives b"" after): a 20 MB prompt would
        # otherwise be held twice, as bytes and as text, until its answer is written.
        self._body = b""
        try:
            if len(body) > THREAD_DECODE_BYTES:
                return await asyncio.to_thread(decode_json, body, True)
            return decode_json(body)
        except DuplicateKeyError as exc:
            raise BadRequest(("body", f"duplicate key {_quoted(exc.key)}")) from None
        except (ValueError, RecursionError) as exc:
            # ValueError covers JSONDecodeError, UnicodeDecodeError and a number of more than
            # sys.get_int_max_str_digits() digits, which json.loads refuses with a plain ValueError.
            if isinstance(exc, RecursionError):
                reason = "nested too deeply"
            elif isinstance(exc, UnicodeDecodeError):
                reason = "not UTF-8"
            else:
                reason = getattr(exc, "msg", None) or "a number too long"
            raise BadRequest(("body", f"malformed JSON: {reason}")) from None

    async def reserve(self, size: int) -> None:
        """Take `size` bytes of the send budget for the answer before building it (a page that
        may be large), waiting at most BUDGET_WAIT_S for them; the server gives them back once
        the answer is sent (what it turns out not to need, before). Nothing is taken for a
        request without a connection. Raises BudgetExceeded (503, Retry-After)."""
        connection = self._connection
        if connection is None or size <= 0:
            return
        if not await connection.budget.take(size, BUDGET_WAIT_S):
            raise BudgetExceeded()
        self.reserved += size

    def detach(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
        """Take the connection over (a WebSocket): its streams and the bytes already read."""
        connection = self._connection
        if connection is None:
            raise RuntimeError("this request has no connection to take over")
        leftover = bytes(connection.buffer)
        connection.buffer.clear()
        return connection.reader, connection.writer, leftover

    @property
    def body_consumed(self) -> bool:
        return self.content_length == 0 or self._body is not None


class DuplicateKeyError(ValueError):
    """A JSON object names the same key twice (RFC 8259 section 4: its meaning is unpredictable)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def decode_json(body: bytes | bytearray, consume: bool = False):
    """Parse a JSON body, refusing an object that names a key twice.

    A body above THREAD_DECODE_BYTES whose bulk is long strings (base64 attachments) has those
    strings decoded in steps (`_decode_long_strings`), with the same result and the same errors
    as one json.loads, which would hold the interpreter for the whole scan.

    Raises DuplicateKeyError, ValueError (malformed, not UTF-8, a number too long) and
    RecursionError (nested too deeply). With `consume`, a bytearray body is used up: the pages
    of its long strings are given back to the system as they are decoded (see _PageRelease), and
    what they held must not be read again."""
    if len(body) > THREAD_DECODE_BYTES:
        value = _decode_long_strings(body, release=_PageRelease(body) if consume else None)
        if value is not _NOT_SPLIT:
            return value
    return json.loads(body, object_pairs_hook=_unique_keys)


_NOT_SPLIT = object()
_CONTROL_BYTES = bytes(range(0x20))  # not allowed raw in a JSON string (RFC 8259 section 7)
_JSON_SPACE = re.compile(rb"[ \t\n\r]*")
# What json.loads would decode as UTF-16 or UTF-32 (a BOM, or a zero byte among the first two).
_OTHER_ENCODINGS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def _decode_long_strings(body: bytes | bytearray, long_bytes: int = LONG_STRING_BYTES, step: int = DECODE_STEP_BYTES,
                         release: _PageRelease | None = None):
    """json.loads of a body with long string values, each decoded `step` bytes at a time, so
    that no single call holds the interpreter for long; _NOT_SPLIT when the body is not of that
    kind (or not UTF-8, or has a problem in a long string), for json.loads to decode or refuse.

    The strings are found by their quotes: outside a string every quote opens one, inside a
    backslash escapes the next byte. A long string value without escapes or control characters
    is replaced by a placeholder that no body can guess; what is left (the skeleton) is small,
    and json.loads of it meets the same tokens, so the same first error, as json.loads of all."""
    if body.startswith(_OTHER_ENCODINGS) or body[:1] == b"\x00" or body[1:2] == b"\x00":
        return _NOT_SPLIT
    spans: list[tuple[int, int]] = []
    scanned = 0
    pos = 0
    while (start := body.find(b'"', pos)) >= 0:
        cursor, end, escaped = start + 1, body.find(b'"', start + 1), False
        while end >= 0:
            scanned += 1
            if scanned > MAX_SCANNED_STRINGS:
                return _NOT_SPLIT
            backslash = body.find(b"\\", cursor, end)
            if backslash < 0:
                break
            escaped, cursor = True, backslash + 2
            if cursor > end:
                end = body.find(b'"', cursor)
        if end < 0:
            return _NOT_SPLIT
        # Only values: a key stays in the skeleton, where a key given twice is still caught.
        space = _JSON_SPACE.match(body, end + 1)
        after = space.end() if space else end + 1
        if not escaped and end - start - 1 >= long_bytes and body[after:after + 1] != b":":
            spans.append((start + 1, end))
        pos = end + 1
    skeleton_bytes = len(body) - sum(end - start for start, end in spans)
    if not spans or skeleton_bytes > MAX_SKELETON_BYTES:
        return _NOT_SPLIT
    strings = [_decode_span(body, start, end, step, release) for start, end in spans]
    if any(text is None for text in strings):
        return _NOT_SPLIT
    marker = "\x00" + secrets.token_hex(16) + ":"
    pieces, previous = [], 0
    for index, (start, end) in enumerate(spans):
        pieces += [body[previous:start], b"\\u0000", marker[1:].encode(), str(index).encode()]
        previous = end
    pieces.append(body[previous:])
    value = json.loads(b"".join(pieces), object_pairs_hook=_unique_keys)
    found = {f"{marker}{index}": text for index, text in enumerate(strings)}
    if isinstance(value, str):
        return found.get(value, value)
    stack = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in items:
            if isinstance(item, str):
                if item in found:
                    node[key] = found[item]
            elif isinstance(item, (dict, list)):
                stack.append(item)
    return value


class _PageRelease:
    """Gives back to the system the memory pages wholly inside a part of a bytearray that has
    been read for the last time (madvise MADV_DONTNEED: the pages read as zeros afterwards), so
    that a 20 MB body is not held beside the 20 MB of text decoded from it. Only whole pages
    strictly inside the buffer are touched; where madvise is unavailable it does nothing.

    A long string whose decoding fails makes decode_json fall back to json.loads of the whole
    body: the zeros it then meets in strings already released are control characters, which
    json.loads refuses with the same message as the control character or the bytes that made
    the string fail (a body that is not UTF-8 is refused before any parsing)."""

    def __init__(self, body: bytes | bytearray) -> None:
        self._address = 0
        self._size = len(body)
        madvise = _madvise()
        if madvise is None or not isinstance(body, bytearray) or not body:
            return
        view = (ctypes.c_char * len(body)).from_buffer(body)
        self._address = ctypes.addressof(view)
        del view  # the address stays valid: the body is not resized while it is decoded
        self._madvise = madvise

    def release(self, start: int, end: int) -> None:
        """The bytes [start, end) of the body will not be read again."""
        if not self._address:
            return
        first = -(-(self._address + start) // _PAGE_BYTES) * _PAGE_BYTES
        last = (self._address + min(end, self._size)) // _PAGE_BYTES * _PAGE_BYTES
        if last > first and self._madvise(first, last - first, _MADV_DONTNEED) != 0:
            self._address = 0  # refused: keep the rest


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_MADV_DONTNEED = 4  # Linux's value


@functools.cache
def _madvise():
    if os.uname().sysname != "Linux":
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (AttributeError, OSError):
        return None
    madvise.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def _decode_span(body: bytes | bytearray, start: int, end: int, step: int,
                 release: _PageRelease | None = None) -> str | None:
    """The text of body[start:end] as json.loads would decode it (UTF-8, surrogates allowed),
    `step` bytes at a time; None when it holds a control character or is not UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
    # Grown in place (CPython resizes a string that nothing else holds), so that the pages of a
    # large text are touched a step at a time: a join would fault them all in at once (15 MB in
    # 11 ms).
    text = ""
    for offset in range(start, end, step):
        chunk = body[offset:min(offset + step, end)]
        if len(chunk.translate(None, _CONTROL_BYTES)) != len(chunk):
            return None
        try:
            text += decoder.decode(chunk, offset + step >= end)
        except UnicodeDecodeError:
            return None
        if release is not None:
            release.release(start, min(offset + step, end))
        time.sleep(0)  # hand the interpreter to the event loop if it waits for it
    return text


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    # Called for every object at every depth. Python keeps the last value of a repeated key while
    # other parsers keep the first, so a body could mean one thing to a check and another to a use.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


def _quoted(text: str) -> str:
    text = json.dumps(text)  # ASCII, with control characters and lone surrogates escaped
    return text if len(text) <= MAX_ECHOED_CHARS else text[:MAX_ECHOED_CHARS] + "..."


def check_json_type(headers: list[tuple[str, str]]) -> None:
    """Raise UnsupportedMediaType unless there is exactly one Content-Type, application/json.

    The media type is compared without case and its parameters are ignored (RFC 9110 section
    8.3.1), so `application/json; charset=utf-8` passes and `application/jsonx` does not.
    """
    values = [value for name, value in headers if name == "content-type"]
    if not values:
        raise UnsupportedMediaType(("content-type", f"send the body as Content-Type: {JSON_MEDIA_TYPE}"))
    if len(values) > 1:
        raise UnsupportedMediaType(("content-type", "more than one Content-Type header"))
    media_type = values[0].split(";", 1)[0].strip().lower()
    if media_type != JSON_MEDIA_TYPE:
        raise UnsupportedMediaType(("content-type", f"{_quoted(media_type)} is not accepted; "
                                                    f"send the body as {JSON_MEDIA_TYPE}"))


@dataclass
class Response:
    """An answer: status, headers and a body held in memory, as bytes or as a list of pieces
    (a large answer encoded piece by piece, written without joining them)."""

    status: int
    body: bytes | list[bytes] = b""
    content_type: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    close: bool = False

    @property
    def length(self) -> int:
        """The length of the body in bytes."""
        if isinstance(self.body, (bytes, bytearray, memoryview)):
            return len(self.body)
        return sum(len(piece) for piece in self.body)

    def pieces(self) -> list[bytes]:
        return [self.body] if isinstance(self.body, (bytes, bytearray, memoryview)) else self.body


JSON_CONTENT_TYPE = "application/json; charset=utf-8"


def encode_json(data) -> bytes:
    """Data as compact UTF-8 JSON; the one encoding of every JSON answer."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        # A lone surrogate (a file name that is not UTF-8, decoded with surrogateescape) cannot be
        # UTF-8: escape it as \udcxx, which JSON allows and which round-trips to the same bytes.
        return json.dumps(data, separators=(",", ":")).encode()


JSON_PIECE_BYTES = 64 * 1024


def encode_json_pieces(data, depth: int) -> list[bytes]:
    """The bytes of `encode_json(data)` as a list of pieces: objects and lists down to `depth`
    levels are split into their members, each encoded on its own. Run on a worker thread, this
    lets the event loop take the interpreter between pieces, and no piece is bigger than the
    largest member or JSON_PIECE_BYTES (no whole copy of the answer is ever joined). Small
    neighbouring pieces are joined up to JSON_PIECE_BYTES: a page of messages split to its
    members is tens of thousands of them, each costing a step of every later pass."""
    out: list[bytes] = []
    _encode_into(data, depth, out)
    pieces: list[bytes] = []
    run: list[bytes] = []
    size = 0
    for piece in out:
        if size and size + len(piece) > JSON_PIECE_BYTES:
            pieces.append(b"".join(run))
            run, size = [], 0
        run.append(piece)
        size += len(piece)
    if run:
        pieces.append(b"".join(run))
    return pieces


def _encode_into(data, depth: int, out: list[bytes]) -> None:
    if depth > 0 and isinstance(data, dict) and all(isinstance(key, str) for key in data):
        out.append(b"{")
        for index, (key, value) in enumerate(data.items()):
            out.append((b"," if index else b"") + encode_json(key) + b":")
            _encode_into(value, depth - 1, out)
        out.append(b"}")
    elif depth > 0 and isinstance(data, (list, tuple)):
        out.append(b"[")
        for index, item in enumerate(data):
            if index:
                out.append(b",")
            _encode_into(item, depth - 1, out)
        out.append(b"]")
    else:
        out.append(encode_json(data))


def json_response(data, status: int = 200, headers: list[tuple[str, str]] | None = None) -> Response:
    """A JSON answer."""
    return Response(status, encode_json(data), JSON_CONTENT_TYPE, list(headers or []))


async def large_json_response(data, depth: int) -> Response:
    """A JSON answer that may be large (a page of messages): encoded once, in pieces
    (`encode_json_pieces`), on a worker thread."""
    pieces = await asyncio.to_thread(encode_json_pieces, data, depth)
    return Response(200, pieces, JSON_CONTENT_TYPE)


def error_response(exc: ApiError) -> Response:
    """The answer to an ApiError, in the one error shape."""
    return Response(exc.status, error_body(exc.errors), JSON_CONTENT_TYPE, list(exc.headers.items()))


def plain_error(status: int, reason: str) -> Response:
    return Response(status, error_body([("", reason)]), JSON_CONTENT_TYPE, close=True)


class _Connection:
    """The read side of one client connection, with a buffer that survives between requests."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head_timeout: float,
                 body_timeout: float, idle_timeout: float, budget: SendBudget):
        self.reader = reader
        self.writer = writer
        self.budget = budget
        self.large = False  # a large body or answer is being handled: memory to release after it
        self.unread = False  # the last answer came before all of its request was read
        self.buffer = bytearray()
        self.head_timeout = head_timeout
        self.body_timeout = body_timeout
        self.idle_timeout = idle_timeout

    async def _fill(self, timeout: float) -> bool:
        data = await asyncio.wait_for(self.reader.read(READ_CHUNK_BYTES), timeout)
        if not data:
            return False
        self.buffer += data
        return True

    async def read_head(self) -> bytes | None:
        """The bytes of the next request head, or None when the client went away or idled.

        Raises HttpError for a head that is too large (414, 431) or too slow (408).
        """
        if not self.buffer:
            try:
                if not await self._fill(self.idle_timeout):
                    return None
            except (TimeoutError, ConnectionError):
                return None
        deadline = time.monotonic() + self.head_timeout
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(self.buffer[:end])
                del self.buffer[:end + 4]
                self._check_head_size(head)
                return head
            self._check_head_size(bytes(self.buffer))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise HttpError(408, "the request head took too long")
            try:
                if not await self._fill(remaining):
                    return None
            except TimeoutError:
                raise HttpError(408, "the request head took too long") from None
            except ConnectionError:
                return None

    def _check_head_size(self, data: bytes) -> None:
        line_end = data.find(b"\r\n")
        if (line_end < 0 and len(data) > MAX_REQUEST_LINE_BYTES) or line_end > MAX_REQUEST_LINE_BYTES:
            raise HttpError(414, f"the request line is longer than {MAX_REQUEST_LINE_BYTES} bytes")
        if len(data) > MAX_HEAD_BYTES:
            raise HttpError(431, f"the request headers are larger than {MAX_HEAD_BYTES} bytes")

    async def read_exact(self, size: int) -> bytearray:
        deadline = time.monotonic() + self.body_timeout
        while len(self.buffer) < size:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0 or not await self._fill(remaining):
                    raise HttpError(408, "the request body took too long or was cut short")
            except (TimeoutError, ConnectionError):
                raise HttpError(408, "the request body took too long or was cut short") from None
        # The buffer itself is the body, without a copy (a copy of 20 MB faults in 20 MB of new
        # pages at once); what follows it, if anything, goes to a new buffer.
        data = self.buffer
        self.buffer = data[size:]
        del data[size:]
        return data


def parse_head(head: bytes, client: str) -> Request:
    """Parse a request head. Raises HttpError(400/431/501) for anything malformed."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise HttpError(400, "the request head is not text") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505 if version.startswith("HTTP/") else 400, "only HTTP/1.1 and HTTP/1.0 are served")
    if not method or not set(method) <= _TOKEN_CHARS:
        raise HttpError(400, "malformed method")
    if not target.startswith("/"):
        raise HttpError(400, "the request target must be a path")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or not set(name) <= _TOKEN_CHARS:
            raise HttpError(400, "malformed header line")
        value = value.strip(" \t")
        if any(ord(ch) < 32 and ch != "\t" or ord(ch) == 127 for ch in value):
            raise HttpError(400, f"control character in header {name}")
        headers.append((name.lower(), value))
    if len(headers) > MAX_HEADERS:
        raise HttpError(431, f"more than {MAX_HEADERS} headers")
    if sum(1 for key, _ in headers if key == "host") > 1:
        # RFC 9112 section 3.2: a proxy may route by one Host while the Host rule checks another.
        raise HttpError(400, "more than one Host header")
    raw_path, _, raw_query = target.partition("?")
    try:
        path = unquote(raw_path, errors="strict")
        query = dict(parse_qsl(raw_query, keep_blank_values=True, strict_parsing=False,
                               max_num_fields=MAX_QUERY_FIELDS, errors="strict"))
    except UnicodeDecodeError:
        raise HttpError(400, "the request target is not valid UTF-8") from None
    except ValueError:
        raise HttpError(400, f"more than {MAX_QUERY_FIELDS} query fields") from None
    if "\x00" in path or any("\x00" in key or "\x00" in value for key, value in query.items()):
        raise HttpError(400, "NUL in the request target")
    request = Request(method, target, path, query, headers, client, version, raw_head=head + b"\r\n\r\n")
    request.content_length = _content_length(request)
    return request


def _content_length(request: Request) -> int:
    if request.header("transfer-encoding") is not None:
        raise HttpError(411, "chunked request bodies are not accepted; send Content-Length")
    values = [value for key, value in request.headers if key == "content-length"]
    if not values:
        return 0
    text = values[0]
    # ASCII digits only: str.isdigit() also accepts '²', which int() refuses.
    if len(set(values)) != 1 or not (text.isascii() and text.isdigit()):
        raise HttpError(400, "malformed Content-Length")
    # Thousands of digits would make int() raise; anything that long is over the limit anyway.
    length = int(text) if len(text.lstrip("0")) <= len(str(MAX_BODY_BYTES)) else MAX_BODY_BYTES + 1
    if length > MAX_BODY_BYTES:
        raise HttpError(413, f"the body is larger than {MAX_BODY_BYTES // (1024 * 1024)} MB")
    return length


def wants_close(request: Request) -> bool:
    connection = (request.header("connection") or "").lower()
    if request.version == "HTTP/1.0":
        return "keep-alive" not in connection
    return "close" in connection


_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(when: float | None = None) -> str:
    """The IMF-fixdate of RFC 9110 (`Sun, 06 Nov 1994 08:49:37 GMT`) of `when` (seconds since
    the epoch; now when None): what email.utils.formatdate(usegmt=True) writes, without loading
    the email package (3-4 MB at start-up) for the Date header of every answer."""
    # Now by time.time(), the clock of every other time stamp: gmtime(None) reads the kernel's
    # coarse clock, which near a second's end may still name the one before.
    t = time.gmtime(time.time() if when is None else when)
    return (f"{_WEEKDAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year:04d} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT")


def encode_head(response: Response, close: bool) -> bytes:
    """The status line and headers of a response, with the security headers that every answer
    carries."""
    reason = HTTPStatus(response.status).phrase if response.status in HTTPStatus._value2member_map_ else ""
    lines = [f"HTTP/1.1 {response.status} {reason}"]
    names = {name.lower() for name, _ in response.headers}
    lines.extend(f"{name}: {value}" for name, value in response.headers)
    if response.content_type and "content-type" not in names:
        lines.append(f"Content-Type: {response.content_type}")
    if "cache-control" not in names:
        lines.append("Cache-Control: no-store")
    lines.extend(f"{name}: {value}" for name, value in SECURITY_HEADERS)
    lines.append(f"Date: {http_date()}")
    if response.status >= 200 and response.status not in (204, 304):
        # RFC 9110 section 8.6: never on 1xx and 204; on a 304 it would have to be GET's length.
        lines.append(f"Content-Length: {response.length}")
    lines.append("Connection: close" if close else "Connection: keep-alive")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def write_chunks(pieces: list[bytes] | deque[bytes]):
    """The pieces of a body regrouped for writing: small ones joined, large ones cut, each at
    most WRITE_CHUNK_BYTES. A chunk once given out is never changed (the transport may keep it).
    A deque is emptied as it goes, so that each piece is let go once it is written."""
    pending = bytearray()
    for piece in _taken(pieces):
        if len(pending) + len(piece) <= WRITE_CHUNK_BYTES:
            pending += piece
            continue
        if pending:
            yield pending
            pending = bytearray()
        view = memoryview(piece)
        del piece
        for start in range(0, len(view), WRITE_CHUNK_BYTES):
            chunk = view[start:start + WRITE_CHUNK_BYTES]
            if len(chunk) < WRITE_CHUNK_BYTES:
                pending += chunk
            else:
                yield chunk
        del view, chunk
    if pending:
        yield pending


def _taken(pieces: list[bytes] | deque[bytes]):
    if isinstance(pieces, deque):
        while pieces:
            yield pieces.popleft()
    else:
        yield from pieces


@functools.cache
def _malloc_trim():
    # glibc keeps freed memory in its heap (and raises its mmap threshold after a large free, so
    # the next large body lands in the heap too); malloc_trim(0) gives the free pages back.
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
            return None
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, ValueError, OSError):  # not glibc: musl, macOS, Windows
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


@functools.cache
def tune_allocator() -> bool:
    """Have glibc map every block of MMAP_THRESHOLD_BYTES or more on its own, so that a large
    answer or body gives its memory back to the system as soon as it is freed (setting the
    threshold also stops glibc from raising it after a large free). Once per process; returns
    whether it could (False elsewhere than glibc, where it does nothing). Raises nothing."""
    if _malloc_trim() is None:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def release_memory() -> bool:
    """Give the memory that was freed back to the operating system where the C library can
    (glibc's malloc_trim(0)); returns whether it could. Elsewhere it does nothing. Raises
    nothing. It takes no lock of Python's: it may run on a worker thread."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class _WriteTimeout(Exception):
    """The client took more than the write timeout to read a piece of an answer."""


async def linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seconds: float, most: int) -> None:
    """Close a connection whose client may still be sending: end our side, read and drop what
    comes for up to `seconds` and `most` bytes, then close. Closing a socket with unread bytes
    resets the connection, and the client would lose the answer it had not read yet."""
    try:
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(seconds):
            dropped = 0
            while dropped < most and (data := await reader.read(READ_CHUNK_BYTES)):
                dropped += len(data)
    except (TimeoutError, ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


class HttpServer:
    """Serves connections with `handler(request) -> Response | None` (None: taken over).

    `send_budget` bytes at most wait to be sent, all connections together (`budget`, shared
    with the WebSocket connections); at most `max_connections` are served at once."""

    def __init__(self, handler, head_timeout: float, body_timeout: float, idle_timeout: float,
                 write_timeout: float = WRITE_TIMEOUT_SECONDS, send_budget: int = SEND_BUDGET_MB * 1024 * 1024,
                 max_connections: int = MAX_CONNECTIONS):
        self.handler = handler
        self.head_timeout = head_timeout
        self.body_timeout = body_timeout
        self.idle_timeout = idle_timeout
        self.write_timeout = write_timeout
        self.budget = SendBudget(send_budget)
        self.max_connections = max_connections
        self.refused = 0  # connections refused past max_connections, since the start
        self.server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._lingering: set[asyncio.Task] = set()  # refused connections, read and dropped
        self._releasing = False  # one release_memory at a time: it frees what all freed before

    async def start(self, host: str, port: int) -> None:
        tune_allocator()
        self.server = await asyncio.start_server(self._accept, host, port, limit=MAX_HEAD_BYTES * 2)

    @property
    def port(self) -> int:
        if self.server is None:
            raise RuntimeError("the server is not listening")
        return self.server.sockets[0].getsockname()[1]

    @property
    def connections(self) -> int:
        """The connections being served now, WebSockets included."""
        return len(self._tasks)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self._tasks | self._lingering):
            task.cancel()
        if self._tasks or self._lingering:
            await asyncio.gather(*self._tasks, *self._lingering, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # a connection is always served by its own task
        if len(self._tasks) >= self.max_connections:
            self._lingering.add(task)
            try:
                await self._refuse(reader, writer)
            finally:
                self._lingering.discard(task)
            return
        self._tasks.add(task)
        drop = False  # close at once, dropping what the transport still holds
        connection = _Connection(reader, writer, self.head_timeout, self.body_timeout, self.idle_timeout,
                                 self.budget)
        try:
            taken = await self._serve(connection)
        except _WriteTimeout:
            peer = writer.get_extra_info("peername")
            log.info("closed the connection of %s: an answer was not read within %s s",
                     peer[0] if peer else "a client", self.write_timeout)
            taken, drop = False, True
        except (ConnectionError, asyncio.CancelledError):
            taken, drop = False, True
        except Exception:  # a bug: log it, never show it to the client
            log.exception("connection failed")
            taken, drop = False, True
        finally:
            self._tasks.discard(task)
        if not taken:
            if drop:
                # close() would keep the unsent bytes until a client that stopped reading takes them.
                writer.transport.abort()
            elif connection.unread:
                self._lingering.add(task)  # stop() ends it
                try:
                    await linger(reader, writer, UNREAD_LINGER_S, UNREAD_LINGER_BYTES)
                finally:
                    self._lingering.discard(task)
            else:
                writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, asyncio.CancelledError):
                pass
        if connection.large:  # cut off in the middle of a large answer, or after one
            await self._release()

    async def _release(self) -> None:
        if not self._releasing:
            self._releasing = True
            try:
                await asyncio.to_thread(release_memory)
            finally:
                self._releasing = False

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer a connection past max_connections with 503 before reading its request, then
        read and drop what it sends for a moment: closing a socket with unread bytes resets the
        connection, and the client might lose the 503 with it."""
        self.refused += 1
        if self.refused == 1 or self.refused % 1000 == 0:
            log.warning("refused a connection: %d are served at once, the most allowed (maxconnections); "
                        "%d refused so far", self.max_connections, self.refused)
        refusal = Response(503, error_body([("", f"the server serves at most {self.max_connections} "
                                                 "connections at once; try again shortly")]),
                           JSON_CONTENT_TYPE, [("Retry-After", str(RETRY_AFTER_S))], close=True)
        try:
            writer.write(encode_head(refusal, True) + b"".join(refusal.pieces()))
        except ConnectionError:
            pass
        await linger(reader, writer, REFUSED_LINGER_S, REFUSED_LINGER_BYTES)
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            await writer.wait_closed()

    async def _serve(self, connection: _Connection) -> bool:
        writer = connection.writer
        peer = writer.get_extra_info("peername")
        client = peer[0] if peer else ""
        while True:
            request = None
            try:
                head = await connection.read_head()
                if head is None:
                    return False
                request = parse_head(head, client)
                request._connection = connection
                response = await self._answer(request)
            except HttpError as exc:
                if request is not None:
                    self.budget.give(request.reserved)
                connection.unread = True
                await self._write(writer, plain_error(exc.status, exc.reason), False, True)
                return False
            except BaseException:
                if request is not None:
                    self.budget.give(request.reserved)
                raise
            if response is None:
                self.budget.give(request.reserved)
                return True
            connection.unread = not request.body_consumed
            close = response.close or wants_close(request) or connection.unread
            connection.large = large = max(request.content_length, response.length) >= TRIM_AFTER_BYTES
            head_only = request.method == "HEAD"
            share = self._share(request.reserved, 0 if head_only else response.length)
            if share is None:
                self.budget.give(request.reserved)
                response = error_response(BudgetExceeded())
                share = 0
            request = None  # the body is freed before the answer is written
            try:
                await self._write(writer, response, head_only, close, share)
            finally:
                response = None  # the answer is freed before the next request
            if large:
                await self._release()
                connection.large = False
            if close:
                return False

    def _share(self, reserved: int, length: int) -> int | None:
        """The share of the send budget that an answer of `length` bytes holds while it is
        written, `reserved` being taken already: None when it needs more and that does not fit."""
        needed = length if length > FREE_ANSWER_BYTES else 0
        if needed < reserved:
            self.budget.give(reserved - needed)
        elif needed > reserved and not self.budget.take_now(needed - reserved, own=reserved):
            return None
        return needed

    async def _write(self, writer: asyncio.StreamWriter, response: Response, head_only: bool,
                     close: bool, share: int = 0) -> None:
        """Write an answer without copying its body whole: a small one at once, a large one in
        chunks, each handed over only when the client has taken most of the one before; each
        piece is let go, and its part of `share` (of the send budget) given back, once it is.

        Raises _WriteTimeout when the client leaves a chunk unread for write_timeout seconds."""
        try:
            head = encode_head(response, close)
            if head_only or response.length <= WRITE_CHUNK_BYTES:
                writer.write(head if head_only else head + b"".join(response.pieces()))
                await self._drain(writer)
                return
            pieces = deque(response.pieces())
            response.body = b""  # the pieces are let go as they are written
            writer.write(head)
            for chunk in write_chunks(pieces):
                size = len(chunk)
                writer.write(chunk)
                del chunk
                await self._drain(writer)
                given = min(size, share)
                self.budget.give(given)
                share -= given
        finally:
            self.budget.give(share)

    async def _drain(self, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(self.write_timeout):
                await writer.drain()
        except TimeoutError:
            raise _WriteTimeout() from None

    async def _answer(self, request: Request) -> Response | None:
        try:
            return await self.handler(request)
        except HttpError:
            raise
        except ApiError as exc:
            return error_response(exc)
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            return plain_error(500, "internal error; see the server log")


def resolve_static(root: str, path: str) -> str | None:
    """The file under `root` that a URL path names, or None when it is not one.

    Refuses `..` segments, backslashes, hidden names and anything that resolves (symlinks
    included) outside `root`.
    """
    relative = path.lstrip("/")
    segments = relative.split("/")
    if any(seg in ("", ".", "..") or seg.startswith(".") or "\\" in seg for seg in segments):
        return None
    real_root = os.path.realpath(root)
    candidate = os.path.realpath(os.path.join(real_root, *segments))
    if os.path.commonpath([real_root, candidate]) != real_root or not os.path.isfile(candidate):
        return None
    return candidate


async def static_response(root: str, path: str, if_none_match: str | None = None) -> Response | None:
    """A static file as a response, or None when there is no such file.

    The browser keeps it and asks again each time (no-cache) with its ETag, a digest of the bytes:
    while the file is unchanged the answer is a 304 without the body, and the browser uses its copy
    (with the scripts it compiled from it) instead of loading and compiling the file again."""
    file_path = await asyncio.to_thread(resolve_static, root, path)
    if file_path is None:
        return None
    body, tag = await asyncio.to_thread(_read_tagged, file_path)
    headers = [("Cache-Control", "no-cache"), ("ETag", tag)]
    if if_none_match is not None and etag_matches(if_none_match, tag):
        return Response(304, headers=headers)
    ext = os.path.splitext(file_path)[1].lower()
    content_type = STATIC_TYPES.get(ext) or mimetypes.guess_type(file_path)[0] or "application/octet-stream"
    return Response(200, body, content_type, headers)


def etag_matches(if_none_match: str, tag: str) -> bool:
    """Whether an If-None-Match value names `tag` (RFC 9110 section 13.1.2: `*`, or a list of
    entity tags compared weakly, so W/"x" names "x")."""
    wanted = if_none_match.strip()
    if wanted == "*":
        return True
    return any(candidate.strip().removeprefix("W/") == tag for candidate in wanted.split(","))


def _read_tagged(path: str) -> tuple[bytes, str]:
    """A file's bytes and its strong entity tag."""
    with open(path, "rb") as handle:
        body = handle.read()
    return body, f'"{hashlib.blake2b(body, digest_size=12).hexdigest()}"'
