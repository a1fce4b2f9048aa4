"""The terminal use cases: the person's shell of each session (Sessions|terminal, terminalinput,
terminalresize, terminalstop), started in the folder where the session works.

The shell itself is `process/terminal.py`; this finds the session and its folder, and turns the
shell's refusals into the errors of `errors.py`.
"""

from __future__ import annotations

from typing import Any

from totem.errors import BadRequest
from totem.process.terminal import TerminalError, Terminals
from totem.security.boundary import session_root
from totem.services.session_rows import SessionRows


class Terminal:
    """The shell of each session, when this server has terminals."""

    def __init__(self, rows: SessionRows, terminals: Terminals | None = None):
        self.rows = rows
        self.terminals = terminals

    async def open(self, sessionid: str, start: bool, columns: int, rows: int) -> dict[str, Any]:
        """`{status: none|running|exited, output}`: reattach to the session's shell, with its
        scrollback, or start one in the session's folder when `start`. Raises NotFound,
        BadRequest (the shell cannot start)."""
        session, project = await self.rows.with_project(sessionid)
        try:
            return await self._terminals().open(session["id"], session_root(session, project),
                                                start, columns, rows)
        except TerminalError as exc:
            raise BadRequest(("start", str(exc))) from None

    async def write(self, sessionid: str, data: bytes) -> str:
        """Type into the session's shell. Raises NotFound, BadRequest."""
        session = await self.rows.get(sessionid)
        try:
            self._terminals().write(session["id"], data)
        except TerminalError as exc:
            raise BadRequest(("data", str(exc))) from None
        return session["id"]

    async def resize(self, sessionid: str, columns: int, rows: int) -> str:
        session = await self.rows.get(sessionid)
        try:
            self._terminals().resize(session["id"], columns, rows)
        except TerminalError as exc:
            raise BadRequest(("session", str(exc))) from None
        return session["id"]

    async def stop(self, sessionid: str) -> dict[str, Any]:
        """End the shell (hang-up, then kill of its group); `{status, output, exit}`."""
        session = await self.rows.get(sessionid)
        try:
            return await self._terminals().stop(session["id"])
        except TerminalError as exc:
            raise BadRequest(("session", str(exc))) from None

    async def forget_session(self, sessionid: str) -> None:
        """A removed session's shell ends with it (its whole process group)."""
        if self.terminals is not None:
            await self.terminals.forget_session(sessionid)

    def _terminals(self) -> Terminals:
        if self.terminals is None:
            raise BadRequest(("session", "there is no terminal in this server"))
        return self.terminals
