"""The session use cases: create, read, list, rename, remove, prompt, abort, messages, jobs.

Owns what each use case means, whoever calls it (the REST API today; the MCP route, the
scheduler and `totem run` later): the checks that are about the domain (a prompt needs text or
a file, and a model; a job is not stopped in Plan mode), the write, the events published after
the write, and the cascade of a removal (the run aborted, which rejects the questions that wait
in it; the jobs stopped with their process groups and forgotten; the rows removed; the hub told).
It raises the errors of `errors.py`. It never parses HTTP and never imports `api`, `httpd`,
`websocket` or `routes`; it reaches the loop only through the door of `Runs`.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from totem.workspace import worktrees

if TYPE_CHECKING:
    from totem.workspace import commands as project_commands
from totem.agent.loop import REASONING_LEVELS, Prompt, RunRefused
from totem.agent.providers import ModelError
from totem.errors import ApiError, BadRequest, Conflict, Forbidden, NotFound
from totem.events import SessionUpdated
from totem.process.jobs import JobError
from totem.process.terminal import TerminalError
from totem.rows import SessionRow
from totem.security.boundary import real_root, session_root
from totem.store import Store, session_view
from totem.workspace.git import GitError, folder_status

__all__ = ["DEFAULT_SESSION_NAME", "DEFAULT_SESSION_PAGE", "MODES", "REASONING_LEVELS", "Sessions"]

DEFAULT_SESSION_NAME = "New session"
MODES = ("build", "plan")
DEFAULT_SESSION_PAGE = 100
MAX_FORK_NAME_CHARS = 200
# A page of Sessions|messages ends once it holds about this much stored text and data (a single
# message that is bigger still comes, alone): twenty clients that asked for a 26 MB page and did
# not read it held 1.1 GB (issue 11).
MESSAGE_PAGE_BYTES = 4 * 1024 * 1024

# Module-level names for the shapes, since `Sessions.list` hides the builtin inside the class.
Session = dict[str, Any]
JobList = list[dict[str, Any]]
Attachments = list[tuple[str, str, bytes]]  # (name, media type, content) of each file

# The status of a session whose run ended without its end stored.
UNSTORED_END = "the run ended, but its end could not be stored (is the disk full?)"

class Sessions:
    """The conversations of the projects, and what runs in them."""

    def __init__(self, store: Store, hub, runs, jobs, providers, terminals=None, data_dir: str | None = None,
                 settings=None, sandbox=None):
        self.store = store
        self.sandbox = sandbox  # sandbox.Sandbox: a removed session's temp folder goes with it
        self.hub = hub
        self.runs = runs  # agent.loop.Runs, through start_prompt, abort and the questions
        self.jobs = jobs
        self.providers = providers  # agent.providers.Providers, to check a model reference
        self.terminals = terminals  # terminal.Terminals: the person's shell of each session
        self.data_dir = data_dir  # where worktrees go (<data>/worktrees/<sessionid>)
        self.settings = settings  # settings_service.Settings: the limits a run reads when it starts

    # -- reading ----------------------------------------------------------------------------

    async def get(self, sessionid: str) -> SessionRow:
        """The stored row of a session. Raises NotFound."""
        row = await self.store.get_session(sessionid)
        if row is None:
            raise NotFound(("id", f"no session {sessionid}"))
        return row

    def view(self, row: SessionRow) -> Session:
        """A session as answers show it: with `waiting`, the questions that wait for the person."""
        session = session_view(row)
        if session["status"] == "running" and not self.runs.is_running(session["id"]):
            # The run ended but its end could not be stored (a full disk): say what is true.
            session |= {"status": "error", "error": session["error"] or UNSTORED_END}
        return session | {"waiting": self.runs.questions.waiting_in(session["id"])}

    async def read(self, sessionid: str) -> Session:
        """The session with `tokens`, the sum of its answers' (`estimated` when a provider
        gave no count). Raises NotFound."""
        row = await self.get(sessionid)
        return self.view(row) | {"tokens": await self.store.session_tokens(row["id"])}

    async def list(self, projectid: str, limit: int = DEFAULT_SESSION_PAGE, before: str | None = None) -> dict:
        """`{sessions, more}`: a page of at most `limit` sessions of a project, the most recently
        changed first, after the session `before` (the last of the page before). Raises NotFound
        (no such project), BadRequest (`before` names no session of the project)."""
        page = await self.store.session_page(projectid, limit, before)
        if page is None:
            if await self.store.get_project(projectid) is None:
                raise NotFound(("id", f"no project {projectid}"))
            raise BadRequest(("before", f"no session {before} in this project"))
        rows, more = page
        return {"sessions": [self.view(row) for row in rows], "more": more}

    async def messages(self, sessionid: str, before: str | None, limit: int) -> dict:
        """`{messages, more}`: the newest `limit` messages older than `before`, oldest first,
        with their parts, and no more than MESSAGE_PAGE_BYTES hold (but at least one). Raises
        NotFound."""
        await self.get(sessionid)
        messages, more = await self.store.list_messages(sessionid, before, limit, MESSAGE_PAGE_BYTES)
        return {"messages": messages, "more": more}

    async def todos(self, sessionid: str) -> dict:
        """`{items}`: the task list. Raises NotFound."""
        await self.get(sessionid)
        return {"items": await self.store.get_todos(sessionid)}

    # -- changing ---------------------------------------------------------------------------

    async def create(self, projectid: str, name: str = DEFAULT_SESSION_NAME, worktree: bool = False) -> Session:
        """A new idle session of a project; publishes session.updated. With `worktree`, the
        session works in a git worktree of its own, on a branch `totem/<name>`. Raises NotFound,
        BadRequest (a worktree of a folder that is not a git repository, or git failing)."""
        project = await self.store.get_project(projectid) if worktree else None
        if worktree:
            if project is None:
                raise NotFound(("projectid", f"no project {projectid}"))
            try:
                await worktrees.check_repository(real_root(project["path"]))
            except worktrees.WorktreeError as exc:
                raise BadRequest(("worktree", str(exc))) from None
        row = await self.store.create_session(projectid, name)
        if row is None:
            raise NotFound(("projectid", f"no project {projectid}"))
        if worktree and project is not None:
            row = await self._add_worktree(row, real_root(project["path"]))
        session = session_view(row)
        self.hub.publish(SessionUpdated(session["id"], session))
        return self.view(row)

    async def _add_worktree(self, row: SessionRow, root: str) -> SessionRow:
        path = worktrees.worktree_path(self.data_dir or ".", row["id"])
        try:
            await worktrees.create(root, path, worktrees.branch_name(row["name"], row["id"]))
        except worktrees.WorktreeError as exc:
            await self.store.remove_session(row["id"])
            raise BadRequest(("worktree", str(exc))) from None
        return await self.store.set_session_worktree(row["id"], path) or row

    async def git(self, sessionid: str) -> dict:
        """The git state of the folder where the session works: a worktree's `{worktree: true,
        branch, into, base, ahead, behind, changes}`, else the project's folder status."""
        session, root = await self._folders(sessionid)
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

    async def worktree_merge(self, sessionid: str) -> dict:
        """The person's merge of the session's worktree into the project's branch. Raises
        NotFound, BadRequest (no worktree), Conflict (running; a conflict or a dirty project:
        nothing changed, the files named)."""
        session, root, path = await self._worktree_session(sessionid, "merging")
        try:
            return await worktrees.merge(root, path, session["name"])
        except worktrees.MergeRefused as exc:
            raise Conflict(("worktree", f"{exc}: {', '.join(exc.files) or 'no file named'}")) from None
        except worktrees.WorktreeError as exc:
            raise BadRequest(("worktree", str(exc))) from None

    async def worktree_discard(self, sessionid: str) -> Session:
        """The person's discard of the session's worktree and its branch; the session stays,
        without a folder to work in."""
        _session, root, path = await self._worktree_session(sessionid, "discarding")
        await worktrees.discard(root, path, await worktrees.branch_of(path))
        row = await self.get(sessionid)
        self.hub.publish(SessionUpdated(row["id"], session_view(row)))
        return self.view(row)

    async def _folders(self, sessionid: str) -> tuple[SessionRow, str]:
        session = await self.get(sessionid)
        project = await self.store.get_project(session["projectid"])
        if project is None:
            raise NotFound(("id", f"no project of session {sessionid}"))
        return session, real_root(project["path"])

    async def _worktree_session(self, sessionid: str, action: str) -> tuple[SessionRow, str, str]:
        session, root = await self._folders(sessionid)
        path = session["worktree"]
        if not path:
            raise BadRequest(("session", "the session has no worktree"))
        if not os.path.isdir(path):
            raise BadRequest(("session", "the session's worktree was discarded"))
        if self.runs.is_running(session["id"]):
            raise Conflict(("session", f"the session is running; stop it before {action}"))
        return session, root, path

    async def rename(self, sessionid: str, name: str) -> Session:
        """Publishes session.updated. Raises NotFound."""
        row = await self.store.rename_session(sessionid, name)
        if row is None:
            raise NotFound(("id", f"no session {sessionid}"))
        session = session_view(row)
        self.hub.publish(SessionUpdated(session["id"], session))
        return self.view(row)

    async def remove(self, sessionid: str) -> str:
        """Remove a session and all it holds: its run is aborted (the questions that wait in it
        end rejected), its jobs are stopped (whole process groups) and forgotten, its rows go
        (messages, parts, attachments, todos, settings, snapshots) and session.updated says
        `removed`. Returns the id. Raises NotFound."""
        session = await self.get(sessionid)
        await self.wind_down(session["id"])
        for child in await self.store.child_sessions(session["id"]):  # its sub-agents go with it
            await self.remove(child)
        await self.drop_worktree(session)
        await self.store.remove_session(session["id"])
        self.announce_removed(session)
        return session["id"]

    async def wind_down(self, sessionid: str) -> None:
        """Stop all that runs in a session that is going away: its run (which rejects the
        questions that wait in it) and its jobs, whose processes are gone when this returns.
        The first half of a removal; `announce_removed` is the second, after the rows go."""
        await self.runs.abort(sessionid)
        await self.runs.stop_servers(sessionid)
        await self.jobs.forget_session(sessionid)
        if self.terminals is not None:
            await self.terminals.forget_session(sessionid)
        if self.sandbox is not None:
            await self.sandbox.forget_session(sessionid)

    async def drop_worktree(self, session: SessionRow) -> None:
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

    def announce_removed(self, session: SessionRow) -> None:
        """Forget a removed session in the hub and tell every client that it is gone."""
        self.hub.forget_session(session["id"])
        self.hub.publish(SessionUpdated(session["id"], {"id": session["id"], "projectid": session["projectid"],
                                                        "removed": True}))

    # -- running ----------------------------------------------------------------------------

    async def prompt(self, sessionid: str, text: str = "", *, model: str | None = None,
                     mode: str | None = None, autoaccept: bool | None = None, reasoning: str | None = None,
                     attachments: Attachments | None = None, scheduled: bool = False) -> str:
        """Store the person's message and start the run; returns the message id at once.

        `model`, `mode` and `autoaccept` left out (None) take the session's. Raises NotFound,
        BadRequest (no text and no file, no model, a model that names nothing usable, a mode or
        reasoning level that does not exist, a session that is already running).
        """
        answer = await self._send(sessionid, text, model=model, mode=mode, autoaccept=autoaccept,
                                  reasoning=reasoning, attachments=attachments, scheduled=scheduled, wait=False)
        return answer["messageid"]

    async def send(self, sessionid: str, text: str = "", *, model: str | None = None, mode: str | None = None,
                   autoaccept: bool | None = None, reasoning: str | None = None,
                   attachments: Attachments | None = None, steer: bool = False, command: str | None = None,
                   arguments: str | None = None, agent: str | None = None) -> dict:
        """A prompt of the person, also while the session runs: `{messageid}` when it starts a
        run; during one, `{messageid, queued: true}` (it runs when the current run ends, and
        Sessions|unqueue takes it back until then) or with `steer`, `{messageid, steered: true}`
        (the current run reads it at its next step).

        `command` (with its `arguments`) is a project command in place of `text`, `agent` a
        project agent for this prompt's run (project_commands.py): either may choose the model
        when `model` is not given, Plan mode, the agent's prompt and a subset of the built-in
        tools; neither changes what the session keeps. Raises as `prompt`, and BadRequest naming
        `command`, `agent` or `arguments` (no such file, an invalid one, an `@path` outside the
        project or to a secret file) or `steer` (a command or an agent while a run goes on)."""
        return await self._send(sessionid, text, model=model, mode=mode, autoaccept=autoaccept,
                                reasoning=reasoning, attachments=attachments, steer=steer, wait=True,
                                command=command, arguments=arguments, agent=agent)

    async def unqueue(self, sessionid: str, messageid: str) -> str:
        """Take back a prompt that waits for the current run. Raises NotFound."""
        session = await self.get(sessionid)
        if not await self.runs.unqueue(session["id"], messageid):
            raise NotFound(("messageid", f"no prompt {messageid} waits in this session"))
        return messageid

    async def _send(self, sessionid: str, text: str, *, model: str | None, mode: str | None,
                    autoaccept: bool | None, reasoning: str | None, attachments: Attachments | None,
                    scheduled: bool = False, steer: bool = False, wait: bool, command: str | None = None,
                    arguments: str | None = None, agent: str | None = None) -> dict:
        session = await self.get(sessionid)
        if session["worktree"] and not os.path.isdir(session["worktree"]):
            raise BadRequest(("session", "the session's worktree was discarded; start a new session"))
        files: Attachments = [*(attachments or ())]
        project = await self.store.get_project(session["projectid"])
        choice = await self._choose(session, project, text, command, arguments, agent, steer)
        if choice is not None:
            text = text if choice.text is None else choice.text
            files += choice.files
        asked_model = model
        kept = (session["model"] if model is None else model, session["mode"] if mode is None else mode)
        model = model if model is not None else (choice.model if choice and choice.model else session["model"])
        mode = session["mode"] if mode is None else mode
        autoaccept = bool(session["autoaccept"]) if autoaccept is None else autoaccept
        if mode not in MODES:
            raise BadRequest(("mode", f"must be one of {', '.join(MODES)}"))
        if reasoning is not None and reasoning not in REASONING_LEVELS:
            raise BadRequest(("reasoning", f"must be one of {', '.join(REASONING_LEVELS)}"))
        if not (text or "").strip() and not files:
            raise BadRequest(("text", "is required (or attach a file)"))
        if not model:
            raise BadRequest(("model", "choose a model; Providers|catalog lists the ones you can use"))
        try:
            await self.providers.target(model)  # an unknown provider or model reference is refused now
        except ModelError as exc:
            blame = choice.model_from if choice and choice.model and asked_model is None else "model"
            raise BadRequest((blame, exc.message)) from None
        running = self.runs.is_running(session["id"])
        if running and not wait:
            raise BadRequest(("session", "the session is running; wait for it to finish or abort it"))
        if not running and await self.store.drop_reverted(session["id"]):
            # A new prompt goes on from what was not undone: the undone messages and the redo go.
            row = await self.get(session["id"])
            self.hub.publish(SessionUpdated(row["id"], session_view(row)))
        prompt = Prompt(text=text, model=model, mode=mode, autoaccept=autoaccept, reasoning=reasoning,
                        attachments=files, scheduled=scheduled)
        if choice is not None:  # it only narrows: Plan over Build, never Build over Plan
            prompt.mode = "plan" if choice.plan else mode
            prompt.tools, prompt.instructions, prompt.notes = choice.tools, choice.instructions, choice.notes
            prompt.keep = (kept[0] or model, kept[1])
        try:
            limits = await self.settings.values(session["projectid"], session["id"]) if self.settings else None
            return await self.runs.send(session, project, prompt, limits, steer=steer)
        except RunRefused as exc:
            raise BadRequest(("session", str(exc))) from None

    async def _choose(self, session: SessionRow, project, text: str, command: str | None, arguments: str | None,
                      agent: str | None, steer: bool) -> project_commands.Choice | None:
        """The project command and agent of a prompt, read from the folder the session works in."""
        if arguments is not None and command is None:
            raise BadRequest(("arguments", "go with a command"))
        if command is None and agent is None:
            return None
        if command is not None and (text or "").strip():
            raise BadRequest(("text", "leave it out with a command: the command is the text, and what you add "
                                      "goes in arguments"))
        if steer and self.runs.is_running(session["id"]):
            raise BadRequest(("steer", "a command or an agent starts a run of its own; send it without steer, "
                                       "and it runs when the current run ends"))
        if project is None:
            raise NotFound(("id", f"no project of session {session['id']}"))
        from totem.workspace import (
            commands as project_commands,  # its patterns take a while to compile: not at start-up
        )
        try:
            return await asyncio.to_thread(project_commands.choose, session_root(session, project), command,
                                           arguments, agent)
        except project_commands.ProjectFileError as exc:
            raise BadRequest((exc.field, str(exc))) from None

    async def fork(self, sessionid: str, messageid: str | None = None) -> Session:
        """A new session "NAME (fork)" with the conversation up to `messageid` (all of it
        without one), its attachments and task list; not what an undo took back, nor a redo, a
        question that waits or a job. Publishes session.updated. Raises NotFound."""
        session = await self.get(sessionid)
        name = f"{session['name']} (fork)"
        row = await self.store.fork_session(session["id"], messageid, name[:MAX_FORK_NAME_CHARS])
        if row is None:
            raise NotFound(("messageid", f"no message {messageid} in this session"))
        self.hub.publish(SessionUpdated(row["id"], session_view(row)))
        return self.view(row)

    async def compact(self, sessionid: str) -> str:
        """Summarize the conversation now (the session's model, no tools); the summary replaces
        the older messages in what the model is sent next. Raises NotFound, BadRequest (no
        model, nothing to summarize, or running)."""
        session = await self.get(sessionid)
        if not session["model"]:
            raise BadRequest(("model", "the session has no model yet; send a prompt first"))
        if not await self.store.count_messages(session["id"]):
            raise BadRequest(("session", "there is nothing to compact yet"))
        project = await self.store.get_project(session["projectid"])
        try:
            await self.runs.start_compaction(dict(session), project, session["model"])
        except RunRefused as exc:
            raise BadRequest(("session", str(exc))) from None
        return session["id"]

    async def abort(self, sessionid: str) -> str:
        """Stop the run of a session (the questions that wait in it end rejected); returns the id.
        Raises NotFound, BadRequest when nothing runs."""
        session = await self.get(sessionid)
        if not await self.runs.abort(session["id"]):
            raise BadRequest(("session", "nothing is running in this session"))
        return session["id"]

    def reply_question(self, questionid: str, answer: str) -> str:
        """Answer a question of the ask tool; returns its id. Raises NotFound."""
        self.runs.reply_question(questionid, answer)
        return questionid

    # -- the terminal -----------------------------------------------------------------------

    async def terminal(self, sessionid: str, start: bool, columns: int, rows: int) -> dict:
        """`{status: none|running|exited, output}`: reattach to the session's shell, with its
        scrollback, or start one in the session's folder when `start`. Raises NotFound,
        BadRequest (the shell cannot start)."""
        session = await self.get(sessionid)
        project = await self.store.get_project(session["projectid"])
        if project is None:
            raise NotFound(("id", f"no project of session {sessionid}"))
        try:
            return await self._terminals().open(session["id"], session_root(session, project),
                                                start, columns, rows)
        except TerminalError as exc:
            raise BadRequest(("start", str(exc))) from None

    async def terminal_input(self, sessionid: str, data: bytes) -> str:
        """Type into the session's shell. Raises NotFound, BadRequest."""
        session = await self.get(sessionid)
        try:
            self._terminals().write(session["id"], data)
        except TerminalError as exc:
            raise BadRequest(("data", str(exc))) from None
        return session["id"]

    async def terminal_resize(self, sessionid: str, columns: int, rows: int) -> str:
        session = await self.get(sessionid)
        try:
            self._terminals().resize(session["id"], columns, rows)
        except TerminalError as exc:
            raise BadRequest(("session", str(exc))) from None
        return session["id"]

    async def terminal_stop(self, sessionid: str) -> dict:
        """End the shell (hang-up, then kill of its group); `{status, output, exit}`."""
        session = await self.get(sessionid)
        try:
            return await self._terminals().stop(session["id"])
        except TerminalError as exc:
            raise BadRequest(("session", str(exc))) from None

    def _terminals(self):
        if self.terminals is None:
            raise BadRequest(("session", "there is no terminal in this server"))
        return self.terminals

    # -- background jobs --------------------------------------------------------------------

    async def jobs_of(self, sessionid: str) -> JobList:
        """`[{id, command, status, output, ...}]`. Raises NotFound."""
        await self.get(sessionid)
        return self.jobs.list(sessionid)

    async def stop_job(self, sessionid: str, jobid: str) -> dict:
        """Stop a job (its whole process group); returns the job. Raises NotFound (session or
        job), Forbidden in Plan mode, where nothing is run or stopped."""
        session = await self.get(sessionid)
        if session["mode"] == "plan":
            raise Forbidden(("mode", "the session is in Plan mode, where nothing is run or stopped"))
        try:
            return await self.jobs.stop(session["id"], jobid)
        except JobError as exc:
            raise NotFound(("job", str(exc))) from None
