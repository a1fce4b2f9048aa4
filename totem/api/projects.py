"""Projects|list, open, remove, files and git: the folders that Totem works in.

The file tree shows the protected secret files (the person may want to see that they exist) with
`protected: true`, so that the page can mark them; it never shows any file's content.
"""

from __future__ import annotations

import asyncio
import os
import stat

from ..boundary import BoundaryError, is_protected_env, relative_path, resolve_inside
from ..errors import ApiError, BadRequest, NotFound
from ..events import SessionUpdated
from ..git import GitError, folder_status
from . import Action, success

MAX_TREE_ITEMS = 1000
HIDDEN_IN_TREE = frozenset((".git",))


def project_view(row: dict) -> dict:
    return {"id": row["id"], "name": row["name"], "path": row["path"],
            "created": row["created"], "opened": row["opened"]}


async def require_project(ctx, projectid: str | None = None) -> dict:
    """The project of the URL id (or the given id). Raises NotFound."""
    projectid = projectid or ctx.id
    project = await ctx.app.store.get_project(projectid)
    if project is None:
        raise NotFound(("id", f"no project {projectid}"))
    return project


async def list_projects(ctx):
    ctx.params(()).done()
    return [project_view(row) for row in await ctx.app.store.list_projects()]


def _check_folder(path: str) -> str:
    real = os.path.realpath(path)
    try:
        real.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(("path", "folders whose names are not UTF-8 cannot be opened")) from None
    if not os.path.exists(real):
        raise BadRequest(("path", f"{path} does not exist"))
    if not os.path.isdir(real):
        raise BadRequest(("path", f"{path} is a file, not a folder"))
    if not os.access(real, os.R_OK | os.X_OK):
        raise BadRequest(("path", f"{path} cannot be read: permission denied"))
    return real


async def open_project(ctx):
    body = await ctx.body(("path",))
    given = body.text("path", required=True, max_chars=4096)
    body.done()
    expanded = os.path.expanduser(given)
    if not os.path.isabs(expanded):
        raise BadRequest(("path", "must be an absolute path"))
    real = await asyncio.to_thread(_check_folder, expanded)
    name = os.path.basename(real) or real
    # Opening a folder that is already open gives its project again (opened moves to now).
    project, _created = await ctx.app.store.open_project(real, name)
    return project_view(project)


async def remove_project(ctx):
    project = await require_project(ctx)
    sessions = await ctx.app.store.list_sessions(project["id"])
    for session in sessions:
        await ctx.app.runs.abort(session["id"])
        await ctx.app.jobs.forget_session(session["id"])
    await ctx.app.store.remove_project(project["id"])
    for session in sessions:
        ctx.app.hub.forget_session(session["id"])
        ctx.app.hub.publish(SessionUpdated(session["id"], {"id": session["id"], "projectid": project["id"],
                                                           "removed": True}))
    return success(project["id"])


def _entry_view(root: str, folder: str, entry: os.DirEntry) -> dict:
    """One entry of the tree. `protected`: a secret file that the agent asks for and search
    skips, by its own name, by the name a link leads to, or a folder whose files all are."""
    path = relative_path(root, os.path.join(folder, entry.name))
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return {"name": entry.name, "path": path, "type": "unknown", "size": 0,
                "protected": is_protected_env(path)}
    kind = "dir" if stat.S_ISDIR(info.st_mode) else "file" if stat.S_ISREG(info.st_mode) else "other"
    target = path
    if stat.S_ISLNK(info.st_mode):
        try:
            resolved = resolve_inside(root, os.path.join(folder, entry.name))
            kind = "dir" if os.path.isdir(resolved) else "file"
            target = relative_path(root, resolved)
        except BoundaryError:
            kind = "outside"  # a link that leads out of the project is shown, never followed
    protected = any(is_protected_env(name + "/" if kind == "dir" else name) for name in {path, target})
    return {"name": entry.name, "path": path, "type": kind,
            "size": info.st_size if kind == "file" else 0, "protected": protected}


def _list_tree(root: str, folder: str) -> tuple[list[dict], bool]:
    with os.scandir(folder) as entries:
        items = [_entry_view(root, folder, entry) for entry in entries if entry.name not in HIDDEN_IN_TREE]
    items.sort(key=lambda item: (item["type"] != "dir", item["name"].lower(), item["name"]))
    return items[:MAX_TREE_ITEMS], len(items) > MAX_TREE_ITEMS


async def list_files(ctx):
    project = await require_project(ctx)
    params = ctx.params(("path",))
    given = params.text("path", max_chars=4096, allow_empty=True, default="")
    params.done()
    try:
        folder = resolve_inside(project["path"], given or ".")
    except BoundaryError as exc:
        raise BadRequest(("path", str(exc))) from None
    if any(part in HIDDEN_IN_TREE for part in relative_path(project["path"], folder).split("/")):
        raise BadRequest(("path", ".git is not shown"))
    if not os.path.isdir(folder):
        raise BadRequest(("path", f"{given} is not a folder of the project"))
    try:
        items, more = await asyncio.to_thread(_list_tree, project["path"], folder)
    except OSError as exc:
        raise BadRequest(("path", f"{given or '.'} cannot be read: {exc.strerror}")) from None
    return {"path": relative_path(project["path"], folder), "items": items, "more": more}


async def project_git(ctx):
    project = await require_project(ctx)
    ctx.params(()).done()
    try:
        return await folder_status(project["path"])
    except GitError as exc:
        raise ApiError(("git", str(exc)), status=502) from None


ACTIONS = (
    Action("projects", "Projects|list", list_projects, mcp=True),
    Action("projects_open", "Projects|open", open_project, changes=True),
    Action("projects_remove", "Projects|remove", remove_project, changes=True, takes_id=True),
    Action("projects_files", "Projects|files", list_files, takes_id=True),
    Action("projects_git", "Projects|git", project_git, takes_id=True),
)
