"""OpenAPI|read (`GET /api/openapi.json`): the OpenAPI 3.1 document of every action, made by
openapi_document.py from the contracts that the actions declare."""

from __future__ import annotations

from typing import Any

from totem.http.api import Action, Context
from totem.http.api.contract import record
from totem.http.api.openapi_document import OPENAPI_VERSION, build_document

DOCUMENT = record({"openapi": {"const": OPENAPI_VERSION}, "info": {"type": "object"}, "paths": {"type": "object"},
                   "components": {"type": "object"}}, description="an OpenAPI 3.1 document")


async def read_openapi(ctx: Context) -> dict[str, Any]:
    ctx.params().done()
    from totem.http.routes import PUBLIC_ACTIONS  # the route table, above the API, says which paths are open
    return build_document(ctx.app.router.actions, bool(ctx.app.config.token), PUBLIC_ACTIONS)


ACTIONS = (
    Action("openapi.json", "OpenAPI|read", read_openapi, answer=DOCUMENT),
)
