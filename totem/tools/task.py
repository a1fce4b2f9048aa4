"""task: hand a self-contained piece of work to a sub-agent.

The sub-agent is one of the project's agents (`.totem/agents/*.md`) or the built-in `explore`,
which only reads and searches. It runs as a child session of this one, with the agent's
narrowed tools, through the same permission gate (Plan mode, scheduled runs and auto-accept as
for this run; its questions come to the person here), and its final answer is this tool's result.

Must not: run the sub-agent itself (the agent loop does, through `ctx.delegate`) or decide
which tools it gets.
"""

from __future__ import annotations

from totem.security.permissions import TEXT, ToolKind
from totem.tools.base import Tool, ToolContext, ToolError, ToolResult

MAX_DESCRIPTION_CHARS = 80
MAX_PROMPT_CHARS = 20_000


class TaskTool(Tool):
    name = "task"
    description = "Hand a self-contained task to a sub-agent; returns its final answer"
    schema = {"type": "object", "properties": {
        "agent": {"type": "string", "description": "explore (reads and searches only), or a project agent"},
        "description": {"type": "string", "description": "three to eight words saying what it does"},
        "prompt": {"type": "string", "description": "the whole task: the sub-agent does not see this chat"}},
        "required": ["description", "prompt"], "additionalProperties": False}
    # It changes nothing itself: every call of the sub-agent is decided on its own.
    kind = ToolKind(TEXT, changes=False)

    def subjects(self, args: dict, ctx: ToolContext) -> list[str]:
        return [args.get("agent") or "explore"]

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        if ctx.delegate is None:
            raise ToolError("sub-agents are not available here")
        description = " ".join(args["description"].split())[:MAX_DESCRIPTION_CHARS]
        prompt = args["prompt"].strip()
        if not description or not prompt:
            raise ToolError("give the task a description and a prompt")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise ToolError(f"the prompt is longer than {MAX_PROMPT_CHARS} characters; say it shorter")
        answer, sessionid = await ctx.delegate(args.get("agent") or "explore", description, prompt)
        return ToolResult(answer, title=description, data={"sessionid": sessionid})
