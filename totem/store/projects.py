"""The projects table: a folder Totem opened, by path."""

from __future__ import annotations

import sqlite3

from totem.clock import now_ms
from totem.rows import ProjectRow
from totem.store.engine import Engine, row_of, rows_of, written_row


class ProjectRows(Engine):
    async def list_projects(self) -> list[ProjectRow]:
        def run(c: sqlite3.Connection) -> list[ProjectRow]:
            return rows_of(c.execute("SELECT * FROM projects ORDER BY opened DESC, id"), ProjectRow)
        return await self.read(run)

    async def get_project(self, projectid: str) -> ProjectRow | None:
        def run(c: sqlite3.Connection) -> ProjectRow | None:
            return row_of(c.execute("SELECT * FROM projects WHERE id = ?", (projectid,)), ProjectRow)
        return await self.read(run)

    async def open_project(self, path: str, name: str) -> tuple[ProjectRow, bool]:
        """The project of a folder, created if new; returns (project, created)."""
        newid = self.ids.new()

        def run(c: sqlite3.Connection) -> tuple[ProjectRow, bool]:
            stamp = now_ms()
            existing = row_of(c.execute("SELECT * FROM projects WHERE path = ?", (path,)), ProjectRow)
            if existing is not None:
                c.execute("UPDATE projects SET opened = ? WHERE id = ?", (stamp, existing["id"]))
                existing["opened"] = stamp
                return existing, False
            c.execute("INSERT INTO projects (id, path, name, created, opened) VALUES (?, ?, ?, ?, ?)",
                      (newid, path, name, stamp, stamp))
            return written_row(c.execute("SELECT * FROM projects WHERE id = ?", (newid,)), ProjectRow), True
        return await self.write(run)

    async def remove_project(self, projectid: str) -> bool:
        def run(c: sqlite3.Connection) -> bool:
            return c.execute("DELETE FROM projects WHERE id = ?", (projectid,)).rowcount > 0
        return await self.write(run)
