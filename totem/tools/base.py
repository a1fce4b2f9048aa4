"""What every tool shares: the base class, the context a call runs in, its result and errors, and
the helpers for the paths and lines a tool shows."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from totem.security import boundary
from totem.security.permissions import PATH, ToolKind

# Long lines are cut when shown to the model (read and grep).
MAX_LINE_CHARS = 2000


# Folders that the search tools never enter, and that an explicit search path may not name.
SKIPPED_FOLDERS = frozenset({".git"})


class ToolError(Exception):
    """A failure the model can act on; str(exc) is the message it sees."""


class NoSpace(ToolError):
    """A write refused for want of space (ENOSPC, EDQUOT): nothing was changed, and the run
    ends with the reason (more calls would fail the same way)."""

    def __init__(self, message: str, folder: str):
        super().__init__(message)
        self.folder = folder


class OutsideProject(ToolError):
    """A path of the call leads outside the project: denied in code, before any rule."""


@dataclass(frozen=True)
class ToolContext:
    """What a tool call runs in."""

    root: str  # the project root, already realpath'd
    sessionid: str
    # Set by the agent loop; tools that need them refuse to run without them.
    emit: Callable[[str], None] | None = None  # stream output to the person as it comes
    ask: Callable[[str, list[str]], Awaitable[str]] | None = None  # ask the person; returns the answer
    set_todos: Callable[[list[dict]], Awaitable[None]] | None = None  # replace the session's task list
    # Decide a further subject met while running (fetch: each redirect hop's host). With
    # `always_ask` (a reason such as "resolves to 127.0.0.1"), an allow rule is not enough: the
    # person is asked. Raises ToolError when denied or rejected.
    permit: Callable[..., Awaitable[None]] | None = None
    # Run a command in the background under a confinement (the call's); returns the job.
    start_job: Callable[[str, Any], dict] | None = None
    # Hand a piece of work to a sub-agent (the task tool): runs it as a child session and
    # returns (its final answer, its session id). Raises ToolError.
    delegate: Callable[[str, str, str], Awaitable[tuple[str, str]]] | None = None
    # Called from a worker thread before a change to the project's files: records what the change
    # will leave on disk (files.change_entry), so a restart after a crash knows what landed.
    journal: Callable[[list[dict]], None] | None = None
    # The session's settings for commands (settings.py); None: the tool's own default.
    command_timeout: int | None = None
    output_cap: int | None = None
    # What the call's processes may reach (sandbox.Confinement); None: not confined (a tool
    # that starts no process, or a context made outside a run).
    confinement: Any = None


@dataclass(frozen=True)
class ToolResult:
    """What a tool call returns."""

    output: str  # text for the model (the caller wraps it in an untrusted-data envelope)
    title: str = ""  # short human summary for the UI
    data: dict = field(default_factory=dict)  # structured extras for the UI


class Tool:
    """The base of every tool; each tool module defines one subclass."""

    name: str = ""
    description: str = ""
    schema: dict = {"type": "object", "properties": {}, "additionalProperties": False}
    # What the permission engine reads: the kind of subjects, whether the tool changes things.
    kind: ToolKind = ToolKind(PATH, changes=False)
    # The name its calls are decided and ruled under, when not its own (an MCP server's tools: mcp).
    permission_name: str = ""

    def subjects(self, args: dict, ctx: ToolContext) -> list[str]:
        """The permission subjects: the paths the call touches, relative to the project, with `/`.

        The default covers tools with one optional `path` argument (the project root when it is
        absent, shown as "."). Raises ToolError for a path outside the project.
        """
        absolute = resolve_path(ctx, args.get("path") or ".")
        return [display_path(ctx, absolute)]

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        """Do the work. Raises ToolError with a message for the model."""
        raise NotImplementedError

    def unconfined(self, args: dict) -> bool:
        """Whether the call asks to run its processes outside the sandbox (bash's
        `outside_sandbox`): the permission engine then always asks, never from a rule."""
        return False

    def question_input(self, args: dict) -> dict:
        """What a question about the call shows of it: its arguments."""
        return args

    def preview(self, args: dict, ctx: ToolContext) -> list | None:
        """The changes the call would make (tools.files.Planned), computed by the same code as
        `run` with nothing written, for the question that asks before it; None for a tool that
        shows none. Blocks. Raises ToolError when the call would fail."""
        return None

    def spec(self) -> dict | None:
        """This tool in the OpenAI `tools` array (None: not declared now, though callable)."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.schema}}


def resolve_path(ctx: ToolContext, path: str, resolve=boundary.resolve_inside) -> str:
    """The absolute, link-free path inside the project (through `resolve`, a function of the
    boundary). Raises OutsideProject when it leads outside, ToolError for other refusals."""
    try:
        return resolve(ctx.root, path)
    except boundary.OutsideError as exc:
        raise OutsideProject(str(exc)) from None
    except boundary.BoundaryError as exc:
        raise ToolError(str(exc)) from None


def display_path(ctx: ToolContext, absolute: str) -> str:
    """A path as the model and the permission rules see it: relative, with `/`; "." for the root."""
    return boundary.relative_path(ctx.root, absolute) or "."


def in_skipped_folder(relative: str) -> bool:
    """Whether a project-relative path is, or is inside, a folder the search tools never enter."""
    return any(part in SKIPPED_FOLDERS for part in relative.split("/"))


def cut_line(text: str) -> str:
    """A line as shown to the model: cut at MAX_LINE_CHARS, with a marker saying how long it was."""
    if len(text) <= MAX_LINE_CHARS:
        return text
    return f"{text[:MAX_LINE_CHARS]}… [line cut: {len(text)} chars]"
