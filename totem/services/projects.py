"""The project use cases: list, open a folder, remove, the file tree, the git state, and the
project's commands and agents.

Owns what each use case means, whoever calls it: a project is a real, readable folder named by
an absolute path (links resolved), opening it again gives the same project, and removing one
removes each of its sessions as `Sessions.remove` does (runs aborted, jobs stopped, questions
rejected, hub told) with every row of the project. The file tree shows the protected secret
files (the person may want to see that they exist) with `protected: true`, never any content.
It raises the errors of `errors.py`; it never parses HTTP and never imports `api`, `httpd`,
`websocket` or `routes`.
"""

from __future__ import annotations

import asyncio
import os
import stat
from typing import TYPE_CHECKING, Any

from totem.errors import ApiError, BadRequest, NotFound
from totem.rows import ProjectRow
from totem.security.boundary import BoundaryError, is_protected_env, real_root, relative_path, resolve_inside
from totem.services.project_list import Project, ProjectList, project_view
from totem.store import Store
from totem.tools.files import is_temp_name
from totem.workspace import worktrees
from totem.workspace.git import GitError, folder_status

if TYPE_CHECKING:
    from totem.services.sessions import Sessions
    from totem.workspace.snapshots import Snapshots

__all__ = ["HIDDEN_IN_TREE", "MAX_TREE_ITEMS", "Projects", "project_view"]

MAX_TREE_ITEMS = 1000
HIDDEN_IN_TREE = frozenset((".git",))
GIT_FAILED_STATUS = 502  # git itself failed: the folder is fine, the tool we depend on is not

LeftOver = list[dict[str, Any]]  # module level: `Projects.list` hides the builtin in the class

Places = list[dict[str, Any]]  # named here, since `Projects.list` hides the builtin inside the class


