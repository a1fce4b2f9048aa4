"""OpenAPI|read (`GET /api/openapi.json`): the OpenAPI 3.1 document of every action, made by
openapi_document.py from the action table. The maker (it reads the handlers' source with ast and
inspect) is imported with the first request for the document, not at start-up."""

from __future__ import annotations

import asyncio

from totem.http.api import Action


async def read_openapi(ctx):
    ctx.params(()).done()
    from totem.http.api.openapi_document import build_document
    from totem.http.routes import PUBLIC_ACTIONS  # the route table, above the API, says which paths are open
    return await asyncio.to_thread(build_document, ctx.app.router.actions, ctx.services,
                                   bool(ctx.app.config.token), PUBLIC_ACTIONS)


ACTIONS = (
    Action("openapi.json", "OpenAPI|read", read_openapi),
)
