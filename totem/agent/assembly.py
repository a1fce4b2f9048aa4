"""The parts every run of the agent uses, wired once: the questions, the recorder, the
permission gate, the tool calls, the model answers, the step hooks (the project's MCP tools,
the Total.js review, compaction), the requests and the end of a run. The loop (loop.py) drives
them; this module only builds them.

Must not: run anything, or be imported by a part it builds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from totem.agent.answers import Answers
from totem.agent.calls import ToolCalls
from totem.agent.checks import ProjectChecks
from totem.agent.context import load_prompt
from totem.agent.ending import RunEnding
from totem.agent.gate import PermissionGate
from totem.agent.hooks import Compaction, ProjectTools, StepHook, TotalJsReview
from totem.agent.knowledge import TotalJsKnowledge
from totem.agent.questions import Questions
from totem.agent.recorder import Recorder
from totem.agent.requests import Requests
from totem.agent.rules import SavedRules
from totem.agent.servers import ProjectServers
from totem.security.permissions import ToolKind
from totem.security.vault import Scrubber
from totem.store import Store

if TYPE_CHECKING:
    from totem.mcp.definitions import ServerDefinition
    from totem.mcp.servers import McpServers
    from totem.process.jobs import Jobs
    from totem.security.sandbox import Sandbox
    from totem.tools import Registry
    from totem.workspace.forge import ForgeDocs
    from totem.workspace.snapshots import Snapshots


@dataclass(frozen=True)
class Surroundings:
    """What the agent reaches outside itself; each may be absent (a Totem built for a test)."""

    rules: SavedRules | None = None  # the saved rules (the store's, without config.ini's, when absent)
    jobs: Jobs | None = None  # the background commands of sessions
    scrubber: Callable[[], Scrubber] = Scrubber.empty  # () -> the current secrets to mask in output
    snapshots: Snapshots | None = None  # the snapshots of every change, for undo
    mcp: McpServers | None = None  # the project MCP servers that runs start
    forge: ForgeDocs | None = None  # the Total.js documentation, for the Total.js review
    forge_mcp: ServerDefinition | None = None  # Forge's MCP server, offered to Total.js projects
    sandbox: Sandbox | None = None  # what a command's processes may reach
    instructions: str = ""  # the person's own instructions file, for every project ("" for none)


@dataclass(frozen=True)
class AgentParts:
    questions: Questions
    recorder: Recorder
    gate: PermissionGate
    calls: ToolCalls
    answers: Answers
    project_servers: ProjectServers | None
    knowledge: TotalJsKnowledge | None
    compaction: Compaction
    hooks: tuple[StepHook, ...]
    requests: Requests
    ending: RunEnding
    checks: ProjectChecks


def assemble(store: Store, hub, registry: Registry, around: Surroundings) -> AgentParts:
    """The parts over `store` and `hub`, with the built-in tools of `registry`."""
    # The gate and the questions read the tools of the calls, made after them (and replaceable).
    def kinds() -> Mapping[str, ToolKind]:
        return calls.registry.kinds()

    questions = Questions(hub, store.ids.new, kinds)
    recorder = Recorder(store, hub)
    gate = PermissionGate(store, questions, kinds, around.rules or SavedRules(store))
    calls = ToolCalls(registry, gate, recorder, store, hub, around.scrubber, around.jobs, around.snapshots,
                      around.sandbox)
    answers = Answers(store, hub, recorder, lambda: calls.registry)
    project_servers = (ProjectServers(around.mcp, gate, recorder, store, hub, around.forge_mcp, around.scrubber,
                                      around.sandbox) if around.mcp is not None else None)
    knowledge = TotalJsKnowledge(around.forge, recorder) if around.forge is not None else None
    compaction = Compaction(answers, recorder)
    hooks: tuple[StepHook, ...] = (
        *([ProjectTools(project_servers, lambda: calls.registry)] if project_servers is not None else []),
        *([TotalJsReview(knowledge)] if knowledge is not None else []),
        compaction)
    requests = Requests(store, load_prompt("system.txt"), hooks, around.instructions)
    return AgentParts(questions, recorder, gate, calls, answers, project_servers, knowledge, compaction, hooks,
                      requests, RunEnding(store, recorder), ProjectChecks(calls, recorder))
