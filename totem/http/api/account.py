"""Account|read, signing in and out (with the access token or a one-time sign-in code), and the
MCP-only tokens (made here, shown once, stored as their digest).

Account|read says what this Totem can do, and only what works: a feature of the protocol that
is not built yet is false here, whatever config.ini says, and its issue turns it on when it
lands.
"""

from __future__ import annotations

from totem import __version__
from totem.errors import BadRequest
from totem.http.api import Action, Input, success
from totem.http.httpd import json_response

MAX_MCP_TOKEN_NAME_CHARS = 100

# What the protocol text names, by whether it is built (issue 10, "Truthful surfaces").
CAPABILITIES = {
    "jobs": True,  # Sessions|jobs, jobstop: background commands, ended with their session
    "attachments": True,  # files in a prompt, GET /attachments/{id}/
    "questions": True,  # the ask tool and Questions|reply
    "todos": True,  # the todo tool and Sessions|todos
    "terminal": True,  # Sessions|terminal, terminalinput, terminalresize, terminalstop
    "schedules": True,  # Schedules|list, save, remove, run, and the scheduler
    "mcp": False,  # POST /$mcp/ when config.ini says mcp = true (read_account)
    "mcpservers": True,  # the project's MCP servers as tools (.totem/mcp.json, .mcp.json), Projects|mcp
    "subagents": True,  # the task tool: sub-agents in child sessions
    "worktrees": True,  # sessions_create worktree, Sessions|git, worktreemerge, worktreediscard
    "undo": True,  # Sessions|undo, redo and diff, over the snapshots of every change
    "fork": True,  # Sessions|fork
    "commands": True,  # Projects|commands: .totem/commands and .totem/agents; Sessions|prompt command, agent
    "forge": True,  # Total.js projects: the Forge documentation, self-checked answers, Forge's MCP server
}


async def read_account(ctx):
    """`?wait=sandbox` waits for the sandbox's probe, whose answer is else `{mode, probing}`
    while it runs (the first seconds after a start)."""
    params = ctx.params(("wait",))
    wait = params.choice("wait", ("sandbox",)) == "sandbox"
    params.done()
    config = ctx.app.config
    return {
        "user": {"id": "local", "name": "local"},
        "token": bool(config.token),
        "mcptokens": await ctx.tokens.any(),
        "version": __version__,
        "capabilities": CAPABILITIES | {"cookiesecure": config.cookiesecure, "mcp": bool(config.mcp)},
        # The sandbox of the agent's processes: mode, layers, which protections hold (sandbox.py).
        "sandbox": await ctx.app.sandbox_status(wait),
    }


def _require_token(ctx) -> None:
    if not ctx.app.config.token:
        raise BadRequest(("token", "no access token is configured, so there is nothing to sign in to"))


async def login(ctx):
    """With `token` (the access token) or `code` (a one-time sign-in code), one of the two."""
    _require_token(ctx)
    body = Input(await ctx.request.json(), ("token", "code"))
    token = body.text("token", max_chars=1024, strip=False)
    code = body.text("code", max_chars=200)
    if token is None and code is None and not body.errors:
        body.errors.append(("token", "give the access token, or a sign-in code as code"))
    elif token is not None and code is not None:
        body.errors.append(("code", "give the access token or a sign-in code, not both"))
    body.done()
    perimeter = ctx.app.perimeter
    cookie = await (perimeter.login(ctx.request, token) if token is not None else
                    perimeter.login_with_code(ctx.request, code))
    return json_response(success("local"), headers=[("Set-Cookie", cookie)])


async def logout(ctx):
    _require_token(ctx)
    cookie = await ctx.app.perimeter.logout(ctx.request)
    return json_response(success("local"), headers=[("Set-Cookie", cookie)])


async def list_mcp_tokens(ctx):
    """The MCP-only tokens made here: id, name and when; never the token."""
    return await ctx.tokens.list()


async def create_mcp_token(ctx):
    """A new MCP-only token: answered once, with its id and name; only its digest is kept."""
    body = Input(await ctx.request.json(), ("name",))
    name = body.text("name", required=True, max_chars=MAX_MCP_TOKEN_NAME_CHARS)
    body.done()
    return await ctx.tokens.create(name)


async def remove_mcp_token(ctx):
    return success(await ctx.tokens.remove(ctx.id))


ACTIONS = (
    Action("account", "Account|read", read_account),
    Action("mcptokens_list", "Account|mcptokens", list_mcp_tokens),
    Action("mcptokens_create", "Account|mcptokencreate", create_mcp_token, changes=True),
    Action("mcptokens_remove", "Account|mcptokenremove", remove_mcp_token, changes=True, takes_id=True),
    Action("login", "Account|login", login, changes=True),
    Action("logout", "Account|logout", logout, changes=True),
)
