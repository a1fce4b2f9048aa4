"""Model providers: the templates, the saved providers and their keys, and what each one offers.

Owns: the known providers (`providers.json` beside this file: data, not code); the saved
providers with their key encrypted by the vault (write-only: no answer, message, log line or
repr() ever holds a key); reading each kind's richest models endpoint into one shape
`{id, name, context, tools, reasoning, free}`; finding local servers (`detect`); the catalog of
the models a session can use (cached in memory for CATALOG_TTL_SECONDS); and turning a model
reference `"<providerid>/<model id>"` into a `ProviderTarget` the agent loop calls.

Must not: stream chats (client.py does), parse chat chunks (stream.py does), touch SQL (the
store does) or know about HTTP requests to Totem itself (api/providers.py does). The wire shapes
of every models endpoint are in `shared/fixtures/providers/NAME.md` and `models/*.json`.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit

from ..errors import BadRequest
from ..vault import VaultError
from .client import request_json
from .provider_errors import KIND_INVALID_REQUEST, KIND_INVALID_RESPONSE, ProviderError

TEMPLATES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "providers.json")
MODELS_TIMEOUT_SECONDS = 15.0
# A local server either answers at once or is not there; a closed port fails immediately.
DETECT_TIMEOUT_SECONDS = 1.0
DETECT_TOTAL_SECONDS = 5.0
# How long target() waits for Ollama's /api/show, which only adds the context window.
TARGET_LOOKUP_TIMEOUT_SECONDS = 5.0
CATALOG_TTL_SECONDS = 300.0
# OpenRouter's list is about a megabyte; past this the answer is not a models list.
MAX_MODELS_BYTES = 16 * 1024 * 1024
OLLAMA_SHOW_CONCURRENCY = 4
# Ollama allocates the whole num_ctx up front (KV cache): ask for the model's real window, but no
# more than this, or a 256k-context model would not fit in memory. (fixtures/providers/ollama.md)
MAX_OLLAMA_NUM_CTX = 32768
MAX_URL_CHARS = 2048
MIN_REDACTED_KEY_CHARS = 4
REDACTED = "[key]"
LOCAL_KINDS = ("ollama", "llamacpp", "lmstudio")
# Sent to OpenRouter so that its dashboard names the app (optional attribution headers).
OPENROUTER_HEADERS = {"X-Title": "Totem"}

log = logging.getLogger("totem.providers")


class ModelError(BadRequest, ProviderError):
    """A model reference that names no usable model: malformed, an unknown provider, or a key
    that cannot be decrypted. An API answer (400, field `model`) and, for the agent loop, a
    ProviderError that is not worth retrying."""

    def __init__(self, message: str):
        # ApiError.__init__ reaches ProviderError.__init__ through super(), which resets status,
        # kind and retry: set them after it.
        BadRequest.__init__(self, ("model", message))
        self.message = message
        self.status = BadRequest.status
        self.kind = KIND_INVALID_REQUEST
        self.retry = False


@dataclass(frozen=True)
class ProviderTarget:
    """Where and how to call one model: `url` is the full chat endpoint, `options` the extra
    fields of the request body, `context` the window in tokens when known. The key never shows
    in repr(); do not pass a target to dataclasses.asdict() or to a log line."""

    providerid: str
    url: str
    model: str
    native_ollama: bool = False
    key: str | None = field(default=None, repr=False)
    options: dict = field(default_factory=dict)
    context: int | None = None
    headers: dict = field(default_factory=dict)


def load_templates(path: str = TEMPLATES_FILE) -> list[dict]:
    """The templates of `providers.json`. Raises OSError, ValueError (a broken file)."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    templates = data["templates"]
    for template in templates:
        missing = {"id", "name", "kind", "url", "key", "local", "icon"} - template.keys()
        if missing:
            raise ValueError(f"{path}: template {template.get('id')} lacks {', '.join(sorted(missing))}")
    return templates


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a provider's base URL, or None when it can."""
    if len(url) > MAX_URL_CHARS:
        return f"must be at most {MAX_URL_CHARS} characters"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return "must not contain spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number or too large
    except ValueError:
        return "is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// address with a host"
    if parts.username is not None or parts.password is not None:
        return "must not hold a user name or password (put the key in the key field)"
    return None


