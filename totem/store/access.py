"""Who may come in: the digests of sign-in cookies and of MCP-only tokens."""

from __future__ import annotations

from totem.clock import now_ms
from totem.store.engine import Engine


class AccessRows(Engine):
    async def add_login(self, digest: str) -> None:
        await self.write(lambda c: c.execute(
            "INSERT OR REPLACE INTO logins (hash, created) VALUES (?, ?)", (digest, now_ms())))

    async def has_login(self, digest: str) -> bool:
        return await self.read(lambda c: c.execute(
            "SELECT 1 FROM logins WHERE hash = ?", (digest,)).fetchone() is not None)

    async def remove_login(self, digest: str) -> None:
        await self.write(lambda c: c.execute("DELETE FROM logins WHERE hash = ?", (digest,)))

    async def add_mcp_token(self, digest: str, name: str) -> dict:
        row = {"id": self.ids.new(), "name": name, "created": now_ms()}
        await self.write(lambda c: c.execute(
            "INSERT INTO mcptokens (id, hash, name, created) VALUES (?, ?, ?, ?)",
            (row["id"], digest, name, row["created"])))
        return row

    async def has_mcp_token(self, digest: str) -> bool:
        return await self.read(lambda c: c.execute(
            "SELECT 1 FROM mcptokens WHERE hash = ?", (digest,)).fetchone() is not None)

    async def list_mcp_tokens(self) -> list[dict]:
        return await self.read(lambda c: [dict(row) for row in c.execute(
            "SELECT id, name, created FROM mcptokens ORDER BY id")])

    async def remove_mcp_token(self, tokenid: str) -> bool:
        return await self.write(lambda c: c.execute(
            "DELETE FROM mcptokens WHERE id = ?", (tokenid,)).rowcount > 0)
