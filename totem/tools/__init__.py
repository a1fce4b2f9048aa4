"""The tools of the agent: the base class, the registry, and the parsing of a model's tool call.

Each tool lives in its own module and declares its name, a short description, the JSON Schema of
its arguments, whether it only reads, its permission subjects and `run`. The registry turns the
tools into the OpenAI `tools` array and turns a model's call (a name and a JSON text) into a
tool and validated arguments.

Must not: decide permissions (`permissions.py` does, from `subjects()`), decide whether a path
is inside the project (`boundary.py` does; tools only call it), wrap output for the model
context, or scrub secrets from output (the caller does both).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from totem.schema import check_schema, validate
from totem.security import boundary
from totem.security.permissions import CALL, COMMAND, PATH, TEXT, ToolKind

# The longest arguments text accepted from a model; a file's content for a write tool rides here.
MAX_ARGUMENTS_CHARS = 10 * 1024 * 1024
# How much of a malformed arguments text is quoted back around the error position.
JSON_ERROR_CONTEXT_CHARS = 30
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


class Registry:
    """The tools a run may call, by name."""

    def __init__(self, tools: Iterable[Tool]):
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if not tool.name or tool.name in self._tools:
                raise ValueError(f"tool name {tool.name!r} is empty or used twice")
            check_schema(tool.schema, tool.name)
            self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def with_tools(self, tools: Iterable[Tool]) -> Registry:
        """This registry and `tools` (a run's MCP tools). Raises ValueError for a name used twice."""
        return Registry([*self._tools.values(), *tools])

    def kinds(self) -> dict[str, ToolKind]:
        """Every name a permission rule may have, with its declaration: the tools, then the
        subjects decided without being a tool of the model (PERMISSION_SUBJECTS)."""
        return {name: tool.kind for name, tool in self._tools.items()} | PERMISSION_SUBJECTS

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[dict]:
        """The OpenAI `tools` array, in registration order."""
        return [spec for tool in self._tools.values() if (spec := tool.spec()) is not None]

    def parse_arguments(self, name: str, arguments: str | dict | None) -> tuple[Tool, dict]:
        """The tool called `name` and its validated arguments.

        `arguments` is the JSON text the model sent; empty text means no arguments, and a dict
        (some providers decode it already) is taken as is. An optional argument sent as null
        counts as absent (OpenAI strict mode sends null for optional fields). Raises ToolError
        for an unknown tool (listing the known ones), malformed JSON (saying where), arguments
        that are not an object, or a schema violation (naming each field and its rule).
        """
        tool = self._tools.get(name)
        if tool is None:
            raise ToolError(f"unknown tool {name!r}; the tools are: {', '.join(self._tools)}")
        args = _decode_arguments(name, arguments)
        if not isinstance(args, dict):
            raise ToolError(f"the arguments of {name} must be a JSON object, not {_json_kind(args)}")
        required = set(tool.schema.get("required", ()))
        args = {key: value for key, value in args.items() if value is not None or key in required}
        problems = validate(tool.schema, args)
        if problems:
            raise ToolError(f"invalid arguments for {name}: " + "; ".join(problems))
        return tool, args


# Subjects that pass the permission engine without being a tool of the model: each call of an
# MCP server's tool (`server/tool`), the start of a project's MCP server, stopping a job.
PERMISSION_SUBJECTS = {
    "mcp": ToolKind(CALL, changes=True),
    "mcp-start": ToolKind(TEXT, changes=True),
    "jobstop": ToolKind(TEXT, changes=True),
    # The preset `allow sandboxed *`: bash commands inside the sandbox with the network off.
    "sandboxed": ToolKind(COMMAND, changes=True),
    # Declared to a run only beside an MCP server's many tools (mcp/tools.py): gives their schemas.
    "mcp_schema": ToolKind(TEXT, changes=False),
}


def tool_kinds() -> dict[str, ToolKind]:
    """The names permission rules may have: every built-in tool's and PERMISSION_SUBJECTS."""
    return default_registry().kinds()


def default_registry() -> Registry:
    """Every built-in tool, read-only ones first."""
    from totem.tools.ask import AskTool
    from totem.tools.bash import BashTool
    from totem.tools.edit import EditTool
    from totem.tools.fetch import FetchTool
    from totem.tools.glob import GlobTool
    from totem.tools.grep import GrepTool
    from totem.tools.patch import PatchTool
    from totem.tools.read import ReadTool
    from totem.tools.skill import SkillTool
    from totem.tools.task import TaskTool
    from totem.tools.todo import TodoTool
    from totem.tools.write import WriteTool

    return Registry([ReadTool(), GlobTool(), GrepTool(), SkillTool(), TodoTool(), AskTool(),
                     TaskTool(), FetchTool(), WriteTool(), EditTool(), PatchTool(), BashTool()])


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


def _decode_arguments(name: str, arguments):
    if arguments is None or isinstance(arguments, dict):
        return arguments or {}
    if not isinstance(arguments, str):
        raise ToolError(f"the arguments of {name} must be JSON text")
    if len(arguments) > MAX_ARGUMENTS_CHARS:
        raise ToolError(f"the arguments of {name} are longer than {MAX_ARGUMENTS_CHARS} characters")
    if not arguments.strip():
        return {}
    try:
        return json.loads(arguments, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        start = max(exc.pos - JSON_ERROR_CONTEXT_CHARS, 0)
        near = arguments[start:exc.pos + JSON_ERROR_CONTEXT_CHARS]
        raise ToolError(f"the arguments of {name} are not valid JSON: {exc.msg} at line "
                        f"{exc.lineno}, column {exc.colno} (near {near!r})") from None
    except (ValueError, RecursionError) as exc:  # NaN, a huge integer, nesting too deep
        raise ToolError(f"the arguments of {name} are not valid JSON: {exc}") from None


def _refuse_constant(word: str):
    raise ValueError(f"{word} is not a JSON value")


def _json_kind(value) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true or false"
    if value is None:
        return "null"
    return "a number"
