"""Model providers: the templates, the saved providers and their keys, and what each one offers.

Owns: the known providers (`providers.json` beside this file: data, not code); the saved
providers with their key encrypted by the vault (write-only: no answer, message, log line or
repr() ever holds a key); the models each one offers in one shape `{id, name, context, tools,
reasoning, free, price}`, filtered and completed by its template; finding local servers (`detect`);
the catalog of the models a session can use (cached in memory for CATALOG_TTL_SECONDS); and
turning a model reference `"<providerid>/<model id>"` into a `ProviderTarget` the agent loop
calls.

Must not: know how any kind of provider is called or read (its adapter in `kinds/` does: the
models endpoints, the chat URL, the window), stream chats (client.py does), touch SQL (the store
does) or know about HTTP requests to Totem itself (api/providers.py does).
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from totem.agent.kinds import KINDS, Fetch, ModelInfo, ProviderKind, ProviderTarget
from totem.agent.kinds.base import PRICE_TOKENS, positive, price_of
from totem.agent.provider_errors import ModelError, ProviderError
from totem.security.vault import VaultError

TEMPLATES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "providers.json")
MODELS_TIMEOUT_SECONDS = 15.0
# A local server either answers at once or is not there; a closed port fails immediately.
DETECT_TIMEOUT_SECONDS = 1.0
DETECT_TOTAL_SECONDS = 5.0
# How long target() waits for a kind that must ask for the window (Ollama's /api/show).
TARGET_LOOKUP_TIMEOUT_SECONDS = 5.0
CATALOG_TTL_SECONDS = 300.0
MAX_URL_CHARS = 2048
MIN_REDACTED_KEY_CHARS = 4
REDACTED = "[key]"
TEMPLATE_FIELDS = ("id", "name", "kind", "url", "key", "local", "icon")

log = logging.getLogger("totem.providers")

# Named here because the class below has a method `list`, which hides the builtin in its annotations.
Models = list[ModelInfo]
Rows = list[dict]

# ModelError and ProviderTarget live with the errors and the kinds; the services import them here.
__all__ = ["ModelError", "ProviderTarget", "Providers", "load_templates", "redact", "url_problem"]


def load_templates(path: str = TEMPLATES_FILE) -> list[dict]:
    """The templates of `providers.json`. Raises OSError, ValueError (a broken file)."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    templates = data["templates"]
    for template in templates:
        missing = set(TEMPLATE_FIELDS) - template.keys()
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
    the URL that detect() probes instead of the template's (tests use free ports); `kinds` maps
    each template's kind to its adapter (kinds.KINDS). Raises ValueError when a template names a
    kind that has no adapter."""

    def __init__(self, store, vault, detect_urls: Mapping[str, str] | None = None,
                 ttl: float = CATALOG_TTL_SECONDS, templates_path: str = TEMPLATES_FILE,
                 kinds: Mapping[str, ProviderKind] = KINDS):
        self.store = store
        self.vault = vault
        self.ttl = ttl
        self._templates = load_templates(templates_path)
        self._by_kind = {t["kind"]: t for t in self._templates}
        self._kinds = dict(kinds)
        if unknown := sorted(self._by_kind.keys() - self._kinds.keys()):
            raise ValueError(f"{templates_path}: no adapter speaks the kinds {', '.join(unknown)}")
        self.detect_urls = {t["kind"]: t["url"] for t in self._templates if t["local"]}
        self.detect_urls.update(detect_urls or {})
        # providerid -> (expires at, (url, kind, updated), models)
        self._cache: dict[str, tuple[float, tuple, Models]] = {}
        # model reference -> the window a refusal of a request for its length taught (steps.py):
        # later runs of that model count on it instead of a guess.
        self._refused: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<Providers {len(self._templates)} templates>"

    # -- templates ------------------------------------------------------------------------------

    def templates(self) -> Rows:
        """The known providers: {id, name, kind, url, key (needed, optional, none), local, icon}."""
        return [{k: t[k] for k in ("id", "name", "kind", "url", "key", "local", "icon")} for t in self._templates]

    def kinds(self) -> tuple[str, ...]:
        return tuple(self._by_kind)

    def add_kind(self, kind: ProviderKind, template: dict) -> None:
        """Offer one more kind of provider beside those of providers.json: its adapter and its
        template (`kind` = the adapter's name), as if both were in the table and the file.
        Raises ValueError for a template that lacks a field or names another kind."""
        missing = set(TEMPLATE_FIELDS) - template.keys()
        if missing or template["kind"] != kind.name:
            raise ValueError(f"the template of kind {kind.name} lacks {', '.join(sorted(missing)) or 'its kind'}")
        self._templates.append(dict(template))
        self._by_kind[kind.name] = self._templates[-1]
        self._kinds[kind.name] = kind
        if template["local"]:
            self.detect_urls.setdefault(kind.name, template["url"])

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

    async def list(self) -> Rows:
        """Every saved provider (see view())."""
        return [self.view(row) for row in await self.store.list_providers()]

    async def get(self, providerid: str) -> dict | None:
        row = await self.store.get_provider(providerid)
        return None if row is None else self.view(row)

    async def save(self, providerid: str | None, name: str, kind: str, url: str, key: str | None = None,
                   models: Sequence[str] | None = None) -> dict | None:
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
                        timeout: float = MODELS_TIMEOUT_SECONDS) -> Models:
        """Every chat model the provider at `url` offers: [{id, name, context, tools, reasoning,
        free, price}], read from the richest endpoint of its kind. `context` is None when the
        provider does not say, `price` ({input, output} in USD per million tokens) when it
        publishes none. Raises ValueError (unknown kind, bad URL) and ProviderError (the provider
        failed or answered something that is not a models list); messages never hold the key."""
        template = self._by_kind.get(kind)
        if template is None:
            raise ValueError(f"unknown provider kind {kind!r}")
        if (problem := url_problem(url)) is not None:
            raise ValueError(f"url {problem}")
        try:
            adapter = self._kinds[kind]
            models = await adapter.models(Fetch(url, key, timeout, adapter))
        except ProviderError as exc:
            exc.message = redact(exc.message, key)
            exc.args = (exc.message,)
            raise
        return _finish(models, template)

    async def detect(self) -> Rows:
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

    async def _models_of(self, row: dict, timeout: float = MODELS_TIMEOUT_SECONDS) -> Models:
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
        provider: {id, name, icon}, model, name, context, contextguessed, tools, reasoning, free,
        price}]}` (`contextguessed`: the provider does not say, `context` is its kind's default;
        `price`: {input, output} in USD per million tokens, None when the provider gives none). A provider that
        fails is listed with `error` (a sentence) and no models; it never breaks the catalog.
        When a provider has a chosen list of models, only those are offered."""
        rows = await self.store.list_providers()
        results = await asyncio.gather(*(self._catalog_entry(row) for row in rows))
        providers, models = [], []
        for row, (entries, error) in zip(rows, results, strict=True):
            brief = {"id": row["id"], "name": row["name"], "icon": self.icon(row["kind"])}
            providers.append({**brief, "kind": row["kind"], "error": error})
            chosen = row["data"].get("models")
            kind = self._kinds.get(row["kind"])
            guess = getattr(kind, "default_context", None)
            for model in entries:
                if chosen and model["id"] not in chosen:
                    continue
                # A window the provider does not state is the kind's default, said to be one.
                models.append({"id": f"{row['id']}/{model['id']}", "provider": brief, "model": model["id"],
                               "name": model["name"], "context": model["context"] or guess,
                               "contextguessed": model["context"] is None, "tools": model["tools"],
                               "reasoning": model["reasoning"], "free": model["free"],
                               "price": model["price"]})
        return {"providers": providers, "models": models}

    async def models(self) -> Rows:
        """The catalog's models alone (a flat list; providers that failed are left out)."""
        return (await self.catalog())["models"]

    async def _catalog_entry(self, row: dict) -> tuple[Models, str | None]:
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
        may hold one, e.g. OpenRouter's "openai/gpt-4.1"), with the adapter of its kind. Raises
        ModelError for a malformed reference, an unknown provider or a key that cannot be
        decrypted; it does not check that the provider offers the model (the call will say).
        `context` and `price` come from the cached models list (None when it is not cached);
        only a kind that must size the window itself (Ollama) costs a request, and only without
        the cache."""
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
        kind = self._kinds.get(row["kind"])
        if kind is None:
            raise ModelError(f"provider {row['name']} is of a kind Totem no longer speaks ({row['kind'][:64]})")
        fetch = Fetch(row["url"], key, TARGET_LOOKUP_TIMEOUT_SECONDS, kind)
        listed = self._cached_model(row, model)
        context = await kind.context_window(fetch, model, listed["context"] if listed else None)
        taught = self._refused.get(model_ref)
        if taught is not None:
            context = min(context, taught) if context else taught
        return ProviderTarget(row["id"], kind.chat_url(row["url"], model), model, kind, key, context,
                              listed["price"] if listed else None)

    def learn_window(self, model_ref: str, window: int) -> None:
        """Keep the window a refusal of `model_ref` taught for its later runs (in memory: a
        restarted server asks again)."""
        self._refused[model_ref] = min(window, self._refused.get(model_ref, window))

    def _cached_model(self, row: dict, model: str) -> ModelInfo | None:
        """A model as the cached models list of its provider describes it, without a network
        call: a run must not wait for (or be slowed by) a list that may be a megabyte. A list
        older than the TTL still serves while the provider is unchanged: a model's window and
        price outlive the cache, and a run started long after the catalog was read must not
        fall back to a guessed window (issue 20)."""
        cached = self._cache.get(row["id"])
        if cached and cached[1] == (row["url"], row["kind"], row["updated"]):
            return next((m for m in cached[2] if m["id"] == model), None)
        return None


# -- what the templates add to a models list -----------------------------------------------------


def _finish(models: Models, template: dict) -> Models:
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
        hint: dict[str, Any] = next((h for h in hints if fnmatch.fnmatchcase(lowered, h["match"])), {})
        if model["context"] is None:
            model["context"] = positive(hint.get("context"))
        for flag in ("tools", "reasoning"):
            if model[flag] is None and flag in hint:
                model[flag] = bool(hint[flag])  # otherwise None: the provider does not say
        if model["price"] is None and isinstance(hint.get("price"), dict):
            model["price"] = price_of(hint["price"].get("input"), hint["price"].get("output"), PRICE_TOKENS,
                                      hint["price"].get("cacheread"), hint["price"].get("cachewrite"))
        if model["free"] is None:
            model["free"] = bool(template["local"])
        result.append(model)
    return result
