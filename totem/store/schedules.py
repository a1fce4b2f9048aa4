"""The schedules table: a prompt that runs at its times, with its data as JSON."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from totem.clock import now_ms
from totem.rows import ScheduleRow
from totem.store.engine import Engine, Record, as_row, record_of, records_of, written_record


class ScheduleRows(Engine):
    async def list_schedules(self, projectid: str | None = None) -> list[ScheduleRow]:
        """The schedules of a project (of every project without one), oldest first."""
        def run(c: sqlite3.Connection) -> list[ScheduleRow]:
            if projectid is None:
                rows = records_of(c.execute("SELECT * FROM schedules ORDER BY id"))
            else:
                rows = records_of(c.execute("SELECT * FROM schedules WHERE projectid = ? ORDER BY id", (projectid,)))
            return [_decode_schedule(row) for row in rows]
        return await self.read(run)

    async def get_schedule(self, scheduleid: str) -> ScheduleRow | None:
        def run(c: sqlite3.Connection) -> ScheduleRow | None:
            row = record_of(c.execute("SELECT * FROM schedules WHERE id = ?", (scheduleid,)))
            return _decode_schedule(row) if row else None
        return await self.read(run)

    async def save_schedule(self, scheduleid: str | None, projectid: str, data: dict[str, Any]) -> ScheduleRow | None:
        """Create (scheduleid None) or replace a schedule's data; None when the project or the
        schedule is gone."""
        newid = scheduleid or self.ids.new()

        def run(c: sqlite3.Connection) -> ScheduleRow | None:
            stamp = now_ms()
            if c.execute("SELECT 1 FROM projects WHERE id = ?", (projectid,)).fetchone() is None:
                return None
            if scheduleid is None:
                c.execute("INSERT INTO schedules (id, projectid, data, created, updated) VALUES (?, ?, ?, ?, ?)",
                          (newid, projectid, json.dumps(data), stamp, stamp))
            elif c.execute("UPDATE schedules SET data = ?, updated = ? WHERE id = ? AND projectid = ?",
                           (json.dumps(data), stamp, newid, projectid)).rowcount == 0:
                return None
            return _decode_schedule(written_record(c.execute("SELECT * FROM schedules WHERE id = ?", (newid,))))
        return await self.write(run)

    async def remove_schedule(self, scheduleid: str) -> bool:
        def run(c: sqlite3.Connection) -> bool:
            return c.execute("DELETE FROM schedules WHERE id = ?", (scheduleid,)).rowcount > 0
        return await self.write(run)


def _decode_schedule(row: Record) -> ScheduleRow:
    row["data"] = json.loads(row["data"]) if row.get("data") else {}
    return as_row(row, ScheduleRow)
