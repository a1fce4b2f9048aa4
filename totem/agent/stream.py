"""Model stream decoding: normalized events, chunk accumulation, text tool calls.

Owns:
- the small normalized events the agent loop consumes (`TextDelta`, `ToolCallStarted`, ...,
  `StreamError`, `StreamEnd`) and the final `ChatResult`;
- `ChatAccumulator`, which turns OpenAI `chat.completion.chunk` dicts (and Ollama native lines)
  into those events and into one `ChatResult`;
- `extract_text_tool_calls`, for local models that write a tool call as text.

Must not: do any I/O (sockets, files, logging), sleep, frame bytes (sse.py does), read HTTP
error answers (provider_errors.py does), or know about sessions, parts, the store or the
providers table. The wire formats and their quirks are documented in
`shared/fixtures/providers/*.md`; every rule below that looks odd is there for one of them.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from totem.agent.provider_errors import (
    KIND_CONNECTION,
    KIND_CONTEXT_LENGTH,
    KIND_INVALID_RESPONSE,
    KIND_OVERLOADED,
    KIND_RATE_LIMIT,
    KIND_SERVER,
    clip_detail,
    error_code,
    mentions_context_overflow,
)
from totem.agent.sse import SseEvent

# openai-python and the DESIGN retry rule: an in-stream error with these codes is transient.
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})

# A decoded JSON object of a chunk: every value is checked (isinstance) where it is read.
JsonObject = dict[str, Any]


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
    usage: dict[str, object]


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

    def parsed_arguments(self) -> JsonObject:
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
    reasoning_details: list[object]
    tool_calls: list[ToolCall]
    finish_reason: str | None
    usage: dict[str, object] | None
    error: object
    saw_done: bool
    chunks: int
    failure: str | None


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The last event of `client.stream_chat`: the final result, failed or not."""
    result: ChatResult


StreamEvent = (TextDelta | ReasoningDelta | ToolCallStarted | ToolCallDelta | Usage | Finish
               | StreamError | StreamEnd)


def join_deltas(events: list[StreamEvent]) -> list[StreamEvent]:
    """The same events with each run of consecutive deltas of one kind (text, reasoning, or the
    arguments of one tool call) joined into one delta: what a single read of the stream
    brought then costs one part.delta, not one per chunk of the provider (a fast local model
    sends hundreds in one read). Text and order are unchanged; nothing waits for more."""
    if len(events) < 2:
        return events
    joined: list[StreamEvent] = []
    run: list[str] = []  # the texts of the run that ends joined[-1]
    for event in events:
        if run and _continues(joined[-1], event):
            run.append(_delta_text(event))
            continue
        _end_run(joined, run)
        run = [_delta_text(event)] if isinstance(event, (TextDelta, ReasoningDelta, ToolCallDelta)) else []
        joined.append(event)
    _end_run(joined, run)
    return joined


def _continues(last: StreamEvent, event: StreamEvent) -> bool:
    if isinstance(event, ToolCallDelta):
        return isinstance(last, ToolCallDelta) and last.index == event.index
    return type(event) is type(last)


def _delta_text(event: StreamEvent) -> str:
    if isinstance(event, ToolCallDelta):
        return event.arguments_fragment
    return event.text if isinstance(event, (TextDelta, ReasoningDelta)) else ""


