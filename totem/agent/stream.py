"""Model stream decoding: framing, chunk accumulation, text tool calls, HTTP error meaning.

Owns:
- the WHATWG server-sent-events decoder and the NDJSON decoder (Ollama's native /api/chat);
- `ChatAccumulator`, which turns OpenAI `chat.completion.chunk` dicts (and Ollama native lines)
  into the small normalized events the agent loop consumes, and into one final `ChatResult`;
- `extract_text_tool_calls`, for local models that write a tool call as text;
- `classify_http_error`, which turns a non-200 answer into a `ProviderError` a person can read,
  with the retry decision and delay.

Must not: do any I/O (sockets, files, logging), sleep, or know about sessions, parts, the store
or the providers table. The clock is read only to turn an absolute reset time into a delay, and
callers may pass `now`. The wire formats and their quirks are documented in
`shared/fixtures/providers/*.md`; every rule below that looks odd is there for one of them.
"""

from __future__ import annotations

import email.utils
import json
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# A whole tool call (a file's content for write_file) can ride in one data line, so lines may be
# long; past this the peer is broken or hostile, and we stop instead of growing memory.
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_EVENT_CHARS = 32 * 1024 * 1024
# Keep-alive comments arrive for minutes (DeepSeek queues up to ~10 min): keep only the last few.
MAX_KEPT_COMMENTS = 32
MAX_KEPT_IGNORED_LINES = 32
MAX_ERROR_DETAIL_CHARS = 400
# A reset further away than this (a daily quota) is not worth an automatic retry.
MAX_RETRY_AFTER_SECONDS = 600.0
# openai-python and the DESIGN retry rule: these statuses are transient.
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})
DONE_SENTINEL = "[DONE]"

# ProviderError.kind values: what the agent loop does next depends on them.
KIND_AUTH = "auth"
KIND_BILLING = "billing"
KIND_RATE_LIMIT = "rate_limit"
KIND_CONTEXT_LENGTH = "context_length"
KIND_REQUEST_TOO_LARGE = "request_too_large"
KIND_MODEL_NOT_FOUND = "model_not_found"
KIND_NOT_FOUND = "not_found"
KIND_TOOLS_UNSUPPORTED = "tools_unsupported"
KIND_TOOL_USE_FAILED = "tool_use_failed"
KIND_INVALID_REQUEST = "invalid_request"
KIND_FORBIDDEN = "forbidden"
KIND_UNSUPPORTED = "unsupported"
KIND_OVERLOADED = "overloaded"
KIND_TIMEOUT = "timeout"
KIND_SERVER = "server"
KIND_CONNECTION = "connection"
KIND_INVALID_RESPONSE = "invalid_response"
KIND_REDIRECT = "redirect"


class StreamFormatError(ValueError):
    """The bytes of a stream cannot be framed (a line too long, an NDJSON line that is not JSON)."""


class ProviderError(Exception):
    """A provider call failed. `message` is a sentence for a person; `retry` says whether trying
    again later can help, `retry_after` how long to wait first (seconds, or None for backoff)."""

    def __init__(self, message: str, *, status: int | None = None, kind: str = KIND_SERVER,
                 retry: bool = False, retry_after: float | None = None,
                 code: str | int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind
        self.retry = retry
        self.retry_after = retry_after
        self.code = code

    @property
    def retryable(self) -> bool:
        """Same as `retry`, under the name the connection errors use."""
        return self.retry

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.message!r}, status={self.status}, kind={self.kind!r}, "
                f"retry={self.retry}, retry_after={self.retry_after})")


# --- Server-sent events (https://html.spec.whatwg.org/multipage/server-sent-events.html) -----

