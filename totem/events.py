"""The event protocol: every event type, what clients may send, and the hub that fans out.

Owns the wire names of the events (declared here once, one frozen dataclass each), the
validation of what clients send, the fan-out rules (session lists to everyone, the rest to a
session's subscribers, in order) and the questions that are re-sent on subscribe. One
connection's framing and queue live in `websocket.py`, loaded with the first connection. It
does not authenticate: the caller has done that before `Hub.serve()`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from dataclasses import dataclass, field, fields
from typing import ClassVar

from .store import now_ms

log = logging.getLogger("totem.events")

MAX_SESSION_ID_CHARS = 64
GOING_AWAY = 1001  # RFC 6455 close code: the server is stopping


# -- server → client events ------------------------------------------------------------------

@functools.cache
def _data_fields(cls) -> tuple[str, ...]:
    # Computed once per event class: publish() runs for every streamed delta.
    return tuple(f.name for f in fields(cls) if f.name != "sessionid")


@dataclass(frozen=True)
class Event:
    """An event of one session; `to_wire()` gives `{type, sessionid, ts, data}`."""

    sessionid: str
    TYPE: ClassVar[str] = ""
    BROADCAST: ClassVar[bool] = False  # sent to every connection, for the session lists

    def data(self) -> dict:
        return {name: getattr(self, name) for name in _data_fields(type(self))}

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
    """A tool call waits for the person: why it asks, the folder it runs in, and for each
    subject that needs an answer (bash: each simple command) the patterns "always" may store."""
    id: str
    tool: str
    input: dict
    patterns: list
    reason: str = ""
    folder: str = ""
    commands: list = field(default_factory=list)  # [{"command", "shown", "patterns"}]
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

    def __init__(self, queue_limit: int, ping_interval: float, session_exists, open_parts=lambda sessionid: []):
        self.queue_limit = queue_limit
        self.ping_interval = ping_interval
        self._session_exists = session_exists
        self._open_parts = open_parts  # sessionid -> the parts still streaming, with their text so far
        self._connections: set = set()  # websocket.Connection objects
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

    def catch_up(self, sessionid: str) -> list[str]:
        """What a new subscriber gets first: the parts still open (as part.created with their text
        so far, deltas follow from there) and the questions that wait."""
        stamp = now_ms()
        frames = [json.dumps(PartCreated(sessionid, part).to_wire(stamp), separators=(",", ":"), ensure_ascii=False)
                  for part in self._open_parts(sessionid)]
        return frames + self.pending(sessionid)

    def forget_session(self, sessionid: str) -> None:
        """Drop what is kept for a removed session."""
        self._pending.pop(sessionid, None)
        for client in self._connections:
            client.subscriptions.discard(sessionid)

    async def serve(self, request, reader, writer, leftover: bytes, extra_headers) -> None:
        """Run one WebSocket connection until it closes. The request is already authorized."""
        from .websocket import Connection  # websockets is imported with the first connection
        client = Connection(self, reader, writer)
        await client.run(request, leftover, extra_headers)

    async def close_all(self) -> None:
        """Close every connection (the server is stopping)."""
        clients = list(self._connections)
        for client in clients:
            client.close(GOING_AWAY, "server stopping")
        await asyncio.gather(*(client.finished.wait() for client in clients))

    def _add(self, client) -> None:
        self._connections.add(client)

    def _remove(self, client) -> None:
        self._connections.discard(client)
