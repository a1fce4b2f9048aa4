"""The schedules table: a prompt that runs at its times, with its data as JSON."""

from __future__ import annotations

import json

from totem.clock import now_ms
from totem.rows import ScheduleRow
from totem.store.engine import Engine, row_of, rows_of


class ScheduleRows(Engine):
    async def list_schedules(self, projectid: str | None = None) -> list[ScheduleRow]:
        """The schedules of a project (of every project without one), oldest first."""
        def run(c):
            if projectid is None:
                rows = rows_of(c.execute("SELECT * FROM schedules ORDER BY id"))
            else:
                rows = rows_of(c.execute("SELECT * FROM schedules WHERE projectid = ? ORDER BY id", (projectid,)))
            return [_decode_schedule(row) for row in rows]
        return await self.read(run)

    async def get_schedule(self, scheduleid: str) -> ScheduleRow | None:
        def run(c):
            row = row_of(c.execute("SELECT * FROM schedules WHERE id = ?", (scheduleid,)))
            return _decode_schedule(row) if row else None
        return await self.read(run)

    async def save_schedule(self, scheduleid: str | None, projectid: str, data: dict) -> ScheduleRow | None:
        """Create (scheduleid None) or replace a schedule's data; None when the project or the
        schedule is gone."""
        newid = scheduleid or self.ids.new()

        def run(c):
            stamp = now_ms()
            if c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None:
                return None
            if scheduleid is None:
                c.execute("INSERT INTO schedules (id, projectid, data, created, updated) VALUES (?, ?, ?, ?, ?)",
                          (newid, projectid, json.dumps(data), stamp, stamp))
            elif c.execute("UPDATE schedules SET data = ?, updated = ? WHERE id = ? AND projectid = ?",
                           (json.dumps(data), stamp, newid, projectid)).rowcount == 0:
                return None
            return _decode_schedule(row_of(c.execute("SELECT * FROM schedules WHERE id = ?", (newid,))))
        return await self.write(run)

    async def remove_schedule(self, scheduleid: str) -> bool:
        return await self.write(lambda c: c.execute(
            "DELETE FROM schedules WHERE id = ?", (scheduleid,)).rowcount > 0)


def _decode_schedule(row: dict) -> dict:
    row["data"] = json.loads(row["data"]) if row.get("data") else {}
    return row
