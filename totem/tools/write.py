"""The write tool: create a file or replace its whole content.

The content is written as given (its newlines and encoding are the model's choice), atomically,
keeping the permission bits of a file it replaces; missing folders are created. `.env` files
are written like any other: the permission layer asks before this tool runs.

Must not: decide what is inside the project (boundary does) or whether writing is allowed
(permissions does); trust `subjects()`: `run` resolves and checks the target again.
"""

from __future__ import annotations

import asyncio

from totem.security.permissions import PATH, ToolKind
from totem.tools import files
from totem.tools.base import Tool, ToolContext, ToolError, ToolResult, display_path


class WriteTool(Tool):
    name = "write"
    description = "Create a file or replace all of its content."
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "File path"},
            "content": {"type": "string", "description": "The whole new content"},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    kind = ToolKind(PATH, changes=True, edits=True)

    def subjects(self, args: dict, ctx: ToolContext) -> list[str]:
        """The file written, relative to the project. Raises ToolError when it is refused."""
        return [files.target_subject(ctx, args["path"])]

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        content = args["content"]
        return await asyncio.to_thread(_write, ctx, args["path"], content)


    def preview(self, args: dict, ctx: ToolContext) -> list[files.Planned]:
        absolute = files.resolve_target(ctx, args["path"])
        shown = display_path(ctx, absolute)
        data = files.encode_new(args["content"], shown)
        existing = files.read_existing(ctx.root, absolute, shown)
        return [files.Planned(shown, existing.data if existing else None, data)]


def _write(ctx: ToolContext, path: str, content: str) -> ToolResult:
    absolute = files.resolve_target(ctx, path)
    shown = display_path(ctx, absolute)
    data = files.encode_new(content, shown)
    files.check_parent(ctx.root, absolute, shown)
    created_folders: list[str] = []
    temp = files.new_temp_name()
    files.journal(ctx, [files.change_entry(shown, data, temp)])
    try:
        created = files.write_atomic(ctx.root, absolute, data, shown, created=created_folders, temp=temp)
    except ToolError:
        files.remove_folders(created_folders)
        raise
    lines = files.count_lines(content)
    verb = "created" if created else "replaced"
    summary = f"{verb} {shown} ({lines} line{'' if lines == 1 else 's'}, {len(data)} bytes)"
    return ToolResult(summary, title=f"{shown} ({verb})",
                      data={"path": shown, "created": created, "bytes": len(data)})
