"""Projects|mcp: the MCP servers that a project's files define, with their state (in one
session with `sessionid`). Starting one is never an action: a run asks the person first."""

from __future__ import annotations

from totem.http.api import Action


async def list_servers(ctx):
    params = ctx.params(("sessionid",))
    sessionid = params.text("sessionid", max_chars=64)
    params.done()
    return await ctx.services.servers.list(ctx.id, sessionid)


ACTIONS = (
    Action("projects_mcp", "Projects|mcp", list_servers, takes_id=True),
)
