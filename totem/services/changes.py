"""The use cases of a session's file changes: diff, undo, redo and the person's Save as.

Owns what each means, whoever calls it (the REST API; the MCP route's Sessions_diff later): the
checks (nothing is undone while the session runs; Save as stays inside the project, never in
`.git` or a protected secret file, and replaces a file only when told to; for a file that a
project MCP server approved to start without asking runs, the refusal without `replace` says
so), the restore through
`snapshots.py`, the writes (messages taken back, the redo), and the events after them
(`diff.updated`, `session.updated`).

Undo restores, for each file that the message and the later ones changed, its content before
the first of those changes; a file whose content is not what Totem left is a conflict, left as
it is unless `force`. Redo puts back what the last undo replaced (one level); a new prompt
forgets it (Sessions.prompt drops the messages taken back).

Undo, redo and Save as are journaled in the session before they touch a file, and `recover`
completes at start what a kill interrupted.

Must not: parse HTTP, or restore files any other way than through `Snapshots` (plan_restore,
apply_restore, complete_restore).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from totem.errors import BadRequest, Conflict, NotFound, StorageFull, out_of_space
from totem.events import DiffUpdated, SessionUpdated
from totem.rows import SessionRow, SnapshotRow
from totem.security import boundary
from totem.store import Store, session_view
from totem.tools import NoSpace, ToolError, files as file_io
from totem.workspace.snapshots import Prior, Restored, RestorePlan, Scope, Snapshots, content_hash, disk_digest

if TYPE_CHECKING:
    from totem.agent.loop import Runs
    from totem.events import Hub
    from totem.process.jobs import Jobs

MAX_SAVE_BYTES = file_io.MAX_WRITE_BYTES

log = logging.getLogger("totem.changes")
T = TypeVar("T")
Side = Literal["before", "after"]  # the content of a snapshot row before its change, or after it


class Changes:
    """What the agent changed in the files of a session, and taking it back."""

    def __init__(self, store: Store, hub: Hub, snapshots: Snapshots, runs: Runs, jobs: Jobs | None = None,
                 pinned: Callable[[str, str], Awaitable[dict[str, str]]] | None = None):
        self.store = store
        self.hub = hub
        self.snapshots = snapshots
        self.runs = runs  # whether a session runs, its waiting questions
        self.jobs = jobs  # a job still running may change files after the undo
        # (projectid, root) -> {path: server}: the files that approved MCP servers run (the gate's)
        self.pinned = pinned
        self._busy: set[str] = set()  # sessions with an undo, redo or Save as under way

    async def _session(self, sessionid: str) -> tuple[SessionRow, str, str]:
        """The session, its project id and the folder it works in. Raises NotFound."""
        session = await self.store.get_session(sessionid)
        if session is None:
            raise NotFound(("id", f"no session {sessionid}"))
        project = await self.store.get_project(session["projectid"])
        if project is None:
            raise NotFound(("id", f"no project of session {sessionid}"))
        return session, project["id"], boundary.session_root(session, project)

    def _refuse_running(self, session: SessionRow, action: str) -> None:
        if session["status"] == "running" or self.runs.is_running(session["id"]):
            raise Conflict(("session", f"the session is running; stop it (abort) or wait before {action}"))
        if self.jobs is not None and any(job["status"] == "running" for job in self.jobs.list(session["id"])):
            raise Conflict(("session", f"a background job of the session is running; stop it before {action}"))

    # -- reading ----------------------------------------------------------------------------

    async def diff(self, sessionid: str) -> list[dict[str, Any]]:
        """`[{path, status, additions, deletions, patch, changes}]`: each file the session
        changed (and that differs now), from before its first change to the disk now, with the
        audit of each change: who asked (message, part, tool), what allowed it, when, and what
        it produced. Raises NotFound."""
        _session, projectid, root = await self._session(sessionid)
        rows = [row for row in await self.store.session_snapshots(sessionid) if not row["reverted"]]
        first: dict[str, str | None] = {}
        for row in rows:
            first.setdefault(row["path"], row["before"])
        files = await asyncio.to_thread(
            lambda: [found for path, before in first.items()
                     if (found := self.snapshots.file_diff(projectid, root, path, before)) is not None])
        audit = await self._audit(rows)
        for entry in files:
            entry["changes"] = audit.get(entry["path"], [])
        return files

    async def _audit(self, rows: list[SnapshotRow]) -> dict[str, list[dict[str, Any]]]:
        parts = await self.store.get_parts(sorted({row["partid"] for row in rows if row["partid"]}))
        audit: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            part = parts.get(row["partid"] or "")
            data = part["data"] if part else {}
            decision = data.get("decision") or {}
            allowed = ({"by": "person", "reason": "the person's own Save as"} if row["tool"] == "saveas" else
                       {key: decision[key] for key in ("by", "reason", "rule", "reply", "at") if key in decision})
            audit.setdefault(row["path"], []).append({
                "id": row["id"], "messageid": row["messageid"], "partid": row["partid"], "tool": row["tool"],
                "created": row["created"], "before": row["before"], "after": row["after"],
                "note": row["note"], "allowed": allowed,
                "result": (data.get("title") or data.get("error") or "") if part else ""})
        return audit

    # -- undo and redo ----------------------------------------------------------------------

    async def undo(self, sessionid: str, messageid: str, force: bool = False) -> dict[str, Any]:
        """Take back a message and the later ones: their files restored (conflicts listed, not
        clobbered unless `force`), the messages marked reverted, a redo kept. Undo again of a
        message the last undo took back tries again the files it did not restore (conflicts,
        now perhaps with `force`). Raises NotFound, Conflict (the session runs)."""
        session, projectid, root = await self._session(sessionid)
        self._refuse_running(session, "undoing")
        messages = await self.store.message_ids(sessionid)
        if messageid not in messages:
            raise NotFound(("messageid", f"no message {messageid} in this session"))
        already = set(await self.store.message_ids(sessionid, reverted=True))
        last = json.loads(session["redo"]) if session["redo"] else None
        if messageid in already and last is not None and messageid in last["messages"]:
            # Again on the last undo (with force, after conflicts): what it left is tried again.
            taken, files = last["messages"], last["files"]
            rows = [row for row in await self.store.session_snapshots(sessionid)
                    if row["reverted"] and row["messageid"] in taken]
            done_paths = {item["path"] for item in files}
            rows = [row for row in rows if row["path"] not in done_paths]
        else:
            taken, files = [mid for mid in messages if mid >= messageid and mid not in already], []
            rows = [row for row in await self.store.session_snapshots(sessionid)
                    if not row["reverted"] and row["messageid"] is not None and row["messageid"] in taken]
        targets = _targets(rows, want="before", expect="after")
        journal = {"kind": "undo", "projectid": projectid, "root": root, "messageid": messageid,
                   "messages": taken, "files": files, "wants": {item["path"]: item["want"] for item in targets}}
        done = await self._restore(sessionid, journal, targets, force)
        return {"messageid": messageid, "reverted": taken, "restored": done.restored,
                "conflicts": done.conflicts, "lost": done.lost}

    async def redo(self, sessionid: str, force: bool = False) -> dict[str, Any]:
        """Put back what the last undo took away; the files left in conflict (not `force`)
        remain to redo. Raises NotFound, BadRequest (nothing to redo), Conflict (the session
        runs)."""
        session, projectid, root = await self._session(sessionid)
        self._refuse_running(session, "redoing")
        if not session["redo"]:
            raise BadRequest(("session", "there is nothing to redo"))
        redo = json.loads(session["redo"])
        targets = [{"path": item["path"], "want": item["kept"], "expect": item["restored"]}
                   for item in redo["files"]]
        journal = {"kind": "redo", "projectid": projectid, "root": root, "messages": redo["messages"],
                   "files": redo["files"]}
        done = await self._restore(sessionid, journal, targets, force)
        return {"messages": redo["messages"], "restored": done.restored, "conflicts": done.conflicts,
                "lost": done.lost}

    async def _restore(self, sessionid: str, journal: dict[str, Any], targets: list[dict[str, Any]],
                       force: bool) -> Restored:
        """Restore as a transaction: the plan is stored as the session's journal before the first
        file is touched, and the outcome recorded with the journal cleared in one write, so that
        a kill at any instant is completed by the next start (`recover`)."""
        with self._alone(sessionid):
            projectid, root = journal["projectid"], journal["root"]
            plan = await _unless_full(self.snapshots.folder, asyncio.to_thread(
                self.snapshots.plan_restore, projectid, root, targets, force))
            if plan.writes:
                await self.store.set_restoring(sessionid, json.dumps(journal | {"plan": plan.to_json()}))
            done = await asyncio.to_thread(self.snapshots.apply_restore, projectid, root, plan)
            row = await self._record(sessionid, journal, done)
        self._announce(sessionid, row, done.restored)
        return done

    async def _record(self, sessionid: str, journal: dict[str, Any], done: Restored,
                      recovered: str | None = None) -> SessionRow | None:
        """Store what an undo or redo did (the messages taken back or put back, the next redo)."""
        if journal["kind"] == "undo":
            wants = journal["wants"]
            redo = {"messages": journal["messages"], "files": journal["files"] + [
                {"path": path, "restored": wants.get(path), "kept": done.kept.get(path)}
                for path in done.restored]}
            return await self.store.set_reverted(sessionid, journal["messages"], True, json.dumps(redo), recovered)
        # A file left in conflict stays to redo (with force, once the person has decided).
        conflicted = {item["path"] for item in done.conflicts}
        left = [item for item in journal["files"] if item["path"] in conflicted]
        kept = json.dumps({"messages": journal["messages"], "files": left}) if left else None
        return await self.store.set_reverted(sessionid, journal["messages"], False, kept, recovered)

    async def recover(self) -> int:
        """At start, before anything else reads or changes a project: complete each undo, redo
        or Save as that a kill interrupted, and say so on its messages. Returns how many."""
        pending = await self.store.pending_restores()
        for sessionid, journal in pending:
            try:
                await self._complete(sessionid, journal)
            except Exception:  # one bad journal must not stop the start; it stays for the log
                log.exception("cannot complete the interrupted %s of session %s", journal.get("kind"), sessionid)
        return len(pending)

    async def _complete(self, sessionid: str, journal: dict[str, Any]) -> None:
        projectid, root, kind = journal["projectid"], journal["root"], journal["kind"]
        if kind == "saveas":
            await self._complete_save(sessionid, journal)
            return
        plan = RestorePlan.from_json(journal["plan"])
        done = await asyncio.to_thread(self.snapshots.complete_restore, projectid, root, plan)
        note = f"The server stopped during this {kind}; it was completed when Totem started again"
        left = [f"{item['path']} ({item['reason']})" for item in done.conflicts + done.lost]
        if left:
            note += f", except for files left as they are: {'; '.join(left[:10])}"
            note += f"; and {len(left) - 10} more" if len(left) > 10 else ""
        log.warning("%s of session %s: %s", kind, sessionid, note)
        await self._record(sessionid, journal, done, recovered=note + ".")

    def _announce(self, sessionid: str, row: SessionRow | None, paths: list[str]) -> None:
        if paths:
            self.hub.publish(DiffUpdated.of(sessionid, paths))
        if row is not None:
            self.hub.publish(SessionUpdated(sessionid, session_view(row)))

    # -- Save as ----------------------------------------------------------------------------

    async def save_as(self, sessionid: str, messageid: str, path: str, text: str,
                      replace: bool = False) -> dict[str, Any]:
        """The person saves a code block of a message as a file: `{path, created, bytes}`. The
        old content is kept, for Undo of that message. Raises NotFound, BadRequest (a message
        taken back by an undo; outside, .git, a secret file, a folder, too big), Conflict (the
        file exists and `replace` is not set; for a file an approved MCP server runs, a second
        problem named `pinned` says so)."""
        _session, projectid, root = await self._session(sessionid)
        if messageid not in await self.store.message_ids(sessionid):
            raise NotFound(("messageid", f"no message {messageid} in this session"))
        if messageid in await self.store.message_ids(sessionid, reverted=True):
            # Its change could not be undone, and the next prompt would drop its record.
            raise BadRequest(("messageid", f"message {messageid} was taken back by an undo; redo it first"))
        try:
            absolute = boundary.resolve_for_write(root, path)
        except boundary.BoundaryError as exc:
            raise BadRequest(("path", str(exc))) from None
        relative = boundary.relative_path(root, absolute)
        if boundary.is_protected_env(relative):
            raise BadRequest(("path", f"{relative} is a protected secret file; Save as never writes one"))
        data = text.encode("utf-8", "surrogatepass")
        if len(data) > MAX_SAVE_BYTES:
            raise BadRequest(("text", f"is {len(data)} bytes, over the limit of {MAX_SAVE_BYTES}"))
        exists = os.path.lexists(absolute)
        if exists and not replace:
            server = (await self.pinned(projectid, root)).get(relative) if self.pinned is not None else None
            problems = [("replace", f"{relative} exists; confirm with replace: true to replace it")]
            if server is not None:
                problems.append(("pinned", f"{relative} is run by the MCP server {server}, approved to start "
                                           "without asking; a change would run without a question"))
            raise Conflict(problems)
        with self._alone(sessionid):
            await self._save(sessionid, projectid, root, messageid, absolute, relative, data)
        return {"path": relative, "created": not exists, "bytes": len(data)}

    @contextlib.contextmanager
    def _alone(self, sessionid: str) -> Iterator[None]:
        """One undo, redo or Save as of a session at a time (its journal is one). Raises Conflict."""
        if sessionid in self._busy:
            raise Conflict(("session", "an undo, redo or Save as of this session is in progress; wait for it"))
        self._busy.add(sessionid)
        try:
            yield
        finally:
            self._busy.discard(sessionid)

    async def _save(self, sessionid: str, projectid: str, root: str, messageid: str, absolute: str,
                    relative: str, data: bytes) -> None:
        try:
            priors = await _unless_full(self.snapshots.folder, asyncio.to_thread(
                self.snapshots.keep_before, projectid, root, [relative]))
            temp = file_io.new_temp_name()
            prior = priors[relative]
            # A kill after the write and before its record is completed at the next start.
            await self.store.set_restoring(sessionid, json.dumps({
                "kind": "saveas", "projectid": projectid, "root": root, "messageid": messageid, "path": relative,
                "want": content_hash(data), "before": prior.digest, "note": prior.note, "temp": temp}))
            try:
                await asyncio.to_thread(_write, root, absolute, data, relative, temp)
            finally:
                await self.snapshots.record_files(Scope(sessionid, projectid, root, messageid, None, "saveas"),
                                                  priors)
                await self.store.set_restoring(sessionid, None)
        except NoSpace as exc:
            raise StorageFull(exc.folder) from None
        except ToolError as exc:
            raise BadRequest(("path", str(exc))) from None

    async def _complete_save(self, sessionid: str, journal: dict[str, Any]) -> None:
        """A Save as a kill interrupted: its change recorded when it landed (unless it was),
        its temporary file removed."""
        root, relative = journal["root"], journal["path"]
        scope = Scope(sessionid, journal["projectid"], root, journal["messageid"], None, "saveas")
        landed = await asyncio.to_thread(_finish_save, root, relative, journal["want"])
        recorded = any((row["path"], row["messageid"], row["after"]) == (relative, scope.messageid, journal["want"])
                       for row in await self.store.session_snapshots(sessionid))
        if landed and not recorded:
            await self.snapshots.record_files(scope, {relative: Prior(journal["before"], journal["note"])})
        await self.store.set_restoring(sessionid, None)


async def _unless_full(folder: str, work: Awaitable[T]) -> T:
    """The result of `work`, whose OSError for want of space becomes StorageFull (507)."""
    try:
        return await work
    except OSError as exc:
        if out_of_space(exc):
            raise StorageFull(folder) from None
        raise


def _write(root: str, absolute: str, data: bytes, relative: str, temp: str) -> None:
    file_io.check_parent(root, absolute, relative)
    created: list[str] = []
    try:
        file_io.write_atomic(root, absolute, data, relative, created=created, temp=temp)
    except ToolError:
        file_io.remove_folders(created)
        raise


def _finish_save(root: str, relative: str, want: str) -> bool:
    """Whether a Save as landed (the file has its content); its temporary file removed."""
    with contextlib.suppress(boundary.BoundaryError):
        file_io.remove_temp_files(os.path.dirname(boundary.resolve_inside(root, relative)))
    return disk_digest(root, relative) == want


def _targets(rows: list[SnapshotRow], want: Side, expect: Side) -> list[dict[str, Any]]:
    """Per path, in the order first changed: the content before its first change and what its
    last change left."""
    targets: dict[str, dict[str, Any]] = {}
    for row in rows:
        target = targets.setdefault(row["path"], {"path": row["path"], "want": row[want]})
        target["expect"] = row[expect]
    return list(targets.values())


def _want(targets: list[dict[str, Any]], path: str) -> str | None:
    want: str | None = next(target["want"] for target in targets if target["path"] == path)
    return want
