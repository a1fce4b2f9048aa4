"""The projects table: a folder Totem opened, by path."""

from __future__ import annotations

from totem.clock import now_ms
from totem.rows import ProjectRow
from totem.store.engine import Engine, row_of, rows_of


class ProjectRows(Engine):
    async def list_projects(self) -> list[ProjectRow]:
        return await self.read(lambda c: rows_of(c.execute(
            "SELECT * FROM projects ORDER BY opened DESC, id")))

    async def get_project(self, projectid: str) -> ProjectRow | None:
        return await self.read(lambda c: row_of(c.execute("SELECT * FROM projects WHERE id = ?", (projectid,))))

    async def open_project(self, path: str, name: str) -> tuple[ProjectRow, bool]:
        """The project of a folder, created if new; returns (project, created)."""
        newid = self.ids.new()

        def run(c):
            stamp = now_ms()
            existing = row_of(c.execute("SELECT * FROM projects WHERE path = ?", (path,)))
            if existing is not None:
                c.execute("UPDATE projects SET opened = ? WHERE id = ?", (stamp, existing["id"]))
                existing["opened"] = stamp
                return existing, False
            c.execute("INSERT INTO projects (id, path, name, created, opened) VALUES (?, ?, ?, ?, ?)",
                      (newid, path, name, stamp, stamp))
            return row_of(c.execute("SELECT * FROM projects WHERE id = ?", (newid,))), True
        return await self.write(run)

    async def remove_project(self, projectid: str) -> bool:
        return await self.write(lambda c: c.execute(
            "DELETE FROM projects WHERE id = ?", (projectid,)).rowcount > 0)