def redact(text: str, key: str | None) -> str:
    """`text` with every occurrence of the key replaced: some providers echo what they got."""
    if key and len(key) >= MIN_REDACTED_KEY_CHARS:
        return text.replace(key, REDACTED)
    return text


class Providers:
    """The providers of one Totem: `Providers(store, vault)`. `detect_urls` maps a local kind to
    the URL that detect() probes instead of the template's (tests use free ports)."""

    def __init__(self, store, vault, detect_urls: Mapping[str, str] | None = None,
                 ttl: float = CATALOG_TTL_SECONDS, templates_path: str = TEMPLATES_FILE):
        self.store = store
        self.vault = vault
        self.ttl = ttl
        self._templates = load_templates(templates_path)
        self._by_kind = {t["kind"]: t for t in self._templates}
        self.detect_urls = {t["kind"]: t["url"] for t in self._templates if t["local"]}
        self.detect_urls.update(detect_urls or {})
        # providerid -> (expires at, (url, kind, updated), models)
        self._cache: dict[str, tuple[float, tuple, list[dict]]] = {}

    def __repr__(self) -> str:
        return f"<Providers {len(self._templates)} templates>"

    # -- templates ------------------------------------------------------------------------------

    def templates(self) -> list[dict]:
        """The known providers: {id, name, kind, url, key (needed, optional, none), local, icon}."""
        return [{k: t[k] for k in ("id", "name", "kind", "url", "key", "local", "icon")} for t in self._templates]

    def kinds(self) -> tuple[str, ...]:
        return tuple(self._by_kind)

    def icon(self, kind: str) -> str:
        template = self._by_kind.get(kind)
        return template["icon"] if template else kind

    # -- saved providers ------------------------------------------------------------------------

    def view(self, row: dict) -> dict:
        """A saved provider as the API shows it: never the key, only whether there is one.
        `models` is the person's choice of models (None: every model the provider offers)."""
        return {"id": row["id"], "name": row["name"], "kind": row["kind"], "url": row["url"],
                "icon": self.icon(row["kind"]), "haskey": row["secret"] is not None,
                "models": row["data"].get("models"), "created": row["created"], "updated": row["updated"]}

    async def list(self) -> list[dict]:
        """Every saved provider (see view())."""
        return [self.view(row) for row in await self.store.list_providers()]

    async def get(self, providerid: str) -> dict | None:
        row = await self.store.get_provider(providerid)
        return None if row is None else self.view(row)

    async def save(self, providerid: str | None, name: str, kind: str, url: str, key: str | None = None,
                   models: list[str] | None = None) -> dict | None:
        """Create (providerid None) or change a provider; None when providerid is unknown.

        `key` None keeps the stored key, "" removes it, anything else replaces it (encrypted).
        `models` None keeps the stored choice, [] clears it. Raises ValueError for an unknown kind
        or a bad URL (the API validates both first)."""
        if kind not in self._by_kind:
            raise ValueError(f"unknown provider kind {kind!r}")
        if (problem := url_problem(url)) is not None:
            raise ValueError(f"url {problem}")
        data: dict[str, Any] = {}
        if providerid is not None:
            old = await self.store.get_provider(providerid)
            if old is None:
                return None
            data = dict(old["data"])
        if models is not None:
            data["models"] = list(models) or None
        secret = self.vault.encrypt(key) if key else None
        row = await self.store.save_provider(providerid, name, kind, url.rstrip("/"), secret, key is None, data)
        if row is None:
            return None
        self._cache.pop(row["id"], None)
        return self.view(row)

    async def remove(self, providerid: str) -> bool:
        """Forget a provider and its key; False when it is unknown."""
        self._cache.pop(providerid, None)
        return await self.store.remove_provider(providerid)

    def _key(self, row: dict) -> str | None:
        """The decrypted key of a stored provider. Raises VaultError."""
        return None if row["secret"] is None else self.vault.decrypt(row["secret"])

    async def stored_key(self, providerid: str) -> tuple[dict, str | None] | None:
        """A provider (as view() shows it) and its decrypted key, for a call made on its behalf;
        None when it is unknown. Raises VaultError."""
        row = await self.store.get_provider(providerid)
        if row is None:
            return None
        return self.view(row), self._key(row)

    # -- what a provider offers -----------------------------------------------------------------

    async def available(self, url: str, kind: str, key: str | None = None, *,
                        timeout: float = MODELS_TIMEOUT_SECONDS) -> list[dict]:
        """Every chat model the provider at `url` offers: [{id, name, context, tools, reasoning,
        free}], read from the richest endpoint of its kind. `context` is None when the provider
        does not say. Raises ValueError (unknown kind, bad URL) and ProviderError (the provider
        failed or answered something that is not a models list); messages never hold the key."""
        template = self._by_kind.get(kind)
        if template is None:
            raise ValueError(f"unknown provider kind {kind!r}")
        if (problem := url_problem(url)) is not None:
            raise ValueError(f"url {problem}")
        fetch = _Fetch(url, key, timeout)
        try:
            if kind == "ollama":
                models = await _ollama_models(fetch)
            elif kind == "llamacpp":
                models = await _llamacpp_models(fetch)
            elif kind == "lmstudio":
                models = await _lmstudio_models(fetch)
            elif kind == "openrouter":
                models = await _openrouter_models(fetch)
            else:
                models = _openai_models(await fetch.get(_api_base(kind, url) + "/models"), kind, fetch)
        except ProviderError as exc:
            exc.message = redact(exc.message, key)
            exc.args = (exc.message,)
            raise
        return _finish(models, template)

    async def detect(self) -> list[dict]:
        """The local servers that answer (Ollama, llama.cpp, LM Studio at their default URLs, or
        `detect_urls`), probed concurrently with short timeouts: [{id, name, kind, url, icon,
        models, providerid (a saved provider with that kind and URL, or None)}]."""
        saved = {(row["kind"], row["url"].rstrip("/")): row["id"] for row in await self.store.list_providers()}

        async def probe(kind: str, url: str) -> dict | None:
            try:
                async with asyncio.timeout(DETECT_TOTAL_SECONDS):
                    models = await self.available(url, kind, None, timeout=DETECT_TIMEOUT_SECONDS)
            except (ProviderError, ValueError, TimeoutError):
                return None
            template = self._by_kind[kind]
            return {"id": template["id"], "name": template["name"], "kind": kind, "url": url.rstrip("/"),
                    "icon": template["icon"], "models": models,
                    "providerid": saved.get((kind, url.rstrip("/")))}

        found = await asyncio.gather(*(probe(kind, url) for kind, url in self.detect_urls.items()))
        return [entry for entry in found if entry is not None]

    async def _models_of(self, row: dict, timeout: float = MODELS_TIMEOUT_SECONDS) -> list[dict]:
        """The models of a saved provider, from the cache while it is fresh.
        Raises ProviderError, VaultError, ValueError."""
        fingerprint = (row["url"], row["kind"], row["updated"])
        cached = self._cache.get(row["id"])
        now = time.monotonic()
        if cached and cached[0] > now and cached[1] == fingerprint:
            return cached[2]
        models = await self.available(row["url"], row["kind"], self._key(row), timeout=timeout)
        self._cache[row["id"]] = (time.monotonic() + self.ttl, fingerprint, models)
        return models

    # -- the models a session can use -----------------------------------------------------------

    async def catalog(self) -> dict:
        """The models a session can use, from every saved provider, fetched concurrently:
        `{"providers": [{id, name, kind, icon, error}], "models": [{id: "<providerid>/<model>",
        provider: {id, name, icon}, model, name, context, tools, reasoning, free}]}`. A provider that
        fails is listed with `error` (a sentence) and no models; it never breaks the catalog.
        When a provider has a chosen list of models, only those are offered."""
        rows = await self.store.list_providers()
        results = await asyncio.gather(*(self._catalog_entry(row) for row in rows))
        providers, models = [], []
        for row, (entries, error) in zip(rows, results):
            brief = {"id": row["id"], "name": row["name"], "icon": self.icon(row["kind"])}
            providers.append({**brief, "kind": row["kind"], "error": error})
            chosen = row["data"].get("models")
            for model in entries:
                if chosen and model["id"] not in chosen:
                    continue
                models.append({"id": f"{row['id']}/{model['id']}", "provider": brief, "model": model["id"],
                               "name": model["name"], "context": model["context"], "tools": model["tools"],
                               "reasoning": model["reasoning"], "free": model["free"]})
        return {"providers": providers, "models": models}

    async def models(self) -> list[dict]:
        """The catalog's models alone (a flat list; providers that failed are left out)."""
        return (await self.catalog())["models"]

    async def _catalog_entry(self, row: dict) -> tuple[list[dict], str | None]:
        try:
            return await self._models_of(row), None
        except ProviderError as exc:
            return [], exc.message
        except VaultError as exc:
            return [], f"The key of this provider cannot be used: {exc}"
        except ValueError as exc:
            return [], f"The provider cannot be called: {exc}"
        except Exception:  # a models list of a shape nobody planned for: one provider, not the page
            log.exception("reading the models of provider %s failed", row["id"])
            return [], "The provider's models list could not be read."

    async def target(self, model_ref: str) -> ProviderTarget:
        """Where to call the model `"<providerid>/<model id>"` (split on the first "/": model ids
        may hold one, e.g. OpenRouter's "openai/gpt-4.1"). For Ollama: the native /api/chat with
        `options.num_ctx` = the model's context window, capped at MAX_OLLAMA_NUM_CTX. Raises
        ModelError for a malformed reference, an unknown provider or a key that cannot be
        decrypted; it does not check that the provider offers the model (the call will say).
        Only Ollama costs a request (/api/show, unless the catalog cached the model); for the
        other kinds `context` comes from the cached models list, None when it is not cached."""
        if not isinstance(model_ref, str):
            raise ModelError("choose a model: '<provider>/<model>'")
        providerid, slash, model = model_ref.partition("/")
        if not slash or not providerid.strip() or not model.strip():
            raise ModelError(f"'{model_ref[:200]}' is not a model reference: '<provider>/<model>'")
        row = await self.store.get_provider(providerid)
        if row is None:
            raise ModelError(f"there is no provider {providerid[:64]}; choose another model")
        try:
            key = self._key(row)
        except VaultError as exc:
            raise ModelError(f"the key of provider {row['name']} cannot be used: {exc}") from None
        kind, url = row["kind"], row["url"]
        if kind == "ollama":
            context = await self._ollama_context(row, model, key)
            options = {"options": {"num_ctx": min(context, MAX_OLLAMA_NUM_CTX)}} if context else {}
            return ProviderTarget(row["id"], _server_root(url) + "/api/chat", model, True, key, options,
                                  min(context, MAX_OLLAMA_NUM_CTX) if context else None)
        headers = dict(OPENROUTER_HEADERS) if kind == "openrouter" else {}
        return ProviderTarget(row["id"], _api_base(kind, url) + "/chat/completions", model, False, key, {},
                              self._cached_context(row, model), headers)

    def _cached_context(self, row: dict, model: str) -> int | None:
        """The window of a model from a fresh cached models list, without a network call: a run
        must not wait for (or be slowed by) a list that may be a megabyte."""
        cached = self._cache.get(row["id"])
        if cached and cached[0] > time.monotonic() and cached[1] == (row["url"], row["kind"], row["updated"]):
            return next((m["context"] for m in cached[2] if m["id"] == model), None)
        return None

    async def _ollama_context(self, row: dict, model: str, key: str | None) -> int | None:
        """The trained window of an Ollama model: from the cache, else one /api/show."""
        if (context := self._cached_context(row, model)) is not None:
            return context
        fetch = _Fetch(row["url"], key, TARGET_LOOKUP_TIMEOUT_SECONDS)
        try:
            return _ollama_show_facts(await fetch.post(_server_root(row["url"]) + "/api/show", {"model": model}))[0]
        except ProviderError:
            return None  # the server's own default window; the chat call reports what is wrong


