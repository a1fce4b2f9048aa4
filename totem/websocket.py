"""One WebSocket connection of `/ws/`: websockets' Sans-I/O protocol driven by our own streams.

Owns the handshake (parsed by the protocol from the head that httpd read), the framing, the
connection's subscriptions and bounded outgoing queue, pings, and closing with the right code on
a bad frame. What a frame means is decided by `events.parse_client_message`; who gets which
event is the Hub's. Imported with the first connection, so start-up does not pay for websockets.
"""

from __future__ import annotations

import asyncio
import json
import os

from websockets.frames import CloseCode, Opcode
from websockets.http11 import Request as WsRequest
from websockets.protocol import State
from websockets.server import ServerProtocol

from .events import Hub, ProtocolError, RunError, Unsubscribe, parse_client_message
from .store import now_ms

MAX_CLIENT_MESSAGE_BYTES = 64 * 1024
MAX_SUBSCRIPTIONS = 256
CLOSE_TIMEOUT_S = 2.0
READ_CHUNK_BYTES = 64 * 1024


class Connection:
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
        # One write for all pending frames: a burst of deltas costs one system call, not one each.
        chunks = self.protocol.data_to_send()
        data = b"".join(chunks)
        if data:
            self.writer.write(data)
        if b"" in chunks and not self.writer.is_closing():
            self.writer.close()  # the protocol asks for the end of the TCP stream

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
        for frame in self.hub.catch_up(sessionid):
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
