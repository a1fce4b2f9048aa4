"""Projects|mcp: the MCP servers a project defines and what became of each.

The use case behind the API's list: read the project's definitions (in the folder of the
session when one is given: a worktree has its own files) and join them with the state of the
servers of that session, or with how many sessions run each.

Must not: start or stop servers (the agent's runs do, after asking), or decide anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from totem.errors import NotFound
from totem.mcp.definitions import ServerDefinition, offered_servers
from totem.mcp.servers import McpServers
from totem.security.boundary import real_root, session_root
from totem.security.vault import Scrubber
from totem.store import Store


class ProjectServersService:
    def __init__(self, store: Store, servers: McpServers, forge: ServerDefinition | None = None,
                 scrubber: Callable[[], Scrubber] = Scrubber.empty):
        self.store = store
        self.servers = servers
        self.forge = forge  # Forge's MCP server (forgemcp), offered to Total.js projects
        self.scrubber = scrubber  # () -> the current vault.Scrubber: a variable holding a key is masked

    async def list(self, projectid: str, sessionid: str | None = None) -> dict[str, Any]:
        """`{servers: [...], invalid: [{file, error, server?}]}`. Raises NotFound for an unknown
        project, or a session that is not one of the project's."""
        project = await self.store.get_project(projectid)
        if project is None:
            raise NotFound(("id", f"no project {projectid}"))
        root = real_root(project["path"])
        if sessionid is not None:
            session = await self.store.get_session(sessionid)
            if session is None or session["projectid"] != projectid:
                raise NotFound(("sessionid", f"no session {sessionid} in this project"))
            root = session_root(session, project)
        definitions, problems = await asyncio.to_thread(offered_servers, root, self.forge)
        scrubber = self.scrubber()
        return {"servers": self.servers.states(sessionid, definitions,
                                               hidden=lambda value: scrubber.scrub(value) != value),
                "invalid": [problem.view() for problem in problems]}
