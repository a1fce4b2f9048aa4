"""The MCP-only tokens (Account|mcptokens, mcptokencreate, mcptokenremove): made here, shown
once, stored as their digest.

Built by the composition root with the store, before the core: the account actions answer
before the core is built. The digest is the perimeter's (injected), which checks the tokens.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from totem.errors import BadRequest, NotFound
from totem.store import Store

if TYPE_CHECKING:
    from totem.config import Config

MCP_TOKEN_BYTES = 32
MAX_MCP_TOKENS = 100


class McpTokens:
    """The tokens that reach only the MCP route: config.ini's `mcptoken`, and those made here."""

    def __init__(self, store: Store, config: Config, digest: Callable[[str], str]):
        self.store = store
        self.config = config
        self.digest = digest  # token -> what is stored of it (auth.mcp_token_digest)

    async def any(self) -> bool:
        """Whether some MCP-only token exists (config.ini's or one made here)."""
        return bool(self.config.mcptoken) or bool(await self.store.list_mcp_tokens())

    async def list(self) -> dict[str, Any]:
        """`{tokens: [{id, name, created}], config}`: the tokens made here, never the token,
        and whether config.ini has one."""
        return {"tokens": await self.store.list_mcp_tokens(), "config": bool(self.config.mcptoken)}

    async def create(self, name: str) -> dict[str, Any]:
        """A new MCP-only token: answered once, with its id and name; only its digest is kept.
        Raises BadRequest (MAX_MCP_TOKENS made already)."""
        if len(await self.store.list_mcp_tokens()) >= MAX_MCP_TOKENS:
            raise BadRequest(("name", f"there are already {MAX_MCP_TOKENS} MCP tokens; remove one first"))
        token = "mcp-" + secrets.token_urlsafe(MCP_TOKEN_BYTES)
        row = await self.store.add_mcp_token(self.digest(token), name)
        return row | {"token": token}

    async def remove(self, tokenid: str) -> str:
        """Remove a token made here; returns its id. Raises NotFound."""
        if not await self.store.remove_mcp_token(tokenid):
            raise NotFound(("id", "no such MCP token"))
        return tokenid
