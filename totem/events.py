"""The event protocol: every event type, what clients may send, and the hub that fans out.

Owns the wire names of the events (declared here once, one frozen dataclass each), their one
encoding (`encode()`), the validation of what clients send (`parse_client_message()`), who
follows which session, the fan-out rules (session lists to everyone, the rest to a session's
subscribers, in order) and the catch-up a new subscriber gets. It imports neither the
WebSocket transport nor the agent; two small seams stand for them:

- `Subscriber`: one connection as the hub sees it (`websocket.Connection` is one): it takes
  encoded frames without blocking, bounds its own queue and closes itself when it cannot keep up;
  its `backlog` says how far behind it is, for a producer that can wait (the terminal:
  `Hub.backlog`).
- `Replay`: what the rest of Totem tells the hub when a connection subscribes (whether the
  session exists, the parts still open with their text so far, the questions that wait); the
  composition root implements it over the store and the runs, where questions are held.

It does not authenticate or serve connections: routes.py authenticates, websocket.py serves.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol

from totem.clock import now_ms
from totem.rows import MessageRow, PartRow

log = logging.getLogger("totem.events")

MAX_SESSION_ID_CHARS = 64
MAX_SUBSCRIPTIONS = 256  # sessions one connection may follow at once
GOING_AWAY = 1001  # RFC 6455 close code: the server is stopping


# -- server → client events ------------------------------------------------------------------

_DATA_FIELDS: dict[type, tuple[str, ...]] = {}


def _data_fields(cls: type[Event]) -> tuple[str, ...]:
    # Computed once per event class: publish() runs for every streamed delta.
    names = _DATA_FIELDS.get(cls)
    if names is None:
        names = _DATA_FIELDS[cls] = tuple(f.name for f in fields(cls) if f.name != "sessionid")
    return names


@dataclass(frozen=True)
class Event:
    """An event of one session; `to_wire()` gives `{type, sessionid, ts, data}`."""

    sessionid: str
    TYPE: ClassVar[str] = ""
    BROADCAST: ClassVar[bool] = False  # sent to every connection, for the session lists

    def data(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _data_fields(type(self))}

    def to_wire(self, ts: int) -> dict[str, Any]:
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
    session: dict[str, Any]  # sessions.session_view
    TYPE: ClassVar[str] = "session.updated"
    BROADCAST: ClassVar[bool] = True


@dataclass(frozen=True)
class MessageCreated(Event):
    """A new user or assistant message."""
    message: MessageRow
    TYPE: ClassVar[str] = "message.created"


@dataclass(frozen=True)
class PartCreated(Event):
    """A part opened (text, reasoning, tool, knowledge, selfcheck, validation)."""
    part: PartRow
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
    part: PartRow
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
    input: dict[str, Any]
    patterns: list[str]
    reason: str = ""
    folder: str = ""
    commands: list[dict[str, Any]] = field(default_factory=list)  # [{"command", "shown", "patterns"}]
    # What a file tool would change: [{path, status, additions, deletions, patch}] (or {error}).
    preview: list[dict[str, Any]] = field(default_factory=list)
    # What a command could reach (sandbox.py): {confined: true, writes, network, layers,
    # missing} or {confined: false, why} (sandbox = off: in every question).
    reach: dict[str, Any] = field(default_factory=dict)
    once_only: bool = False  # "always" is refused: answer once or reject
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
    options: list[str]
    TYPE: ClassVar[str] = "question.ask"


@dataclass(frozen=True)
class QuestionReplied(Event):
    """A question of the ask tool was answered."""
    id: str
    TYPE: ClassVar[str] = "question.replied"


@dataclass(frozen=True)
class TodoUpdated(Event):
    """The task list of the session changed."""
    items: list[Any]
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
    paths: list[str] | None = None
    TYPE: ClassVar[str] = "diff.updated"

    def data(self) -> dict[str, Any]:
        return {"path": self.path} if self.paths is None else {"paths": self.paths}

    @classmethod
    def of(cls, sessionid: str, paths: list[str]) -> DiffUpdated:
        """`{path}` for one file, `{paths}` for several (each once, in order)."""
        unique = list(dict.fromkeys(paths))
        return cls(sessionid, path=unique[0]) if len(unique) == 1 else cls(sessionid, paths=unique)


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



def encode(event: Event, ts: int | None = None) -> bytes:
    """The one encoding of an event as a WebSocket text frame: compact JSON in UTF-8.

    Called once per event, whatever the number of subscribers: they all queue the same bytes.
    Text with a lone surrogate (a model may stream one) cannot be UTF-8; it is sent \\u-escaped.
    """
    wire = event.to_wire(now_ms() if ts is None else ts)
    try:
        return json.dumps(wire, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(wire, separators=(",", ":")).encode("ascii")


# -- client → server messages ---------------------------------------------------------------

class ProtocolError(Exception):
    """A client frame that is not a message of the protocol, or one the hub refuses."""


@dataclass(frozen=True)
class Subscribe:
    sessionid: str
    TYPE: ClassVar[str] = "subscribe"


@dataclass(frozen=True)
class Unsubscribe:
    sessionid: str
    TYPE: ClassVar[str] = "unsubscribe"


ClientMessage = Subscribe | Unsubscribe
CLIENT_TYPES: dict[str, type[ClientMessage]] = {cls.TYPE: cls for cls in (Subscribe, Unsubscribe)}
_CLIENT_FIELDS = frozenset(("type", "sessionid"))


def parse_client_message(payload: bytes | str) -> ClientMessage:
    """Validate one client message (the payload of a text message, UTF-8 bytes or text).

    Checks the type of every field; raises ProtocolError saying what is wrong, never anything else.
    """
    try:
        text = payload.decode("utf-8") if isinstance(payload, bytes) else payload
        message = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, a too long int
        raise ProtocolError("a message must be JSON text") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a JSON object")
    kind = message.get("type")
    if not isinstance(kind, str) or kind not in CLIENT_TYPES:
        raise ProtocolError(f"type must be one of {', '.join(CLIENT_TYPES)}")
    sessionid = message.get("sessionid")
    if not isinstance(sessionid, str) or not sessionid or len(sessionid) > MAX_SESSION_ID_CHARS:
        raise ProtocolError("sessionid must be a session id")
    unknown = message.keys() - _CLIENT_FIELDS
    if unknown:
        raise ProtocolError(f"unknown field {sorted(unknown)[0][:40]}")
    return CLIENT_TYPES[kind](sessionid)


# -- the seams -------------------------------------------------------------------------------

class Subscriber(Protocol):
    """One connection as the hub sees it; `websocket.Connection` is one.

    The hub keeps what a subscriber follows; the subscriber keeps its own bounded queue."""

    def send(self, frame: bytes) -> None:
        """Queue one encoded frame without blocking. A subscriber that cannot take it (its
        queue is full, in frames or in bytes) closes itself (1013) and drops the frame."""

    def close(self, code: int, reason: str) -> None:
        """Start closing with a WebSocket close code."""

    @property
    def backlog(self) -> int:
        """The bytes sent to it that the client has not taken yet."""

    async def wait_closed(self) -> None:
        """Return once the connection is gone."""


class Replay(Protocol):
    """What the hub asks the rest of Totem when a connection subscribes to a session.

    The composition root (`app.py`) implements it over the store and the runs, so the hub
    imports neither; the questions that wait are held only where they are answered."""

    async def session_exists(self, sessionid: str) -> bool:
        """Whether the session is stored (a removed one is not)."""

    def open_parts(self, sessionid: str) -> list[PartRow]:
        """The parts of the session's run still streaming, each with its text so far."""

    def waiting_asks(self, sessionid: str) -> list[Event]:
        """The permission.ask and question.ask events that wait for an answer, oldest first."""


