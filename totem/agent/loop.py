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
import json
import logging

from totem.agent import turns
from totem.agent.answers import Answers
from totem.agent.calls import ToolCalls
from totem.agent.context import load_prompt
from totem.agent.ending import RunEnding, full_reason
from totem.agent.gate import Asker, PermissionGate
from totem.agent.hooks import Compaction, ProjectTools, StepHook, TotalJsReview
from totem.agent.knowledge import TotalJsKnowledge
from totem.agent.provider_errors import ProviderError
from totem.agent.providers import redact
from totem.agent.questions import Questions
from totem.agent.recorder import OpenPart, Recorder
from totem.agent.requests import Requests
from totem.agent.rules import SavedRules
from totem.agent.run import Run, RunRequest
from totem.agent.servers import ProjectServers
from totem.agent.stream import ToolCall
from totem.agent.subagents import SubAgents
from totem.agent.turns import Prompt
from totem.errors import out_of_space
from totem.events import RunError, SessionStatus
from totem.rows import PartRow
from totem.security.boundary import session_root
from totem.security.vault import Scrubber
from totem.store import Store

log = logging.getLogger("totem.agent")

MAX_RETRIES = 4
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
LOOP_GUARD_REPEATS = 3
REASONING_LEVELS = ("none", "low", "medium", "high")

__all__ = ["Runs", "RunRefused", "Prompt", "REASONING_LEVELS"]


class RunRefused(Exception):
    """A prompt that cannot start (the session is already running)."""


