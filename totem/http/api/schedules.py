"""Schedules|list, save, remove and run: scheduled prompts of a project. Each handler checks the
type and range of every field and calls `ctx.services.schedules` (totem/services/schedules.py)."""

from __future__ import annotations

from totem.http.api import Action, success
from totem.http.api.sessions import MAX_NAME_CHARS, MAX_PROMPT_CHARS
from totem.services.schedules import DEFAULT_MODE, KINDS, MAX_INTERVAL_MINUTES, MIN_INTERVAL_MINUTES, TIME_PATTERN
from totem.services.sessions import MODES

MAX_ID_CHARS = 64


async def list_schedules(ctx):
    params = ctx.params(("projectid",))
    projectid = params.text("projectid", required=True, max_chars=MAX_ID_CHARS)
    params.done()
    return await ctx.services.schedules.list(projectid)


async def save_schedule(ctx):
    body = await ctx.body(("id", "projectid", "name", "prompt", "model", "kind", "interval", "time", "mode",
                           "autoaccept", "enabled"))
    fields = {
        "projectid": body.text("projectid", required=True, max_chars=MAX_ID_CHARS),
        "name": body.text("name", required=True, max_chars=MAX_NAME_CHARS),
        "prompt": body.text("prompt", required=True, max_chars=MAX_PROMPT_CHARS, strip=False),
        "model": body.text("model", required=True, max_chars=300),
        "kind": body.choice("kind", KINDS, required=True),
        "interval": body.integer("interval", MIN_INTERVAL_MINUTES, MAX_INTERVAL_MINUTES),
        "time": body.text("time", max_chars=5),
        "mode": body.choice("mode", MODES, default=DEFAULT_MODE),
        "autoaccept": body.boolean("autoaccept", default=False),
        "enabled": body.boolean("enabled", default=True),
    }
    scheduleid = body.text("id", max_chars=MAX_ID_CHARS)
    if fields["time"] is not None and not TIME_PATTERN.fullmatch(fields["time"]):
        body.errors.append(("time", "must be HH:MM, 00:00 to 23:59, in the server's time zone"))
    if fields["prompt"] is not None and not fields["prompt"].strip():
        body.errors.append(("prompt", "must not be empty"))
    body.done()
    return await ctx.services.schedules.save(fields, scheduleid)


async def remove_schedule(ctx):
    ctx.params(()).done()
    return success(await ctx.services.schedules.remove(ctx.id))


async def run_schedule(ctx):
    ctx.params(()).done()
    return await ctx.services.schedules.run_now(ctx.id)


ACTIONS = (
    Action("schedules", "Schedules|list", list_schedules),
    Action("schedules_save", "Schedules|save", save_schedule, changes=True),
    Action("schedules_remove", "Schedules|remove", remove_schedule, changes=True, takes_id=True),
    Action("schedules_run", "Schedules|run", run_schedule, changes=True, takes_id=True),
)
