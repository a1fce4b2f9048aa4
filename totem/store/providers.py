"""The providers table: a model server, its encrypted key and its data."""

from __future__ import annotations

import json

from totem.clock import now_ms
from totem.rows import ProviderRow
from totem.store.engine import Engine, row_of, rows_of


class ProviderRows(Engine):
    async def list_providers(self) -> list[ProviderRow]:
        return await self.read(lambda c: [_decode_provider(r) for r in rows_of(c.execute(
            "SELECT * FROM providers ORDER BY created, id"))])

    async def get_provider(self, providerid: str) -> ProviderRow | None:
        def run(c):
            row = row_of(c.execute("SELECT * FROM providers WHERE id = ?", (providerid,)))
            return _decode_provider(row) if row else None
        return await self.read(run)

    async def save_provider(self, providerid: str | None, name: str, kind: str, url: str,
                            secret: bytes | None, keep_secret: bool, data: dict) -> ProviderRow | None:
        """Create (providerid None) or change a provider; None when the id is unknown.

        With keep_secret the stored (encrypted) key stays as it is; otherwise it becomes `secret`.
        """
        newid = providerid or self.ids.new()

        def run(c):
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
            return _decode_provider(row_of(c.execute("SELECT * FROM providers WHERE id = ?", (newid,))))
        return await self.write(run)

    async def remove_provider(self, providerid: str) -> bool:
        return await self.write(lambda c: c.execute(
            "DELETE FROM providers WHERE id = ?", (providerid,)).rowcount > 0)


def _decode_provider(row: dict) -> dict:
    row["data"] = json.loads(row["data"]) if row.get("data") else {}
    return row
