"""OpenAPI|read (`GET /api/openapi.json`): an OpenAPI 3.1 document of every action, made from
the action table, so that clients can be generated.

Each action becomes a path (`/api/{name}`, and `/api/{name}/{id}` for one that takes an id) with
an operation for each method it answers. Its inputs are read from the handler's own code, since
validation here is code and not data: the fields named in `ctx.body(...)`, `Input(...)` and
`ctx.params(...)`, and the typed reads of `validate.Input` on them (`text`, `boolean`,
`integer`, `choice`, `texts`), followed into the module's helpers that the handler hands its
input to, with every limit named by a constant resolved from the module. A field that the
handler checks some other way is listed with what is known (its name, that unknown fields are
refused) and a description that says it is checked in code, never with a schema that would
claim more. Answers: the `$.success` shape where the handler returns `success(...)`, else JSON
data described by the service method's docstring; every error in the one shape of `errors.py`.

Must not: change anything, or describe an input that the handler does not read.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from totem import __version__
from totem.http.api import MAX_ID_CHARS, Action, Input
from totem.http.auth import COOKIE_NAME

OPENAPI_VERSION = "3.1.0"
READERS = ("text", "boolean", "integer", "choice", "texts")  # the typed reads of validate.Input
MAX_HELPER_DEPTH = 3  # helpers of helpers that a handler hands its input to
_UNKNOWN = object()  # a value that only running the code would tell


@dataclass
class Field:
    """One input field as the handler's code reads it."""

    name: str
    schema: dict = field(default_factory=dict)
    required: Any = False  # True, False or _UNKNOWN (it depends on other inputs)
    notes: list[str] = field(default_factory=list)
    typed: bool = False  # read by one of READERS
    checked: bool = False  # the handler checks more of it in code


@dataclass
class Inputs:
    """What one handler reads: body and query fields (None: it reads no body, or leaves the
    query unchecked), and whether it answers `success(...)`."""

    body: dict[str, Field] | None = None
    query: dict[str, Field] | None = None
    success: bool = False
    services: list[tuple[str, str]] = field(default_factory=list)  # ctx.services.X.Y(...) it calls
    derived: bool = True  # False when the source could not be read


