"""Projects|list, open, remove, files, git and commands: the folders that Totem works in.

Each handler checks the fields of its input and calls `ctx.services.projects`, where the use
case lives (`totem/services/projects.py`); Projects|list calls `ctx.project_list`
(`totem/services/project_list.py`), which answers before the core is built.
"""

from __future__ import annotations

from typing import Any

from totem.http.api import Action, Context, success
from totem.http.api.contract import (
    BOOLEAN,
    ID,
    ID_ANSWER,
    INTEGER,
    STRING,
    TIME_MS,
    body,
    listing,
    maybe,
    patterned,
    query,
    record,
    success as success_answer,
    text,
)
from totem.rows import ProjectRow

MAX_PATH_CHARS = 4096
ABSOLUTE_PATH = patterned(r"^[/~][^\x00]*$", "an absolute path", MAX_PATH_CHARS)
PROJECT = record({"id": STRING, "name": STRING, "path": STRING, "created": TIME_MS, "opened": TIME_MS})
PROJECTS = listing(record(PROJECT["properties"] | {"totaljs": BOOLEAN, "totaljsversion": maybe(INTEGER)}),
                   "every project, the most recently opened first")
GIT_FILE = record({"path": STRING, "status": STRING, "staged": BOOLEAN})
GIT_STATE = record({"repository": BOOLEAN, "branch": maybe(STRING), "files": listing(GIT_FILE), "more": BOOLEAN},
                   {"refused": STRING, "leftover": listing(record({"path": STRING, "branch": maybe(STRING)}))},
                   "the git state of the folder; refused: why git is not run in it")
TREE_ITEM = record({"name": STRING, "path": STRING,
                    "type": {"type": "string", "enum": ["dir", "file", "other", "outside", "unknown"]},
                    "size": INTEGER, "protected": BOOLEAN})
TREE = record({"path": STRING, "items": listing(TREE_ITEM), "more": BOOLEAN})
COMMANDS = record({"commands": listing(record({"name": STRING, "file": STRING})),
                   "agents": listing(record({"name": STRING, "file": STRING})),
                   "invalid": listing(record({"file": STRING, "error": STRING}))},
                  description="the project's .totem/commands and .totem/agents; invalid: the files that cannot be used")
SESSION_FOLDER = query(optional={"sessionid": ID})


async def require_project(ctx: Context, projectid: str | None = None) -> ProjectRow:
    """The project of the URL id (or the given id). Raises NotFound."""
    return await ctx.services.projects.get(projectid or ctx.id)


async def list_projects(ctx: Context) -> list[dict[str, Any]]:
    ctx.params().done()
    return await ctx.project_list.list()


OPEN_BODY = body({"path": ABSOLUTE_PATH})


async def open_project(ctx: Context) -> dict[str, Any]:
    body = await ctx.body()
    given = body.text("path")
    body.done()
    return await ctx.services.projects.open(given)


async def remove_project(ctx: Context) -> dict[str, Any]:
    return success(await ctx.services.projects.remove(ctx.id))


FILES_QUERY = query(optional={"path": text(MAX_PATH_CHARS, empty=True, description="a folder of the project"),
                             "sessionid": ID})


async def list_files(ctx: Context) -> dict[str, Any]:
    await require_project(ctx)  # an unknown project is 404 before its query is checked
    params = ctx.params()
    given = params.text("path", default="")
    sessionid = params.text("sessionid")
    params.done()
    return await ctx.services.projects.files(ctx.id, given, sessionid)


async def project_git(ctx: Context) -> dict[str, Any]:
    await require_project(ctx)
    ctx.params().done()
    return await ctx.services.projects.git(ctx.id)


async def list_commands(ctx: Context) -> dict[str, Any]:
    await require_project(ctx)
    params = ctx.params()
    sessionid = params.text("sessionid")
    params.done()
    return await ctx.services.projects.commands(ctx.id, sessionid)


DISCARD_BODY = body({"path": text(MAX_PATH_CHARS, description="a left-over worktree (Projects|git's leftover)")})


async def discard_left_worktree(ctx: Context) -> dict[str, Any]:
    await require_project(ctx)
    body = await ctx.body()
    path = body.text("path")
    body.done()
    return success(await ctx.services.projects.discard_worktree(ctx.id, path))


ACTIONS = (
    Action("projects", "Projects|list", list_projects, mcp=True, answer=PROJECTS),
    Action("projects_open", "Projects|open", open_project, changes=True, body=OPEN_BODY, answer=PROJECT),
    Action("projects_remove", "Projects|remove", remove_project, changes=True, takes_id=True, answer=ID_ANSWER),
    Action("projects_files", "Projects|files", list_files, takes_id=True, query=FILES_QUERY, answer=TREE),
    Action("projects_git", "Projects|git", project_git, takes_id=True, answer=GIT_STATE),
    Action("projects_commands", "Projects|commands", list_commands, takes_id=True, query=SESSION_FOLDER,
           answer=COMMANDS),
    Action("projects_worktreediscard", "Projects|worktreediscard", discard_left_worktree, changes=True,
           takes_id=True, body=DISCARD_BODY, answer=success_answer(STRING, "Discarded: the value is its path")),
)
