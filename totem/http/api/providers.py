"""Providers|list, save, remove, models, templates, detect, available and catalog.

The key of a provider is write-only: it goes in through providers_save (and providers_available
for a check before saving) and never comes out; answers say `haskey`. A provider that fails
while listing its models is a 400 on the field that is wrong (`key` when the provider rejected
the key, `url` otherwise), with the provider's reason, never a 500. Each handler checks the
fields of its input and calls `ctx.services.providers` (`totem/services/providers.py`), which
also keeps the scrubber of command output in step with the saved keys.
"""

from __future__ import annotations

from totem.agent.providers import url_problem
from totem.http.api import Action, success

MAX_NAME_CHARS = 100
MAX_KEY_CHARS = 4096
MAX_ID_CHARS = 64
MAX_CHOSEN_MODELS = 1000
MAX_MODEL_ID_CHARS = 300


def _key(body, name: str = "key") -> str | None:
    """The key field: None when absent (keep the stored one), "" to remove it, else the key.
    Only visible ASCII: a key travels in an HTTP header, where a line break would be an injection."""
    key = body.text(name, max_chars=MAX_KEY_CHARS, allow_empty=True)
    if key and any(not 0x21 <= ord(ch) <= 0x7E for ch in key):
        body.errors.append((name, "must contain only visible ASCII characters, without spaces"))
        return None
    return key


def _url(body, required: bool) -> str | None:
    url = body.text("url", required=required, max_chars=4096)
    if url is not None and (problem := url_problem(url)) is not None:
        body.errors.append(("url", problem))
        return None
    return url


def _chosen_models(body) -> list[str] | None:
    value = body.data.get("models")
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) > MAX_CHOSEN_MODELS
            or not all(isinstance(v, str) and 0 < len(v) <= MAX_MODEL_ID_CHARS for v in value)):
        body.errors.append(("models", f"must be a list of at most {MAX_CHOSEN_MODELS} model ids"))
        return None
    return value


async def list_providers(ctx):
    ctx.params(()).done()
    return await ctx.services.providers.list()


async def save_provider(ctx):
    """Create a provider, or change the one of `id`. `key` absent or null keeps the stored key,
    "" removes it. Answers the provider without its key."""
    providers = ctx.services.providers
    body = await ctx.body(("id", "name", "kind", "url", "key", "models"))
    providerid = body.text("id", max_chars=MAX_ID_CHARS)
    name = body.text("name", required=True, max_chars=MAX_NAME_CHARS)
    kind = body.choice("kind", providers.kinds(), required=True)
    url = _url(body, required=True)
    key = _key(body)
    models = _chosen_models(body)
    body.done()
    return await providers.save(providerid, name, kind, url, key, models)


async def remove_provider(ctx):
    ctx.params(()).done()
    return success(await ctx.services.providers.remove(ctx.id))


async def list_models(ctx):
    """Providers|models: the models a session can use, as one flat list of
    `{id: "<providerid>/<model>", provider: {id, name, icon}, model, name, context, tools,
    reasoning, free}`. Unlike Providers|catalog it does not say which providers failed."""
    ctx.params(()).done()
    return await ctx.services.providers.models()


async def list_templates(ctx):
    ctx.params(()).done()
    return ctx.services.providers.templates()


async def detect_servers(ctx):
    ctx.params(()).done()
    return await ctx.services.providers.detect()


async def available_models(ctx):
    """Every model a provider offers: body `{url, kind, key?}`, or `{id}` of a saved provider
    (its stored key is used; `url`, `kind` and `key` given beside `id` override the stored
    ones, so an edit form can check a new URL without typing the key again)."""
    providers = ctx.services.providers
    body = await ctx.body(("id", "url", "kind", "key"))
    providerid = body.text("id", max_chars=MAX_ID_CHARS)
    url = _url(body, required=providerid is None)
    kind = body.choice("kind", providers.kinds(), required=providerid is None)
    key = _key(body)
    body.done()
    return await providers.available(providerid, url, kind, key)


async def read_catalog(ctx):
    """Providers|catalog: `{providers: [{id, name, kind, icon, error}], models: [...]}`; a
    provider that failed has its reason in `error`."""
    ctx.params(()).done()
    return await ctx.services.providers.catalog()


ACTIONS = (
    Action("providers", "Providers|list", list_providers),
    Action("providers_save", "Providers|save", save_provider, changes=True),
    Action("providers_remove", "Providers|remove", remove_provider, changes=True, takes_id=True),
    Action("providers_models", "Providers|models", list_models, mcp=True),
    Action("providers_templates", "Providers|templates", list_templates),
    Action("providers_detect", "Providers|detect", detect_servers),
    # POST only although it changes nothing: it takes a body (maybe a key), which a GET cannot carry.
    Action("providers_available", "Providers|available", available_models, changes=True),
    Action("providers_catalog", "Providers|catalog", read_catalog),
)
