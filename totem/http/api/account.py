"""Account|read, signing in and out (with the access token or a one-time sign-in code), and the
MCP-only tokens (made here, shown once, stored as their digest).

Account|read says what this Totem can do, and only what works: a feature of the protocol that
is not built yet is false here, whatever config.ini says, and its issue turns it on when it
lands.
"""

from __future__ import annotations

from typing import Any

from totem import __version__
from totem.errors import BadRequest
from totem.http.api import Action, Context, success
from totem.http.api.contract import (
    BOOLEAN,
    ID_ANSWER,
    STRING,
    TIME_MS,
    body,
    choice,
    listing,
    mapping,
    query,
    record,
    success as success_answer,
    text,
)
from totem.http.httpd import Response, json_response

MAX_MCP_TOKEN_NAME_CHARS = 100
MAX_TOKEN_CHARS = 1024
MAX_CODE_CHARS = 200
WAITS = ("sandbox",)

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


READ_QUERY = query(optional={"wait": choice(WAITS, "sandbox: wait for the sandbox's probe to end")})
READ_ANSWER = record({
    "user": record({"id": STRING, "name": STRING}), "token": BOOLEAN, "mcptokens": BOOLEAN, "version": STRING,
    "capabilities": mapping(BOOLEAN, "what this Totem can do: " + ", ".join(CAPABILITIES) + ", cookiesecure"),
    "sandbox": record({"mode": STRING}, {"probing": BOOLEAN},
                      "the sandbox of the agent's processes; {mode, probing: true} while its probe runs"),
})


async def read_account(ctx: Context) -> dict[str, Any]:
    """`?wait=sandbox` waits for the sandbox's probe, whose answer is else `{mode, probing}`
    while it runs (the first seconds after a start)."""
    params = ctx.params()
    wait = params.value("wait") == "sandbox"
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


def _require_token(ctx: Context) -> None:
    if not ctx.app.config.token:
        raise BadRequest(("token", "no access token is configured, so there is nothing to sign in to"))


# Not body(): neither field may be null, so that exactly one is given.
LOGIN_BODY = {"type": "object", "properties": {"token": text(MAX_TOKEN_CHARS, description="the access token"),
                                               "code": text(MAX_CODE_CHARS, description="a one-time sign-in code")},
              "additionalProperties": False, "minProperties": 1, "maxProperties": 1,
              "description": "the access token as token, or a one-time sign-in code as code: one of the two"}
SIGNED = success_answer(description="Signed in (or out): the cookie is in Set-Cookie; the value is the user, local")


async def login(ctx: Context) -> Response:
    """With `token` (the access token) or `code` (a one-time sign-in code), one of the two."""
    _require_token(ctx)
    body = await ctx.body()
    token = body.text("token", strip=False)
    code = body.text("code")
    body.done()
    perimeter = ctx.app.perimeter
    cookie = await (perimeter.login(ctx.request, token) if token is not None else
                    perimeter.login_with_code(ctx.request, code))
    return json_response(success("local"), headers=[("Set-Cookie", cookie)])


async def logout(ctx: Context) -> Response:
    _require_token(ctx)
    cookie = await ctx.app.perimeter.logout(ctx.request)
    return json_response(success("local"), headers=[("Set-Cookie", cookie)])


MCP_TOKEN = record({"id": STRING, "name": STRING, "created": TIME_MS})
MCP_TOKENS_ANSWER = record({"tokens": listing(MCP_TOKEN), "config": BOOLEAN})
CREATE_MCP_TOKEN_BODY = body({"name": text(MAX_MCP_TOKEN_NAME_CHARS)})
CREATED_MCP_TOKEN = record(MCP_TOKEN["properties"] | {"token": STRING}, description="shown this once")


async def list_mcp_tokens(ctx: Context) -> dict[str, Any]:
    """The MCP-only tokens made here: id, name and when; never the token."""
    return await ctx.tokens.list()


async def create_mcp_token(ctx: Context) -> dict[str, Any]:
    """A new MCP-only token: answered once, with its id and name; only its digest is kept."""
    body = await ctx.body()
    name = body.text("name")
    body.done()
    return await ctx.tokens.create(name)


async def remove_mcp_token(ctx: Context) -> dict[str, Any]:
    return success(await ctx.tokens.remove(ctx.id))


ACTIONS = (
    Action("account", "Account|read", read_account, query=READ_QUERY, answer=READ_ANSWER),
    Action("mcptokens_list", "Account|mcptokens", list_mcp_tokens, answer=MCP_TOKENS_ANSWER),
    Action("mcptokens_create", "Account|mcptokencreate", create_mcp_token, changes=True, body=CREATE_MCP_TOKEN_BODY,
           answer=CREATED_MCP_TOKEN),
    Action("mcptokens_remove", "Account|mcptokenremove", remove_mcp_token, changes=True, takes_id=True,
           answer=ID_ANSWER),
    Action("login", "Account|login", login, changes=True, body=LOGIN_BODY, answer=SIGNED),
    Action("logout", "Account|logout", logout, changes=True, answer=SIGNED),
)