# -- reading the models endpoints ------------------------------------------------------------------


class _Fetch:
    """GET and POST JSON with the provider's key; the key stays in the Authorization header."""

    __slots__ = ("url", "_headers", "timeout")

    def __init__(self, url: str, key: str | None, timeout: float):
        self.url = url
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"<_Fetch {self.url}>"

    async def get(self, url: str) -> Any:
        return await request_json("GET", url, self._headers, None, self.timeout, MAX_MODELS_BYTES)

    async def post(self, url: str, body: Any) -> Any:
        return await request_json("POST", url, self._headers, body, self.timeout, MAX_MODELS_BYTES)


def _server_root(url: str) -> str:
    """The root of a local server, whose OpenAI routes live under /v1 (people often paste the
    OpenAI base URL of Ollama or LM Studio: take /v1 off)."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def _api_base(kind: str, url: str) -> str:
    """The OpenAI-compatible base: /v1 of a local server, the URL itself for hosted APIs."""
    return _server_root(url) + "/v1" if kind in LOCAL_KINDS else url.rstrip("/")


def _shape_error(fetch: _Fetch, what: str) -> ProviderError:
    host = urlsplit(fetch.url).netloc
    return ProviderError(f"The answer of {host} is not {what}", kind=KIND_INVALID_RESPONSE, retry=False)


def _entries(body: Any, fetch: _Fetch, key: str = "data", ident: str = "id") -> list[dict]:
    """The model objects of `{"data": [...]}` (or a bare list: Together) that have an id."""
    items = body.get(key) if isinstance(body, dict) else body
    if not isinstance(items, list):
        raise _shape_error(fetch, "a models list")
    return [item for item in items if isinstance(item, dict) and isinstance(item.get(ident), str) and item[ident]]


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _model(ident: str, name: Any = None, context: Any = None, tools: bool | None = None,
           reasoning: bool | None = None, free: bool | None = None) -> dict:
    """One model; None for tools, reasoning or free means "not said" (hints or defaults fill it)."""
    return {"id": ident, "name": name if isinstance(name, str) and name else ident,
            "context": _positive(context), "tools": tools, "reasoning": reasoning, "free": free}


def _finish(models: list[dict], template: dict) -> list[dict]:
    """Leave out what is not a chat model and fill what the endpoint did not say from the
    template's hints; local models are free."""
    rules = template.get("models") or {}
    skip, hints = rules.get("skip", ()), rules.get("hints", ())
    result, seen = [], set()
    for model in models:
        lowered = model["id"].lower()
        if model["id"] in seen or any(fnmatch.fnmatchcase(lowered, pattern) for pattern in skip):
            continue
        seen.add(model["id"])
        hint = next((h for h in hints if fnmatch.fnmatchcase(lowered, h["match"])), {})
        if model["context"] is None:
            model["context"] = _positive(hint.get("context"))
        for flag in ("tools", "reasoning"):
            if model[flag] is None and flag in hint:
                model[flag] = bool(hint[flag])  # otherwise None: the provider does not say
        if model["free"] is None:
            model["free"] = bool(template["local"])
        result.append(model)
    return result


