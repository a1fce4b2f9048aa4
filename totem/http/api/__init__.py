"""The actions of the REST API: their table, and calling one for a request.

Every action is `/api/{collection_verb}` or `/api/{collection_verb}/{id}`, named as in the
protocol text. Read-only actions answer GET and POST; actions that change something answer
POST only (405 otherwise), so that no GET ever changes anything. Handlers receive a Context and
return data (`$.callback`) or `success(value)` (`$.success`); they raise ApiError for the rest.
A handler translates its input (the fields of the body or the query, checked one by one) and
calls a service of `ctx.services`; the use case itself (its checks of meaning, the write, the
events and the cascade) lives in the service. This package never writes to the socket and
never builds an error body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from totem.errors import MethodNotAllowed, NotFound
from totem.http.api.validate import Input
from totem.http.httpd import Request, Response, json_response

if TYPE_CHECKING:
    from totem.core import Services
    from totem.http.host import Host
    from totem.services.tokens import McpTokens

MAX_ID_CHARS = 64
READ_METHODS = ("GET", "HEAD", "POST")
CHANGE_METHODS = ("POST",)


@dataclass(frozen=True)
class Action:
    """One route: its name, its `Collection|verb` label, what it takes and its handler."""

    name: str
    label: str
    handler: Callable[[Context], Awaitable[Any]]
    changes: bool = False
    takes_id: bool = False
    mcp: bool = False

    @property
    def methods(self) -> tuple[str, ...]:
        return CHANGE_METHODS if self.changes else READ_METHODS


@dataclass
class Context:
    """What a handler gets: the services, the request, the id of the URL and the query.

    `app` is the composition root, for what is not a service: the configuration, the
    perimeter's sign-in, the sandbox's status and the route table. A handler reaches no concern
    (the store, the runs, the hub...) through it: tests/test_services.py checks."""

    app: Host
    request: Request
    id: str | None
    query: dict

    @property
    def services(self) -> Services:
        return self.app.services  # built before any action but Account|read and the sign-in ones

    @property
    def tokens(self) -> McpTokens:
        return self.app.tokens  # the MCP-only tokens, served before the core is built

    async def body(self, allowed: tuple[str, ...]) -> Input:
        """The JSON body as an Input. Raises UnsupportedMediaType (415) for a body that is not
        application/json, BadRequest for malformed JSON, a key given twice or a non-object."""
        return Input(await self.request.json(), allowed)

    def params(self, allowed: tuple[str, ...] | None = None) -> Input:
        return Input(self.query, allowed, where="query")


def success(value) -> dict:
    """The `$.success(id)` answer."""
    return {"success": True, "value": value}


def build_table(*modules) -> dict[str, Action]:
    """The action table from the ACTIONS of each module; names must be unique."""
    table: dict[str, Action] = {}
    for module in modules:
        for action in module.ACTIONS:
            if action.name in table:
                raise ValueError(f"action {action.name} is declared twice")
            table[action.name] = action
    return table


def find_action(table: dict[str, Action], path: str) -> tuple[Action, str | None]:
    """The action and id that an /api/ path names. Raises NotFound."""
    rest = path[len("/api/"):].strip("/")
    name, _, ident = rest.partition("/")
    action = table.get(name)
    if action is None:
        raise NotFound(("action", f"no action {name or '(empty)'}"))
    if "/" in ident or len(ident) > MAX_ID_CHARS:
        raise NotFound(("id", "malformed id"))
    if action.takes_id and not ident:
        raise NotFound(("id", f"{action.label} needs an id: /api/{name}/{{id}}"))
    if not action.takes_id and ident:
        raise NotFound(("id", f"{action.label} takes no id"))
    return action, ident or None


async def call_action(app: Host, table: dict[str, Action], request: Request) -> Response:
    """Run the action that a request names, with the services of `app`. Raises NotFound,
    MethodNotAllowed, ApiError."""
    action, ident = find_action(table, request.path)
    if request.method == "OPTIONS":
        return Response(204, headers=[("Allow", ", ".join(action.methods + ("OPTIONS",)))])
    if request.method not in action.methods:
        raise MethodNotAllowed(("method", f"{action.label} answers {' and '.join(action.methods)}"),
                               headers={"Allow": ", ".join(action.methods + ("OPTIONS",))})
    result = await action.handler(Context(app, request, ident, request.query))
    if isinstance(result, Response):
        return result
    return json_response(result)
