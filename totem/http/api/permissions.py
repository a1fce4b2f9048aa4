"""Permissions|list, save, remove and reply: the rules of a project and the questions that wait.
Each handler checks the fields of its input and calls `ctx.services.permissions`
(totem/services/permissions.py), where the use cases live.

Rules come from three layers: the project's (saved in the database from "always" answers and
this API), the global ones (config.ini's [rules], and rules saved with scope global) and the
built-in defaults. Rules never come from files inside a project: a cloned repository must not
grant itself rights.
"""

from __future__ import annotations

from typing import Any

from totem.http.api import Action, Context, success
from totem.http.api.contract import (
    BOOLEAN,
    ID,
    ID_ANSWER,
    STRING,
    body,
    choice,
    listing,
    maybe,
    query,
    record,
    text,
    texts,
)
from totem.security.permissions import (
    ACTIONS as RULE_ACTIONS,
    CALL,
    COMMAND,
    HOST,
    LAYERS,
    MAX_PATTERN_CHARS,
    PATH,
    RUN_LAYER,
    TEXT,
)

REPLIES = ("once", "always", "reject")
SCOPES = ("project", "global")
ANY_TOOL = "*"
MAX_ALWAYS_PATTERNS = 50  # one per simple command of a line that asked
MAX_TOOL_CHARS = 100

SAVED_LAYERS = tuple(layer for layer in LAYERS if layer != RUN_LAYER)  # a run's rules are never listed
RULE = record({"id": maybe(STRING), "tool": STRING, "pattern": STRING, "action": choice(RULE_ACTIONS),
               "layer": choice(SAVED_LAYERS), "projectid": maybe(STRING), "removable": BOOLEAN},
              {"source": STRING,
               "described": STRING | {"description": "an MCP server's start: what the rule covers, in words"}},
              "a rule; only a saved one (removable) has an id")
LIST_QUERY = query(optional={"projectid": ID | {"description": "the project whose rules come first"}})
SAVE_BODY = body({"tool": text(MAX_TOOL_CHARS, description=f"a name of Permissions|tools, or {ANY_TOOL}"),
                  "pattern": text(MAX_PATTERN_CHARS, description="what the rule matches, by the tool's subject"),
                  "action": choice(RULE_ACTIONS)},
                 {"scope": choice(SCOPES, "project when absent"),
                  "projectid": ID | {"description": "required for a project rule, refused for a global one"}})
REPLY_BODY = body({"reply": choice(REPLIES)}, {
    "pattern": text(MAX_PATTERN_CHARS, description="with always: the pattern to allow; with reject: one the "
                                                   "question suggested, to deny from now on"),
    "patterns": texts(MAX_ALWAYS_PATTERNS, MAX_PATTERN_CHARS, "with always: a pattern for each group that asked; "
                      "with reject: patterns the question suggested, each stored as a deny rule "
                      "(none: this call only)")})
TOOLS = record({
    "tools": listing(record({"name": STRING, "subject": choice((PATH, COMMAND, HOST, CALL, TEXT)),
                             "changes": BOOLEAN})),
    "any": {"const": ANY_TOOL}, "actions": listing(choice(RULE_ACTIONS)), "scopes": listing(choice(SCOPES)),
    "replies": listing(choice(REPLIES))},
    description="what a rule may name: each tool of the registry and subject decided without being a tool, with "
                "the kind of its patterns (subject) and whether it changes things; the actions, scopes and replies")


async def list_permissions(ctx: Context) -> list[dict[str, Any]]:
    params = ctx.params()
    projectid = params.text("projectid")
    params.done()
    return await ctx.services.permissions.list(projectid)


async def save_permission(ctx: Context) -> dict[str, Any]:
    body = await ctx.body()
    scope = body.value("scope", "project")
    projectid = body.text("projectid")
    tool = body.text("tool")
    pattern = body.text("pattern", strip=False)
    action = body.value("action")
    body.done()
    return await ctx.services.permissions.save(scope, projectid, tool, pattern, action)


async def remove_permission(ctx: Context) -> dict[str, Any]:
    return success(await ctx.services.permissions.remove(ctx.id))


async def reply_permission(ctx: Context) -> dict[str, Any]:
    body = await ctx.body()
    reply = body.value("reply")
    pattern = body.text("pattern", strip=False)
    patterns = body.value("patterns")
    body.done()
    return success(ctx.services.permissions.reply(ctx.id, reply, pattern, patterns))


async def list_tools(ctx: Context) -> dict[str, Any]:
    """What the rule editor offers, from the tool registry (never a list of its own)."""
    ctx.params().done()
    kinds = ctx.services.permissions.tools()
    return {"tools": [{"name": name, "subject": kind.subject, "changes": kind.changes} for name, kind in kinds.items()],
            "any": ANY_TOOL, "actions": list(RULE_ACTIONS), "scopes": list(SCOPES), "replies": list(REPLIES)}


ACTIONS = (
    Action("permissions", "Permissions|list", list_permissions, query=LIST_QUERY, answer=listing(RULE)),
    Action("permissions_tools", "Permissions|tools", list_tools, answer=TOOLS),
    Action("permissions_save", "Permissions|save", save_permission, changes=True, body=SAVE_BODY, answer=RULE),
    Action("permissions_remove", "Permissions|remove", remove_permission, changes=True, takes_id=True,
           answer=ID_ANSWER),
    Action("permissions_reply", "Permissions|reply", reply_permission, changes=True, takes_id=True, body=REPLY_BODY,
           answer=ID_ANSWER),
)
