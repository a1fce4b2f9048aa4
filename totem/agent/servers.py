"""A run's project MCP servers: read their definitions, ask before each one starts, and give the
run its tools.

At the start of a run the project's `.totem/mcp.json` and `.mcp.json` are read again, and each
`command` server is pinned to the content of the project files it runs (mcp/pins.py). Each
server that is not yet running for the session under its exact pin is decided as `mcp-start` on
the subject `name@<digest>`: an "always" answer stores a rule for that digest and keeps the pin's
manifest (store: server_pins), so any change to the definition or to one of its files asks
again, and the question says what changed since the approval (or since the start of this session
that it replaces). What starts is what was decided: the files are pinned again just before the
start, and a change in between stops it. Plan mode and scheduled runs never start one (checked
here in code, before any rule: a stored allow must not start a program while nobody is there).
Each start, refusal, failure and problem of the files is shown in the conversation as a part of
its own assistant message (`data.servers`), which never enters the model's context.

Must not: run tool calls (calls.py does), talk the MCP protocol (mcp/client.py does), or decide
permissions (the gate does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from totem.agent.gate import START_TOOL, Asker, AuditRecord, PermissionGate
from totem.agent.recorder import Recorder
from totem.clock import now_ms
from totem.events import MessageCreated
from totem.mcp.client import McpError
from totem.mcp.definitions import ServerDefinition, approval_words, offered_servers, pin_definition
from totem.mcp.pins import changes
from totem.mcp.servers import McpServers
from totem.mcp.tools import declared_tools
from totem.security.vault import Scrubber
from totem.store import Store
from totem.tools import Registry

SCHEDULED_START = "a scheduled run never starts an MCP server (nobody is here to approve it)"
PLAN_START = "plan mode never starts an MCP server"
OLD_PIN = ("approved before Totem pinned the files a server runs: the files below are asked for "
           "the first time")
UNKNOWN_PIN = "an earlier version was approved, but what that one ran was not recorded"


def refusal(record: AuditRecord, definition: ServerDefinition) -> str:
    """Why a start was refused, in words: a rule for this exact definition is named by what it
    covers, never by its digest."""
    kept = any(rule.get("action") == "deny" for rule in record.get("saved", ()))
    if record.get("reply") == "reject":
        return ("the person refused it, and a rule of this project refuses this definition from now on "
                "(Rules: remove it to be asked again)" if kept else "the person refused it")
    rule = record.get("rule")
    if rule is not None and rule["pattern"] == definition.subject:
        layer = "this project" if rule["layer"] == "project" else "all projects"
        return (f"a rule for {layer} refuses {approval_words(definition.name, definition.manifest())} "
                "(Rules: remove it to be asked again)")
    return str(record["reason"])


class ProjectServers:
    """Starts the project MCP servers of runs, through the permission gate."""

    def __init__(self, servers: McpServers, gate: PermissionGate, recorder: Recorder, store: Store, hub,
                 forge: ServerDefinition | None = None, scrubber: Callable[[], Scrubber] = Scrubber.empty,
                 sandbox=None):
        self.servers = servers
        self.scrubber = scrubber  # () -> the current vault.Scrubber: a variable holding a key is masked
        self.sandbox = sandbox  # sandbox.Sandbox: a stdio server's program runs confined (None: not)
        self.forge = forge  # the MCP server of Forge (forgemcp), offered to Total.js projects
        self.gate = gate
        self.recorder = recorder
        self.store = store
        self.hub = hub
        self.call_timeout_s: float | None = None  # of each tool call; None: the client's own

    async def registry_for(self, asker: Asker, registry: Registry, limits: dict | None = None) -> Registry:
        """The tools of a run: the built-in ones and those of the project's servers that run (or
        are started now, once approved); in a Total.js project with `forgemcp`, Forge's too."""
        forge = self.forge if (limits or {}).get("forge", True) else None
        definitions, problems = await asyncio.to_thread(offered_servers, asker.root, forge)
        await self.servers.retire(asker.sessionid, definitions)
        if not definitions and not problems:
            return registry
        notes = _Notes(self, asker.sessionid)
        for problem in problems:
            await notes.add({"tool": "mcp-start", "input": problem.view(),
                             "error": f"{problem.file}: {problem.error}"}, "error")
        for definition in definitions:
            if self.servers.running(asker.sessionid, definition) is None:
                await self._start(asker, definition, notes, limits or {})
        tools = declared_tools(self.servers.tools(asker.sessionid, definitions))
        return registry.with_tools(tools) if tools else registry

    async def _start(self, asker: Asker, definition: ServerDefinition, notes: _Notes, limits: dict) -> None:
        if self.servers.refused(asker.sessionid, definition):
            return
        scrubber = self.scrubber()
        shown = definition.shown(hidden=lambda value: scrubber.scrub(value) != value)
        changed = await self._changes(asker, definition)
        if changed:
            shown["changed"] = changed
        if asker.scheduled or asker.mode != "build":
            reason = SCHEDULED_START if asker.scheduled else PLAN_START
            await notes.add({"tool": "mcp-start", "input": shown, "error": f"Not started: {reason}",
                             "decision": {"action": "deny", "reason": reason, "at": now_ms(), "by": "code"}},
                            "denied")
            return
        confinement = None
        if self.sandbox is not None and definition.transport == "stdio":
            confinement = self.sandbox.confinement(asker.root, asker.sessionid, asker.scheduled or asker.depth > 0,
                                                   limits)
        reach = await self.sandbox.question_reach(confinement) if self.sandbox is not None else {}
        part = await notes.open({"tool": "mcp-start", "input": shown, "subjects": [definition.subject]}
                                | ({"reach": reach} if reach else {}))
        record = await self.gate.settle(asker, "mcp-start", (definition.subject,), shown,
                                        before_ask=lambda: self.recorder.update(part, "pending"), reach=reach)
        part.data["decision"] = record
        if record["action"] != "allow":
            self.servers.refuse(asker.sessionid, definition)
            part.data["error"] = f"Not started: {refusal(record, definition)}"
            await self.recorder.close(part, "denied")
            return
        if record.get("reply") == "always":
            await self.store.add_server_pin(asker.projectid, definition.name, definition.digest,
                                            definition.manifest())
        # The files may have changed while the start was decided: only what was decided starts.
        now = await asyncio.to_thread(pin_definition, asker.root, definition)
        if now.digest != definition.digest:
            part.data["error"] = ("Not started: what it runs changed while its start was decided ("
                                  + "; ".join(changes(definition.manifest(), now.manifest()))
                                  + "); the next run asks again")
            await self.recorder.close(part, "error")
            return
        await self.recorder.update(part, "running")
        try:
            running = await self.servers.start(asker.sessionid, asker.root, definition, self.call_timeout_s,
                                               confine=confinement.launch_server if confinement is not None else None)
        except McpError as exc:
            part.data["error"] = str(exc)
            await self.recorder.close(part, "error")
            return
        names = [tool.remote_name for tool in running.tools]
        part.data.update({"output": f"{definition.name} started with {len(names)} tools: {', '.join(names)}"
                          + "".join(f"\nleft out: {line}" for line in running.skipped),
                          "title": f"started {definition.name}", "finished": now_ms()})
        await self.recorder.close(part, "done")

    async def _changes(self, asker: Asker, definition: ServerDefinition) -> list[str]:
        """What changed since the approval of this server ("always", the newest one kept), or,
        without one, since its start in this session that the current pin replaces; [] when
        nothing was approved or started before, or this very pin was."""
        prefix = f"{definition.name}@"
        approved = {rule.pattern[len(prefix):] for rule in await self.gate.rules(asker.projectid)
                    if rule.tool == START_TOOL and rule.action == "allow" and rule.pattern.startswith(prefix)
                    and "*" not in rule.pattern}
        if definition.digest in approved:
            return []
        if approved:
            for pin in await self.store.server_pins(asker.projectid):  # the newest first
                if pin["server"] == definition.name and pin["digest"] in approved:
                    return changes(pin["manifest"], definition.manifest())
            return [OLD_PIN if definition.definition_digest in approved else UNKNOWN_PIN]
        last = self.servers.last_started(asker.sessionid, definition.name)
        if last is not None and last.digest != definition.digest:
            return changes(last.manifest(), definition.manifest())
        return []


class _Notes:
    """The assistant message that shows a run's server starts, made at its first part."""

    def __init__(self, owner: ProjectServers, sessionid: str):
        self.owner = owner
        self.sessionid = sessionid
        self.messageid: str | None = None

    async def open(self, data: dict):
        if self.messageid is None:
            message = await self.owner.store.add_message(self.sessionid, "assistant", data={"servers": True})
            message["parts"] = []
            self.owner.hub.publish(MessageCreated(self.sessionid, message))
            self.messageid = message["id"]
        return await self.owner.recorder.open(self.sessionid, self.messageid, "tool", status="pending", data=data)

    async def add(self, data: dict, status: str) -> None:
        part = await self.open(data)
        await self.owner.recorder.close(part, status)
