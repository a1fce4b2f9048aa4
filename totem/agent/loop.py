"""The agent loop: a prompt becomes steps of model answers and tool calls, streamed as parts.

Owns the runs of sessions (one at a time per session), the streaming of each model answer into
stored parts and events, running the tool calls of an answer, retries of provider errors, the
step limit, the loop guard, questions that wait for the person, and abort. It stores through
`store`, publishes through `hub`, reaches models through `client.stream_chat` and tools through
the registry; it never speaks HTTP to clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
from dataclasses import dataclass, field

from ..boundary import BoundaryError, is_protected_env, real_root, relative_path, resolve_inside
from ..git import repository_runs_programs
from ..permissions import Call, Rule, decide, suggest_patterns
from ..shellwords import reveal
from ..events import (MessageCreated, PartClosed, PartCreated, PartDelta, PartUpdated, RunError,
                      SessionStatus, SessionUpdated, TodoUpdated)
from ..store import now_ms, session_view
from ..tools import OutsideProject, ToolContext, ToolError
from . import client
from .providers import redact
from .questions import Questions
from ..vault import Scrubber
from .context import history_messages, load_prompt, new_marker, system_message, to_ollama_native
from .provider_errors import ProviderError
from .stream import (ReasoningDelta, StreamEnd, StreamError, TextDelta, ToolCall, ToolCallStarted, Usage,
                     extract_text_tool_calls)

log = logging.getLogger("totem.agent")

FLUSH_INTERVAL_S = 1.0
MAX_RETRIES = 4
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
LOOP_GUARD_REPEATS = 3
MAX_TOOL_OUTPUT_CHARS = 50_000
SESSION_NAME_CHARS = 60
DEFAULT_SESSION_NAME = "New session"
REASONING_LEVELS = ("none", "low", "medium", "high")


class RunRefused(Exception):
    """A prompt that cannot start (the session is already running)."""


@dataclass
class Prompt:
    """What a person sent: text, options and files (name, mime, bytes)."""

    text: str
    model: str
    mode: str = "build"
    autoaccept: bool = False
    reasoning: str | None = None
    attachments: list[tuple[str, str, bytes]] = field(default_factory=list)


@dataclass
class _OpenPart:
    part: dict
    text: list[str] = field(default_factory=list)
    flushed: int = 0  # characters already stored
    scrub: object = None  # the vault's stream scrubber of a tool's live output


@dataclass
class _Run:
    session: dict
    project: dict
    prompt: Prompt
    task: asyncio.Task | None = None
    open_parts: dict[str, _OpenPart] = field(default_factory=dict)
    key: str | None = None  # the provider key, kept out of every message this run publishes
    error: str | None = None  # why the run failed, when it did
    marker: str = field(default_factory=new_marker)  # of the data envelopes, the same at every step


class Runs:
    """The runs of every session of one Totem."""

    def __init__(self, store, hub, providers, registry, steps: int, config_rules=(), jobs=None,
                 scrubber=None, backoff_first_s: float = BACKOFF_FIRST_S):
        self.store = store
        self.hub = hub
        self.providers = providers
        self.registry = registry
        self.steps = steps
        self.backoff_first_s = backoff_first_s
        self.system_template = load_prompt("system.txt")
        self._runs: dict[str, _Run] = {}
        self.questions = Questions(hub, store.ids.new)
        self.config_rules = tuple(config_rules)
        self.jobs = jobs
        self.scrubber = scrubber or Scrubber.empty  # () -> the current vault.Scrubber
        self._flusher: asyncio.Task | None = None

    # -- the door: prompt, abort, answer ----------------------------------------------------

    def is_running(self, sessionid: str) -> bool:
        return sessionid in self._runs

    async def start_prompt(self, session: dict, project: dict, prompt: Prompt) -> str:
        """Store the user message and start the run; returns the message id.

        Raises RunRefused while the session runs: prompts are never interleaved.
        """
        sessionid = session["id"]
        if sessionid in self._runs:
            raise RunRefused("the session is running; wait for it to finish or abort it")
        run = _Run(session, project, prompt)
        self._runs[sessionid] = run  # claimed before any await, so a second prompt is refused
        try:
            message = await self._store_user_message(run)
        except BaseException:
            del self._runs[sessionid]
            raise
        run.task = asyncio.create_task(self._run(run), name=f"run {sessionid}")
        self._ensure_flusher()
        return message["id"]

    def open_parts(self, sessionid: str) -> list[dict]:
        """The parts of a session's run that are still open, each with its text so far."""
        run = self._runs.get(sessionid)
        if run is None:
            return []
        return [open_part.part | {"text": "".join(open_part.text)} for open_part in run.open_parts.values()]

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

    async def stop_all(self) -> None:
        for sessionid in list(self._runs):
            await self.abort(sessionid)
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher

    # -- one run ----------------------------------------------------------------------------

    async def _store_user_message(self, run: _Run) -> dict:
        sessionid = run.session["id"]
        prompt = run.prompt
        messageid = self.store.ids.new()
        files = []
        if prompt.attachments:
            # The message row must exist before its attachments reference it.
            message = await self.store.add_message(sessionid, "user", data={}, newid=messageid)
            files = await self.store.add_attachments(sessionid, messageid, prompt.attachments)
            await self.store.finish_message(messageid, None, {"attachments": files})
        else:
            message = await self.store.add_message(sessionid, "user", newid=messageid)
        part = await self.store.add_part(messageid, sessionid, "text", "done", prompt.text, closed=True)
        message["data"] = {"attachments": files} if files else {}
        message["parts"] = [part]
        await self.store.set_session_options(sessionid, prompt.model, prompt.mode, prompt.autoaccept)
        self.hub.publish(MessageCreated(sessionid, message))
        await self._name_session(run)
        return message

    async def _name_session(self, run: _Run) -> None:
        session = run.session
        if session["name"] != DEFAULT_SESSION_NAME or await self.store.count_messages(session["id"]) != 1:
            return
        first_line = run.prompt.text.strip().splitlines()[0] if run.prompt.text.strip() else ""
        name = first_line[:SESSION_NAME_CHARS].strip() or (run.prompt.attachments[0][0] if run.prompt.attachments else "")
        if not name:
            return
        row = await self.store.rename_session(session["id"], name)
        if row is not None:
            self.hub.publish(SessionUpdated(session["id"], session_view(row)))

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
            await self._set_status(sessionid, "running")
            status = await self._steps(run)
        except asyncio.CancelledError:
            status = "aborted"
        except ProviderError as exc:
            self._fail(run, redact(exc.message, run.key))
            status = "error"
        except Exception:
            log.exception("run of session %s failed", sessionid)
            self._fail(run, "Totem failed while running this prompt; see the server log.")
            status = "error"
        finally:
            await asyncio.shield(self._end_run(run, status))

    async def _end_run(self, run: _Run, status: str) -> None:
        sessionid = run.session["id"]
        closing = "aborted" if status == "aborted" else "error"
        for open_part in list(run.open_parts.values()):
            await self._close_part(run, open_part, closing)
        try:
            await self._set_status(sessionid, status, run.error if status == "error" else None)
        finally:
            self._runs.pop(sessionid, None)

    async def _steps(self, run: _Run) -> str:
        target = await self.providers.target(run.prompt.model)
        run.key = target.key
        repeats: list[str] = []
        for _step in range(self.steps):
            message, calls = await self._answer_with_retries(run, target)
            if not calls:
                return "idle"
            for call in calls:
                signature = call.name + "\0" + _canonical(call.arguments)
                repeats = repeats + [signature] if repeats and repeats[-1] == signature else [signature]
                if len(repeats) >= LOOP_GUARD_REPEATS:
                    answer = await self.questions.question(
                        run.session["id"], f"The model called {call.name} with the same input "
                        f"{LOOP_GUARD_REPEATS} times in a row. Go on?", ["Go on", "Stop"])
                    if answer != "Go on":
                        return "idle"
                    repeats = []
                await self._run_tool(run, message, call)
        self._fail(run, f"The run stopped after {self.steps} model calls (the step limit); "
                        "send a prompt to go on.")
        return "error"

    # -- one model answer -------------------------------------------------------------------

    async def _answer_with_retries(self, run: _Run, target):
        attempt = 0
        while True:
            try:
                return await self._answer(run, target)
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
        history = await self.store.session_history(run.session["id"])
        attachments = await self._attachments_of(history)
        root = real_root(run.project["path"])
        messages = ([await system_message(self.system_template, root, run.marker)]
                    + history_messages(history, attachments, run.marker))
        body = {"model": target.model, **target.options}
        if target.native_ollama:
            body["messages"] = to_ollama_native(messages)
            if run.prompt.reasoning:
                body["think"] = run.prompt.reasoning != "none"
        else:
            body["messages"] = messages
            if run.prompt.reasoning and run.prompt.reasoning != "none":
                body["reasoning_effort"] = run.prompt.reasoning
        body["tools"] = self.registry.specs()
        return body

    async def _attachments_of(self, history: list[dict]) -> dict[str, list[dict]]:
        result = {}
        for message in history:
            files = message["data"].get("attachments") if message["role"] == "user" else None
            if files:
                rows = [await self.store.get_attachment(f["id"]) for f in files]
                result[message["id"]] = [row for row in rows if row is not None]
        return result

    async def _answer(self, run: _Run, target):
        sessionid = run.session["id"]
        body = await self._request_body(run, target)
        started = now_ms()
        message = await self.store.add_message(sessionid, "assistant", model=run.prompt.model)
        message["parts"] = []
        self.hub.publish(MessageCreated(sessionid, message))
        text_part = reasoning_part = None
        tool_parts: dict[int, _OpenPart] = {}
        usage = None
        first_token = None
        result = None
        try:
            stream = client.stream_chat(target.url, target.key, body, native_ollama=target.native_ollama)
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    if isinstance(event, TextDelta):
                        first_token = first_token or now_ms()
                        text_part = text_part or await self._open_part(run, message, "text")
                        self._append(run, text_part, event.text)
                    elif isinstance(event, ReasoningDelta):
                        first_token = first_token or now_ms()
                        reasoning_part = reasoning_part or await self._open_part(run, message, "reasoning")
                        self._append(run, reasoning_part, event.text)
                    elif isinstance(event, ToolCallStarted) and event.index not in tool_parts:
                        tool_parts[event.index] = await self._open_part(
                            run, message, "tool", status="pending",
                            data={"callid": event.id, "tool": event.name, "arguments": ""})
                    elif isinstance(event, Usage):
                        usage = event.usage
                    elif isinstance(event, StreamError):
                        raise ProviderError(event.message, status=event.status, retry=event.retry, kind=event.kind)
                    elif isinstance(event, StreamEnd):
                        result = event.result
        except BaseException as exc:
            ending = "aborted" if isinstance(exc, asyncio.CancelledError) else "error"
            for open_part in [text_part, reasoning_part, *tool_parts.values()]:
                if open_part is not None:
                    await self._close_part(run, open_part, ending)
            await self.store.finish_message(message["id"], usage, {"started": started, "first": first_token,
                                                                   "failed": True})
            raise
        for open_part in (reasoning_part, text_part):
            if open_part is not None:
                await self._close_part(run, open_part, "done")
        calls = result.tool_calls if result else []
        if not calls and result and result.content:
            _rest, calls = extract_text_tool_calls(result.content, self.registry.names())
        message["tool_parts"] = await self._settle_tool_parts(run, message, tool_parts, calls)
        await self.store.finish_message(message["id"], usage or (result.usage if result else None),
                                        {"started": started, "first": first_token, "finished": now_ms(),
                                         "finish_reason": result.finish_reason if result else None})
        return message, calls

    async def _settle_tool_parts(self, run, message, tool_parts: dict[int, _OpenPart], calls: list[ToolCall]):
        """Give each final call its part (created now for calls written as text)."""
        parts = {}
        for position, call in enumerate(calls):
            open_part = tool_parts.pop(call.index, None) if call.index in tool_parts else None
            if open_part is None:
                open_part = await self._open_part(run, message, "tool", status="pending",
                                                  data={"callid": call.id, "tool": call.name, "arguments": ""})
            open_part.part["data"].update({"callid": call.id, "tool": call.name, "arguments": call.arguments})
            parts[call.id] = open_part
        for leftover in tool_parts.values():
            await self._close_part(run, leftover, "error")
        return parts

    # -- tool calls -------------------------------------------------------------------------

    async def _run_tool(self, run: _Run, message: dict, call: ToolCall) -> None:
        open_part = message["tool_parts"][call.id]
        data = open_part.part["data"]
        ctx = self._tool_context(run, open_part)
        outside = None
        try:
            tool, args = self.registry.parse_arguments(call.name, call.arguments)
            data["input"] = args
            try:
                subjects = tuple(tool.subjects(args, ctx))
            except OutsideProject as exc:
                subjects, outside = (), str(exc)
        except ToolError as exc:
            data["error"] = str(exc)
            await self._close_part(run, open_part, "error")
            return
        data["subjects"] = list(subjects)
        decision, call = await self._decide(run, tool.name, subjects, outside, ctx.root)
        data["decision"] = decision.to_dict() | {"at": now_ms(), "by": "code" if decision.rule is None else "rule"}
        if decision.action == "ask":
            await self._update_part(run, open_part, "pending")
            commands = _asked(tool.name, decision, call)
            reply, chosen = await self.questions.permission(
                run.session["id"], tool.name, args, _flat(commands), commands=commands,
                reason=decision.reason, folder=ctx.root)
            data["decision"].update({"action": "deny" if reply == "reject" else "allow", "by": "person",
                                     "reply": reply, "answered": now_ms()})
            if reply == "always":
                for pattern in chosen:
                    await self.store.add_rule(run.project["id"], tool.name, pattern, "allow")
                data["decision"]["saved"] = [{"tool": tool.name, "pattern": pattern, "action": "allow"}
                                             for pattern in chosen]
            if reply == "reject":
                data["decision"]["reason"] = "the person rejected this call"
        if data["decision"]["action"] == "deny":
            reason = outside or data["decision"]["reason"]
            data["error"] = f"Denied: {reason}. Do not repeat this call; change course or ask the person."
            await self._close_part(run, open_part, "denied")
            return
        data["started"] = now_ms()
        await self._update_part(run, open_part, "running")
        try:
            result = await tool.run(args, ctx)
        except ToolError as exc:
            data["error"] = self.scrubber().scrub(str(exc))
            await self._close_part(run, open_part, "error")
            return
        output = self.scrubber().scrub(result.output)
        if len(output) > MAX_TOOL_OUTPUT_CHARS:
            output = output[:MAX_TOOL_OUTPUT_CHARS] + f"\n[output cut at {MAX_TOOL_OUTPUT_CHARS} characters]"
        data.update({"output": output, "title": result.title, "result": result.data, "finished": now_ms()})
        await self._close_part(run, open_part, "done")

    def _tool_context(self, run: _Run, open_part: _OpenPart) -> ToolContext:
        sessionid = run.session["id"]

        async def ask(text: str, options: list[str]) -> str:
            return await self.questions.question(sessionid, text, options)

        async def set_todos(items: list[dict]) -> None:
            await self.store.set_todos(sessionid, items)
            self.hub.publish(TodoUpdated(sessionid, items))

        async def permit(tool: str, subject: str, args: dict | None = None, always_ask: str | None = None) -> None:
            await self._permit(run, open_part, tool, subject, args or {}, always_ask)

        root = real_root(run.project["path"])

        def start_job(command: str) -> dict:
            return self.jobs.start(sessionid, command, root).view()

        open_part.scrub = self.scrubber().stream()
        return ToolContext(root=root, sessionid=sessionid,
                           emit=lambda text: self._append(run, open_part, open_part.scrub.feed(text)),
                           ask=ask, set_todos=set_todos,
                           permit=permit, start_job=start_job if self.jobs is not None else None)

    async def _permit(self, run: _Run, open_part: _OpenPart, tool: str, subject: str, args: dict,
                      always_ask: str | None) -> None:
        """Decide a subject met during a call; every such decision joins the part's audit."""
        root = real_root(run.project["path"])
        decision, call = await self._decide(run, tool, (subject,), None, root)
        record = decision.to_dict() | {"at": now_ms(), "by": "code" if decision.rule is None else "rule"}
        open_part.part["data"].setdefault("decisions", []).append(record)
        if decision.action == "deny":
            raise ToolError(f"Denied: {decision.reason}")
        if decision.action == "allow" and not always_ask:
            return
        if always_ask:
            record["reason"] = f"{subject}: {always_ask}; asked even under an allow rule"
        commands = [] if always_ask else _asked(tool, decision, call)
        reply, chosen = await self.questions.permission(
            run.session["id"], tool, args | ({"note": always_ask} if always_ask else {}),
            _flat(commands), commands=commands, folder=root,
            reason=record["reason"] if always_ask else decision.reason)
        record.update({"action": "deny" if reply == "reject" else "allow", "by": "person", "reply": reply,
                       "answered": now_ms()})
        if reply == "reject":
            raise ToolError(f"Denied: the person rejected {tool} of {subject}")
        if reply == "always" and not always_ask:
            for pattern in chosen:
                await self.store.add_rule(run.project["id"], tool, pattern, "allow")

    async def _decide(self, run: _Run, tool: str, subjects: tuple[str, ...], outside: str | None, root: str):
        """The decision for one call: code rules first, then project, global and default rules."""
        project_rules = [Rule(r["tool"], r["pattern"], r["action"], "project", r["id"])
                         for r in await self.store.list_rules(run.project["id"])]
        global_rules = [Rule(r["tool"], r["pattern"], r["action"], "global", r["id"])
                        for r in await self.store.list_rules(None)]
        global_rules += [Rule(tool_name, pattern, action, "global") for tool_name, pattern, action in self.config_rules]
        git_programs = tool == "bash" and await asyncio.to_thread(repository_runs_programs, root)
        call = Call(tool, subjects, mode=run.prompt.mode, autoaccept=run.prompt.autoaccept,
                    outside=outside is not None, inside=lambda path: _is_inside(root, path),
                    git_programs=git_programs)
        return decide(call, project_rules + global_rules), call

    async def _open_part(self, run: _Run, message: dict, kind: str, status: str = "streaming",
                         data: dict | None = None) -> _OpenPart:
        sessionid = run.session["id"]
        part = await self.store.add_part(message["id"], sessionid, kind, status, data=data)
        open_part = _OpenPart(part)
        run.open_parts[part["id"]] = open_part
        self.hub.publish(PartCreated(sessionid, part))
        return open_part

    def _append(self, run: _Run, open_part: _OpenPart, text: str) -> None:
        if text:
            open_part.text.append(text)
            self.hub.publish(PartDelta(run.session["id"], open_part.part["id"], text))

    async def _update_part(self, run: _Run, open_part: _OpenPart, status: str) -> None:
        part = await self.store.update_part(open_part.part["id"], status=status, data=open_part.part["data"])
        if part is not None:
            part["data"] = open_part.part["data"]  # the run keeps filling in the same record
            open_part.part = part
            self.hub.publish(PartUpdated(run.session["id"], part))

    async def _close_part(self, run: _Run, open_part: _OpenPart, status: str) -> None:
        """Store the part complete with its final status, announced (part.updated) before part.closed."""
        partid = open_part.part["id"]
        if run.open_parts.get(partid) is None:
            return
        if open_part.scrub is not None:
            self._append(run, open_part, open_part.scrub.flush())  # what the scrubber held back
        run.open_parts.pop(partid, None)
        part = await self.store.update_part(partid, text="".join(open_part.text),
                                            status=status, data=open_part.part["data"], close=True)
        if part is not None:  # the final status (done, error, aborted, denied) before the close
            self.hub.publish(PartUpdated(run.session["id"], part))
        self.hub.publish(PartClosed(run.session["id"], partid))

    def _ensure_flusher(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_loop(), name="flush parts")

    async def _flush_loop(self) -> None:
        # Streamed text is stored at least every second, so a crash loses at most a second.
        while self._runs:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            pending = []
            for run in list(self._runs.values()):
                for open_part in list(run.open_parts.values()):
                    size = sum(map(len, open_part.text))
                    if size != open_part.flushed:
                        open_part.flushed = size
                        pending.append((open_part.part["id"], "".join(open_part.text)))
            if pending:
                try:
                    await self.store.flush_part_texts(pending)
                except Exception:
                    log.exception("flushing streamed text failed")


def _is_inside(root: str, path: str) -> bool:
    """Whether a command's path argument stays in the project and is no protected .env file
    (also through a link: `cat notsecret` where notsecret leads to .env) nor a file with more
    than one hard link."""
    try:
        resolved = resolve_inside(root, path)
        info = os.stat(resolved) if os.path.exists(resolved) else None
    except (BoundaryError, OSError):
        return False
    if info is not None and stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        return False  # a hard link: its other name may be outside the project or a secret file
    return not is_protected_env(relative_path(root, resolved))


def _asked(tool: str, decision, call: Call) -> list[dict]:
    """What the question lists: each subject that needs an answer (bash: each simple command
    that asks), shown with its hidden characters revealed, and the patterns "always" may store."""
    return [{"command": subject, "shown": reveal(subject),
             "patterns": suggest_patterns(tool, subject, call.inside, call.git_programs)}
            for subject in decision.asks]


def _flat(commands: list[dict]) -> list[str]:
    return list(dict.fromkeys(pattern for item in commands for pattern in item["patterns"]))


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        return arguments


