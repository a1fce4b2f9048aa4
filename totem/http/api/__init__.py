"""The actions of the REST API: their table, and calling one for a request.

Every action is `/api/{collection_verb}` or `/api/{collection_verb}/{id}`, named as in the
protocol text. Read-only actions answer GET and POST; actions that change something answer
POST only (405 otherwise), so that no GET ever changes anything. Handlers receive a Context and
return data (`$.callback`) or `success(value)` (`$.success`); they raise ApiError for the rest.
Each action declares its contract beside its handler (contract.py): the JSON Schemas of its body,
its query and its answer, from which its input is checked (validate.py), the OpenAPI document is
made and the MCP route's tools take their schemas. A handler reads its checked input and calls a
service of `ctx.services`; the use case itself (its checks of meaning, the write, the
events and the cascade) lives in the service. This package never writes to the socket and
never builds an error body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from totem.errors import MethodNotAllowed, NotFound
from totem.http.api.contract import ANY, MAX_ID_CHARS, NO_QUERY, Schema
from totem.http.api.validate import Input
from totem.http.httpd import Request, Response, json_response
from totem.schema import check_schema

if TYPE_CHECKING:
    from totem.core import Services
    from totem.http.host import Host
    from totem.services.project_list import ProjectList
    from totem.services.tokens import McpTokens

__all__ = ["MAX_ID_CHARS", "Action", "Context", "Input", "build_table", "call_action", "find_action", "success"]

# What a handler answers: JSON data, or a Response of its own (a file, cookies, a large page).
Answer = dict[str, Any] | list[Any] | Response

READ_METHODS = ("GET", "HEAD", "POST")
CHANGE_METHODS = ("POST",)


@dataclass(frozen=True)
class Action:
    """One route: its name, its `Collection|verb` label, its handler and its contract: the JSON
    Schemas of its body (None: it reads none), its query and its answer. `mcp`: the MCP route
    offers it as a tool (mcp_route.py)."""

    name: str
    label: str
    handler: Callable[[Context], Awaitable[Answer]]
    changes: bool = False
    takes_id: bool = False
    mcp: bool = False
    body: Schema | None = None
    query: Schema = field(default_factory=lambda: NO_QUERY)
    answer: Schema = field(default_factory=lambda: ANY)

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
    url_id: str | None  # the id of the URL, when the action takes one
    query: dict[str, str]
    action: Action

    @property
    def id(self) -> str:
        """The id of the URL: only an action that takes one reads it, and find_action has made sure
        it is there."""
        if self.url_id is None:
            raise RuntimeError(f"{self.action.label} takes no id")
        return self.url_id

    @property
    def services(self) -> Services:
        return self.app.services  # built before any action but those of routes.BEFORE_CORE

    @property
    def tokens(self) -> McpTokens:
        return self.app.tokens  # the MCP-only tokens, served before the core is built

    @property
    def project_list(self) -> ProjectList:
        return self.app.project_list  # Projects|list, served before the core is built

    async def body(self) -> Input:
        """The JSON body as an Input checked against the action's body schema. Raises
        UnsupportedMediaType (415) for a body that is not application/json, BadRequest for
        malformed JSON, a key given twice or a non-object."""
        assert self.action.body is not None, f"{self.action.label} declares no body"
        return Input(await self.request.json(), self.action.body)

    async def body_if_any(self) -> Input:
        """The body as `body()` does, or an empty object when the request has none (an action
        whose body fields are all optional, called as it was before it had any)."""
        if self.request.content_length == 0:
            assert self.action.body is not None, f"{self.action.label} declares no body"
            return Input({}, self.action.body)
        return await self.body()

    def params(self) -> Input:
        """The query as an Input checked against the action's query schema."""
        return Input(self.query, self.action.query, where="query")


def success(value: Any) -> dict[str, Any]:
    """The `$.success(id)` answer."""
    return {"success": True, "value": value}


class Declared(Protocol):
    """What declares actions: a module of the API, or a part of one (its ACTIONS)."""

    @property
    def ACTIONS(self) -> Sequence[Action]: ...  # the constant of each module


def build_table(*modules: Declared) -> dict[str, Action]:
    """The action table from the ACTIONS of each module; names must be unique, and every input
    schema one that totem/schema.py validates (a typo fails here, not silently). Raises
    ValueError."""
    table: dict[str, Action] = {}
    for module in modules:
        for action in module.ACTIONS:
            if action.name in table:
                raise ValueError(f"action {action.name} is declared twice")
            if action.body is not None:
                check_schema(action.body, f"{action.name} body")
            check_schema(action.query, f"{action.name} query")
            table[action.name] = action
    return table


def find_action(table: dict[str, Action], path: str) -> tuple[Action, str | None]:
    """The action and id that an /api/ path names. Raises NotFound."""
    rest = path[len("/api/"):].strip("/")
    name, _, ident = rest.partition("/")
    action = table.get(name)
    if action is None:
        raise NotFound(("action", f"no action {name or '(empty)'}"))
    if "/" in ident or len(ident) > MAX_ID_CHARS:  # the ID of contract.py: what a path id may be
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
    result = await action.handler(Context(app, request, ident, request.query, action))
    if isinstance(result, Response):
        return result
    return json_response(result)
