"""The features of a run that the loop calls at its moments, behind one Protocol: the tools of
the project's MCP servers, the Total.js review, and compaction. A new feature of a run is a
hook, not a branch in the loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from totem.agent.context import compaction_messages

if TYPE_CHECKING:
    from totem.agent.answers import Answers
    from totem.agent.knowledge import TotalJsKnowledge
    from totem.agent.recorder import Recorder
    from totem.agent.run import Run
    from totem.agent.servers import ProjectServers
    from totem.tools import Registry


class StepHook(Protocol):
    async def begin(self, run: Run) -> None:
        """Before the run's first step."""

    async def context_full(self, run: Run, target: Any, messages: list[dict[str, Any]], window: int) -> bool:
        """The conversation does not fit the window even pruned: True when the hook made room."""


class ProjectTools:
    """A run's tools: the built-in ones and those of the project's MCP servers (an agent's
    prompt, which lists built-in tools only, gets none)."""

    def __init__(self, servers: ProjectServers, registry: Callable[[], Registry]):
        self.servers = servers
        self.registry = registry

    async def begin(self, run: Run) -> None:
        request = run.request
        if request.prompt.tools is None:
            run.tools = await self.servers.registry_for(request.asker, self.registry(), request.limits)

    async def context_full(self, run: Run, target: Any, messages: list[dict[str, Any]], window: int) -> bool:
        return False


class TotalJsReview:
    """In a Total.js project, the documentation for the prompt and the review of each answer."""

    def __init__(self, knowledge: TotalJsKnowledge):
        self.knowledge = knowledge

    async def begin(self, run: Run) -> None:
        request = run.request
        # A sub-agent's prompt gets no documentation of its own.
        messageid = run.messageid if request.asker.depth == 0 else None
        run.review = await self.knowledge.begin(request.sessionid, messageid, request.asker.root,
                                                request.prompt.text, request.limits)

    async def context_full(self, run: Run, target: Any, messages: list[dict[str, Any]], window: int) -> bool:
        return False


class Compaction:
    """A summary of the conversation by the session's model, without tools, stored as an
    assistant message marked `compaction` that the person reads like any answer."""

    def __init__(self, answers: Answers, recorder: Recorder):
        self.answers = answers
        self.recorder = recorder

    async def begin(self, run: Run) -> None:
        return None

    async def context_full(self, run: Run, target: Any, messages: list[dict[str, Any]], window: int) -> bool:
        await self.compact(run, target, messages, window)
        return True

    async def compact(self, run: Run, target: Any, messages: list[dict[str, Any]], window: int) -> None:
        transcript = await asyncio.to_thread(compaction_messages, messages, window)
        body = target.kind.request_body(target, transcript, [], None)
        # Marked `compacting` until it ends well: a summary cut by an abort, an error or a kill
        # is dropped from the history (context.history_messages), never sent as an answer.
        _calls, parts = await self.answers.stream(run.request.sessionid, run.request.prompt.model, target, body,
                                                  {"compaction": True}, prompt=run.messageid,
                                                  opening={"compacting": True}, budget=run.budget)
        for open_part in parts.values():  # a model that calls a tool anyway: nothing runs
            open_part.data["error"] = "no tools while compacting"
            await self.recorder.close(open_part, "error")
