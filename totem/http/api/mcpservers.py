"""Projects|mcp: the MCP servers that a project's files define, with their state (in one
session with `sessionid`). Starting one is never an action: a run asks the person first."""

from __future__ import annotations

from typing import Any

from totem.http.api import Action, Context
from totem.http.api.contract import ID, STRING, listing, query, record

SERVERS_QUERY = query(optional={"sessionid": ID})
SERVERS = record({"servers": listing(record({"server": STRING, "file": STRING, "state": STRING})),
                  "invalid": listing(record({"file": STRING, "error": STRING}, {"server": STRING}))},
                 description="the servers of .totem/mcp.json and .mcp.json with their state (running, ended, "
                             "failed, refused, not started); invalid: the definitions that cannot be used")


async def list_servers(ctx: Context) -> dict[str, Any]:
    params = ctx.params()
    sessionid = params.text("sessionid")
    params.done()
    return await ctx.services.servers.list(ctx.id, sessionid)


ACTIONS = (
    Action("projects_mcp", "Projects|mcp", list_servers, takes_id=True, query=SERVERS_QUERY, answer=SERVERS),
)
