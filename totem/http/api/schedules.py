"""Schedules|list, save, remove and run: scheduled prompts of a project. Each action declares its
input and answer (a save's fields follow its kind); the handler reads the checked fields and calls
`ctx.services.schedules` (totem/services/schedules.py)."""

from __future__ import annotations

from typing import Any

from totem.http.api import Action, Context, success
from totem.http.api.contract import (
    BOOLEAN,
    ID,
    ID_ANSWER,
    INTEGER,
    NUMBER,
    STRING,
    TIME_MS,
    body,
    choice,
    integer,
    listing,
    maybe,
    patterned,
    query,
    record,
    text,
    variants,
)
from totem.http.api.sessions import MAX_NAME_CHARS, MAX_PROMPT_CHARS, MAXCOST, MODEL
from totem.services.schedules import DEFAULT_MODE, KINDS, MAX_INTERVAL_MINUTES, MIN_INTERVAL_MINUTES, TIME_PATTERN
from totem.services.sessions import MODES

MAX_TIME_CHARS = len("HH:MM")
LIST_QUERY = query({"projectid": ID})
SCHEDULE = record({
    "id": STRING, "projectid": STRING, "name": STRING, "prompt": STRING, "model": STRING, "kind": choice(KINDS),
    "interval": maybe(INTEGER), "time": maybe(STRING), "mode": choice(MODES), "autoaccept": BOOLEAN,
    "maxcost": maybe(NUMBER), "enabled": BOOLEAN, "next": maybe(TIME_MS),
    "last": maybe(record({"status": STRING}, {"time": TIME_MS, "sessionid": maybe(STRING), "note": maybe(STRING)})),
    "timezone": STRING, "created": TIME_MS, "updated": TIME_MS})
INTERVAL = integer(MIN_INTERVAL_MINUTES, MAX_INTERVAL_MINUTES, "minutes between runs")
TIME = patterned(f"^({TIME_PATTERN.pattern})$", "HH:MM, 00:00 to 23:59, in the server's time zone", MAX_TIME_CHARS)
FIELDS = {"projectid": ID, "name": text(MAX_NAME_CHARS), "prompt": text(MAX_PROMPT_CHARS), "model": MODEL}
OPTIONS = {"id": ID | {"description": "the schedule to change (a new one when absent)"},
           "mode": choice(MODES, f"{DEFAULT_MODE} when absent"), "autoaccept": BOOLEAN,
           "maxcost": MAXCOST | {"description": "US dollars each run may spend (over the maxcost setting); "
                                                "none when absent"},
           "enabled": BOOLEAN | {"description": "true when absent"}}
SAVE_BODY = variants("kind", {
    "interval": body(FIELDS | {"interval": INTERVAL}, OPTIONS | {"time": TIME}),
    "daily": body(FIELDS | {"time": TIME}, OPTIONS | {"interval": INTERVAL}),
}, "a schedule: every interval minutes, or daily at time")


async def list_schedules(ctx: Context) -> list[dict[str, Any]]:
    params = ctx.params()
    projectid = params.text("projectid")
    params.done()
    return await ctx.services.schedules.list(projectid)


async def save_schedule(ctx: Context) -> dict[str, Any]:
    body = await ctx.body()
    fields = {
        "projectid": body.text("projectid"),
        "name": body.text("name"),
        "prompt": body.text("prompt", strip=False),
        "model": body.text("model"),
        "kind": body.value("kind"),
        "interval": body.value("interval"),
        "time": body.text("time"),
        "mode": body.value("mode", DEFAULT_MODE),
        "autoaccept": body.value("autoaccept", False),
        "maxcost": body.value("maxcost"),
        "enabled": body.value("enabled", True),
    }
    scheduleid = body.text("id")
    body.done()
    return await ctx.services.schedules.save(fields, scheduleid)


async def remove_schedule(ctx: Context) -> dict[str, Any]:
    ctx.params().done()
    return success(await ctx.services.schedules.remove(ctx.id))


async def run_schedule(ctx: Context) -> dict[str, Any]:
    ctx.params().done()
    return await ctx.services.schedules.run_now(ctx.id)


ACTIONS = (
    Action("schedules", "Schedules|list", list_schedules, query=LIST_QUERY, answer=listing(SCHEDULE)),
    Action("schedules_save", "Schedules|save", save_schedule, changes=True, body=SAVE_BODY, answer=SCHEDULE),
    Action("schedules_remove", "Schedules|remove", remove_schedule, changes=True, takes_id=True, answer=ID_ANSWER),
    Action("schedules_run", "Schedules|run", run_schedule, changes=True, takes_id=True,
           answer=record({"sessionid": STRING}, description="the session of the run")),
)
