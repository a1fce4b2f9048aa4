"""The first model request with a 100-tool MCP server attached: how much of it the tools take.

A small stdio MCP server (stdlib only, started by Totem's own client through the runner) offers
100 tools with descriptions and schemas the size FastMCP gives; Totem declares them the way a
run does (above LEAN_ABOVE_TOOLS only mcp_schema, listing them by name and short description),
beside the built-in tools. The figures
are the bytes of the `tools` array and of the first request (system prompt, one user message,
all tools), with the figure of declaring every tool whole for comparison.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from totem.agent.context import estimated_tokens, load_prompt
from totem.mcp.client import McpClient
from totem.mcp.definitions import ServerDefinition
from totem.mcp.tools import McpTool, declared_tools
from totem.tools import default_registry

TOOLS = 100
SERVER = r'''
import json, sys
TOOLS = [{"name": f"tool_{i:03d}", "description": f"Tool number {i} searches the records of table {i} by a query "
          "and returns the matching rows, newest first, at most `limit` of them. " * 3,
          "inputSchema": {"type": "object", "title": "manyArguments", "required": ["query"], "properties": {
              "query": {"type": "string", "title": "Query"},
              "limit": {"type": "integer", "title": "Limit", "default": 10}}}}
         for i in range(COUNT)]
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    if message["method"] == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "b", "version": "1"}}
    else:
        result = {"tools": TOOLS}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
'''


async def measure() -> dict:
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "server.py")
        with open(script, "w") as handle:
            handle.write(SERVER.replace("COUNT", str(TOOLS)))
        client = McpClient(ServerDefinition("bench", ".mcp.json", "stdio", command=sys.executable, args=(script,)))
        await client.start(folder)
        try:
            raw = await client.list_tools()
        finally:
            await client.close()
    tools = [McpTool(client, item) for item in raw]
    builtin = default_registry().specs()
    lean = builtin + [spec for tool in declared_tools(tools) if (spec := tool.spec()) is not None]
    for tool in tools:
        tool.lean = False
    whole = builtin + [spec for tool in tools if (spec := tool.spec()) is not None]
    messages = [{"role": "system", "content": load_prompt("system.txt")}, {"role": "user", "content": "Hello"}]
    return {"lean": lean, "whole": whole, "builtin": builtin, "messages": messages}


def main() -> list[tuple]:
    found = asyncio.run(measure())
    size = lambda value: len(json.dumps(value))  # noqa: E731
    request = lambda tools: size({"messages": found["messages"], "tools": tools})  # noqa: E731
    return [
        ("mcp: first request, built-in tools only", request(found["builtin"]), "bytes", None, None),
        (f"mcp: first request with a {TOOLS}-tool server (lean)", request(found["lean"]), "bytes", None, None),
        ("mcp: same, in tokens (estimated)", estimated_tokens(found["messages"], found["lean"]), "tokens",
         None, None),
        ("mcp: same with every schema declared whole", request(found["whole"]), "bytes", None, None),
    ]


if __name__ == "__main__":
    for row in main():
        print(row)
