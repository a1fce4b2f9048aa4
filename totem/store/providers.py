"""The providers table: a model server, its encrypted key and its data."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from totem.clock import now_ms
from totem.rows import ProviderRow
from totem.store.engine import Engine, Record, as_row, record_of, records_of, written_record


class ProviderRows(Engine):
    async def list_providers(self) -> list[ProviderRow]:
        def run(c: sqlite3.Connection) -> list[ProviderRow]:
            return [_decode_provider(r) for r in records_of(c.execute("SELECT * FROM providers ORDER BY created, id"))]
        return await self.read(run)

    async def get_provider(self, providerid: str) -> ProviderRow | None:
        def run(c: sqlite3.Connection) -> ProviderRow | None:
            row = record_of(c.execute("SELECT * FROM providers WHERE id = ?", (providerid,)))
            return _decode_provider(row) if row else None
        return await self.read(run)

    async def save_provider(self, providerid: str | None, name: str, kind: str, url: str,
                            secret: bytes | None, keep_secret: bool, data: dict[str, Any]) -> ProviderRow | None:
        """Create (providerid None) or change a provider; None when the id is unknown.

        With keep_secret the stored (encrypted) key stays as it is; otherwise it becomes `secret`.
        """
        newid = providerid or self.ids.new()

        def run(c: sqlite3.Connection) -> ProviderRow | None:
            stamp = now_ms()
            if providerid is None:
                c.execute("INSERT INTO providers (id, name, kind, url, secret, data, created, updated)"
                          " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          (newid, name, kind, url, secret, json.dumps(data), stamp, stamp))
            elif keep_secret:
                if c.execute("UPDATE providers SET name = ?, kind = ?, url = ?, data = ?, updated = ? WHERE id = ?",
                             (name, kind, url, json.dumps(data), stamp, newid)).rowcount == 0:
                    return None
            elif c.execute("UPDATE providers SET name = ?, kind = ?, url = ?, secret = ?, data = ?, updated = ?"
                           " WHERE id = ?", (name, kind, url, secret, json.dumps(data), stamp, newid)).rowcount == 0:
                return None
            return _decode_provider(written_record(c.execute("SELECT * FROM providers WHERE id = ?", (newid,))))
        return await self.write(run)

    async def remove_provider(self, providerid: str) -> bool:
        def run(c: sqlite3.Connection) -> bool:
            return c.execute("DELETE FROM providers WHERE id = ?", (providerid,)).rowcount > 0
        return await self.write(run)


def _decode_provider(row: Record) -> ProviderRow:
    row["data"] = json.loads(row["data"]) if row.get("data") else {}
    return as_row(row, ProviderRow)
