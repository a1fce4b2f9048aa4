"""The MCP interop scenario, the same for every SDK version: stdlib only, so that the mcp 1.x
test (in .venv) and the mcp 2.x client script (in the second virtual environment) both import it.

`client` is the SDK's own object (1.x `ClientSession`, 2.x `Client`): both have `list_tools()`
and `call_tool(name, arguments)` returning pydantic results, dumped here to their wire form
(camelCase keys) so the test checks one shape. `wire` is the list that the client's HTTP event
hook fills: (HTTP method, JSON-RPC method, status) of each request the SDK made.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

NOTES = "notes.txt"
NOTES_TEXT = "written through MCP\n"
FIRST_PROMPT = "Write the notes"
SECOND_PROMPT = "Think for a long time"
WAIT_S = 10.0


async def tool(client, name: str, arguments: dict) -> dict:
    """A tools/call, as the JSON the server sent (`content`, `isError`)."""
    result = await client.call_tool(name, arguments)
    return result.model_dump(mode="json", by_alias=True, exclude_unset=True)


async def rpc_error(client, name: str, arguments: dict) -> dict:
    """A tools/call that the server must refuse with a JSON-RPC error: {code, message}."""
    return await refused(tool(client, name, arguments), name)


async def refused(request, what: str) -> dict:
    """The JSON-RPC error {code, message} that the server answered to `request` (a coroutine)."""
    try:
        result = await request
    except Exception as exc:  # McpError (SDK 1.x) or MCPError (2.x): both carry `error`
        error = getattr(exc, "error", None)
        if error is None:
            raise
        return {"code": error.code, "message": error.message}
    raise AssertionError(f"{what}: no JSON-RPC error but {result}")


async def data(client, name: str, arguments: dict) -> Any:
    """A tools/call that must succeed: the JSON inside its one text block."""
    result = await tool(client, name, arguments)
    if result.get("isError") or len(result["content"]) != 1 or result["content"][0]["type"] != "text":
        raise AssertionError(f"{name} {arguments}: {result}")
    return json.loads(result["content"][0]["text"])


async def until_status(client, sessionid: str, *wanted: str) -> dict:
    """Sessions_read until the session has one of the statuses `wanted` (polled: MCP has no
    event stream here)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        session = await data(client, "Sessions_read", {"id": sessionid})
        if session["status"] in wanted:
            return session
        if time.monotonic() > deadline:
            raise AssertionError(f"session {sessionid} is still {session['status']}, not {' or '.join(wanted)}")
        await asyncio.sleep(0.02)


async def until_messages(client, sessionid: str, count: int) -> dict:
    """Sessions_messages until the session has `count` messages."""
    deadline = time.monotonic() + WAIT_S
    while True:
        page = await data(client, "Sessions_messages", {"id": sessionid})
        if len(page["messages"]) >= count:
            return page
        if time.monotonic() > deadline:
            raise AssertionError(f"session {sessionid} has {len(page['messages'])} messages, not {count}")
        await asyncio.sleep(0.02)


async def run(client, projectid: str, modelref: str) -> dict:
    """The scenario; the model is scripted by the test: the first prompt writes NOTES and
    answers, the second one stalls until it is aborted."""
    record: dict[str, Any] = {}
    listed = (await client.list_tools()).model_dump(mode="json", by_alias=True, exclude_unset=True)
    record["tools"] = listed["tools"]
    record["next_cursor"] = listed.get("nextCursor")
    record["projects"] = await data(client, "Projects_list", {})
    created = await data(client, "Sessions_create", {"projectid": projectid, "name": "Over MCP"})
    record["created"] = created
    sessionid = created["id"]
    record["listed"] = await data(client, "Sessions_list", {"projectid": projectid})
    record["prompted"] = await data(client, "Sessions_prompt", {"id": sessionid, "text": FIRST_PROMPT,
                                                                  "model": modelref, "mode": "build"})
    # The run sets "running" once its task starts: its messages first, so that "idle" is its end.
    await until_messages(client, sessionid, 3)
    record["idle"] = await until_status(client, sessionid, "idle")
    record["messages"] = await data(client, "Sessions_messages", {"id": sessionid})
    record["diff"] = await data(client, "Sessions_diff", {"id": sessionid})
    record["prompted_again"] = await data(client, "Sessions_prompt", {"id": sessionid, "text": SECOND_PROMPT})
    record["streaming"] = await until_messages(client, sessionid, 5)  # the model's answer has begun
    record["running"] = await until_status(client, sessionid, "running")
    record["abort"] = await tool(client, "Sessions_abort", {"id": sessionid})
    record["stopped"] = await until_status(client, sessionid, "aborted", "idle")
    record["abort_idle"] = await tool(client, "Sessions_abort", {"id": sessionid})
    record["read_missing"] = await tool(client, "Sessions_read", {"id": "nosuchsession"})
    record["prompt_without_text"] = await tool(client, "Sessions_prompt", {"id": sessionid})
    record["unknown_tool"] = await rpc_error(client, "Sessions_delete", {"id": sessionid})
    record["invalid_arguments"] = await tool(client, "Sessions_read", {"id": 5})
    record["unknown_method"] = await refused(client.list_resources(), "resources/list")
    return record


def wire_hook(wire: list):
    """An httpx / httpx2 response event hook that notes each exchange in `wire`."""
    async def hook(response) -> None:
        request = response.request
        method = None
        if request.method == "POST":
            try:
                method = json.loads(request.content).get("method")
            except (ValueError, AttributeError):
                method = "?"
        wire.append([request.method, method, response.status_code])
    return hook
