"""The worktree use cases of a session: make one when a session is created with it, read its git
state (Sessions|git), merge it into the project's branch (Sessions|worktreemerge), discard it
(Sessions|worktreediscard) and drop it with a removed session when nothing would be lost.

The git work itself is `workspace/worktrees.py`; this owns the checks that are about the
domain (a running session is not merged or discarded; a session without a worktree has none
to merge) and the events after a change. It raises the errors of `errors.py`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from totem.errors import ApiError, BadRequest, Conflict, NotFound
from totem.events import SessionUpdated
from totem.rows import SessionRow
from totem.security.boundary import real_root
from totem.services.session_rows import Session, SessionRows
from totem.store import Store, session_view
from totem.workspace import worktrees
from totem.workspace.git import GitError, folder_status

if TYPE_CHECKING:
    from totem.agent.loop import Runs
    from totem.events import Hub


class Worktrees:
    """The git worktrees that sessions work in (<data>/worktrees/<sessionid>)."""

    def __init__(self, rows: SessionRows, store: Store, hub: Hub, runs: Runs, data_dir: str | None = None):
        self.rows = rows
        self.store = store
        self.hub = hub
        self.runs = runs  # a running session's worktree is not merged or discarded
        self.data_dir = data_dir  # where worktrees go (<data>/worktrees/<sessionid>)

    async def check(self, projectid: str) -> str:
        """Before a session is created with a worktree: the project's folder (links resolved),
        which must be a git repository. Raises NotFound, BadRequest."""
        project = await self.store.get_project(projectid)
        if project is None:
            raise NotFound(("projectid", f"no project {projectid}"))
        root = real_root(project["path"])
        try:
            await worktrees.check_repository(root)
        except worktrees.WorktreeError as exc:
            raise BadRequest(("worktree", str(exc))) from None
        return root

    async def add(self, row: SessionRow, root: str) -> SessionRow:
        """The new session's worktree, on a branch `totem/<name>`; when git fails the session
        goes again and BadRequest says why."""
        path = worktrees.worktree_path(self.data_dir or ".", row["id"])
        try:
            await worktrees.create(root, path, worktrees.branch_name(row["name"], row["id"]))
        except worktrees.WorktreeError as exc:
            await self.store.remove_session(row["id"])
            raise BadRequest(("worktree", str(exc))) from None
        return await self.store.set_session_worktree(row["id"], path) or row

    async def git(self, sessionid: str) -> dict[str, Any]:
        """The git state of the folder where the session works: a worktree's `{worktree: true,
        branch, into, base, ahead, behind, changes}`, else the project's folder status."""
        session, project = await self.rows.with_project(sessionid)
        root = real_root(project["path"])
        if not session["worktree"]:
            try:
                return await folder_status(root)
            except GitError as exc:
                raise ApiError(("git", str(exc)), status=502) from None
        try:
            return {"worktree": True, "path": session["worktree"],
                    **await worktrees.state(root, session["worktree"])}
        except worktrees.WorktreeError as exc:
            raise BadRequest(("worktree", str(exc))) from None

    async def merge(self, sessionid: str, username: str | None = None, useremail: str | None = None
                    ) -> dict[str, Any]:
        """The person's merge of the session's worktree into the project's branch; `username`
        and `useremail`, when given, are first set as the repository's user.name and user.email
        (the author of the commit). Raises NotFound, BadRequest (no worktree, a bad name or
        address: nothing set), Conflict (running; a conflict or a dirty project: nothing
        changed, the files named)."""
        problems = worktrees.author_problems(username, useremail)
        if problems:
            raise BadRequest(problems)
        session, root, path = await self._idle_worktree(sessionid, "merging")
        try:
            if username is not None or useremail is not None:
                await worktrees.set_author(root, username, useremail)
            return await worktrees.merge(root, path, session["name"])
        except worktrees.MergeRefused as exc:
            raise Conflict(("worktree", f"{exc}: {', '.join(exc.files) or 'no file named'}")) from None
        except worktrees.WorktreeError as exc:
            raise BadRequest(("worktree", str(exc))) from None

    async def discard(self, sessionid: str) -> Session:
        """The person's discard of the session's worktree and its branch; the session stays,
        without a folder to work in."""
        _session, root, path = await self._idle_worktree(sessionid, "discarding")
        await worktrees.discard(root, path, await worktrees.branch_of(path))
        row = await self.rows.get(sessionid)
        self.hub.publish(SessionUpdated(row["id"], session_view(row)))
        return self.rows.view(row)

    async def drop(self, session: SessionRow) -> None:
        """A removed session's worktree goes with its branch only when nothing would be lost;
        else it stays, listed as left over (Projects|git) until discarded."""
        if not session["worktree"] or session["parent"] or not os.path.isdir(session["worktree"]):
            return  # a sub-agent works in its parent's worktree, which is the parent's to drop
        project = await self.store.get_project(session["projectid"])
        if project is None:
            return
        root = real_root(project["path"])
        try:
            if not await worktrees.loses_work(root, session["worktree"]):
                await worktrees.discard(root, session["worktree"], await worktrees.branch_of(session["worktree"]))
        except worktrees.WorktreeError:
            pass  # kept: a worktree git cannot read is never removed blind

    async def _idle_worktree(self, sessionid: str, action: str) -> tuple[SessionRow, str, str]:
        session, project = await self.rows.with_project(sessionid)
        path = session["worktree"]
        if not path:
            raise BadRequest(("session", "the session has no worktree"))
        if not os.path.isdir(path):
            raise BadRequest(("session", "the session's worktree was discarded"))
        if self.runs.is_running(session["id"]):
            raise Conflict(("session", f"the session is running; stop it before {action}"))
        return session, real_root(project["path"]), path
