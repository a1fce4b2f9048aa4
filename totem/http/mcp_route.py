"""Totem as an MCP server: `POST /$mcp/`, the Streamable HTTP transport over the session services.

Owns the protocol: JSON-RPC 2.0 messages (one, or a batch under revision 2025-03-26), version
negotiation (2025-03-26, 2025-06-18 and 2025-11-25 echoed, the latest offered otherwise), MCP
sessions (`Mcp-Session-Id` issued by `initialize`, 404 for an unknown or expired one, ended by
`DELETE` or after SESSION_IDLE_S without a request; past MAX_SESSIONS live ones a new
`initialize` gets 503 with Retry-After, and no live session is ever evicted for it),
`ping`, the `server/discover` probe of newer clients answered "method not found" so that they
fall back to `initialize`, and exactly eight tools that call the same services as the REST API:
one for each action marked `mcp`, named by its label (`Sessions_prompt`), whose input schema is
made of the fields of the action's own declaration (api/contract.py) and checked as the API
checks them.
An answer is JSON, or one SSE event when the client accepts only a stream; notifications get
202. Errors as the 2025-11-25 revision says: a tool's failure and arguments that fail its input
schema are `isError` results the model can read; an unknown tool or a malformed `tools/call`
(no name, arguments not an object) is -32602; an invalid request (an id null or not text or an
integer, no `"jsonrpc": "2.0"`, a method not text) is -32600 in an HTTP 400, its id echoed when
it is one (null when it is not); an unknown method is -32601; nothing is ever a 500.

The caller never answers a question, sets auto-accept, widens the mode or makes a rule here,
whatever its credential (the access token or an MCP-only one): a prompt that changes files or
runs a command still asks the person in the Totem screen, and `Sessions_read` shows the
questions that wait.

Must not: expose the agent's tools, permissions, providers, the terminal or settings, or
authenticate (the route checks the caller first: auth.Perimeter.authenticate_mcp).
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from totem.errors import ApiError, Forbidden
from totem.http.api.contract import ID, properties_of
from totem.http.api.sessions import DEFAULT_MESSAGE_PAGE
from totem.http.api.validate import check
from totem.http.httpd import DuplicateKeyError, Response, decode_json
from totem.services.sessions import DEFAULT_SESSION_NAME, DEFAULT_SESSION_PAGE

VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
BATCH_VERSION = "2025-03-26"
PROBE = "server/discover"
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_SESSIONS = 256  # live MCP sessions; one more initialize waits (503) until one ends
SESSION_IDLE_S = 30 * 60.0  # an MCP session without a request this long has ended
SERVER_INFO = {"name": "totem", "version": "0.1.0"}
INSTRUCTIONS = ("Totem is a coding agent. Create a session in a project and prompt it; file changes and "
                "commands are approved by the person in the Totem screen (Sessions_read shows what waits).")
JSON_TYPE = "application/json"
SSE_TYPE = "text/event-stream"

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = (
    -32700, -32600, -32601, -32602, -32603)
SERVER_BUSY = -32000  # JSON-RPC's range for the server's own errors: no room for a new MCP session



@dataclass(frozen=True)
class McpTool:
    name: str
    description: str
    schema: dict
    call: Callable[[Any, dict], Awaitable[Any]]
    read_only: bool


@dataclass(frozen=True)
class Offer:
    """What the route offers of one action: which fields of its input (an id first when it takes
    one), which of them it requires beyond the action's own, and the service call."""

    description: str
    call: Callable[[Any, dict], Awaitable[Any]]
    fields: tuple[str, ...] = ()
    required: tuple[str, ...] = ()