_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event: `data` lines joined with newlines, `event` defaults to message."""

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
        """Decode more bytes; raises StreamFormatError when a line passes MAX_LINE_BYTES."""
        if self._skip_lf and data[:1] == b"\n":
            data = data[1:]
        if data:
            self._skip_lf = False
        scan_from = len(self._buffer)
        self._buffer += data
        events: list[SseEvent] = []
        start = 0
        for match in _LINE_END.finditer(self._buffer, scan_from):
            event = self._process_line(bytes(self._buffer[start:match.start()]))
            if event is not None:
                events.append(event)
            start = match.end()
            # A CR at the very end may be the first half of a CRLF split across feeds.
            self._skip_lf = match.group() == b"\r" and start == len(self._buffer)
        del self._buffer[:start]
        if len(self._buffer) > MAX_LINE_BYTES:
            raise StreamFormatError(f"an event-stream line is longer than {MAX_LINE_BYTES} bytes")
        return events

    def _process_line(self, raw: bytes) -> SseEvent | None:
        line = raw.decode("utf-8", errors="replace")
        if self._first_line:
            self._first_line = False
            line = line.removeprefix("\ufeff")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            self._keep_comment(_strip_one_space(line[1:]))
            return None
        name, colon, value = line.partition(":")
        value = _strip_one_space(value) if colon else ""
        if name == "data":
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
        return None

    def _dispatch(self) -> SseEvent | None:
        data, event = self._data, self._event or "message"
        self._data, self._data_chars, self._event = [], 0, ""
        if not data:
            return None
        return SseEvent("\n".join(data), event, self.last_event_id)

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
        or longer than MAX_LINE_BYTES."""
        self._buffer += data
        *lines, rest = self._buffer.split(b"\n")
        self._buffer = bytearray(rest)
        if len(self._buffer) > MAX_LINE_BYTES:
            raise StreamFormatError(f"an NDJSON line is longer than {MAX_LINE_BYTES} bytes")
        return [value for line in lines if (value := _parse_ndjson_line(line)) is not None]

    def close(self) -> list[Any]:
        """The last line may lack its newline; decode it at end of input."""
        rest, self._buffer = bytes(self._buffer), bytearray()
        value = _parse_ndjson_line(rest)
        return [] if value is None else [value]


def _parse_ndjson_line(line: bytes) -> Any:
    text = line.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise StreamFormatError(f"the provider sent a line that is not JSON: {text[:80]!r}") from None


# --- Normalized events ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    """More answer text."""
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """More reasoning ("thinking") text, never part of the answer."""
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A tool call got its name. `id` may still be empty: the final id is in ChatResult."""
    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """More of a tool call's JSON arguments (fragments split anywhere, even inside a key)."""
    index: int
    arguments_fragment: str


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the provider sent them (OpenAI names; Ollama native is converted)."""
    usage: dict


@dataclass(frozen=True, slots=True)
class Finish:
    """The provider's raw finish reason (stop, length, tool_calls, eos, error, ...)."""
    reason: str


@dataclass(frozen=True, slots=True)
class StreamError:
    """The answer failed after HTTP 200: an in-stream error, a cut stream, a broken chunk."""
    message: str
    status: int | None = None
    code: str | int | None = None
    retry: bool = False
    kind: str = KIND_SERVER


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One complete tool call; `arguments` is the JSON text exactly as streamed."""
    index: int
    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> dict:
        """The arguments as a dict ("" means {}); raises ValueError when they are not a JSON object
        (a call cut by finish_reason=length must never run)."""
        if not self.arguments.strip():
            return {}
        value = json.loads(self.arguments)
        if not isinstance(value, dict):
            raise ValueError("tool call arguments are not a JSON object")
        return value

    @property
    def arguments_valid(self) -> bool:
        """True when `parsed_arguments()` would succeed."""
        try:
            self.parsed_arguments()
        except ValueError:
            return False
        return True


@dataclass(frozen=True, slots=True)
class ChatResult:
    """Everything one streamed answer produced. `error` is the raw in-stream error value;
    `failure` is a sentence when the answer failed for any reason (None when it completed)."""
    content: str
    reasoning: str
    reasoning_details: list
    tool_calls: list[ToolCall]
    finish_reason: str | None
    usage: dict | None
    error: Any
    saw_done: bool
    chunks: int
    failure: str | None


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The last event of `client.stream_chat`: the final result, failed or not."""
    result: ChatResult


StreamEvent = (TextDelta | ReasoningDelta | ToolCallStarted | ToolCallDelta | Usage | Finish
               | StreamError | StreamEnd)


# --- Accumulation ----------------------------------------------------------------------------


@dataclass
class _PendingCall:
    index: int
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    started: bool = False


