"""One tool call of a model answer: from its arguments, through the permission gate, to its
result in the call's part.

Owns parsing the arguments with the registry, the decision (the gate), running the tool in its
context (streamed output, questions, the task list, background jobs, further subjects met while
running), scrubbing what it returns, and the final status of the part: done, error or denied.

Must not: decide permissions (the gate does), stream model answers, or publish except through
the recorder, the questions and the todo event.
"""

from __future__ import annotations

import asyncio
import threading

from ..events import TodoUpdated
from ..store import now_ms
from ..tools import OutsideProject, ToolContext, ToolError
from .gate import Asker, PermissionGate
from .recorder import OpenPart, Recorder
from .stream import ToolCall

MAX_TOOL_OUTPUT_CHARS = 50_000
JOURNAL_TIMEOUT_S = 30.0  # a store that cannot take the journal in this time fails the change


class ToolCalls:
    """Runs the tool calls of every run."""

    def __init__(self, registry, gate: PermissionGate, recorder: Recorder, store, hub, scrubber, jobs=None):
        self.registry = registry
        self.gate = gate
        self.recorder = recorder
        self.store = store
        self.hub = hub
        self.scrubber = scrubber  # () -> the current vault.Scrubber
        self.jobs = jobs

    async def run(self, asker: Asker, open_part: OpenPart, call: ToolCall) -> None:
        """Run one call to its end; the part ends done, error or denied (never raises ToolError)."""
        data = open_part.data
        ctx = self._context(asker, open_part)
        outside = None
        try:
            tool, args = self.registry.parse_arguments(call.name, call.arguments)
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
        data["decision"] = await self.gate.settle(
            asker, tool.name, subjects, args, outside=outside is not None,
            before_ask=lambda: self.recorder.update(open_part, "pending"))
        if data["decision"].get("reply") == "reject":
            data["decision"]["reason"] = "the person rejected this call"
        if data["decision"]["action"] == "deny":
            reason = outside or data["decision"]["reason"]
            data["error"] = f"Denied: {reason}. Do not repeat this call; change course or ask the person."
            await self.recorder.close(open_part, "denied")
            return
        data["started"] = now_ms()
        await self.recorder.update(open_part, "running")
        try:
            result = await tool.run(args, ctx)
        except ToolError as exc:
            data["error"] = self.scrubber().scrub(str(exc))
            await self.recorder.close(open_part, "error")
            return
        output = self.scrubber().scrub(result.output)
        if len(output) > MAX_TOOL_OUTPUT_CHARS:
            output = output[:MAX_TOOL_OUTPUT_CHARS] + f"\n[output cut at {MAX_TOOL_OUTPUT_CHARS} characters]"
        data.update({"output": output, "title": result.title, "result": result.data, "finished": now_ms()})
        await self.recorder.close(open_part, "done")

    def _context(self, asker: Asker, open_part: OpenPart) -> ToolContext:
        sessionid, root = asker.sessionid, asker.root

        async def ask(text: str, options: list[str]) -> str:
            return await self.gate.questions.question(sessionid, text, options)

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
                raise ToolError(f"Denied: {record['reason']}")

        def start_job(command: str) -> dict:
            return self.jobs.start(sessionid, command, root).view()

        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def journal(entries: list[dict]) -> None:
            # From the tool's worker thread: stored before the change is made (crash recovery).
            if threading.get_ident() == loop_thread:
                raise RuntimeError("the journal is written from a worker thread, not the event loop")

            async def record() -> None:
                open_part.data["journal"] = open_part.data.get("journal", []) + entries
                await self.recorder.update(open_part, "running")
            try:
                asyncio.run_coroutine_threadsafe(record(), loop).result(JOURNAL_TIMEOUT_S)
            except Exception as exc:
                raise ToolError(f"nothing was changed: the journal of the change could not be stored ({exc})") from None

        open_part.scrub = self.scrubber().stream()
        return ToolContext(root=root, sessionid=sessionid,
                           emit=lambda text: self.recorder.append(open_part, open_part.scrub.feed(text)),
                           ask=ask, set_todos=set_todos, permit=permit, journal=journal,
                           start_job=start_job if self.jobs is not None else None)