# By action name. A prompt over MCP takes only text, model and mode: never auto-accept.
OFFERS = {
    "projects": Offer("The projects (folders) Totem works in.", lambda s, a: s.projects.list()),
    "sessions": Offer("The sessions of a project, the most recently changed first.",
                      lambda s, a: s.sessions.list(a["projectid"], a.get("limit", DEFAULT_SESSION_PAGE),
                                                   a.get("before")),
                      ("projectid", "limit", "before")),
    "sessions_create": Offer("Create a session in a project.",
                             lambda s, a: s.sessions.create(a["projectid"], a.get("name") or DEFAULT_SESSION_NAME),
                             ("projectid", "name")),
    "sessions_read": Offer("A session: its status, and `waiting`, the questions that wait for the person.",
                           lambda s, a: s.sessions.read(a["id"])),
    "sessions_messages": Offer("The messages of a session with their parts, oldest first.",
                               lambda s, a: s.sessions.messages(a["id"], a.get("before"),
                                                                a.get("limit", DEFAULT_MESSAGE_PAGE)),
                               ("before", "limit")),
    "sessions_prompt": Offer("Send a prompt to a session; answers {messageid} at once. File changes and commands "
                             "ask the person in the Totem screen.", lambda s, a: _prompt(s, a),
                             ("text", "model", "mode"), ("text",)),
    "sessions_abort": Offer("Stop the run of a session.", lambda s, a: s.sessions.abort(a["id"])),
    "sessions_diff": Offer("The files the session changed, each with a unified diff.",
                           lambda s, a: s.changes.diff(a["id"])),
}


def mcp_tools(table: dict | None = None) -> tuple[McpTool, ...]:
    """The tools: one per action marked `mcp`, its schema made of the action's declared fields.
    Raises ValueError when the actions marked `mcp` and OFFERS disagree."""
    if table is None:
        from totem.http.routes import action_table  # the routes import this module's package
        table = action_table()
    marked = [action for action in table.values() if action.mcp]
    if {action.name for action in marked} != set(OFFERS):
        raise ValueError(f"the actions marked mcp ({', '.join(a.name for a in marked)}) are not those offered "
                         f"({', '.join(OFFERS)})")
    return tuple(_tool(action, OFFERS[action.name]) for action in marked)


def _tool(action, offer: Offer) -> McpTool:
    declared = properties_of(action.body or {}) | action.query.get("properties", {})
    own = set(action.query.get("required", ())) | set((action.body or {}).get("required", ()))
    properties = ({"id": ID} if action.takes_id else {}) | {name: declared[name] for name in offer.fields}
    required = [name for name in properties if name == "id" or name in own or name in offer.required]
    schema: dict = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return McpTool(action.label.replace("|", "_"), offer.description, schema, offer.call, not action.changes)


async def _prompt(services, args: dict) -> dict:
    """A prompt may keep the session's mode or narrow it to Plan, never widen Plan to Build:
    what a session may change is the person's to decide, not the caller's."""
    mode = args.get("mode")
    if mode is not None and mode != "plan":
        session = await services.sessions.read(args["id"])
        if session.get("mode") != mode:
            raise Forbidden(("mode", "a prompt over MCP cannot change a Plan session to Build; "
                                     "the person switches it in Totem"))
    return await services.sessions.send(args["id"], args["text"], model=args.get("model"), mode=mode)


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


@dataclass
class _Session:
    version: str
    used: float  # the clock at its last request