def _openai_models(body: Any, kind: str, fetch: _Fetch) -> list[dict]:
    """GET {base}/models of OpenAI, Groq, Mistral, DeepSeek, Together and any compatible server."""
    models = []
    for item in _entries(body, fetch):
        ident = item["id"]
        if item.get("active") is False:  # Groq keeps retired models in the list
            continue
        capabilities = item.get("capabilities")
        tools = reasoning = free = None
        if isinstance(capabilities, dict):  # Mistral
            if capabilities.get("completion_chat") is False:
                continue
            tools = bool(capabilities.get("function_calling"))
        features = item.get("supported_features")
        if isinstance(features, list):  # newer Groq answers
            tools, reasoning = "tools" in features, "reasoning" in features
        model_type = item.get("type")
        if kind == "together" and isinstance(model_type, str) and model_type not in ("chat", "language", "code"):
            continue
        pricing = item.get("pricing")
        if kind == "together" and isinstance(pricing, dict):
            free = all(pricing.get(k) == 0 for k in ("input", "output", "hourly"))
        context = item.get("context_window") or item.get("max_context_length") or item.get("context_length")
        models.append(_model(ident, item.get("display_name") or item.get("name"), context, tools, reasoning, free))
    return models


async def _openrouter_models(fetch: _Fetch) -> list[dict]:
    """GET /api/v1/models: context_length, supported_parameters (tools, reasoning) and pricing
    (strings of USD per token; free when prompt and completion are 0)."""
    body = await fetch.get(_api_base("openrouter", fetch.url) + "/models")
    models = []
    for item in _entries(body, fetch):
        architecture = item.get("architecture") if isinstance(item.get("architecture"), dict) else {}
        outputs = architecture.get("output_modalities")
        if isinstance(outputs, list) and "text" not in outputs:
            continue  # image generators
        parameters = item.get("supported_parameters")
        parameters = parameters if isinstance(parameters, list) else []
        pricing = item.get("pricing") if isinstance(item.get("pricing"), dict) else {}
        free = _is_zero(pricing.get("prompt")) and _is_zero(pricing.get("completion"))
        models.append(_model(item["id"], item.get("name"), item.get("context_length"), "tools" in parameters,
                             "reasoning" in parameters or "include_reasoning" in parameters, free))
    return models


