"""Settings|read and Settings|save: the values a run reads, in layers (totem/settings.py). Each
handler checks its fields and calls `ctx.services.settings`."""

from __future__ import annotations

from typing import Any

from totem import settings
from totem.http.api import Action, Context
from totem.http.api.contract import ANY, BOOLEAN, ID, NUMBER, STRING, body, choice, mapping, maybe, query, record
from totem.services.settings import SCOPES, TYPE_NAMES

READ_QUERY = query(optional={"projectid": ID, "sessionid": ID})
VALUES = mapping(record({"value": ANY, "source": choice(("config", *SCOPES)), "description": STRING, "title": STRING,
                         "type": choice(sorted({*TYPE_NAMES.values(), "number"})), "min": maybe(NUMBER),
                         "max": maybe(NUMBER), "nullable": BOOLEAN},
                        {"none": STRING | {"description": "what an empty value (null) means, when it is one"}}),
                 "the effective value of each key at that level, and where it comes from")
SAVE_BODY = body({"scope": choice(SCOPES), "key": choice([key.name for key in settings.KEYS])}, {
    "value": ANY | {"description": "of the key's type and range (Settings|read says them); required unless clear"},
    "clear": BOOLEAN | {"description": "remove the value of this layer"},
    "projectid": ID | {"description": "with scope project or session"},
    "sessionid": ID | {"description": "with scope session"}})


async def read_settings(ctx: Context) -> dict[str, dict[str, Any]]:
    params = ctx.params()
    projectid = params.text("projectid")
    sessionid = params.text("sessionid")
    params.done()
    return await ctx.services.settings.read(projectid, sessionid)


async def save_setting(ctx: Context) -> dict[str, dict[str, Any]]:
    body = await ctx.body()
    scope = body.value("scope")
    key = body.value("key")
    clear = bool(body.value("clear", False))
    projectid = body.text("projectid")
    sessionid = body.text("sessionid")
    if not clear and "value" not in body.data:
        body.errors.append(("value", "is required (or clear: true to remove the value of this layer)"))
    body.done()
    return await ctx.services.settings.set(scope, key, body.data.get("value"), clear, projectid, sessionid)


ACTIONS = (
    Action("settings", "Settings|read", read_settings, query=READ_QUERY, answer=VALUES),
    Action("settings_save", "Settings|save", save_setting, changes=True, body=SAVE_BODY, answer=VALUES),
)
