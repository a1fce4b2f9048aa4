"""The provider kinds behind `ProviderKind`: each kind's request body and streamed request, its
decoder on its own recorded wire format, the table, and a made-up third kind that runs end to
end through the real loop against the scripted model without any change elsewhere."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from tests.model_server import ScriptedModel, Stream, expected_cases, ndjson_case, sse_cases
from tests.test_loop import LoopCase
from tests.utils import call
from totem.agent.context import assistant_messages, history_messages
from totem.agent.kinds import KINDS, Fetch, ProviderTarget, kind_named
from totem.agent.kinds.base import model_info
from totem.agent.kinds.ollama import MAX_OLLAMA_NUM_CTX, native_messages
from totem.agent.kinds.openai import merge_reasoning_details
from totem.agent.providers import load_templates
from totem.agent.sse import NdjsonDecoder
from totem.agent.stream import ChatAccumulator

MARKER = "0123456789abcdef"
TOOLS = [{"type": "function", "function": {"name": "read", "description": "Read.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}]
OPENAI_COMPATIBLE = ("openai", "groq", "mistral", "deepseek", "together", "llamacpp", "lmstudio")
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
DETAILS = [{"type": "reasoning.text", "text": "Look", "format": "anthropic-claude-v1", "index": 0},
           {"type": "reasoning.text", "text": " first.", "format": "anthropic-claude-v1", "index": 0},
           {"type": "reasoning.text", "signature": "c2ln", "format": "anthropic-claude-v1", "index": 0}]


def target(kind: str, context: int | None = None) -> ProviderTarget:
    return ProviderTarget("p1", "http://127.0.0.1:1/chat", "m", kind_named(kind), None, context)


def history() -> list[dict]:
    """A stored session as context.py reads it: a prompt with an image, a tool step with the
    provider's reasoning_details, and the tool's result."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}
    return [
        {"id": "u1", "role": "user", "data": {"attachments": [{"id": "a1"}]},
         "parts": [{"kind": "text", "text": "What is in a.txt?"}], "_attachments": [image]},
        {"id": "m1", "role": "assistant", "data": {"reasoning_details": DETAILS},
         "parts": [{"kind": "reasoning", "text": "Look first."},
                   {"kind": "tool", "status": "done", "data": {"callid": "call_1", "tool": "read",
                                                               "input": {"path": "a.txt"}, "output": "hello"}},
                   {"kind": "tool", "status": "done", "data": {"callid": "call_2", "tool": "git_status",
                                                               "arguments": "", "output": "clean"}}]},
    ]


def messages() -> list[dict]:
    stored = history()
    return history_messages(stored, {"u1": stored[0]["_attachments"]}, MARKER)


# --- the request each kind builds ------------------------------------------------------------


@pytest.mark.parametrize("name", OPENAI_COMPATIBLE)
def test_openai_compatible_kind_body_and_stream_request(name):
    """An OpenAI-compatible kind sends the messages as they are (without OpenRouter's
    reasoning_details), reasoning_effort, the tools, and asks for SSE with usage."""
    kind = kind_named(name)
    body = kind.request_body(target(name), messages(), TOOLS, "high")
    expected = messages()
    assert "reasoning_details" in expected[1]
    expected[1] = {k: v for k, v in expected[1].items() if k != "reasoning_details"}
    assert body == {"model": "m", "messages": expected, "reasoning_effort": "high", "tools": TOOLS}
    assert [c["function"]["arguments"] for c in body["messages"][1]["tool_calls"]] == ['{"path": "a.txt"}', "{}"]
    assert "reasoning_effort" not in kind.request_body(target(name), messages(), TOOLS, "none")
    assert "reasoning_effort" not in kind.request_body(target(name), messages(), TOOLS, None)
    headers, request = kind.stream_request({**body, "stream_options": {"include_obfuscation": False}})
    assert headers == {"Accept": "text/event-stream"}
    assert request == {**body, "stream": True, "stream_options": {"include_obfuscation": False,
                                                                  "include_usage": True}}
    assert "stream" not in body  # the body given is left as it was


