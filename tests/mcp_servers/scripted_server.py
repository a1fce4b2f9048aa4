"""A stdio MCP server of the standard library alone, with the quirks real servers have, for
tests/test_mcp_client.py: a banner on stdout before any message, keys in alphabetical order and an
empty server version (2.x SDK servers), a protocol revision chosen by the VERSION variable, its own
`ping` to the client before it answers `tools/list`, tools over two pages (nextCursor),
BEHAVIOUR=garbage answering `tools/list` with a line that is not JSON and then nothing, and the
call of `big` with `{"megabytes": N, "shape": ...}` answering a line of N MB: its id written last
as the TypeScript SDK does ("id-last"), its JSON broken at the end ("broken"), without an id
("no-id"), or a line of N MB that is not JSON and then a small result ("banner").
"""

import json
import os
import sys

VERSION = os.environ.get("VERSION", "2025-06-18")
BEHAVIOUR = os.environ.get("BEHAVIOUR", "")


def send(message):
    sys.stdout.write(json.dumps(message, sort_keys=True) + "\n")
    sys.stdout.flush()


print("scripted server starting (a banner, not JSON)", flush=True)
pending_list = None
for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if method == "initialize":
        send({"id": ident, "jsonrpc": "2.0", "result": {"capabilities": {"tools": {"listChanged": True}},
              "protocolVersion": VERSION, "serverInfo": {"name": "scripted", "version": ""}}})
    elif method == "tools/list":
        if BEHAVIOUR == "garbage":
            print("Traceback: this is not JSON", flush=True)
            continue
        cursor = (message.get("params") or {}).get("cursor")
        if cursor is None:
            pending_list = ident
            send({"id": "from-server-1", "jsonrpc": "2.0", "method": "ping"})
        else:
            send({"id": ident, "jsonrpc": "2.0", "result": {"tools": [
                {"name": "second.page", "inputSchema": {"type": "object"}}]}})
    elif ident == "from-server-1":  # the client answered our ping: now the first page
        send({"id": pending_list, "jsonrpc": "2.0", "result": {"nextCursor": "page2", "tools": [
            {"name": "first", "description": "the first", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call" and message["params"]["name"] == "big":
        arguments = message["params"]["arguments"]
        text = "".join(f"row {n:08d}: \"quoted\" \u00e9t\u00e9\n" for n in range(int(arguments["megabytes"] * 40_000)))
        shape = arguments["shape"]
        if shape == "banner":
            sys.stdout.write("x" * len(text) + "\n")
            send({"id": ident, "jsonrpc": "2.0", "result": {"content": [{"type": "text", "text": "after the banner"}]}})
            continue
        result = json.dumps({"content": [{"type": "text", "text": text}], "isError": False})
        if shape == "broken":
            result = result[:-1] + "]"
        ending = "" if shape == "no-id" else f', "id": {json.dumps(ident)}'
        sys.stdout.write(f'{{"result": {result}, "jsonrpc": "2.0"{ending}}}\n')
        sys.stdout.flush()
    elif method == "tools/call":
        send({"id": ident, "jsonrpc": "2.0", "result": {"content": [
            {"type": "text", "text": "called"}, {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "file:///x", "name": "x"}], "isError": False}})
    elif ident is not None:
        send({"error": {"code": -32601, "message": "Method not found"}, "id": ident, "jsonrpc": "2.0"})
