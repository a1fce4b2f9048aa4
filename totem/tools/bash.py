"""The bash tool: one shell command line in the project folder, through the runner.

The line runs with `bash -c` (or `/bin/sh -c` where bash is missing: runner.shell_argv) in the
project root, with the runner's minimal environment, timeout, output cap and process-group
kill. Its output streams to the person through `ctx.emit` as it comes; the model gets the kept
output and a last line with the exit code (or the timeout). A non-zero exit is a result, not an
error: the model needs the output to fix what failed. Only a command that cannot start is a
ToolError.

The line runs inside the sandbox of `ctx.confinement` (sandbox.py: what it may write and read,
the network, the process limit), and what the sandbox refused is named under the output. With
`outside_sandbox` the call runs unconfined: the permission engine then always asks the person,
never from a rule, never "always", and never in a scheduled run, a sub-agent or Plan mode.

Must not: split the command line or judge it (permissions does, from the whole line that
`subjects()` returns), run anywhere but the project root, decide what the sandbox allows, or
scrub secrets (the caller does).
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

from totem.process import runner
from totem.security.permissions import COMMAND, ToolKind
from totem.tools.base import Tool, ToolContext, ToolError, ToolResult

MAX_TIMEOUT_S = 600
MAX_COMMAND_CHARS = 100_000
MAX_DESCRIPTION_CHARS = 200
MAX_TITLE_CHARS = 80
# What the model sees: the head and the tail of the output, under the loop's own cut.
OUTPUT_CAP_BYTES = 30_000
# Live output stops after this much; the person still gets the kept output in the result.
MAX_STREAM_CHARS = 1_000_000
STREAM_STOPPED_NOTE = "\n[live output stops here; the command goes on]\n"
SANDBOX_HINT = ("[if the command must do what the sandbox refused, call bash again with outside_sandbox: true; "
                "the person is asked]")


class BashTool(Tool):
    name = "bash"
    description = "Run a shell command in the project folder; returns its output and exit code."
    schema = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "maxLength": MAX_COMMAND_CHARS,
                        "description": "The command line, run with bash -c"},
            "timeout": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S,
                        "description": f"Seconds (default {runner.DEFAULT_TIMEOUT_S:g})"},
            "description": {"type": "string", "maxLength": MAX_DESCRIPTION_CHARS,
                            "description": "What it does, in a few words, for the person"},
            "background": {"type": "boolean", "description": "Run as a job (servers, watchers)"},
            "outside_sandbox": {"type": "boolean",
                                "description": "Only after the sandbox refused what it must do; always asks"},
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    kind = ToolKind(COMMAND, changes=True)

    def subjects(self, args: dict, ctx: ToolContext) -> list[str]:
        """The whole command line: the permission engine splits and judges it."""
        return [args["command"]]

    def unconfined(self, args: dict) -> bool:
        return bool(args.get("outside_sandbox"))

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        command = args["command"]
        if args.get("background"):
            return self._start_job(command, args, ctx)
        timeout_s = int(args.get("timeout") or ctx.command_timeout or runner.DEFAULT_TIMEOUT_S)
        confinement = ctx.confinement
        try:
            result = await runner.run_command(
                command, cwd=ctx.root, timeout_s=timeout_s, output_cap_bytes=ctx.output_cap or OUTPUT_CAP_BYTES,
                on_output=_Stream(ctx.emit) if ctx.emit else None,
                confine=confinement.launch if confinement is not None else None)
        except runner.CommandError as exc:
            raise ToolError(str(exc)) from None
        notes = confinement.explain(result.output) if confinement is not None else []
        data: dict = {"exit_code": result.exit_code, "timed_out": result.timed_out,
                      "duration_ms": round(result.duration_s * 1000), "cut_bytes": result.cut_bytes}
        if notes:
            data["sandbox"] = notes
        if confinement is not None and confinement.policy is None and args.get("outside_sandbox"):
            data["outside_sandbox"] = True
        return ToolResult(_report(result, timeout_s, notes), title=_title(args), data=data)


    def _start_job(self, command: str, args: dict, ctx: ToolContext) -> ToolResult:
        if ctx.start_job is None:
            raise ToolError("background jobs are not available in this run")
        try:
            job = ctx.start_job(command, ctx.confinement)
        except Exception as exc:  # JobError: too many jobs
            raise ToolError(str(exc)) from None
        return ToolResult(f"Started job {job['id']} in the background. The person sees its output and can stop "
                          "it; it is stopped when the session ends.", title=_title(args),
                          data={"job": job["id"], "background": True})


class _Stream:
    """Passes output to `emit` until MAX_STREAM_CHARS, then says once that it stopped."""

    def __init__(self, emit):
        self.emit = emit
        self.sent = 0

    def __call__(self, text: str) -> None:
        if self.sent >= MAX_STREAM_CHARS:
            return
        room = MAX_STREAM_CHARS - self.sent
        self.sent += len(text)
        self.emit(text[:room])
        if self.sent >= MAX_STREAM_CHARS:
            self.emit(STREAM_STOPPED_NOTE)


def _report(result: runner.CommandResult, timeout_s: int, notes: Sequence[str] = ()) -> str:
    """The output, what the sandbox refused, and the lines that say how the command ended."""
    lines = [result.output.removesuffix("\n") if result.output else "(no output)", *notes]
    if notes:
        lines.append(SANDBOX_HINT)
    if result.timed_out:
        lines.append(f"[timed out after {timeout_s} s; the process group was killed]")
        return "\n".join(lines)
    code = result.exit_code
    if code is None:
        lines.append("[the command did not end after SIGKILL; exit code unknown]")
    elif code < 0:
        lines.append(f"[killed by signal {_signal_name(-code)}]")
    else:
        lines.append(f"[exit code {code}]")
    if result.killed:
        lines.append("[processes it left running in the background were stopped]")
    return "\n".join(lines)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _title(args: dict) -> str:
    text = " ".join((args.get("description") or "").split()) or " ".join(args["command"].split())
    return text if len(text) <= MAX_TITLE_CHARS else text[:MAX_TITLE_CHARS - 1] + "…"
