"""The end of a run: its open parts closed, where it stopped marked on the conversation, its
final status stored; and the sentence of a run that the disk stopped."""

from __future__ import annotations

import logging
import os

from totem.agent.recorder import Recorder
from totem.agent.run import Run
from totem.errors import StorageFull, out_of_space
from totem.store import Store

log = logging.getLogger("totem.agent")


class RunEnding:
    def __init__(self, store: Store, recorder: Recorder):
        self.store = store
        self.recorder = recorder

    async def close(self, run: Run, status: str) -> None:
        """Close the run's parts, mark where it stopped and store its final status. Each step
        may fail (a full disk) without keeping the others from being tried; the loop forgets
        the run and announces its status whatever the store took."""
        sessionid = run.request.sessionid
        closing = "aborted" if status == "aborted" else "error"
        for open_part in self.recorder.open_parts(sessionid):
            try:
                await self.recorder.close(open_part, closing)
            except Exception as exc:  # close forgot it first: it is not tried again
                log_end_failure(exc, f"a part of session {sessionid} was not closed")
        if status in ("aborted", "error") and run.messageid:
            # Where it stopped, and why, stay with the conversation (not only until the next run).
            mark: dict[str, str] = {"ended": status}
            if status == "error" and run.error:
                mark |= {"error": run.error} | ({"errorkind": run.error_kind} if run.error_kind else {})
            try:
                await self.store.mark_run_end(sessionid, run.messageid, mark)
            except Exception as exc:  # the mark must not keep the run from ending
                log_end_failure(exc, f"the end of the run of session {sessionid} was not marked")
        error = run.error if status == "error" else None
        try:
            await self.store.set_session_status(sessionid, status, error)
        except Exception as exc:  # Sessions reads a status no run holds as this error
            log_end_failure(exc, f"the status of session {sessionid} was not stored")


def full_reason(exc: BaseException, store) -> str:
    """The sentence of a write refused for want of space, naming the folder and what is left."""
    if isinstance(exc, StorageFull):
        return exc.errors[0][1]
    folder = getattr(exc, "filename", None)
    return StorageFull(os.path.dirname(folder) if isinstance(folder, str) else os.path.dirname(store.path)).errors[0][1]


def log_end_failure(exc: BaseException, what: str) -> None:
    if out_of_space(exc):
        log.warning("%s: the disk is full", what)  # one line: the store said why once
    else:
        log.exception(what)
