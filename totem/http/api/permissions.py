"""Permissions|list, save, remove and reply: the rules of a project and the questions that wait.

Rules come from three layers: the project's (saved in the database from "always" answers and
this API), the global ones (config.ini's [rules], and rules saved with scope global) and the
built-in defaults. Rules never come from files inside a project: a cloned repository must not
grant itself rights.
"""

from __future__ import annotations

from totem.errors import BadRequest, NotFound
from totem.http.api import Action, success
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
from totem.http.api.projects import require_project
from totem.security.permissions import (
    ACTIONS as RULE_ACTIONS,
    CALL,
    COMMAND,
    HOST,
    LAYERS,
    MAX_PATTERN_CHARS,
    PATH,
    TEXT,
    default_rules,
    rule_problems,
)

REPLIES = ("once", "always", "reject")
SCOPES = ("project", "global")
ANY_TOOL = "*"
MAX_ALWAYS_PATTERNS = 50  # one per simple command of a line that asked
MAX_TOOL_CHARS = 100

RULE = record({"id": maybe(STRING), "tool": STRING, "pattern": STRING, "action": choice(RULE_ACTIONS),
               "layer": choice(LAYERS), "projectid": maybe(STRING), "removable": BOOLEAN},
              {"source": STRING}, "a rule; only a saved one (removable) has an id")
LIST_QUERY = query(optional={"projectid": ID | {"description": "the project whose rules come first"}})
SAVE_BODY = body({"tool": text(MAX_TOOL_CHARS, description=f"a name of Permissions|tools, or {ANY_TOOL}"),
                  "pattern": text(MAX_PATTERN_CHARS, description="what the rule matches, by the tool's subject"),
                  "action": choice(RULE_ACTIONS)},
                 {"scope": choice(SCOPES, "project when absent"),
                  "projectid": ID | {"description": "required for a project rule, refused for a global one"}})
REPLY_BODY = body({"reply": choice(REPLIES)}, {
    "pattern": text(MAX_PATTERN_CHARS, description="with always: the pattern to allow"),
    "patterns": texts(MAX_ALWAYS_PATTERNS, MAX_PATTERN_CHARS, "with always: a pattern for each group that asked")})
TOOLS = record({
    "tools": listing(record({"name": STRING, "subject": choice((PATH, COMMAND, HOST, CALL, TEXT)),
                             "changes": BOOLEAN})),
    "any": {"const": ANY_TOOL}, "actions": listing(choice(RULE_ACTIONS)), "scopes": listing(choice(SCOPES)),
    "replies": listing(choice(REPLIES))},
    description="what a rule may name: each tool of the registry and subject decided without being a tool, with "
                "the kind of its patterns (subject) and whether it changes things; the actions, scopes and replies")


def rule_view(row: dict, layer: str) -> dict:
    return {"id": row["id"], "tool": row["tool"], "pattern": row["pattern"], "action": row["action"],
            "layer": layer, "projectid": row.get("projectid"), "removable": True}


async def list_permissions(ctx):
    params = ctx.params()
    projectid = params.text("projectid")
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
    body = await ctx.body()
    scope = body.value("scope", "project")
    projectid = body.text("projectid")
    tool = body.text("tool")
    pattern = body.text("pattern", strip=False)
    action = body.value("action")
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
    body = await ctx.body()
    reply = body.value("reply")
    pattern = body.text("pattern", strip=False)
    patterns = body.value("patterns")
    body.done()
    ctx.app.runs.reply_permission(ctx.id, reply, pattern, patterns)
    return success(ctx.id)


async def list_tools(ctx):
    """What the rule editor offers, from the tool registry (never a list of its own)."""
    ctx.params().done()
    kinds = ctx.app.runs.registry.kinds()
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
