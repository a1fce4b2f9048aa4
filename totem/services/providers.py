"""The provider use cases: list, save, remove, templates, detect, available, catalog, models.

Owns what each use case means and what follows from it: a provider saved or removed changes the
secrets that tool, job and terminal output are scrubbed of, so this service holds the current
scrubber and rebuilds it after each such write (and once at start). The key of a provider is
write-only: it goes in through `save` (and `available`, for a check before saving) and never
comes out. A provider that fails while listing its models is a BadRequest on the field that is
wrong (`key` when it rejected the key, `url` otherwise), with the provider's reason. It never
parses HTTP and never imports `api`, `httpd`, `websocket` or `routes`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from totem.agent.provider_errors import KIND_AUTH, ProviderError
from totem.errors import BadRequest, NotFound
from totem.security.vault import Scrubber, VaultError, secrets_of

if TYPE_CHECKING:
    from totem.agent.providers import Models, Providers
    from totem.config import Config

__all__ = ["ProvidersService"]

# Module-level names for the shapes, since `ProvidersService.list` hides the builtin in the class.
Rows = list[dict[str, Any]]
ModelIds = list[str]


class ProvidersService:
    """The model providers of one Totem, and the scrubber that their keys make."""

    def __init__(self, providers: Providers, config: Config):
        self.providers = providers  # rows, keys, model lists
        self.config = config
        self._scrubber = Scrubber.empty()  # the real one is built by refresh_scrubber()

    def scrubber(self) -> Scrubber:
        """The current scrubber; Jobs and Runs call this for each output."""
        return self._scrubber

    async def refresh_scrubber(self) -> None:
        """Rebuild the scrubber from the current secrets: the config's token and secret, and each
        provider key that can be decrypted. Called at start and after each save or remove."""
        keys = {}
        for provider in await self.providers.list():
            try:
                found = await self.providers.stored_key(provider["id"])
            except VaultError:
                continue  # a key that cannot be decrypted cannot leak either
            if found is not None and found[1]:
                keys[provider["name"]] = found[1]
        # Compiling the scrubber's patterns takes tens of milliseconds: not on the event loop.
        self._scrubber = await asyncio.to_thread(lambda: Scrubber(secrets_of(self.config, keys)))

    def kinds(self) -> tuple[str, ...]:
        return self.providers.kinds()

    async def list(self) -> Rows:
        """The saved providers, each with `haskey`, never the key."""
        return await self.providers.list()

    async def save(self, providerid: str | None, name: str, kind: str, url: str, key: str | None,
                   models: ModelIds | None) -> dict[str, Any]:
        """Create a provider, or change the one of `providerid`. `key` None keeps the stored key,
        "" removes it. Output is scrubbed of the new key from the moment this returns. Returns
        the provider without its key. Raises NotFound."""
        saved = await self.providers.save(providerid, name, kind, url, key, models)
        if saved is None:
            raise NotFound(("id", f"no provider {providerid}"))
        await self.refresh_scrubber()
        return saved

    async def remove(self, providerid: str) -> str:
        """Forget a provider and its key; returns the id. Raises NotFound."""
        if not await self.providers.remove(providerid):
            raise NotFound(("id", f"no provider {providerid}"))
        await self.refresh_scrubber()
        return providerid

    def templates(self) -> Rows:
        return self.providers.templates()

    async def detect(self) -> Rows:
        """The local servers that answer on this computer, with their models."""
        return await self.providers.detect()

    async def available(self, providerid: str | None, url: str | None, kind: str | None,
                        key: str | None) -> Models:
        """Every model that a provider offers: the one of `url`, `kind` and `key`, or the saved
        one of `providerid` (its stored key is used; `url`, `kind` and `key` given beside it
        override the stored ones). Raises NotFound, BadRequest (a stored key that cannot be
        used, a provider that fails: on `key` when it rejected the key, else on `url`)."""
        if providerid is not None:
            try:
                stored = await self.providers.stored_key(providerid)
            except VaultError as exc:
                raise BadRequest(("key", f"the stored key cannot be used: {exc}")) from None
            if stored is None:
                raise NotFound(("id", f"no provider {providerid}"))
            row, stored_key = stored
            url, kind = url or row["url"], kind or row["kind"]
            key = stored_key if key is None else key
        if url is None or kind is None:  # null is taken as absent
            raise BadRequest(("url" if url is None else "kind", "is required without the id of a saved provider"))
        try:
            return await self.providers.available(url, kind, key or None)
        except ProviderError as exc:
            raise BadRequest(("key" if exc.kind == KIND_AUTH else "url", exc.message)) from None
        except ValueError as exc:  # a stored URL or key that a request cannot carry
            raise BadRequest(("url", f"the provider cannot be called: {exc}")) from None

    async def catalog(self) -> dict[str, Any]:
        """`{providers: [{id, name, kind, icon, error}], models: [...]}`."""
        return await self.providers.catalog()

    async def models(self) -> Rows:
        """The models a session can use, as one flat list."""
        return await self.providers.models()
