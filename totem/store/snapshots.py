"""The file changes of a session (what each replaced), what an undo took back, and the
journal of an undo, redo or Save as under way."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from totem.clock import now_ms
from totem.rows import SessionRow, SnapshotChange, SnapshotRow
from totem.store.engine import MAX_SQL_VARIABLES, Engine, row_of, rows_of


class SnapshotRows(Engine):
    async def add_snapshots(self, rows: list[SnapshotChange]) -> None:
        """Record file changes: {sessionid, messageid, partid, path, before, after, tool, note}."""
        ids = [self.ids.new() for _ in rows]

        def run(c: sqlite3.Connection) -> None:
            stamp = now_ms()
            c.executemany(
                "INSERT INTO snapshots (id, sessionid, messageid, partid, path, before, after, tool, note, created)"
                " SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ?)",
                [(newid, row["sessionid"], row["messageid"], row["partid"], row["path"], row["before"],
                  row["after"], row["tool"], row["note"], stamp, row["sessionid"])
                 for newid, row in zip(ids, rows, strict=True)])
        await self.write(run)

    async def session_snapshots(self, sessionid: str) -> list[SnapshotRow]:
        """Every file change of a session, oldest first."""
        def run(c: sqlite3.Connection) -> list[SnapshotRow]:
            rows = rows_of(c.execute("SELECT * FROM snapshots WHERE sessionid = ? ORDER BY id", (sessionid,)),
                           SnapshotRow)
            for row in rows:
                row["reverted"] = bool(row["reverted"])
            return rows
        return await self.read(run)

    async def snapshot_digests(self, projectid: str) -> set[str]:
        """The contents that the rows of a project's sessions name."""
        def run(c: sqlite3.Connection) -> set[str]:
            found: set[str] = set()
            for before, after in c.execute(
                    "SELECT before, after FROM snapshots WHERE sessionid IN "
                    "(SELECT id FROM sessions WHERE projectid = ?)", (projectid,)):
                found.update(value for value in (before, after) if value)
            return found
        return await self.read(run)

    async def set_reverted(self, sessionid: str, messageids: list[str], reverted: bool,
                           redo: str | None, recovered: str | None = None) -> SessionRow | None:
        """Mark (or unmark) messages and their file changes as taken back, set the session's
        redo (JSON, None: none) and clear its journal (set_restoring), in one transaction. The
        messages' `recovered` note (what a start completed after a kill) is set, or cleared
        when None."""
        def run(c: sqlite3.Connection) -> SessionRow | None:
            flag = int(reverted)
            for start in range(0, len(messageids), MAX_SQL_VARIABLES):
                chunk = messageids[start:start + MAX_SQL_VARIABLES]
                marks = ",".join("?" * len(chunk))
                c.execute(f"UPDATE snapshots SET reverted = ? WHERE sessionid = ? AND messageid IN ({marks})",
                          (flag, sessionid, *chunk))
                c.execute(f"UPDATE messages SET reverted = ? WHERE sessionid = ? AND id IN ({marks})",
                          (flag, sessionid, *chunk))
                if recovered is None:
                    c.execute(f"UPDATE messages SET data = json_remove(data, '$.recovered') WHERE sessionid = ? "
                              f"AND id IN ({marks}) AND json_extract(data, '$.recovered') IS NOT NULL",
                              (sessionid, *chunk))
                else:
                    c.execute(f"UPDATE messages SET data = json_set(data, '$.recovered', ?) WHERE sessionid = ? "
                              f"AND id IN ({marks})", (recovered, sessionid, *chunk))
            c.execute("UPDATE sessions SET redo = ?, restoring = NULL, updated = ? WHERE id = ?",
                      (redo, now_ms(), sessionid))
            return row_of(c.execute("SELECT * FROM sessions WHERE id = ?", (sessionid,)), SessionRow)
        return await self.write(run)

    async def set_restoring(self, sessionid: str, journal: str | None) -> bool:
        """Store (None: clear) the journal of a file operation of the session before it touches
        a file; False when the session is gone."""
        def run(c: sqlite3.Connection) -> bool:
            return c.execute("UPDATE sessions SET restoring = ? WHERE id = ?", (journal, sessionid)).rowcount == 1
        return await self.write(run)

    async def pending_restores(self) -> list[tuple[str, dict[str, Any]]]:
        """(session id, journal) of each session whose file operation a kill interrupted (its
        journal is still stored)."""
        def run(c: sqlite3.Connection) -> list[tuple[str, dict[str, Any]]]:
            rows = c.execute("SELECT id, restoring FROM sessions WHERE restoring IS NOT NULL ORDER BY id")
            return [(sessionid, json.loads(journal)) for sessionid, journal in rows]
        return await self.read(run)

    async def drop_reverted(self, sessionid: str) -> int:
        """Remove the messages an undo took back (their parts, attachments and file changes go
        with them) and forget the redo; returns how many messages went."""
        def run(c: sqlite3.Connection) -> int:
            gone = c.execute("DELETE FROM messages WHERE sessionid = ? AND reverted = 1", (sessionid,)).rowcount
            c.execute("UPDATE sessions SET redo = NULL WHERE id = ? AND redo IS NOT NULL", (sessionid,))
            return gone
        return await self.write(run)