class ChatAccumulator:
    """Merges stream chunks into events and a final ChatResult.

    Feed it `SseEvent`s (`feed_sse`) or already parsed dicts (`feed`: OpenAI chunks, Ollama native
    lines, in-stream error objects), then call `finish()` at end of input and read `result()`.
    Tool calls merge by `index` (array position when absent); `id` and `name` are overwritten only
    by non-empty values; `arguments` are concatenated."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._reasoning_details: list = []
        self._calls: dict[int, _PendingCall] = {}
        self._unindexed_base = 0
        self.finish_reason: str | None = None
        self.usage: dict | None = None
        self.error: Any = None
        self.failure: str | None = None
        self.saw_done = False
        self.chunks = 0
        self._finished = False

    @property
    def failed(self) -> bool:
        """True once the answer is known to have failed."""
        return self.failure is not None

    def feed_sse(self, event: SseEvent) -> list[StreamEvent]:
        """Handle one SSE event: `[DONE]`, `event: error`, or a JSON chunk."""
        if event.is_done:
            self.saw_done = True
            return []
        try:
            value = json.loads(event.data)
        except ValueError:
            if event.event == "error":
                return self._record_error(event.data)
            return self._fail("The provider sent a chunk that is not valid JSON.", retry=True,
                              kind=KIND_INVALID_RESPONSE)
        if event.event == "error":
            # openai-python raises on `event: error` whatever the payload looks like.
            self.chunks += 1
            error = value.get("error", value) if isinstance(value, dict) else value
            return self._record_error(error)
        return self.feed(value)

    def feed(self, chunk: Any) -> list[StreamEvent]:
        """Handle one parsed chunk (OpenAI chunk, Ollama native line or error object)."""
        if not isinstance(chunk, dict):
            return self._fail("The provider sent a chunk that is not a JSON object.", retry=True,
                              kind=KIND_INVALID_RESPONSE)
        self.chunks += 1
        events: list[StreamEvent] = []
        if isinstance(chunk.get("choices"), list):
            self._feed_choices(chunk["choices"], events)
        elif isinstance(chunk.get("message"), dict) or "done" in chunk:
            self._feed_ollama_line(chunk, events)
        usage = _chunk_usage(chunk)
        if usage:
            self.usage = usage
            events.append(Usage(usage))
        if chunk.get("error"):
            events.extend(self._record_error(chunk["error"]))
        return events

    def feed_completion(self, body: Any) -> list[StreamEvent]:
        """Handle a whole non-streamed `chat.completion` (a server that ignored `stream: true`)."""
        if isinstance(body, dict) and isinstance(body.get("choices"), list):
            choices = [dict(c, delta=c.get("message") or {}) for c in body["choices"]
                       if isinstance(c, dict)]
            body = dict(body, choices=choices)
        events = self.feed(body)
        self.saw_done = True
        return events

    def finish(self) -> list[StreamEvent]:
        """End of input: an answer without [DONE] and without finish_reason was cut off."""
        if self._finished:
            return []
        self._finished = True
        if self.failed:
            return []
        if self.finish_reason is None and not self.saw_done:
            return self._fail("The answer was cut off: the stream ended early.", retry=True,
                              kind=KIND_CONNECTION)
        if self.finish_reason is None:
            # llama.cpp mid-2025 sent its error as a non-standard `error:` field, then [DONE].
            return self._fail("The answer was cut off: the stream ended without a finish reason.",
                              retry=True, kind=KIND_CONNECTION)
        if self.finish_reason == "error":
            return self._fail("The provider stopped the answer with an error.", retry=True,
                              kind=KIND_SERVER)
        return []

    def result(self) -> ChatResult:
        """The answer so far (complete once `finish()` was called)."""
        calls = [self._final_call(self._calls[i]) for i in sorted(self._calls)]
        return ChatResult(
            content="".join(self._content), reasoning="".join(self._reasoning),
            reasoning_details=list(self._reasoning_details), tool_calls=calls,
            finish_reason=self.finish_reason, usage=self.usage, error=self.error,
            saw_done=self.saw_done, chunks=self.chunks, failure=self.failure)

    def fail(self, message: str, *, retry: bool, kind: str = KIND_CONNECTION) -> list[StreamEvent]:
        """Record a failure found outside the chunks (a reset connection, a read timeout)."""
        return self._fail(message, retry=retry, kind=kind)

    # -- OpenAI chunks

    def _feed_choices(self, choices: list, events: list[StreamEvent]) -> None:
        for position, choice in enumerate(choices):
            if not isinstance(choice, dict) or choice.get("index", position) != 0:
                continue  # n > 1 is never requested; only the first choice is the answer
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._feed_delta(delta, events)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                if reason != self.finish_reason:
                    events.append(Finish(reason))
                self.finish_reason = reason

    def _feed_delta(self, delta: dict, events: list[StreamEvent]) -> None:
        reasoning = _first_text(delta, ("reasoning_content", "reasoning", "thinking"))
        if reasoning:
            self._add_reasoning(reasoning, events)
        details = delta.get("reasoning_details")
        if isinstance(details, list):
            self._reasoning_details.extend(details)
        content = delta.get("content")
        if isinstance(content, str):
            self._add_text(content, events)
        elif isinstance(content, list):
            self._feed_content_parts(content, events)
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list):
            for position, entry in enumerate(tool_calls):
                if isinstance(entry, dict):
                    self._merge_call(self._slot_for(entry, position), entry, events)

    def _feed_content_parts(self, parts: list, events: list[StreamEvent]) -> None:
        # Mistral magistral: content is a list of typed parts, thinking nested one level down.
        for part in parts:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "thinking":
                thinking = part.get("thinking")
                if isinstance(thinking, str):
                    self._add_reasoning(thinking, events)
                elif isinstance(thinking, list):
                    for inner in thinking:
                        if isinstance(inner, dict) and isinstance(inner.get("text"), str):
                            self._add_reasoning(inner["text"], events)
            elif part.get("type") == "text" and isinstance(part.get("text"), str):
                self._add_text(part["text"], events)

    def _slot_for(self, entry: dict, position: int) -> int:
        index = entry.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            return index
        slot = self._unindexed_base + position
        existing = self._calls.get(slot)
        new_id = entry.get("id")
        if existing and existing.id and isinstance(new_id, str) and new_id and new_id != existing.id:
            # Index-less whole calls (Mistral) in a later chunk are new calls, not continuations.
            self._unindexed_base = max(self._calls) + 1 - position
            slot = self._unindexed_base + position
        return slot

    def _merge_call(self, index: int, entry: dict, events: list[StreamEvent]) -> None:
        call = self._calls.setdefault(index, _PendingCall(index))
        if isinstance(entry.get("id"), str) and entry["id"]:
            call.id = entry["id"]
        function = entry.get("function") if isinstance(entry.get("function"), dict) else {}
        if isinstance(function.get("name"), str) and function["name"]:
            call.name = function["name"]
        fragment = _arguments_text(function.get("arguments"))
        if fragment:
            call.arguments.append(fragment)
        if not call.started and call.name:
            call.started = True
            events.append(ToolCallStarted(index, call.id, call.name))
            if call.arguments:
                events.append(ToolCallDelta(index, "".join(call.arguments)))
        elif call.started and fragment:
            events.append(ToolCallDelta(index, fragment))

    # -- Ollama native /api/chat lines

    def _feed_ollama_line(self, line: dict, events: list[StreamEvent]) -> None:
        message = line.get("message") if isinstance(line.get("message"), dict) else {}
        if isinstance(message.get("thinking"), str):
            self._add_reasoning(message["thinking"], events)
        if isinstance(message.get("content"), str):
            self._add_text(message["content"], events)
        for entry in message.get("tool_calls") or ():
            if isinstance(entry, dict):
                # Native calls are always whole, so each one is new even if its index repeats.
                index = max(self._calls, default=-1) + 1
                self._merge_call(index, entry, events)
        if line.get("done") is True:
            self.saw_done = True
            reason = line.get("done_reason")
            self.finish_reason = reason if isinstance(reason, str) and reason else "stop"
            events.append(Finish(self.finish_reason))

    # -- shared

    def _add_text(self, text: str, events: list[StreamEvent]) -> None:
        if text:
            self._content.append(text)
            events.append(TextDelta(text))

    def _add_reasoning(self, text: str, events: list[StreamEvent]) -> None:
        if text:
            self._reasoning.append(text)
            events.append(ReasoningDelta(text))

    def _record_error(self, error: Any) -> list[StreamEvent]:
        if self.error is None:
            self.error = error
        return [] if self.failure is not None else [self._stream_error(error)]

    def _stream_error(self, error: Any) -> StreamError:
        if isinstance(error, dict):
            detail = str(error.get("message") or error.get("type") or error)
            code, kind = _code(error.get("code")), str(error.get("type") or "")
        else:
            detail, code, kind = str(error), None, ""
        status = code if isinstance(code, int) and 100 <= code <= 599 else None
        words = f"{code} {kind} {detail}".lower()
        if _CONTEXT_PATTERN.search(detail):
            kind = KIND_CONTEXT_LENGTH  # LM Studio reports context overflow inside a 200 stream
        elif status == 429 or "rate_limit" in words or "rate-limit" in words:
            kind = KIND_RATE_LIMIT
        else:
            kind = KIND_SERVER
        retry = kind == KIND_RATE_LIMIT or status in RETRYABLE_STATUSES or any(
            word in words for word in ("server_error", "overloaded", "unavailable"))
        self.failure = f"The provider reported an error during the answer: {_clip(detail)}"
        return StreamError(self.failure, status, code, retry, kind)

    def _fail(self, message: str, *, retry: bool, kind: str) -> list[StreamEvent]:
        if self.failure is not None:
            return []
        self.failure = message
        return [StreamError(message, None, None, retry, kind)]

    def _final_call(self, call: _PendingCall) -> ToolCall:
        # Some local servers send no id; the loop needs one to pair the tool result with the call.
        call_id = call.id or new_call_id()
        return ToolCall(call.index, call_id, call.name, "".join(call.arguments))


def _chunk_usage(chunk: dict) -> dict | None:
    usage = chunk.get("usage")
    if isinstance(usage, dict) and usage:
        return usage
    groq = chunk.get("x_groq")
    if isinstance(groq, dict) and isinstance(groq.get("usage"), dict) and groq["usage"]:
        return groq["usage"]
    if chunk.get("done") is True and "eval_count" in chunk:
        prompt, completion = chunk.get("prompt_eval_count") or 0, chunk.get("eval_count") or 0
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}
    return None


def _first_text(delta: dict, keys: tuple[str, ...]) -> str:
    # Some upstreams echo the same thinking in two fields: take the first, never both.
    for key in keys:
        value = delta.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, (dict, list)):
        # Ollama native (and a few servers) send the arguments as an object, not a string.
        return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    return ""


def new_call_id() -> str:
    """A fresh tool-call id in OpenAI's shape (`call_` + 24 alphanumerics)."""
    return "call_" + secrets.token_hex(12)


