"""Framing of a model's streamed answer: server-sent events and newline-delimited JSON.

Owns: the WHATWG server-sent-events decoder (OpenAI-compatible `text/event-stream`) and the
NDJSON decoder (Ollama's native /api/chat, `application/x-ndjson`), both incremental: bytes in
pieces of any size go in, complete events or JSON values come out; the limits on a line and an
event; `StreamFormatError` for bytes that cannot be framed.

Must not: do any I/O, interpret the chunks (stream.py does), or know about HTTP, providers or
errors beyond the framing. The quirks it tolerates are documented in
`shared/fixtures/providers/*.md`.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

# A whole tool call (a file's content for write_file) can ride in one data line, so lines may be
# long; past this the peer is broken or hostile, and we stop instead of growing memory.
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_EVENT_CHARS = 32 * 1024 * 1024
# Keep-alive comments arrive for minutes (DeepSeek queues up to ~10 min): keep only the last few.
MAX_KEPT_COMMENTS = 32
MAX_KEPT_IGNORED_LINES = 32
DONE_SENTINEL = "[DONE]"


class StreamFormatError(ValueError):
    """The bytes of a stream cannot be framed (a line too long, an NDJSON line that is not JSON)."""


# --- Server-sent events (https://html.spec.whatwg.org/multipage/server-sent-events.html) -----

_LINE_END_TEXT = re.compile("\r\n|\r|\n")


class SseEvent(NamedTuple):
    """One dispatched event: `data` lines joined with newlines, `event` defaults to message.
    (A named tuple: one is made for every chunk of a stream, at a third of a dataclass's cost.)"""

    data: str
    event: str = "message"
    id: str = ""

    @property
    def is_done(self) -> bool:
        """True for OpenAI's end-of-stream marker `data: [DONE]`."""
        return self.data.strip() == DONE_SENTINEL


class SseDecoder:
    """Incremental SSE decoder: `feed(bytes)` returns the events completed by those bytes.

    Lines end with CRLF, LF or CR, a CR may end one feed and its LF start the next, and a UTF-8
    character may be split across feeds (lines are decoded only once complete). Comments are kept
    in `comments` (the last few) and counted in `comment_count`; lines with a field name the spec
    does not know (llama.cpp's legacy `error:`) are dropped, as the spec says, and kept in
    `ignored_lines`. At end of input an event without its blank line is discarded (spec), which
    `pending` reports."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._skip_lf = False
        self._first_line = True
        self._data: list[str] = []
        self._data_chars = 0
        self._event = ""
        self.last_event_id = ""
        self.retry_ms: int | None = None
        self.comments: list[str] = []
        self.comment_count = 0
        self.ignored_lines: list[str] = []

    @property
    def pending(self) -> bool:
        """True when bytes or data lines are waiting for an end that has not come."""
        return bool(self._buffer) or bool(self._data)

    def feed(self, data: bytes) -> list[SseEvent]:
        """Decode more bytes; raises StreamFormatError when a line passes MAX_LINE_BYTES.

        The complete lines of a feed are decoded and split at once, whatever their number: a
        fast local model sends hundreds of events in one read, and a loop over each line's
        bytes cost more than the rest of the relay (decoding UTF-8 as a whole gives what
        decoding each line gives, since no line end byte is ever part of a character)."""
        if self._skip_lf and data[:1] == b"\n":
            data = data[1:]
        if data:
            self._skip_lf = False
        buffer = self._buffer
        scan_from = len(buffer)  # the bytes before hold no line end: they were searched
        buffer += data
        end = max(buffer.rfind(b"\n", scan_from), buffer.rfind(b"\r", scan_from)) + 1
        if not end:
            if len(buffer) > MAX_LINE_BYTES:
                raise StreamFormatError(f"an event-stream line is longer than {MAX_LINE_BYTES} bytes")
            return []
        # A CR at the very end may be the first half of a CRLF split across feeds.
        self._skip_lf = end == len(buffer) and buffer[end - 1] == 0x0D
        block = buffer[:end].decode("utf-8", errors="replace")
        del buffer[:end]  # bytearray drops a prefix without moving the rest
        lines = _LINE_END_TEXT.split(block) if "\r" in block else block.split("\n")
        lines.pop()  # what follows the last line end: nothing, it stays in the buffer
        if self._first_line:
            self._first_line = False
            lines[0] = lines[0].removeprefix("\ufeff")
        events: list[SseEvent] = []
        # The state in locals for the loop, which runs twice for each event of a fast stream.
        pending: list[str] = self._data
        chars, name = self._data_chars, self._event
        for line in lines:
            if not line:  # dispatch
                if pending:
                    joined = pending[0] if len(pending) == 1 else "\n".join(pending)
                    events.append(SseEvent(joined, name or "message", self.last_event_id))
                    pending, chars = [], 0
                name = ""
            elif line.startswith("data:"):  # nearly every line: without the general path
                value = line[6:] if line.startswith("data: ") else line[5:]
                pending.append(value)
                chars += len(value) + 1
                if chars > MAX_EVENT_CHARS:
                    raise StreamFormatError(f"an event is longer than {MAX_EVENT_CHARS} characters")
            else:
                self._data, self._data_chars, self._event = pending, chars, name
                self._process_line(line)
                pending, chars, name = self._data, self._data_chars, self._event
        self._data, self._data_chars, self._event = pending, chars, name
        if len(buffer) > MAX_LINE_BYTES:
            raise StreamFormatError(f"an event-stream line is longer than {MAX_LINE_BYTES} bytes")
        return events

    def _process_line(self, line: str) -> None:
        """A line that is neither blank nor a data line: a comment or another field."""
        if line.startswith(":"):
            self._keep_comment(_strip_one_space(line[1:]))
            return
        name, colon, value = line.partition(":")
        value = _strip_one_space(value) if colon else ""
        if name == "data":  # `data` without a colon: an empty data line
            self._data.append(value)
            self._data_chars += len(value) + 1
            if self._data_chars > MAX_EVENT_CHARS:
                raise StreamFormatError(f"an event is longer than {MAX_EVENT_CHARS} characters")
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self.retry_ms = int(value)
        else:
            _keep_last(self.ignored_lines, line, MAX_KEPT_IGNORED_LINES)

    def _keep_comment(self, text: str) -> None:
        self.comment_count += 1
        _keep_last(self.comments, text, MAX_KEPT_COMMENTS)


def _strip_one_space(value: str) -> str:
    return value[1:] if value.startswith(" ") else value


def _keep_last(items: list[str], item: str, limit: int) -> None:
    items.append(item)
    if len(items) > limit:
        del items[0]


class NdjsonDecoder:
    """Incremental newline-delimited JSON decoder (Ollama /api/chat, `application/x-ndjson`)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        """Decode more bytes into JSON values; raises StreamFormatError on a line that is not JSON
        or longer than MAX_LINE_BYTES.

        Linear in the line's length whatever the size of the pieces: only the new bytes are
        searched for a newline, and the buffer is cut once per feed (issue 11: splitting the whole
        buffer at every piece made a 4 MB line take 5 s)."""
        scan_from = len(self._buffer)  # the bytes before hold no newline: they were searched
        self._buffer += data
        values = []
        start = 0
        while (end := self._buffer.find(b"\n", scan_from)) != -1:
            value = _parse_ndjson_line(self._buffer[start:end])
            if value is not None:
                values.append(value)
            start = scan_from = end + 1
        if start:
            del self._buffer[:start]  # bytearray drops a prefix without moving the rest
        if len(self._buffer) > MAX_LINE_BYTES:
            raise StreamFormatError(f"an NDJSON line is longer than {MAX_LINE_BYTES} bytes")
        return values

    def close(self) -> list[Any]:
        """The last line may lack its newline; decode it at end of input."""
        rest, self._buffer = bytes(self._buffer), bytearray()
        value = _parse_ndjson_line(rest)
        return [] if value is None else [value]


def _parse_ndjson_line(line: bytes | bytearray) -> Any:
    text = line.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise StreamFormatError(f"the provider sent a line that is not JSON: {text[:80]!r}") from None
