"""The background-job use cases of a session: list its jobs (Sessions|jobs) and stop one
(Sessions|jobstop), never in Plan mode, where nothing is run or stopped.

The jobs themselves are `process/jobs.py`; this finds the session and turns the jobs'
refusals into the errors of `errors.py`.
"""

from __future__ import annotations

from typing import Any

from totem.errors import Forbidden, NotFound
from totem.process.jobs import JobError, Jobs as JobRunner
from totem.services.session_rows import SessionRows

JobList = list[dict[str, Any]]


class Jobs:
    """The background commands of each session."""

    def __init__(self, rows: SessionRows, jobs: JobRunner):
        self.rows = rows
        self.jobs = jobs

    async def list(self, sessionid: str) -> JobList:
        """`[{id, command, status, output, ...}]`. Raises NotFound."""
        await self.rows.get(sessionid)
        return self.jobs.list(sessionid)

    async def stop(self, sessionid: str, jobid: str) -> dict[str, Any]:
        """Stop a job (its whole process group); returns the job. Raises NotFound (session or
        job), Forbidden in Plan mode, where nothing is run or stopped."""
        session = await self.rows.get(sessionid)
        if session["mode"] == "plan":
            raise Forbidden(("mode", "the session is in Plan mode, where nothing is run or stopped"))
        try:
            return await self.jobs.stop(session["id"], jobid)
        except JobError as exc:
            raise NotFound(("job", str(exc))) from None

    async def forget_session(self, sessionid: str) -> None:
        """A removed session's jobs stop (whole process groups) and are forgotten."""
        await self.jobs.forget_session(sessionid)