def test_openrouter_kind_sends_reasoning_details_merged_and_attribution():
    """OpenRouter gets reasoning_details back on the assistant message, merged into whole blocks,
    and the attribution header."""
    kind = kind_named("openrouter")
    body = kind.request_body(target("openrouter"), messages(), TOOLS, "low")
    assistant = body["messages"][1]
    assert assistant["reasoning_details"] == [{"type": "reasoning.text", "text": "Look first.",
                                               "signature": "c2ln", "format": "anthropic-claude-v1", "index": 0}]
    assert body["reasoning_effort"] == "low"
    headers, request = kind.stream_request(body)
    assert headers == {"Accept": "text/event-stream", "X-Title": "Totem"}
    assert request["stream_options"] == {"include_usage": True}


def test_ollama_kind_native_body_and_stream_request():
    """Ollama's native body: num_ctx from the target's window (the kind's default when nothing says
    it: the server must use the window Totem counts on), string content with images apart,
    tool-call arguments as objects ("" is {}), think, and NDJSON without stream_options."""
    kind = kind_named("ollama")
    body = kind.request_body(target("ollama", 8192), messages(), TOOLS, "medium")
    assert list(body) == ["model", "options", "messages", "think", "tools"]
    assert (body["options"], body["think"], body["tools"]) == ({"num_ctx": 8192}, True, TOOLS)
    native = body["messages"]
    assert native[0] == {"role": "user", "content": "What is in a.txt?", "images": [base64.b64encode(PNG).decode()]}
    assert native[1]["tool_calls"] == [{"function": {"name": "read", "arguments": {"path": "a.txt"}}},
                                       {"function": {"name": "git_status", "arguments": {}}}]
    assert "reasoning_details" not in native[1]
    assert native[2] == {"role": "tool", "content": messages()[2]["content"]}
    assert kind.request_body(target("ollama"), messages(), TOOLS, "none")["think"] is False
    assert kind.request_body(target("ollama"), messages(), TOOLS, None)["options"] == {"num_ctx": 8192}
    assert "think" not in kind.request_body(target("ollama"), messages(), TOOLS, None)
    headers, request = kind.stream_request(body)
    assert headers == {"Accept": "application/x-ndjson"}
    assert request == {**body, "stream": True}


@pytest.mark.parametrize("name,url,chat", [
    ("ollama", "http://127.0.0.1:11434/v1/", "http://127.0.0.1:11434/api/chat"),
    ("llamacpp", "http://127.0.0.1:8080", "http://127.0.0.1:8080/v1/chat/completions"),
    ("lmstudio", "http://127.0.0.1:1234/v1", "http://127.0.0.1:1234/v1/chat/completions"),
    ("openrouter", "https://openrouter.ai/api/v1/", "https://openrouter.ai/api/v1/chat/completions"),
    ("deepseek", "https://api.deepseek.com", "https://api.deepseek.com/chat/completions"),
    ("anthropic", "https://api.anthropic.com", "https://api.anthropic.com/v1/messages"),
])
def test_kind_chat_url(name, url, chat):
    """Each kind finds its chat endpoint from the saved base URL."""
    assert kind_named(name).chat_url(url) == chat


def test_every_template_kind_has_an_adapter():
    """The table holds an adapter for every template of providers.json, under its kind."""
    assert {t["kind"] for t in load_templates()} == set(KINDS)
    assert all(kind.name == name for name, kind in KINDS.items())
    with pytest.raises(TypeError):
        KINDS["mine"] = kind_named("openai")  # type: ignore[index]  # one table, read-only


# --- each kind reads its own recorded wire and sends its calls back as the wire wants ---------


def decode(kind_name: str, body: bytes, piece: int = 7) -> ChatAccumulator:
    accumulator = ChatAccumulator()
    decoder = kind_named(kind_name).decoder(accumulator)
    for start in range(0, len(body), piece):
        decoder.feed(body[start:start + piece])
    decoder.close()
    accumulator.finish()
    return accumulator


