"""The seam between Totem and the kinds of provider, and what every kind shares.

Owns: `ProviderKind`, the one small Protocol through which providers.py, client.py and the agent
loop reach a provider without asking which kind it is (its decoder is stream.py's
`AnswerDecoder`); `ProviderTarget`, where and how to call one model;
`Fetch`, which GETs and POSTs JSON with a provider's key (for the models endpoints); `bearer_headers`,
the key as most kinds send it; and the small
readers that the models lists of several kinds share (`model_info`, `entries`, `positive`,
`price_of`, `as_object`, `as_list`, `server_root`, `shape_error`).

Must not: know any one kind (kinds/openai.py, kinds/ollama.py, kinds/anthropic.py and kinds/gemini.py do), stream
(client.py does), touch the store, or put a key anywhere but in the headers its kind's
`auth_headers` names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict
from urllib.parse import urlsplit

from totem.agent.provider_errors import KIND_INVALID_RESPONSE, ProviderError

if TYPE_CHECKING:
    from totem.agent.stream import AnswerDecoder, ChatAccumulator

# OpenRouter's list is about a megabyte; past this the answer is not a models list.
MAX_MODELS_BYTES = 16 * 1024 * 1024
# Prices are kept in USD per this many tokens, the unit in which providers publish them.
PRICE_TOKENS = 1_000_000

# One chat message in the OpenAI shape that context.py builds; each kind reshapes it for its wire.
ChatMessage = dict[str, Any]


class Price(TypedDict):
    """What a model costs, in USD per million tokens (PRICE_TOKENS) read and written; and, when
    the provider publishes them, input read from its prompt cache and input written to it."""

    input: float
    output: float
    cacheread: NotRequired[float]
    cachewrite: NotRequired[float]


class ModelInfo(TypedDict):
    """One model as every models endpoint is read: None for tools, reasoning or free means the
    endpoint does not say (the template's hints or defaults fill it in); `price` is None when
    the provider publishes none for it (or says it varies)."""

    id: str
    name: str
    context: int | None
    tools: bool | None
    reasoning: bool | None
    free: bool | None
    price: Price | None


class ProviderKind(Protocol):
    """What differs between kinds of provider. `name` is the `kind` of its template in
    providers.json; the table from names to kinds is `kinds.KINDS`."""

    name: str
    # The window in tokens assumed when the provider does not say (its models list, Ollama's
    # /api/show): requests are kept under it (context.fit_window).
    default_context: int

    def chat_url(self, url: str, model: str = "") -> str:
        """The chat endpoint of a provider saved with the base URL `url`, for `model` (only a
        kind whose endpoint names the model, Gemini's, reads it)."""
        ...

    def auth_headers(self, key: str) -> dict[str, str]:
        """The headers that carry `key` on every request to this kind (chat and models): the only
        place a key goes."""
        ...

    async def models(self, fetch: Fetch) -> list[ModelInfo]:
        """Every model the provider at `fetch.url` offers, from the richest endpoint of this kind
        (not yet filtered by the template). Raises ProviderError."""
        ...

    async def context_window(self, fetch: Fetch, model: str, listed: int | None) -> int | None:
        """The window a call of `model` should count on: `listed` is the one of a fresh cached
        models list (None when there is none). Only a kind that must size the window itself
        (Ollama's num_ctx) spends a request on it; it never raises."""
        ...

    def request_body(self, target: ProviderTarget, messages: list[ChatMessage],
                     tools: list[dict[str, Any]], reasoning: str | None) -> dict[str, Any]:
        """The chat request for these messages (OpenAI shape, from context.py), tool specs and
        reasoning level (None: the model's default, "none", "low", "medium", "high")."""
        ...

    def set_temperature(self, body: dict[str, Any], temperature: float) -> None:
        """Put the sampling temperature in a request body of this kind."""
        ...

    def stream_request(self, body: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
        """The headers (Accept and any the kind always sends) and the body of the streamed
        request for `body`, which is left unchanged."""
        ...

    def decoder(self, accumulator: ChatAccumulator) -> AnswerDecoder:
        """A decoder of one streamed answer into `accumulator`."""
        ...


@dataclass(frozen=True)
class ProviderTarget:
    """Where and how to call one model: `url` is the full chat endpoint, `kind` the adapter that
    shapes the request and reads the answer, `context` the window in tokens when known. The key
    never shows in repr(); do not pass a target to dataclasses.asdict() or to a log line."""

    providerid: str
    url: str
    model: str
    kind: ProviderKind
    key: str | None = field(default=None, repr=False)
    context: int | None = None
    price: Price | None = None  # from the catalog, when it gives one: an answer's cost


def bearer_headers(key: str) -> dict[str, str]:
    """The key as the OpenAI-compatible servers and Ollama take it."""
    return {"Authorization": f"Bearer {key}"}


class Fetch:
    """GET and POST JSON with the provider's key; the key stays in the headers of `kind` (its
    `auth_headers`; a Bearer Authorization header without a kind)."""

    __slots__ = ("url", "_headers", "timeout")

    def __init__(self, url: str, key: str | None, timeout: float, kind: ProviderKind | None = None):
        self.url = url
        self._headers = (kind.auth_headers(key) if kind is not None else bearer_headers(key)) if key else {}
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"<Fetch {self.url}>"

    async def get(self, url: str) -> Any:
        """The JSON answer of GET `url`. Raises ProviderError."""
        from totem.agent.client import request_json  # the HTTP client (and ssl) load with the first call
        return await request_json("GET", url, self._headers, None, self.timeout, MAX_MODELS_BYTES)

    async def post(self, url: str, body: Any) -> Any:
        """The JSON answer of POST `url` with `body`. Raises ProviderError."""
        from totem.agent.client import request_json
        return await request_json("POST", url, self._headers, body, self.timeout, MAX_MODELS_BYTES)


def server_root(url: str) -> str:
    """The root of a local server, whose OpenAI routes live under /v1 (people often paste the
    OpenAI base URL of Ollama or LM Studio: take /v1 off)."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def shape_error(fetch: Fetch, what: str) -> ProviderError:
    """The error for an answer of the wrong shape (not a models list, ...)."""
    host = urlsplit(fetch.url).netloc
    return ProviderError(f"The answer of {host} is not {what}", kind=KIND_INVALID_RESPONSE, retry=False)


def entries(body: Any, fetch: Fetch, key: str = "data", ident: str = "id") -> list[dict[str, Any]]:
    """The model objects of `{"data": [...]}` (or a bare list: Together) that have an id.
    Raises ProviderError when there is no such list."""
    items = body.get(key) if isinstance(body, dict) else body
    if not isinstance(items, list):
        raise shape_error(fetch, "a models list")
    return [item for item in items if isinstance(item, dict) and isinstance(item.get(ident), str) and item[ident]]


def as_object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else {} (a field that a server left out or got wrong)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """`value` when it is a JSON array, else []."""
    return value if isinstance(value, list) else []


def positive(value: Any) -> int | None:
    """`value` when it is a positive integer, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def price_of(prompt: Any, completion: Any, per_tokens: int, cache_read: Any = None,
             cache_write: Any = None) -> Price | None:
    """The price `{input, output}` in USD per PRICE_TOKENS tokens of a model whose provider says
    `prompt` and `completion` USD per `per_tokens` tokens (numbers, or decimal strings as
    OpenRouter sends them), with `cacheread` and `cachewrite` when `cache_read` and
    `cache_write` are prices too. None unless both are non-negative numbers: OpenRouter says -1
    for a price that varies (its router), and a missing price is not a free model."""
    def read(value: Any) -> Decimal | None:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            return None
        try:
            amount = Decimal(str(value).strip())
        except InvalidOperation:
            return None
        return amount if amount.is_finite() and amount >= 0 else None

    given_in, given_out = read(prompt), read(completion)
    if given_in is None or given_out is None:
        return None
    scale = Decimal(PRICE_TOKENS) / Decimal(per_tokens)
    price = Price(input=float(given_in * scale), output=float(given_out * scale))
    for key, given in (("cacheread", read(cache_read)), ("cachewrite", read(cache_write))):
        if given is not None:
            price[key] = float(given * scale)  # type: ignore[literal-required]
    shown = (price["input"], price["output"], price.get("cacheread", 0.0), price.get("cachewrite", 0.0))
    return price if all(math.isfinite(value) for value in shown) else None


def model_info(ident: str, name: Any = None, context: Any = None, tools: bool | None = None,
               reasoning: bool | None = None, free: bool | None = None, price: Price | None = None) -> ModelInfo:
    """One model; a name that is not a string is its id, a context that is not a positive
    integer is None."""
    return {"id": ident, "name": name if isinstance(name, str) and name else ident,
            "context": positive(context), "tools": tools, "reasoning": reasoning, "free": free, "price": price}


def text_of(content: Any) -> str:
    """The text of an OpenAI-shaped message's content: a string, or the texts of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part["text"] for part in content
                         if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def arguments_object(arguments: Any) -> dict[str, Any]:
    """A call's arguments as the object a native wire wants ({} for text that is not one: the
    call's result says what was wrong with it)."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