@cache
def handler_inputs(handler) -> Inputs:
    """The inputs of a handler, read from its source (cached: the source of a loaded function
    does not change). Blocks (reads the source file)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(handler)))
    except (OSError, TypeError, SyntaxError):
        return Inputs(derived=False)
    function = tree.body[0]
    inputs = Inputs()
    _Reader(inputs, handler.__globals__).read(function, {}, 0)
    return inputs


class _Reader:
    """Walks a handler (and the helpers it hands its input to) for the reads of its input."""

    def __init__(self, inputs: Inputs, module: dict):
        self.inputs = inputs
        self.module = module

    def read(self, function, bound: dict, depth: int) -> None:
        """`bound`: the names of the function that stand for an input (`body`, `query`) or for a
        value known at the call site."""
        names = dict(bound)
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                where = self._opened(node.value)
                if where is not None:
                    names[node.targets[0].id] = where
            elif isinstance(node, ast.Expr):
                self._opened(node.value)  # ctx.params(()).done(): a query with no fields
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                self._call(node, names, depth)
            elif isinstance(node, ast.Return):
                self.inputs.success = self.inputs.success or _returns_success(node.value)

    def _opened(self, node) -> str | None:
        """Where an input is opened: `await ctx.body(FIELDS)`, `Input(..., FIELDS)`,
        `ctx.params(FIELDS)` (also as the object of `.done()`)."""
        if isinstance(node, ast.Await):
            node = node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "done":
            node = node.func.value
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("body", "params") and _is_ctx(func.value):
            where, given = ("body" if func.attr == "body" else "query"), node.args[:1]
        elif isinstance(func, ast.Name) and func.id == "Input" and len(node.args) >= 2:
            where, given = "body", node.args[1:2]
        else:
            return None
        allowed = self._value(given[0], {}) if given else None
        fields = getattr(self.inputs, where)
        if fields is None:
            fields = {}
            setattr(self.inputs, where, fields)
        if isinstance(allowed, tuple):
            for name in allowed:
                fields.setdefault(name, Field(name))
        return where

    def _call(self, node: ast.Call, names: dict, depth: int) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.attr in READERS:
            where = names.get(func.value.id)
            if where in ("body", "query"):
                self._typed(where, func.attr, node, names)
                return
        if isinstance(func, ast.Attribute) and func.attr == "append" and isinstance(func.value, ast.Attribute) \
                and func.value.attr == "errors" and isinstance(func.value.value, ast.Name) \
                and names.get(func.value.value.id) in ("body", "query") and node.args \
                and isinstance(node.args[0], ast.Tuple) and node.args[0].elts:
            # A check of its own (`body.errors.append(("time", ...))`): said, not described.
            name = self._value(node.args[0].elts[0], names)
            fields = getattr(self.inputs, names[func.value.value.id])
            if isinstance(name, str) and name in fields:
                fields[name].checked = True
            return
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) \
                and isinstance(func.value.value, ast.Attribute) and func.value.value.attr == "services" \
                and _is_ctx(func.value.value.value):
            self.inputs.services.append((func.value.attr, func.attr))
        if isinstance(func, ast.Name) and depth < MAX_HELPER_DEPTH:
            helper = self.module.get(func.id)
            if inspect.isfunction(helper) and helper.__module__ == self.module.get("__name__"):
                self._helper(helper, node, names, depth)

    def _helper(self, helper, node: ast.Call, names: dict, depth: int) -> None:
        """A helper of the module that gets an input (`_url(body, required=True)`): read it with
        its parameters bound to what the call gives."""
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(helper)))
        except (OSError, TypeError, SyntaxError):
            return
        function = tree.body[0]
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            return
        params = [arg.arg for arg in function.args.args]
        bound: dict = {}
        defaults = function.args.defaults
        for param, default in zip(params[len(params) - len(defaults):], defaults, strict=True):
            bound[param] = ("value", self._value(default, {}))
        for param, arg in zip(params, node.args, strict=False):
            bound[param] = self._argument(arg, names)
        for keyword in node.keywords:
            if keyword.arg in params:
                bound[keyword.arg] = self._argument(keyword.value, names)
        if any(value in ("body", "query") for value in bound.values()):
            self.read(function, bound, depth + 1)

    def _argument(self, arg, names: dict):
        if isinstance(arg, ast.Name) and names.get(arg.id) in ("body", "query"):
            return names[arg.id]
        return ("value", self._value(arg, names))

    def _typed(self, where: str, reader: str, node: ast.Call, names: dict) -> None:
        """One typed read, bound to the parameters of validate.Input's method."""
        parameters = list(inspect.signature(getattr(Input, reader)).parameters.values())[1:]
        given: dict = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
        for parameter, arg in zip(parameters, node.args, strict=False):
            given[parameter.name] = self._value(arg, names)
        for keyword in node.keywords:
            if keyword.arg is not None:
                given[keyword.arg] = self._value(keyword.value, names)
        name = given.get("name")
        if not isinstance(name, str):
            return
        fields = getattr(self.inputs, where)
        item = fields.setdefault(name, Field(name))
        item.schema, item.notes = _schema(reader, given)
        item.required, item.typed = given.get("required", False), True

    def _value(self, node, names: dict):
        """A constant, a name of the module or a bound parameter, or a tuple of them; else
        _UNKNOWN."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            bound = names.get(node.id)
            if isinstance(bound, tuple) and len(bound) == 2 and bound[0] == "value":
                return bound[1]
            if node.id in names:
                return _UNKNOWN
            return self.module.get(node.id, _UNKNOWN)
        if isinstance(node, ast.Tuple):
            items = tuple(self._value(element, names) for element in node.elts)
            return _UNKNOWN if _UNKNOWN in items else items
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = self._value(node.operand, names)
            return -value if isinstance(value, int) else _UNKNOWN
        return _UNKNOWN


def _is_ctx(node) -> bool:
    return isinstance(node, ast.Name) and node.id == "ctx"


def _returns_success(node) -> bool:
    """`return success(...)` or `return json_response(success(...), ...)`."""
    if isinstance(node, ast.Await):
        node = node.value
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return False
    if node.func.id == "success":
        return True
    return node.func.id == "json_response" and bool(node.args) and _returns_success(node.args[0])


def _schema(reader: str, given: dict) -> tuple[dict, list[str]]:
    """The JSON Schema of one typed read, and what it checks beyond the schema."""
    known = lambda key: given.get(key) is not _UNKNOWN  # noqa: E731
    notes: list[str] = []
    if reader == "text":
        schema: dict = {"type": "string"}
        if known("max_chars") and isinstance(given.get("max_chars"), int):
            schema["maxLength"] = given["max_chars"]
        if given.get("allow_empty") is False:
            schema["minLength"] = 1
        notes.append("no NUL character, valid Unicode")
        if given.get("strip", True) is not False:
            notes.append("white space around it is trimmed first, and the length counted after that"
                         + ("; it must not be empty then" if given.get("allow_empty") is False else ""))
        return schema, notes
    if reader == "boolean":
        return {"type": "boolean"}, notes
    if reader == "integer":
        schema = {"type": "integer"}
        if isinstance(given.get("low"), int):
            schema["minimum"] = given["low"]
        if isinstance(given.get("high"), int):
            schema["maximum"] = given["high"]
        return schema, notes
    if reader == "choice":
        options = given.get("options")
        if isinstance(options, tuple) and all(isinstance(option, str) for option in options):
            return {"type": "string", "enum": list(options)}, notes
        return {"type": "string"}, ["one of the values the server lists when it refuses another"]
    schema = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
    if isinstance(given.get("max_items"), int):
        schema["maxItems"] = given["max_items"]
    if isinstance(given.get("max_chars"), int):
        schema["items"]["maxLength"] = given["max_chars"]
    notes.append("no NUL character in an item")
    return schema, notes


def _field_schema(item: Field, nullable: bool = True) -> dict:
    """The schema of a field with its description; an optional body field may be null (taken as
    absent)."""
    if not item.typed:
        return {"description": "checked in code by the handler or its service (no schema is derived)"}
    schema = dict(item.schema)
    nullable = nullable and item.required is not True
    if nullable:
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
        schema["type"] = [schema["type"], "null"]
    notes = list(item.notes) + (["further checks in code"] if item.checked else [])
    if item.required is _UNKNOWN:
        notes.insert(0, "required in some cases (checked in code)")
    elif nullable:
        notes.append("null is taken as absent")
    if notes:
        schema["description"] = "; ".join(notes)
    return schema


# -- the document ------------------------------------------------------------------------------


def build_document(table: dict[str, Action], services=None, token: bool = True,
                   public: frozenset[str] = frozenset()) -> dict:
    """The OpenAPI 3.1 document of the actions of `table`. `services` (the running ones) give
    the docstrings that describe the answers; `token`: whether this server asks for one;
    `public`: the paths that need no sign-in. Blocks (reads the handlers' source)."""
    paths: dict[str, dict] = {}
    labels = [action.label for action in table.values()]
    for action in table.values():
        path = f"/api/{action.name}" + ("/{id}" if action.takes_id else "")
        inputs = handler_inputs(action.handler)
        open_route = f"/api/{action.name}" in public
        base = action.label.replace("|", "_") if labels.count(action.label) == 1 else action.name
        item: dict = {}
        primary = action.methods[0]
        for method in action.methods:
            operation_id = base if method == primary else f"{base}_{method.lower()}"
            item[method.lower()] = _operation(action, method, operation_id, inputs, services, open_route, token)
        paths[path] = item
    security_note = ("Sign in with `POST /api/login` (a cookie) or send `Authorization: Bearer <token>`."
                     if token else "This server has no access token: requests that name a loopback host "
                     "need no sign-in.")
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Totem",
            "version": __version__,
            "description": (
                "The REST API of Totem, generated from its action table. Read-only actions answer GET "
                "(and HEAD and POST without a body); actions that change something answer POST only. A "
                "body is a JSON object sent as application/json, each key once; unknown fields (and, "
                "where an action checks its query, unknown query parameters) are refused with 400. The "
                "inputs are derived from the handlers' own checks; what a field's description calls "
                "checked in code has no schema here, and a service may still refuse a value for what it "
                "means (a model that does not exist, a path outside the project) with 400 naming the "
                "field. Every error answers [{name, error}]. "
                + security_note + " Events come over the WebSocket /ws/, attachments from "
                "GET /attachments/{id}/ (not described here)."),
        },
        "paths": paths,
        "components": {
            "schemas": {
                "Errors": {"type": "array", "description": "Every problem, each naming its field (errors.py)",
                           "items": {"type": "object", "required": ["name", "error"],
                                     "properties": {"name": {"type": "string"}, "error": {"type": "string"}}}},
                "Success": {"type": "object", "required": ["success", "value"],
                            "properties": {"success": {"const": True}, "value": {}}},
            },
            "responses": {code: {"description": text, "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Errors"}}}} for code, text in ERROR_RESPONSES.items()},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "the access token of config.ini"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": COOKIE_NAME,
                           "description": "set by POST /api/login"},
            },
        },
        "security": [{"bearer": []}, {"cookie": []}] if token else [{}],
    }


