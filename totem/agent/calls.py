"""One tool call of a model answer: from its arguments, through the permission gate, to its
result in the call's part.

Owns parsing the arguments with the registry, the decision (the gate), running the tool in its
context (streamed output, questions, the task list, background jobs, further subjects met while
running, the sandbox of the processes it starts), scrubbing what it returns, and the final
status of the part: done, error or denied.

Must not: decide permissions (the gate does), stream model answers, or publish except through
the recorder, the questions and the todo event.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable

from totem.agent.gate import Asker, PermissionGate
from totem.agent.recorder import OpenPart, Recorder
from totem.agent.stream import ToolCall
from totem.clock import now_ms
from totem.errors import StorageFull, out_of_space
from totem.events import TodoUpdated
from totem.security.permissions import COMMAND
from totem.security.vault import QuietScrub
from totem.tools import NoSpace, OutsideProject, ToolContext, ToolError
from totem.workspace.git import GitError
from totem.workspace.snapshots import Prior, Scope, Snapshots, Window, planned_diff

MAX_TOOL_OUTPUT_CHARS = 50_000
JOURNAL_TIMEOUT_S = 30.0  # a store that cannot take the journal in this time fails the change

log = logging.getLogger("totem.calls")


class ToolCalls:
    """Runs the tool calls of every run."""

    def __init__(self, registry, gate: PermissionGate, recorder: Recorder, store, hub, scrubber, jobs=None,
                 snapshots: Snapshots | None = None, sandbox=None):
        self.snapshots = snapshots
        self.sandbox = sandbox  # sandbox.Sandbox: what a command's processes may reach (None: nothing)
        self.registry = registry
        self.gate = gate
        self.recorder = recorder
        self.store = store
        self.hub = hub
        self.scrubber = scrubber  # () -> the current vault.Scrubber
        self.jobs = jobs
        # (asker, part, agent, description, prompt) -> (answer, sessionid): the loop's sub-agents.
        self.delegate: Callable[..., Awaitable[tuple[str, str]]] | None = None

    async def run(self, asker: Asker, open_part: OpenPart, call: ToolCall, limits: dict | None = None,
                  registry=None) -> None:
        """Run one call to its end; the part ends done, error or denied (never raises ToolError).
        `registry`: the tools of this run (the built-in ones and its MCP servers'), else the
        built-in ones."""
        data = open_part.data
        if asker.tools is not None and call.name not in asker.tools:
            await self._refuse_outside_agent(asker.tools, open_part, call.name)
            return
        ctx = ToolContext(root=asker.root, sessionid=asker.sessionid)  # for the subjects alone
        outside = None
        try:
            tool, args = (registry or self.registry).parse_arguments(call.name, call.arguments)
            data["input"] = args
            data.pop("arguments", None)  # stored once: context.call_arguments writes it back
            try:
                subjects = tuple(tool.subjects(args, ctx))
            except OutsideProject as exc:
                subjects, outside = (), str(exc)
        except ToolError as exc:
            data["error"] = str(exc)
            await self.recorder.close(open_part, "error")
            return
        data["subjects"] = list(subjects)
        confinement = self.confinement(asker, tool, args, limits or {})
        reach = await self.sandbox.question_reach(confinement) if self.sandbox is not None else {}
        if reach:
            data["reach"] = reach
        data["decision"] = await self.gate.settle(
            asker, tool.permission_name or tool.name, subjects, tool.question_input(args), outside=outside is not None,
            before_ask=lambda: self.recorder.update(open_part, "pending"),
            preview=lambda: self._preview(tool, args, ctx), outside_sandbox=tool.unconfined(args), reach=reach)
        if data["decision"].get("reply") == "reject":
            data["decision"]["reason"] = "the person rejected this call"
        if data["decision"]["action"] == "deny":
            reason = outside or data["decision"]["reason"]
            data["error"] = f"{denial(reason)}. Do not repeat this call; change course or ask the person."
            await self.recorder.close(open_part, "denied")
            return
        data["started"] = now_ms()
        await self.recorder.update(open_part, "running")
        scope = Scope(asker.sessionid, asker.projectid, asker.root, open_part.part["messageid"],
                      open_part.id, tool.name)
        window = await self._begin_command(tool, args, scope)
        priors: dict[str, Prior] = {}
        ctx = self._context(asker, open_part, scope, priors, limits or {}, confinement)
        try:
            result = await tool.run(args, ctx)
        except ToolError as exc:
            data["error"] = self.scrubber().scrub(str(exc))
            full = await self._record(open_part, scope, priors, window, None)
            await self.recorder.close(open_part, "error")
            if isinstance(exc, NoSpace):  # every later write would fail the same way
                raise StorageFull(exc.folder) from None
            if full is not None:
                raise full from None
            return
        except BaseException:
            await asyncio.shield(self._record(open_part, scope, priors, window, None))
            raise
        full = await self._record(open_part, scope, priors, window, result.data.get("job"))
        if full is not None:
            data["error"] = data["snapshot"]["error"]
            await self.recorder.close(open_part, "error")
            raise full
        output = self.scrubber().scrub(result.output)
        if len(output) > MAX_TOOL_OUTPUT_CHARS:
            output = output[:MAX_TOOL_OUTPUT_CHARS] + f"\n[output cut at {MAX_TOOL_OUTPUT_CHARS} characters]"
        data.update({"output": output, "title": result.title, "result": result.data, "finished": now_ms()})
        await self.recorder.close(open_part, "done")

    def confinement(self, asker: Asker, tool, args: dict, limits: dict):
        """The sandbox of a call that starts processes (a command), None for the others."""
        if self.sandbox is None or tool.kind.subject != COMMAND:
            return None
        return self.sandbox.confinement(asker.root, asker.sessionid, asker.scheduled or asker.depth > 0, limits,
                                        outside=tool.unconfined(args))

    async def _refuse_outside_agent(self, tools: frozenset[str], open_part: OpenPart, name: str) -> None:
        """A call to a tool that the prompt's agent does not have: refused in code, whatever the
        rules say, as Plan mode refuses a change (the model was never offered that tool)."""
        reason = (f"the agent of this prompt may use only {', '.join(sorted(tools)) or 'no tool'}; "
                  f"{name} is not one of them")
        open_part.data["decision"] = {"action": "deny", "reason": reason, "rule": None, "subject": None,
                                      "at": now_ms(), "by": "code"}
        open_part.data["error"] = f"Denied: {reason}. Do not repeat this call; change course or ask the person."
        await self.recorder.close(open_part, "denied")

    async def _preview(self, tool, args: dict, ctx: ToolContext) -> list[dict]:
        """What the call would change, as the question shows it (nothing is applied)."""
        try:
            planned = await asyncio.to_thread(tool.preview, args, ctx)
        except ToolError as exc:
            return [{"error": self.scrubber().scrub(str(exc))}]
        return [self.scrubbed(planned_diff(change)) for change in planned or ()]

    def scrubbed(self, entry: dict) -> dict:
        return entry | {"patch": self.scrubber().scrub(entry["patch"])}

    async def _begin_command(self, tool, args: dict, scope: Scope) -> Window | None:
        """Capture the tree before a command, so that what it changes can be taken back; a
        tree that cannot be captured (git failing) leaves the command unrecorded, said in the
        part."""
        if self.snapshots is None or tool.kind.subject != COMMAND:
            return None
        try:
            return await self.snapshots.begin_command(scope, job=bool(args.get("background")))
        except (GitError, OSError) as exc:
            log.warning("no snapshot of %s before a command: %s", scope.root, exc)
            return None

    async def _record(self, open_part: OpenPart, scope: Scope, priors: dict[str, Prior],
                      window: Window | None, jobid: str | None) -> StorageFull | None:
        """Record the files the call changed: the kept content of the file tools' targets, or
        the tree after a command (after its job, for one in the background). A file tool's
        change that cannot be recorded is undone (a change Undo would not know of must not
        stay). Returns the StorageFull that ends the run when space ran out."""
        if self.snapshots is None:
            return None
        try:
            if priors:
                changed = await self.snapshots.record_files(scope, priors)
            elif window is not None and jobid is not None and self.jobs is not None:
                job = self.jobs.get(scope.sessionid, jobid)
                if job.task is not None:
                    self.snapshots.end_with(window, job.task)
                return None
            elif window is not None:
                changed = await self.snapshots.end_command(window)
            else:
                return None
        except (GitError, OSError, StorageFull) as exc:
            full = exc if isinstance(exc, StorageFull) else (
                StorageFull(self.snapshots.folder) if out_of_space(exc) else None)
            reason = full.errors[0][1] if full is not None else str(exc)
            if full is None:
                log.warning("the changes of %s were not recorded: %s", scope.partid, exc)
            note = f"the changes were not recorded: {reason}"
            if priors:
                left = await asyncio.to_thread(self.snapshots.put_back, scope.projectid, scope.root, priors)
                note = (f"the change could not be recorded ({reason}), so it was undone" if not left else
                        f"the change could not be recorded ({reason}); undoing it failed for {', '.join(left)}")
            open_part.data["snapshot"] = {"error": note}
            return full
        if changed:
            open_part.data["changed"] = changed
        return None

    def _context(self, asker: Asker, open_part: OpenPart, scope: Scope, priors: dict[str, Prior],
                 limits: dict, confinement=None) -> ToolContext:
        sessionid, root = asker.sessionid, asker.root

        async def ask(text: str, options: list[str]) -> str:
            return await self.gate.question(asker, text, options)

        async def set_todos(items: list[dict]) -> None:
            await self.store.set_todos(sessionid, items)
            self.hub.publish(TodoUpdated(sessionid, items))

        async def permit(tool: str, subject: str, args: dict | None = None, always_ask: str | None = None) -> None:
            # A further subject met during the call: its decision joins the part's audit.
            record = await self.gate.settle(asker, tool, (subject,), args or {}, always_ask=always_ask)
            open_part.data.setdefault("decisions", []).append(record)
            if record["action"] == "deny":
                if record.get("reply") == "reject":
                    raise ToolError(f"Denied: the person rejected {tool} of {subject}")
                raise ToolError(denial(record["reason"]))

        async def delegate(agent: str, description: str, prompt: str) -> tuple[str, str]:
            if self.delegate is None:
                raise ToolError("sub-agents are not available here")
            return await self.delegate(asker, open_part, agent, description, prompt)

        def start_job(command: str, confinement=None) -> dict:
            return self.jobs.start(sessionid, command, root, confinement).view()

        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def journal(entries: list[dict]) -> None:
            # From the tool's worker thread: stored before the change is made (crash recovery).
            if threading.get_ident() == loop_thread:
                raise RuntimeError("the journal is written from a worker thread, not the event loop")

            async def record() -> None:
                open_part.data["journal"] = open_part.data.get("journal", []) + entries
                await self.recorder.update(open_part, "running")
            if self.snapshots is not None:  # what is there now, before the change
                fresh = [entry["path"] for entry in entries if entry["path"] not in priors]
                try:
                    priors.update(self.snapshots.keep_before(scope.projectid, scope.root, fresh))
                except OSError as exc:  # a change that could not be undone is not made
                    if out_of_space(exc):
                        raise NoSpace("nothing was changed: the content before the change could not be kept "
                                      "(no space is left on the disk)", self.snapshots.folder) from None
                    raise ToolError(f"nothing was changed: the content before the change could not be kept "
                                    f"({exc.strerror or exc})") from None
            try:
                asyncio.run_coroutine_threadsafe(record(), loop).result(JOURNAL_TIMEOUT_S)
            except Exception as exc:
                raise ToolError(f"nothing was changed: the journal of the change could not be stored ({exc})") from None

        # A tail the scrubber holds back shows once the command has been quiet a moment.
        open_part.scrub = QuietScrub(self.scrubber().stream(), lambda tail: self.recorder.append(open_part, tail),
                                     loop.call_later)
        return ToolContext(root=root, sessionid=sessionid,
                           emit=lambda text: self.recorder.append(open_part, open_part.scrub.feed(text)),
                           ask=ask, set_todos=set_todos, permit=permit, journal=journal, delegate=delegate,
                           start_job=start_job if self.jobs is not None else None,
                           command_timeout=limits.get("commandtimeout"), output_cap=limits.get("outputcap"),
                           confinement=confinement)


def denial(reason: str) -> str:
    """The sentence of a denial: "Denied: <reason>", or the reason itself when it already says
    so ("denied by the project rule ..."), never "Denied: denied ..."."""
    if reason[:6].lower() == "denied":
        return reason[:1].upper() + reason[1:]
    return f"Denied: {reason}"
