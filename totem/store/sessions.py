"""The sessions table, a session's todo list, and the copy of a session that a fork makes."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from totem.clock import now_ms
from totem.rows import SessionRow, TodoItem
from totem.store.engine import Engine, records_of, row_of, rows_of, written_row
from totem.store.parts import join_pieces


class SessionRows(Engine):
    async def child_sessions(self, sessionid: str) -> list[str]:
        """The ids of the sessions that a session's runs handed work to (sub-agents)."""
        def run(c: sqlite3.Connection) -> list[str]:
            return [row[0] for row in c.execute("SELECT id FROM sessions WHERE parent = ? ORDER BY created",
                                                (sessionid,))]
        return await self.read(run)

    async def list_sessions(self, projectid: str) -> list[SessionRow]:
        """Every session of a project, the most recently changed first."""
        def run(c: sqlite3.Connection) -> list[SessionRow]:
            return rows_of(c.execute("SELECT * FROM sessions WHERE projectid = ? ORDER BY updated DESC, id DESC",
                                     (projectid,)), SessionRow)
        return await self.read(run)

    async def session_page(self, projectid: str, limit: int,
                           before: str | None = None) -> tuple[list[SessionRow], bool] | None:
        """`(sessions, more)`: at most `limit` sessions of a project, the most recently changed
        first, after the session `before` in that order. None when there is no such project, or
        `before` names no session of it. Read from the index sessions_by_project alone."""
        def run(c: sqlite3.Connection) -> tuple[list[SessionRow], bool] | None:
            if c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None:
                return None
            if before is None:
                rows = rows_of(c.execute(
                    "SELECT * FROM sessions WHERE projectid = ? ORDER BY updated DESC, id DESC LIMIT ?",
                    (projectid, limit + 1)), SessionRow)
            else:
                anchor = c.execute("SELECT updated, id FROM sessions WHERE id = ? AND projectid = ?",
                                   (before, projectid)).fetchone()
                if anchor is None:
                    return None
                rows = rows_of(c.execute(
                    "SELECT * FROM sessions WHERE projectid = ? AND (updated, id) < (?, ?) "
                    "ORDER BY updated DESC, id DESC LIMIT ?", (projectid, anchor[0], anchor[1], limit + 1)), SessionRow)
            return rows[:limit], len(rows) > limit
        return await self.read(run)

    async def get_session(self, sessionid: str) -> SessionRow | None:
        def run(c: sqlite3.Connection) -> SessionRow | None:
            return row_of(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)), SessionRow)
        return await self.read(run)

    async def create_session(self, projectid: str, name: str, parent: str | None = None,
                             worktree: str | None = None, mode: str = "build") -> SessionRow | None:
        """A new idle session (a sub-agent's with its `parent`, working in the parent's
        `worktree`), or None when the project is gone."""
        newid = self.ids.new()

        def run(c: sqlite3.Connection) -> SessionRow | None:
            if c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None:
                return None
            stamp = now_ms()
            c.execute("INSERT INTO sessions (id, projectid, name, created, updated, parent, worktree, mode) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (newid, projectid, name, stamp, stamp, parent, worktree, mode))
            return written_row(c.execute("SELECT * FROM sessions WHERE id = ?", (newid,)), SessionRow)
        return await self.write(run)

    async def create_scheduled_session(self, projectid: str, name: str, scheduleid: str) -> SessionRow | None:
        """A new idle session marked as a run of a schedule, or None when the project is gone."""
        newid = self.ids.new()

        def run(c: sqlite3.Connection) -> SessionRow | None:
            if c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None:
                return None
            stamp = now_ms()
            c.execute("INSERT INTO sessions (id, projectid, name, schedule, created, updated)"
                      " VALUES (?, ?, ?, ?, ?, ?)", (newid, projectid, name, scheduleid, stamp, stamp))
            return written_row(c.execute("SELECT * FROM sessions WHERE id = ?", (newid,)), SessionRow)
        return await self.write(run)

    async def set_session_worktree(self, sessionid: str, path: str | None) -> SessionRow | None:
        def run(c: sqlite3.Connection) -> SessionRow | None:
            c.execute("UPDATE sessions SET worktree = ?, updated = ? WHERE id = ?", (path, now_ms(), sessionid))
            return row_of(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)), SessionRow)
        return await self.write(run)

    async def rename_session(self, sessionid: str, name: str) -> SessionRow | None:
        def run(c: sqlite3.Connection) -> SessionRow | None:
            c.execute("UPDATE sessions SET name = ?, updated = ? WHERE id = ?", (name, now_ms(), sessionid))
            return row_of(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)), SessionRow)
        return await self.write(run)

    async def set_session_status(self, sessionid: str, status: str, error: str | None = None) -> SessionRow | None:
        """Set the status; `error` says why a run failed (None clears it)."""
        def run(c: sqlite3.Connection) -> SessionRow | None:
            c.execute("UPDATE sessions SET status = ?, error = ?, updated = ? WHERE id = ?",
                      (status, error, now_ms(), sessionid))
            return row_of(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)), SessionRow)
        return await self.write(run)

    async def set_session_options(self, sessionid: str, model: str | None, mode: str,
                                  autoaccept: bool) -> SessionRow | None:
        """Keep the options of the session's last prompt; returns the session as it is now."""
        def run(c: sqlite3.Connection) -> SessionRow | None:
            c.execute("UPDATE sessions SET model = ?, mode = ?, autoaccept = ?, updated = ? WHERE id = ?",
                      (model, mode, int(autoaccept), now_ms(), sessionid))
            return row_of(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)), SessionRow)
        return await self.write(run)

    async def session_marker(self, sessionid: str, candidate: str) -> str:
        """The marker of a session's data envelopes: `candidate` when it has none yet (then kept),
        else the one its first run chose. A session that is gone gets `candidate`."""
        def run(c: sqlite3.Connection) -> str:
            c.execute("UPDATE sessions SET marker = ? WHERE id = ? AND marker IS NULL", (candidate, sessionid))
            row = c.execute("SELECT marker FROM sessions WHERE id = ?", (sessionid,)).fetchone()
            marker: str = row[0] if row else candidate
            return marker
        return await self.write(run)

    async def remove_session(self, sessionid: str) -> bool:
        def run(c: sqlite3.Connection) -> bool:
            return c.execute("DELETE FROM sessions WHERE id = ?", (sessionid,)).rowcount > 0
        return await self.write(run)

    async def fork_session(self, sessionid: str, upto: str | None, name: str) -> SessionRow | None:
        """A new session with the messages of another up to `upto` (all without), their parts
        and attachments copied under new ids; messages an undo took back and changes that wait
        or run are not carried. None when the session (or `upto` in it) does not exist."""
        newid = self.ids.new()
        new = self.ids.new

        def run(c: sqlite3.Connection) -> SessionRow | None:
            source = row_of(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)), SessionRow)
            if source is None:
                return None
            if upto is not None and c.execute("SELECT 1 FROM messages WHERE id = ? AND sessionid = ?",
                                              (upto, sessionid)).fetchone() is None:
                return None
            stamp = now_ms()
            # The marker too: the copied results read as they did, and a fork of a fork still does.
            c.execute("INSERT INTO sessions (id, projectid, name, mode, autoaccept, model, marker, forkof, created,"
                      " updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      (newid, source["projectid"], name, source["mode"], source["autoaccept"], source["model"],
                       source["marker"], sessionid, stamp, stamp))
            messages = records_of(c.execute(
                "SELECT * FROM messages WHERE sessionid = ? AND reverted = 0 AND id <= ? ORDER BY id",
                (sessionid, upto or "\uffff")))
            for message in messages:
                copy = new()
                renamed = {attachment["id"]: new() for attachment in records_of(c.execute(
                    "SELECT id FROM attachments WHERE messageid = ?", (message["id"],)))}
                c.execute("INSERT INTO messages (id, sessionid, role, model, usage, data, created, finished)"
                          " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          (copy, newid, message["role"], message["model"], message["usage"],
                           _renamed_attachments(message["data"], renamed), message["created"],
                           message["finished"] or stamp))
                parts = records_of(c.execute("SELECT * FROM parts WHERE messageid = ? ORDER BY id", (message["id"],)))
                join_pieces(c, parts)
                for part in parts:
                    status = part["status"] if part["closed"] is not None else "error"
                    c.execute("INSERT INTO parts (id, messageid, sessionid, kind, status, text, data, created,"
                              " updated, closed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                              (new(), copy, newid, part["kind"], status, part["text"], part["data"],
                               part["created"], stamp, part["closed"] or stamp))
                for attachment in records_of(c.execute("SELECT * FROM attachments WHERE messageid = ? ORDER BY id",
                                                       (message["id"],))):
                    c.execute("INSERT INTO attachments (id, sessionid, messageid, name, mime, size, data, created)"
                              " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                              (renamed[attachment["id"]], newid, copy, attachment["name"], attachment["mime"],
                               attachment["size"], attachment["data"], stamp))
            todos = c.execute("SELECT items FROM todos WHERE sessionid = ?", (sessionid,)).fetchone()
            if todos is not None:
                c.execute("INSERT INTO todos (sessionid, items, updated) VALUES (?, ?, ?)", (newid, todos[0], stamp))
            return written_row(c.execute("SELECT * FROM sessions WHERE id = ?", (newid,)), SessionRow)
        return await self.write(run)

    async def get_todos(self, sessionid: str) -> list[TodoItem]:
        def run(c: sqlite3.Connection) -> list[TodoItem]:
            row = c.execute("SELECT items FROM todos WHERE sessionid = ?", (sessionid,)).fetchone()
            items: list[TodoItem] = json.loads(row[0]) if row else []
            return items
        return await self.read(run)

    async def set_todos(self, sessionid: str, items: list[TodoItem]) -> None:
        def run(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO todos (sessionid, items, updated) VALUES (?, ?, ?) "
                      "ON CONFLICT(sessionid) DO UPDATE SET items = excluded.items, updated = excluded.updated",
                      (sessionid, json.dumps(items), now_ms()))
        await self.write(run)


def session_view(row: SessionRow) -> dict[str, Any]:
    """The one shape of a session in answers and events."""
    return {"id": row["id"], "projectid": row["projectid"], "name": row["name"], "status": row["status"],
            "mode": row["mode"], "autoaccept": bool(row["autoaccept"]), "model": row["model"],
            "worktree": row["worktree"], "created": row["created"], "updated": row["updated"],
            "error": row["error"], "redo": bool(row["redo"]), "schedule": row["schedule"],
            "parent": row["parent"], "forkof": row["forkof"]}


def _renamed_attachments(data: str, renamed: dict[str, str]) -> str:
    """A message's data (JSON) naming the copies of its attachments instead of the originals."""
    if not renamed:
        return data
    decoded = json.loads(data) if data else {}
    for item in decoded.get("attachments") or ():
        if isinstance(item, dict) and item.get("id") in renamed:
            item["id"] = renamed[item["id"]]
    return json.dumps(decoded)