# --- Tool calls written as text ------------------------------------------------------------

_TOOL_CALL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)
_FENCE_LINE = re.compile(r"^[ \t]*```[ \t]*([\w-]*)[ \t]*\r?$", re.M)
_CALL_FENCES = ("json", "tool_call", "tool", "")
_ARGUMENT_KEYS = ("arguments", "parameters", "input")


def extract_text_tool_calls(text: str, known_tools: Iterable[str]) -> tuple[str, list[ToolCall]]:
    """Find tool calls that a local model wrote as text instead of as `tool_calls`.

    A call is JSON `{"name": <known tool>, "arguments": {...}}` ("parameters" or "input" also
    name the arguments; a list of such objects is several calls) inside `<tool_call>...</tool_call>`
    (the closing tag may be missing at the very end) or a fenced block tagged json, tool_call or
    nothing. Only names in `known_tools` count, so an example in prose is left alone. Returns the
    text without the recognised blocks and the calls, with fresh ids."""
    known = set(known_tools)
    found: list[tuple[str, dict]] = []

    def take_tag(match: re.Match) -> str:
        calls = _parse_text_calls(match.group(1), known, tagged=True)
        found.extend(calls)
        return "" if calls else match.group(0)

    remaining = _TOOL_CALL_TAG.sub(take_tag, text)
    remaining = _take_fenced_calls(remaining, known, found)
    if not found:
        return text, []
    calls = [ToolCall(index, new_call_id(), name, json.dumps(arguments, ensure_ascii=False))
             for index, (name, arguments) in enumerate(found)]
    return re.sub(r"\n{3,}", "\n\n", remaining).strip(), calls


