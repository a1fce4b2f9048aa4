"""A scripted OpenAI-compatible model server for tests: the provider edge, which we do not own.

`async with ScriptedModel() as model:` listens on 127.0.0.1 (a free port) and answers
`POST /v1/chat/completions` (and Ollama's `POST /api/chat`, Anthropic's `POST /v1/messages`,
Gemini's `POST /v1beta/models/MODEL:streamGenerateContent`) from a queue filled by
`model.script(...)`: a recorded fixture case replayed byte for byte in random-sized TCP pieces,
a constructed stream of real `chat.completion.chunk`s, an HTTP error, a stall, a hang-up, or a
fast stream for benchmarks. Every request is recorded in `model.requests`. The models endpoints
answer from `fixtures/providers/models/*.json` once `model.serve_models(...)` asks for them.

Must not import anything from Totem: it stands for the outside world. It speaks just enough
HTTP/1.1 (one request per connection, `Connection: close`) to be a faithful peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import itertools
import json
import os
import random
import re
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The providers' real wire formats, kept with the tests; TOTEM_FIXTURES points elsewhere.
FIXTURES_DIR = Path(os.environ.get("TOTEM_FIXTURES", Path(__file__).resolve().parent / "fixtures"))
PROVIDERS_DIR = FIXTURES_DIR / "providers"
MAX_REQUEST_HEAD_BYTES = 64 * 1024
MAX_REQUEST_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_PIECE = 64
FAST_WRITE_BYTES = 64 * 1024
MODEL_ID = "scripted-model"
HOLD_LIMIT_S = 60.0  # a held stream goes on by itself after this, so a test that fails never hangs

# Where each models fixture is served (the server's base is /v1 whatever the real provider's is).
MODEL_ROUTES = {
    "openai_v1_models": ("GET", "/v1/models"),
    "deepseek_models": ("GET", "/v1/models"),
    "groq_models": ("GET", "/v1/models"),
    "mistral_models": ("GET", "/v1/models"),
    "together_models": ("GET", "/v1/models"),
    "openrouter_api_v1_models": ("GET", "/v1/models"),
    "llamacpp_v1_models": ("GET", "/v1/models"),
    "llamacpp_props": ("GET", "/props"),
    "lmstudio_api_v0_models": ("GET", "/api/v0/models"),
    "ollama_api_tags": ("GET", "/api/tags"),
    "ollama_api_show": ("POST", "/api/show"),
    "ollama_api_ps": ("GET", "/api/ps"),
    "anthropic_v1_models": ("GET", "/v1/models"),
    "gemini_v1beta_models": ("GET", "/v1beta/models"),
}


# --- Fixture files ---------------------------------------------------------------------------


def sse_cases(provider: str) -> dict[str, bytes]:
    """The exact response bodies of `providers/NAME.sse`, by case name."""
    data = (PROVIDERS_DIR / f"{provider}.sse").read_bytes()
    parts = re.split(rb"(?m)^: case ([^\r\n]*)\r?\n", data)
    return {parts[i].decode(): parts[i + 1] for i in range(1, len(parts), 2)}


def expected_cases(provider: str) -> dict[str, dict]:
    """`providers/NAME.expected.json`: what a correct accumulator produces per case."""
    return json.loads((PROVIDERS_DIR / f"{provider}.expected.json").read_text())


def stream_providers() -> list[str]:
    """Every provider that has an `.expected.json`."""
    return sorted(p.name.split(".")[0] for p in PROVIDERS_DIR.glob("*.expected.json"))


def error_fixtures() -> list[dict]:
    """`providers/errors.json`: non-200 answers with status, headers and exact body."""
    return json.loads((PROVIDERS_DIR / "errors.json").read_text())


def ndjson_case(case: str) -> bytes:
    """An Ollama native /api/chat body from `providers/ollama-native/CASE.ndjson`."""
    return (PROVIDERS_DIR / "ollama-native" / f"{case}.ndjson").read_bytes()


def models_fixture(name: str) -> Any:
    """The `response` of `providers/models/NAME.json`."""
    return json.loads((PROVIDERS_DIR / "models" / f"{name}.json").read_text())["response"]


# --- Chunk builders (the OpenAI wire format, as the real servers emit it) ---------------------


def chunk(delta: dict | None = None, finish_reason: str | None = None, *, usage: Any = None,
          choices: bool = True) -> dict:
    """One `chat.completion.chunk`; `choices=False` makes the final usage chunk."""
    body: dict[str, Any] = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk",
                            "created": 1786000000, "model": MODEL_ID}
    body["choices"] = [{"index": 0, "delta": delta or {}, "logprobs": None,
                        "finish_reason": finish_reason}] if choices else []
    if usage is not None:
        body["usage"] = usage
    return body


def _split_text(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i:i + size] for i in range(0, len(text), size)]


def text_chunks(text: str, pieces: int = 4) -> list[dict]:
    """The answer text in about `pieces` content deltas."""
    return [chunk({"content": part}) for part in _split_text(text, pieces)]


def reasoning_chunks(text: str, pieces: int = 4, field_name: str = "reasoning_content") -> list[dict]:
    """Thinking deltas under `reasoning_content` (DeepSeek, llama.cpp) or `reasoning` (Ollama)."""
    return [chunk({"content": None, field_name: part}) for part in _split_text(text, pieces)]


def tool_call_chunks(name: str, arguments: dict | str, *, index: int = 0,
                     call_id: str | None = None, fragments: int = 3) -> list[dict]:
    """One tool call: a header with id and name then argument fragments (OpenAI), or whole in
    one delta when `fragments=1` (Groq, Ollama)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, separators=(",", ":"))
    call_id = call_id or f"call_scripted{index:011d}"
    if fragments <= 1:
        whole = {"index": index, "id": call_id, "type": "function",
                 "function": {"name": name, "arguments": text}}
        return [chunk({"tool_calls": [whole]})]
    header = {"index": index, "id": call_id, "type": "function",
              "function": {"name": name, "arguments": ""}}
    parts = [chunk({"role": "assistant", "content": None, "tool_calls": [header]})]
    for piece in _split_text(text, fragments):
        parts.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    return parts