class McpServer:
    """The MCP route of one Totem. `max_sessions`, `idle_s` and `clock` (monotonic seconds)
    bound the MCP sessions; they are attributes, so a test can narrow them."""

    def __init__(self, services, tools: tuple[McpTool, ...] | None = None, max_sessions: int = MAX_SESSIONS,
                 idle_s: float = SESSION_IDLE_S, clock: Callable[[], float] = time.monotonic):
        self.services = services
        self.tools = {tool.name: tool for tool in (mcp_tools() if tools is None else tools)}
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self.clock = clock
        # Least recently used first: the expired ones are found at the front.
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    # -- MCP sessions --------------------------------------------------------------------

    def _expire(self) -> None:
        """Forget the sessions idle for longer than idle_s."""
        deadline = self.clock() - self.idle_s
        while self._sessions:
            sessionid, session = next(iter(self._sessions.items()))
            if session.used >= deadline:
                break
            del self._sessions[sessionid]

    def _use(self, sessionid: str) -> _Session | None:
        """The live session of this id, its idle time starting again; None when unknown or expired."""
        self._expire()
        session = self._sessions.get(sessionid)
        if session is not None:
            session.used = self.clock()
            self._sessions.move_to_end(sessionid)
        return session

    def _retry_after(self) -> int | None:
        """None while a new session has room; else the seconds until the least recently used
        session expires (when it stays idle)."""
        self._expire()
        if len(self._sessions) < self.max_sessions:
            return None
        oldest = next(iter(self._sessions.values()))
        return max(1, math.ceil(oldest.used + self.idle_s - self.clock()))

    # -- HTTP ---------------------------------------------------------------------------

    async def handle(self, request) -> Response:
        if request.method == "GET":
            return Response(405, b"", None, [("Allow", "POST, DELETE")])
        if request.method == "DELETE":
            sessionid = request.header("mcp-session-id")
            if sessionid is None:
                return _rpc_response(_error(None, INVALID_REQUEST, "Mcp-Session-Id is required"), 400)
            if self._use(sessionid) is None:
                return _rpc_response(_error(None, INVALID_REQUEST, "no such MCP session"), 404)
            del self._sessions[sessionid]
            return Response(204)
        if request.method != "POST":
            return Response(405, b"", None, [("Allow", "POST, DELETE")])
        if request.content_length > MAX_BODY_BYTES:
            return _rpc_response(_error(None, INVALID_REQUEST, f"the body is over {MAX_BODY_BYTES} bytes"), 413)
        kind = (request.header("content-type") or "").split(";")[0].strip().lower()
        if kind != JSON_TYPE:
            return _rpc_response(_error(None, INVALID_REQUEST, "Content-Type must be application/json"), 415)
        body = await request.read_body()
        try:
            message = decode_json(body)
        except (ValueError, RecursionError, DuplicateKeyError):
            return _rpc_response(_error(None, PARSE_ERROR, "the body is not valid JSON"), 400)
        return await self._messages(request, message)

    async def _messages(self, request, message) -> Response:
        batch = isinstance(message, list)
        messages = message if batch else [message]
        if batch and not messages:
            return _rpc_response(_error(None, INVALID_REQUEST, "an empty batch"), 400)
        if not batch and isinstance(message, dict) and message.get("method") == PROBE:
            # Newer clients probe for a stateless revision before anything else, with its own
            # version header: "method not found" sends them to initialize.
            return _rpc_response(_error(_id_of(message), METHOD_NOT_FOUND, f"method not found: {PROBE}"), 200)
        initializing = any(isinstance(m, dict) and m.get("method") == "initialize" for m in messages)
        headers: list[tuple[str, str]] = []
        session = None
        if initializing:
            if batch:
                return _rpc_response(_error(None, INVALID_REQUEST, "initialize cannot be in a batch"), 400)
            wait = self._retry_after()
            if wait is not None:  # a live session is never evicted for a new one
                return _rpc_response(_error(_id_of(message), SERVER_BUSY, (
                    f"Totem serves {self.max_sessions} MCP sessions at most and all are in use; try again "
                    f"in {wait} s (a session ends with DELETE or after {self.idle_s / 60:g} minutes idle)")),
                    503, [("Retry-After", str(wait))])
        else:
            sessionid = request.header("mcp-session-id")
            if sessionid is None:
                return _rpc_response(_error(None, INVALID_REQUEST, "Mcp-Session-Id is required; initialize first"),
                                     400)
            session = self._use(sessionid)
            if session is None:  # unknown or expired: the client initializes again (the specification)
                return _rpc_response(_error(None, INVALID_REQUEST, "no such MCP session; initialize again"), 404)
            announced = request.header("mcp-protocol-version")
            if announced is not None and announced not in VERSIONS:
                return _rpc_response(_error(None, INVALID_REQUEST, f"unsupported protocol version {announced}"), 400)
            if batch and session.version != BATCH_VERSION:
                return _rpc_response(_error(None, INVALID_REQUEST, "batches are only in revision 2025-03-26"), 400)
        answers = []
        for item in messages:
            answer = await self._one(item, session, headers)
            if answer is not None:
                answers.append(answer)
        if not answers:
            return Response(202, b"", None, headers)
        if not batch and answers[0].get("error", {}).get("code") == INVALID_REQUEST:
            return _rpc_response(answers[0], 400, headers)  # the transport refuses a message it cannot take
        payload = answers if batch else answers[0]
        if _wants_stream(request):
            data = json.dumps(payload, separators=(",", ":")).encode()
            return Response(200, b"event: message\r\ndata: " + data + b"\r\n\r\n", SSE_TYPE,
                            headers + [("Cache-Control", "no-store")])
        return _rpc_response(payload, 200, headers)

    # -- JSON-RPC -----------------------------------------------------------------------

    async def _one(self, message, session: _Session | None, headers: list) -> dict | None:
        problem = _invalid(message)
        if problem is not None:  # JSON-RPC: the id is echoed when it can be read, else null
            return _error(_id_of(message), INVALID_REQUEST, problem)
        if "method" not in message:
            return None  # a response to a request of ours: we send none, so nothing to do
        if "id" not in message:
            return None  # a notification (initialized, cancelled, ...): nothing to answer
        method, ident, params = message["method"], message["id"], message.get("params", {})
        if not isinstance(params, dict):
            return _error(ident, INVALID_PARAMS, "params must be an object")
        try:
            result = await self._call(method, params, session, headers)
        except RpcError as exc:
            return _error(ident, exc.code, exc.message, exc.data)
        except Exception:  # never a 500: the caller sees an internal error of this request
            return _error(ident, INTERNAL_ERROR, "internal error")
        return {"jsonrpc": "2.0", "id": ident, "result": result}

    async def _call(self, method: str, params: dict, session: _Session | None, headers: list) -> dict:
        if method == "initialize":
            return self._initialize(params, headers)
        if method == "ping":
            return {}
        if method == "tools/list":
            if params.get("cursor") is not None:
                raise RpcError(INVALID_PARAMS, "invalid cursor: the list has one page")
            return {"tools": [_listed(tool) for tool in self.tools.values()]}
        if method == "tools/call":
            return await self._tool(params)
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    def _initialize(self, params: dict, headers: list) -> dict:
        offered = params.get("protocolVersion")
        version = offered if offered in VERSIONS else VERSIONS[0]
        sessionid = secrets.token_hex(16)
        self._sessions[sessionid] = _Session(version, self.clock())
        headers.append(("Mcp-Session-Id", sessionid))
        return {"protocolVersion": version, "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": SERVER_INFO, "instructions": INSTRUCTIONS}

    async def _tool(self, params: dict) -> dict:
        # A malformed call and an unknown tool are protocol errors (the specification's -32602);
        # arguments that fail the tool's schema are the tool's, a result the model can read.
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, f"tools/call needs name, the name of a tool as text; "
                                           f"the tools are: {', '.join(self.tools)}")
        tool = self.tools.get(name)
        if tool is None:
            raise RpcError(INVALID_PARAMS, f"unknown tool {name!r}; the tools are: {', '.join(self.tools)}")
        args = params.get("arguments", {})
        if not isinstance(args, dict):
            raise RpcError(INVALID_PARAMS, "the arguments of tools/call must be an object")
        problems = check(tool.schema, args)
        if problems:
            return _tool_error(f"invalid arguments for {tool.name}: "
                               + "; ".join(f"{name}: {reason}" for name, reason in problems))
        args = {name: value for name, value in args.items() if value is not None}  # null is taken as absent
        try:
            result = await tool.call(self.services, args)
        except ApiError as exc:
            return _tool_error(f"{tool.name} failed ({exc.status}): {exc}")
        return {"content": [{"type": "text", "text": json.dumps(result, ensure_ascii=False)}], "isError": False}