def _take_fenced_calls(text: str, known: set[str], found: list[tuple[str, dict]]) -> str:
    # Fences pair up in order (opening, closing), so a ```python block is skipped whole and
    # never mistaken for the text between two blocks.
    fences = list(_FENCE_LINE.finditer(text))
    spans = []
    for opening, closing in zip(fences[::2], fences[1::2]):
        if opening.group(1).lower() not in _CALL_FENCES:
            continue
        calls = _parse_text_calls(text[opening.end():closing.start()], known, tagged=False)
        if calls:
            spans.append((opening.start(), closing.end()))
            found.extend(calls)
    for start, end in reversed(spans):
        text = text[:start] + text[end:]
    return text


def _parse_text_calls(body: str, known: set[str], tagged: bool) -> list[tuple[str, dict]]:
    try:
        value = json.loads(body)
    except ValueError:
        return []
    items = value if isinstance(value, list) else [value]
    found = [_text_call(item, known, tagged) for item in items]
    if not found or any(call is None for call in found):
        return []
    return found  # type: ignore[return-value]


def _text_call(item: Any, known: set[str], tagged: bool) -> tuple[str, dict] | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict):
        item = item["function"]
    name = item.get("name")
    if not isinstance(name, str) or name not in known:
        return None
    key = next((k for k in _ARGUMENT_KEYS if k in item), None)
    if key is None:
        # Inside <tool_call> a zero-argument call may omit them; in a plain fence we need the
        # arguments key as evidence that this is a call and not an example object.
        return (name, {}) if tagged else None
    arguments = item[key]
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return None
    return (name, arguments) if isinstance(arguments, dict) else None