class Projects:
    """The folders that Totem works in."""

    def __init__(self, store: Store, sessions: Sessions, snapshots: Snapshots | None = None,
                 data_dir: str | None = None):
        self.store = store
        self.sessions = sessions  # for the cascade of a removal
        self.snapshots = snapshots  # a forgotten project's kept contents go
        self.data_dir = data_dir  # where session worktrees are (<data>/worktrees)
        self.listing = ProjectList(store)  # the App answers Projects|list with one before the core

    async def get(self, projectid: str) -> ProjectRow:
        """The stored row of a project. Raises NotFound."""
        project = await self.store.get_project(projectid)
        if project is None:
            raise NotFound(("id", f"no project {projectid}"))
        return project

    async def list(self) -> list[dict[str, Any]]:
        """Every project, the most recently opened first, each with `totaljs` (and
        `totaljsversion`, 4, 5 or None): whether it is a Total.js project (project_list.py)."""
        return await self.listing.list()

    async def recent(self, count: int) -> Places:
        """The `count` projects opened last, `{name, path}` each, the most recent first (the
        places a folder dialog offers; no Total.js detection)."""
        rows = await self.store.list_projects()
        return [{"name": row["name"], "path": row["path"]} for row in rows[:count]]

    async def open(self, path: str) -> Project:
        """The project of a folder (`~` expanded, links resolved), created when new; opening an
        open folder gives its project again, `opened` moved to now. Raises BadRequest (not
        absolute, missing, a file, unreadable, a name that is not UTF-8)."""
        expanded = os.path.expanduser(path)
        if not os.path.isabs(expanded):
            raise BadRequest(("path", "must be an absolute path"))
        real = await asyncio.to_thread(_check_folder, expanded)
        name = os.path.basename(real) or real
        project, _created = await self.store.open_project(real, name)
        return project_view(project)

    async def remove(self, projectid: str) -> str:
        """Forget a project (never its folder) with each of its sessions and all they hold;
        returns the id. Raises NotFound."""
        project = await self.get(projectid)
        sessions = await self.store.list_sessions(project["id"])
        for session in sessions:
            await self.sessions.wind_down(session["id"])
        await self.store.remove_project(project["id"])  # the sessions' rows go with it
        if self.snapshots is not None:
            await asyncio.to_thread(self.snapshots.forget_project, project["id"])
        for session in sessions:
            self.sessions.announce_removed(session)
        return project["id"]

    async def files(self, projectid: str, path: str = "", sessionid: str | None = None) -> dict[str, Any]:
        """One level of the file tree: `{path, items: [{name, path, type, size, protected}],
        more}`, `.git` left out, at most MAX_TREE_ITEMS items; with `sessionid`, of the folder
        where that session works (its worktree when it has one). Raises NotFound, BadRequest
        (outside the project, inside .git, not a folder, unreadable)."""
        project = await self.get(projectid)
        root = await self._folder(project, sessionid)
        try:
            folder = resolve_inside(root, path or ".")
        except BoundaryError as exc:
            raise BadRequest(("path", str(exc))) from None
        if any(part in HIDDEN_IN_TREE for part in relative_path(root, folder).split("/")):
            raise BadRequest(("path", ".git is not shown"))
        if not os.path.isdir(folder):
            raise BadRequest(("path", f"{path} is not a folder of the project"))
        try:
            items, more = await asyncio.to_thread(_list_tree, root, folder)
        except OSError as exc:
            raise BadRequest(("path", f"{path or '.'} cannot be read: {exc.strerror}")) from None
        return {"path": relative_path(root, folder), "items": items, "more": more}

    async def _folder(self, project: ProjectRow, sessionid: str | None) -> str:
        """The project's folder, or with `sessionid` the folder where that session works (its
        worktree when it has one). Raises NotFound (no such session in the project)."""
        if not sessionid:
            return project["path"]
        session = await self.store.get_session(sessionid)
        if session is None or session["projectid"] != project["id"]:
            raise NotFound(("sessionid", f"no session {sessionid} in this project"))
        if session["worktree"] and os.path.isdir(session["worktree"]):
            return session["worktree"]
        return project["path"]

    async def commands(self, projectid: str, sessionid: str | None = None) -> dict[str, Any]:
        """`{commands: [{name, file, description, model, mode, agent, arguments}], agents: [{name,
        file, description, model, mode, tools}], invalid: [{file, error}]}`: the `.totem/commands`
        and `.totem/agents` of the project (of the folder a session works in, with `sessionid`);
        a file that cannot be used is listed in `invalid` with why. Raises NotFound."""
        project = await self.get(projectid)
        root = real_root(await self._folder(project, sessionid))
        from totem.workspace import (
            commands as project_commands,  # its patterns take a while to compile: not at start-up
        )
        return (await asyncio.to_thread(project_commands.read_listing, root)).view()

    async def git(self, projectid: str) -> dict[str, Any]:
        """`{repository, branch, files: [{path, status, staged}], more}` of the folder. Raises
        NotFound, ApiError 502 when git fails."""
        project = await self.get(projectid)
        try:
            answer = await folder_status(project["path"])
        except GitError as exc:
            raise ApiError(("git", str(exc)), status=GIT_FAILED_STATUS) from None
        if answer.get("repository") and not answer.get("refused"):
            answer["leftover"] = await self.leftover_worktrees(project)
        return answer

    async def leftover_worktrees(self, project: ProjectRow) -> LeftOver:
        """`[{path, branch}]`: worktrees of removed sessions, kept because they held work."""
        if self.data_dir is None:
            return []
        ours = os.path.join(os.path.realpath(self.data_dir), worktrees.WORKTREES_DIR)
        try:
            found = await worktrees.listed(real_root(project["path"]))
        except worktrees.WorktreeError:
            return []
        left = []
        for item in found:
            path = os.path.realpath(item["path"])
            if os.path.dirname(path) == ours and await self.store.get_session(os.path.basename(path)) is None:
                left.append({"path": path, "branch": item["branch"]})
        return left

    async def discard_worktree(self, projectid: str, path: str) -> str:
        """The person's discard of a left-over worktree (and its branch). Raises NotFound,
        BadRequest (not a left-over worktree of this project)."""
        project = await self.get(projectid)
        wanted = os.path.realpath(path)
        for item in await self.leftover_worktrees(project):
            if item["path"] == wanted:
                await worktrees.discard(real_root(project["path"]), wanted, item["branch"])
                return wanted
        raise BadRequest(("path", "is not a left-over worktree of this project"))


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


def _entry_view(root: str, folder: str, entry: os.DirEntry[str]) -> dict[str, Any]:
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


def _list_tree(root: str, folder: str) -> tuple[list[dict[str, Any]], bool]:
    with os.scandir(folder) as entries:
        # Totem's own temporary files of a write in progress are no files of the project.
        items = [_entry_view(root, folder, entry) for entry in entries
                 if entry.name not in HIDDEN_IN_TREE and not is_temp_name(entry.name)]
    items.sort(key=lambda item: (item["type"] != "dir", item["name"].lower(), item["name"]))
    return items[:MAX_TREE_ITEMS], len(items) > MAX_TREE_ITEMS