def stored_step(result) -> dict:
    """An answer stored as the loop stores it: one tool part per call, parsed arguments as input."""
    parts = [{"kind": "tool", "status": "done", "data": {"callid": c.id, "tool": c.name,
                                                         "input": c.parsed_arguments(), "output": "ok"}}
             for c in result.tool_calls]
    return {"id": "m", "role": "assistant", "data": {"reasoning_details": result.reasoning_details},
            "parts": [{"kind": "text", "text": result.content}, *parts]}


FIXTURE_CALLS = [(p, c) for p in OPENAI_COMPATIBLE + ("openrouter",)
                 for c, e in expected_cases(p).items()
                 if e["tool_calls"] and all(t["arguments_valid_json"] for t in e["tool_calls"])]


@pytest.mark.parametrize("name,case", FIXTURE_CALLS, ids=[f"{p}-{c}" for p, c in FIXTURE_CALLS])
def test_openai_compatible_kind_fixture_calls_round_trip(name, case):
    """A kind decodes its recorded tool calls and sends them back as JSON text with the same
    arguments ("" as {})."""
    result = decode(name, sse_cases(name)[case]).result()
    expected = expected_cases(name)[case]["tool_calls"]
    body = kind_named(name).request_body(target(name), assistant_messages(stored_step(result), MARKER), TOOLS, None)
    calls = body["messages"][0]["tool_calls"]
    assert [(c["id"], c["function"]["name"]) for c in calls] == [(t["id"], t["name"]) for t in expected]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [t["arguments_parsed"] for t in expected]
    assert all(c["function"]["arguments"].strip() for c in calls)


def test_ollama_kind_fixture_calls_round_trip():
    """Ollama's native tool calls (object arguments) are decoded and sent back as objects."""
    result = decode("ollama", ndjson_case("chat_tool_calls")).result()
    body = kind_named("ollama").request_body(target("ollama"), assistant_messages(stored_step(result), MARKER),
                                             TOOLS, None)
    assert body["messages"][0]["tool_calls"] == [
        {"function": {"name": "read_file", "arguments": {"path": "README.md"}}},
        {"function": {"name": "list_dir", "arguments": {"path": "src", "depth": 1}}}]


def test_openrouter_fixture_reasoning_details_merged_whole():
    """The streamed fragments of a reasoning.text block go back as one block with the whole text
    and the signature of its last fragment; summary and encrypted details go back as they came."""
    anthropic = decode("openrouter", sse_cases("openrouter")["reasoning_anthropic_with_details"]).result()
    expected = expected_cases("openrouter")["reasoning_anthropic_with_details"]
    assert anthropic.reasoning_details == expected["reasoning_details"]  # stored verbatim
    merged = merge_reasoning_details(anthropic.reasoning_details)
    signature = expected["reasoning_details"][-1]["signature"]
    assert merged == [{"type": "reasoning.text", "text": expected["reasoning"], "signature": signature,
                       "format": "anthropic-claude-v1", "index": 0}]
    assert merge_reasoning_details(merged) == merged
    encrypted = expected_cases("openrouter")["reasoning_openai_encrypted"]["reasoning_details"]
    assert merge_reasoning_details(encrypted) == encrypted


def test_ollama_native_messages_plain_and_bad_arguments():
    """Plain content stays a string; arguments that are not a JSON object become {}."""
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
             for arguments in ("", "[1]", "{oops")]
    native = native_messages([{"role": "system", "content": "s"}, {"role": "assistant", "content": None,
                                                                   "tool_calls": calls}])
    assert native[0] == {"role": "system", "content": "s"}
    assert [c["function"]["arguments"] for c in native[1]["tool_calls"]] == [{}, {}, {}]


def test_ollama_kind_window_capped_and_from_show():
    """The window comes from the cached list or /api/show, capped at MAX_OLLAMA_NUM_CTX; a server
    that cannot say gives None."""
    async def scenario():
        async with ScriptedModel() as model:
            model.serve_models("ollama_api_show")
            fetch = Fetch(model.base, None, 5.0)
            kind = kind_named("ollama")
            assert await kind.context_window(fetch, "m", 4096) == 4096
            assert await kind.context_window(fetch, "m", 10 ** 6) == MAX_OLLAMA_NUM_CTX
            assert model.requests == []
            assert await kind.context_window(fetch, "qwen3-coder:30b", None) == MAX_OLLAMA_NUM_CTX
            assert [r.path for r in model.requests] == ["/api/show"]
            assert await kind.context_window(Fetch(model.base + "/nothing", None, 5.0), "m", None) is None
            assert await kind_named("openai").context_window(fetch, "m", None) is None

    asyncio.run(scenario())


