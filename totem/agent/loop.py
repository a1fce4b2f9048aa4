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
import os
from dataclasses import dataclass, field

from totem.agent import turns
from totem.agent.answers import Answers, Review
from totem.agent.bodies import BodyEncoder
from totem.agent.calls import ToolCalls
from totem.agent.context import (
    ContextFull,
    RunAttachments,
    Sizes,
    compaction_messages,
    fit_window,
    history_messages,
    load_prompt,
    new_marker,
    system_message,
)
from totem.agent.gate import Asker, PermissionGate
from totem.agent.knowledge import TotalJsKnowledge
from totem.agent.provider_errors import ProviderError
from totem.agent.providers import redact
from totem.agent.questions import Questions
from totem.agent.recorder import OpenPart, Recorder
from totem.agent.rules import SavedRules
from totem.agent.servers import ProjectServers
from totem.agent.stream import ToolCall
from totem.agent.subagents import SubAgents
from totem.agent.turns import Prompt
from totem.errors import StorageFull, out_of_space
from totem.events import RunError, SessionStatus
from totem.rows import PartRow
from totem.security.boundary import session_root
from totem.security.vault import Scrubber
from totem.store import Store
from totem.tools import Registry

log = logging.getLogger("totem.agent")

MAX_RETRIES = 4
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
LOOP_GUARD_REPEATS = 3
REASONING_LEVELS = ("none", "low", "medium", "high")

__all__ = ["Runs", "RunRefused", "Prompt", "REASONING_LEVELS"]


class RunRefused(Exception):
    """A prompt that cannot start (the session is already running)."""


