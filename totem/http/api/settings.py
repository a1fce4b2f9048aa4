"""Settings|read and Settings|save: the values a run reads, in layers (totem/settings.py). Each
handler checks its fields and calls `ctx.services.settings`."""

from __future__ import annotations

from totem.http.api import Action
from totem.services.settings import SCOPES

MAX_ID_CHARS = 64


async def read_settings(ctx):
    params = ctx.params(("projectid", "sessionid"))
    projectid = params.text("projectid", max_chars=MAX_ID_CHARS)
    sessionid = params.text("sessionid", max_chars=MAX_ID_CHARS)
    params.done()
    return await ctx.services.settings.read(projectid, sessionid)


async def save_setting(ctx):
    body = await ctx.body(("scope", "key", "value", "clear", "projectid", "sessionid"))
    scope = body.choice("scope", SCOPES, required=True)
    key = body.text("key", required=True, max_chars=64)
    clear = bool(body.boolean("clear", default=False))
    projectid = body.text("projectid", max_chars=MAX_ID_CHARS)
    sessionid = body.text("sessionid", max_chars=MAX_ID_CHARS)
    if not clear and "value" not in body.data:
        body.errors.append(("value", "is required (or clear: true to remove the value of this layer)"))
    body.done()
    return await ctx.services.settings.set(scope, key, body.data.get("value"), clear, projectid, sessionid)


ACTIONS = (
    Action("settings", "Settings|read", read_settings),
    Action("settings_save", "Settings|save", save_setting, changes=True),
)
