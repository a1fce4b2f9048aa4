"""The mcp 2.x SDK as a client of Totem: run by tests/test_mcp_sdk.py with the python of the
second virtual environment (`make test` builds it from requirements-mcp2.txt; mcp 1.x and 2.x
cannot share one environment). Stdlib and mcp only: Totem and its tests are not importable here.

    python sdk2_client.py '{"url": ..., "headers": {...}, "projectid": ..., "modelref": ...}'

connects with the SDK's default `Client(...)` (mode "auto": the `server/discover` probe first,
then the fallback to `initialize`) over its Streamable HTTP transport, whose HTTP client sends
`headers` (`Authorization: Bearer <token>`, say) on every request, runs scenario.py when a project is given, and prints one
JSON object: the SDK version, what the handshake negotiated, the HTTP exchanges (`wire`) and the
scenario's record, or the error that stopped the connection ({"connected": false, "error"}).
"""

from __future__ import annotations

import asyncio
import json
import sys
from importlib.metadata import version

import httpx2
import scenario  # beside this file (the script's folder is sys.path[0])
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups: anyio task groups wrap the real one."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


async def main(args: dict) -> dict:
    wire: list = []
    out: dict = {"sdk": version("mcp"), "wire": wire}
    async with httpx2.AsyncClient(headers=args.get("headers") or {}, timeout=httpx2.Timeout(10.0),
                                  event_hooks={"response": [scenario.wire_hook(wire)]}) as http:
        try:
            async with Client(streamable_http_client(args["url"], http_client=http)) as client:
                out["connected"] = True
                out["protocolVersion"] = client.protocol_version
                out["serverInfo"] = client.server_info.model_dump(mode="json", exclude_none=True)
                out["instructions"] = client.instructions
                if args.get("projectid"):
                    out["record"] = await scenario.run(client, args["projectid"], args["modelref"])
        except Exception as exc:  # the test reads what stopped the client
            if out.get("connected"):
                raise
            out["connected"] = False
            out["error"] = [f"{type(leaf).__module__}.{type(leaf).__name__}: {leaf}" for leaf in leaves(exc)]
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