# --- HTTP errors -----------------------------------------------------------------------------

_CONTEXT_PATTERN = re.compile(
    r"context length|context window|context size|maximum context|context_length"
    r"|tokens to keep from the initial prompt|prompt too long|prompt is too long"
    r"|`inputs` tokens \+ `max_new_tokens`|reduce the length of the messages", re.I)
_PER_MINUTE_PATTERN = re.compile(r"per minute|\(TPM\)|\(RPM\)", re.I)
_MODEL_NAME_PATTERN = re.compile(r"""model\s+['"`]([^'"`]+)['"`]\s+not found""", re.I)
_TRY_AGAIN_PATTERN = re.compile(r"try again in\s+((?:\d+(?:\.\d+)?\s*(?:ms|h|m|s)\s*)+)", re.I)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|h|m|s)")
_HTML_TITLE = re.compile(r"<title>(.*?)</title>", re.I | re.S)


@dataclass(frozen=True, slots=True)
class _ErrorBody:
    detail: str
    type: str
    code: str | int | None


def classify_http_error(status: int, headers: Mapping[str, str] | Iterable[tuple[str, str]],
                        body: bytes, *, now: float | None = None) -> ProviderError:
    """Turn a non-200 provider answer into a ProviderError (returned, not raised).

    Reads every error shape of `fixtures/providers/errors.json`: `{"error": {...}}`,
    `{"error": "text"}`, Mistral's top-level `message`, FastAPI's `detail` list and non-JSON
    (HTML from an edge proxy). The delay is the largest hint of Retry-After (seconds or HTTP
    date), retry-after-ms, Mistral's ratelimitbysize-reset, the reset header of an exhausted
    x-ratelimit bucket and a "try again in 2.5s" in the message."""
    now = time.time() if now is None else now
    lowered = {k.lower(): v for k, v in (headers.items() if isinstance(headers, Mapping) else headers)}
    parsed = _parse_error_body(body, lowered.get("content-type", ""))
    if 300 <= status < 400:
        # Redirects are not followed (a POST must not be replayed elsewhere silently).
        parsed = _ErrorBody(_clip(f"it moved to {lowered.get('location', 'an unknown address')}"), "", None)
    kind = _error_kind(status, parsed)
    retry_after = _retry_after(lowered, parsed.detail, now)
    retry = kind in (KIND_RATE_LIMIT, KIND_OVERLOADED, KIND_SERVER, KIND_TIMEOUT)
    sentence = _error_sentence(status, kind, parsed)
    if retry_after is not None and retry_after > MAX_RETRY_AFTER_SECONDS:
        retry = False
        sentence += f"; the limit resets in about {_human_delay(retry_after)}"
    elif kind == KIND_RATE_LIMIT and re.search(r"per[- ]day", parsed.detail, re.I):
        retry = retry_after is not None  # a daily quota with no reset time: do not hammer it
    message = f"{sentence}: {parsed.detail}" if parsed.detail else sentence
    return ProviderError(message, status=status, kind=kind, retry=retry,
                         retry_after=retry_after if retry else None, code=parsed.code)


