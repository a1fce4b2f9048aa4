"""Where a part becomes a store write plus an event: open, append, update, close, and the flush.

Owns the parts that are still open (per session), their text so far, and the rule that streamed
text is stored at most `FLUSH_AFTER_S` after it arrived (DESIGN.md, Storage): the flusher sleeps
until the oldest unflushed delta is that old, not a fixed second after its last flush, so a
busy loop cannot stretch the promise. A flush stores only the text appended since the last one
(a new piece of the part, `Store.append_part_texts`), never the whole part again: a long answer
streamed slowly writes its text about once. Events leave after the write they announce
(part.created after the row exists, part.updated and part.closed after the final write); a
delta is published at once, since its text is in memory and reaches the store within the bound.

Must not: decide anything about tools or models, or scrub (the caller hands it scrubbed text,
and a tool's live output passes the part's own `scrub` stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from totem.errors import out_of_space
from totem.events import PartClosed, PartCreated, PartDelta, PartUpdated
from totem.rows import PartRow
from totem.store import Store

log = logging.getLogger("totem.agent")

# Below the one-second promise by the time a write may wait behind others in the store's queue.
FLUSH_AFTER_S = 0.75


@dataclass
class OpenPart:
    """A part that is not complete yet, with its text so far."""

    part: PartRow
    sessionid: str
    pieces: list[str] = field(default_factory=list)
    size: int = 0  # characters of text so far
    flushed: int = 0  # characters already stored as pieces
    since: float | None = None  # monotonic time of the oldest delta not stored yet
    torn: bool = False  # a flush failed: the close stores the whole text again
    scrub: Any = None  # the vault's stream scrubber of a tool's live output

    @property
    def id(self) -> str:
        return self.part["id"]

    @property
    def data(self) -> dict:
        return self.part["data"]

    def text(self) -> str:
        if len(self.pieces) > 1:
            self.pieces[:] = ["".join(self.pieces)]
        return self.pieces[0] if self.pieces else ""


class Recorder:
    """The open parts of every run, and their writes and events."""

    def __init__(self, store: Store, hub, flush_after_s: float = FLUSH_AFTER_S):
        self.store = store
        self.hub = hub
        self.flush_after_s = flush_after_s
        self._open: dict[str, OpenPart] = {}
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task | None = None

    def open_parts(self, sessionid: str) -> list[OpenPart]:
        return [open_part for open_part in self._open.values() if open_part.sessionid == sessionid]

    async def open(self, sessionid: str, messageid: str, kind: str, status: str = "streaming",
                   data: dict | None = None) -> OpenPart:
        part = await self.store.add_part(messageid, sessionid, kind, status, data=data)
        open_part = OpenPart(part, sessionid)
        self._open[open_part.id] = open_part
        self.hub.publish(PartCreated(sessionid, part))
        return open_part

    async def add_whole(self, sessionid: str, messageid: str, kind: str, text: str, status: str = "done",
                        data: dict | None = None) -> PartRow:
        """A part stored complete at once (a reviewed answer's text, a validation): one
        part.created with all of it, then part.closed."""
        part = await self.store.add_part(messageid, sessionid, kind, status, text=text, data=data, closed=True)
        self.hub.publish(PartCreated(sessionid, part))
        self.hub.publish(PartClosed(sessionid, part["id"]))
        return part

    def append(self, open_part: OpenPart, text: str) -> None:
        """Add streamed text: published now, stored within the flush bound."""
        if not text or open_part.id not in self._open:
            return
        open_part.pieces.append(text)
        open_part.size += len(text)
        if open_part.since is None:
            open_part.since = time.monotonic()
            self._wake.set()
            self._ensure_flusher()
        self.hub.publish(PartDelta(open_part.sessionid, open_part.id, text))

    async def update(self, open_part: OpenPart, status: str) -> None:
        """Store a new status with the part's data; part.updated after the write."""
        part = await self.store.update_part(open_part.id, status=status, data=open_part.data)
        if part is not None:
            part["data"] = open_part.data  # the run keeps filling in the same record
            open_part.part = part
            self.hub.publish(PartUpdated(open_part.sessionid, part))

    async def close(self, open_part: OpenPart, status: str) -> None:
        """Store the part complete with its final status: part.updated, then part.closed."""
        if self._open.pop(open_part.id, None) is None:
            return
        if open_part.scrub is not None:  # what the scrubber held back
            tail = open_part.scrub.flush()
            if tail:
                open_part.pieces.append(tail)
                open_part.size += len(tail)
                self.hub.publish(PartDelta(open_part.sessionid, open_part.id, tail))
        text = open_part.text()
        if open_part.torn or not open_part.flushed:
            final = {"text": text}
        else:
            final = {"append": text[open_part.flushed:]}
        part = await self.store.update_part(open_part.id, status=status, data=open_part.data, close=True,
                                            **final)
        if part is not None:
            self.hub.publish(PartUpdated(open_part.sessionid, part))
        self.hub.publish(PartClosed(open_part.sessionid, open_part.id))

    async def stop(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None

    def _ensure_flusher(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_loop(), name="flush parts")

    async def _flush_loop(self) -> None:
        while True:
            pending = [open_part.since for open_part in self._open.values() if open_part.since is not None]
            if not pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            due = min(pending) + self.flush_after_s
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.flush()

    async def flush(self) -> None:
        """Store the text appended to every open part since its last flush, in one write."""
        batch = []
        for open_part in self._open.values():
            if open_part.since is None:
                continue
            text = open_part.text()
            batch.append((open_part, open_part.flushed, text[open_part.flushed:]))
            # Moved before the write: a close queued after it stores only what follows.
            open_part.flushed, open_part.since = open_part.size, None
        if not batch:
            return
        try:
            await self.store.append_part_texts([(open_part.id, text) for open_part, _, text in batch])
        except Exception as exc:
            if not out_of_space(exc):  # a full disk is logged once, by the store
                log.exception("flushing streamed text failed")
            for open_part, _, _ in batch:
                open_part.torn = True
