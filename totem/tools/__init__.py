"""The tools of the agent: the registry, and the parsing of a model's tool call (the base class,
its context and errors are in base.py; this package names them too).

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
from collections.abc import Iterable

from totem.schema import check_schema, validate
from totem.security.permissions import CALL, COMMAND, TEXT, ToolKind
from totem.tools.base import (
    MAX_LINE_CHARS,
    SKIPPED_FOLDERS,
    NoSpace,
    OutsideProject,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    cut_line,
    display_path,
    in_skipped_folder,
    resolve_path,
)

# The longest arguments text accepted from a model; a file's content for a write tool rides here.
__all__ = ["MAX_LINE_CHARS", "PERMISSION_SUBJECTS", "SKIPPED_FOLDERS", "NoSpace", "OutsideProject", "Registry", "Tool",
           "ToolContext", "ToolError", "ToolResult", "cut_line", "default_registry", "display_path",
           "in_skipped_folder", "resolve_path", "tool_kinds"]

MAX_ARGUMENTS_CHARS = 10 * 1024 * 1024
# How much of a malformed arguments text is quoted back around the error position.
JSON_ERROR_CONTEXT_CHARS = 30


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
