"""Account|read, and signing in and out with the access token.

Account|read says what this Totem can do, and only what works: a feature of the protocol that
is not built yet is false here, whatever config.ini says, and its issue turns it on when it
lands.
"""

from __future__ import annotations

from .. import __version__
from ..errors import BadRequest
from ..httpd import json_response
from . import Action, Input, success

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
    config = ctx.app.config
    return {
        "user": {"id": "local", "name": "local"},
        "token": bool(config.token),
        "version": __version__,
        "capabilities": CAPABILITIES | {"cookiesecure": config.cookiesecure, "mcp": bool(config.mcp)},
        # The sandbox of the agent's processes: mode, layers, which protections hold (sandbox.py).
        "sandbox": await (await ctx.app.sandbox_ready()).status(),
    }


def _require_token(ctx) -> None:
    if not ctx.app.config.token:
        raise BadRequest(("token", "no access token is configured, so there is nothing to sign in to"))


async def login(ctx):
    _require_token(ctx)
    body = Input(await ctx.request.json(), ("token",))
    token = body.text("token", required=True, max_chars=1024, strip=False)
    body.done()
    cookie = await ctx.app.perimeter.login(ctx.request, token)
    return json_response(success("local"), headers=[("Set-Cookie", cookie)])


async def logout(ctx):
    _require_token(ctx)
    cookie = await ctx.app.perimeter.logout(ctx.request)
    return json_response(success("local"), headers=[("Set-Cookie", cookie)])


ACTIONS = (
    Action("account", "Account|read", read_account),
    Action("login", "Account|login", login, changes=True),
    Action("logout", "Account|logout", logout, changes=True),
)
