"""Sub-agents: the work that a run hands over with the task tool, run as a child session.

A sub-agent is one of the project's agents (`.totem/agents/*.md`, which can only narrow) or the
built-in `explore`, which reads and searches in Plan mode. It gets a session of its own (its
`parent` is the session that asked; a worktree session's child works in the same worktree), a
prompt of its own (it does not see the parent's conversation), and the parent's facts for every
decision: Plan mode stays Plan, a scheduled run stays unattended, auto-accept is the parent's,
and its questions are shown where the parent runs. It cannot hand work further (depth 1) and a
run hands at most MAX_TASKS_PER_RUN. An abort of the parent aborts it; its final answer is the
task's result.

Must not: decide permissions (the gate does, with the facts given here), or widen anything a
project agent's file says.
"""

from __future__ import annotations

import asyncio

from totem.agent.gate import Asker
from totem.agent.recorder import OpenPart
from totem.agent.turns import Prompt
from totem.events import SessionUpdated
from totem.store import session_view
from totem.tools import ToolError

MAX_DEPTH = 1
MAX_TASKS_PER_RUN = 8
EXPLORE = "explore"
EXPLORE_TOOLS = ("read", "glob", "grep")
EXPLORE_PROMPT = ("\nYou are a sub-agent that explores: find what the task asks for by reading and searching "
                  "the project, then answer with what you found (paths, names, short quotes). You cannot "
                  "change anything.")
SUBAGENT_PROMPT = ("\nYou are a sub-agent: another agent handed you this task and reads only your final "
                   "answer. Do the task, then answer with what it needs to know.")


class SubAgents:
    """Runs the tasks of the runs of one `Runs`."""

    def __init__(self, runs):
        self.runs = runs  # the agent loop's Runs: start_prompt, abort, its runs by session
        self.counts: dict[str, int] = {}  # tasks handed over by each running parent session

    async def delegate(self, asker: Asker, part: OpenPart, agent: str, description: str,
                       prompt_text: str) -> tuple[str, str]:
        """Run a task to its end and return (its final answer, its session id). Raises
        ToolError (too deep, too many, an unknown or invalid agent, a run that failed)."""
        if asker.depth >= MAX_DEPTH:
            raise ToolError("a sub-agent cannot hand work to another; do it yourself")
        parent_run = self.runs.run_of(asker.sessionid)
        if parent_run is None:
            raise ToolError("the run that asked has ended")
        count = self.counts.get(asker.sessionid, 0)
        if count >= MAX_TASKS_PER_RUN:
            raise ToolError(f"this run has handed over {MAX_TASKS_PER_RUN} tasks already; do the rest yourself")
        self.counts[asker.sessionid] = count + 1
        prompt = await self._prompt(asker, parent_run.request.prompt, agent, prompt_text)
        store = self.runs.store
        row = await store.create_session(asker.projectid, description, parent=asker.sessionid,
                                         worktree=parent_run.request.session.get("worktree"), mode=prompt.mode)
        if row is None:
            raise ToolError("the project is gone")
        child = session_view(row)
        self.runs.hub.publish(SessionUpdated(child["id"], child))
        part.data["sessionid"] = child["id"]  # the conversation links to it while it works
        await self.runs.recorder.update(part, "running")
        await self.runs.start_prompt(child, parent_run.request.project, prompt, parent_run.request.limits, parent=asker,
                                     budget=parent_run.budget)
        child_run = self.runs.run_of(child["id"])
        try:
            if child_run is not None and child_run.task is not None:
                await asyncio.shield(child_run.task)
        except asyncio.CancelledError:  # the parent was aborted: so is its sub-agent
            await self.runs.abort(child["id"])
            raise
        return await self._answer(child["id"]), child["id"]

    def forget(self, sessionid: str) -> None:
        """A parent's run ended: its count starts again with the next run."""
        self.counts.pop(sessionid, None)

    async def _prompt(self, asker: Asker, parent: Prompt, agent: str, text: str) -> Prompt:
        if agent == EXPLORE:
            return Prompt(text=text, model=parent.model, mode="plan", autoaccept=False,
                          scheduled=asker.scheduled, tools=EXPLORE_TOOLS, instructions=EXPLORE_PROMPT)
        from totem.workspace import (
            commands as project_commands,  # its patterns take a while to compile: not at start-up
        )
        listing = await asyncio.to_thread(project_commands.read_listing, asker.root)
        found = listing.agents.get(agent)
        if found is None:
            invalid = next((error for file, error in listing.invalid.items() if file.endswith(f"/{agent}.md")), None)
            known = ", ".join([EXPLORE, *sorted(listing.agents)])
            raise ToolError(f"the agent {agent} cannot be used: {invalid}" if invalid else
                            f"no agent named {agent}; the agents are: {known}")
        builtin = project_commands.builtin_tools()
        tools = tuple(tool for tool in (found.tools or builtin) if tool != "task")  # depth stays 1
        if asker.tools is not None:  # never more than the parent's agent had
            tools = tuple(tool for tool in tools if tool in asker.tools)
        mode = "plan" if "plan" in (asker.mode, found.mode) else "build"
        return Prompt(text=text, model=found.model or parent.model, mode=mode, autoaccept=asker.autoaccept,
                      scheduled=asker.scheduled, tools=tools,
                      instructions=SUBAGENT_PROMPT + (f"\n{found.prompt}" if found.prompt else ""))

    async def _answer(self, sessionid: str) -> str:
        store = self.runs.store
        session = await store.get_session(sessionid)
        status = session["status"] if session else "removed"
        if status == "error":
            raise ToolError(f"the sub-agent stopped with an error: {session['error'] if session else ''}")
        if status == "aborted":
            raise ToolError("the sub-agent was stopped before it answered")
        history = await store.session_history(sessionid)
        answer = next((text for message in reversed(history) if message["role"] == "assistant"
                       and (text := "".join(p["text"] for p in message["parts"] if p["kind"] == "text").strip())),
                      "")
        return answer or "(the sub-agent ended without an answer)"
