"""Account|read, and signing in and out with the access token."""

from __future__ import annotations

from .. import __version__
from ..errors import BadRequest
from ..httpd import json_response
from . import Action, Input, success


async def read_account(ctx):
    config = ctx.app.config
    return {
        "user": {"id": "local", "name": "local"},
        "token": bool(config.token),
        "version": __version__,
        "capabilities": {"mcp": config.mcp, "forge": config.forge, "forgedocs": config.forgedocs,
                         "cookiesecure": config.cookiesecure},
    }


def _require_token(ctx) -> None:
    if not ctx.app.config.token:
        raise BadRequest(("token", "no access token is configured, so there is nothing to sign in to"))


async def login(ctx):
    _require_token(ctx)
    body = Input(await ctx.request.json(), ("token",))
    token = body.text("token", required=True, max_chars=1024, strip=False)
    body.done()
    cookie = await ctx.app.perimeter.login(ctx.request, token)
    return json_response(success("local"), headers=[("Set-Cookie", cookie)])


async def logout(ctx):
    _require_token(ctx)
    cookie = await ctx.app.perimeter.logout(ctx.request)
    return json_response(success("local"), headers=[("Set-Cookie", cookie)])


ACTIONS = (
    Action("account", "Account|read", read_account),
    Action("login", "Account|login", login, changes=True),
    Action("logout", "Account|logout", logout, changes=True),
)
