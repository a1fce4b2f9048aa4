"""The OpenAI-compatible kinds: OpenAI, Groq, Mistral, DeepSeek and Together, OpenRouter, any
other server of that API (`compatible`: its URL is the API root, its key optional), and the local
llama.cpp and LM Studio servers.

Owns what they share on the wire (POST `{base}/chat/completions` answered as server-sent
events, `stream_options.include_usage`, `reasoning_effort`, tool-call arguments as JSON text)
and what differs between them: the base of a local server (`/v1` of its root), the models
endpoint each one reads best, OpenRouter's attribution header and its `reasoning_details`, sent
back with the assistant message that produced them.

Must not: frame bytes (sse.py does) or merge chunks (stream.py does). The wire shapes are in
`shared/fixtures/providers/NAME.md`.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from totem.agent.kinds.base import (
    ChatMessage,
    Fetch,
    ModelInfo,
    ProviderTarget,
    as_list,
    as_object,
    bearer_headers,
    entries,
    model_info,
    positive,
    price_of,
    server_root,
)
from totem.agent.provider_errors import ProviderError
from totem.agent.sse import SseDecoder

if TYPE_CHECKING:
    from totem.agent.stream import ChatAccumulator, StreamEvent

SSE_MEDIA_TYPE = "text/event-stream"
# The field of an assistant message that only OpenRouter reads back; other servers (Groq,
# Mistral) refuse a request with a field they do not know.
REASONING_DETAILS = "reasoning_details"
# Sent to OpenRouter so that its dashboard names the app (optional attribution headers).
OPENROUTER_HEADERS = {"X-Title": "Totem"}
# Together lists image, audio and embedding models beside the chat ones.
TOGETHER_CHAT_TYPES = ("chat", "language", "code")
# The tokens each one's prices are for (fixtures/providers/together.md, openrouter.md).
TOGETHER_PRICE_TOKENS = 1_000_000
OPENROUTER_PRICE_TOKENS = 1


class SseAnswer:
    """A streamed answer as server-sent events of `chat.completion.chunk`s."""

    def __init__(self, accumulator: ChatAccumulator) -> None:
        self._accumulator = accumulator
        self._sse = SseDecoder()

    def feed(self, data: bytes) -> list[StreamEvent]:
        return self._accumulator.feed_sse_events(self._sse.feed(data))

    def close(self) -> list[StreamEvent]:
        return []  # an event without its blank line is discarded (WHATWG)

    def whole(self, body: object) -> list[StreamEvent]:
        return self._accumulator.feed_completion(body)


class OpenAICompatible:
    """A hosted OpenAI-compatible API whose base URL is the API root (`.../v1`)."""

    local = False
    default_context = 32768  # hosted models have more, local servers often less: a middle

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<kind {self.name}>"

    def api_base(self, url: str) -> str:
        """The OpenAI-compatible base: /v1 of a local server's root, the URL itself for an API."""
        return server_root(url) + "/v1" if self.local else url.rstrip("/")

    def chat_url(self, url: str, model: str = "") -> str:
        return self.api_base(url) + "/chat/completions"

    def auth_headers(self, key: str) -> dict[str, str]:
        return bearer_headers(key)

    async def models(self, fetch: Fetch) -> list[ModelInfo]:
        """GET {base}/models."""
        return self.read_models(await fetch.get(self.api_base(fetch.url) + "/models"), fetch)

    async def context_window(self, fetch: Fetch, model: str, listed: int | None) -> int | None:
        return listed  # the server sizes its own window; asking would cost a megabyte (OpenRouter)

    def request_body(self, target: ProviderTarget, messages: list[ChatMessage],
                     tools: list[dict[str, Any]], reasoning: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": target.model, "messages": [self.message(m) for m in messages]}
        if reasoning and reasoning != "none":
            body["reasoning_effort"] = reasoning
        body["tools"] = tools
        return body

    def set_temperature(self, body: dict[str, Any], temperature: float) -> None:
        body["temperature"] = temperature

    def message(self, message: ChatMessage) -> ChatMessage:
        """A message as this server takes it: without the fields only OpenRouter reads."""
        if REASONING_DETAILS not in message:
            return message
        return {k: v for k, v in message.items() if k != REASONING_DETAILS}

    def stream_request(self, body: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
        request = dict(body)
        request["stream"] = True
        options = request.get("stream_options")
        request["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return {"Accept": SSE_MEDIA_TYPE}, request

    def decoder(self, accumulator: ChatAccumulator) -> SseAnswer:
        return SseAnswer(accumulator)

    def read_models(self, body: Any, fetch: Fetch) -> list[ModelInfo]:
        """The chat models of a `{"data": [...]}` list (OpenAI, Groq, Mistral, DeepSeek, any
        compatible server). Raises ProviderError when it is not a models list."""
        return [found for item in entries(body, fetch) if (found := self.read_model(item)) is not None]

    def read_model(self, item: dict[str, Any]) -> ModelInfo | None:
        """One entry of the list, None when it is not a usable chat model."""
        if item.get("active") is False:  # Groq keeps retired models in the list
            return None
        capabilities = item.get("capabilities")
        tools = reasoning = None
        if isinstance(capabilities, dict):  # Mistral
            if capabilities.get("completion_chat") is False:
                return None
            tools = bool(capabilities.get("function_calling"))
        features = item.get("supported_features")
        if isinstance(features, list):  # newer Groq answers
            tools, reasoning = "tools" in features, "reasoning" in features
        # vLLM says `max_model_len`: the window it was started with, which it enforces.
        context = (positive(item.get("context_window")) or positive(item.get("max_context_length"))
                   or positive(item.get("context_length")) or positive(item.get("max_model_len")))
        return model_info(item["id"], item.get("display_name") or item.get("name"), context, tools, reasoning)


class Together(OpenAICompatible):
    """Together: a bare list with each model's type and prices (numbers, USD per 1M tokens)."""

    def __init__(self) -> None:
        super().__init__("together")

    def read_model(self, item: dict[str, Any]) -> ModelInfo | None:
        model_type = item.get("type")
        if isinstance(model_type, str) and model_type not in TOGETHER_CHAT_TYPES:
            return None
        found = super().read_model(item)
        pricing = item.get("pricing")
        if found is not None and isinstance(pricing, dict):
            found["free"] = all(pricing.get(k) == 0 for k in ("input", "output", "hourly"))
            found["price"] = price_of(pricing.get("input"), pricing.get("output"), TOGETHER_PRICE_TOKENS)
        return found


class OpenRouter(OpenAICompatible):
    """OpenRouter: its own models schema, an attribution header, and `reasoning_details` that a
    reasoning model needs back to go on after a tool call (fixtures/providers/openrouter.md)."""

    def __init__(self) -> None:
        super().__init__("openrouter")

    def message(self, message: ChatMessage) -> ChatMessage:
        details = message.get(REASONING_DETAILS)
        if not isinstance(details, list):
            return super().message(message)
        # Only OpenRouter's own details (reasoning.*): a step answered by another kind (Anthropic's
        # thinking blocks) in the same session is not OpenRouter's to read.
        own = [d for d in details if not isinstance(d, dict) or str(d.get("type", "")).startswith("reasoning.")]
        if not own:
            return super().message(message)
        return {**message, REASONING_DETAILS: merge_reasoning_details(own)}

    def stream_request(self, body: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
        headers, request = super().stream_request(body)
        return {**headers, **OPENROUTER_HEADERS}, request

    def read_model(self, item: dict[str, Any]) -> ModelInfo | None:
        """An entry of GET /api/v1/models: context_length, supported_parameters (tools, reasoning)
        and pricing (strings of USD per token, -1 when it varies; free when prompt and
        completion are 0)."""
        outputs = as_object(item.get("architecture")).get("output_modalities")
        if isinstance(outputs, list) and "text" not in outputs:
            return None  # image generators
        parameters = as_list(item.get("supported_parameters"))
        pricing = as_object(item.get("pricing"))
        free = _is_zero(pricing.get("prompt")) and _is_zero(pricing.get("completion"))
        return model_info(item["id"], item.get("name"), item.get("context_length"), "tools" in parameters,
                          "reasoning" in parameters or "include_reasoning" in parameters, free,
                          price_of(pricing.get("prompt"), pricing.get("completion"), OPENROUTER_PRICE_TOKENS,
                                   pricing.get("input_cache_read"), pricing.get("input_cache_write")))


class LlamaCpp(OpenAICompatible):
    """A llama.cpp server: /v1 of its root, and /props for the usable window."""

    local = True
    default_context = 8192  # a local server's window is often its default, small

    def __init__(self) -> None:
        super().__init__("llamacpp")

    async def models(self, fetch: Fetch) -> list[ModelInfo]:
        """GET /v1/models with GET /props: `default_generation_settings.n_ctx` is the usable
        window per slot (n_ctx_train in /v1/models is only the trained maximum) and
        `chat_template_caps.supports_tools` says whether the template takes tools; a build
        whose /props does not say asks GET /slots (each slot's `n_ctx`)."""
        root = server_root(fetch.url)
        listed = await fetch.get(root + "/v1/models")  # first: it says whether this is llama.cpp at all
        try:
            settings = await fetch.get(root + "/props")
        except ProviderError:
            settings = {}  # older builds, or a router: the list alone still names the models
        settings = settings if isinstance(settings, dict) else {}
        context = positive(as_object(settings.get("default_generation_settings")).get("n_ctx"))
        if context is None:
            context = await slots_window(fetch, root)
        caps = settings.get("chat_template_caps")
        tools = bool(caps.get("supports_tools")) if isinstance(caps, dict) else None
        return [model_info(item["id"], None, context, tools, None) for item in entries(listed, fetch)]


class LmStudio(OpenAICompatible):
    """An LM Studio server: /v1 of its root, and its richer /api/v0/models."""

    local = True
    default_context = 8192  # a local server's window is often its default, small

    def __init__(self) -> None:
        super().__init__("lmstudio")

    async def models(self, fetch: Fetch) -> list[ModelInfo]:
        """GET /api/v0/models (type llm or vlm; loaded_context_length is the usable window when a
        model is loaded, else max_context_length); old builds only have /v1/models."""
        try:
            body = await fetch.get(server_root(fetch.url) + "/api/v0/models")
        except ProviderError as exc:
            if exc.status not in (404, 405):
                raise
            return await super().models(fetch)
        models = []
        for item in entries(body, fetch):
            if item.get("type") not in ("llm", "vlm", None):
                continue  # embeddings
            capabilities = as_list(item.get("capabilities"))
            context = positive(item.get("loaded_context_length")) or item.get("max_context_length")
            models.append(model_info(item["id"], None, context, "tool_use" in capabilities, None))
        return models


async def slots_window(fetch: Fetch, root: str) -> int | None:
    """The smallest `n_ctx` of llama.cpp's GET /slots (a request may land in any slot); None when
    the server does not answer it (started without --slots, or not llama.cpp)."""
    try:
        slots = await fetch.get(root + "/slots")
    except ProviderError:
        return None
    windows = [found for slot in as_list(slots) if (found := positive(as_object(slot).get("n_ctx")))]
    return min(windows) if windows else None


def merge_reasoning_details(details: list[Any]) -> list[Any]:
    """OpenRouter's `reasoning_details` of a streamed answer as one whole answer has them.

    A stream sends a `reasoning.text` block in fragments (same index, the signature on the last
    one); sent back as fragments, each would be a block of its own without a signature. So the
    `text` of consecutive fragments of one block (same type, index and format) is joined and the
    other fields keep the first value given; other detail types (summary, encrypted) go back as
    they came. Merging a merged list changes nothing."""
    merged: list[Any] = []
    for detail in details:
        last = merged[-1] if merged else None
        if (isinstance(detail, dict) and detail.get("type") == "reasoning.text" and isinstance(last, dict)
                and last.get("type") == "reasoning.text" and last.get("index") == detail.get("index")
                and last.get("format") == detail.get("format")):
            joined = {**detail, **{k: v for k, v in last.items() if v not in (None, "")}}
            joined["text"] = str(last.get("text") or "") + str(detail.get("text") or "")
            merged[-1] = joined
        else:
            merged.append(dict(detail) if isinstance(detail, dict) else detail)
    return merged


def _is_zero(price: Any) -> bool:
    try:
        return Decimal(str(price)) == 0
    except InvalidOperation:
        return False
