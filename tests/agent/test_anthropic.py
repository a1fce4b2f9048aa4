"""The Anthropic kind: the Messages API request built from the loop's messages (turns of content
blocks, thinking blocks sent back unchanged before the tool calls, thinking budgets, the key in
x-api-key), its decoder's events beyond the shared fixture cases, the models list with its pages,
and a session through the real server against a scripted Messages API: a tool call after
thinking, an overloaded stream retried, the tokens and cost stored and the key never elsewhere
than in its header."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json

from tests.model_server import (
    HttpError,
    ScriptedModel,
    Stream,
    anthropic_error,
    anthropic_event,
    anthropic_events,
    anthropic_reply,
    models_fixture,
)
from tests.test_loop import KEY, LoopCase
from tests.utils import call
from totem.agent.client import stream_chat
from totem.agent.context import history_messages
from totem.agent.kinds import Fetch, ProviderTarget, kind_named
from totem.agent.kinds.anthropic import ANSWER_TOKENS, REFUSAL_SENTENCE, THINKING_BUDGETS
from totem.agent.provider_errors import KIND_CONTEXT_LENGTH, KIND_OVERLOADED, ProviderError
from totem.agent.stream import ChatAccumulator, StreamError, Usage

ANTHROPIC = kind_named("anthropic")
MARKER = "0123456789abcdef"
MODEL = "claude-sonnet-4-5-20250929"
TOOLS = [{"type": "function", "function": {"name": "read", "description": "Read.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}]
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYmVsdGluZ0lkIjAWLCJ+9Ub3pzYS6cQNaGYBq3Z5MfAz"
THINKING = {"type": "thinking", "thinking": "Read a.txt first.", "signature": SIGNATURE}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5"}


def target(model: str = MODEL) -> ProviderTarget:
    return ProviderTarget("p1", "http://127.0.0.1:1/v1/messages", model, ANTHROPIC, None, 200000)


def stored(details: list | None = None, text: str = "Let me look.") -> list[dict]:
    """A session as context.py reads it: a prompt with an image, a step with thinking (its
    details), a text and two tool calls (one with arguments that are not JSON), and a prompt
    after it."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}
    return [
        {"id": "u1", "role": "user", "data": {"attachments": [{"id": "a1"}]},
         "parts": [{"kind": "text", "text": "What is in a.txt?"}], "_attachments": [image]},
        {"id": "m1", "role": "assistant", "data": {"reasoning_details": details if details is not None
                                                   else [THINKING, REDACTED]},
         "parts": [{"kind": "reasoning", "text": "Read a.txt first."}, {"kind": "text", "text": text},
                   {"kind": "tool", "status": "done", "data": {"callid": "toolu_1", "tool": "read",
                                                               "input": {"path": "a.txt"}, "output": "hello"}},
                   {"kind": "tool", "status": "error", "data": {"callid": "toolu_2", "tool": "read",
                                                                "arguments": '{"path": ', "error": "not JSON"}}]},
    ]


def messages(details: list | None = None, text: str = "Let me look.") -> list[dict]:
    history = stored(details, text)
    system = {"role": "system", "content": "You are Totem."}
    return [system, *history_messages(history, {"u1": history[0]["_attachments"]}, MARKER)]


def unmarked(value):
    """`value` without the prompt cache's marks (test_cache_breakpoints holds them), a system
    prompt of one block as its text."""
    if isinstance(value, list):
        return [unmarked(item) for item in value]
    if isinstance(value, dict):
        plain = {key: unmarked(item) for key, item in value.items() if key != "cache_control"}
        if "system" in plain:
            system = plain["system"]
            if isinstance(system, list) and len(system) == 1 and system[0].get("type") == "text":
                plain["system"] = system[0]["text"]
        return plain
    return value


def decode(body: bytes, piece: int = 11) -> tuple[ChatAccumulator, list]:
    accumulator = ChatAccumulator()
    decoder = ANTHROPIC.decoder(accumulator)
    events = []
    for start in range(0, len(body), piece):
        events += decoder.feed(body[start:start + piece])
    events += decoder.close() + accumulator.finish()
    return accumulator, events


# --- the request -------------------------------------------------------------------------------


