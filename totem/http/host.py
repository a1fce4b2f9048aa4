"""What the adapters read of the composition root (totem.app.App), as a Protocol: the routes and
the handlers name it, so that they check their seam without importing the App that imports
them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from totem.config import Config
    from totem.core import Core, Services
    from totem.http.auth import Perimeter
    from totem.http.httpd import HttpServer, Request, Response
    from totem.services.attachments import Attachments
    from totem.services.project_list import ProjectList
    from totem.services.tokens import McpTokens


class ActionTable(Protocol):
    @property
    def actions(self) -> dict[str, Any]: ...


class McpHandler(Protocol):
    async def handle(self, request: Request) -> Response: ...


class Host(Protocol):
    """The configuration, the perimeter and what answers before the core (the MCP-only tokens,
    the attachments, the list of projects, the sandbox's status), then the services once
    `ready` has built them."""

    config: Config
    perimeter: Perimeter
    tokens: McpTokens
    attachments: Attachments
    project_list: ProjectList
    http: HttpServer

    @property
    def router(self) -> ActionTable: ...

    @property
    def services(self) -> Services: ...

    @property
    def mcp(self) -> McpHandler: ...

    async def ready(self) -> Core: ...

    async def sandbox_status(self, wait: bool) -> dict[str, Any]: ...
