"""The tools of a project's MCP servers as tools of the agent: `mcp__<server>__<tool>`.

Everything a server says about its tools is untrusted: names are reduced to the characters a
model's function name may hold, descriptions and every text of a schema lose their control and
invisible characters and are cut to a length, a schema that is not an object schema becomes an
open one. A call passes the permission engine as the tool `mcp` with the subject `server/tool`
(so a rule can allow one tool of one server); its result becomes text for the model (the caller
scrubs it and wraps it as untrusted data). When a session's servers offer many tools, each is
listed by name and short description in the declaration of `mcp_schema` only, which gives a
tool's full description and parameters; from then on that tool is declared whole.

Must not: start servers (servers.py does), decide permissions, or let a server's text reach the
model anywhere but in a tool's declaration or result.
"""

from __future__ import annotations

import json
import re
import unicodedata

from totem.agent.calls import MAX_TOOL_OUTPUT_CHARS
from totem.mcp.client import McpClient, McpError
from totem.security.permissions import CALL, TEXT, ToolKind
from totem.tools import Tool, ToolContext, ToolError, ToolResult

MAX_NAME_CHARS = 64  # OpenAI function names: ^[a-zA-Z0-9_-]{1,64}$
MAX_DESCRIPTION_CHARS = 1024
SHORT_DESCRIPTION_CHARS = 60
MAX_SCHEMA_CHARS = 16 * 1024
MAX_SCHEMA_DEPTH = 12
# Above either figure a session's MCP tools are declared lean (names and short descriptions).
LEAN_ABOVE_TOOLS = 16
LEAN_ABOVE_CHARS = 12_000
OPEN_SCHEMA = {"type": "object"}
MAX_SCHEMA_NAMES = 20  # of one mcp_schema call
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")


def clean_text(text: object, limit: int) -> str:
    """A server's text without control or invisible characters (format characters such as
    zero-width spaces and bidirectional overrides, private-use and unassigned ones), with runs of
    white space made single, cut to `limit` characters."""
    if not isinstance(text, str):
        return ""
    kept = []
    for ch in text:
        category = unicodedata.category(ch)
        if ch in "\n\t" or category[0] == "Z":
            kept.append(" ")
        elif category not in ("Cc", "Cf", "Co", "Cn", "Cs"):
            kept.append(ch)
    cleaned = " ".join("".join(kept).split())
    return cleaned if len(cleaned) <= limit else cleaned[:limit - 1] + "…"


def clean_schema(schema: object, depth: int = 0) -> object:
    """A copy of a JSON Schema with every text cleaned; None parts dropped."""
    if depth > MAX_SCHEMA_DEPTH:
        return {}
    if isinstance(schema, dict):
        return {clean_text(key, 128): clean_schema(value, depth + 1) for key, value in schema.items()
                if isinstance(key, str)}
    if isinstance(schema, list):
        return [clean_schema(item, depth + 1) for item in schema[:256]]
    if isinstance(schema, str):
        return clean_text(schema, MAX_DESCRIPTION_CHARS)
    if isinstance(schema, bool | int | float) or schema is None:
        return schema
    return None


def input_schema(raw: object) -> dict:
    """The parameters to declare: the server's object schema, cleaned, or an open object."""
    if not isinstance(raw, dict) or raw.get("type", "object") != "object":
        return dict(OPEN_SCHEMA)
    schema = clean_schema(raw)
    assert isinstance(schema, dict)
    if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
        return dict(OPEN_SCHEMA)
    schema["type"] = "object"
    return schema


def tool_name(server: str, name: str) -> str:
    return f"mcp__{server}__{_UNSAFE_NAME.sub('_', name)}"


