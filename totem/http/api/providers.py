"""Providers|list, save, remove, models, templates, detect, available and catalog.

The key of a provider is write-only: it goes in through providers_save (and providers_available
for a check before saving) and never comes out; answers say `haskey`. A provider that fails
while listing its models is a 400 on the field that is wrong (`key` when the provider rejected
the key, `url` otherwise), with the provider's reason, never a 500. Each handler checks the
fields of its input and calls `ctx.services.providers` (`totem/services/providers.py`), which
also keeps the scrubber of command output in step with the saved keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from totem.agent.kinds import KINDS
from totem.agent.providers import MAX_URL_CHARS, Models, url_problem
from totem.http.api import Action, Context, Input, success
from totem.http.api.contract import (
    ANY,
    BOOLEAN,
    ID,
    ID_ANSWER,
    STRING,
    TIME_MS,
    body,
    listing,
    maybe,
    patterned,
    record,
    text,
)

if TYPE_CHECKING:
    from totem.services.providers import ProvidersService

MAX_NAME_CHARS = 100
MAX_KEY_CHARS = 4096
MAX_CHOSEN_MODELS = 1000
MAX_MODEL_ID_CHARS = 300
MAX_KIND_CHARS = 64

# Narrower than url_problem (no IPv6 literal, ASCII only), so that what it takes is always taken.
URL = patterned(r"^[Hh][Tt][Tt][Pp][Ss]?://[A-Za-z0-9._-]+"
                r"(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?"
                r"([/?#][!-~]*)?$", "an http:// or https:// address with a host", MAX_URL_CHARS)
# Only visible ASCII: a key travels in an HTTP header, where a line break would be an injection.
KEY = {"type": "string", "maxLength": MAX_KEY_CHARS, "pattern": r"^[!-~]*$",
       "description": "visible ASCII characters, without spaces; \"\" removes the stored key"}
KIND = text(MAX_KIND_CHARS, description="a kind of Providers|templates: " + ", ".join(KINDS))
PROVIDER = record({"id": STRING, "name": STRING, "kind": STRING, "url": STRING, "icon": STRING, "haskey": BOOLEAN,
                   "models": maybe(listing(STRING)), "created": TIME_MS, "updated": TIME_MS},
                  description="a saved provider, never its key; models: the chosen ones (null: all)")
MODEL_INFO = record({"id": STRING}, {"name": maybe(STRING), "context": ANY, "tools": ANY, "reasoning": ANY,
                                     "free": ANY, "price": ANY})
CATALOG_MODEL = record({"id": STRING, "provider": record({"id": STRING, "name": STRING}), "model": STRING},
                       MODEL_INFO["properties"], "a model a session can use; id is <providerid>/<model>")
SAVE_BODY = body({"name": text(MAX_NAME_CHARS), "kind": KIND, "url": URL}, {
    "id": ID | {"description": "the provider to change (a new one when absent)"}, "key": KEY,
    "models": {"type": "array", "maxItems": MAX_CHOSEN_MODELS, "items": text(MAX_MODEL_ID_CHARS),
               "description": "the models to offer (all when absent)"}})
AVAILABLE_BODY = body(optional={"id": ID | {"description": "a saved provider (url and kind are then optional)"},
                                "url": URL, "kind": KIND, "key": KEY}) | {
    "anyOf": [{"required": ["id"]}, {"required": ["url", "kind"]}]}


def _kind(body: Input, providers: ProvidersService) -> str | None:
    """The kind field, one of the kinds this server has (a kind can be added while it runs)."""
    kind: str | None = body.text("kind")
    if kind is not None and kind not in providers.kinds():
        body.errors.append(("kind", f"must be one of {', '.join(providers.kinds())}"))
        return None
    return kind


def _url(body: Input) -> str | None:
    url: str | None = body.text("url")
    if url is not None and (problem := url_problem(url)) is not None:  # the pattern is narrower: a guard
        body.errors.append(("url", problem))
        return None
    return url


async def list_providers(ctx: Context) -> list[dict[str, Any]]:
    ctx.params().done()
    return await ctx.services.providers.list()


async def save_provider(ctx: Context) -> dict[str, Any]:
    """Create a provider, or change the one of `id`. `key` absent or null keeps the stored key,
    "" removes it. Answers the provider without its key."""
    providers = ctx.services.providers
    body = await ctx.body()
    providerid = body.text("id")
    name = body.text("name")
    kind = _kind(body, providers)
    url = _url(body)
    key = body.text("key", strip=False)
    models = body.value("models")
    body.done()
    assert kind is not None and url is not None  # required: done() raised when either was missing or wrong
    return await providers.save(providerid, name, kind, url, key, models)


async def remove_provider(ctx: Context) -> dict[str, Any]:
    ctx.params().done()
    return success(await ctx.services.providers.remove(ctx.id))


async def list_models(ctx: Context) -> list[dict[str, Any]]:
    """Providers|models: the models a session can use, as one flat list of
    `{id: "<providerid>/<model>", provider: {id, name, icon}, model, name, context, tools,
    reasoning, free}`. Unlike Providers|catalog it does not say which providers failed."""
    ctx.params().done()
    return await ctx.services.providers.models()


async def list_templates(ctx: Context) -> list[dict[str, Any]]:
    ctx.params().done()
    return ctx.services.providers.templates()


async def detect_servers(ctx: Context) -> list[dict[str, Any]]:
    ctx.params().done()
    return await ctx.services.providers.detect()


async def available_models(ctx: Context) -> Models:
    """Every model a provider offers: body `{url, kind, key?}`, or `{id}` of a saved provider
    (its stored key is used; `url`, `kind` and `key` given beside `id` override the stored
    ones, so an edit form can check a new URL without typing the key again)."""
    providers = ctx.services.providers
    body = await ctx.body()
    providerid = body.text("id")
    url = _url(body)
    kind = _kind(body, providers)
    key = body.text("key", strip=False)
    body.done()
    return await providers.available(providerid, url, kind, key)


async def read_catalog(ctx: Context) -> dict[str, Any]:
    """Providers|catalog: `{providers: [{id, name, kind, icon, error}], models: [...]}`; a
    provider that failed has its reason in `error`."""
    ctx.params().done()
    return await ctx.services.providers.catalog()


ACTIONS = (
    Action("providers", "Providers|list", list_providers, answer=listing(PROVIDER)),
    Action("providers_save", "Providers|save", save_provider, changes=True, body=SAVE_BODY, answer=PROVIDER),
    Action("providers_remove", "Providers|remove", remove_provider, changes=True, takes_id=True, answer=ID_ANSWER),
    Action("providers_models", "Providers|models", list_models, answer=listing(CATALOG_MODEL)),
    Action("providers_templates", "Providers|templates", list_templates, answer=listing(record(
        {"id": STRING, "name": STRING, "kind": STRING, "url": STRING, "key": STRING, "local": BOOLEAN,
         "icon": STRING}, description="a known provider; key: needed, optional or none"))),
    Action("providers_detect", "Providers|detect", detect_servers, answer=listing(record(
        {"id": STRING, "name": STRING, "kind": STRING, "url": STRING, "models": listing(MODEL_INFO)},
        {"icon": STRING, "providerid": maybe(STRING)}, "a local server that answers, with its models"))),
    # POST only although it changes nothing: it takes a body (maybe a key), which a GET cannot carry.
    Action("providers_available", "Providers|available", available_models, changes=True, body=AVAILABLE_BODY,
           answer=listing(MODEL_INFO)),
    Action("providers_catalog", "Providers|catalog", read_catalog, answer=record(
        {"providers": listing(record({"id": STRING, "name": STRING, "kind": STRING}, {"icon": STRING,
                                                                                      "error": maybe(STRING)})),
         "models": listing(CATALOG_MODEL)}, description="the models a session can use; error: why a provider failed")),
)
