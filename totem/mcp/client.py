"""A client of one MCP server: the JSON-RPC session and its three transports.

Owns the handshake (`initialize` offering the latest revision, accepting any of
SUPPORTED_VERSIONS, then `notifications/initialized`), requests with a timeout each (a request
that times out is cancelled with `notifications/cancelled`), answering the server's own `ping`
(and -32601 for its other requests), the tool list with its pages, `tools/call`, and the
transports: stdio (newline-delimited JSON through runner.spawn_server, stderr kept for the error
message, stdout lines that are not JSON skipped, a line longer than WHOLE_LINE_BYTES read by a
skimmer.Skimmer in bounded memory, its long texts cut, so that a result of any size neither ends
the server nor fills the memory), Streamable HTTP (JSON answers, skimmed the same way past
WHOLE_LINE_BYTES, or SSE ones; the session id and protocol version headers, DELETE at the end)
and the older HTTP+SSE transport, tried when a Streamable HTTP `initialize` is refused with 400,
404 or 405. Wire details follow `shared/fixtures/mcp.md`. A server that exits or stops
answering ends every waiting request with McpError, whose text the model or the person can act
on.

Must not: decide whether a server may start or a tool may be called (the agent asks), read
project files, or trust anything the server sends beyond its framing (the caller sanitizes names
and descriptions and scrubs results).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin, urlsplit

from totem.agent.provider_errors import ProviderError
from totem.agent.sse import SseDecoder, StreamFormatError
from totem.mcp.definitions import ServerDefinition
from totem.mcp.skimmer import Skimmer
from totem.process import runner

log = logging.getLogger("totem.mcp")

LATEST_VERSION = "2025-11-25"
SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
START_TIMEOUT_S = 30.0  # to start and finish the handshake
REQUEST_TIMEOUT_S = 30.0  # tools/list and the other small requests
CALL_TIMEOUT_S = 120.0  # a tool call, unless the caller gives its own
STOP_GRACE_S = 2.0
# A stdio line or an HTTP JSON answer up to this is parsed whole; a longer one is skimmed as it
# comes (its strings cut to what the model could be shown, at most a few MB kept), never kept whole.
WHOLE_LINE_BYTES = 4 * 1024 * 1024
ASK_FOR_LESS = "ask the tool for less at a time (a smaller range, a page, a filter)"
MAX_TOOL_PAGES = 20
MAX_TOOLS = 500
CLIENT_INFO = {"name": "totem", "version": "1"}


class McpError(Exception):
    """A server that could not start, answered with an error, ended, or did not answer in time;
    str(exc) says which, in words for the model or the person."""


class _Refused(McpError):
    """A Streamable HTTP endpoint refused `initialize` with this status (the old transport may work)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class McpClient:
    """One initialized connection to an MCP server."""

    def __init__(self, definition: ServerDefinition):
        self.definition = definition
        self.name = definition.name
        self.version = ""  # the negotiated protocol revision
        self.server_info: dict = {}
        self.instructions = ""
        self.tools_changed = False  # the server said its list changed (notifications/tools/list_changed)
        self._next_id = 1
        self._pending: dict[str, asyncio.Future] = {}
        self._ended: str | None = None
        self._channel: _Channel | None = None

    @property
    def ended(self) -> str | None:
        """Why the connection ended, or None while it lives."""
        return self._ended

    # -- life --------------------------------------------------------------------------------

    async def start(self, root: str, timeout_s: float = START_TIMEOUT_S, confine: runner.Confine | None = None
                    ) -> None:
        """Start or reach the server and complete the handshake; a stdio server's program runs
        under `confine` (the sandbox's). Raises McpError."""
        try:
            async with asyncio.timeout(timeout_s):
                if self.definition.transport == "stdio":
                    await self._open(StdioChannel(self.definition, root, self._received, self._lost, confine,
                                                  self._unreadable))
                elif self.definition.transport == "sse":
                    await self._open(SseChannel(self.definition, self._received, self._lost))
                else:
                    try:
                        await self._open(HttpChannel(self.definition, self._received, self._lost))
                    except _Refused as exc:
                        log.info("%s refused Streamable HTTP (%s); trying HTTP+SSE", self.name, exc.status)
                        self._ended = None
                        await self._open(SseChannel(self.definition, self._received, self._lost))
        except TimeoutError:
            await self.close()
            raise McpError(f"the MCP server {self.name} did not start within {timeout_s:g} s") from None
        except BaseException:
            await self.close()
            raise

    async def _open(self, channel: _Channel) -> None:
        self._channel = channel
        await channel.open()
        result = await self.request("initialize", {
            "protocolVersion": LATEST_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO}, timeout_s=None)
        version = result.get("protocolVersion")
        if version not in SUPPORTED_VERSIONS:
            raise McpError(f"the MCP server {self.name} speaks protocol {str(version)[:40]!r}, which Totem "
                           f"does not ({', '.join(SUPPORTED_VERSIONS)})")
        self.version = version
        channel.negotiated(version)
        info = result.get("serverInfo")
        self.server_info = info if isinstance(info, dict) else {}
        instructions = result.get("instructions")
        self.instructions = instructions if isinstance(instructions, str) else ""
        await self.notify("notifications/initialized")

    async def close(self) -> None:
        """End the connection (stdio: close stdin, then stop the program's group)."""
        channel, self._channel = self._channel, None
        self._lost(self._ended or "the connection was closed")
        if channel is not None:
            await channel.close()

    # -- requests ----------------------------------------------------------------------------

    async def request(self, method: str, params: dict | None = None,
                      timeout_s: float | None = REQUEST_TIMEOUT_S) -> dict:
        """Send a request and wait for its result. Raises McpError for an error answer, an ended
        connection or no answer within `timeout_s` (the request is then cancelled)."""
        if self._ended is not None or self._channel is None:
            raise McpError(f"the MCP server {self.name} is not running: {self._ended or 'not started'}")
        ident = self._next_id
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            message["params"] = params
        waiter = asyncio.get_running_loop().create_future()
        self._pending[str(ident)] = waiter
        try:
            async with asyncio.timeout(timeout_s):
                await self._channel.send(message)
                return await waiter
        except TimeoutError:
            with contextlib.suppress(McpError, OSError):
                await asyncio.wait_for(self.notify("notifications/cancelled", {
                    "requestId": ident, "reason": "timed out"}), 2)
            raise McpError(f"the MCP server {self.name} did not answer {method} within {timeout_s:g} s") from None
        finally:
            self._pending.pop(str(ident), None)

    async def notify(self, method: str, params: dict | None = None) -> None:
        if self._channel is None or self._ended is not None:
            return
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._channel.send(message)

    async def list_tools(self) -> list[dict]:
        """Every tool the server offers, over its pages (at most MAX_TOOLS). Raises McpError."""
        tools: list[dict] = []
        cursor = None
        for _page in range(MAX_TOOL_PAGES):
            result = await self.request("tools/list", {"cursor": cursor} if cursor else None)
            page = result.get("tools")
            if not isinstance(page, list):
                raise McpError(f"the MCP server {self.name} sent a tool list without tools")
            tools.extend(tool for tool in page if isinstance(tool, dict))
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor or len(tools) >= MAX_TOOLS:
                break
        self.tools_changed = False
        return tools[:MAX_TOOLS]

    async def call_tool(self, name: str, arguments: dict, timeout_s: float = CALL_TIMEOUT_S) -> dict:
        """The result of one tool call (CallToolResult). Raises McpError."""
        return await self.request("tools/call", {"name": name, "arguments": arguments}, timeout_s=timeout_s)

    # -- what the server sends ----------------------------------------------------------------

    def _received(self, message: object) -> None:
        if isinstance(message, list):  # a batch (2025-03-26)
            for item in message:
                self._received(item)
            return
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message and message["id"] is not None:
                self._answer_server_request(message["id"], method)
            elif method == "notifications/tools/list_changed":
                self.tools_changed = True
            return
        waiter = self._pending.get(str(message.get("id")))
        if waiter is None or waiter.done():
            return
        error = message.get("error")
        if isinstance(error, dict):
            text = str(error.get("message") or "an error")[:500]
            waiter.set_exception(McpError(f"the MCP server {self.name} answered with an error: {text} "
                                          f"(code {error.get('code')})"))
        elif isinstance(message.get("result"), dict):
            waiter.set_result(message["result"])
        else:
            waiter.set_exception(McpError(f"the MCP server {self.name} sent an answer without a result"))

    def _answer_server_request(self, ident, method: str) -> None:
        if method == "ping":
            answer = {"jsonrpc": "2.0", "id": ident, "result": {}}
        else:
            answer = {"jsonrpc": "2.0", "id": ident,
                      "error": {"code": -32601, "message": f"{method[:80]} is not supported"}}
        if self._channel is not None:
            task = asyncio.ensure_future(self._channel.send(answer))
            task.add_done_callback(_ignore_failure)

    def _unreadable(self, reason: str) -> None:
        """The server sent a message that names no request (its id could not be read): with one
        request waiting, it is that one's answer, which fails with `reason`."""
        waiting = [waiter for waiter in self._pending.values() if not waiter.done()]
        if len(waiting) == 1:
            waiting[0].set_exception(McpError(f"the MCP server {self.name} {reason}"))
        else:
            log.info("%s %s", self.name, reason)

    def _lost(self, reason: str) -> None:
        if self._ended is None:
            self._ended = reason
        for waiter in self._pending.values():
            if not waiter.done():
                waiter.set_exception(McpError(f"the MCP server {self.name} ended: {reason}"))