class McpTool(Tool):
    """One tool of a running MCP server."""

    kind = ToolKind(CALL, changes=True)
    permission_name = "mcp"
    # The server checks the arguments against its own schema (and says what is wrong as a
    # result the model reads); the registry checks only that they are an object.
    schema = {"type": "object"}

    def __init__(self, client: McpClient, raw: dict, call_timeout_s: float | None = None):
        self.client = client
        self.server = client.name
        self.remote_name = str(raw.get("name"))
        self.name = tool_name(self.server, self.remote_name)
        self.description = clean_text(raw.get("description"), MAX_DESCRIPTION_CHARS)
        self.parameters = input_schema(raw.get("inputSchema"))
        self.call_timeout_s = call_timeout_s
        self.lean = False  # among many: declared by name and short description...
        self.described = False  # ...until the model has asked for its schema (mcp_schema)

    def spec(self) -> dict | None:
        """Its declaration; None while it is among many and the model has not asked for its
        schema (mcp_schema lists it by name and short description meanwhile)."""
        if self.lean and not self.described:
            return None
        return {"type": "function", "function": {
            "name": self.name, "description": f"[MCP server {self.server}] {self.description}",
            "parameters": self.parameters}}

    def listing(self) -> str:
        """Its line in mcp_schema's description: the name and a short description."""
        return f"{self.name}: {clean_text(self.description, SHORT_DESCRIPTION_CHARS)}"

    def subjects(self, args: dict, ctx: ToolContext) -> list[str]:
        return [f"{self.server}/{self.remote_name}"]

    def question_input(self, args: dict) -> dict:
        return {"server": self.server, "tool": self.remote_name, "arguments": args}

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        try:
            kwargs = {"timeout_s": self.call_timeout_s} if self.call_timeout_s else {}
            result = await self.client.call_tool(self.remote_name, args, **kwargs)
        except McpError as exc:
            raise ToolError(f"{exc}; the call may be tried again later or done another way") from None
        text = result_text(result)
        if result.get("isError") is True:
            if len(text) > MAX_TOOL_OUTPUT_CHARS:  # as a result's output is cut (agent/calls.py)
                text = text[:MAX_TOOL_OUTPUT_CHARS] + f"\n[output cut at {MAX_TOOL_OUTPUT_CHARS} characters]"
            raise ToolError(f"{self.server}/{self.remote_name} failed: {text}")
        return ToolResult(text, title=f"{self.server}/{self.remote_name}",
                          data={"server": self.server, "tool": self.remote_name})


class McpSchemaTool(Tool):
    """Gives the full parameters of MCP tools declared lean, and declares them whole from then on."""

    name = "mcp_schema"
    description = ("Declares MCP tools of the project's servers that are listed here by name only: give "
                   "their names, get their descriptions and parameters, then call them. The tools:")
    schema = {"type": "object", "properties": {"names": {
        "type": "array", "items": {"type": "string"},
        "description": "the tool names, as declared (mcp__server__tool)"}},
        "required": ["names"], "additionalProperties": False}
    kind = ToolKind(TEXT, changes=False)

    def __init__(self, tools: dict[str, McpTool]):
        self.tools = tools

    def spec(self) -> dict:
        listed = "\n".join(tool.listing() for tool in self.tools.values() if not tool.described)
        return {"type": "function", "function": {
            "name": self.name, "description": f"{self.description}\n{listed}", "parameters": self.schema}}

    def subjects(self, args: dict, ctx: ToolContext) -> list[str]:
        return list(args["names"])

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        if not 1 <= len(args["names"]) <= MAX_SCHEMA_NAMES:
            raise ToolError(f"give 1 to {MAX_SCHEMA_NAMES} tool names")
        found, unknown = [], []
        for name in args["names"]:
            tool = self.tools.get(name)
            if tool is None:
                unknown.append(name)
                continue
            tool.described = True
            found.append({"name": name, "description": tool.description, "parameters": tool.parameters})
        if not found:
            raise ToolError(f"no MCP tool is named {', '.join(unknown)}")
        note = f"\nNot MCP tools: {', '.join(unknown)}" if unknown else ""
        return ToolResult(json.dumps(found, ensure_ascii=False, indent=1) + note,
                          title=", ".join(item["name"] for item in found))


def declared_tools(tools: list[McpTool]) -> list[Tool]:
    """The tools of a run's MCP servers: each declared whole, or when there are many (or their
    schemas are large) each lean (listed by `mcp_schema`, declared once asked for)."""
    size = sum(len(json.dumps(tool.parameters)) + len(tool.description) for tool in tools)
    if len(tools) <= LEAN_ABOVE_TOOLS and size <= LEAN_ABOVE_CHARS:
        for tool in tools:
            tool.lean = False
        return list(tools)
    for tool in tools:
        tool.lean = True
    return [*tools, McpSchemaTool({tool.name: tool for tool in tools})]


def result_text(result: dict) -> str:
    """A CallToolResult as text: its text blocks, a line for each other block, and the
    structured content when no text says it."""
    lines = []
    content = result.get("content")
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            lines.append(block["text"])
        elif kind in ("image", "audio"):
            data = block.get("data") or ""
            size = getattr(data, "size", len(data)) * 3 // 4  # a long one was cut as it came (skimmer.py)
            lines.append(f"[{kind} {clean_text(block.get('mimeType'), 60)}, about {size} bytes, not shown]")
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            resource = block["resource"]
            if isinstance(resource.get("text"), str):
                lines.append(f"[resource {clean_text(resource.get('uri'), 300)}]\n{resource['text']}")
            else:
                lines.append(f"[resource {clean_text(resource.get('uri'), 300)}, binary, not shown]")
        elif kind == "resource_link":
            lines.append(f"[link {clean_text(block.get('uri'), 300)} {clean_text(block.get('name'), 100)}]")
    structured = result.get("structuredContent")
    if structured is not None and not lines:
        lines.append(json.dumps(structured, ensure_ascii=False))
    return "\n".join(lines) if lines else "(no content)"
