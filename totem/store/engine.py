"""The engine under every table: one writer thread fed by a queue, each batch inside `BEGIN
IMMEDIATE`, and a small pool of reader threads with one connection each. Results come back to
the event loop as futures, so nothing here blocks the loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, TypeVarTuple, cast

from totem.clock import IdMaker
from totem.errors import StorageFull, out_of_space
from totem.rows import InterruptedChange
from totem.store.schema import DATABASE_FILE, connect, interrupted_changes, migrate, recover_after_crash

READ_THREADS = 2
MAX_WRITE_BATCH = 256
MAX_SQL_VARIABLES = 900  # ids per IN (...) list, under every sqlite build's limit
log = logging.getLogger("totem.store")

T = TypeVar("T")
R = TypeVar("R", bound=Mapping[str, Any])
Args = TypeVarTuple("Args")
# A row as sqlite gives it, before its JSON columns are decoded.
Record = dict[str, Any]
# What the writer is handed: fn, its arguments, and where its result goes.
_Job = tuple[Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, asyncio.Future[Any]]


class Engine:
    """The database of one Totem process: its file, its writer and its readers."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, DATABASE_FILE)
        self.ids = IdMaker()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._local = threading.local()
        self._readers = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="totem-read")
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_lock = threading.Lock()
        # Tool parts a crash left open with a journal of file changes: {id, data, root}, for the
        # restart to record from the disk whether the change landed (agent/recovery.py).
        self.interrupted: list[InterruptedChange] = []
        self._full_since: float | None = None  # since when writes fail for want of space

    async def open(self) -> None:
        """Create or migrate the database and start the writer. Raises RuntimeError, sqlite3.Error."""
        await asyncio.to_thread(self._open_sync)

    def _open_sync(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        conn = connect(self.path)
        try:
            migrate(conn)
            conn.execute("BEGIN IMMEDIATE")
            self.interrupted = interrupted_changes(conn)
            recover_after_crash(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        self._writer = threading.Thread(target=self._write_loop, args=(conn,), name="totem-write", daemon=True)
        self._writer.start()

    async def close(self) -> None:
        if self._writer is not None:
            self._jobs.put(None)
            await asyncio.to_thread(self._writer.join)
            self._writer = None
        await asyncio.to_thread(self._readers.shutdown, True)
        with self._reader_lock:
            for conn in self._reader_conns:
                conn.close()
            self._reader_conns.clear()

    async def read(self, fn: Callable[[sqlite3.Connection, *Args], T], *args: *Args) -> T:
        """Run fn(conn, *args) on a reader thread and return its result."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._read_sync, fn, args)

    def _read_sync(self, fn: Callable[[sqlite3.Connection, *Args], T], args: tuple[*Args]) -> T:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
            with self._reader_lock:
                self._reader_conns.append(conn)
        return fn(conn, *args)

    async def write(self, fn: Callable[[sqlite3.Connection, *Args], T], *args: *Args) -> T:
        """Run fn(conn, *args) in the writer's transaction and return its result.

        Raises what fn raised (its changes are rolled back) or sqlite3.Error from the commit.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((fn, args, loop, future))
        try:
            result = await future
        except sqlite3.Error as exc:
            if out_of_space(exc):
                raise self._full() from None
            raise
        if self._full_since is not None:
            log.warning("the database takes writes again (%s)", os.path.dirname(self.path))
            self._full_since = None
        return result

    def _full(self) -> StorageFull:
        """The error of a write refused for want of space, logged once until writes work again."""
        full = StorageFull(os.path.dirname(self.path))
        if self._full_since is None:
            self._full_since = time.monotonic()
            log.warning("the database cannot grow: %s; writes fail until there is space", full.errors[0][1])
        return full

    def _write_loop(self, conn: sqlite3.Connection) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                break
            batch = [job]
            stop = False
            while len(batch) < MAX_WRITE_BATCH:
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            self._run_batch(conn, batch)
            if stop:
                break
        conn.close()

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job]) -> None:
        results: list[tuple[bool, Any]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, args, _loop, _future in batch:
                conn.execute("SAVEPOINT job")
                try:
                    results.append((True, fn(conn, *args)))
                    conn.execute("RELEASE job")
                except Exception as exc:  # handed to the caller; the batch goes on
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    results.append((False, exc))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            results = [(False, exc)] * len(batch)
        for (ok, value), (_fn, _args, loop, future) in zip(results, batch, strict=True):
            loop.call_soon_threadsafe(_settle, future, ok, value)

    async def count_rows(self, table: str, column: str, value: str) -> int:
        if table not in {"sessions", "messages", "parts", "rules", "settings", "schedules",
                         "attachments", "snapshots", "todos"}:
            raise ValueError(f"unknown table {table}")
        if column not in {"projectid", "sessionid", "messageid"}:
            raise ValueError(f"unknown column {column}")
        def run(c: sqlite3.Connection) -> int:
            count: int = c.execute(f"SELECT count(*) FROM {table} WHERE {column} = ?", (value,)).fetchone()[0]
            return count
        return await self.read(run)


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def as_row(record: Mapping[str, Any], kind: type[R]) -> R:
    """A row of the database as the TypedDict of its table (`kind`, from totem/rows.py): the one
    place where the columns sqlite returns are taken to be what the schema declares."""
    return cast(R, dict(record))


def rows_of(cursor: sqlite3.Cursor, kind: type[R]) -> list[R]:
    return [as_row(row, kind) for row in cursor.fetchall()]


def row_of(cursor: sqlite3.Cursor, kind: type[R]) -> R | None:
    row = cursor.fetchone()
    return as_row(row, kind) if row is not None else None


def written_row(cursor: sqlite3.Cursor, kind: type[R]) -> R:
    """The row that this transaction has just written (so there is one)."""
    row = cursor.fetchone()
    if row is None:
        raise LookupError("a row written in this transaction is not there")
    return as_row(row, kind)


def records_of(cursor: sqlite3.Cursor) -> list[Record]:
    """The rows as sqlite gives them, for a decoder to make typed rows of."""
    return [dict(row) for row in cursor.fetchall()]


def record_of(cursor: sqlite3.Cursor) -> Record | None:
    row = cursor.fetchone()
    return dict(row) if row is not None else None


def written_record(cursor: sqlite3.Cursor) -> Record:
    """The record that this transaction has just written (so there is one)."""
    row = cursor.fetchone()
    if row is None:
        raise LookupError("a row written in this transaction is not there")
    return dict(row)
