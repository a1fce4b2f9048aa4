"""Prompts sent while a session's run goes on: stored at once as queued messages, run one
after the other when the run ends, removable until then. After an abort none runs, and the
queued messages stay in the conversation as said, not run.

Must not: start a run itself (the loop's `start` does), or order prompts of two sessions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from totem.agent import turns
from totem.agent.run import Run, RunRefused
from totem.agent.turns import Prompt
from totem.store import Store

# (session, project, prompt, limits, message id) -> the message id; raises RunRefused.
Start = Callable[[dict[str, Any], dict[str, Any], Prompt, dict[str, Any], str], Awaitable[str]]


class PromptQueue:
    def __init__(self, store: Store, hub):
        self.store = store
        self.hub = hub

    async def add(self, run: Run, session: dict[str, Any], prompt: Prompt, limits: dict[str, Any] | None) -> str:
        """Store the prompt as a queued message behind `run`; returns its id."""
        message = await turns.store_user_message(self.store, self.hub, session, prompt, {"queued": True})
        run.queue.append((message["id"], prompt, dict(limits or {})))
        return str(message["id"])

    async def remove(self, run: Run | None, messageid: str) -> bool:
        """Take back a prompt that waits behind `run`; False when none waits."""
        if run is None or not any(item[0] == messageid for item in run.queue):
            return False
        run.queue = [item for item in run.queue if item[0] != messageid]
        await self.store.remove_message(messageid)
        return True

    async def next_after(self, run: Run, status: str, start: Start, run_of: Callable[[str], Run | None]) -> None:
        """After `run` ended with `status`, start the first prompt queued behind it; the rest
        wait behind the new run (or behind one that started first)."""
        if not run.queue:
            return
        if status == "aborted":
            for messageid, _prompt, _limits in run.queue:
                await self.store.set_message_queued(messageid, False)
            return
        (messageid, prompt, limits), rest = run.queue[0], run.queue[1:]
        session = await self.store.get_session(run.request.sessionid)
        if session is None:
            return
        try:
            await start(dict(session), run.request.project, prompt, limits, messageid)
        except RunRefused:  # another prompt started first: the queue goes behind it
            pass
        follow = run_of(session["id"])
        if follow is not None:
            follow.queue = rest + follow.queue