def _is_zero(price: Any) -> bool:
    try:
        return Decimal(str(price)) == 0
    except InvalidOperation:
        return False


def _ollama_show_facts(body: Any) -> tuple[int | None, list[str] | None]:
    """The trained context window (`model_info["<arch>.context_length"]`) and the capabilities
    of an /api/show answer."""
    if not isinstance(body, dict):
        return None, None
    info = body.get("model_info") if isinstance(body.get("model_info"), dict) else {}
    arch = info.get("general.architecture")
    context = _positive(info.get(f"{arch}.context_length")) if isinstance(arch, str) else None
    if context is None:  # an architecture field missing: any "<x>.context_length" will do
        context = next((_positive(v) for k, v in info.items() if k.endswith(".context_length") and _positive(v)), None)
    capabilities = body.get("capabilities")
    return context, [c for c in capabilities if isinstance(c, str)] if isinstance(capabilities, list) else None


async def _ollama_models(fetch: _Fetch) -> list[dict]:
    """GET /api/tags, then POST /api/show for each model (a few at a time) for its capabilities
    (tools, thinking) and context window. Embedding-only models are left out."""
    root = _server_root(fetch.url)
    names = [item["name"] for item in _entries(await fetch.get(root + "/api/tags"), fetch, "models", "name")]
    gate = asyncio.Semaphore(OLLAMA_SHOW_CONCURRENCY)

    async def show(name: str) -> dict | None:
        async with gate:
            try:
                context, capabilities = _ollama_show_facts(await fetch.post(root + "/api/show", {"model": name}))
            except ProviderError:
                return _model(name)  # listed but not describable: keep it, capabilities unknown
        if capabilities and "completion" not in capabilities:
            return None
        caps = capabilities or []
        return _model(name, name, context, "tools" in caps, "thinking" in caps)

    described = await asyncio.gather(*(show(name) for name in dict.fromkeys(names)))
    return [model for model in described if model is not None]


