"""The saved permission rules, and what each "always" approval of a project MCP server covered."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from totem.clock import now_ms
from totem.rows import RuleRow, ServerPin
from totem.store.engine import Engine, row_of, rows_of, written_row

MAX_SERVER_PINS = 16  # approvals of one project MCP server whose manifest is kept


class RuleRows(Engine):
    async def list_rules(self, projectid: str | None) -> list[RuleRow]:
        """The saved rules of a project (projectid) or the global saved rules (None), oldest first."""
        def run(c: sqlite3.Connection) -> list[RuleRow]:
            if projectid is None:
                return rows_of(c.execute("SELECT * FROM rules WHERE projectid IS NULL ORDER BY id"), RuleRow)
            return rows_of(c.execute("SELECT * FROM rules WHERE projectid = ? ORDER BY id", (projectid,)), RuleRow)
        return await self.read(run)

    async def list_rules_and_global(self, projectid: str) -> tuple[list[RuleRow], list[RuleRow]]:
        """(the saved rules of a project, the global saved rules), each oldest first, in one read:
        what every tool call is decided under."""
        def run(c: sqlite3.Connection) -> tuple[list[RuleRow], list[RuleRow]]:
            rows = rows_of(c.execute("SELECT * FROM rules WHERE projectid = ? OR projectid IS NULL ORDER BY id",
                                     (projectid,)), RuleRow)
            return ([row for row in rows if row["projectid"] is not None],
                    [row for row in rows if row["projectid"] is None])
        return await self.read(run)

    async def add_rule(self, projectid: str | None, tool: str, pattern: str, action: str) -> RuleRow | None:
        """Save a rule (the same tool and pattern replaces the old action); None when the project is gone."""
        newid = self.ids.new()

        def run(c: sqlite3.Connection) -> RuleRow | None:
            if (projectid is not None
                    and c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None):
                return None
            c.execute("DELETE FROM rules WHERE ifnull(projectid, '') = ifnull(?, '') AND tool = ? AND pattern = ?",
                      (projectid, tool, pattern))
            c.execute("INSERT INTO rules (id, projectid, tool, pattern, action, created) VALUES (?, ?, ?, ?, ?, ?)",
                      (newid, projectid, tool, pattern, action, now_ms()))
            return written_row(c.execute("SELECT * FROM rules WHERE id = ?", (newid,)), RuleRow)
        return await self.write(run)

    async def get_rule(self, ruleid: str) -> RuleRow | None:
        def run(c: sqlite3.Connection) -> RuleRow | None:
            return row_of(c.execute("SELECT * FROM rules WHERE id = ?", (ruleid,)), RuleRow)
        return await self.read(run)

    async def remove_rule(self, ruleid: str) -> bool:
        def run(c: sqlite3.Connection) -> bool:
            return c.execute("DELETE FROM rules WHERE id = ?", (ruleid,)).rowcount > 0
        return await self.write(run)

    async def add_server_pin(self, projectid: str, server: str, digest: str, manifest: dict[str, Any]) -> bool:
        """Keep what an "always" approval of a server covered (the newest MAX_SERVER_PINS of
        each server of a project); False when the project is gone."""
        newid = self.ids.new()

        def run(c: sqlite3.Connection) -> bool:
            if c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None:
                return False
            c.execute("DELETE FROM server_pins WHERE projectid = ? AND digest = ?", (projectid, digest))
            c.execute("INSERT INTO server_pins (id, projectid, server, digest, manifest, created) "
                      "VALUES (?, ?, ?, ?, ?, ?)", (newid, projectid, server, digest, json.dumps(manifest), now_ms()))
            c.execute("DELETE FROM server_pins WHERE projectid = ? AND server = ? AND id NOT IN "
                      "(SELECT id FROM server_pins WHERE projectid = ? AND server = ? ORDER BY id DESC LIMIT ?)",
                      (projectid, server, projectid, server, MAX_SERVER_PINS))
            return True
        return await self.write(run)

    async def server_pins(self, projectid: str) -> list[ServerPin]:
        """`[{server, digest, manifest, created}]` of a project's approved servers, newest first."""
        def run(c: sqlite3.Connection) -> list[ServerPin]:
            return [ServerPin(server=row["server"], digest=row["digest"], manifest=json.loads(row["manifest"]),
                              created=row["created"])
                    for row in c.execute("SELECT * FROM server_pins WHERE projectid = ? ORDER BY id DESC",
                                         (projectid,))]
        return await self.read(run)