def _end_run(joined: list[StreamEvent], run: list[str]) -> None:
    if len(run) > 1:
        last, text = joined[-1], "".join(run)
        if isinstance(last, ToolCallDelta):
            joined[-1] = replace(last, arguments_fragment=text)
        elif isinstance(last, (TextDelta, ReasoningDelta)):
            joined[-1] = replace(last, text=text)


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
        self._reasoning_details: list[object] = []
        self._calls: dict[int, _PendingCall] = {}
        self._unindexed_base = 0
        self.finish_reason: str | None = None
        self.usage: dict[str, object] | None = None
        self.error: object = None
        self.failure: str | None = None
        self.saw_done = False
        self.chunks = 0
        self._finished = False
        self._template = _TextTemplate()

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
            value = parse_json(event.data)
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

    def feed_sse_events(self, events: list[SseEvent]) -> list[StreamEvent]:
        """Handle the events of one read, as `feed_sse` each would, but the text of consecutive
        chunks that carry nothing else (nearly every chunk of an answer) goes out as one
        TextDelta, as `join_deltas` would join it, without the general path for each: a fast
        local model sends hundreds of them in one read."""
        out: list[StreamEvent] = []
        run: list[str] = []
        template = self._template
        for event in events:
            value = _NOT_PARSED
            data = event.data
            if event.event == "message":
                text = template.text(data)
                if text is None and data.startswith("{"):
                    try:
                        value, end = _JSON.raw_decode(data)  # parse_json, without a call around it
                        if end != len(data):
                            value = parse_json(data)
                    except ValueError:
                        value = _NOT_PARSED  # feed_sse says what is wrong with it
                    else:
                        text = _text_only(value)
                        if text is not None:
                            template.learn(data, text)
                if text is not None:
                    self.chunks += 1
                    if text:
                        run.append(text)
                    continue
            if run:
                self._add_text("".join(run), out)
                run = []
            out.extend(self.feed_sse(event) if value is _NOT_PARSED else self.feed(value))
        if run:
            self._add_text("".join(run), out)
        return out

    def feed(self, chunk: object) -> list[StreamEvent]:
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
        usage = _chunk_usage(chunk) if "usage" in chunk or "x_groq" in chunk or "done" in chunk else None
        if usage:
            self.usage = usage
            events.append(Usage(usage))
        if chunk.get("error"):
            events.extend(self._record_error(chunk["error"]))
        return events

    def feed_completion(self, body: object) -> list[StreamEvent]:
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

    def _feed_choices(self, choices: list[object], events: list[StreamEvent]) -> None:
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

    def _feed_delta(self, delta: JsonObject, events: list[StreamEvent]) -> None:
        if len(delta) == 1 and isinstance(delta.get("content"), str):
            # Nearly every chunk of an answer: its text alone, the rest of the checks skipped.
            self._add_text(delta["content"], events)
            return
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

    def _feed_content_parts(self, parts: list[object], events: list[StreamEvent]) -> None:
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

    def _slot_for(self, entry: JsonObject, position: int) -> int:
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

    def _merge_call(self, index: int, entry: JsonObject, events: list[StreamEvent]) -> None:
        call = self._calls.setdefault(index, _PendingCall(index))
        if isinstance(entry.get("id"), str) and entry["id"]:
            call.id = entry["id"]
        function = entry.get("function")
        if not isinstance(function, dict):
            function = {}
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

    def _feed_ollama_line(self, line: JsonObject, events: list[StreamEvent]) -> None:
        message = line.get("message")
        if not isinstance(message, dict):
            message = {}
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

    def _record_error(self, error: object) -> list[StreamEvent]:
        if self.error is None:
            self.error = error
        return [] if self.failure is not None else [self._stream_error(error)]

    def _stream_error(self, error: object) -> StreamError:
        if isinstance(error, dict):
            detail = str(error.get("message") or error.get("type") or error)
            code, kind = error_code(error.get("code")), str(error.get("type") or "")
        else:
            detail, code, kind = str(error), None, ""
        status = code if isinstance(code, int) and 100 <= code <= 599 else None
        words = f"{code} {kind} {detail}".lower()
        if mentions_context_overflow(detail):
            kind = KIND_CONTEXT_LENGTH  # LM Studio reports context overflow inside a 200 stream
        elif status == 429 or "rate_limit" in words or "rate-limit" in words:
            kind = KIND_RATE_LIMIT
        elif status in (503, 529) or "overloaded" in words:
            kind = KIND_OVERLOADED  # Anthropic's overloaded_error event
        else:
            kind = KIND_SERVER
        # api_error and timeout_error are Anthropic's names of a server's passing failure.
        retry = kind in (KIND_RATE_LIMIT, KIND_OVERLOADED) or status in RETRYABLE_STATUSES or any(
            word in words for word in ("server_error", "unavailable", "api_error", "timeout_error"))
        self.failure = f"The provider reported an error during the answer: {clip_detail(detail)}"
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


_JSON = json.JSONDecoder()


def parse_json(text: str) -> Any:
    """`json.loads(text)`, with less work for a text that is one JSON value and nothing else
    (every chunk of a stream): the decoder's raw_decode, without the checks around it, which
    cost a third of a chunk's parsing. Anything else (whitespace around the value, a BOM,
    trailing data) goes to json.loads, so the result and the ValueError are the same."""
    try:
        value, end = _JSON.raw_decode(text)
    except ValueError:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


_NOT_PARSED = object()
# The decoder's own string scanner (C): a JSON string literal from just after its opening quote.
scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_PROBE_TEXT = "probe"
_KEY_CONTENT = re.compile(r'"content"[ \t\n\r]*:[ \t\n\r]*"')  # JSON's whitespace only
_TEMPLATE_TRIES = 4  # chunks a stream may spend finding its template (some vary in more than their text)