def test_request_body_turns_of_blocks():
    """The system prompt apart, the user's text and image as blocks, the assistant's thinking
    blocks first and unchanged, then its text and tool calls with their input as objects ({} for
    arguments that are not JSON), the tool results in one user turn, the tools with
    input_schema, max_tokens; stream_request adds stream and the version, never the key."""
    marked = ANTHROPIC.request_body(target(), messages(), TOOLS, None)
    body = unmarked(marked)
    assert list(body) == ["model", "max_tokens", "system", "messages", "tools"]
    assert (body["model"], body["max_tokens"], body["system"]) == (MODEL, ANSWER_TOKENS, "You are Totem.")
    user, assistant, results = body["messages"]
    assert user == {"role": "user", "content": [
        {"type": "text", "text": "What is in a.txt?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": base64.b64encode(PNG).decode()}}]}
    assert assistant == {"role": "assistant", "content": [
        THINKING, REDACTED, {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.txt"}},
        {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {}}]}
    assert results["role"] == "user"
    assert [(b["type"], b["tool_use_id"]) for b in results["content"]] == [("tool_result", "toolu_1"),
                                                                           ("tool_result", "toolu_2")]
    assert "hello" in results["content"][0]["content"] and MARKER in results["content"][0]["content"]
    assert body["tools"] == [{"name": "read", "input_schema": TOOLS[0]["function"]["parameters"],
                              "description": "Read."}]
    headers, request = ANTHROPIC.stream_request(marked)
    assert headers == {"Accept": "text/event-stream", "anthropic-version": "2023-06-01"}
    assert request == {**marked, "stream": True} and "stream" not in marked
    assert ANTHROPIC.auth_headers("sk-ant-1") == {"x-api-key": "sk-ant-1", "anthropic-version": "2023-06-01"}


def test_cache_breakpoints_on_the_tools_the_system_prompt_and_the_last_turn():
    """Three of the four marks the API allows: the last tool, the system prompt, the last block
    of the last turn (the next step's request starts with all of it); the conversation given is
    left as it was; a request without tools or system has only the last turn's."""
    given = messages()
    before = json.dumps(given)
    body = ANTHROPIC.request_body(target(), given, TOOLS, None)
    ephemeral = {"type": "ephemeral"}
    assert body["tools"][-1]["cache_control"] == ephemeral
    assert body["system"] == [{"type": "text", "text": "You are Totem.", "cache_control": ephemeral}]
    assert body["messages"][-1]["content"][-1]["cache_control"] == ephemeral
    marks = json.dumps(body).count('"cache_control"')
    assert marks == 3 and json.dumps(given) == before
    bare = ANTHROPIC.request_body(target(), [{"role": "user", "content": "Hi"}], [], None)
    assert json.dumps(bare).count('"cache_control"') == 1 and "system" not in bare
    # The next step's request holds the whole of this one's, marks moved on, the rest the same bytes.
    later = ANTHROPIC.request_body(target(), [*given, {"role": "assistant", "content": "Done."},
                                              {"role": "user", "content": "Thanks"}], TOOLS, None)
    assert unmarked(later["messages"][:len(body["messages"])]) == unmarked(body["messages"])


def test_request_body_merges_turns_and_drops_empty_ones():
    """A prompt after tool results joins their user turn (results first), an assistant step
    without text or calls is left out (the API refuses an empty turn), and several system
    messages join."""
    body = unmarked(ANTHROPIC.request_body(target(), [
        {"role": "system", "content": "One."}, {"role": "system", "content": [{"type": "text", "text": "Two."}]},
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "out"},
        {"role": "user", "content": "And now?"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "Hello?"}], [], None))
    assert body["system"] == "One.\n\nTwo."
    assert [turn["role"] for turn in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "out"},
        {"type": "text", "text": "And now?"}, {"type": "text", "text": "Hello?"}]
    assert body["tools"] == []