class Runs:
    """The runs of every session of one Totem."""

    calls: ToolCalls  # made after the gate, whose `kinds` reads it when called

    def __init__(self, store: Store, hub, providers, registry, steps: int, rules: SavedRules | None = None, jobs=None,
                 scrubber=None, backoff_first_s: float = BACKOFF_FIRST_S, snapshots=None, mcp=None,
                 forge=None, forge_mcp=None, sandbox=None):
        self.store = store
        self.hub = hub
        self.providers = providers
        self.steps = steps
        self.backoff_first_s = backoff_first_s
        self._runs: dict[str, Run] = {}
        kinds = lambda: self.calls.registry.kinds()  # noqa: E731 (the registry may be replaced)
        self.questions = Questions(hub, store.ids.new, kinds)
        self.recorder = Recorder(store, hub)
        self.gate = PermissionGate(store, self.questions, kinds, rules or SavedRules(store))
        self.calls = ToolCalls(registry, self.gate, self.recorder, store, hub,
                               scrubber or Scrubber.empty, jobs, snapshots, sandbox)
        self.answers = Answers(store, hub, self.recorder, lambda: self.calls.registry)
        self.subagents = SubAgents(self)
        self.knowledge = TotalJsKnowledge(forge, self.recorder) if forge is not None else None
        self.calls.delegate = self.subagents.delegate
        self.project_servers = (ProjectServers(mcp, self.gate, self.recorder, store, hub, forge_mcp,
                                               scrubber or Scrubber.empty, sandbox)
                                if mcp is not None else None)
        self.compaction = Compaction(self.answers, self.recorder)
        self.hooks: list[StepHook] = [
            *([ProjectTools(self.project_servers, lambda: self.registry)] if self.project_servers else []),
            *([TotalJsReview(self.knowledge)] if self.knowledge is not None else []),
            self.compaction]
        self.requests = Requests(store, load_prompt("system.txt"), self.hooks)
        self.ending = RunEnding(store, self.recorder)

    @property
    def registry(self):
        """The tools of every run (replaceable, for tests that add a tool of their own)."""
        return self.calls.registry

    @registry.setter
    def registry(self, registry) -> None:
        self.calls.registry = registry

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
        message = await turns.store_user_message(self.store, self.hub, session, prompt, {"queued": True})
        run.queue.append((message["id"], prompt, dict(limits or {})))
        return {"messageid": message["id"], "queued": True}

    async def unqueue(self, sessionid: str, messageid: str) -> bool:
        """Take back a prompt that waits for the current run to end; False when none waits."""
        run = self._runs.get(sessionid)
        if run is None or not any(item[0] == messageid for item in run.queue):
            return False
        run.queue = [item for item in run.queue if item[0] != messageid]
        await self.store.remove_message(messageid)
        return True

    async def start_prompt(self, session: dict, project: dict, prompt: Prompt, limits: dict | None = None,
                           messageid: str | None = None, parent: Asker | None = None) -> str:
        """Store the user message (or take the stored one, `messageid`) and start the run;
        returns the message id. With `parent`, the run is a sub-agent's (subagents.py): its
        questions go where the parent's do.

        Raises RunRefused while the session runs: prompts are never interleaved.
        """
        sessionid = session["id"]
        if sessionid in self._runs:
            raise RunRefused("the session is running; wait for it to finish or abort it")
        asker = Asker(sessionid, project["id"], session_root(session, project),
                      prompt.mode, prompt.autoaccept,
                      prompt.scheduled, tools=frozenset(prompt.tools) if prompt.tools is not None else None,
                      asks_in=parent.asked_in if parent else None, depth=parent.depth + 1 if parent else 0)
        run = Run(RunRequest(session, project, prompt, asker, dict(limits or {})))
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
        if self.project_servers is not None:
            await self.project_servers.servers.stop_session(sessionid)

    async def stop_all(self) -> None:
        for sessionid in list(self._runs):
            await self.abort(sessionid)
        if self.project_servers is not None:
            await self.project_servers.servers.stop_all()
        await self.recorder.stop()

    # -- one run ----------------------------------------------------------------------------

    async def _set_status(self, sessionid: str, status: str, error: str | None = None) -> None:
        await self.store.set_session_status(sessionid, status, error)
        self.hub.publish(SessionStatus(sessionid, status))

    def _fail(self, run: Run, message: str) -> None:
        """The run ends with an error: announced now, kept on the session for a later reader."""
        run.error = message
        self.hub.publish(RunError(run.request.sessionid, message, False))

    async def _run(self, run: Run) -> None:
        sessionid = run.request.sessionid
        status = "idle"
        try:
            status = await self._steps(run)
        except asyncio.CancelledError:
            status = "aborted"
        except ProviderError as exc:
            self._fail(run, redact(exc.message, run.key))
            status = "error"
        except Exception as exc:
            if out_of_space(exc):  # a state, not a crash: the store logged it once
                self._fail(run, f"The run stopped: {full_reason(exc, self.store)}.")
                status = "error"
                return
            log.exception("run of session %s failed", sessionid)
            self._fail(run, "Totem failed while running this prompt; see the server log.")
            status = "error"
        finally:
            try:
                await asyncio.shield(self.ending.close(run, status))
            finally:  # forgotten and announced whatever the store took: never left running
                self._runs.pop(sessionid, None)
                self.subagents.forget(sessionid)
                self.hub.publish(SessionStatus(sessionid, status))
            await asyncio.shield(self._next_queued(run, status))

    async def _next_queued(self, run: Run, status: str) -> None:
        """After a run, the next queued prompt runs (the rest stay queued behind it); after an
        abort none does, and the queued messages stay in the conversation as said, not run."""
        if not run.queue:
            return
        if status == "aborted":
            for messageid, _prompt, _limits in run.queue:
                await self.store.set_message_queued(messageid, False)
            return
        (messageid, prompt, limits), rest = run.queue[0], run.queue[1:]
        session = await self.store.get_session(run.request.sessionid)
        if session is None:
            return
        try:
            await self.start_prompt(dict(session), run.request.project, prompt, limits, messageid=messageid)
        except RunRefused:  # another prompt started first: the queue goes behind it
            pass
        follow = self._runs.get(session["id"])
        if follow is not None:
            follow.queue = rest + follow.queue

    async def _steps(self, run: Run) -> str:
        request = run.request
        target = await self.providers.target(request.prompt.model)
        run.key = target.key
        if request.compact_only:
            window = target.context or target.kind.default_context
            await self.compaction.compact(run, target, await self.requests.messages(run), window)
            return "idle"
        for hook in self.hooks:
            await hook.begin(run)
        repeats: list[str] = []
        steps = request.limits.get("steps") or self.steps
        for _step in range(steps):
            calls, parts = await self._answer_with_retries(run, target)
            if not calls:
                return "idle"
            for call in calls:
                signature = call.name + "\0" + _canonical(call.arguments)
                repeats = repeats + [signature] if repeats and repeats[-1] == signature else [signature]
                if len(repeats) >= LOOP_GUARD_REPEATS:
                    answer = await self.gate.question(
                        request.asker, f"The model called {call.name} with the same input "
                        f"{LOOP_GUARD_REPEATS} times in a row. Go on?", ["Go on", "Stop"])
                    if answer != "Go on":
                        return "idle"
                    repeats = []
                await self.calls.run(request.asker, parts[call.id], call, request.limits, run.tools)
        self._fail(run, f"The run stopped after {steps} model calls (the step limit); "
                        "send a prompt to go on.")
        return "error"

    # -- one model answer -------------------------------------------------------------------

    async def _answer_with_retries(self, run: Run, target) -> tuple[list[ToolCall], dict[str, OpenPart]]:
        attempt = 0
        while True:
            try:
                body = await self.requests.body(run, target, self.registry)
                return await self.answers.stream(run.request.sessionid, run.request.prompt.model, target, body,
                                                 prompt=run.messageid, review=run.review,
                                                 encoder=run.history.encoder)
            except ProviderError as exc:
                attempt += 1
                if not exc.retry or attempt > MAX_RETRIES:
                    raise
                delay = exc.retry_after if exc.retry_after is not None else self.backoff_first_s * 2 ** (attempt - 1)
                delay = min(delay, BACKOFF_MAX_S)
                message = redact(f"{exc.message} Trying again in {delay:g} s.", run.key)
                self.hub.publish(RunError(run.request.sessionid, message, True))
                await asyncio.sleep(delay)


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        return arguments
