"""The session use cases: create, read, list, rename, remove, prompt, abort, fork, compact.

Owns what each use case means, whoever calls it (the REST API, the MCP route, the scheduler):
the checks that are about the domain, the write, the events published after the write, and the
cascade of a removal (the run aborted, which rejects the questions that wait in it; the jobs
and the shell stopped with their process groups; the worktree dropped when nothing would be
lost; the rows removed; the hub told). A prompt is planned by prompt_plan.py and carried out by
prompts.py; a session's worktree, shell and jobs have services of their own (worktrees.py,
terminal.py, jobs.py). It raises the errors of `errors.py`. It never parses HTTP and never
imports `api`, `httpd`, `websocket` or `routes`; it reaches the loop only through the door of
`Runs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from totem.agent.loop import REASONING_LEVELS, RunRefused
from totem.errors import BadRequest, NotFound
from totem.events import SessionUpdated
from totem.rows import SessionRow
from totem.services.jobs import Jobs
from totem.services.prompt_plan import MODES, Attachment, PromptRequest
from totem.services.prompts import Prompts
from totem.services.session_rows import UNSTORED_END, Session, SessionRows
from totem.services.terminal import Terminal
from totem.services.worktrees import Worktrees
from totem.store import Store, session_view

if TYPE_CHECKING:
    from totem.agent.loop import Runs
    from totem.events import Hub
    from totem.security.sandbox import Sandbox

__all__ = ["DEFAULT_SESSION_NAME", "DEFAULT_SESSION_PAGE", "MODES", "REASONING_LEVELS", "UNSTORED_END", "Sessions"]

DEFAULT_SESSION_NAME = "New session"
DEFAULT_SESSION_PAGE = 100
MAX_FORK_NAME_CHARS = 200
# A page of Sessions|messages ends once it holds about this much stored text and data (a single
# message that is bigger still comes, alone): twenty clients that asked for a 26 MB page and did
# not read it held 1.1 GB (issue 11).
MESSAGE_PAGE_BYTES = 4 * 1024 * 1024

Attachments = list[Attachment]  # (name, media type, content) of each file


class Sessions:
    """The conversations of the projects, and what runs in them."""

    def __init__(self, rows: SessionRows, store: Store, hub: Hub, runs: Runs, prompts: Prompts, worktrees: Worktrees,
                 jobs: Jobs, terminal: Terminal, sandbox: Sandbox | None = None):
        self.rows = rows
        self.store = store
        self.hub = hub
        self.runs = runs  # through abort, compaction and the questions
        self.prompts = prompts  # the executor of each prompt's plan
        self.worktrees = worktrees  # a session's own git worktree: made with it, dropped with it
        self.jobs = jobs  # a removed session's jobs stop with it
        self.terminal = terminal  # and its shell
        self.sandbox = sandbox  # a removed session's temp folder goes with it

    # -- reading ----------------------------------------------------------------------------

    async def get(self, sessionid: str) -> SessionRow:
        """The stored row of a session. Raises NotFound."""
        return await self.rows.get(sessionid)

    def view(self, row: SessionRow) -> Session:
        """A session as answers show it: with `waiting`, the questions that wait for the person."""
        return self.rows.view(row)

    async def read(self, sessionid: str) -> Session:
        """The session with `tokens`, the sum of its answers' (`estimated` when a provider
        gave no count). Raises NotFound."""
        row = await self.get(sessionid)
        return self.view(row) | {"tokens": await self.store.session_tokens(row["id"])}

    async def list(self, projectid: str, limit: int = DEFAULT_SESSION_PAGE,
                   before: str | None = None) -> dict[str, Any]:
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

    async def messages(self, sessionid: str, before: str | None, limit: int) -> dict[str, Any]:
        """`{messages, more}`: the newest `limit` messages older than `before`, oldest first,
        with their parts, and no more than MESSAGE_PAGE_BYTES hold (but at least one). Raises
        NotFound."""
        await self.get(sessionid)
        messages, more = await self.store.list_messages(sessionid, before, limit, MESSAGE_PAGE_BYTES)
        return {"messages": messages, "more": more}

    async def todos(self, sessionid: str) -> dict[str, Any]:
        """`{items}`: the task list. Raises NotFound."""
        await self.get(sessionid)
        return {"items": await self.store.get_todos(sessionid)}

    # -- changing ---------------------------------------------------------------------------

    async def create(self, projectid: str, name: str = DEFAULT_SESSION_NAME, worktree: bool = False) -> Session:
        """A new idle session of a project; publishes session.updated. With `worktree`, the
        session works in a git worktree of its own, on a branch `totem/<name>`. Raises NotFound,
        BadRequest (a worktree of a folder that is not a git repository, or git failing)."""
        root = await self.worktrees.check(projectid) if worktree else None
        row = await self.store.create_session(projectid, name)
        if row is None:
            raise NotFound(("projectid", f"no project {projectid}"))
        if root is not None:
            row = await self.worktrees.add(row, root)
        session = session_view(row)
        self.hub.publish(SessionUpdated(session["id"], session))
        return self.view(row)

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
        await self.worktrees.drop(session)
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
        await self.terminal.forget_session(sessionid)
        if self.sandbox is not None:
            await self.sandbox.forget_session(sessionid)

    def announce_removed(self, session: SessionRow) -> None:
        """Forget a removed session in the hub and tell every client that it is gone."""
        self.hub.forget_session(session["id"])
        self.hub.publish(SessionUpdated(session["id"], {"id": session["id"], "projectid": session["projectid"],
                                                        "removed": True}))

    # -- running ----------------------------------------------------------------------------

    async def prompt(self, sessionid: str, text: str = "", *, model: str | None = None,
                     mode: str | None = None, autoaccept: bool | None = None, reasoning: str | None = None,
                     attachments: Attachments | None = None, scheduled: bool = False,
                     maxcost: float | None = None) -> str:
        """Store the person's message and start the run; returns the message id at once.

        `model`, `mode` and `autoaccept` left out (None) take the session's. Raises NotFound,
        BadRequest (no text and no file, no model, a model that names nothing usable, a mode or
        reasoning level that does not exist, a session that is already running).
        """
        request = PromptRequest(text, model, mode, autoaccept, reasoning, tuple(attachments or ()),
                                scheduled=scheduled, wait=False, maxcost=maxcost)
        messageid: str = (await self.prompts.send(sessionid, request))["messageid"]
        return messageid

    async def send(self, sessionid: str, text: str = "", *, model: str | None = None, mode: str | None = None,
                   autoaccept: bool | None = None, reasoning: str | None = None,
                   attachments: Attachments | None = None, steer: bool = False, command: str | None = None,
                   arguments: str | None = None, agent: str | None = None, maxcost: float | None = None,
                   allow: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
        """A prompt of the person, also while the session runs: `{messageid}` when it starts a
        run; during one, `{messageid, queued: true}` (it runs when the current run ends, and
        Sessions|unqueue takes it back until then) or with `steer`, `{messageid, steered: true}`
        (the current run reads it at its next step).

        `command` (with its `arguments`) is a project command in place of `text`, `agent` a
        project agent for this prompt's run (project_commands.py): either may choose the model
        when `model` is not given, Plan mode, the agent's prompt and a subset of the built-in
        tools; neither changes what the session keeps. `maxcost` (US dollars) and `allow`
        ((tool, pattern) allow rules) hold for this prompt's run alone, its sub-agents with it;
        the session keeps neither. Raises as `prompt`, and BadRequest naming `command`, `agent`
        or `arguments` (no such file, an invalid one, an `@path` outside the project or to a
        secret file), `steer` (a command or an agent while a run goes on), `allow[i]` (a rule
        that cannot be) or `maxcost`/`allow` with a steer (it joins a run that has its own)."""
        request = PromptRequest(text, model, mode, autoaccept, reasoning, tuple(attachments or ()), steer=steer,
                                command=command, arguments=arguments, agent=agent, maxcost=maxcost, allow=allow)
        return await self.prompts.send(sessionid, request)

    async def unqueue(self, sessionid: str, messageid: str) -> str:
        """Take back a prompt that waits for the current run. Raises NotFound."""
        session = await self.get(sessionid)
        if not await self.runs.unqueue(session["id"], messageid):
            raise NotFound(("messageid", f"no prompt {messageid} waits in this session"))
        return messageid

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
        if project is None:  # removed since the session was read (its sessions go with it)
            raise NotFound(("id", f"no project of session {session['id']}"))
        try:
            await self.runs.start_compaction(dict(session), dict(project), session["model"])
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