async def _lmstudio_models(fetch: _Fetch) -> list[dict]:
    """GET /api/v0/models (type llm or vlm; loaded_context_length is the usable window when a
    model is loaded, else max_context_length); old builds only have /v1/models."""
    root = _server_root(fetch.url)
    try:
        body = await fetch.get(root + "/api/v0/models")
    except ProviderError as exc:
        if exc.status not in (404, 405):
            raise
        return _openai_models(await fetch.get(root + "/v1/models"), "lmstudio", fetch)
    models = []
    for item in _entries(body, fetch):
        if item.get("type") not in ("llm", "vlm", None):
            continue  # embeddings
        capabilities = item.get("capabilities") if isinstance(item.get("capabilities"), list) else []
        context = _positive(item.get("loaded_context_length")) or item.get("max_context_length")
        models.append(_model(item["id"], None, context, "tool_use" in capabilities, None))
    return models


async def _llamacpp_models(fetch: _Fetch) -> list[dict]:
    """GET /v1/models with GET /props: `default_generation_settings.n_ctx` is the usable window
    per slot (n_ctx_train in /v1/models is only the trained maximum) and
    `chat_template_caps.supports_tools` says whether the template takes tools."""
    root = _server_root(fetch.url)

    async def props() -> dict:
        try:
            body = await fetch.get(root + "/props")
        except ProviderError:
            return {}  # older builds, or a router: the list alone still names the models
        return body if isinstance(body, dict) else {}

    listed = await fetch.get(root + "/v1/models")  # first: it says whether this is llama.cpp at all
    settings = await props()
    generation = settings.get("default_generation_settings")
    context = generation.get("n_ctx") if isinstance(generation, dict) else None
    caps = settings.get("chat_template_caps")
    tools = bool(caps.get("supports_tools")) if isinstance(caps, dict) else None
    return [_model(item["id"], None, context, tools, None) for item in _entries(listed, fetch)]