class _TextTemplate:
    """The text-only chunks of one stream, read without parsing each. A provider sends the same
    chunk again and again with only its text changed (`{"id":...,"choices":[{"index":0,
    "delta":{"content":"` TEXT `"},"finish_reason":null}]}`): once a chunk parsed in full is
    found to be text-only, the JSON before and after its text's string literal is kept, and a
    later chunk made of that prefix, one string literal and that suffix is that chunk with
    another text: the literal alone is decoded. The position is proved on the kept prefix and
    suffix around a probe literal, parsed in full: it is the text that counts (not a repeated
    key's other value), and the rest leaves the chunk text-only."""

    def __init__(self) -> None:
        self._prefix: str | None = None
        self._suffix = ""
        self._tries = _TEMPLATE_TRIES

    def text(self, data: str) -> str | None:
        """The text of a chunk made on the template; None for any other."""
        prefix, suffix = self._prefix, self._suffix
        if prefix is None or not data.startswith(prefix) or not data.endswith(suffix):
            return None
        tail = len(data) - len(suffix)
        if tail <= len(prefix):
            return None
        try:
            text, end = scanstring(data, len(prefix))
        except ValueError:
            return None
        return text if end == tail else None

    def learn(self, data: str, text: str) -> None:
        """Keep the template of `data`, a text-only chunk of `text` parsed in full, if its text's
        literal is found and proved."""
        if self._tries <= 0:
            return
        self._tries -= 1
        for found in _KEY_CONTENT.finditer(data):
            start = found.end()  # just after the literal's opening quote
            try:
                literal_text, end = scanstring(data, start)
            except ValueError:
                continue
            if literal_text != text:
                continue
            prefix, suffix = data[:start], data[end:]
            try:
                probe = parse_json(f'{prefix}{_PROBE_TEXT}"{suffix}')
            except ValueError:
                continue
            if _text_only(probe) == _PROBE_TEXT:
                self._prefix, self._suffix = prefix, suffix
                return


def _text_only(chunk: Any) -> str | None:
    """The text of an OpenAI chunk that carries nothing but text for the first choice (no
    finish reason, usage, error or other delta field), whose handling by `feed` is only to add
    it; None for every other chunk."""
    try:
        choices = chunk["choices"]
        if type(choices) is not list or len(choices) != 1:
            return None
        choice = choices[0]
        delta = choice["delta"]
        text = delta["content"]
    except (KeyError, TypeError):
        return None
    if (type(text) is not str or type(delta) is not dict or len(delta) != 1 or type(choice) is not dict
            or choice.get("finish_reason") or choice.get("index", 0) != 0
            or chunk.get("usage") or chunk.get("error") or "x_groq" in chunk or "done" in chunk):
        return None
    return text


def _chunk_usage(chunk: JsonObject) -> dict[str, object] | None:
    usage = chunk.get("usage")
    if isinstance(usage, dict) and usage:
        return usage
    groq = chunk.get("x_groq")
    groq_usage = groq.get("usage") if isinstance(groq, dict) else None
    if isinstance(groq_usage, dict) and groq_usage:
        return groq_usage
    if chunk.get("done") is True and "eval_count" in chunk:
        prompt, completion = chunk.get("prompt_eval_count") or 0, chunk.get("eval_count") or 0
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}
    return None


def _first_text(delta: JsonObject, keys: tuple[str, ...]) -> str:
    # Some upstreams echo the same thinking in two fields: take the first, never both.
    for key in keys:
        value = delta.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _arguments_text(arguments: object) -> str:
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
    found: list[tuple[str, JsonObject]] = []

    def take_tag(match: re.Match[str]) -> str:
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


def _take_fenced_calls(text: str, known: set[str], found: list[tuple[str, JsonObject]]) -> str:
    # Fences pair up in order (opening, closing), so a ```python block is skipped whole and
    # never mistaken for the text between two blocks.
    fences = list(_FENCE_LINE.finditer(text))
    spans = []
    for opening, closing in zip(fences[::2], fences[1::2], strict=False):  # a last fence may be unpaired
        if opening.group(1).lower() not in _CALL_FENCES:
            continue
        calls = _parse_text_calls(text[opening.end():closing.start()], known, tagged=False)
        if calls:
            spans.append((opening.start(), closing.end()))
            found.extend(calls)
    for start, end in reversed(spans):
        text = text[:start] + text[end:]
    return text


def _parse_text_calls(body: str, known: set[str], tagged: bool) -> list[tuple[str, JsonObject]]:
    try:
        value = json.loads(body)
    except ValueError:
        return []
    items = value if isinstance(value, list) else [value]
    found = [_text_call(item, known, tagged) for item in items]
    calls = [call for call in found if call is not None]
    if not calls or len(calls) != len(found):
        return []
    return calls


def _text_call(item: object, known: set[str], tagged: bool) -> tuple[str, JsonObject] | None:
    if not isinstance(item, dict):
        return None
    function = item.get("function")
    if isinstance(function, dict):
        item = function
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


class AnswerDecoder(Protocol):
    """The body of one streamed answer, framed (SSE, NDJSON, ...) and fed to the accumulator that
    the decoder was made for; each method returns the events that its input completed."""

    def feed(self, data: bytes) -> list[StreamEvent]:
        """More bytes of the body. Raises StreamFormatError (a ValueError) on broken framing."""

    def close(self) -> list[StreamEvent]:
        """The end of the body (a last line may lack its newline)."""

    def whole(self, body: object) -> list[StreamEvent]:
        """A whole JSON answer instead of a stream (a server that ignored `stream: true`)."""
