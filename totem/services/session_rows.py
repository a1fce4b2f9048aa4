"""One session as the services that work on it read it: its row, the view answers show, and
the project it belongs to.

Shared by the session services (sessions, worktrees, the terminal, the jobs, the prompt) so
that each raises the same NotFound and shows a session the same way. Reads only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from totem.errors import NotFound
from totem.rows import ProjectRow, SessionRow
from totem.store import Store, session_view

if TYPE_CHECKING:
    from totem.agent.loop import Runs

# The status of a session whose run ended without its end stored.
UNSTORED_END = "the run ended, but its end could not be stored (is the disk full?)"

Session = dict[str, Any]


class SessionRows:
    """Reads sessions for the services, over the store and the runs (which say what runs)."""

    def __init__(self, store: Store, runs: Runs):
        self.store = store
        self.runs = runs  # whether a session runs, the questions that wait in it

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

    async def with_project(self, sessionid: str) -> tuple[SessionRow, ProjectRow]:
        """The session and its project. Raises NotFound (either missing)."""
        session = await self.get(sessionid)
        project = await self.store.get_project(session["projectid"])
        if project is None:
            raise NotFound(("id", f"no project of session {sessionid}"))
        return session, project