def _http():
    """The HTTP client, loaded with the first remote server (not at start-up)."""
    from totem.agent import client
    return client


def skimmed_message(skimmer: Skimmer) -> object:
    """The message of a line or body longer than WHOLE_LINE_BYTES, its long texts cut. Raises
    ValueError with what to say to the request that waits (not JSON, no id to answer)."""
    size = f"{skimmer.size / (1024 * 1024):.1f} MB"
    try:
        message = skimmer.finish()
    except ValueError as exc:
        raise ValueError(f"sent an answer of {size} that is not valid JSON ({exc}); {ASK_FOR_LESS}") from None
    if isinstance(message, dict) and "method" not in message and "id" not in message:
        raise ValueError(f"sent an answer of {size} whose request could not be told (no id was read); "
                         f"{ASK_FOR_LESS}")
    log.info("an MCP server sent a message of %s; its long texts were cut", size)
    return message


def _ignore_failure(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


class _Channel:
    """How messages travel to one server and back."""

    async def open(self) -> None:
        raise NotImplementedError

    async def send(self, message: dict) -> None:
        raise NotImplementedError

    def negotiated(self, version: str) -> None:
        """The handshake chose `version` (HTTP sends it on every later request)."""

    async def close(self) -> None:
        raise NotImplementedError


class StdioChannel(_Channel):
    """A program of the project, one JSON message per line on its stdin and stdout."""

    def __init__(self, definition: ServerDefinition, root: str, received: Callable[[object], None],
                 lost: Callable[[str], None], confine: runner.Confine | None = None,
                 unreadable: Callable[[str], None] | None = None):
        self.definition = definition
        self.root = root
        self.confine = confine
        self.received = received
        self.lost = lost
        self.unreadable = unreadable or (lambda reason: log.info("%s %s", definition.name, reason))
        self.child: runner.ServerChild | None = None
        self.buffer = bytearray()  # the line so far, up to WHOLE_LINE_BYTES
        self.skimmer: Skimmer | None = None  # past that, what reads the rest of the line
        self.watch: asyncio.Task | None = None

    async def open(self) -> None:
        definition = self.definition
        env = runner.minimal_environment() | dict(definition.env)
        try:
            self.child = await runner.spawn_server([definition.command, *definition.args], cwd=self.root,
                                                   env=env, on_stdout=self._feed, confine=self.confine)
        except runner.CommandError as exc:
            raise McpError(f"the MCP server {definition.name} could not start: {exc}") from None
        except FileNotFoundError:
            raise McpError(f"the MCP server {definition.name} could not start: {definition.command} "
                           "was not found") from None
        except OSError as exc:
            raise McpError(f"the MCP server {definition.name} could not start: {exc.strerror or exc}") from None
        self.watch = asyncio.ensure_future(self._watch_exit(self.child))

    async def _watch_exit(self, child: runner.ServerChild) -> None:
        await asyncio.shield(child.exited)  # cancelling this watch must not cancel the exit itself
        await asyncio.sleep(0.05)  # let the last of stderr arrive
        said = child.stderr_text()
        status = child.returncode
        self.lost(f"it exited (status {status})" + (f"; it said: {said[-400:]}" if said else ""))

    def _feed(self, data: bytes) -> None:
        start = 0
        while (end := data.find(b"\n", start)) >= 0:  # only the new bytes are searched
            self._take(data[start:end])
            self._line_end()
            start = end + 1
        if start < len(data):
            self._take(data[start:])

    def _take(self, piece: bytes) -> None:
        if self.skimmer is not None:
            self.skimmer.feed(piece)
            return
        self.buffer += piece
        if len(self.buffer) > WHOLE_LINE_BYTES:
            self.skimmer = Skimmer()
            self.skimmer.feed(self.buffer)
            self.buffer = bytearray()

    def _line_end(self) -> None:
        skimmer, self.skimmer = self.skimmer, None
        if skimmer is not None:
            self._skimmed(skimmer)
            return
        line = bytes(self.buffer).strip()
        self.buffer.clear()
        if not line:
            return
        try:
            message = json.loads(line)
        except ValueError:
            log.info("%s wrote a line that is not JSON: %.120r", self.definition.name, line)
            return
        self.received(message)

    def _skimmed(self, skimmer: Skimmer) -> None:
        """A line longer than WHOLE_LINE_BYTES, read: its message, or the reason it could not
        be read for the request that waits."""
        try:
            message = skimmed_message(skimmer)
        except ValueError as exc:
            if skimmer.began_object:  # an answer, not a program's banner or log line
                self.unreadable(str(exc))
            else:
                log.info("%s wrote a line of %d bytes that is not JSON", self.definition.name, skimmer.size)
            return
        self.received(message)

    async def send(self, message: dict) -> None:
        if self.child is None:
            raise McpError(f"the MCP server {self.definition.name} is not running")
        try:
            self.child.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")
        except ConnectionError:
            raise McpError(f"the MCP server {self.definition.name} has ended") from None

    async def close(self) -> None:
        if self.watch is not None:
            self.watch.cancel()
        if self.child is not None:
            await runner.end_server(self.child, STOP_GRACE_S)


class _HttpBase(_Channel):
    def __init__(self, definition: ServerDefinition, received: Callable[[object], None],
                 lost: Callable[[str], None]):
        self.definition = definition
        self.received = received
        self.lost = lost

    def _headers(self) -> dict[str, str]:
        return dict(self.definition.headers)

    def _failed(self, exc: ProviderError) -> McpError:
        return McpError(f"the MCP server {self.definition.name} at {self.definition.host} could not be "
                        f"reached: {exc.message}")

    def _deliver_events(self, decoder: SseDecoder, piece: bytes) -> None:
        for event in decoder.feed(piece):
            if event.event == "message" and event.data.strip():
                self._deliver_json(event.data.encode())

    def _deliver_json(self, body: bytes) -> None:
        try:
            self.received(json.loads(body))
        except ValueError:
            log.info("%s sent a message that is not JSON", self.definition.name)


class HttpChannel(_HttpBase):
    """Streamable HTTP: every message is a POST; an answer comes as JSON or as an SSE stream."""

    def __init__(self, definition: ServerDefinition, received: Callable[[object], None],
                 lost: Callable[[str], None]):
        super().__init__(definition, received, lost)
        self.session_id: str | None = None
        self.version: str | None = None
        self.initialized = False

    async def open(self) -> None:
        pass

    def negotiated(self, version: str) -> None:
        self.version = version
        self.initialized = True

    def _headers(self) -> dict[str, str]:
        headers = super()._headers() | {"Accept": "application/json, text/event-stream"}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.version:
            headers["MCP-Protocol-Version"] = self.version
        return headers

    async def send(self, message: dict) -> None:
        url = self.definition.url
        try:
            async with _http().open_stream("POST", url, self._headers(), message,
                                        read_timeout=CALL_TIMEOUT_S * 2) as response:
                if response.status in (200, 202) and not self.initialized:
                    self.session_id = response.headers.get("mcp-session-id") or self.session_id
                if response.status == 202 or (200 <= response.status < 300 and response.complete):
                    return
                if not 200 <= response.status < 300:
                    said = (await response.read_prefix(300)).decode("utf-8", "replace").strip()
                    text = f"HTTP {response.status}" + (f": {said}" if said else "")
                    first = not self.initialized and message.get("method") == "initialize"
                    if first and response.status in (400, 404, 405):
                        raise _Refused(response.status, text)
                    if response.status == 404 and self.session_id:
                        self.lost("the server ended the session")
                    raise McpError(f"the MCP server {self.definition.name} refused the request: {text}")
                kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if kind == "text/event-stream":
                    decoder = SseDecoder()
                    async for piece in response.iter_bytes():
                        self._deliver_events(decoder, piece)
                else:
                    await self._read_json(response)
        except ProviderError as exc:
            raise self._failed(exc) from None
        except StreamFormatError as exc:
            raise McpError(f"the MCP server {self.definition.name} sent a broken stream: {exc}") from None
        except ValueError as exc:  # a header with a line break, a bad URL
            raise McpError(f"the MCP server {self.definition.name} cannot be reached: {exc}") from None

    async def _read_json(self, response) -> None:
        """A JSON answer: whole up to WHOLE_LINE_BYTES, skimmed past that. Raises McpError for
        a long one that cannot be read, and what next_piece raises."""
        body = bytearray()
        skimmer: Skimmer | None = None
        async for piece in response.iter_bytes():
            if skimmer is not None:
                skimmer.feed(piece)
            else:
                body += piece
                if len(body) > WHOLE_LINE_BYTES:
                    skimmer = Skimmer()
                    skimmer.feed(body)
                    body = bytearray()
            await asyncio.sleep(0)  # buffered reads do not yield; let other tasks run
        if skimmer is None:
            self._deliver_json(bytes(body))
            return
        try:
            self.received(skimmed_message(skimmer))
        except ValueError as exc:
            raise McpError(f"the MCP server {self.definition.name} {exc}") from None

    async def close(self) -> None:
        if self.session_id:
            with contextlib.suppress(ProviderError, ValueError, OSError, TimeoutError):
                async with asyncio.timeout(STOP_GRACE_S):
                    async with _http().open_stream("DELETE", self.definition.url, self._headers(),
                                                connect_timeout=STOP_GRACE_S, read_timeout=STOP_GRACE_S) as response:
                        await response.read_prefix(1024)


class SseChannel(_HttpBase):
    """The HTTP+SSE transport of 2024-11-05: a GET stream that names a POST endpoint first, and
    carries every answer after."""

    def __init__(self, definition: ServerDefinition, received: Callable[[object], None],
                 lost: Callable[[str], None]):
        super().__init__(definition, received, lost)
        self.endpoint: asyncio.Future | None = None
        self.reader: asyncio.Task | None = None

    async def open(self) -> None:
        self.endpoint = asyncio.get_running_loop().create_future()
        self.reader = asyncio.ensure_future(self._read())
        await asyncio.wait((self.endpoint, self.reader), return_when=asyncio.FIRST_COMPLETED)
        if not self.endpoint.done():
            self.endpoint.cancel()
            self.reader.cancel()
            raise McpError(f"the MCP server {self.definition.name} did not name its message endpoint")
        self.endpoint.result()

    async def _read(self) -> None:
        assert self.endpoint is not None
        url = self.definition.url
        try:
            async with _http().open_stream("GET", url, self._headers() | {"Accept": "text/event-stream"},
                                        read_timeout=24 * 3600) as response:
                if response.status != 200:
                    raise McpError(f"the MCP server {self.definition.name} refused its event stream: "
                                   f"HTTP {response.status}")
                decoder = SseDecoder()
                async for piece in response.iter_bytes():
                    for event in decoder.feed(piece):
                        if event.event == "endpoint" and not self.endpoint.done():
                            self.endpoint.set_result(self._endpoint_url(event.data.strip()))
                        elif event.event == "message" and event.data.strip():
                            self._deliver_json(event.data.encode())
            self.lost("the server closed its event stream")
        except McpError as exc:
            self._fail(str(exc))
        except (ProviderError, StreamFormatError, ValueError) as exc:
            self._fail(f"its event stream failed: {getattr(exc, 'message', exc)}")

    def _fail(self, reason: str) -> None:
        assert self.endpoint is not None
        if not self.endpoint.done():
            self.endpoint.set_exception(McpError(reason))
        self.lost(reason)

    def _endpoint_url(self, given: str) -> str:
        """The POST endpoint, which must stay on the server's own origin (the person approved
        that host, not another)."""
        url = urljoin(self.definition.url, given)
        mine, theirs = urlsplit(self.definition.url), urlsplit(url)
        if (mine.scheme, mine.hostname, mine.port) != (theirs.scheme, theirs.hostname, theirs.port):
            raise McpError(f"the MCP server {self.definition.name} named an endpoint on another host")
        return url

    async def send(self, message: dict) -> None:
        assert self.endpoint is not None
        try:
            async with _http().open_stream("POST", self.endpoint.result(), self._headers(), message) as response:
                body = await response.read_prefix(300)
                if not 200 <= response.status < 300:
                    raise McpError(f"the MCP server {self.definition.name} refused a message: HTTP "
                                   f"{response.status} {body.decode('utf-8', 'replace').strip()}")
        except ProviderError as exc:
            raise self._failed(exc) from None

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.reader
