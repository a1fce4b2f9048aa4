"""Sessions|list, create, read, update, remove and messages: the conversations of a project."""

from __future__ import annotations

from ..errors import NotFound
from ..events import SessionUpdated
from . import Action, success
from .projects import require_project

MAX_NAME_CHARS = 200
DEFAULT_SESSION_NAME = "New session"
DEFAULT_MESSAGE_PAGE = 100
MAX_MESSAGE_PAGE = 500


def session_view(row: dict) -> dict:
    return {"id": row["id"], "projectid": row["projectid"], "name": row["name"], "status": row["status"],
            "mode": row["mode"], "autoaccept": bool(row["autoaccept"]), "model": row["model"],
            "worktree": row["worktree"], "created": row["created"], "updated": row["updated"],
            "redo": False}


async def require_session(ctx) -> dict:
    """The session of the URL id. Raises NotFound."""
    session = await ctx.app.store.get_session(ctx.id)
    if session is None:
        raise NotFound(("id", f"no session {ctx.id}"))
    return session


async def list_sessions(ctx):
    params = ctx.params(("projectid",))
    projectid = params.text("projectid", required=True, max_chars=64)
    params.done()
    await require_project(ctx, projectid)
    return [session_view(row) for row in await ctx.app.store.list_sessions(projectid)]


async def create_session(ctx):
    body = await ctx.body(("projectid", "name"))
    projectid = body.text("projectid", required=True, max_chars=64)
    name = body.text("name", max_chars=MAX_NAME_CHARS, default=DEFAULT_SESSION_NAME)
    body.done()
    row = await ctx.app.store.create_session(projectid, name)
    if row is None:
        raise NotFound(("projectid", f"no project {projectid}"))
    session = session_view(row)
    ctx.app.hub.publish(SessionUpdated(session["id"], session))
    return session


async def read_session(ctx):
    ctx.params(()).done()
    return session_view(await require_session(ctx))


async def update_session(ctx):
    await require_session(ctx)
    body = await ctx.body(("name",))
    name = body.text("name", required=True, max_chars=MAX_NAME_CHARS)
    body.done()
    row = await ctx.app.store.rename_session(ctx.id, name)
    if row is None:
        raise NotFound(("id", f"no session {ctx.id}"))
    session = session_view(row)
    ctx.app.hub.publish(SessionUpdated(session["id"], session))
    return session


async def remove_session(ctx):
    session = await require_session(ctx)
    await ctx.app.store.remove_session(session["id"])
    ctx.app.hub.forget_session(session["id"])
    ctx.app.hub.publish(SessionUpdated(session["id"], {"id": session["id"], "projectid": session["projectid"],
                                                       "removed": True}))
    return success(session["id"])


async def list_messages(ctx):
    await require_session(ctx)
    params = ctx.params(("before", "limit"))
    before = params.text("before", max_chars=64)
    limit = params.integer("limit", 1, MAX_MESSAGE_PAGE, default=DEFAULT_MESSAGE_PAGE)
    params.done()
    messages, more = await ctx.app.store.list_messages(ctx.id, before, limit)
    return {"messages": messages, "more": more}


ACTIONS = (
    Action("sessions", "Sessions|list", list_sessions, mcp=True),
    Action("sessions_create", "Sessions|create", create_session, changes=True, mcp=True),
    Action("sessions_read", "Sessions|read", read_session, takes_id=True, mcp=True),
    Action("sessions_update", "Sessions|update", update_session, changes=True, takes_id=True),
    Action("sessions_remove", "Sessions|remove", remove_session, changes=True, takes_id=True),
    Action("sessions_messages", "Sessions|messages", list_messages, takes_id=True, mcp=True),
)