# --- a third kind, made up here, through the real loop ---------------------------------------


class LinesKind:
    """A made-up wire: the last message as `prompt`, the answer as lines `{"say": text}` ending
    with `{"end": reason}`. It implements ProviderKind from scratch."""

    name = "lines"
    default_context = 8192

    def chat_url(self, url: str, model: str = "") -> str:
        return url.rstrip("/") + "/chat/completions"

    async def models(self, fetch):
        return [model_info("lines-1", "Lines One", 32000, False, False)]

    async def context_window(self, fetch, model, listed):
        return listed

    def request_body(self, target, messages, tools, reasoning):
        return {"model": target.model, "prompt": messages[-1]["content"], "turns": len(messages),
                "tools": [t["function"]["name"] for t in tools]}

    def stream_request(self, body):
        return {"Accept": "application/x-lines"}, {**body, "stream": "lines"}

    def decoder(self, accumulator):
        return LinesAnswer(accumulator)


class LinesAnswer:
    def __init__(self, accumulator):
        self._accumulator = accumulator
        self._lines = NdjsonDecoder()

    def feed(self, data):
        return [e for line in self._lines.feed(data) for e in self._chunk(line)]

    def close(self):
        return [e for line in self._lines.close() for e in self._chunk(line)]

    def whole(self, body):
        return self._chunk(body)

    def _chunk(self, line):
        if "say" in line:
            return self._accumulator.feed({"choices": [{"index": 0, "delta": {"content": line["say"]}}]})
        return self._accumulator.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": line["end"]}]})


class ThirdKindTest(LoopCase):
    async def test_third_kind_runs_end_to_end(self):
        """A kind added with its template is listed, saved, called and read through the same
        loop, client and catalog, with its own body, Accept header and framing."""
        self.app.providers.add_kind(LinesKind(), {"id": "lines", "name": "Lines", "kind": "lines",
                                                  "url": self.model.url, "key": "none", "local": False,
                                                  "icon": "lines"})
        templates = (await call(self.app, "providers_templates")).json()
        self.assertIn("lines", [t["kind"] for t in templates])
        answer = await call(self.app, "providers_save", {"name": "Lines", "kind": "lines", "url": self.model.url})
        self.assertEqual(answer.status, 200, answer.body)
        providerid = answer.json()["id"]
        catalog = (await call(self.app, "providers_catalog")).json()
        self.assertIn(f"{providerid}/lines-1", [m["id"] for m in catalog["models"]])
        self.model.script(Stream(['{"say": "Hello "}\n', '{"say": "from lines"}\n', '{"end": "stop"}'],
                                 done=False, content_type="application/x-lines"))
        answer = await call(self.app, "sessions_prompt", {"text": "Say hello", "model": f"{providerid}/lines-1"},
                            ident=self.session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        events = await self.events_until("idle")
        self.assertNotIn("error", [e["type"] for e in events])
        (request,) = [r for r in self.model.requests if r.method == "POST"]  # the catalog GETs /v1/models
        self.assertEqual((request.path, request.headers["accept"]), ("/v1/chat/completions", "application/x-lines"))
        self.assertEqual(request.body, {"model": "lines-1", "prompt": "Say hello", "turns": 2,
                                        "tools": self.app.runs.registry.names(), "stream": "lines"})
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        self.assertEqual(stored[-1]["parts"][0]["text"], "Hello from lines")

    async def test_add_kind_refuses_a_template_of_another_kind(self):
        """A template must name the kind of the adapter it comes with and hold every field."""
        with self.assertRaises(ValueError):
            self.app.providers.add_kind(LinesKind(), {"id": "x", "name": "X", "kind": "other", "url": "http://x",
                                                      "key": "none", "local": False, "icon": "x"})
        with self.assertRaises(ValueError):
            self.app.providers.add_kind(LinesKind(), {"kind": "lines"})