ERROR_RESPONSES = {
    "400": "Bad input: each problem names its field",
    "401": "Not signed in",
    "403": "Refused (another origin, or a refusal of the action)",
    "404": "No such action or id",
    "413": "The body is larger than 20 MB",
    "415": "The body is not application/json",
    "429": "Too many failed sign-ins from this address (Retry-After says when to try again)",
    "default": "Another refusal in the same shape (409 a conflict, 502 git failed, 500 a failure of the server)",
}


def _operation(action: Action, method: str, operation_id: str, inputs: Inputs, services, open_route: bool,
               token: bool) -> dict:
    collection = action.label.split("|", 1)[0]
    operation: dict = {"operationId": operation_id, "summary": action.label, "tags": [collection]}
    description = _answer_description(action, inputs, services)
    if description:
        operation["description"] = description
    parameters = []
    if action.takes_id:
        parameters.append({"name": "id", "in": "path", "required": True,
                           "schema": {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS}})
    for item in (inputs.query or {}).values():
        parameters.append({"name": item.name, "in": "query", "required": item.required is True,
                           "schema": _field_schema(item, nullable=False)})
    if parameters:
        operation["parameters"] = parameters
    takes_body = inputs.body is not None and method == "POST"
    if takes_body:
        fields = inputs.body or {}
        schema: dict = {"type": "object", "additionalProperties": False,
                        "properties": {name: _field_schema(item) for name, item in fields.items()}}
        required = [name for name, item in fields.items() if item.required is True]
        if required:
            schema["required"] = required
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    if method == "HEAD":
        answer: dict = {"description": "The head of the GET answer"}
    elif inputs.success:
        answer = {"description": "Done: {success: true, value}", "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/Success"}}}}
    else:
        answer = {"description": "The data of the action", "content": {"application/json": {"schema": {}}}}
    codes = ["400", "401", "403", "404", "429"]
    if open_route:
        codes.remove("401")
    if method == "POST":
        codes.append("413")
    if takes_body:
        codes.append("415")
    operation["responses"] = {"200": answer} | {code: {"$ref": f"#/components/responses/{code}"}
                                                for code in [*codes, "default"]}
    if open_route:
        operation["security"] = [{}]
    if not inputs.derived:
        operation["description"] = (description + "\n\n" if description else "") + \
            "The inputs of this action could not be read from its source and are not described."
    return operation


def _answer_description(action: Action, inputs: Inputs, services) -> str:
    """The handler's docstring, else the docstring of the service method it calls."""
    own = inspect.getdoc(action.handler)
    if own:
        return own
    for service, method in inputs.services:
        target = getattr(getattr(services, service, None), method, None)
        doc = inspect.getdoc(target) if target is not None else None
        if doc:
            return doc
    return ""
