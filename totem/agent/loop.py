"""The agent loop: a prompt becomes steps of model answers and tool calls.

Owns the runs of sessions (one at a time per session): their life cycle (running, then idle,
aborted or error, with the reason kept), the steps up to the step limit, the loop guard, the
retries of provider errors, and the request of each step. An answer is streamed into parts by
`Answers`, parts are written and announced by the recorder, tool calls run through `ToolCalls`
(and its permission gate), what a prompt leaves in the session is stored by `turns`.

Must not: speak HTTP to clients, decide permissions, or write parts other than through the
recorder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from totem.agent import turns
from totem.agent.assembly import AgentParts
from totem.agent.ending import full_reason
from totem.agent.gate import Asker
from totem.agent.provider_errors import ProviderError
from totem.agent.providers import redact
from totem.agent.queued import PromptQueue
from totem.agent.requests import window_of
from totem.agent.run import ERROR_COST, ERROR_DISK, ERROR_INTERNAL, ERROR_STEPS, Budget, Run, RunRefused, RunRequest
from totem.agent.steps import BACKOFF_FIRST_S, CostLimitReached, StepLimitReached, Steps
from totem.agent.subagents import SubAgents
from totem.agent.turns import Prompt
from totem.errors import out_of_space
from totem.events import RunError, SessionStatus
from totem.rows import PartRow
from totem.security.boundary import session_root
from totem.security.permissions import RUN_LAYER, Rule
from totem.store import Store

log = logging.getLogger("totem.agent")

REASONING_LEVELS = ("none", "low", "medium", "high")

__all__ = ["Runs", "RunRefused", "Prompt", "REASONING_LEVELS"]


class Runs:
    """The runs of every session of one Totem."""

    def __init__(self, store: Store, hub, providers, parts: AgentParts, steps: int,
                 backoff_first_s: float = BACKOFF_FIRST_S):
        self.store = store
        self.hub = hub
        self.providers = providers
        self.parts = parts
        # The doors others use: the questions that wait, the open parts, the gate's pinned files.
        self.questions, self.recorder, self.gate = parts.questions, parts.recorder, parts.gate
        self.steps = Steps(parts, hub, steps, backoff_first_s, providers)
        self.queue = PromptQueue(store, hub)
        self._runs: dict[str, Run] = {}
        self.subagents = SubAgents(self)
        parts.calls.delegate = self.subagents.delegate

    @property
    def registry(self):
        """The tools of every run (replaceable, for tests that add a tool of their own)."""
        return self.parts.calls.registry

    @registry.setter
    def registry(self, registry) -> None:
        self.parts.calls.registry = registry

    # -- the door: prompt, abort, answer ----------------------------------------------------

    def is_running(self, sessionid: str) -> bool:
        return sessionid in self._runs

    def run_of(self, sessionid: str) -> Run | None:
        """The run going on in a session, if any."""
        return self._runs.get(sessionid)

    async def send(self, session: dict, project: dict, prompt: Prompt, limits: dict | None = None,
                   steer: bool = False) -> dict:
        """A prompt: `{messageid}` when it starts a run; while one goes on, `{messageid, queued}`
        (it runs when the current one ends, removable until then: `unqueue`) or with `steer`
        `{messageid, steered}` (the current run reads it at its next step)."""
        run = self._runs.get(session["id"])
        if run is None:
            return {"messageid": await self.start_prompt(session, project, prompt, limits)}
        if steer:
            message = await turns.store_user_message(self.store, self.hub, session, prompt, {"steer": True})
            return {"messageid": message["id"], "steered": True}
        return {"messageid": await self.queue.add(run, session, prompt, limits), "queued": True}

    async def unqueue(self, sessionid: str, messageid: str) -> bool:
        """Take back a prompt that waits for the current run to end; False when none waits."""
        return await self.queue.remove(self._runs.get(sessionid), messageid)

    async def start_prompt(self, session: dict, project: dict, prompt: Prompt, limits: dict | None = None,
                           messageid: str | None = None, parent: Asker | None = None,
                           budget: Budget | None = None) -> str:
        """Store the user message (or take the stored one, `messageid`) and start the run;
        returns the message id. With `parent`, the run is a sub-agent's (subagents.py): its
        questions go where the parent's do, the parent's run rules hold in it, and it spends
        from `budget`, its parent's.

        Raises RunRefused while the session runs: prompts are never interleaved.
        """
        sessionid = session["id"]
        if sessionid in self._runs:
            raise RunRefused("the session is running; wait for it to finish or abort it")
        asker = Asker(sessionid, project["id"], session_root(session, project),
                      prompt.mode, prompt.autoaccept,
                      prompt.scheduled, tools=frozenset(prompt.tools) if prompt.tools is not None else None,
                      asks_in=parent.asked_in if parent else None, depth=parent.depth + 1 if parent else 0,
                      rules=run_rules(prompt, parent))
        limits = dict(limits or {})
        run = Run(RunRequest(session, project, prompt, asker, limits),
                  budget=budget or Budget(limits.get("maxcost") if prompt.maxcost is None else prompt.maxcost))
        self._runs[sessionid] = run  # claimed before any await, so a second prompt is refused
        try:
            if messageid is None:
                messageid = (await turns.store_user_message(self.store, self.hub, session, prompt))["id"]
            else:
                await self.store.set_message_queued(messageid, False)
            # Running from the moment the caller answers: a read right after says so.
            await self._set_status(sessionid, "running")
        except BaseException:
            del self._runs[sessionid]
            raise
        run.messageid = messageid
        run.task = asyncio.create_task(self._run(run), name=f"run {sessionid}")
        return messageid

    async def start_compaction(self, session: dict, project: dict, model: str) -> None:
        """The person asks for a summary now: a run of one step, the compaction, in the
        session's status like any run. Raises RunRefused while the session runs."""
        sessionid = session["id"]
        if sessionid in self._runs:
            raise RunRefused("the session is running; wait for it to finish or abort it")
        prompt = Prompt(text="", model=model, mode=session.get("mode") or "build")
        asker = Asker(sessionid, project["id"], session_root(session, project), prompt.mode)
        run = Run(RunRequest(session, project, prompt, asker, compact_only=True))
        self._runs[sessionid] = run
        try:
            await self._set_status(sessionid, "running")
        except BaseException:
            del self._runs[sessionid]
            raise
        run.task = asyncio.create_task(self._run(run), name=f"compaction {sessionid}")

    def open_parts(self, sessionid: str) -> list[PartRow]:
        """The parts of a session's run that are still open, each with its text so far."""
        return [open_part.part | {"text": open_part.text()} for open_part in self.recorder.open_parts(sessionid)]

    async def abort(self, sessionid: str) -> bool:
        """Stop a session's run; returns False when nothing was running."""
        run = self._runs.get(sessionid)
        if run is None or run.task is None:
            return False
        run.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(run.task)
        return True

    def reply_question(self, questionid: str, answer: str) -> None:
        """Answer a waiting question. Raises NotFound."""
        self.questions.reply_question(questionid, answer)

    def reply_permission(self, askid: str, reply: str, pattern: str | None,
                         patterns: list[str] | None = None) -> None:
        """Answer a waiting permission question. Raises NotFound, BadRequest."""
        self.questions.reply_permission(askid, reply, pattern, patterns)

    async def stop_servers(self, sessionid: str) -> None:
        """Stop the project MCP servers of a session that goes away."""
        if self.parts.project_servers is not None:
            await self.parts.project_servers.servers.stop_session(sessionid)

    async def stop_all(self) -> None:
        for sessionid in list(self._runs):
            await self.abort(sessionid)
        if self.parts.project_servers is not None:
            await self.parts.project_servers.servers.stop_all()
        await self.recorder.stop()

    # -- one run ----------------------------------------------------------------------------

    async def _set_status(self, sessionid: str, status: str, error: str | None = None) -> None:
        await self.store.set_session_status(sessionid, status, error)
        self.hub.publish(SessionStatus(sessionid, status))

    def _fail(self, run: Run, message: str, kind: str) -> None:
        """The run ends with an error: announced now, kept on the session for a later reader,
        with its kind (which says what the person can do about it)."""
        run.error, run.error_kind = message, kind
        self.hub.publish(RunError(run.request.sessionid, message, False))

    async def _run(self, run: Run) -> None:
        sessionid = run.request.sessionid
        status = "idle"
        try:
            status = await self._steps(run)
        except asyncio.CancelledError:
            status = "aborted"
        except StepLimitReached as exc:
            self._fail(run, str(exc), ERROR_STEPS)
            status = "error"
        except CostLimitReached as exc:
            self._fail(run, str(exc), ERROR_COST)
            status = "error"
        except ProviderError as exc:
            self._fail(run, redact(exc.message, run.key), exc.kind)
            status = "error"
        except Exception as exc:
            if out_of_space(exc):  # a state, not a crash: the store logged it once
                self._fail(run, f"The run stopped: {full_reason(exc, self.store)}.", ERROR_DISK)
                status = "error"
                return
            log.exception("run of session %s failed", sessionid)
            self._fail(run, "Totem failed while running this prompt; see the server log.", ERROR_INTERNAL)
            status = "error"
        finally:
            try:
                await asyncio.shield(self.parts.ending.close(run, status))
            finally:  # forgotten and announced whatever the store took: never left running
                self._runs.pop(sessionid, None)
                self.subagents.forget(sessionid)
                self.hub.publish(SessionStatus(sessionid, status))
            await asyncio.shield(self.queue.next_after(run, status, self._start_queued, self._runs.get))

    async def _start_queued(self, session: dict, project: dict, prompt: Prompt, limits: dict,
                            messageid: str) -> str:
        return await self.start_prompt(session, project, prompt, limits, messageid=messageid)

    async def _steps(self, run: Run) -> str:
        request = run.request
        target = await self.providers.target(request.prompt.model)
        run.key = target.key
        if request.compact_only:
            await self.parts.compaction.compact(run, target, await self.parts.requests.messages(run),
                                                window_of(run, target))
            return "idle"
        for hook in self.parts.hooks:
            await hook.begin(run)
        await self.steps.take(run, target)
        return "idle"


def run_rules(prompt: Prompt, parent: Asker | None) -> tuple[Rule, ...]:
    """The rules of a run alone: the allow rules its prompt brought, and a sub-agent's parent's."""
    own = tuple(Rule(tool, pattern, "allow", RUN_LAYER) for tool, pattern in prompt.allow)
    return own + (parent.rules if parent is not None else ())
