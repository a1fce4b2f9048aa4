"""Ollama's native API: POST /api/chat answered as newline-delimited JSON, /api/tags and
/api/show for the models.

Owns the native request (string content, images apart, tool-call arguments as objects, `think`,
`options.num_ctx` sized from the model's window) and reading the native models endpoints. The
native API is used instead of Ollama's /v1 because only it lets a call choose the context window
(fixtures/providers/ollama.md: /v1 truncates a long prompt silently at the server's default).

Must not: frame bytes (sse.py does) or merge chunks (stream.py does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from totem.agent.kinds.base import (
    ChatMessage,
    Fetch,
    ModelInfo,
    ProviderTarget,
    arguments_object,
    as_object,
    bearer_headers,
    entries,
    model_info,
    positive,
    server_root,
)
from totem.agent.provider_errors import ProviderError
from totem.agent.sse import NdjsonDecoder

if TYPE_CHECKING:
    from totem.agent.stream import ChatAccumulator, StreamEvent

NDJSON_MEDIA_TYPE = "application/x-ndjson"
# Ollama allocates the whole num_ctx up front (KV cache): ask for the model's real window, but no
# more than this, or a 256k-context model would not fit in memory. (fixtures/providers/ollama.md)
MAX_OLLAMA_NUM_CTX = 32768
OLLAMA_SHOW_CONCURRENCY = 4


class NdjsonAnswer:
    """A streamed answer as Ollama's native lines (`{"message": ..., "done": ...}`)."""

    def __init__(self, accumulator: ChatAccumulator) -> None:
        self._accumulator = accumulator
        self._ndjson = NdjsonDecoder()

    def feed(self, data: bytes) -> list[StreamEvent]:
        return [e for line in self._ndjson.feed(data) for e in self._accumulator.feed(line)]

    def close(self) -> list[StreamEvent]:
        return [e for line in self._ndjson.close() for e in self._accumulator.feed(line)]

    def whole(self, body: object) -> list[StreamEvent]:
        return self._accumulator.feed(body)  # a non-streamed answer is one line with done: true


class OllamaNative:
    """An Ollama server, through its native /api routes."""

    name = "ollama"
    default_context = 8192  # what Ollama gives a model when it is not asked for more

    def __repr__(self) -> str:
        return f"<kind {self.name}>"

    def chat_url(self, url: str, model: str = "") -> str:
        return server_root(url) + "/api/chat"

    def auth_headers(self, key: str) -> dict[str, str]:
        return bearer_headers(key)  # a key only matters behind a proxy (or for ollama.com)

    async def models(self, fetch: Fetch) -> list[ModelInfo]:
        """GET /api/tags, then POST /api/show for each model (a few at a time) for its capabilities
        (tools, thinking) and context window. Embedding-only models are left out."""
        root = server_root(fetch.url)
        names = [item["name"] for item in entries(await fetch.get(root + "/api/tags"), fetch, "models", "name")]
        gate = asyncio.Semaphore(OLLAMA_SHOW_CONCURRENCY)

        async def show(name: str) -> ModelInfo | None:
            async with gate:
                try:
                    context, capabilities = show_facts(await fetch.post(root + "/api/show", {"model": name}))
                except ProviderError:
                    return model_info(name)  # listed but not describable: keep it, capabilities unknown
            if capabilities and "completion" not in capabilities:
                return None
            caps = capabilities or []
            return model_info(name, name, context, "tools" in caps, "thinking" in caps)

        described = await asyncio.gather(*(show(name) for name in dict.fromkeys(names)))
        return [model for model in described if model is not None]

    async def context_window(self, fetch: Fetch, model: str, listed: int | None) -> int | None:
        """The trained window (the cached list's, else one /api/show), capped at
        MAX_OLLAMA_NUM_CTX; None when the server cannot say (the request then sends
        `default_context`, never leaving the window to the server)."""
        window = listed
        if window is None:
            try:
                window = show_facts(await fetch.post(server_root(fetch.url) + "/api/show", {"model": model}))[0]
            except ProviderError:
                return None  # the chat call reports what is wrong
        return min(window, MAX_OLLAMA_NUM_CTX) if window else None

    def request_body(self, target: ProviderTarget, messages: list[ChatMessage],
                     tools: list[dict[str, Any]], reasoning: str | None) -> dict[str, Any]:
        # Always the window Totem counts on: without it the server uses its own default, and
        # truncates a longer prompt silently (fixtures/providers/ollama.md).
        body: dict[str, Any] = {"model": target.model, "options": {"num_ctx": target.context or self.default_context}}
        body["messages"] = native_messages(messages)
        if reasoning:
            body["think"] = reasoning != "none"
        body["tools"] = tools
        return body

    def set_temperature(self, body: dict[str, Any], temperature: float) -> None:
        body["options"] = {**body.get("options", {}), "temperature": temperature}

    def stream_request(self, body: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
        return {"Accept": NDJSON_MEDIA_TYPE}, {**body, "stream": True}

    def decoder(self, accumulator: ChatAccumulator) -> NdjsonAnswer:
        return NdjsonAnswer(accumulator)


def native_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Messages as /api/chat takes them: string content, images apart (bare base64) and tool-call
    arguments as objects."""
    native = []
    for message in messages:
        item: ChatMessage = {"role": message["role"]}
        content = message.get("content")
        if isinstance(content, list):
            item["content"] = "\n".join(c["text"] for c in content if c["type"] == "text")
            images = [c["image_url"]["url"].split(",", 1)[1] for c in content if c["type"] == "image_url"]
            if images:
                item["images"] = images
        else:
            item["content"] = content or ""
        if message.get("tool_calls"):
            item["tool_calls"] = [{"function": {"name": call["function"]["name"],
                                                "arguments": arguments_object(call["function"]["arguments"])}}
                                  for call in message["tool_calls"]]
        native.append(item)
    return native


def show_facts(body: Any) -> tuple[int | None, list[str] | None]:
    """The trained context window (`model_info["<arch>.context_length"]`, else the `num_ctx` of
    its parameters) and the capabilities of an /api/show answer."""
    if not isinstance(body, dict):
        return None, None
    info = as_object(body.get("model_info"))
    arch = info.get("general.architecture")
    context = positive(info.get(f"{arch}.context_length")) if isinstance(arch, str) else None
    if context is None:  # an architecture field missing: any "<x>.context_length" will do
        context = next((positive(v) for k, v in info.items() if k.endswith(".context_length") and positive(v)), None)
    if context is None:  # no trained window given: the Modelfile's `PARAMETER num_ctx`, if it sets one
        context = parameter_num_ctx(body.get("parameters"))
    capabilities = body.get("capabilities")
    return context, [c for c in capabilities if isinstance(c, str)] if isinstance(capabilities, list) else None


def parameter_num_ctx(parameters: Any) -> int | None:
    """`num_ctx` of /api/show's `parameters`, the Modelfile's lines ("num_ctx 4096\nstop ...")."""
    if not isinstance(parameters, str):
        return None
    for line in parameters.splitlines():
        name, _, value = line.strip().partition(" ")
        if name == "num_ctx" and value.strip().isdigit():
            return positive(int(value.strip()))
    return None
