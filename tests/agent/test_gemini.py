"""The Gemini kind: the generateContent request built from the loop's messages (turns of parts,
function responses named after their calls, thought signatures sent back on their parts, tool
schemas reduced to Gemini's subset, thinking budgets, the key in x-goog-api-key and the model in
the URL), its decoder's responses beyond the shared fixture cases, the models list with its
pages, and a session through the real server against a scripted Gemini API: a tool call after
thinking, a 503 retried, the tokens (cached input counted) and cost stored and the key never
elsewhere than in its header."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json

from tests.model_server import (
    PROVIDERS_DIR,
    HttpError,
    ScriptedModel,
    gemini_error,
    gemini_event,
    gemini_events,
    gemini_reply,
    models_fixture,
)
from tests.test_loop import KEY, LoopCase
from tests.utils import call
from totem.agent.client import stream_chat
from totem.agent.context import history_messages
from totem.agent.kinds import Fetch, ProviderTarget, kind_named
from totem.agent.kinds.gemini import (
    ANSWER_TOKENS,
    BLOCKED_SENTENCE,
    NO_SIGNATURE,
    REFUSAL_SENTENCE,
    SIGNATURE_DETAIL,
    THINKING_BUDGETS,
    gemini_schema,
)
from totem.agent.provider_errors import (
    KIND_AUTH,
    KIND_CONTEXT_LENGTH,
    KIND_FORBIDDEN,
    KIND_OVERLOADED,
    KIND_RATE_LIMIT,
    ProviderError,
)
from totem.agent.stream import ChatAccumulator, StreamError

GEMINI = kind_named("gemini")
MARKER = "0123456789abcdef"
MODEL = "gemini-2.5-flash"
BASE = "https://generativelanguage.googleapis.com"
TOOLS = [{"type": "function", "function": {"name": "read", "description": "Read.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
    "additionalProperties": False}}}]
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
SIGNATURE = "CiQB0e2Kb7C1r2VtZXRoaW5nLXNpZ25lZAogYnkgR2VtaW5p"
TEXT_SIGNATURE = "CmYB0e2Kb3RleHQtc2lnbmF0dXJl"
DETAILS = [{"type": SIGNATURE_DETAIL, "call": "call_1", "signature": SIGNATURE},
           {"type": SIGNATURE_DETAIL, "signature": TEXT_SIGNATURE}]


def target(model: str = MODEL) -> ProviderTarget:
    return ProviderTarget("p1", GEMINI.chat_url("http://127.0.0.1:1", model), model, GEMINI, None, 1048576)


def stored(details: list | None = None) -> list[dict]:
    """A session as context.py reads it: a prompt with an image, a step with a text and two calls
    of read (one with arguments that are not JSON) and the signatures it came with."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}
    return [
        {"id": "u1", "role": "user", "data": {"attachments": [{"id": "a1"}]},
         "parts": [{"kind": "text", "text": "What is in a.txt?"}], "_attachments": [image]},
        {"id": "m1", "role": "assistant", "data": {"reasoning_details": DETAILS if details is None else details},
         "parts": [{"kind": "reasoning", "text": "Read a.txt first."}, {"kind": "text", "text": "Let me look."},
                   {"kind": "tool", "status": "done", "data": {"callid": "call_1", "tool": "read",
                                                               "input": {"path": "a.txt"}, "output": "hello"}},
                   {"kind": "tool", "status": "error", "data": {"callid": "call_2", "tool": "grep",
                                                                "arguments": '{"path": ', "error": "not JSON"}}]},
    ]


def messages(details: list | None = None) -> list[dict]:
    history = stored(details)
    system = {"role": "system", "content": "You are Totem."}
    return [system, *history_messages(history, {"u1": history[0]["_attachments"]}, MARKER)]


def decode(body: bytes, piece: int = 11) -> tuple[ChatAccumulator, list]:
    accumulator = ChatAccumulator()
    decoder = GEMINI.decoder(accumulator)
    events = []
    for start in range(0, len(body), piece):
        events += decoder.feed(body[start:start + piece])
    events += decoder.close() + accumulator.finish()
    return accumulator, events


def failures(events: list) -> list[StreamError]:
    return [event for event in events if isinstance(event, StreamError)]


