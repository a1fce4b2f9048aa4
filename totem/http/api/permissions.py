"""Permissions|list, save, remove and reply: the rules of a project and the questions that wait.

Rules come from three layers: the project's (saved in the database from "always" answers and
this API), the global ones (config.ini's [rules], and rules saved with scope global) and the
built-in defaults. Rules never come from files inside a project: a cloned repository must not
grant itself rights.
"""

from __future__ import annotations

from totem.errors import BadRequest, NotFound
from totem.http.api import Action, success
from totem.http.api.projects import require_project
from totem.security.permissions import ACTIONS as RULE_ACTIONS, MAX_PATTERN_CHARS, default_rules, rule_problems

REPLIES = ("once", "always", "reject")
MAX_ALWAYS_PATTERNS = 50  # one per simple command of a line that asked


def rule_view(row: dict, layer: str) -> dict:
    return {"id": row["id"], "tool": row["tool"], "pattern": row["pattern"], "action": row["action"],
            "layer": layer, "projectid": row.get("projectid"), "removable": True}


async def list_permissions(ctx):
    params = ctx.params(("projectid",))
    projectid = params.text("projectid", max_chars=64)
    params.done()
    rules = []
    if projectid:
        await require_project(ctx, projectid)
        rules += [rule_view(row, "project") for row in await ctx.app.store.list_rules(projectid)]
    rules += [rule_view(row, "global") for row in await ctx.app.store.list_rules(None)]
    rules += [{"id": None, "tool": tool, "pattern": pattern, "action": action, "layer": "global",
               "projectid": None, "removable": False, "source": "config.ini"}
              for tool, pattern, action in ctx.app.config.rules]
    rules += [rule.to_dict() | {"projectid": None, "removable": False} for rule in default_rules()]
    return rules


async def save_permission(ctx):
    body = await ctx.body(("projectid", "scope", "tool", "pattern", "action"))
    scope = body.choice("scope", ("project", "global"), default="project")
    projectid = body.text("projectid", max_chars=64)
    tool = body.text("tool", required=True, max_chars=100)
    pattern = body.text("pattern", required=True, max_chars=1000, strip=False)
    action = body.choice("action", RULE_ACTIONS, required=True)
    body.done()
    if scope == "project" and not projectid:
        raise BadRequest(("projectid", "is required for a project rule"))
    if scope == "global" and projectid:
        raise BadRequest(("projectid", "a global rule belongs to no project"))
    problems = rule_problems(tool, pattern, action, ctx.app.runs.registry.kinds())
    if problems:
        raise BadRequest(problems)
    row = await ctx.app.store.add_rule(projectid if scope == "project" else None, tool, pattern, action)
    if row is None:
        raise NotFound(("projectid", f"no project {projectid}"))
    return rule_view(row, scope)


async def remove_permission(ctx):
    row = await ctx.app.store.get_rule(ctx.id)
    if row is None:
        raise NotFound(("id", f"no saved rule {ctx.id}; rules of config.ini and the defaults cannot be removed here"))
    await ctx.app.store.remove_rule(ctx.id)
    return success(ctx.id)


async def reply_permission(ctx):
    body = await ctx.body(("reply", "pattern", "patterns"))
    reply = body.choice("reply", REPLIES, required=True)
    pattern = body.text("pattern", max_chars=MAX_PATTERN_CHARS, strip=False)
    patterns = body.texts("patterns", MAX_ALWAYS_PATTERNS, max_chars=MAX_PATTERN_CHARS)
    body.done()
    ctx.app.runs.reply_permission(ctx.id, reply, pattern, patterns)
    return success(ctx.id)


ACTIONS = (
    Action("permissions", "Permissions|list", list_permissions),
    Action("permissions_save", "Permissions|save", save_permission, changes=True),
    Action("permissions_remove", "Permissions|remove", remove_permission, changes=True, takes_id=True),
    Action("permissions_reply", "Permissions|reply", reply_permission, changes=True, takes_id=True),
)
