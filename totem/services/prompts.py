"""The executor of the prompt use case: gathers what the plan reads (prompt_plan.py), asks for
the plan, and carries it out.

In order: the session and its project; the command's or agent's files, when the request names
one; the plan; the provider's check of the model; then the only writes, the undone messages
dropped (a new prompt goes on from what was not undone) and the prompt sent to the runs, which
store it and start, queue or steer. A refusal comes before any write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from typing import TYPE_CHECKING, Any

from totem.agent.loop import RunRefused
from totem.agent.providers import ModelError
from totem.errors import BadRequest, NotFound
from totem.events import SessionUpdated
from totem.rows import ProjectRow, SessionRow
from totem.security.boundary import session_root
from totem.services.prompt_plan import (
    PromptPlan,
    PromptRequest,
    SessionState,
    plan_prompt,
    run_rule_problems,
    wants_expansion,
)
from totem.services.session_rows import SessionRows
from totem.store import Store, session_view

if TYPE_CHECKING:
    from totem.agent.loop import Runs
    from totem.agent.providers import Providers
    from totem.events import Hub
    from totem.services.settings import Settings
    from totem.workspace.commands import Choice


class Prompts:
    """Carries out the plan of each prompt."""

    def __init__(self, rows: SessionRows, store: Store, hub: Hub, runs: Runs, providers: Providers,
                 settings: Settings | None = None):
        self.rows = rows
        self.store = store
        self.hub = hub
        self.runs = runs  # what runs, and the door a prompt goes through
        self.providers = providers  # to check a model reference
        self.settings = settings  # the limits a run reads when it starts

    async def send(self, sessionid: str, request: PromptRequest) -> dict[str, Any]:
        """`{messageid}`, with `queued` or `steered` while a run goes on (Runs.send). Raises
        NotFound, BadRequest."""
        session = await self.rows.get(sessionid)
        project = await self.store.get_project(session["projectid"])
        worktree = session["worktree"]
        state = SessionState(session["id"], session["model"], session["mode"], bool(session["autoaccept"]),
                             running=self.runs.is_running(session["id"]),
                             worktree_gone=bool(worktree) and not os.path.isdir(worktree or ""),
                             has_project=project is not None)
        problems = run_rule_problems(request.allow, self.runs.registry.kinds())
        if problems:
            raise BadRequest(problems)
        wanted = wants_expansion(request, state)  # True only with a project
        choice = await _expand(session, project, request) if wanted and project is not None else None
        # Read again: a run may have ended while the files were read.
        plan = plan_prompt(request, dataclasses.replace(state, running=self.runs.is_running(session["id"])), choice)
        try:
            await self.providers.target(plan.model)  # an unknown provider or model reference is refused now
        except ModelError as exc:
            raise BadRequest((plan.model_blame, exc.message)) from None
        return await self._carry_out(plan, session, project)

    async def _carry_out(self, plan: PromptPlan, session: SessionRow, project: ProjectRow | None) -> dict[str, Any]:
        if plan.drop_reverted and await self.store.drop_reverted(session["id"]):
            row = await self.rows.get(session["id"])
            self.hub.publish(SessionUpdated(row["id"], session_view(row)))
        try:
            limits = await self.settings.values(session["projectid"], session["id"]) if self.settings else None
            if project is None:  # removed since the session was read (its sessions go with it)
                raise NotFound(("id", f"no project of session {session['id']}"))
            return await self.runs.send(dict(session), dict(project), plan.prompt(), limits, steer=plan.steer)
        except RunRefused as exc:
            raise BadRequest(("session", str(exc))) from None


async def _expand(session: SessionRow, project: ProjectRow, request: PromptRequest) -> Choice:
    """The project command and agent of a prompt, read from the folder the session works in.
    Raises BadRequest naming the field (no such file, an invalid one, a bad `@path`)."""
    from totem.workspace import (
        commands as project_commands,  # its patterns take a while to compile: not at start-up
    )
    try:
        return await asyncio.to_thread(project_commands.choose, session_root(session, project), request.command,
                                       request.arguments, request.agent)
    except project_commands.ProjectFileError as exc:
        raise BadRequest((exc.field, str(exc))) from None
