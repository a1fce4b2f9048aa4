"""Who may come in: the digests of sign-in cookies and of MCP-only tokens."""

from __future__ import annotations

import sqlite3

from totem.clock import now_ms
from totem.rows import McpTokenRow
from totem.store.engine import Engine, rows_of


class AccessRows(Engine):
    async def add_login(self, digest: str) -> None:
        def run(c: sqlite3.Connection) -> None:
            c.execute("INSERT OR REPLACE INTO logins (hash, created) VALUES (?, ?)", (digest, now_ms()))
        await self.write(run)

    async def has_login(self, digest: str) -> bool:
        def run(c: sqlite3.Connection) -> bool:
            return c.execute("SELECT 1 FROM logins WHERE hash = ?", (digest,)).fetchone() is not None
        return await self.read(run)

    async def remove_login(self, digest: str) -> None:
        def run(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM logins WHERE hash = ?", (digest,))
        await self.write(run)

    async def add_mcp_token(self, digest: str, name: str) -> McpTokenRow:
        row = McpTokenRow(id=self.ids.new(), name=name, created=now_ms())

        def run(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO mcptokens (id, hash, name, created) VALUES (?, ?, ?, ?)",
                      (row["id"], digest, name, row["created"]))
        await self.write(run)
        return row

    async def has_mcp_token(self, digest: str) -> bool:
        def run(c: sqlite3.Connection) -> bool:
            return c.execute("SELECT 1 FROM mcptokens WHERE hash = ?", (digest,)).fetchone() is not None
        return await self.read(run)

    async def list_mcp_tokens(self) -> list[McpTokenRow]:
        def run(c: sqlite3.Connection) -> list[McpTokenRow]:
            return rows_of(c.execute("SELECT id, name, created FROM mcptokens ORDER BY id"), McpTokenRow)
        return await self.read(run)

    async def remove_mcp_token(self, tokenid: str) -> bool:
        def run(c: sqlite3.Connection) -> bool:
            return c.execute("DELETE FROM mcptokens WHERE id = ?", (tokenid,)).rowcount > 0
        return await self.write(run)
