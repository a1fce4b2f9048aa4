"""Which URL goes where, with the perimeter first.

Every request passes the Host rule and the Origin rule before anything else, then goes to the
WebSocket, an API action, an attachment, or a page or static file. Authentication is required
everywhere except the login page, the sign-in actions and static assets.
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import TYPE_CHECKING

from totem.errors import Forbidden, MethodNotAllowed, NotFound
from totem.http.api import account, build_table, call_action
from totem.http.api.attachments import attachment_response
from totem.http.httpd import SECURITY_HEADERS, Response, static_response

if TYPE_CHECKING:
    from totem.events import Hub
    from totem.http.host import Host
    from totem.http.websocket import TextFrames

PUBLIC_ACTIONS = frozenset(("/api/login", "/api/logout"))
MCP_PATHS = frozenset(("/$mcp", "/$mcp/"))
WEBSOCKET_PATHS = frozenset(("/ws", "/ws/"))
APP_PAGES = {"/": "/index.html", "/index.html": "/index.html"}
LOGIN_PAGES = {"/login": "/login.html", "/login.html": "/login.html"}
PAGE_METHODS = ("GET", "HEAD")
# The modules of totem/api whose ACTIONS make the table, in the order of the protocol text.
API_MODULES = ("account", "projects", "mcpservers", "folders", "sessions", "exports", "terminal", "schedules",
               "settings", "providers", "permissions", "openapi")
# The actions that answer before the core is built, besides Account|read and the sign-in ones,
# by the module of api/ that declares them: Projects|list, the page's first request after
# Account|read (from the App's project_list). Their module loads with the first of them, not
# before the listen.
BEFORE_CORE = {"projects": "projects"}


def api_module_names() -> list[str]:
    return [f"{__package__}.api.{name}" for name in API_MODULES]


def action_table() -> dict:
    """Every action of the API (imports the handlers, and with them the services they call)."""
    return build_table(*(importlib.import_module(name) for name in api_module_names()))


def action_name(path: str) -> str:
    return path[len("/api/"):].strip("/").partition("/")[0]


def redirect(location: str) -> Response:
    return Response(302, headers=[("Location", location)])


class Router:
    """Routes requests of one app; `handle` is the HttpServer handler."""

    def __init__(self, app: Host, static_dir: str, hub: Hub):
        self.app = app
        self.hub = hub  # events.Hub: what each WebSocket connection subscribes to
        self.static_dir = static_dir
        # Account|read, the sign-in actions and BEFORE_CORE answer before the core is built; the
        # rest wait for it.
        self.early_actions = build_table(account)
        self._actions: dict | None = None
        self._frames: TextFrames | None = None  # made with the first connection

    @property
    def actions(self) -> dict:
        """The whole action table, made once."""
        if self._actions is None:
            self._actions = action_table()
        return self._actions

    async def handle(self, request) -> Response | None:
        perimeter = self.app.perimeter
        perimeter.check_host(request)
        path = request.path
        if path in MCP_PATHS:
            if not self.app.config.mcp:
                raise NotFound(("path", "the MCP route is off: set mcp = true in config.ini"))
            await perimeter.authenticate_mcp(request)
            await self.app.ready()
            return await self.app.mcp.handle(request)
        perimeter.check_origin(request)
        if path in WEBSOCKET_PATHS:
            return await self._websocket(request)
        if path.startswith("/api/"):
            if request.method != "OPTIONS" and path.rstrip("/") not in PUBLIC_ACTIONS:
                await perimeter.authenticate(request)
            name = action_name(path)
            if name in BEFORE_CORE and name not in self.early_actions:
                self._load_before_core(name)
            if name in self.early_actions:
                return await call_action(self.app, self.early_actions, request)
            await self.app.ready()
            return await call_action(self.app, self.actions, request)
        if path.startswith("/attachments/"):
            await perimeter.authenticate(request)
            if request.method not in PAGE_METHODS:
                raise MethodNotAllowed(("method", "attachments answer GET and HEAD"), headers={"Allow": "GET, HEAD"})
            return await attachment_response(self.app.attachments, path)
        return await self._page(request)

    def _load_before_core(self, name: str) -> None:
        module = importlib.import_module(f"{__package__}.api.{BEFORE_CORE[name]}")
        declared = SimpleNamespace(ACTIONS=[action for action in module.ACTIONS if action.name == name])
        self.early_actions = self.early_actions | build_table(declared)

    async def _websocket(self, request) -> Response | None:
        perimeter = self.app.perimeter
        if request.method != "GET" or (request.header("upgrade") or "").lower() != "websocket":
            raise NotFound(("path", "/ws/ is a WebSocket endpoint"))
        if not perimeter.same_origin(request):
            raise Forbidden(("origin", "WebSocket connections from another origin are refused"))
        await perimeter.authenticate(request)
        reader, writer, leftover = request.detach()
        from totem.http.websocket import Limits, TextFrames, serve  # websockets is imported with the first connection
        config = self.app.config
        limits = Limits(config.wsqueue, config.wsqueuebytes, config.wsping)
        if self._frames is None:
            self._frames = TextFrames()  # one for every connection: an event is framed once
        await serve(self.hub, limits, request, reader, writer, leftover, SECURITY_HEADERS, self._frames,
                    self.app.http.budget)
        return None

    async def _page(self, request) -> Response:
        path = request.path
        if request.method == "OPTIONS":
            return Response(204, headers=[("Allow", "GET, HEAD, OPTIONS")])
        if request.method not in PAGE_METHODS:
            raise MethodNotAllowed(("method", "pages answer GET and HEAD"), headers={"Allow": "GET, HEAD, OPTIONS"})
        token_set = bool(self.app.config.token)
        if path in APP_PAGES:
            if token_set and not await self.app.perimeter.is_authenticated(request):
                return redirect("/login")
            path = APP_PAGES[path]
        elif path in LOGIN_PAGES:
            if not token_set:
                return redirect("/")
            path = LOGIN_PAGES[path]
        response = await static_response(self.static_dir, path, request.header("if-none-match"))
        if response is None:
            raise NotFound(("path", "no such page"))
        return response