def test_an_answer_that_failed_part_way_is_not_sent():
    """What a failed answer said before it stopped (kept in the history) is not sent as the start
    of the next answer, nor before the thinking of the step that replaced it."""
    retried = [{"role": "user", "content": "Go."}, {"role": "assistant", "content": "It says"}]
    assert unmarked(ANTHROPIC.request_body(target(), retried, [], "high"))["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Go."}]}]
    replaced = [*retried, {"role": "assistant", "content": "", "reasoning_details": [THINKING], "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "out"}]
    body = unmarked(ANTHROPIC.request_body(target(), replaced, [], "high"))
    assert [turn["role"] for turn in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"][0] == THINKING and "thinking" in body


def test_reasoning_levels_are_thinking_budgets():
    """low, medium and high are thinking budgets under max_tokens (the answer's room added);
    none and the model's default send no thinking; a temperature goes only without thinking."""
    for level, budget in THINKING_BUDGETS.items():
        body = ANTHROPIC.request_body(target(), messages(), TOOLS, level)
        assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
        assert body["max_tokens"] == budget + ANSWER_TOKENS
        ANTHROPIC.set_temperature(body, 0.2)
        assert "temperature" not in body
    for level in ("none", None):
        body = ANTHROPIC.request_body(target(), messages(), TOOLS, level)
        assert "thinking" not in body and body["max_tokens"] == ANSWER_TOKENS
        ANTHROPIC.set_temperature(body, 0.2)
        assert body["temperature"] == 0.2
    assert ANTHROPIC.request_body(target("claude-3-haiku-20240307"), messages(), TOOLS, None)["max_tokens"] == 4096
    for model in ("claude-3-5-haiku-20241022", "claude-3-haiku-20240307"):  # no extended thinking
        assert "thinking" not in ANTHROPIC.request_body(target(model), messages(), TOOLS, "high")


def test_a_tool_turn_without_thinking_goes_on_without_it():
    """A step that called a tool with no thinking block (answered with thinking off, or by
    another kind) cannot be continued with thinking on: that request goes without it. OpenRouter's
    own details are not Anthropic's and are not sent."""
    openrouter_details = [{"type": "reasoning.text", "text": "Look", "signature": "c2ln", "index": 0}]
    for details in ([], openrouter_details):
        body = ANTHROPIC.request_body(target(), messages(details), TOOLS, "high")
        assert "thinking" not in body
        assert body["messages"][1]["content"][0] == {"type": "text", "text": "Let me look."}
    assert "thinking" in ANTHROPIC.request_body(target(), messages([REDACTED]), TOOLS, "high")


def test_openrouter_never_gets_anthropic_thinking_blocks():
    """A session that goes from an Anthropic model to OpenRouter sends OpenRouter only its own
    kind of reasoning_details."""
    body = kind_named("openrouter").request_body(target(), messages(), TOOLS, None)
    assert "reasoning_details" not in body["messages"][2]
    mixed = [THINKING, {"type": "reasoning.text", "text": "Look", "index": 0}]
    body = kind_named("openrouter").request_body(target(), messages(mixed), TOOLS, None)
    assert body["messages"][2]["reasoning_details"] == [{"type": "reasoning.text", "text": "Look", "index": 0}]


def test_chat_url_with_or_without_v1():
    """The base URL works pasted with or without /v1 and a trailing slash."""
    for url in ("https://api.anthropic.com", "https://api.anthropic.com/", "https://api.anthropic.com/v1/"):
        assert ANTHROPIC.chat_url(url) == "https://api.anthropic.com/v1/messages"


# --- the answer --------------------------------------------------------------------------------


def test_usage_counts_cached_input_and_keeps_the_counts():
    """prompt_tokens is every input token (fresh, read from the cache, written to it), and the
    Anthropic counts stay in the usage."""
    body = "".join(anthropic_events("Hi.", input_tokens=12, cache_read=2048, cache_write=310,
                                    output_tokens=40)).encode()
    accumulator, events = decode(body)
    usage = accumulator.result().usage
    assert usage == {"input_tokens": 12, "cache_creation_input_tokens": 310, "cache_read_input_tokens": 2048,
                     "output_tokens": 40, "prompt_tokens": 2370, "completion_tokens": 40, "total_tokens": 2410}
    assert [e for e in events if isinstance(e, Usage)][-1].usage == usage  # the last one the loop reads
    assert accumulator.result().failure is None and accumulator.result().finish_reason == "stop"


def test_overloaded_error_event_is_retryable_overloaded():
    """An overloaded_error after the 200 fails the answer as a passing overload; an
    invalid_request_error does not ask for a retry; a prompt too long is a context error."""
    start = anthropic_events("Hi")[:2]
    for error, kind, retry in ((anthropic_error(), KIND_OVERLOADED, True),
                               (anthropic_error("api_error", "Internal server error"), "server", True),
                               (anthropic_error("rate_limit_error", "Rate limited"), "rate_limit", True),
                               (anthropic_error("invalid_request_error", "bad"), "server", False),
                               (anthropic_error("invalid_request_error",
                                                "prompt is too long: 208310 tokens > 200000 maximum"),
                                KIND_CONTEXT_LENGTH, False)):
        _, events = decode("".join(start + [error]).encode())
        (failure,) = [e for e in events if isinstance(e, StreamError)]
        assert (failure.kind, failure.retry) == (kind, retry), error


def test_refusal_fails_with_a_sentence():
    """stop_reason refusal keeps the text said and fails the answer with a sentence, whether or
    not message_stop came."""
    events = anthropic_events("I can't", stop_reason="refusal")
    for body in ("".join(events), "".join(events[:-1])):
        accumulator, decoded = decode(body.encode())
        (failure,) = [e for e in decoded if isinstance(e, StreamError)]
        assert (failure.message, failure.retry) == (REFUSAL_SENTENCE, False)
        assert accumulator.result().content == "I can't"


def test_pings_are_keepalives_and_broken_data_fails():
    """A ping is not data (the keep-alive timer counts the other events); data that is not JSON
    fails the answer as a broken stream."""
    accumulator, _ = decode((anthropic_event({"type": "ping"}) * 3).encode())
    assert accumulator.chunks == 0
    accumulator, events = decode(b"event: message_start\ndata: {not json\n\n")
    assert [e for e in events if isinstance(e, StreamError)][0].kind == "invalid_response"


def test_whole_message_instead_of_a_stream():
    """A server that answers one whole Message: its thinking, text, tool call and stop reason."""
    accumulator = ChatAccumulator()
    ANTHROPIC.decoder(accumulator).whole({
        "type": "message", "role": "assistant", "model": MODEL, "stop_reason": "tool_use",
        "content": [THINKING, {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "toolu_9", "name": "read", "input": {"path": "a.txt"}}],
        "usage": {"input_tokens": 5, "output_tokens": 7}})
    accumulator.finish()
    result = accumulator.result()
    assert (result.content, result.reasoning, result.reasoning_details) == ("Reading.", THINKING["thinking"], [THINKING])
    assert [(c.id, c.name, c.parsed_arguments()) for c in result.tool_calls] == [("toolu_9", "read", {"path": "a.txt"})]
    assert (result.finish_reason, result.usage["prompt_tokens"], result.failure) == ("tool_calls", 5, None)


# --- the wire: key, models, HTTP errors ---------------------------------------------------------


def test_models_pages_and_key_header():
    """GET /v1/models follows has_more and last_id; every call carries x-api-key and the
    version, never an Authorization header; every model takes tools."""
    async def scenario():
        async with ScriptedModel() as model:
            first = models_fixture("anthropic_v1_models")
            model.serve_json("GET", "/v1/models?limit=1000", {**first, "has_more": True})
            model.serve_json("GET", f"/v1/models?limit=1000&after_id={first['last_id']}", {
                "data": [{"type": "model", "id": "claude-opus-4-1-20250805", "display_name": "Claude Opus 4.1",
                          "created_at": "2025-08-05T00:00:00Z"}], "has_more": False,
                "first_id": "claude-opus-4-1-20250805", "last_id": "claude-opus-4-1-20250805"})
            found = await ANTHROPIC.models(Fetch(model.base, "sk-ant-secret", 5.0, ANTHROPIC))
        assert [(m["id"], m["name"], m["tools"]) for m in found] == [
            ("claude-sonnet-4-5-20250929", "Claude Sonnet 4.5", True),
            ("claude-haiku-4-5-20251001", "Claude Haiku 4.5", True),
            ("claude-3-5-haiku-20241022", "Claude Haiku 3.5", True),
            ("claude-opus-4-1-20250805", "Claude Opus 4.1", True)]
        assert len(model.requests) == 2
        for request in model.requests:
            assert request.headers["x-api-key"] == "sk-ant-secret"
            assert request.headers["anthropic-version"] == "2023-06-01"
            assert "authorization" not in request.headers

    asyncio.run(scenario())


def test_http_errors_never_hold_the_key():
    """A 529 before the stream is a retryable overload, a prompt too long states its window;
    neither message holds the key."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(HttpError.fixture("anthropic", "529_overloaded_error"),
                         HttpError.fixture("anthropic", "400_prompt_too_long"))
            errors = []
            for _ in range(2):
                try:
                    async with contextlib.aclosing(stream_chat(ANTHROPIC, ANTHROPIC.chat_url(model.base),
                                                               "sk-ant-secret", {"model": MODEL})) as stream:
                        [event async for event in stream]
                except ProviderError as exc:
                    errors.append(exc)
        assert [(e.kind, e.retry, e.window) for e in errors] == [(KIND_OVERLOADED, True, None),
                                                                 (KIND_CONTEXT_LENGTH, False, 200000)]
        assert all("sk-ant-secret" not in repr(e) for e in errors)
        assert model.requests[0].headers["x-api-key"] == "sk-ant-secret"

    asyncio.run(scenario())


# --- through the real server -------------------------------------------------------------------


class AnthropicLoopTest(LoopCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        await self.use_only("Claude", "anthropic", "anthropic_v1_models", MODEL)

    def chats(self):
        return [r for r in self.model.requests if r.method == "POST"]

    async def test_thinking_tool_call_overload_retried_tokens_and_cost(self):
        """A prompt with thinking: the model thinks and reads a.txt; the next request sends the
        thinking block with its signature first and unchanged, then the tool_use, then the
        result; that request's stream is cut by an overloaded_error and tried again; the key goes
        only as x-api-key; each answer's tokens (cached input counted) and cost (the template's
        price of the model, USD 3 and 15 per million, 0.3 for cached input) are stored."""
        catalog = (await call(self.app, "providers_catalog")).json()
        listed = next(m for m in catalog["models"] if m["id"] == self.modelref)
        self.assertEqual((listed["context"], listed["tools"], listed["reasoning"], listed["price"]),
                         (200000, True, True, {"input": 3.0, "output": 15.0, "cacheread": 0.3, "cachewrite": 3.75}))
        thinking = "The person asks about a.txt: read it."
        self.model.script(
            anthropic_reply(thinking=(thinking, SIGNATURE), tool_calls=[("read", {"path": "a.txt"})],
                            input_tokens=900, cache_read=100, output_tokens=60),
            Stream(anthropic_events("It says")[:5] + [anthropic_error()], done=False),
            anthropic_reply("It says hello world.", input_tokens=1000, output_tokens=20))
        answer = await self.prompt(reasoning="high")
        self.assertEqual(answer.status, 200, answer.body)
        events = await self.events_until("idle")
        first, cut, retried = self.chats()
        for request in (first, cut, retried):
            self.assertEqual(request.path, "/v1/messages")
            self.assertEqual((request.headers["x-api-key"], request.headers["anthropic-version"]), (KEY, "2023-06-01"))
            self.assertNotIn("authorization", request.headers)
            self.assertEqual(request.body["thinking"], {"type": "enabled", "budget_tokens": 16384})
            self.assertTrue(request.body["stream"])
        for request in self.model.requests:
            self.assertNotIn("authorization", request.headers)
            self.assertNotIn(KEY, request.raw_body.decode())
        self.assertEqual(first.body["messages"], [{"role": "user", "content": [
            {"type": "text", "text": "Look at a.txt", "cache_control": {"type": "ephemeral"}}]}])
        self.assertIn("read", [tool["name"] for tool in first.body["tools"]])
        user, assistant, results = cut.body["messages"]
        self.assertEqual(assistant["content"], [
            {"type": "thinking", "thinking": thinking, "signature": SIGNATURE},
            {"type": "tool_use", "id": "toolu_scripted00000000000", "name": "read", "input": {"path": "a.txt"}}])
        (result,) = results["content"]
        self.assertEqual((result["type"], result["tool_use_id"]), ("tool_result", "toolu_scripted00000000000"))
        self.assertIn("hello world", result["content"])
        self.assertEqual(retried.body["messages"], cut.body["messages"])
        (retry_note,) = [e["data"] for e in events if e["type"] == "error"]
        self.assertTrue(retry_note["retry"])
        self.assertIn("Overloaded", retry_note["message"])
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        finished = [m for m in stored if m["role"] == "assistant" and not (m["data"] or {}).get("failed")]
        self.assertEqual(finished[0]["data"]["reasoning_details"],
                         [{"type": "thinking", "thinking": thinking, "signature": SIGNATURE}])
        self.assertEqual(finished[0]["data"]["tokens"],  # the cached 100 at the cache read price
                         {"input": 1000, "output": 60, "estimated": False, "cached": 100,
                          "cost": round((900 * 3 + 100 * 0.3 + 60 * 15) / 1e6, 8)})
        self.assertEqual(finished[-1]["data"]["tokens"]["input"], 1000)
        self.assertEqual(finished[-1]["parts"][-1]["text"], "It says hello world.")
        self.assertEqual(finished[0]["usage"]["cache_read_input_tokens"], 100)
        self.assertNotIn(KEY, json.dumps(stored) + json.dumps(events))
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual((session["status"], session["error"]), ("idle", None))

    async def test_refusal_ends_the_run_with_a_sentence(self):
        """A refusal ends the run with the sentence that says so and is not tried again."""
        self.model.script(anthropic_reply("I can't help with", stop_reason="refusal"))
        answer = await self.prompt()
        self.assertEqual(answer.status, 200, answer.body)
        await self.events_until("error")
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertIn("declined", session["error"])
        self.assertEqual(len(self.chats()), 1)

    async def test_wrong_key_is_said_and_not_retried(self):
        """A 401 authentication_error ends the run with the key's problem, once."""
        self.model.script(HttpError.fixture("anthropic", "401_authentication_error"))
        await self.prompt()
        await self.events_until("error")
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertIn("rejected the API key", session["error"])
        self.assertNotIn(KEY, session["error"])
        self.assertEqual(len(self.chats()), 1)
