"""Anthropic's Messages API: POST {base}/v1/messages answered as server-sent events, and
GET {base}/v1/models.

Owns the native request (the system prompt apart, user and assistant turns of content blocks,
tool results inside a user turn, `tool_use` blocks with their input as an object, `max_tokens`,
`thinking` with a budget per reasoning level), the key in `x-api-key` with `anthropic-version`,
and reading the stream's events (`message_start`, `content_block_*`, `message_delta`,
`message_stop`, `ping`, `error`) into the chunks that the accumulator merges (stream.py). A
thinking block (with its signature) or a redacted one is kept as the answer's
`reasoning_details`, stored with the answer as OpenRouter's are, and sent back unchanged before
the turn's tool calls, as the API requires.

Must not: frame bytes (sse.py does) or merge chunks (stream.py does). The wire shapes are in
`tests/fixtures/providers/anthropic.md`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from totem.agent.kinds.base import (
    ChatMessage,
    Fetch,
    ModelInfo,
    ProviderTarget,
    arguments_object,
    as_object,
    entries,
    model_info,
    text_of,
)
from totem.agent.provider_errors import KIND_FORBIDDEN
from totem.agent.sse import SseDecoder, SseEvent
from totem.agent.stream import parse_json

if TYPE_CHECKING:
    from totem.agent.stream import ChatAccumulator, StreamEvent

ANTHROPIC_VERSION = "2023-06-01"
SSE_MEDIA_TYPE = "text/event-stream"
# Room for the answer (text and tool calls) in every request: `max_tokens` is required. 8192 is
# what every current Claude model can write; the two oldest (claude-3-haiku, claude-3-opus) 4096.
ANSWER_TOKENS = 8192
SMALL_OUTPUT_MODELS = ("claude-3-haiku", "claude-3-opus")
SMALL_ANSWER_TOKENS = 4096
# The thinking budget of each reasoning level (the API's minimum is 1024, and `max_tokens` must
# pass it: the answer's room is added). 16384 + 8192 stays under the smallest output limit of a
# thinking model (32000, Opus 4).
THINKING_BUDGETS = {"low": 2048, "medium": 8192, "high": 16384}
# The models that have no extended thinking (the API refuses `thinking` for them).
NO_THINKING_MODELS = ("claude-3-5-", "claude-3-haiku", "claude-3-opus", "claude-3-sonnet")
# The blocks of an assistant turn that go back as they came (with `signature` or `data`).
THINKING_TYPES = ("thinking", "redacted_thinking")
# Pages of GET /v1/models followed (1000 models each): a list longer than that is not a list.
MODELS_PAGE_LIMIT = 1000
MAX_MODELS_PAGES = 5
# Anthropic's stop reasons in the names the loop reads (OpenAI's).
FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
                  "max_tokens": "length", "model_context_window_exceeded": "length", "pause_turn": "stop"}
REFUSAL_SENTENCE = ("The model declined to go on (Anthropic stop reason: refusal). Rephrase the prompt, "
                    "or start a new session if the conversation itself is refused.")


class Anthropic:
    """Anthropic's API at its base URL (https://api.anthropic.com)."""

    name = "anthropic"
    default_context = 200000  # every Claude model of the models list has at least this window

    def __repr__(self) -> str:
        return f"<kind {self.name}>"

    def api_base(self, url: str) -> str:
        """The base with /v1: people paste the API root with or without it."""
        url = url.rstrip("/")
        return url if url.endswith("/v1") else url + "/v1"

    def chat_url(self, url: str, model: str = "") -> str:
        return self.api_base(url) + "/messages"

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}

    async def models(self, fetch: Fetch) -> list[ModelInfo]:
        """GET /v1/models, page after page (`has_more`, `last_id`) up to MAX_MODELS_PAGES. The list
        says neither the window nor the tools: every Claude model takes tools, and the window
        and thinking come from the template's hints."""
        url = self.api_base(fetch.url) + f"/models?limit={MODELS_PAGE_LIMIT}"
        models: list[ModelInfo] = []
        after = None
        for _page in range(MAX_MODELS_PAGES):
            body = await fetch.get(url + (f"&after_id={quote(after, safe='')}" if after else ""))
            models += [model_info(item["id"], item.get("display_name"), None, True, None)
                       for item in entries(body, fetch) if item.get("type", "model") == "model"]
            last = as_object(body).get("last_id")
            if as_object(body).get("has_more") is not True or not isinstance(last, str) or not last or last == after:
                break
            after = last
        return models

    async def context_window(self, fetch: Fetch, model: str, listed: int | None) -> int | None:
        return listed

    def request_body(self, target: ProviderTarget, messages: list[ChatMessage],
                     tools: list[dict[str, Any]], reasoning: str | None) -> dict[str, Any]:
        system, turns = native_turns(messages)
        budget = THINKING_BUDGETS.get(reasoning or "")
        if budget and not target.model.startswith(NO_THINKING_MODELS) and not _tool_turn_without_thinking(turns):
            body: dict[str, Any] = {"model": target.model, "max_tokens": budget + ANSWER_TOKENS,
                                    "thinking": {"type": "enabled", "budget_tokens": budget}}
        else:
            small = target.model.startswith(SMALL_OUTPUT_MODELS)
            body = {"model": target.model, "max_tokens": SMALL_ANSWER_TOKENS if small else ANSWER_TOKENS}
        if system:
            body["system"] = [{"type": "text", "text": system}]
        body["messages"] = turns
        body["tools"] = [native_tool(spec) for spec in tools]
        mark_cache_breakpoints(body)
        return body

    def set_temperature(self, body: dict[str, Any], temperature: float) -> None:
        if "thinking" not in body:  # the API refuses a temperature with thinking enabled
            body["temperature"] = temperature

    def stream_request(self, body: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
        return {"Accept": SSE_MEDIA_TYPE, "anthropic-version": ANTHROPIC_VERSION}, {**body, "stream": True}

    def decoder(self, accumulator: ChatAccumulator) -> MessagesAnswer:
        return MessagesAnswer(accumulator)


# --- the request -------------------------------------------------------------------------------


CACHE_BREAKPOINT = {"type": "ephemeral"}  # Anthropic's prompt cache, for five minutes


def mark_cache_breakpoints(body: dict[str, Any]) -> None:
    """Mark where the prompt cache may keep the request's prefix (three of the four marks the
    API allows): the end of the tools, of the system prompt, and of the last turn, which is the
    stable start of the next step's request (the API finds the previous step's entry from the
    new mark). Each marked block is a copy: the conversation's own stay as they are."""
    if body.get("tools"):
        body["tools"][-1] = {**body["tools"][-1], "cache_control": CACHE_BREAKPOINT}
    if body.get("system"):
        body["system"][-1] = {**body["system"][-1], "cache_control": CACHE_BREAKPOINT}
    turns = body.get("messages") or []
    if turns:
        content = turns[-1].get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if blocks and blocks[-1].get("type") not in ("thinking", "redacted_thinking"):
            blocks[-1] = {**blocks[-1], "cache_control": CACHE_BREAKPOINT}
            turns[-1] = {**turns[-1], "content": blocks}


def native_turns(messages: list[ChatMessage]) -> tuple[str, list[ChatMessage]]:
    """The system prompt and the turns of OpenAI-shaped messages (context.py): user and
    assistant turns of content blocks, each tool result a `tool_result` block of a user turn,
    consecutive user turns merged into one (tool results first, as the API wants them); empty
    texts and turns are left out (the API refuses them).

    Two assistant messages in a row, or one at the end, are an answer that failed part way (the
    history keeps what it said): the API would read a last one as the start of the answer to
    continue (refused with thinking on), and a failed text before a step would stand before that
    step's thinking block, which must come first. So only the step that followed it is sent."""
    system: list[str] = []
    turns: list[ChatMessage] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            system.append(text_of(message.get("content")))
            continue
        if role == "assistant":
            blocks = assistant_blocks(message)
        elif role == "tool":
            blocks = [{"type": "tool_result", "tool_use_id": message.get("tool_call_id") or "",
                       "content": text_of(message.get("content"))}]
            role = "user"
        else:
            blocks = user_blocks(message.get("content"))
            role = "user"
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role == "assistant":
            turns[-1] = {"role": role, "content": blocks}
        elif turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    if turns and turns[-1]["role"] == "assistant":
        turns.pop()
    return "\n\n".join(text for text in system if text), turns


def user_blocks(content: Any) -> list[dict[str, Any]]:
    """A user message's text and images (data URLs) as blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        if part.get("type") == "text" and part.get("text"):
            blocks.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "image_url":
            image = image_block(as_object(part.get("image_url")).get("url"))
            if image is not None:
                blocks.append(image)
    return blocks


def image_block(url: Any) -> dict[str, Any] | None:
    """`data:image/png;base64,...` as an image block; None for anything else (context.py only
    makes data URLs)."""
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    head, _, data = url[5:].partition(",")
    media_type, _, encoding = head.partition(";")
    if encoding != "base64" or not data:
        return None
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def assistant_blocks(message: ChatMessage) -> list[dict[str, Any]]:
    """An assistant step: its thinking blocks exactly as they came, its text, its tool calls."""
    blocks = [dict(detail) for detail in message.get("reasoning_details") or ()
              if isinstance(detail, dict) and detail.get("type") in THINKING_TYPES]
    text = text_of(message.get("content"))
    if text:
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or ():
        function = as_object(call.get("function"))
        blocks.append({"type": "tool_use", "id": call.get("id") or "", "name": function.get("name") or "",
                       "input": arguments_object(function.get("arguments"))})
    return blocks


def native_tool(spec: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI `tools` entry as the API takes it: name, description, input_schema."""
    function = as_object(spec.get("function"))
    schema = function.get("parameters")
    tool = {"name": function.get("name") or "", "input_schema": schema if isinstance(schema, dict) and schema
            else {"type": "object", "properties": {}}}
    if function.get("description"):
        tool["description"] = function["description"]
    return tool


def _tool_turn_without_thinking(turns: list[ChatMessage]) -> bool:
    """True when the last assistant turn called a tool without a thinking block before it: with
    thinking enabled the API refuses to go on from it (a step answered with thinking off, by
    another model or kind), so that request goes without thinking."""
    last = next((turn for turn in reversed(turns) if turn["role"] == "assistant"), None)
    if last is None or not any(block["type"] == "tool_use" for block in last["content"]):
        return False
    return last["content"][0]["type"] not in THINKING_TYPES


# --- the answer --------------------------------------------------------------------------------


class MessagesAnswer:
    """A streamed answer as the Messages API's events, each turned into the OpenAI-shaped chunk
    the accumulator merges (one chunk per event, so that keep-alive counting sees every event
    but `ping`)."""

    def __init__(self, accumulator: ChatAccumulator) -> None:
        self._accumulator = accumulator
        self._sse = SseDecoder()
        self._calls: dict[int, int] = {}  # content block index -> tool call index
        self._thinking: dict[int, dict[str, Any]] = {}  # content block index -> the block so far
        self._usage: dict[str, int] = {}

    def feed(self, data: bytes) -> list[StreamEvent]:
        return [e for event in self._sse.feed(data) for e in self._event(event)]

    def close(self) -> list[StreamEvent]:
        # An event without its blank line is discarded (WHATWG); a refusal without message_stop
        # is still one.
        return self._refused()

    def whole(self, body: object) -> list[StreamEvent]:
        """A whole Message (or error) instead of a stream: its blocks as the stream would send them."""
        message = as_object(body)
        if message.get("type") == "error":
            return self._accumulator.feed({"error": message.get("error") or message})
        events = self._chunk({"type": "message_start", "message": {**message, "content": []}})
        for index, block in enumerate(message.get("content") or ()):
            block = as_object(block)
            start = dict(block, input={}) if block.get("type") == "tool_use" else block
            events += self._chunk({"type": "content_block_start", "index": index, "content_block": start})
            if block.get("type") == "tool_use" and block.get("input"):
                events += self._chunk({"type": "content_block_delta", "index": index, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}})
            events += self._chunk({"type": "content_block_stop", "index": index})
        events += self._chunk({"type": "message_delta", "delta": {"stop_reason": message.get("stop_reason")},
                               "usage": {}})
        events += self._chunk({"type": "message_stop"})
        return events

    def _event(self, event: SseEvent) -> list[StreamEvent]:
        if event.event == "ping":
            return []
        try:
            value = parse_json(event.data)
        except ValueError:
            return self._accumulator.feed_sse(event)  # says that the chunk is not JSON
        if not isinstance(value, dict):
            return self._accumulator.feed(value)
        return self._chunk(value)

    def _chunk(self, value: dict[str, Any]) -> list[StreamEvent]:
        kind = value.get("type")
        if kind == "ping":
            return []
        handler = _HANDLERS.get(kind if isinstance(kind, str) else "")
        events = self._accumulator.feed(handler(self, value) if handler else {})
        return events + self._refused() if kind == "message_stop" else events

    def _refused(self) -> list[StreamEvent]:
        """At the answer's end: a refusal is not an answer that ended well, so the run stops and
        says why (the text so far is kept)."""
        if self._accumulator.finish_reason != "refusal" or self._accumulator.failed:
            return []
        return self._accumulator.fail(REFUSAL_SENTENCE, retry=False, kind=KIND_FORBIDDEN)

    # Each turns one event into the chunk fed to the accumulator ({} for one that adds nothing).

    def _message_start(self, value: dict[str, Any]) -> dict[str, Any]:
        return self._with_usage(as_object(as_object(value.get("message")).get("usage")))

    def _block_start(self, value: dict[str, Any]) -> dict[str, Any]:
        index, block = value.get("index"), as_object(value.get("content_block"))
        kind = block.get("type")
        if not isinstance(index, int):
            return {}
        if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
            return _delta({"content": block["text"]})
        if kind == "tool_use":
            self._calls[index] = len(self._calls)
            given = block.get("input")
            arguments = json.dumps(given, ensure_ascii=False) if isinstance(given, dict) and given else ""
            return _delta({"tool_calls": [{"index": self._calls[index], "id": block.get("id") or "",
                                           "type": "function",
                                           "function": {"name": block.get("name") or "", "arguments": arguments}}]})
        if kind in THINKING_TYPES:
            self._thinking[index] = dict(block)
            text = block.get("thinking")
            return _delta({"reasoning_content": text}) if isinstance(text, str) and text else {}
        return {}

    def _block_delta(self, value: dict[str, Any]) -> dict[str, Any]:
        index, delta = value.get("index"), as_object(value.get("delta"))
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            return _delta({"content": delta["text"]})
        if kind == "input_json_delta" and index in self._calls and isinstance(delta.get("partial_json"), str):
            return _delta({"tool_calls": [{"index": self._calls[index],
                                           "function": {"arguments": delta["partial_json"]}}]})
        block = self._thinking.get(index) if isinstance(index, int) else None
        if block is None:
            return {}
        if kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            block["thinking"] = str(block.get("thinking") or "") + delta["thinking"]
            return _delta({"reasoning_content": delta["thinking"]})
        if kind == "signature_delta" and isinstance(delta.get("signature"), str):
            block["signature"] = str(block.get("signature") or "") + delta["signature"]
        return {}

    def _block_stop(self, value: dict[str, Any]) -> dict[str, Any]:
        index = value.get("index")
        block = self._thinking.pop(index, None) if isinstance(index, int) else None
        return _delta({"reasoning_details": [block]}) if block is not None else {}

    def _message_delta(self, value: dict[str, Any]) -> dict[str, Any]:
        chunk = self._with_usage(as_object(value.get("usage")))
        reason = as_object(value.get("delta")).get("stop_reason")
        if isinstance(reason, str) and reason:
            chunk["choices"] = [{"index": 0, "delta": {}, "finish_reason": FINISH_REASONS.get(reason, reason)}]
        return chunk

    def _message_stop(self, value: dict[str, Any]) -> dict[str, Any]:
        self._accumulator.saw_done = True  # OpenAI's [DONE]: nothing after it matters
        return {}

    def _error(self, value: dict[str, Any]) -> dict[str, Any]:
        return {"error": as_object(value.get("error")) or {"type": "error", "message": "the stream reported an error"}}

    def _with_usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        """A chunk with the usage so far, in the names answers.tokens_of reads: the prompt is every
        input token, read from the cache, written to it or neither; the Anthropic counts stay."""
        for name, count in usage.items():
            if isinstance(count, int) and not isinstance(count, bool):
                self._usage[name] = count
        if not self._usage:
            return {}
        counts = self._usage
        prompt = sum(counts.get(name, 0) for name in (
            "input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
        completion = counts.get("output_tokens", 0)
        return {"usage": {**counts, "prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion}}


_HANDLERS = {"message_start": MessagesAnswer._message_start, "content_block_start": MessagesAnswer._block_start,
             "content_block_delta": MessagesAnswer._block_delta, "content_block_stop": MessagesAnswer._block_stop,
             "message_delta": MessagesAnswer._message_delta, "message_stop": MessagesAnswer._message_stop,
             "error": MessagesAnswer._error}


def _delta(delta: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta}]}
