"""The todo tool: the session's task list, which the person sees beside the conversation."""

from __future__ import annotations

from totem.security.permissions import TEXT, ToolKind
from totem.tools.base import Tool, ToolContext, ToolError, ToolResult

MAX_TODO_ITEMS = 50
MAX_TODO_TEXT_CHARS = 500
TODO_STATUSES = ("pending", "in_progress", "done")
STATUS_MARKS = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]"}


class TodoTool(Tool):
    name = "todo"
    kind = ToolKind(TEXT, changes=False)
    description = "Set the session's task list (the whole list each time) to show progress."
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "maxItems": MAX_TODO_ITEMS, "items": {
            "type": "object",
            "properties": {"text": {"type": "string", "minLength": 1, "maxLength": MAX_TODO_TEXT_CHARS},
                           "status": {"type": "string", "enum": list(TODO_STATUSES)}},
            "required": ["text", "status"], "additionalProperties": False}}},
        "required": ["items"],
        "additionalProperties": False,
    }

    def subjects(self, args: dict, ctx: ToolContext) -> list[str]:
        return ["."]

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        if ctx.set_todos is None:
            raise ToolError("the task list is not available in this run")
        items = [{"text": item["text"].strip(), "status": item["status"]} for item in args["items"]]
        await ctx.set_todos(items)
        done = sum(item["status"] == "done" for item in items)
        lines = [f"{STATUS_MARKS[item['status']]} {item['text']}" for item in items]
        return ToolResult("\n".join(lines) or "(the task list is empty)", f"{done}/{len(items)} done",
                          {"items": len(items), "done": done})
