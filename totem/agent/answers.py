"""One model answer, streamed into parts: the assistant message, its text and reasoning parts as
they arrive, a tool part per call the model makes (also for calls a local model writes as text),
and the message's timing, usage, tokens (with their cost where the price is known) and wire
details when it ends.

Must not: retry (the loop does), run the tool calls (calls.py does), or build the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from totem.agent.context import CHARS_PER_TOKEN, estimated_tokens, sent_messages
from totem.agent.kinds.base import PRICE_TOKENS, Price
from totem.agent.provider_errors import KIND_CONTEXT_LENGTH, ProviderError
from totem.agent.recorder import OpenPart, Recorder
from totem.agent.stream import (
    ReasoningDelta,
    StreamEnd,
    StreamError,
    TextDelta,
    ToolCall,
    ToolCallStarted,
    Usage,
    extract_text_tool_calls,
)
from totem.clock import now_ms
from totem.errors import out_of_space
from totem.events import MessageCreated
from totem.store import Store

# A cost is kept to a millionth of a cent: finer digits are float noise, not money.
COST_DIGITS = 8
# A prompt counts as cut by its server when it was estimated this much over the window asked for
# and the server read this much less than the estimate: an estimate from the JSON's length is
# rough, and a cached prompt is not read again.
TRUNCATION_MARGIN = 1.25


# A self-check of an answer's text: (text, cut at the output limit) -> the validation part's
# data `{problems, blocking}`, or None when there is nothing to say.
Review = Callable[[str, bool], Awaitable[dict | None]]


log = logging.getLogger("totem.agent")

class Answers:
    """Streams model answers into the parts of assistant messages."""

    def __init__(self, store: Store, hub, recorder: Recorder, registry: Callable):
        self.store = store
        self.hub = hub
        self.recorder = recorder
        self.registry = registry  # () -> the tools, whose names a text tool call may use

    async def stream(self, sessionid: str, model: str, target, body: dict, marks: dict | None = None,
                     prompt: str | None = None, review: Review | None = None, encoder=None,
                     opening: dict | None = None, budget=None,
                     notes: dict | None = None) -> tuple[list[ToolCall], dict[str, OpenPart]]:
        """Stream one answer into parts; returns its tool calls and the part of each. `marks`
        go into the data of the finished message (`compaction`), `opening` into the data of the
        message until it is finished (kept when it fails: `compacting`); `prompt`, the id of the user
        message the run answers, into its data as `prompt`, failed or not. With `review` (a
        self-checked answer), the text is held until the answer ends, then stored and published
        whole, followed by a `validation` part when the review found problems; reasoning and
        tool calls stream as ever. `encoder` (bodies.BodyEncoder) is the run's, which keeps the
        JSON of the messages of its last request. `budget` (run.Budget) counts the answer's cost;
        `notes` go into the message's data from its start, failed or not (`instructions`).

        Raises ProviderError (a failed or refused answer: its parts are closed as error), and
        CancelledError on abort (closed as aborted).
        """
        started = now_ms()
        answering = ({"prompt": prompt} if prompt else {}) | (notes or {})
        message = await self.store.add_message(sessionid, "assistant", model=model,
                                               data=(answering | (opening or {})) or None)
        message["parts"] = []
        self.hub.publish(MessageCreated(sessionid, message))
        text_part = reasoning_part = None
        held: list[str] = []  # the text of a reviewed answer, until it ends
        tool_parts: dict[int, OpenPart] = {}
        usage = first_token = result = None
        opened, messageid = self.recorder.open, message["id"]
        try:
            from totem.agent import client  # the HTTP client (and ssl) load with the first answer, not at start-up
            stream = client.stream_chat(target.kind, target.url, target.key, body, encoder=encoder)
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    if isinstance(event, TextDelta):
                        first_token = first_token or now_ms()
                        if review is not None:
                            held.append(event.text)
                            continue
                        text_part = text_part or await opened(sessionid, messageid, "text")
                        self.recorder.append(text_part, event.text)
                    elif isinstance(event, ReasoningDelta):
                        first_token = first_token or now_ms()
                        reasoning_part = reasoning_part or await opened(sessionid, messageid, "reasoning")
                        self.recorder.append(reasoning_part, event.text)
                    elif isinstance(event, ToolCallStarted) and event.index not in tool_parts:
                        tool_parts[event.index] = await opened(
                            sessionid, messageid, "tool", status="pending",
                            data={"callid": event.id, "tool": event.name, "arguments": ""})
                    elif isinstance(event, Usage):
                        usage = event.usage
                        cut = silently_truncated(usage, body)
                        if cut is not None:
                            raise cut
                    elif isinstance(event, StreamError):
                        raise ProviderError(event.message, status=event.status, retry=event.retry, kind=event.kind)
                    elif isinstance(event, StreamEnd):
                        result = event.result
        except BaseException as exc:
            ending = "aborted" if isinstance(exc, asyncio.CancelledError) else "error"
            # What ended the answer is what the run must see, even when storing its end fails.
            for open_part in [text_part, reasoning_part, *tool_parts.values()]:
                if open_part is not None:
                    await _quietly(self.recorder.close(open_part, ending))
            if held:  # what the model said before it stopped, kept and marked where it stopped
                await _quietly(asyncio.shield(
                    self.recorder.add_whole(sessionid, messageid, "text", "".join(held), ending)))
            await _quietly(self.store.finish_message(messageid, usage, {
                "started": started, "first": first_token, "failed": True, **(opening or {}), **answering}))
            raise
        for open_part in (reasoning_part, text_part):
            if open_part is not None:
                await self.recorder.close(open_part, "done")
        if held and review is not None:
            text = "".join(held)
            validation = await review(text, bool(result and result.finish_reason == "length"))
            await self.recorder.add_whole(sessionid, messageid, "text", text, "done")
            if validation is not None and validation.get("problems"):
                await self.recorder.add_whole(sessionid, messageid, "validation", "", "done", data=validation)
        calls = result.tool_calls if result else []
        if not calls and result and result.content:
            _rest, calls = extract_text_tool_calls(result.content, self.registry().names())
        parts = await self._settle_tool_parts(sessionid, messageid, tool_parts, calls)
        usage = usage or (result.usage if result else None)
        written = sum(len(p.text()) for p in (text_part, reasoning_part) if p is not None) + sum(
            len(call.arguments or "") for call in calls) + sum(len(piece) for piece in held)
        tokens = tokens_of(usage, body, written, target.price)
        if budget is not None:
            budget.add(tokens)
        await self.store.finish_message(messageid, usage,
                                        {"started": started, "first": first_token, "finished": now_ms(),
                                         "tokens": tokens,
                                         **(marks or {}), **answering,
                                         "finish_reason": result.finish_reason if result else None,
                                         **({"reasoning_details": result.reasoning_details}
                                            if result and result.reasoning_details else {})})
        return calls, parts

    async def _settle_tool_parts(self, sessionid: str, messageid: str, tool_parts: dict[int, OpenPart],
                                 calls: list[ToolCall]) -> dict[str, OpenPart]:
        """Give each final call its part (created now for calls written as text)."""
        parts = {}
        for call in calls:
            open_part = tool_parts.pop(call.index, None)
            if open_part is None:
                open_part = await self.recorder.open(sessionid, messageid, "tool", status="pending",
                                                     data={"callid": call.id, "tool": call.name, "arguments": ""})
            open_part.data.update({"callid": call.id, "tool": call.name, "arguments": call.arguments})
            parts[call.id] = open_part
        for leftover in tool_parts.values():
            await self.recorder.close(leftover, "error")
        return parts


def tokens_of(usage: dict | None, body: dict, written_chars: int, price: Price | None = None) -> dict:
    """`{input, output, estimated}`: the tokens of one answer as the provider counted them, or
    estimated from the request's and the answer's length when it did not say; `cached` and
    `cachewrite`, the input tokens its prompt cache served and stored (cache_tokens), when it
    says; with `cost` in USD when it is known: the provider's own figure when its usage has one
    (OpenRouter's `usage.cost`), else the tokens at the catalog's `price` (USD per million
    tokens; cached input at its cache prices, or at the input price when it has none; as
    estimated as the tokens are)."""
    given_in = usage.get("prompt_tokens") if usage else None
    given_out = usage.get("completion_tokens") if usage else None
    if isinstance(given_in, int) and isinstance(given_out, int):
        tokens: dict = {"input": given_in, "output": given_out, "estimated": False}
    else:
        tokens = {"input": estimated_tokens(sent_messages(body), body.get("tools") or []),
                  "output": int(written_chars / CHARS_PER_TOKEN) + 1, "estimated": True}
    read, written = cache_tokens(usage) if not tokens["estimated"] else (0, 0)
    read, written = min(read, tokens["input"]), min(written, tokens["input"] - min(read, tokens["input"]))
    tokens |= ({"cached": read} if read else {}) | ({"cachewrite": written} if written else {})
    given_cost = usage.get("cost") if usage else None
    if isinstance(given_cost, (int, float)) and not isinstance(given_cost, bool) and 0 <= given_cost < math.inf:
        tokens["cost"] = float(given_cost)
    elif price is not None:
        fresh = tokens["input"] - read - written
        spent = (fresh * price["input"] + read * price.get("cacheread", price["input"])
                 + written * price.get("cachewrite", price["input"]) + tokens["output"] * price["output"])
        tokens["cost"] = round(spent / PRICE_TOKENS, COST_DIGITS)
    return tokens


def cache_tokens(usage: dict | None) -> tuple[int, int]:
    """(input tokens read from the provider's prompt cache, input tokens written to it) as each
    provider's usage says them: OpenAI's and OpenRouter's `prompt_tokens_details.cached_tokens`
    (and `cache_write_tokens`), DeepSeek's `prompt_cache_hit_tokens`, Anthropic's
    `cache_read_input_tokens` and `cache_creation_input_tokens`, Gemini's
    `cachedContentTokenCount`; (0, 0) when it says nothing. The input count includes both."""
    if not isinstance(usage, dict):
        return 0, 0
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}

    def count(*values: Any) -> int:
        return next((value for value in values if isinstance(value, int) and not isinstance(value, bool)
                     and value > 0), 0)
    read = count(details.get("cached_tokens"), usage.get("prompt_cache_hit_tokens"),
                 usage.get("cache_read_input_tokens"), usage.get("cachedContentTokenCount"))
    written = count(details.get("cache_write_tokens"), usage.get("cache_creation_input_tokens"))
    return read, written


def silently_truncated(usage: Any, body: dict[str, Any]) -> ProviderError | None:
    """The context error of an answer whose server cut the prompt to the window it was asked for
    and said nothing (Ollama keeps the end of a prompt longer than `options.num_ctx`: only its
    `prompt_eval_count` shows it): the prompt sent was larger than that window and the server
    read clearly less of it. None for any other answer."""
    options = body.get("options")
    window = options.get("num_ctx") if isinstance(options, dict) else None
    read = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not isinstance(window, int) or not isinstance(read, int) or read <= 0:
        return None
    sent = estimated_tokens(sent_messages(body), body.get("tools") or [])
    if sent <= window * TRUNCATION_MARGIN or read > window or read >= sent / TRUNCATION_MARGIN:
        return None
    return ProviderError(f"The server read only {read} of the about {sent} tokens of the prompt: it cut "
                         f"the prompt to its {window}-token window", kind=KIND_CONTEXT_LENGTH, retry=False,
                         window=window)


async def _quietly(work: Awaitable) -> None:
    """Await the storing of a failed answer's end; its own failure is logged, not raised (a
    full disk is logged once, by the store)."""
    try:
        await work
    except Exception as exc:
        if not out_of_space(exc):
            log.exception("the end of a failed answer was not stored")