# -- the hub ---------------------------------------------------------------------------------

class Hub:
    """Fans events out to subscribers, keeps who follows which session and the questions that wait."""

    def __init__(self, replay: Replay):
        self._replay = replay
        self._follows: dict[Subscriber, set[str]] = {}  # every connection -> the sessions it follows
        self._followers: dict[str, set[Subscriber]] = {}  # sessionid -> the connections that follow it

    @property
    def connection_count(self) -> int:
        return len(self._follows)

    def subscribed(self, sessionid: str) -> bool:
        """Whether some connection follows the session."""
        return bool(self._followers.get(sessionid))

    def subscriber_count(self, sessionid: str) -> int:
        """How many connections follow the session."""
        return len(self._followers.get(sessionid, ()))

    def publish(self, event: Event) -> None:
        """Send an event to whoever should have it, in publishing order. Never blocks.

        The event is encoded once (not at all when nobody is to get it or keep it); every
        subscriber queues the same bytes."""
        # A copy: a subscriber that closes itself is detached later, but never mid-loop.
        clients = tuple(self._follows if event.BROADCAST else self._followers.get(event.sessionid, ()))
        if not clients:
            return
        frame = encode(event)
        for client in clients:
            client.send(frame)

    def backlog(self, sessionid: str) -> int:
        """The largest backlog among the connections that follow the session (0 for none): a
        producer that can wait, the terminal, waits while it is high rather than have its
        slowest viewer dropped."""
        return max((getattr(client, "backlog", 0) for client in self._followers.get(sessionid, ())), default=0)

    def catch_up(self, sessionid: str) -> list[bytes]:
        """What a new subscriber gets first: the parts still open (as part.created with their text
        so far, deltas follow from there) and the questions that wait."""
        stamp = now_ms()
        frames = [encode(PartCreated(sessionid, part), stamp) for part in self._replay.open_parts(sessionid)]
        return frames + [encode(ask, stamp) for ask in self._replay.waiting_asks(sessionid)]

    # -- what connections do ----------------------------------------------------------------

    def attach(self, client: Subscriber) -> None:
        """A connection opened: it gets the broadcast events from now on."""
        self._follows.setdefault(client, set())

    def detach(self, client: Subscriber) -> None:
        """A connection is gone: forget it and what it followed."""
        for sessionid in self._follows.pop(client, ()):
            self._drop_follower(sessionid, client)

    async def receive(self, client: Subscriber, payload: bytes | str) -> None:
        """Act on one client message. Raises ProtocolError (the connection closes with 1008)."""
        message = parse_client_message(payload)
        if isinstance(message, Unsubscribe):
            self.unsubscribe(client, message.sessionid)
        else:
            await self.subscribe(client, message.sessionid)

    async def subscribe(self, client: Subscriber, sessionid: str) -> None:
        """Follow a session: the catch-up first, then its events as they are published.

        Idempotent: a session the connection already follows sends nothing new. An unknown
        session answers an `error` event and subscribes nothing. Raises ProtocolError past
        MAX_SUBSCRIPTIONS."""
        followed = self._follows.get(client)
        if followed is None or sessionid in followed:
            return
        if len(followed) >= MAX_SUBSCRIPTIONS:
            raise ProtocolError(f"more than {MAX_SUBSCRIPTIONS} subscriptions")
        if not await self._replay.session_exists(sessionid):
            client.send(encode(RunError(sessionid, f"no session {sessionid}", False)))
            return
        if self._follows.get(client) is not followed or sessionid in followed:
            return  # closed, or subscribed by a message that overtook this one, while we waited
        # No await from here: the catch-up and the subscription are one step, so no event of the
        # session falls between them.
        followed.add(sessionid)
        self._followers.setdefault(sessionid, set()).add(client)
        for frame in self.catch_up(sessionid):
            client.send(frame)

    def unsubscribe(self, client: Subscriber, sessionid: str) -> None:
        followed = self._follows.get(client)
        if followed is not None and sessionid in followed:
            followed.discard(sessionid)
            self._drop_follower(sessionid, client)

    def forget_session(self, sessionid: str) -> None:
        """Drop what is kept for a removed session: its subscriptions."""
        for client in self._followers.pop(sessionid, ()):
            followed = self._follows.get(client)
            if followed is not None:
                followed.discard(sessionid)

    def _drop_follower(self, sessionid: str, client: Subscriber) -> None:
        followers = self._followers.get(sessionid)
        if followers is not None:
            followers.discard(client)
            if not followers:
                del self._followers[sessionid]

    # -- the server's life ------------------------------------------------------------------

    async def close_all(self) -> None:
        """Close every connection (the server is stopping)."""
        clients = tuple(self._follows)
        for client in clients:
            client.close(GOING_AWAY, "server stopping")
        await asyncio.gather(*(client.wait_closed() for client in clients))