@dataclass
class _Run:
    session: dict
    project: dict
    prompt: Prompt
    asker: Asker
    task: asyncio.Task | None = None
    key: str | None = None  # the provider key, kept out of every message this run publishes
    error: str | None = None  # why the run failed, when it did
    marker: str = field(default_factory=new_marker)  # of the data envelopes, the same at every step
    attachments: RunAttachments = field(default_factory=RunAttachments)  # encoded once per run
    limits: dict = field(default_factory=dict)  # the settings read at the start (settings.KEYS)
    pruned: int = 0  # old tool outputs left out of the last request to fit the window
    # Prompts sent while this run goes on, each run after it in turn: (message id, prompt, limits).
    queue: list[tuple[str, Prompt, dict]] = field(default_factory=list)
    compact_only: bool = False  # the person asked for a compaction: the run is that one step
    # The prompt's message, named by each answer (`data.prompt`): a queued prompt stored during
    # the run before enters the conversation where its answers begin (context.history_messages).
    messageid: str | None = None
    history: list = field(default_factory=list)  # the messages read so far by this run's steps
    history_last: str | None = None  # the id of the newest message read
    system: dict | None = None  # the system message, made at the first step
    converted: dict = field(default_factory=dict)  # the chat messages of each stored message read
    sizes: Sizes = field(default_factory=Sizes)  # the JSON size of each chat message counted
    encoder: BodyEncoder = field(default_factory=BodyEncoder)  # the JSON of the last request's messages
    review: Review | None = None  # a Total.js project's self-check of each answer (knowledge.py)
    tools: Registry | None = None  # the run's tools: the built-in tools and its MCP servers' (None: built-in)


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
        self.system_template = load_prompt("system.txt")
        self._runs: dict[str, _Run] = {}
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

    def run_of(self, sessionid: str) -> _Run | None:
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
        run = _Run(session, project, prompt, asker, limits=dict(limits or {}))
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
        run = _Run(session, project, prompt, asker, compact_only=True)
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

    def _fail(self, run: _Run, message: str) -> None:
        """The run ends with an error: announced now, kept on the session for a later reader."""
        run.error = message
        self.hub.publish(RunError(run.session["id"], message, False))

    async def _run(self, run: _Run) -> None:
        sessionid = run.session["id"]
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
                self._fail(run, f"The run stopped: {_full_reason(exc, self.store)}.")
                status = "error"
                return
            log.exception("run of session %s failed", sessionid)
            self._fail(run, "Totem failed while running this prompt; see the server log.")
            status = "error"
        finally:
            await asyncio.shield(self._end_run(run, status))
            await asyncio.shield(self._next_queued(run, status))

    async def _next_queued(self, run: _Run, status: str) -> None:
        """After a run, the next queued prompt runs (the rest stay queued behind it); after an
        abort none does, and the queued messages stay in the conversation as said, not run."""
        if not run.queue:
            return
        if status == "aborted":
            for messageid, _prompt, _limits in run.queue:
                await self.store.set_message_queued(messageid, False)
            return
        (messageid, prompt, limits), rest = run.queue[0], run.queue[1:]
        session = await self.store.get_session(run.session["id"])
        if session is None:
            return
        try:
            await self.start_prompt(dict(session), run.project, prompt, limits, messageid=messageid)
        except RunRefused:  # another prompt started first: the queue goes behind it
            pass
        follow = self._runs.get(session["id"])
        if follow is not None:
            follow.queue = rest + follow.queue

    async def _end_run(self, run: _Run, status: str) -> None:
        """Close the run's parts, mark where it stopped, store and publish its final status.
        Each step may fail (a full disk): the run is forgotten and its status published
        whatever the store took, so that the session never stays running."""
        sessionid = run.session["id"]
        closing = "aborted" if status == "aborted" else "error"
        try:
            for open_part in self.recorder.open_parts(sessionid):
                try:
                    await self.recorder.close(open_part, closing)
                except Exception as exc:  # close forgot it first: it is not tried again
                    _log_end_failure(exc, f"a part of session {sessionid} was not closed")
            if status in ("aborted", "error") and run.messageid:
                # Where it stopped, and why, stay with the conversation (not only until the next run).
                mark = {"ended": status} | ({"error": run.error} if status == "error" and run.error else {})
                try:
                    await self.store.mark_run_end(sessionid, run.messageid, mark)
                except Exception as exc:  # the mark must not keep the run from ending
                    _log_end_failure(exc, f"the end of the run of session {sessionid} was not marked")
            error = run.error if status == "error" else None
            try:
                await self.store.set_session_status(sessionid, status, error)
            except Exception as exc:  # Sessions reads a status no run holds as this error
                _log_end_failure(exc, f"the status of session {sessionid} was not stored")
        finally:
            self._runs.pop(sessionid, None)
            self.subagents.forget(sessionid)
            self.hub.publish(SessionStatus(sessionid, status))

    async def _steps(self, run: _Run) -> str:
        target = await self.providers.target(run.prompt.model)
        run.key = target.key
        if run.compact_only:
            await self._compact(run, target, await self._messages(run), target.context or target.kind.default_context)
            return "idle"
        if self.project_servers is not None and run.prompt.tools is None:  # an agent lists built-in tools only
            run.tools = await self.project_servers.registry_for(run.asker, self.registry, run.limits)
        if self.knowledge is not None:  # a sub-agent's prompt gets no documentation of its own
            run.review = await self.knowledge.begin(run.session["id"], run.messageid if run.asker.depth == 0 else None,
                                                    run.asker.root, run.prompt.text, run.limits)
        repeats: list[str] = []
        steps = run.limits.get("steps") or self.steps
        for _step in range(steps):
            calls, parts = await self._answer_with_retries(run, target)
            if not calls:
                return "idle"
            for call in calls:
                signature = call.name + "\0" + _canonical(call.arguments)
                repeats = repeats + [signature] if repeats and repeats[-1] == signature else [signature]
                if len(repeats) >= LOOP_GUARD_REPEATS:
                    answer = await self.gate.question(
                        run.asker, f"The model called {call.name} with the same input "
                        f"{LOOP_GUARD_REPEATS} times in a row. Go on?", ["Go on", "Stop"])
                    if answer != "Go on":
                        return "idle"
                    repeats = []
                await self.calls.run(run.asker, parts[call.id], call, run.limits, run.tools)
        self._fail(run, f"The run stopped after {steps} model calls (the step limit); "
                        "send a prompt to go on.")
        return "error"

    # -- one model answer -------------------------------------------------------------------

    async def _answer_with_retries(self, run: _Run, target) -> tuple[list[ToolCall], dict[str, OpenPart]]:
        attempt = 0
        while True:
            try:
                body = await self._request_body(run, target)
                return await self.answers.stream(run.session["id"], run.prompt.model, target, body,
                                                 prompt=run.messageid, review=run.review, encoder=run.encoder)
            except ProviderError as exc:
                attempt += 1
                if not exc.retry or attempt > MAX_RETRIES:
                    raise
                delay = exc.retry_after if exc.retry_after is not None else self.backoff_first_s * 2 ** (attempt - 1)
                delay = min(delay, BACKOFF_MAX_S)
                message = redact(f"{exc.message} Trying again in {delay:g} s.", run.key)
                self.hub.publish(RunError(run.session["id"], message, True))
                await asyncio.sleep(delay)

    async def _request_body(self, run: _Run, target) -> dict:
        tools = (run.tools or self.registry).specs()
        if run.prompt.tools is not None:  # an agent's tools: the model is offered only these
            tools = [spec for spec in tools if spec["function"]["name"] in run.prompt.tools]
        window = target.context or target.kind.default_context
        messages = await self._messages(run)
        try:
            body, run.pruned = await asyncio.to_thread(_fitted_body, run, target, messages, tools, window,
                                                       bool(target.context))
        except ContextFull:
            # Pruning was not enough: the model summarizes the conversation once, and the
            # request is built again from the summary; still too big ends the run, never a loop.
            await self._compact(run, target, messages, window)
            try:
                body, run.pruned = await asyncio.to_thread(_fitted_body, run, target, await self._messages(run),
                                                           tools, window, True)
            except ContextFull as exc:
                raise ProviderError(f"{exc} (after compacting the conversation)", retry=False) from None
        return body


    async def _messages(self, run: _Run) -> list[dict]:
        # What earlier steps read stays as it was (a run's messages change only by being added
        # to: undo is refused while it runs), so each step reads only the messages after them.
        added, run.history_last = await self.store.history_after(run.session["id"], run.history_last)
        run.history += [message for message in added
                        if not message["data"].get("servers")]  # the starts of MCP servers: for the person
        history = run.history
        attachments = await run.attachments.by_message(self.store, history, run.marker)
        if run.system is None:
            run.system = await system_message(self.system_template, run.asker.root, run.marker)
            if run.prompt.instructions:  # the prompt's agent (project_commands.py)
                run.system = run.system | {"content": run.system["content"] + run.prompt.instructions}
        # Converting a long history takes a tenth of a second and more: never on the loop.
        converted = await asyncio.to_thread(history_messages, history, attachments, run.marker, run.messageid,
                                            run.converted)
        return [run.system] + converted

    async def _compact(self, run: _Run, target, messages: list[dict], window: int) -> None:
        """A summary of the conversation by the session's model, without tools, stored as an
        assistant message marked `compaction` that the person reads like any answer."""
        transcript = await asyncio.to_thread(compaction_messages, messages, window)
        body = target.kind.request_body(target, transcript, [], None)
        # Marked `compacting` until it ends well: a summary cut by an abort, an error or a kill
        # is dropped from the history (context.history_messages), never sent as an answer.
        _calls, parts = await self.answers.stream(run.session["id"], run.prompt.model, target, body,
                                                  {"compaction": True}, prompt=run.messageid,
                                                  opening={"compacting": True})
        for open_part in parts.values():  # a model that calls a tool anyway: nothing runs
            open_part.data["error"] = "no tools while compacting"
            await self.recorder.close(open_part, "error")