def finish_chunk(reason: str = "stop") -> dict:
    """The chunk with an empty delta that carries finish_reason."""
    return chunk({}, reason)


def usage_chunk(prompt_tokens: int = 10, completion_tokens: int = 5) -> dict:
    """The final `choices: []` chunk of `stream_options.include_usage`."""
    return chunk(usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens}, choices=False)


def reply(text: str = "", *, reasoning: str = "", tool_calls: tuple | list = (),
          finish_reason: str | None = None, usage: bool = True, fragments: int = 3,
          **stream_options: Any) -> Stream:
    """A whole answer: reasoning, text, tool calls ((name, arguments) pairs or dicts with name,
    arguments and id), the finish chunk, the usage chunk and [DONE]."""
    events: list[Any] = [chunk({"role": "assistant", "content": ""})]
    if reasoning:
        events += reasoning_chunks(reasoning)
    if text:
        events += text_chunks(text)
    for index, call in enumerate(tool_calls):
        if isinstance(call, dict):
            name, arguments, call_id = call["name"], call.get("arguments", {}), call.get("id")
        else:
            (name, arguments), call_id = call, None
        events += tool_call_chunks(name, arguments, index=index, call_id=call_id, fragments=fragments)
    events.append(finish_chunk(finish_reason or ("tool_calls" if tool_calls else "stop")))
    if usage:
        events.append(usage_chunk())
    return Stream(events, **stream_options)


def encode_events(events: list[Any], done: bool = True) -> bytes:
    """SSE text: dicts become `data: {json}` events, strings are sent as they are."""
    out = [e if isinstance(e, str) else f"data: {json.dumps(e, separators=(',', ':'))}\n\n"
           for e in events]
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()


# --- Anthropic's Messages API events (fixtures/providers/anthropic.md) --------------------------


def anthropic_event(data: dict) -> str:
    """One server-sent event of the Messages API: its `event:` name is its data's `type`."""
    return f"event: {data['type']}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def anthropic_error(kind: str = "overloaded_error", message: str = "Overloaded") -> str:
    """The `error` event a stream may end with after its 200."""
    return anthropic_event({"type": "error", "error": {"type": kind, "message": message}})