def _parse_error_body(body: bytes, content_type: str) -> _ErrorBody:
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        title = _HTML_TITLE.search(text)
        if title or "html" in content_type.lower():
            detail = title.group(1).strip() if title else ""
        else:
            detail = text
        return _ErrorBody(_clip(" ".join(detail.split())), "", None)
    error = data.get("error")
    if isinstance(error, dict):
        detail = str(error.get("message") or "")
        metadata = error.get("metadata") if isinstance(error.get("metadata"), dict) else {}
        if isinstance(metadata.get("raw"), str) and metadata["raw"]:
            # OpenRouter: "Provider returned error" says nothing; the upstream text is in raw.
            upstream = metadata.get("provider_name")
            detail = f"{upstream}: {metadata['raw']}" if upstream else metadata["raw"]
        return _ErrorBody(_clip(detail), str(error.get("type") or ""), _code(error.get("code")))
    if isinstance(error, str):
        signin = data.get("signin_url")
        if isinstance(signin, str):
            # Ollama cloud models on a signed-out local server: the fix is a sign-in, not a key.
            return _ErrorBody(_clip(f"{error}; sign in at {signin}"), "signin_required", None)
        return _ErrorBody(_clip(error), "", None)
    if isinstance(data.get("message"), str):
        return _ErrorBody(_clip(data["message"]), str(data.get("type") or ""), _code(data.get("code")))
    if isinstance(data.get("detail"), list):
        parts = [f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg', '')}"
                 for d in data["detail"] if isinstance(d, dict)]
        return _ErrorBody(_clip("; ".join(parts)), "validation_error", None)
    return _ErrorBody(_clip(text), "", None)


def _code(value: Any) -> str | int | None:
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def _error_kind(status: int, parsed: _ErrorBody) -> str:
    detail, code, etype = parsed.detail.lower(), str(parsed.code or "").lower(), parsed.type.lower()
    if 300 <= status < 400:
        return KIND_REDIRECT
    if "insufficient_quota" in (code, etype) or status == 402 or "insufficient balance" in detail:
        return KIND_BILLING
    if status == 401 or etype == "authentication_error" or code == "invalid_api_key":
        return KIND_AUTH
    if status == 413 or (status in (400, 429) and "request too large" in detail
                         and _PER_MINUTE_PATTERN.search(parsed.detail)):
        return KIND_REQUEST_TOO_LARGE
    if (code == "context_length_exceeded" or etype == "exceed_context_size_error"
            or (status in (400, 422) and _CONTEXT_PATTERN.search(parsed.detail))):
        return KIND_CONTEXT_LENGTH
    if "does not support tools" in detail or "support tool use" in detail:
        return KIND_TOOLS_UNSUPPORTED
    if code == "tool_use_failed":
        return KIND_TOOL_USE_FAILED
    if status == 404:
        return KIND_MODEL_NOT_FOUND if "model" in detail else KIND_NOT_FOUND
    if status in (503, 529) or "overloaded" in detail or "capacity" in detail or \
            etype in ("unavailable_error", "service_unavailable_error", "overloaded_error"):
        return KIND_OVERLOADED
    if status == 429:
        return KIND_RATE_LIMIT
    if status == 408:
        return KIND_TIMEOUT
    if status == 403:
        return KIND_FORBIDDEN
    if status == 501:
        return KIND_UNSUPPORTED
    if status >= 500:
        return KIND_SERVER
    return KIND_INVALID_REQUEST