def _full_reason(exc: BaseException, store) -> str:
    """The sentence of a write refused for want of space, naming the folder and what is left."""
    if isinstance(exc, StorageFull):
        return exc.errors[0][1]
    folder = getattr(exc, "filename", None)
    return StorageFull(os.path.dirname(folder) if isinstance(folder, str) else os.path.dirname(store.path)).errors[0][1]


def _log_end_failure(exc: BaseException, what: str) -> None:
    if out_of_space(exc):
        log.warning("%s: the disk is full", what)  # one line: the store said why once
    else:
        log.exception(what)


def _fitted_body(run: _Run, target, messages: list[dict], tools: list[dict], window: int,
                 known: bool) -> tuple[dict, int]:
    """`(body, pruned)`: the request of a step, its messages fitted to the window, and its
    messages' JSON kept in the run's encoder for the request to send. It walks, copies and
    encodes the whole history (a tenth of a second and more in a session of thousands of
    messages), so it runs on a thread, never on the loop; it touches only what the run's
    own step owns while it waits (the run's sizes and encoder). Raises ContextFull."""
    messages, pruned = fit_window(messages, tools, window, known=known, sizes=run.sizes)
    body = target.kind.request_body(target, messages, tools, run.prompt.reasoning)
    if run.limits.get("temperature") is not None:
        target.kind.set_temperature(body, run.limits["temperature"])
    run.encoder.encode_pieces(body)  # the request then encodes only its head
    return body, pruned


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        return arguments
