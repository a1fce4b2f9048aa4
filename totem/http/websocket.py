"""One WebSocket connection of `/ws/`: websockets' Sans-I/O protocol driven by our own streams.

Owns the handshake (parsed by the protocol from the head that httpd read), the framing, the
connection's outgoing queue (bounded in frames and in bytes), pings, and closing with the right
code. What a message means and who gets which event is the Hub's (`events.py`): the connection
hands it each text message and takes the frames it is sent, through the hub's public methods
only. Imported with the first connection (see `app.py`), so start-up does not pay for websockets.

The frames that wait in the queue, and those handed to the transport until the client has
taken them, hold a share of the server's send budget (`httpd.SendBudget`, shared with the HTTP
answers); a frame that does not fit in it while others wait closes the client (1013) as its own
bounds do. `backlog` tells the hub how far behind the client is (the terminal waits on it).

Close codes: 1008 a message that is not one of the protocol (one log line each), 1003 a binary
message, 1009 a message over MAX_CLIENT_MESSAGE_BYTES, 1013 a client that fell behind either
bound of its queue or the send budget (it reconnects and reads `Sessions|messages`), 1011 a
missed pong or an internal error, 1001 the server stopping.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request as WsRequest
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.typing import BytesLike

from totem.events import Hub, ProtocolError
from totem.http.httpd import SendBudget

log = logging.getLogger("totem.websocket")

MAX_CLIENT_MESSAGE_BYTES = 64 * 1024
CLOSE_TIMEOUT_S = 2.0
READ_CHUNK_BYTES = 64 * 1024
MAX_REASON_CHARS = 120  # a close reason must fit in 123 bytes


@dataclass(frozen=True)
class Limits:
    """The bounds of one connection (config keys wsqueue, wsqueuebytes, wsping)."""

    queue_frames: int  # frames waiting to be written before the client is closed (1013)
    queue_bytes: int  # bytes of those frames before the client is closed (1013)
    ping_interval: float  # seconds between pings, and how long a pong may take


class TextFrames:
    """The wire form of the events sent, made once for all the connections that get the same
    event: the hub hands every subscriber the same bytes object, and a server's frames are not
    masked (nor compressed: no extension is negotiated), so they are the same on every one."""

    def __init__(self) -> None:
        self._payload: bytes | None = None  # held, so its identity cannot be taken by another
        self._framed = b""

    def framed(self, payload: bytes) -> bytes:
        if payload is not self._payload:
            self._payload, self._framed = payload, Frame(Opcode.TEXT, payload).serialize(mask=False)
        return self._framed


async def serve(hub: Hub, limits: Limits, request: Any, reader: asyncio.StreamReader,
                writer: asyncio.StreamWriter, leftover: bytes, extra_headers: Sequence[tuple[str, str]],
                frames: TextFrames | None = None, budget: SendBudget | None = None) -> None:
    """Run one WebSocket connection until it closes. The request is already authorized."""
    await Connection(hub, limits, reader, writer, frames, budget).run(request, leftover, extra_headers)


class Connection:
    """One WebSocket connection: its protocol state and its bounded outgoing queue.

    To the hub it is an `events.Subscriber`: `send()`, `close()`, `wait_closed()`."""

    def __init__(self, hub: Hub, limits: Limits, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 frames: TextFrames | None = None, budget: SendBudget | None = None):
        self.hub = hub
        self.budget = budget or SendBudget(limits.queue_bytes)
        self.frames = frames or TextFrames()
        self.limits = limits
        self.reader = reader
        self.writer = writer
        self.protocol = ServerProtocol(max_size=MAX_CLIENT_MESSAGE_BYTES)
        # The transport pauses writing exactly when a write leaves more than this in its buffer.
        self._high_water = writer.transport.get_write_buffer_limits()[1]
        self.finished = asyncio.Event()
        self._queue: deque[bytes] = deque()
        self._queued_bytes = 0
        self._charged = 0  # bytes of the send budget held: the queue's and those written since the last drain
        self._draining = False  # the client is behind: the sender waits for it, frames stay queued
        self._ready = asyncio.Event()  # set when the sender must wait for the client, or stop
        self._pong = asyncio.Event()
        self._fragments: list[BytesLike] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # -- events.Subscriber ----------------------------------------------------------------

    def send(self, frame: bytes) -> None:
        """Write an encoded text frame now, or queue it while the client is behind (the sender
        waits for it); past either bound of the queue the client is closed (1013) at once.

        A frame bigger than the byte bound on its own (a long open part) is still taken while
        nothing else waits, so one catch-up never closes a client that reads."""
        if self.protocol.state is not State.OPEN:
            return
        if not self._draining:
            # The protocol has nothing pending (each of its sends is flushed at once), so the
            # frame may go around it; a callback per frame would cost a loop turn of its own.
            self.writer.write(self.frames.framed(frame))
            self._note_backlog()
            return
        if len(self._queue) >= self.limits.queue_frames or (
                self._queue and self._queued_bytes + len(frame) > self.limits.queue_bytes):
            # A client that cannot keep up is dropped; it reloads the stored state on reconnect.
            log.info("WebSocket client too slow, closed (1013): %d frames, %d bytes waiting",
                     len(self._queue), self._queued_bytes)
            self.close(CloseCode.TRY_AGAIN_LATER, "too slow: reconnect and reload")
            return
        # The first frame to wait is taken even beyond the budget (one frame per connection).
        if not self.budget.take_now(len(frame)):
            if self._queue:
                log.info("WebSocket client behind while the send budget is spent, closed (1013): "
                         "%d frames, %d bytes waiting", len(self._queue), self._queued_bytes)
                self.close(CloseCode.TRY_AGAIN_LATER, "server busy: reconnect and reload")
                return
            self.budget.force(len(frame))
        self._charged += len(frame)
        self._queue.append(frame)
        self._queued_bytes += len(frame)

    @property
    def backlog(self) -> int:
        """The bytes sent to this client that it has not taken yet: queued, or in the transport."""
        return self._queued_bytes + self.writer.transport.get_write_buffer_size()

    def close(self, code: int, reason: str) -> None:
        if self.protocol.state is State.OPEN:
            self._queue.clear()  # what was not written yet is never sent: free it now
            self._queued_bytes = 0
            self._uncharge()
            self._ready.set()  # the sender sees the state and stops
            self.protocol.send_close(code, reason[:MAX_REASON_CHARS])
            self._flush()
            # A client that never answers the close frame is cut off.
            asyncio.get_running_loop().call_later(CLOSE_TIMEOUT_S, self._abort)

    async def wait_closed(self) -> None:
        await self.finished.wait()

    # -- the connection's life ------------------------------------------------------------

    def _refuse(self, code: int, reason: str) -> None:
        """Close for a message the client should not have sent, with one log line."""
        log.warning("WebSocket message refused, closed (%d): %s", code, reason[:MAX_REASON_CHARS])
        self.close(code, reason)

    def _uncharge(self) -> None:
        self.budget.give(self._charged)
        self._charged = 0

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

    async def run(self, request: Any, leftover: bytes, extra_headers: Sequence[tuple[str, str]]) -> None:
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
        self.hub.attach(self)
        try:
            sender = asyncio.create_task(self._send_loop())
            pinger = asyncio.create_task(self._ping_loop())
            self._tasks.update((sender, pinger))
            if leftover:
                self.protocol.receive_data(leftover)
                await self._handle_events()
            await self._receive_loop()
        finally:
            self.hub.detach(self)
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._queue.clear()
            self._queued_bytes = 0
            self._uncharge()
            await self._shutdown()

    async def _receive_loop(self) -> None:
        while self.protocol.state is not State.CLOSED:
            try:
                timeout = CLOSE_TIMEOUT_S if self.protocol.state is State.CLOSING else None
                data = await asyncio.wait_for(self.reader.read(READ_CHUNK_BYTES), timeout)
            except (TimeoutError, ConnectionError):
                return
            if data:
                self.protocol.receive_data(data)
            else:
                self.protocol.receive_eof()
            await self._handle_events()
            if not data:
                return

    async def _handle_events(self) -> None:
        for event in self.protocol.events_received():
            if not isinstance(event, Frame):
                continue
            if event.opcode is Opcode.PONG:
                self._pong.set()
            elif event.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                await self._handle_data_frame(event)
        self._flush()

    async def _handle_data_frame(self, frame: Frame) -> None:
        if self.protocol.state is not State.OPEN:
            return  # closing: what the client still sends is not acted on
        if frame.opcode is Opcode.BINARY:
            self._refuse(CloseCode.UNSUPPORTED_DATA, "only text messages")
            return
        if frame.opcode is Opcode.TEXT:
            self._fragments = []
        if self._fragments is None:
            return
        self._fragments.append(frame.data)
        if sum(map(len, self._fragments)) > MAX_CLIENT_MESSAGE_BYTES:
            self._refuse(CloseCode.MESSAGE_TOO_BIG, "message too big")
            return
        if not frame.fin:
            return
        payload, self._fragments = b"".join(self._fragments), None
        try:
            await self.hub.receive(self, payload)
        except ProtocolError as exc:
            self._refuse(CloseCode.POLICY_VIOLATION, str(exc))
        except Exception:
            log.exception("WebSocket message failed")
            self.close(CloseCode.INTERNAL_ERROR, "internal error")

    def _write_out(self) -> None:
        """Write everything that waits at once, then see whether the client is behind again."""
        frames = []
        while self._queue:
            frame = self._queue.popleft()
            self._queued_bytes -= len(frame)
            frames.append(self.frames.framed(frame))
        self.writer.write(b"".join(frames))
        self._note_backlog()
        if not self._draining:  # the transport took it all within its high-water mark
            self._uncharge()

    def _note_backlog(self) -> None:
        """Past the transport's high-water mark (the client is not reading) the sender takes
        over: it waits until the client has read enough, and frames wait in the bounded queue."""
        if self.writer.transport.get_write_buffer_size() > self._high_water:
            self._draining = True
            self._ready.set()

    async def _send_loop(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            if self.protocol.state is not State.OPEN:
                return
            try:
                await self.writer.drain()
            except ConnectionError:
                return
            # What was written before the drain has been taken (but the low-water mark).
            written = self._charged - self._queued_bytes
            self.budget.give(written)
            self._charged -= written
            self._draining = False
            if self._queue:
                self._write_out()

    async def _ping_loop(self) -> None:
        while self.protocol.state is State.OPEN:
            await asyncio.sleep(self.limits.ping_interval)
            self._pong.clear()
            self.protocol.send_ping(os.urandom(4))
            self._flush()
            try:
                await asyncio.wait_for(self._pong.wait(), self.limits.ping_interval)
            except TimeoutError:
                self.close(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")
                self.writer.close()
                return

    async def _shutdown(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), CLOSE_TIMEOUT_S)
        except (TimeoutError, ConnectionError):
            self.writer.transport.abort()
        self.finished.set()