def _error_sentence(status: int, kind: str, parsed: _ErrorBody) -> str:
    if parsed.type == "signin_required":
        return f"The Ollama server is not signed in to ollama.com ({status})"
    if kind == KIND_MODEL_NOT_FOUND:
        name = _MODEL_NAME_PATTERN.search(parsed.detail)
        return f"Unknown model '{name.group(1)}' ({status})" if name else f"Unknown model ({status})"
    sentences = {
        KIND_AUTH: "The provider rejected the API key ({status})",
        KIND_BILLING: "The provider account has run out of credit or quota ({status})",
        KIND_RATE_LIMIT: "The provider's rate limit was reached ({status})",
        KIND_CONTEXT_LENGTH: "The prompt is longer than the model's context window ({status})",
        KIND_REQUEST_TOO_LARGE: "The request is larger than the provider allows per minute ({status})",
        KIND_NOT_FOUND: "The provider does not know this address ({status})",
        KIND_TOOLS_UNSUPPORTED: "The model does not support tool calls ({status})",
        KIND_TOOL_USE_FAILED: "The model wrote a malformed tool call ({status})",
        KIND_FORBIDDEN: "The provider refused the request ({status})",
        KIND_UNSUPPORTED: "The server does not support this request ({status})",
        KIND_OVERLOADED: "The provider is overloaded or still loading the model ({status})",
        KIND_TIMEOUT: "The provider timed out ({status})",
        KIND_SERVER: "The provider had a server error ({status})",
        KIND_INVALID_REQUEST: "The provider rejected the request ({status})",
        KIND_REDIRECT: "The provider's address redirects elsewhere; set the new address ({status})",
    }
    return sentences.get(kind, "The provider answered with an error ({status})").format(status=status)


def _retry_after(headers: Mapping[str, str], detail: str, now: float) -> float | None:
    hints: list[float] = []
    if (ms := _number(headers.get("retry-after-ms"))) is not None:
        hints.append(ms / 1000)
    if (value := headers.get("retry-after")) is not None:
        seconds = _number(value)
        if seconds is None:
            seconds = _http_date_delay(value, now)
        if seconds is not None:
            hints.append(seconds)
    if (seconds := _number(headers.get("ratelimitbysize-reset"))) is not None:
        hints.append(seconds)  # Mistral
    for bucket in ("requests", "tokens"):
        # Only an exhausted bucket says when we may go again; the other resets are noise.
        if headers.get(f"x-ratelimit-remaining-{bucket}", "").strip() == "0":
            if (seconds := _duration(headers.get(f"x-ratelimit-reset-{bucket}", ""))) is not None:
                hints.append(seconds)
    if headers.get("x-ratelimit-remaining", "").strip() == "0":
        if (reset := _number(headers.get("x-ratelimit-reset"))) is not None:
            hints.append(_reset_delay(reset, now))  # OpenRouter: epoch milliseconds
    if match := _TRY_AGAIN_PATTERN.search(detail):
        if (seconds := _duration(match.group(1))) is not None:
            hints.append(seconds)
    hints = [max(0.0, hint) for hint in hints]
    return max(hints) if hints else None


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _http_date_delay(value: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - now if when.tzinfo else None


def _duration(value: str) -> float | None:
    """Parse "120ms", "2.048s", "1m26.4s" or a bare number of seconds."""
    value = value.strip()
    if (seconds := _number(value)) is not None:
        return seconds
    parts = _DURATION_PART.findall(value)
    if not parts or _DURATION_PART.sub("", value).strip():
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(amount) * scale[unit] for amount, unit in parts)


def _reset_delay(reset: float, now: float) -> float:
    if reset > 1e11:
        return reset / 1000 - now
    if reset > 1e9:
        return reset - now
    return reset


def _human_delay(seconds: float) -> str:
    amount, unit = (round(seconds / 3600, 1), "hour") if seconds >= 3600 else (round(seconds / 60), "minute")
    return f"{amount:g} {unit}" + ("" if amount == 1 else "s")


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_ERROR_DETAIL_CHARS else text[:MAX_ERROR_DETAIL_CHARS - 1] + "…"
