"""The event protocol and its WebSocket: every event type, the hub that fans them out, `/ws/`.

Owns the wire names of the events (declared here once, one frozen dataclass each), the
validation of what clients send, the fan-out rules (session lists to everyone, the rest to a
session's subscribers, in order), the questions that are re-sent on subscribe, and each
connection's bounded queue. The WebSocket framing is websockets' Sans-I/O `ServerProtocol`
driven by our own streams. It does not authenticate: the caller has done that before
`Hub.serve()`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass, fields
from typing import ClassVar

from websockets.frames import CloseCode, Opcode
from websockets.http11 import Request as WsRequest
from websockets.protocol import State
from websockets.server import ServerProtocol

from .store import now_ms

log = logging.getLogger("totem.events")

MAX_CLIENT_MESSAGE_BYTES = 64 * 1024
MAX_SUBSCRIPTIONS = 256
MAX_SESSION_ID_CHARS = 64
CLOSE_TIMEOUT_S = 2.0
READ_CHUNK_BYTES = 64 * 1024


# -- server → client events ------------------------------------------------------------------

@dataclass(frozen=True)
class Event:
    """An event of one session; `to_wire()` gives `{type, sessionid, ts, data}`."""

    sessionid: str
    TYPE: ClassVar[str] = ""
    BROADCAST: ClassVar[bool] = False  # sent to every connection, for the session lists

    def data(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sessionid"}

    def to_wire(self, ts: int) -> dict:
        return {"type": self.TYPE, "sessionid": self.sessionid, "ts": ts, "data": self.data()}


@dataclass(frozen=True)
class SessionStatus(Event):
    """running, idle, aborted or error."""
    status: str
    TYPE: ClassVar[str] = "session.status"
    BROADCAST: ClassVar[bool] = True


@dataclass(frozen=True)
class SessionUpdated(Event):
    """The session changed (renamed by the user or named by the first prompt)."""
    session: dict
    TYPE: ClassVar[str] = "session.updated"
    BROADCAST: ClassVar[bool] = True


@dataclass(frozen=True)
class MessageCreated(Event):
    """A new user or assistant message."""
    message: dict
    TYPE: ClassVar[str] = "message.created"


@dataclass(frozen=True)
class PartCreated(Event):
    """A part opened (text, reasoning, tool, knowledge, selfcheck, validation)."""
    part: dict
    TYPE: ClassVar[str] = "part.created"


@dataclass(frozen=True)
class PartDelta(Event):
    """Text appended to an open part."""
    partid: str
    text: str
    TYPE: ClassVar[str] = "part.delta"


@dataclass(frozen=True)
class PartUpdated(Event):
    """A part changed state (a tool went running → done)."""
    part: dict
    TYPE: ClassVar[str] = "part.updated"


@dataclass(frozen=True)
class PartClosed(Event):
    """The part is complete and stored."""
    partid: str
    TYPE: ClassVar[str] = "part.closed"


@dataclass(frozen=True)
class PermissionAsk(Event):
    """A tool call waits for the person."""
    id: str
    tool: str
    input: dict
    patterns: list
    TYPE: ClassVar[str] = "permission.ask"


@dataclass(frozen=True)
class PermissionReplied(Event):
    """A permission question was answered (also by another client)."""
    id: str
    reply: str
    TYPE: ClassVar[str] = "permission.replied"


@dataclass(frozen=True)
class QuestionAsk(Event):
    """The ask tool waits for the person."""
    id: str
    text: str
    options: list
    TYPE: ClassVar[str] = "question.ask"


@dataclass(frozen=True)
class QuestionReplied(Event):
    """A question of the ask tool was answered."""
    id: str
    TYPE: ClassVar[str] = "question.replied"


@dataclass(frozen=True)
class TodoUpdated(Event):
    """The task list of the session changed."""
    items: list
    TYPE: ClassVar[str] = "todo.updated"


@dataclass(frozen=True)
class TerminalOutput(Event):
    """The interactive shell printed something."""
    text: str
    TYPE: ClassVar[str] = "terminal.output"


@dataclass(frozen=True)
class TerminalExit(Event):
    """The interactive shell ended."""
    status: object
    TYPE: ClassVar[str] = "terminal.exit"


@dataclass(frozen=True)
class DiffUpdated(Event):
    """Files were snapshotted or restored: `{path}` for one, `{paths}` for several."""
    path: str | None = None
    paths: list | None = None
    TYPE: ClassVar[str] = "diff.updated"

    def data(self) -> dict:
        return {"path": self.path} if self.paths is None else {"paths": self.paths}


@dataclass(frozen=True)
class RunError(Event):
    """A run-level error; retry tells whether Totem tries again after a pause."""
    message: str
    retry: bool
    TYPE: ClassVar[str] = "error"


EVENT_TYPES: dict[str, type[Event]] = {cls.TYPE: cls for cls in (
    SessionStatus, SessionUpdated, MessageCreated, PartCreated, PartDelta, PartUpdated, PartClosed,
    PermissionAsk, PermissionReplied, QuestionAsk, TodoUpdated, TerminalOutput, TerminalExit,
    DiffUpdated, QuestionReplied, RunError)}

# A question stays pending until its reply; a subscriber gets the pending ones again.
PENDING_ASKS = (PermissionAsk, QuestionAsk)
PENDING_REPLIES = (PermissionReplied, QuestionReplied)


# -- client → server messages ---------------------------------------------------------------

class ProtocolError(Exception):
    """A client frame that is not a message of the protocol."""


@dataclass(frozen=True)
class Subscribe:
    sessionid: str
    TYPE: ClassVar[str] = "subscribe"


@dataclass(frozen=True)
class Unsubscribe:
    sessionid: str
    TYPE: ClassVar[str] = "unsubscribe"


CLIENT_TYPES = {cls.TYPE: cls for cls in (Subscribe, Unsubscribe)}


def parse_client_message(text: str) -> Subscribe | Unsubscribe:
    """Validate one client frame. Raises ProtocolError saying what is wrong."""
    try:
        message = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise ProtocolError("a message must be JSON") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a JSON object")
    kind = CLIENT_TYPES.get(message.get("type"))
    if kind is None:
        raise ProtocolError(f"type must be one of {', '.join(CLIENT_TYPES)}")
    sessionid = message.get("sessionid")
    if not isinstance(sessionid, str) or not sessionid or len(sessionid) > MAX_SESSION_ID_CHARS:
        raise ProtocolError("sessionid must be a session id")
    unknown = set(message) - {"type", "sessionid"}
    if unknown:
        raise ProtocolError(f"unknown field {sorted(unknown)[0]}")
    return kind(sessionid)


# -- the hub ---------------------------------------------------------------------------------

class Hub:
    """Fans events out to WebSocket connections and keeps the questions that wait."""

    def __init__(self, queue_limit: int, ping_interval: float, session_exists):
        self.queue_limit = queue_limit
        self.ping_interval = ping_interval
        self._session_exists = session_exists
        self._connections: set[_Client] = set()
        self._pending: dict[str, dict[str, str]] = {}

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def publish(self, event: Event) -> None:
        """Send an event to whoever should have it, in publishing order. Never blocks."""
        frame = json.dumps(event.to_wire(now_ms()), separators=(",", ":"), ensure_ascii=False)
        if isinstance(event, PENDING_ASKS):
            self._pending.setdefault(event.sessionid, {})[event.id] = frame
        elif isinstance(event, PENDING_REPLIES):
            waiting = self._pending.get(event.sessionid)
            if waiting is not None:
                waiting.pop(event.id, None)
                if not waiting:
                    del self._pending[event.sessionid]
        for client in list(self._connections):
            if event.BROADCAST or event.sessionid in client.subscriptions:
                client.enqueue(frame)

    def pending(self, sessionid: str) -> list[str]:
        """The frames of the questions that wait in a session."""
        return list(self._pending.get(sessionid, {}).values())

    def forget_session(self, sessionid: str) -> None:
        """Drop what is kept for a removed session."""
        self._pending.pop(sessionid, None)
        for client in self._connections:
            client.subscriptions.discard(sessionid)

    async def serve(self, request, reader, writer, leftover: bytes, extra_headers) -> None:
        """Run one WebSocket connection until it closes. The request is already authorized."""
        client = _Client(self, reader, writer)
        await client.run(request, leftover, extra_headers)

    async def close_all(self) -> None:
        """Close every connection (the server is stopping)."""
        clients = list(self._connections)
        for client in clients:
            client.close(CloseCode.GOING_AWAY, "server stopping")
        await asyncio.gather(*(client.finished.wait() for client in clients))

    def _add(self, client) -> None:
        self._connections.add(client)

    def _remove(self, client) -> None:
        self._connections.discard(client)


class _Client:
    """One WebSocket connection: its protocol state, subscriptions and outgoing queue."""

    def __init__(self, hub: Hub, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.hub = hub
        self.reader = reader
        self.writer = writer
        self.protocol = ServerProtocol(max_size=MAX_CLIENT_MESSAGE_BYTES)
        self.subscriptions: set[str] = set()
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.finished = asyncio.Event()
        self._pong = asyncio.Event()
        self._fragments: list[bytes] | None = None
        self._tasks: set[asyncio.Task] = set()

    def enqueue(self, frame: str) -> None:
        if self.protocol.state is not State.OPEN:
            return
        if self.queue.qsize() >= self.hub.queue_limit:
            # A client that cannot keep up is dropped; it reloads the stored state on reconnect.
            self.close(CloseCode.TRY_AGAIN_LATER, "too slow: reconnect and reload")
            return
        self.queue.put_nowait(frame)

    def close(self, code: int, reason: str) -> None:
        if self.protocol.state is State.OPEN:
            self.protocol.send_close(code, reason)
            self._flush()
            # A client that never answers the close frame is cut off.
            asyncio.get_running_loop().call_later(CLOSE_TIMEOUT_S, self._abort)

    def _abort(self) -> None:
        if self.protocol.state is not State.CLOSED and not self.finished.is_set():
            self.writer.transport.abort()

    def _flush(self) -> None:
        for data in self.protocol.data_to_send():
            if data:
                self.writer.write(data)
            elif not self.writer.is_closing():
                self.writer.close()

    async def run(self, request, leftover: bytes, extra_headers) -> None:
        # The protocol parses the handshake itself from the head that httpd already read.
        self.protocol.receive_data(request.raw_head)
        handshake = next((e for e in self.protocol.events_received() if isinstance(e, WsRequest)), None)
        if handshake is None:
            await self._shutdown()
            return
        response = self.protocol.accept(handshake)
        for name, value in extra_headers:
            response.headers[name] = value
        self.protocol.send_response(response)
        self._flush()
        if self.protocol.state is not State.OPEN:
            await self._shutdown()
            return
        self.hub._add(self)
        try:
            sender = asyncio.create_task(self._send_loop())
            pinger = asyncio.create_task(self._ping_loop())
            self._tasks.update((sender, pinger))
            if leftover:
                self.protocol.receive_data(leftover)
                await self._handle_events()
            await self._receive_loop()
        finally:
            self.hub._remove(self)
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._shutdown()

    async def _receive_loop(self) -> None:
        while self.protocol.state is not State.CLOSED:
            try:
                timeout = CLOSE_TIMEOUT_S if self.protocol.state is State.CLOSING else None
                data = await asyncio.wait_for(self.reader.read(READ_CHUNK_BYTES), timeout)
            except (asyncio.TimeoutError, ConnectionError):
                return
            if data:
                self.protocol.receive_data(data)
            else:
                self.protocol.receive_eof()
            await self._handle_events()
            if not data:
                return

    async def _handle_events(self) -> None:
        for frame in self.protocol.events_received():
            if frame.opcode is Opcode.PONG:
                self._pong.set()
            elif frame.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                await self._handle_data_frame(frame)
        self._flush()

    async def _handle_data_frame(self, frame) -> None:
        if frame.opcode is Opcode.BINARY:
            self.close(CloseCode.UNSUPPORTED_DATA, "only text messages")
            return
        if frame.opcode is Opcode.TEXT:
            self._fragments = []
        if self._fragments is None:
            return
        self._fragments.append(frame.data)
        if sum(map(len, self._fragments)) > MAX_CLIENT_MESSAGE_BYTES:
            self.close(CloseCode.MESSAGE_TOO_BIG, "message too big")
            return
        if not frame.fin:
            return
        payload, self._fragments = b"".join(self._fragments), None
        try:
            message = parse_client_message(payload.decode("utf-8"))
        except (ProtocolError, UnicodeDecodeError) as exc:
            self.close(CloseCode.POLICY_VIOLATION, str(exc)[:120])
            return
        await self._apply(message)

    async def _apply(self, message) -> None:
        sessionid = message.sessionid
        if isinstance(message, Unsubscribe):
            self.subscriptions.discard(sessionid)
            return
        if len(self.subscriptions) >= MAX_SUBSCRIPTIONS and sessionid not in self.subscriptions:
            self.close(CloseCode.POLICY_VIOLATION, f"more than {MAX_SUBSCRIPTIONS} subscriptions")
            return
        if not await self.hub._session_exists(sessionid):
            self.enqueue(json.dumps(RunError(sessionid, f"no session {sessionid}", False).to_wire(now_ms())))
            return
        if self.protocol.state is not State.OPEN:
            return
        self.subscriptions.add(sessionid)
        for frame in self.hub.pending(sessionid):
            self.enqueue(frame)

    async def _send_loop(self) -> None:
        while True:
            frame = await self.queue.get()
            if self.protocol.state is not State.OPEN:
                return
            self.protocol.send_text(frame.encode())
            # Take what else is waiting too, so a burst of deltas costs one write and one drain.
            while not self.queue.empty() and self.protocol.state is State.OPEN:
                self.protocol.send_text(self.queue.get_nowait().encode())
            self._flush()
            try:
                await self.writer.drain()
            except ConnectionError:
                return

    async def _ping_loop(self) -> None:
        while self.protocol.state is State.OPEN:
            await asyncio.sleep(self.hub.ping_interval)
            self._pong.clear()
            self.protocol.send_ping(os.urandom(4))
            self._flush()
            try:
                await asyncio.wait_for(self._pong.wait(), self.hub.ping_interval)
            except asyncio.TimeoutError:
                self.close(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")
                self.writer.close()
                return

    async def _shutdown(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), CLOSE_TIMEOUT_S)
        except (asyncio.TimeoutError, ConnectionError):
            self.writer.transport.abort()
        self.finished.set()
