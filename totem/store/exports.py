"""A session read whole for an export, and a session written whole from an import.

The export reads in one transaction (a session that runs is read as it is stored at that
moment); the import writes in one, so a failure leaves nothing behind.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, TypedDict

from totem.clock import now_ms
from totem.rows import MessageRow, SessionRow, TodoItem
from totem.store.engine import Engine, records_of, row_of, written_row
from totem.store.parts import with_parts


class StoredSession(TypedDict):
    """A session as an export reads it: its row, its messages with their parts (none that an
    undo took back), the content of their attachments (None past the caps) and its task list."""

    session: SessionRow
    messages: list[MessageRow]
    attachments: dict[str, list[dict[str, Any]]]  # by message id: {id, name, mime, size, data}
    todos: list[TodoItem]


class ImportedPart(TypedDict):
    kind: str
    status: str
    text: str
    data: dict[str, Any]
    created: int
    updated: int
    closed: int


class ImportedAttachment(TypedDict):
    id: str  # the new id, already named by the message's data
    name: str
    mime: str
    data: bytes


class ImportedMessage(TypedDict):
    id: str  # the new id, already named by other messages' data
    role: str
    model: str | None
    usage: dict[str, Any] | None
    data: dict[str, Any]
    created: int
    finished: int | None
    parts: list[ImportedPart]
    attachments: list[ImportedAttachment]


class ImportedSession(TypedDict):
    name: str
    mode: str
    model: str | None
    status: str
    error: str | None
    created: int
    messages: list[ImportedMessage]
    todos: list[TodoItem]


class ExportRows(Engine):
    async def stored_session(self, sessionid: str, max_attachment_bytes: int,
                             max_total_bytes: int) -> StoredSession | None:
        """The session whole, or None when there is none. An attachment larger than
        `max_attachment_bytes`, or past `max_total_bytes` of those read before it, comes with
        `data` None (its content is not read)."""
        def run(c: sqlite3.Connection) -> StoredSession | None:
            session = row_of(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)), SessionRow)
            if session is None:
                return None
            rows = records_of(c.execute("SELECT * FROM messages WHERE sessionid = ? AND reverted = 0 ORDER BY id",
                                        (sessionid,)))
            messages = with_parts(c, rows)
            attachments: dict[str, list[dict[str, Any]]] = {}
            total = 0
            for info in records_of(c.execute("SELECT id, messageid, name, mime, size FROM attachments "
                                             "WHERE sessionid = ? ORDER BY id", (sessionid,))):
                data = None
                if info["size"] <= max_attachment_bytes and total + info["size"] <= max_total_bytes:
                    data = c.execute("SELECT data FROM attachments WHERE id = ?", (info["id"],)).fetchone()[0]
                    total += info["size"]
                attachments.setdefault(info.pop("messageid") or "", []).append(info | {"data": data})
            todos = c.execute("SELECT items FROM todos WHERE sessionid = ?", (sessionid,)).fetchone()
            return StoredSession(session=session, messages=messages, attachments=attachments,
                                 todos=json.loads(todos[0]) if todos else [])
        return await self.read(run)

    async def import_session(self, projectid: str, imported: ImportedSession) -> SessionRow | None:
        """A new session of a project holding `imported`, written in one transaction: never
        auto-accepting, with no rules, settings, snapshots or marker of its own yet. None when
        the project is gone."""
        newid = self.ids.new()

        def run(c: sqlite3.Connection) -> SessionRow | None:
            if c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None:
                return None
            stamp = now_ms()
            c.execute("INSERT INTO sessions (id, projectid, name, status, mode, autoaccept, model, error, created,"
                      " updated) VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?)",
                      (newid, projectid, imported["name"], imported["status"], imported["mode"], imported["model"],
                       imported["error"], imported["created"], stamp))
            for message in imported["messages"]:
                c.execute("INSERT INTO messages (id, sessionid, role, model, usage, data, created, finished)"
                          " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          (message["id"], newid, message["role"], message["model"],
                           None if message["usage"] is None else json.dumps(message["usage"]),
                           json.dumps(message["data"]), message["created"], message["finished"]))
                for part in message["parts"]:
                    c.execute("INSERT INTO parts (id, messageid, sessionid, kind, status, text, data, created,"
                              " updated, closed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                              (self.ids.new(), message["id"], newid, part["kind"], part["status"], part["text"],
                               json.dumps(part["data"]), part["created"], part["updated"], part["closed"]))
                for attachment in message["attachments"]:
                    c.execute("INSERT INTO attachments (id, sessionid, messageid, name, mime, size, data, created)"
                              " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                              (attachment["id"], newid, message["id"], attachment["name"], attachment["mime"],
                               len(attachment["data"]), attachment["data"], stamp))
            if imported["todos"]:
                c.execute("INSERT INTO todos (sessionid, items, updated) VALUES (?, ?, ?)",
                          (newid, json.dumps(imported["todos"]), stamp))
            return written_row(c.execute("SELECT * FROM sessions WHERE id = ?", (newid,)), SessionRow)
        return await self.write(run)
