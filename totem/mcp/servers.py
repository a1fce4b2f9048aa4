"""The MCP servers running for each session, and what became of the others.

Owns starting a server once its start is approved (the agent asks), its tools as the agent's
tools, stopping it when its definition changes, when its session is removed and at shutdown,
remembering for the session a start the person refused (the same definition is not asked for
again in that session), and the state of every server for the API.

Must not: decide or ask whether a server may start (the agent's gate does), or read the
project's files (definitions.py does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from totem.clock import now_ms
from totem.mcp.client import McpClient, McpError
from totem.mcp.definitions import ServerDefinition
from totem.mcp.tools import MAX_NAME_CHARS, McpTool, clean_text

log = logging.getLogger("totem.mcp")


@dataclass
class Running:
    """A started server of one session."""

    definition: ServerDefinition
    client: McpClient
    tools: list[McpTool]
    started: int = field(default_factory=now_ms)
    skipped: list[str] = field(default_factory=list)  # tools left out, and why


class McpServers:
    """The project MCP servers of every session of one Totem."""

    def __init__(self) -> None:
        self._running: dict[str, dict[str, Running]] = {}
        self._refused: dict[str, set[str]] = {}  # session -> digests the person refused
        self._failed: dict[str, dict[str, tuple[str, str]]] = {}  # session -> name -> (digest, why)
        self._started: dict[str, dict[str, ServerDefinition]] = {}  # session -> name -> the last started
        self._starting: dict[tuple[str, str], asyncio.Lock] = {}

    def running(self, sessionid: str, definition: ServerDefinition) -> Running | None:
        """The session's server of this exact definition, while it lives."""
        running = self._running.get(sessionid, {}).get(definition.name)
        if running is None or running.definition.digest != definition.digest or running.client.ended:
            return None
        return running

    def last_started(self, sessionid: str, name: str) -> ServerDefinition | None:
        """The pinned definition under which the session last started this server (it may have
        been stopped since: its files changed)."""
        return self._started.get(sessionid, {}).get(name)

    def refused(self, sessionid: str, definition: ServerDefinition) -> bool:
        return definition.digest in self._refused.get(sessionid, set())

    def refuse(self, sessionid: str, definition: ServerDefinition) -> None:
        self._refused.setdefault(sessionid, set()).add(definition.digest)

    async def start(self, sessionid: str, root: str, definition: ServerDefinition,
                    call_timeout_s: float | None = None, confine=None) -> Running:
        """Start an approved server for the session (a running older definition of the same
        name is stopped first; a stdio one under `confine`, the sandbox's) and list its tools.
        Raises McpError."""
        lock = self._starting.setdefault((sessionid, definition.name), asyncio.Lock())
        async with lock:
            if (running := self.running(sessionid, definition)) is not None:
                return running
            await self._stop(sessionid, definition.name)
            client = McpClient(definition)
            try:
                await client.start(root, confine=confine)
                raw = await client.list_tools()
            except McpError as exc:
                await client.close()
                self._failed.setdefault(sessionid, {})[definition.name] = (definition.digest, str(exc))
                raise
            except BaseException:
                await client.close()
                raise
            tools, skipped = _tools_of(client, raw, call_timeout_s)
            running = Running(definition, client, tools, skipped=skipped)
            self._running.setdefault(sessionid, {})[definition.name] = running
            self._started.setdefault(sessionid, {})[definition.name] = definition
            self._failed.get(sessionid, {}).pop(definition.name, None)
            return running

    async def retire(self, sessionid: str, definitions: list[ServerDefinition]) -> None:
        """Stop the session's servers whose definition changed or went from the files."""
        current = {definition.name: definition.digest for definition in definitions}
        for name, running in list(self._running.get(sessionid, {}).items()):
            if current.get(name) != running.definition.digest:
                await self._stop(sessionid, name)

    def tools(self, sessionid: str, definitions: list[ServerDefinition]) -> list[McpTool]:
        """The tools of the session's servers that still run under their current definition."""
        tools: list[McpTool] = []
        for definition in definitions:
            running = self.running(sessionid, definition)
            if running is not None:
                tools.extend(running.tools)
        return tools

    def states(self, sessionid: str | None, definitions: list[ServerDefinition],
               hidden: Callable[[str], bool] | None = None) -> list[dict]:
        """Each defined server with its state in the session: running (with its tools), ended,
        failed, refused or not started; without a session, how many sessions run it. `hidden`:
        the variable values never to show (definitions.variable_view)."""
        states = []
        for definition in definitions:
            view = definition.shown(hidden) | {"digest": definition.digest}
            if sessionid is None:
                count = sum(1 for sessions in self._running.values()
                            if (r := sessions.get(definition.name)) and r.definition.digest == definition.digest
                            and not r.client.ended)
                states.append(view | {"state": "running" if count else "stopped", "sessions": count})
                continue
            running = self._running.get(sessionid, {}).get(definition.name)
            failed = self._failed.get(sessionid, {}).get(definition.name)
            if running is not None and running.definition.digest == definition.digest:
                if running.client.ended:
                    view |= {"state": "ended", "error": running.client.ended}
                else:
                    view |= {"state": "running", "started": running.started,
                             "tools": [tool.remote_name for tool in running.tools], "skipped": running.skipped}
            elif failed is not None and failed[0] == definition.digest:
                view |= {"state": "failed", "error": failed[1]}
            elif self.refused(sessionid, definition):
                view |= {"state": "refused"}
            else:
                view |= {"state": "not started"}
            states.append(view)
        return states

    async def stop_session(self, sessionid: str) -> None:
        """Stop every server of a session (it was removed, or its run's project changed)."""
        for name in list(self._running.get(sessionid, {})):
            await self._stop(sessionid, name)
        self._running.pop(sessionid, None)
        self._refused.pop(sessionid, None)
        self._failed.pop(sessionid, None)
        self._started.pop(sessionid, None)
        for key in [key for key in self._starting if key[0] == sessionid]:
            self._starting.pop(key, None)

    async def stop_all(self) -> None:
        for sessionid in list(self._running):
            await self.stop_session(sessionid)

    async def _stop(self, sessionid: str, name: str) -> None:
        running = self._running.get(sessionid, {}).pop(name, None)
        if running is not None:
            try:
                await running.client.close()
            except Exception:  # a server that fails to stop must not stop the others
                log.exception("stopping the MCP server %s failed", name)


def _tools_of(client: McpClient, raw: list[dict], call_timeout_s: float | None) -> tuple[list[McpTool], list[str]]:
    """The tools to offer, and a line for each one left out (a name that is empty, too long
    once prefixed, or the same as another's after cleaning)."""
    tools: dict[str, McpTool] = {}
    skipped = []
    for item in raw:
        name = item.get("name")
        if not isinstance(name, str) or not name or len(name) > 128:
            skipped.append(f"{clean_text(name, 40) or '(no name)'}: not a valid tool name")
            continue
        tool = McpTool(client, item, call_timeout_s)
        if len(tool.name) > MAX_NAME_CHARS:
            skipped.append(f"{clean_text(name, 40)}: the name is too long")
        elif tool.name in tools:
            skipped.append(f"{clean_text(name, 40)}: the same name as another tool once cleaned")
        else:
            tools[tool.name] = tool
    return list(tools.values()), skipped
