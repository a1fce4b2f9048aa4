"""The ask tool: a question to the person, with options to choose from, answered in the page."""

from __future__ import annotations

from totem.security.permissions import TEXT, ToolKind
from totem.tools.base import Tool, ToolContext, ToolError, ToolResult

MAX_QUESTION_CHARS = 2000
MAX_OPTIONS = 10
MAX_OPTION_CHARS = 200


class AskTool(Tool):
    name = "ask"
    kind = ToolKind(TEXT, changes=False)
    description = "Ask the person a question when you need a decision; offer options when you can."
    schema = {
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1, "maxLength": MAX_QUESTION_CHARS},
            "options": {"type": "array", "maxItems": MAX_OPTIONS,
                        "items": {"type": "string", "minLength": 1, "maxLength": MAX_OPTION_CHARS}},
        },
        "required": ["question"],
        "additionalProperties": False,
    }

    def subjects(self, args: dict, ctx: ToolContext) -> list[str]:
        return ["."]

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        if ctx.ask is None:
            raise ToolError("nobody is here to answer questions; decide on your own and say what you assumed")
        answer = await ctx.ask(args["question"], list(args.get("options") or []))
        return ToolResult(f"The person answered: {answer}", args["question"][:80], {"answer": answer})