# --- the request -------------------------------------------------------------------------------


def test_request_body_turns_of_parts():
    """The system instruction apart, the user's text and image as parts, the model's text with
    its signature, its calls as functionCall parts with args objects ({} for arguments that are
    not JSON) and the call's signature on its part, the results as functionResponse parts named
    after their calls in one user turn, the tools as functionDeclarations; the request is
    streamed as it is, the key only in x-goog-api-key."""
    given = messages()
    before = json.dumps(given)
    body = GEMINI.request_body(target(), given, TOOLS, None)
    assert list(body) == ["contents", "systemInstruction", "tools", "generationConfig"]
    assert body["systemInstruction"] == {"parts": [{"text": "You are Totem."}]}
    user, model, results = body["contents"]
    assert user == {"role": "user", "parts": [
        {"text": "What is in a.txt?"},
        {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(PNG).decode()}}]}
    assert model == {"role": "model", "parts": [
        {"text": "Let me look.", "thoughtSignature": TEXT_SIGNATURE},
        {"functionCall": {"name": "read", "args": {"path": "a.txt"}}, "thoughtSignature": SIGNATURE},
        {"functionCall": {"name": "grep", "args": {}}}]}
    assert results["role"] == "user"
    assert [part["functionResponse"]["name"] for part in results["parts"]] == ["read", "grep"]
    assert "hello" in results["parts"][0]["functionResponse"]["response"]["result"]
    assert MARKER in results["parts"][0]["functionResponse"]["response"]["result"]
    assert body["tools"] == [{"functionDeclarations": [{"name": "read", "description": "Read.", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]}]
    assert body["generationConfig"]["maxOutputTokens"] == ANSWER_TOKENS
    assert json.dumps(given) == before
    headers, request = GEMINI.stream_request(body)
    assert headers == {"Accept": "text/event-stream"} and request == body and request is not body
    assert GEMINI.auth_headers("AIza-secret") == {"x-goog-api-key": "AIza-secret"}


def test_results_go_first_and_failed_answers_are_not_sent():
    """A prompt after tool results joins their user turn (results first), two model turns in a
    row keep the later (the earlier failed part way), a last model turn is not sent, a function
    without parameters is declared without them."""
    body = GEMINI.request_body(target(), [
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": "It says"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
        {"role": "user", "content": "And now?"},
        {"role": "assistant", "content": "Half an answ"}],
        [{"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}], None)
    assert [turn["role"] for turn in body["contents"]] == ["user", "model", "user"]
    assert body["contents"][1]["parts"] == [{"functionCall": {"name": "read", "args": {}}}]
    assert body["contents"][2]["parts"] == [
        {"functionResponse": {"name": "read", "response": {"result": "out"}}}, {"text": "And now?"}]
    assert "systemInstruction" not in body
    assert body["tools"] == [{"functionDeclarations": [{"name": "now"}]}]


def test_schema_reduced_to_the_subset_gemini_takes():
    """Keywords outside Gemini's Schema go (at every depth), a nullable type list is one type
    with nullable, several types are anyOf, a string const is an enum of one, an enum of
    numbers and an unknown format go, required names only properties there are; the schema
    given is left as it was."""
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": False,
        "properties": {
            "path": {"type": "string", "description": "Where.", "pattern": "^[^/]", "default": ".",
                     "examples": ["a.txt"]},
            "limit": {"type": ["integer", "null"], "minimum": 1, "format": "int32"},
            "value": {"type": ["string", "number"]},
            "mode": {"const": "fast"},
            "level": {"type": "integer", "enum": [1, 2]},
            "url": {"type": "string", "format": "uri"},
            "items": {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "string"},
                                                 "properties": {"name": {"type": "string"}}}},
        },
        "required": ["path", "ghost"],
    }
    before = json.dumps(schema)
    assert gemini_schema(schema) == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Where."},
            "limit": {"nullable": True, "type": "integer", "minimum": 1, "format": "int32"},
            "value": {"anyOf": [{"type": "string"}, {"type": "number"}]},
            "mode": {"enum": ["fast"], "type": "string"},
            "level": {"type": "integer"},
            "url": {"type": "string"},
            "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
        },
        "required": ["path"],
    }
    assert json.dumps(schema) == before
    assert gemini_schema(None) == {} and gemini_schema({"required": ["x"]}) == {}


