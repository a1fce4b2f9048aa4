"""Projects|list, open, remove, files, git and commands: the folders that Totem works in.

Each handler checks the fields of its input and calls `ctx.services.projects`, where the use
case lives (`totem/services/projects.py`).
"""

from __future__ import annotations

from totem.http.api import Action, success


async def require_project(ctx, projectid: str | None = None) -> dict:
    """The project of the URL id (or the given id). Raises NotFound."""
    return await ctx.services.projects.get(projectid or ctx.id)


async def list_projects(ctx):
    ctx.params(()).done()
    return await ctx.services.projects.list()


async def open_project(ctx):
    body = await ctx.body(("path",))
    given = body.text("path", required=True, max_chars=4096)
    body.done()
    return await ctx.services.projects.open(given)


async def remove_project(ctx):
    return success(await ctx.services.projects.remove(ctx.id))


async def list_files(ctx):
    await require_project(ctx)  # an unknown project is 404 before its query is checked
    params = ctx.params(("path", "sessionid"))
    given = params.text("path", max_chars=4096, allow_empty=True, default="")
    sessionid = params.text("sessionid", max_chars=64)
    params.done()
    return await ctx.services.projects.files(ctx.id, given, sessionid)


async def project_git(ctx):
    await require_project(ctx)
    ctx.params(()).done()
    return await ctx.services.projects.git(ctx.id)


async def list_commands(ctx):
    await require_project(ctx)
    params = ctx.params(("sessionid",))
    sessionid = params.text("sessionid", max_chars=64)
    params.done()
    return await ctx.services.projects.commands(ctx.id, sessionid)


async def discard_left_worktree(ctx):
    await require_project(ctx)
    body = await ctx.body(("path",))
    path = body.text("path", required=True, max_chars=4096)
    body.done()
    return success(await ctx.services.projects.discard_worktree(ctx.id, path))


ACTIONS = (
    Action("projects", "Projects|list", list_projects, mcp=True),
    Action("projects_open", "Projects|open", open_project, changes=True),
    Action("projects_remove", "Projects|remove", remove_project, changes=True, takes_id=True),
    Action("projects_files", "Projects|files", list_files, takes_id=True),
    Action("projects_git", "Projects|git", project_git, takes_id=True),
    Action("projects_commands", "Projects|commands", list_commands, takes_id=True),
    Action("projects_worktreediscard", "Projects|worktreediscard", discard_left_worktree, changes=True,
           takes_id=True),
)
