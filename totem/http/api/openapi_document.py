"""OpenAPI|read (`GET /api/openapi.json`): an OpenAPI 3.1 document of every action, made from
the action table, so that clients can be generated.

Each action becomes a path (`/api/{name}`, and `/api/{name}/{id}` for one that takes an id) with
an operation for each method it answers. Its query parameters, its request body and its answer
are the JSON Schemas that the action declares beside its handler (contract.py), as they are:
the same dicts check its input. Every error has the one shape of `errors.py`.

Must not: change anything, or describe an input that the action does not declare.
"""

from __future__ import annotations

import inspect
from typing import Any

from totem import __version__
from totem.http.api import Action
from totem.http.api.contract import ID
from totem.http.auth import COOKIE_NAME

OPENAPI_VERSION = "3.1.0"


def build_document(table: dict[str, Action], token: bool = True,
                   public: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the actions of `table`. `token`: whether this server asks for
    one; `public`: the paths that need no sign-in."""
    paths: dict[str, dict[str, Any]] = {}
    labels = [action.label for action in table.values()]
    for action in table.values():
        path = f"/api/{action.name}" + ("/{id}" if action.takes_id else "")
        open_route = f"/api/{action.name}" in public
        base = action.label.replace("|", "_") if labels.count(action.label) == 1 else action.name
        item: dict[str, Any] = {}
        primary = action.methods[0]
        for method in action.methods:
            operation_id = base if method == primary else f"{base}_{method.lower()}"
            item[method.lower()] = _operation(action, method, operation_id, open_route)
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
                "where an action checks its query, unknown query parameters) are refused with 400. Each "
                "input and answer is the schema the action declares, the one its input is checked "
                "against: text never holds a NUL character or a lone surrogate, a text field is trimmed "
                "of white space around it, and an optional body field may be null (taken as absent). A "
                "service may still refuse a value for what it means (a model that does not exist, a "
                "folder that is missing, a path outside the project) with 400 naming the field. Every "
                "error answers [{name, error}]. "
                + security_note + " Events come over the WebSocket /ws/, attachments from "
                "GET /attachments/{id}/ (not described here)."),
        },
        "paths": paths,
        "components": {
            "schemas": {
                "Errors": {"type": "array", "description": "Every problem, each naming its field (errors.py)",
                           "items": {"type": "object", "required": ["name", "error"],
                                     "properties": {"name": {"type": "string"}, "error": {"type": "string"}}}},
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


def _operation(action: Action, method: str, operation_id: str, open_route: bool) -> dict[str, Any]:
    collection = action.label.split("|", 1)[0]
    operation: dict[str, Any] = {"operationId": operation_id, "summary": action.label, "tags": [collection]}
    description = inspect.getdoc(action.handler)
    if description:
        operation["description"] = description
    parameters = []
    if action.takes_id:
        parameters.append({"name": "id", "in": "path", "required": True, "schema": ID})
    required = set(action.query.get("required", ()))
    for name, schema in action.query.get("properties", {}).items():
        parameters.append({"name": name, "in": "query", "required": name in required, "schema": schema})
    if parameters:
        operation["parameters"] = parameters
    takes_body = action.body is not None and method == "POST"
    if takes_body:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": action.body}}}
    if method == "HEAD":
        answer: dict[str, Any] = {"description": "The head of the GET answer"}
    else:
        answer = {"description": action.answer.get("description", "The data of the action"),
                  "content": {"application/json": {"schema": action.answer}}}
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
    return operation