def test_reasoning_levels_are_thinking_budgets():
    """low, medium and high are budgets with the thoughts shown, the answer's room added to
    maxOutputTokens; none is a budget of 0 (128 for a model that always thinks); the default
    shows the thoughts at the model's budget; a model that does not think gets no
    thinkingConfig; the temperature goes in generationConfig."""
    for level, budget in THINKING_BUDGETS.items():
        config = GEMINI.request_body(target(), messages(), TOOLS, level)["generationConfig"]
        assert config == {"maxOutputTokens": ANSWER_TOKENS + budget,
                          "thinkingConfig": {"thinkingBudget": budget, "includeThoughts": True}}
    assert GEMINI.request_body(target(), messages(), TOOLS, "none")["generationConfig"]["thinkingConfig"] == {
        "thinkingBudget": 0}
    assert GEMINI.request_body(target("gemini-2.5-pro"), messages(), TOOLS, "none")["generationConfig"][
        "thinkingConfig"] == {"thinkingBudget": 128}
    assert GEMINI.request_body(target(), messages(), TOOLS, None)["generationConfig"]["thinkingConfig"] == {
        "includeThoughts": True}
    body = GEMINI.request_body(target("gemini-2.0-flash"), messages(), TOOLS, "high")
    assert body["generationConfig"] == {"maxOutputTokens": ANSWER_TOKENS}
    GEMINI.set_temperature(body, 0.2)
    assert body["generationConfig"]["temperature"] == 0.2


def test_gemini_3_gets_a_placeholder_for_calls_it_did_not_sign():
    """Gemini 3 refuses a call in the history without a signature: the first unsigned call of each
    model turn (a step another model answered) gets the placeholder Google documents, a signed one
    keeps its own; older models get none."""
    unsigned = [{"type": SIGNATURE_DETAIL, "signature": TEXT_SIGNATURE}]
    parts = GEMINI.request_body(target("gemini-3-pro-preview"), messages(unsigned), TOOLS, None)["contents"][1]["parts"]
    assert [part.get("thoughtSignature") for part in parts] == [TEXT_SIGNATURE, NO_SIGNATURE, None]
    signed = GEMINI.request_body(target("gemini-3-pro-preview"), messages(), TOOLS, None)["contents"][1]["parts"]
    assert [part.get("thoughtSignature") for part in signed] == [TEXT_SIGNATURE, SIGNATURE, None]
    older = GEMINI.request_body(target(), messages(unsigned), TOOLS, None)
    assert NO_SIGNATURE not in json.dumps(older)


def test_other_kinds_never_get_gemini_signatures():
    """A session that goes from Gemini to OpenRouter or Anthropic sends them none of Gemini's
    signatures; a step without signatures goes to Gemini without them."""
    body = kind_named("openrouter").request_body(target(), messages(), TOOLS, None)
    assert "reasoning_details" not in body["messages"][2]
    anthropic = kind_named("anthropic").request_body(target(), messages(), TOOLS, None)
    assert SIGNATURE not in json.dumps(anthropic)
    plain = GEMINI.request_body(target(), messages([]), TOOLS, None)
    assert "thoughtSignature" not in json.dumps(plain)


def test_chat_url_names_the_model():
    """The base URL works with or without a version and a trailing slash; the model goes in the
    path (with or without its models/ prefix), never the key."""
    for url in (BASE, BASE + "/", BASE + "/v1beta", BASE + "/v1/"):
        assert GEMINI.chat_url(url, MODEL) == f"{BASE}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    assert GEMINI.chat_url(BASE, "models/gemini-2.5-pro") == (
        f"{BASE}/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse")


# --- the answer --------------------------------------------------------------------------------