def anthropic_events(text: str = "", *, thinking: tuple[str, str] | None = None, redacted: str | None = None,
                     tool_calls: tuple | list = (), stop_reason: str | None = None, input_tokens: int = 10,
                     cache_read: int = 0, cache_write: int = 0, output_tokens: int = 5) -> list[str]:
    """A whole answer as the Messages API streams it: message_start with the input counts, a
    `redacted_thinking` block (its data), a thinking block ((text, signature)), the text, the tool
    calls ((name, arguments) pairs or dicts with name, arguments and id), message_delta with the
    stop reason and the output count, message_stop."""
    usage = {"input_tokens": input_tokens, "cache_creation_input_tokens": cache_write,
             "cache_read_input_tokens": cache_read, "output_tokens": 1}
    events = [anthropic_event({"type": "message_start", "message": {
        "id": "msg_scripted", "type": "message", "role": "assistant", "model": MODEL_ID, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage}}), anthropic_event({"type": "ping"})]
    blocks: list[tuple[dict, list[dict]]] = []
    if redacted is not None:
        blocks.append(({"type": "redacted_thinking", "data": redacted}, []))
    if thinking is not None:
        blocks.append(({"type": "thinking", "thinking": "", "signature": ""},
                       [{"type": "thinking_delta", "thinking": part} for part in _split_text(thinking[0], 3)]
                       + [{"type": "signature_delta", "signature": thinking[1]}]))
    if text:
        blocks.append(({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in _split_text(text, 4)]))
    for index, call in enumerate(tool_calls):
        if isinstance(call, dict):
            name, arguments, call_id = call["name"], call.get("arguments", {}), call.get("id")
        else:
            (name, arguments), call_id = call, None
        whole = arguments if isinstance(arguments, str) else json.dumps(arguments, separators=(",", ":"))
        blocks.append(({"type": "tool_use", "id": call_id or f"toolu_scripted{index:011d}", "name": name, "input": {}},
                       [{"type": "input_json_delta", "partial_json": p} for p in ["", *_split_text(whole, 3)]]))
    for index, (block, deltas) in enumerate(blocks):
        events.append(anthropic_event({"type": "content_block_start", "index": index, "content_block": block}))
        events += [anthropic_event({"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
        events.append(anthropic_event({"type": "content_block_stop", "index": index}))
    reason = stop_reason or ("tool_use" if tool_calls else "end_turn")
    events.append(anthropic_event({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None},
                                   "usage": {"output_tokens": output_tokens}}))
    events.append(anthropic_event({"type": "message_stop"}))
    return events


def anthropic_reply(text: str = "", *, max_piece: int = DEFAULT_MAX_PIECE, **options: Any) -> Stream:
    """`anthropic_events` as a scripted stream (no [DONE]: the Messages API has none)."""
    return Stream(anthropic_events(text, **options), done=False, max_piece=max_piece)


# --- Gemini's GenerateContentResponses (fixtures/providers/gemini.md) ----------------------------


_RESPONSE_IDS = itertools.count(1)


def gemini_event(data: dict) -> str:
    """One server-sent event of streamGenerateContent?alt=sse (Google ends its lines with CRLF)."""
    return f"data: {json.dumps(data, separators=(',', ':'))}\r\n\r\n"


def gemini_error(code: int = 503, status: str = "UNAVAILABLE",
                 message: str = "The model is overloaded. Please try again later.") -> str:
    """The error object a stream may end with after its 200."""
    return gemini_event({"error": {"code": code, "message": message, "status": status}})


def gemini_events(text: str = "", *, thinking: str | None = None, signature: str | None = None,
                  tool_calls: tuple | list = (), finish: str | None = None, prompt_tokens: int = 10,
                  cached: int = 0, output_tokens: int = 5, thoughts_tokens: int = 0,
                  response_id: str | None = None) -> list[str]:
    """A whole answer as Gemini streams it, one response per part: thought text (thought: true),
    the text, the calls ((name, args) pairs, each a whole functionCall part; the first carries
    `signature`, or the text does when there is no call), the last response with the finish
    reason; every response with the usage so far and the answer's `response_id` (a fresh one
    by default: Totem makes the ids of the calls from it)."""
    response_id = response_id or f"scripted-{next(_RESPONSE_IDS)}"

    def usage(output: int) -> dict:
        counts = {"promptTokenCount": prompt_tokens, "candidatesTokenCount": output,
                  "totalTokenCount": prompt_tokens + output + thoughts_tokens}
        if cached:
            counts["cachedContentTokenCount"] = cached
        if thoughts_tokens:
            counts["thoughtsTokenCount"] = thoughts_tokens
        return counts

    parts: list[dict] = [{"text": piece, "thought": True} for piece in _split_text(thinking or "", 2)]
    parts += [{"text": piece} for piece in _split_text(text, 3)]
    for name, args in tool_calls:
        parts.append({"functionCall": {"name": name, "args": args}})
    signed = next((part for part in parts if "functionCall" in part), None) or (parts[-1] if text else None)
    if signature and signed is not None:
        signed["thoughtSignature"] = signature
    events = []
    for index, part in enumerate(parts):
        candidate: dict = {"content": {"parts": [part], "role": "model"}, "index": 0}
        last = index == len(parts) - 1
        if last:
            candidate["finishReason"] = finish or "STOP"
        events.append(gemini_event({"candidates": [candidate], "usageMetadata": usage(output_tokens if last else 1),
                                    "modelVersion": MODEL_ID, "responseId": response_id}))
    if not parts:
        events.append(gemini_event({"candidates": [{"content": {"parts": [], "role": "model"}, "index": 0,
                                                    "finishReason": finish or "STOP"}],
                                    "usageMetadata": usage(output_tokens), "responseId": response_id}))
    return events


def gemini_reply(text: str = "", *, max_piece: int = DEFAULT_MAX_PIECE, **options: Any) -> Stream:
    """`gemini_events` as a scripted stream (no [DONE]: Gemini has none)."""
    return Stream(gemini_events(text, **options), done=False, max_piece=max_piece)


def is_chat_request(request: RecordedRequest) -> bool:
    """A chat request of any of the wires the server speaks."""
    return request.method == "POST" and (request.path.endswith("/chat/completions")
                                         or request.path in ("/api/chat", "/v1/messages")
                                         or ":streamGenerateContent" in request.path)


# --- Scripted responses ----------------------------------------------------------------------


@dataclass
class Fixture:
    """Replay one case of `providers/PROVIDER.sse` (or `ollama-native/CASE.ndjson` with
    provider "ollama-native") byte for byte, in random-sized pieces from a seeded RNG."""
    provider: str
    case: str
    transfer: str = "chunked"  # "chunked", "length" (Content-Length) or "close" (read until close)
    seed: int = 0
    max_piece: int = DEFAULT_MAX_PIECE

    def body(self) -> tuple[bytes, str]:
        if self.provider == "ollama-native":
            return ndjson_case(self.case), "application/x-ndjson"
        return sse_cases(self.provider)[self.case], "text/event-stream"


@dataclass
class Stream:
    """A constructed SSE stream (see the chunk builders). With `interval`, events leave one by one
    with that pause between them (keep-alive and timing tests)."""
    events: list[Any]
    done: bool = True
    transfer: str = "chunked"
    seed: int = 0
    max_piece: int = DEFAULT_MAX_PIECE
    interval: float = 0.0
    content_type: str = "text/event-stream"
    # With `release`, the stream stops after `hold_after` events until the test sets it (a
    # threading.Event: a browser test sets it from its own thread), so that a state of the
    # answer in the middle is seen however slow the machine.
    release: threading.Event | None = None
    hold_after: int = 0


@dataclass
class JsonResponse:
    """A whole JSON (or raw) answer: a models list, a non-streamed completion, an error."""
    body: Any = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)

    def payload(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


@dataclass
class HttpError(JsonResponse):
    """An error answer before any streaming; `HttpError.fixture(provider, case)` reads errors.json."""

    @classmethod
    def fixture(cls, provider: str, case: str) -> HttpError:
        for entry in error_fixtures():
            if entry["provider"] == provider and entry["case"] == case:
                return cls(entry["body"].encode(), entry["status"], dict(entry["headers"]))
        raise KeyError(f"no error fixture {provider}/{case}")


@dataclass
class Stall:
    """Send these events (or nothing, not even headers, with `before_headers`), then hang until
    the client disconnects; `model.wait_disconnect()` sees it."""
    events: list[Any] = field(default_factory=list)
    before_headers: bool = False


@dataclass
class Hangup:
    """Send these events, then close the connection in the middle of the chunked body."""
    events: list[Any] = field(default_factory=list)


@dataclass
class FastStream:
    """N content deltas, finish, usage and [DONE], written as fast as the socket takes them."""
    deltas: int
    text: str = "x"


@dataclass
class Lines:
    """A constructed NDJSON answer of Ollama's native /api/chat: each object one line."""
    lines: list[dict]


def ollama_reply(text: str = "", *, tool_calls: tuple | list = (), prompt_eval_count: int = 10,
                 eval_count: int = 5) -> Lines:
    """A whole native Ollama answer: the text, the tool calls ((name, arguments) pairs, arguments
    as objects as Ollama sends them), and the final line with its counts."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [{"id": f"call_{index}", "function": {"index": index, "name": name,
                                                                      "arguments": arguments}}
                                 for index, (name, arguments) in enumerate(tool_calls)]
    return Lines([{"model": MODEL_ID, "message": message, "done": False},
                  {"model": MODEL_ID, "message": {"role": "assistant", "content": ""}, "done": True,
                   "done_reason": "stop", "prompt_eval_count": prompt_eval_count, "eval_count": eval_count}])


Response = Fixture | Stream | JsonResponse | Stall | Hangup | FastStream | Lines


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it; `body` is the parsed JSON (None if absent).
    `read_ns`: perf_counter_ns() once its last byte was read, before the body was parsed."""
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw_body: bytes
    read_ns: int = 0


# --- The server ------------------------------------------------------------------------------


class ScriptedModel:
    """The scripted server. `url` is the OpenAI base (`http://127.0.0.1:PORT/v1`), `base` the
    root (Ollama native routes), `chat_url` the chat endpoint."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.disconnects = 0
        self.errors: list[Exception] = []
        self._script: deque[Response] = deque()
        self._routes: dict[tuple[str, str], JsonResponse] = {}
        self._tasks: set[asyncio.Task] = set()
        self._disconnected = asyncio.Event()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/v1"

    @property
    def chat_url(self) -> str:
        return f"{self.url}/chat/completions"

    @property
    def ollama_chat_url(self) -> str:
        return f"{self.base}/api/chat"

    async def __aenter__(self) -> ScriptedModel:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def script(self, *responses: Response) -> None:
        """Queue answers for the next chat requests, in order."""
        self._script.extend(responses)

    def forget_script(self) -> None:
        """Drop the answers queued and not asked for (a run that ended before them)."""
        self._script.clear()

    def serve_json(self, method: str, path: str, body: Any, status: int = 200) -> None:
        """Answer `method path` with this JSON from now on."""
        self._routes[(method.upper(), path)] = JsonResponse(body, status)

    def serve_models(self, *names: str) -> None:
        """Serve `providers/models/NAME.json` at its route (see MODEL_ROUTES)."""
        for name in names:
            method, path = MODEL_ROUTES[name]
            self.serve_json(method, path, models_fixture(name))

    async def wait_disconnect(self, timeout: float = 2.0) -> None:
        """Wait until a client hung up on a stalled or streaming response."""
        async with asyncio.timeout(timeout):
            await self._disconnected.wait()

    # -- connection handling

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        with contextlib.suppress(OSError):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            request = await self._read_request(reader)
            if request is not None:
                self.requests.append(request)
                await self._respond(request, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            self._note_disconnect()
        except asyncio.CancelledError:
            pass  # the server is shutting down
        except Exception as exc:  # a bad request from the client under test: keep it for asserts
            self.errors.append(exc)
        finally:
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()
            self._tasks.discard(task)

    def _note_disconnect(self) -> None:
        self.disconnects += 1
        self._disconnected.set()

    async def _read_request(self, reader: asyncio.StreamReader) -> RecordedRequest | None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_REQUEST_HEAD_BYTES:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, path, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        raw = await reader.readexactly(min(length, MAX_REQUEST_BODY_BYTES)) if length else b""
        read_ns = time.perf_counter_ns()
        body = json.loads(raw) if raw else None
        return RecordedRequest(method, path, headers, body, raw, read_ns)

    async def _respond(self, request: RecordedRequest, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        # A route served with its query (a page of a list) wins over the one of its path.
        route = (self._routes.get((request.method, request.path))
                 or self._routes.get((request.method, request.path.split("?", 1)[0])))
        if route is not None:
            await self._send_json(writer, route)
        elif is_chat_request(request):
            response = self._script.popleft() if self._script else HttpError(
                {"error": {"message": "ScriptedModel: no response scripted", "type": "server_error"}},
                500)
            await self._send(response, reader, writer)
        else:
            await self._send_json(writer, HttpError(
                {"error": {"message": f"no route {request.method} {request.path}",
                           "type": "not_found_error"}}, 404))

    async def _send(self, response: Response, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        if isinstance(response, JsonResponse):
            await self._send_json(writer, response)
        elif isinstance(response, Fixture):
            body, content_type = response.body()
            pieces = _random_pieces(body, random.Random(response.seed), response.max_piece)
            await self._send_stream(writer, pieces, content_type, response.transfer, len(body))
        elif isinstance(response, Stream):
            await self._send_constructed(writer, response)
        elif isinstance(response, Stall):
            if not response.before_headers:
                await _send_head(writer, 200, {"Content-Type": "text/event-stream",
                                               "Transfer-Encoding": "chunked"})
                await _send_pieces(writer, [encode_events(response.events, done=False)], "chunked")
            await self._wait_for_hangup(reader)
        elif isinstance(response, Hangup):
            await _send_head(writer, 200, {"Content-Type": "text/event-stream",
                                           "Transfer-Encoding": "chunked"})
            await _send_pieces(writer, [encode_events(response.events, done=False)], "chunked")
        elif isinstance(response, FastStream):
            await self._send_fast(writer, response)
        elif isinstance(response, Lines):
            body = "".join(json.dumps(line) + "\n" for line in response.lines).encode()
            await self._send_stream(writer, [body], "application/x-ndjson", "chunked", len(body))

    async def _send_json(self, writer: asyncio.StreamWriter, response: JsonResponse) -> None:
        payload = response.payload()
        headers = {"Content-Type": "application/json", **response.headers,
                   "Content-Length": str(len(payload))}
        await _send_head(writer, response.status, headers)
        writer.write(payload)
        await writer.drain()

    async def _send_constructed(self, writer: asyncio.StreamWriter, stream: Stream) -> None:
        if not stream.interval and stream.release is None:
            body = encode_events(stream.events, stream.done)
            pieces = _random_pieces(body, random.Random(stream.seed), stream.max_piece)
            await self._send_stream(writer, pieces, stream.content_type, stream.transfer, len(body))
            return
        await _send_head(writer, 200, {"Content-Type": stream.content_type,
                                       "Transfer-Encoding": "chunked"})
        for index, event in enumerate(stream.events + (["data: [DONE]\n\n"] if stream.done else [])):
            if stream.release is not None and index == stream.hold_after:
                await asyncio.to_thread(stream.release.wait, HOLD_LIMIT_S)
            await _send_pieces(writer, [encode_events([event], done=False)], "chunked")
            await asyncio.sleep(stream.interval)
        await _send_pieces(writer, [], "chunked", end=True)

    async def _send_stream(self, writer: asyncio.StreamWriter, pieces: list[bytes],
                           content_type: str, transfer: str, total: int) -> None:
        headers = {"Content-Type": content_type, "Cache-Control": "no-cache"}
        if transfer == "chunked":
            headers["Transfer-Encoding"] = "chunked"
        elif transfer == "length":
            headers["Content-Length"] = str(total)
        await _send_head(writer, 200, headers)
        try:
            await _send_pieces(writer, pieces, transfer, end=True)
        except ConnectionError:
            self._note_disconnect()

    async def _send_fast(self, writer: asyncio.StreamWriter, fast: FastStream) -> None:
        delta = encode_events([chunk({"content": fast.text})], done=False)
        body = b"".join([encode_events([chunk({"role": "assistant", "content": ""})], done=False),
                         delta * fast.deltas,
                         encode_events([finish_chunk(), usage_chunk(10, fast.deltas)])])
        pieces = [body[i:i + FAST_WRITE_BYTES] for i in range(0, len(body), FAST_WRITE_BYTES)]
        await self._send_stream(writer, pieces, "text/event-stream", "chunked", len(body))

    async def _wait_for_hangup(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(4096):
                pass
        self._note_disconnect()


# --- A server that enforces its window ---------------------------------------------------------

# How many characters a token is to a WindowedModel: fewer than Totem's estimate, so that the
# server finds a request larger than Totem counted it, as a real tokenizer often does.
SERVER_CHARS_PER_TOKEN = 3.0
# The windows the context-length cases of errors.json state: a WindowedModel says its own instead.
_FIXTURE_WINDOWS = {4096, 8192, 128000, 131072, 131073, 200000, 1048576}
_BIG_NUMBER = re.compile(r"\d{4,}")
# What a model answers to the end of a prompt that Ollama cut (the script's next answer waits).
CUT_ANSWER = "I only see the end of a conversation; what should I do?"


class WindowedModel(ScriptedModel):
    """A server with a context window that it enforces and states nowhere (no models list says
    it). A chat request longer than `window` tokens (its JSON's length over
    SERVER_CHARS_PER_TOKEN) is refused with the next of `refusals`, context-length cases of
    errors.json as (provider, case), their numbers made this server's window and the request's
    tokens; with no refusals the server is Ollama, which reads only the last `window` tokens of
    a longer prompt (the smaller of its window and the request's num_ctx) and says so only in
    its prompt_eval_count, answering CUT_ANSWER. A request `is_summary` names gets `summary(n)`, the nth; every other
    request that fits gets the script's next answer. `refused` counts the refusals and cuts."""

    def __init__(self, window: int, refusals: list[tuple[str, str]], is_summary, summary) -> None:
        super().__init__()
        self.window = window
        self.refusals = refusals
        self.is_summary = is_summary
        self.summary = summary
        self.refused = 0
        self.summaries = 0

    def tokens(self, request: RecordedRequest) -> int:
        return int(len(request.raw_body) / SERVER_CHARS_PER_TOKEN) + 1

    async def _respond(self, request, reader, writer) -> None:
        if not is_chat_request(request):
            await super()._respond(request, reader, writer)
            return
        tokens, window = self.tokens(request), self.window
        options = request.body.get("options") if isinstance(request.body, dict) else None
        if isinstance(options, dict) and isinstance(options.get("num_ctx"), int):
            window = min(window, options["num_ctx"])
        if tokens > window and self.refusals:
            self.refused += 1
            provider, case = self.refusals[(self.refused - 1) % len(self.refusals)]
            error = HttpError.fixture(provider, case)
            await self._send(HttpError(restated(error.payload(), window, tokens), error.status, error.headers),
                             reader, writer)
            return
        if tokens > window:  # Ollama: the prompt cut, nothing said, and the model lost the thread
            self.refused += 1
            await self._send(ollama_reply(CUT_ANSWER, prompt_eval_count=window), reader, writer)
            return
        if self.is_summary(request):
            self.summaries += 1
            response: Response = self.summary(self.summaries)
        else:
            response = self._script.popleft() if self._script else HttpError(
                {"error": {"message": "WindowedModel: no response scripted", "type": "server_error"}}, 500)
        await self._send(response, reader, writer)


def restated(body: bytes, window: int, tokens: int) -> bytes:
    """An errors.json body whose message states `window` where the fixture states its window, and
    `tokens` for the other counts of tokens (the message only: Mistral's code "3051" stays)."""
    def numbers(text: str) -> str:
        return _BIG_NUMBER.sub(lambda found: str(window if int(found.group()) in _FIXTURE_WINDOWS else tokens), text)

    parsed = json.loads(body)
    error = parsed.get("error")
    if isinstance(error, str):
        parsed["error"] = numbers(error)
    elif isinstance(error, dict):
        error["message"] = numbers(error["message"])
    else:
        parsed["message"] = numbers(parsed["message"])
    return json.dumps(parsed).encode()


def _random_pieces(body: bytes, rng: random.Random, max_piece: int) -> list[bytes]:
    pieces, start = [], 0
    while start < len(body):
        size = rng.randint(1, max_piece)
        pieces.append(body[start:start + size])
        start += size
    return pieces


async def _send_head(writer: asyncio.StreamWriter, status: int, headers: dict[str, str]) -> None:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    lines = [f"HTTP/1.1 {status} {phrase}", *(f"{k}: {v}" for k, v in headers.items()),
             "Connection: close", "", ""]
    writer.write("\r\n".join(lines).encode("latin-1"))
    await writer.drain()


async def _send_pieces(writer: asyncio.StreamWriter, pieces: list[bytes], transfer: str,
                       end: bool = False) -> None:
    for piece in pieces:
        if not piece:
            continue  # an empty chunk would be read as the end of the body
        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if transfer == "chunked" else piece)
        await writer.drain()
        # Let the loop run so that pieces tend to leave as separate segments.
        await asyncio.sleep(0)
    if end and transfer == "chunked":
        writer.write(b"0\r\n\r\n")
        await writer.drain()
