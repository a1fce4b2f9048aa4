"""Permissions|list, save, remove and reply: the rules of a project and the questions that wait.
Each handler checks the fields of its input and calls `ctx.services.permissions`
(totem/services/permissions.py), where the use cases live.

Rules come from three layers: the project's (saved in the database from "always" answers and
this API), the global ones (config.ini's [rules], and rules saved with scope global) and the
built-in defaults. Rules never come from files inside a project: a cloned repository must not
grant itself rights.
"""

from __future__ import annotations

from totem.http.api import Action, success
from totem.security.permissions import ACTIONS as RULE_ACTIONS, MAX_PATTERN_CHARS

REPLIES = ("once", "always", "reject")
MAX_ALWAYS_PATTERNS = 50  # one per simple command of a line that asked


async def list_permissions(ctx):
    params = ctx.params(("projectid",))
    projectid = params.text("projectid", max_chars=64)
    params.done()
    return await ctx.services.permissions.list(projectid)


async def save_permission(ctx):
    body = await ctx.body(("projectid", "scope", "tool", "pattern", "action"))
    scope = body.choice("scope", ("project", "global"), default="project")
    projectid = body.text("projectid", max_chars=64)
    tool = body.text("tool", required=True, max_chars=100)
    pattern = body.text("pattern", required=True, max_chars=1000, strip=False)
    action = body.choice("action", RULE_ACTIONS, required=True)
    body.done()
    return await ctx.services.permissions.save(scope, projectid, tool, pattern, action)


async def remove_permission(ctx):
    return success(await ctx.services.permissions.remove(ctx.id))


async def reply_permission(ctx):
    body = await ctx.body(("reply", "pattern", "patterns"))
    reply = body.choice("reply", REPLIES, required=True)
    pattern = body.text("pattern", max_chars=MAX_PATTERN_CHARS, strip=False)
    patterns = body.texts("patterns", MAX_ALWAYS_PATTERNS, max_chars=MAX_PATTERN_CHARS)
    body.done()
    return success(ctx.services.permissions.reply(ctx.id, reply, pattern, patterns))


ACTIONS = (
    Action("permissions", "Permissions|list", list_permissions),
    Action("permissions_save", "Permissions|save", save_permission, changes=True),
    Action("permissions_remove", "Permissions|remove", remove_permission, changes=True, takes_id=True),
    Action("permissions_reply", "Permissions|reply", reply_permission, changes=True, takes_id=True),
)