def test_usage_counts_thoughts_and_keeps_the_cached_count():
    """prompt_tokens is promptTokenCount (cached input among it), completion_tokens the answer's
    and the thoughts' tokens; Gemini's counts stay, cachedContentTokenCount with them."""
    body = "".join(gemini_events("Hi.", thinking="Think.", prompt_tokens=1000, cached=800, output_tokens=20,
                                 thoughts_tokens=40)).encode()
    accumulator, events = decode(body)
    result = accumulator.result()
    assert result.usage == {"promptTokenCount": 1000, "candidatesTokenCount": 20, "totalTokenCount": 1060,
                            "cachedContentTokenCount": 800, "thoughtsTokenCount": 40,
                            "prompt_tokens": 1000, "completion_tokens": 60, "total_tokens": 1060}
    assert (result.content, result.reasoning, result.finish_reason, result.failure) == ("Hi.", "Think.", "stop", None)


def test_errors_in_the_stream():
    """An error object after the 200 fails the answer: UNAVAILABLE is a passing overload,
    RESOURCE_EXHAUSTED a rate limit, INTERNAL worth a retry, INVALID_ARGUMENT not, and an input
    over the window a context error."""
    start = gemini_events("It says")[:1]
    for error, kind, retry in ((gemini_error(), KIND_OVERLOADED, True),
                               (gemini_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted"),
                                KIND_RATE_LIMIT, True),
                               (gemini_error(500, "INTERNAL", "An internal error has occurred."), "server", True),
                               (gemini_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument."),
                                "server", False),
                               (gemini_error(400, "INVALID_ARGUMENT", "The input token count (1200000) exceeds the "
                                             "maximum number of tokens allowed (1048576)."), KIND_CONTEXT_LENGTH, False)):
        accumulator, events = decode("".join(start + [error]).encode())
        (failure,) = failures(events)
        assert (failure.kind, failure.retry) == (kind, retry), error
        assert accumulator.result().content == "It "


def test_refusals_fail_with_a_sentence():
    """A finish reason of the safety filters keeps the text said and fails the answer with a
    sentence that names it, not worth a retry; a blocked prompt says so."""
    for reason in ("SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII"):
        accumulator, events = decode("".join(gemini_events("I can't", finish=reason)).encode())
        (failure,) = failures(events)
        assert (failure.message, failure.retry, failure.kind) == (
            REFUSAL_SENTENCE.format(reason=reason), False, KIND_FORBIDDEN)
        assert accumulator.result().content == "I can't"
    _, events = decode(gemini_event({"promptFeedback": {"blockReason": "OTHER"}}).encode())
    (failure,) = failures(events)
    assert failure.message == BLOCKED_SENTENCE.format(reason="OTHER") and not failure.retry


def test_calls_get_ids_and_signatures_name_them():
    """Calls without an id get one made from the response's id and their place (the same
    answer, the same ids), a call's own id is kept; the signature names the call it came on;
    several calls in one answer are several calls; MAX_TOKENS is length."""
    events = gemini_events(tool_calls=[("read", {"path": "a"}), ("read", {"path": "b"})], signature=SIGNATURE,
                           response_id="r-1")
    first, _ = decode("".join(events).encode())
    again, _ = decode("".join(events).encode(), piece=3)
    calls = first.result().tool_calls
    assert [(c.name, c.parsed_arguments()) for c in calls] == [("read", {"path": "a"}), ("read", {"path": "b"})]
    assert [c.id for c in calls] == [c.id for c in again.result().tool_calls]
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") and len(c.id) <= 40 for c in calls)
    assert first.result().reasoning_details == [{"type": SIGNATURE_DETAIL, "call": calls[0].id,
                                                 "signature": SIGNATURE}]
    assert first.result().finish_reason == "tool_calls"
    own = gemini_event({"candidates": [{"content": {"parts": [{"functionCall": {"id": "fc-7", "name": "read",
                                                                                "args": {}}}]},
                                        "finishReason": "MAX_TOKENS"}]})
    accumulator, _ = decode(own.encode())
    assert [c.id for c in accumulator.result().tool_calls] == ["fc-7"]
    assert accumulator.result().finish_reason == "length"


def test_whole_answer_and_broken_data():
    """A whole answer (a list of responses, what the API sends without alt=sse) reads as the
    stream would; data that is not JSON fails the answer as a broken stream."""
    accumulator = ChatAccumulator()
    responses = [json.loads(event[len("data: "):]) for event in gemini_events("Hello there.", thinking="Hm.")]
    GEMINI.decoder(accumulator).whole(responses)
    accumulator.finish()
    result = accumulator.result()
    assert (result.content, result.reasoning, result.finish_reason, result.failure) == (
        "Hello there.", "Hm.", "stop", None)
    _, events = decode(b"data: {not json\r\n\r\n")
    assert failures(events)[0].kind == "invalid_response"