def _listed(tool: McpTool) -> dict:
    return {"name": tool.name, "description": tool.description, "inputSchema": tool.schema,
            "annotations": {"readOnlyHint": tool.read_only, "destructiveHint": False, "openWorldHint": False}}


def _tool_error(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def _error(ident, code: int, message: str, data: Any = None) -> dict:
    error: dict = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": ident, "error": error}


def _invalid(message) -> str | None:
    """Why a message is not a valid JSON-RPC 2.0 request, notification or response, or None.
    MCP: a request's id is text or an integer, never null."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return 'not a JSON-RPC 2.0 message (jsonrpc must be "2.0")'
    if "id" in message and not _valid_id(message["id"]):
        return "the id must be text or an integer, never null"
    if "method" not in message:
        if "id" in message and ("result" in message) != ("error" in message):
            return None  # a response
        return "a message without a method must be a response: an id and a result or an error"
    if not isinstance(message["method"], str):
        return "method must be text"
    return None


def _valid_id(ident) -> bool:
    return isinstance(ident, (str, int)) and not isinstance(ident, bool)


def _id_of(message) -> Any:
    ident = message.get("id") if isinstance(message, dict) else None
    return ident if _valid_id(ident) else None


def _wants_stream(request) -> bool:
    accept = (request.header("accept") or "").lower()
    return SSE_TYPE in accept and JSON_TYPE not in accept


def _rpc_response(payload, status: int, headers: list | None = None) -> Response:
    return Response(status, json.dumps(payload, separators=(",", ":")).encode(), JSON_TYPE, list(headers or []))