# --- the wire: key, models, HTTP errors ---------------------------------------------------------


def test_models_pages_and_key_header():
    """GET /v1beta/models follows nextPageToken; only the models that generate content are
    listed, without their models/ prefix, their window inputTokenLimit, all with tools; the key
    goes only as x-goog-api-key, never in the URL."""
    async def scenario():
        async with ScriptedModel() as model:
            fixture = json.loads((PROVIDERS_DIR / "models" / "gemini_v1beta_models.json").read_text())
            first = models_fixture("gemini_v1beta_models")
            model.serve_json("GET", "/v1beta/models?pageSize=1000", first)
            model.serve_json("GET", f"/v1beta/models?pageSize=1000&pageToken={first['nextPageToken']}",
                             fixture["page2"])
            found = await GEMINI.models(Fetch(model.base, "AIza-secret", 5.0, GEMINI))
        assert [(m["id"], m["name"], m["context"], m["tools"], m["reasoning"]) for m in found] == [
            ("gemini-2.5-pro", "Gemini 2.5 Pro", 1048576, True, True),
            ("gemini-2.5-flash", "Gemini 2.5 Flash", 1048576, True, True),
            ("gemini-2.5-flash-lite", "Gemini 2.5 Flash-Lite", 1048576, True, True),
            ("gemini-2.0-flash", "Gemini 2.0 Flash", 1048576, True, None)]
        assert len(model.requests) == 2
        for request in model.requests:
            assert request.headers["x-goog-api-key"] == "AIza-secret"
            assert "authorization" not in request.headers and "AIza" not in request.path

    asyncio.run(scenario())


def test_http_errors_never_hold_the_key():
    """A 503 before the stream is a retryable overload, an input over the window states its
    window, a key that is not valid (a 400) is the key's problem; no message holds the key."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(HttpError.fixture("gemini", "503_unavailable"),
                         HttpError.fixture("gemini", "400_input_token_count_exceeded"),
                         HttpError.fixture("gemini", "400_api_key_invalid"))
            errors = []
            for _ in range(3):
                try:
                    async with contextlib.aclosing(stream_chat(GEMINI, GEMINI.chat_url(model.base, MODEL),
                                                               "AIza-secret", {"contents": []})) as stream:
                        [event async for event in stream]
                except ProviderError as exc:
                    errors.append(exc)
        assert [(e.kind, e.retry, e.window) for e in errors] == [(KIND_OVERLOADED, True, None),
                                                                 (KIND_CONTEXT_LENGTH, False, 1048576),
                                                                 (KIND_AUTH, False, None)]
        assert all("AIza-secret" not in repr(e) for e in errors)
        assert model.requests[0].headers["x-goog-api-key"] == "AIza-secret"
        assert model.requests[0].path == f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"

    asyncio.run(scenario())


# --- through the real server -------------------------------------------------------------------


class GeminiLoopTest(LoopCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        await self.use_only("Gemini", "gemini", "gemini_v1beta_models", MODEL)

    def chats(self):
        return [r for r in self.model.requests if r.method == "POST"]

    async def test_thinking_tool_call_unavailable_retried_tokens_and_cost(self):
        """A prompt with thinking: the model thinks and reads a.txt; the next request sends the
        functionCall part back with its thoughtSignature unchanged and the functionResponse named
        read; that request is answered 503 UNAVAILABLE and tried again; the key goes only as
        x-goog-api-key, the model in the URL; each answer's tokens (the cached input counted) and
        cost (the template's price of the model, USD 0.30 and 2.50 per million, 0.03 cached) are
        stored."""
        catalog = (await call(self.app, "providers_catalog")).json()
        listed = next(m for m in catalog["models"] if m["id"] == self.modelref)
        self.assertEqual((listed["context"], listed["tools"], listed["reasoning"], listed["price"]),
                         (1048576, True, True, {"input": 0.3, "output": 2.5, "cacheread": 0.03}))
        self.assertNotIn(f"{self.provider['id']}/text-embedding-004", [m["id"] for m in catalog["models"]])
        thinking = "The person asks about a.txt: read it."
        self.model.script(
            gemini_reply(thinking=thinking, signature=SIGNATURE, tool_calls=[("read", {"path": "a.txt"})],
                         prompt_tokens=1000, cached=800, output_tokens=20, thoughts_tokens=40, response_id="resp-1"),
            HttpError.fixture("gemini", "503_unavailable"),
            gemini_reply("It says hello world.", prompt_tokens=1100, output_tokens=8))
        answer = await self.prompt(reasoning="high")
        self.assertEqual(answer.status, 200, answer.body)
        events = await self.events_until("idle")
        first, refused, retried = self.chats()
        for request in (first, refused, retried):
            self.assertEqual(request.path, f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse")
            self.assertEqual(request.headers["x-goog-api-key"], KEY)
            self.assertEqual(request.body["generationConfig"]["thinkingConfig"],
                             {"thinkingBudget": 24576, "includeThoughts": True})
        for request in self.model.requests:
            self.assertNotIn("authorization", request.headers)
            self.assertNotIn(KEY, request.raw_body.decode() + request.path)
        self.assertEqual(first.body["contents"], [{"role": "user", "parts": [{"text": "Look at a.txt"}]}])
        declarations = first.body["tools"][0]["functionDeclarations"]
        self.assertIn("read", [declaration["name"] for declaration in declarations])
        self.assertNotIn("additionalProperties", json.dumps(declarations))
        user, model, results = refused.body["contents"]
        self.assertEqual(model, {"role": "model", "parts": [
            {"functionCall": {"name": "read", "args": {"path": "a.txt"}}, "thoughtSignature": SIGNATURE}]})
        (result,) = results["parts"]
        self.assertEqual(result["functionResponse"]["name"], "read")
        self.assertIn("hello world", result["functionResponse"]["response"]["result"])
        self.assertEqual(retried.body, refused.body)
        (retry_note,) = [e["data"] for e in events if e["type"] == "error"]
        self.assertTrue(retry_note["retry"])
        self.assertIn("overloaded", retry_note["message"])
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        finished = [m for m in stored if m["role"] == "assistant" and not (m["data"] or {}).get("failed")]
        callid = next(p for p in finished[0]["parts"] if p["kind"] == "tool")["data"]["callid"]
        self.assertEqual(finished[0]["data"]["reasoning_details"],
                         [{"type": SIGNATURE_DETAIL, "call": callid, "signature": SIGNATURE}])
        self.assertEqual(finished[0]["data"]["tokens"],  # the cached 800 at the cache read price
                         {"input": 1000, "output": 60, "estimated": False, "cached": 800,
                          "cost": round((200 * 0.3 + 800 * 0.03 + 60 * 2.5) / 1e6, 8)})
        self.assertEqual(finished[0]["usage"]["cachedContentTokenCount"], 800)
        self.assertEqual(finished[-1]["data"]["tokens"]["input"], 1100)
        self.assertEqual(finished[-1]["parts"][-1]["text"], "It says hello world.")
        self.assertNotIn(KEY, json.dumps(stored) + json.dumps(events))
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual((session["status"], session["error"]), ("idle", None))

    async def test_safety_refusal_ends_the_run_with_a_sentence(self):
        """A SAFETY finish ends the run with the sentence that says so and is not tried again."""
        self.model.script(gemini_reply("I can't help with", finish="SAFETY"))
        answer = await self.prompt()
        self.assertEqual(answer.status, 200, answer.body)
        await self.events_until("error")
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertIn("declined", session["error"])
        self.assertEqual(len(self.chats()), 1)

    async def test_key_not_valid_is_said_and_not_retried(self):
        """Google's 400 "API key not valid" ends the run with the key's problem, once."""
        self.model.script(HttpError.fixture("gemini", "400_api_key_invalid"))
        await self.prompt()
        await self.events_until("error")
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertIn("rejected the API key", session["error"])
        self.assertNotIn(KEY, session["error"])
        self.assertEqual(len(self.chats()), 1)
