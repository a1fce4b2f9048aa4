"""Questions that wait for the person: permission asks and the questions of the ask tool.

Owns the waiting: a question is published (`permission.ask`, `question.ask`), the run awaits
its answer, and the reply (from any client) or the end of the run settles it and publishes
`permission.replied` / `question.replied`. A question that ends without an answer (abort,
removed session) counts as rejected. It decides nothing about rules: the loop does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from totem.errors import BadRequest, NotFound
from totem.events import PermissionAsk, PermissionReplied, QuestionAsk, QuestionReplied
from totem.security.permissions import rule_problems

PERMISSION_REPLIES = ("once", "always", "reject")


@dataclass
class _Waiting:
    sessionid: str
    kind: str  # permission | question
    future: asyncio.Future
    patterns: list[str]
    tool: str = ""
    commands: list[dict] = field(default_factory=list)
    event: object = None  # the ask as it was published, sent again to a new subscriber
    once_only: bool = False  # "always" is refused


class Questions:
    """Every question that waits, across sessions."""

    def __init__(self, hub, new_id, kinds=dict):
        self.hub = hub
        self.new_id = new_id
        self.kinds = kinds  # () -> the tools' declarations by name, to validate "always" patterns
        self._waiting: dict[str, _Waiting] = {}

    async def permission(self, sessionid: str, tool: str, args: dict, patterns: list[str], *,
                         commands: list[dict] | None = None, reason: str = "",
                         folder: str = "", preview: list[dict] | None = None, reach: dict | None = None,
                         once_only: bool = False) -> tuple[str, list[str]]:
        """Ask whether a tool call may run; returns (reply, the patterns to always allow).

        `commands`: per subject that needs an answer, `{command, shown, patterns}`; "always"
        without patterns of its own takes the first suggestion of each. `reach`: what a command
        could reach (sandbox.py). `once_only`: "always" is refused (a command outside the
        sandbox, a call asked under any rule). Cancelled → rejected.
        """
        askid = self.new_id()
        commands = commands or []
        waiting = _Waiting(sessionid, "permission", asyncio.get_running_loop().create_future(),
                           patterns, tool, commands, once_only=once_only)
        waiting.event = PermissionAsk(sessionid, askid, tool, args, patterns, reason, folder, commands,
                                      preview or [], reach or {}, once_only)
        self._waiting[askid] = waiting
        self.hub.publish(waiting.event)
        try:
            reply, chosen = await waiting.future
        except asyncio.CancelledError:
            # The run ended (abort, removed session) while waiting: the question ends rejected.
            self.hub.publish(PermissionReplied(sessionid, askid, "reject"))
            raise
        finally:
            self._waiting.pop(askid, None)
        self.hub.publish(PermissionReplied(sessionid, askid, reply))
        return reply, chosen

    async def question(self, sessionid: str, text: str, options: list[str]) -> str:
        """Ask the person a question; returns the answer. Cancelled → the question is dropped."""
        questionid = self.new_id()
        waiting = _Waiting(sessionid, "question", asyncio.get_running_loop().create_future(), [])
        waiting.event = QuestionAsk(sessionid, questionid, text, options)
        self._waiting[questionid] = waiting
        self.hub.publish(waiting.event)
        try:
            return await waiting.future
        finally:
            self._waiting.pop(questionid, None)
            self.hub.publish(QuestionReplied(sessionid, questionid))

    def reply_permission(self, askid: str, reply: str, pattern: str | None,
                         patterns: list[str] | None = None) -> None:
        """Answer a permission question. "always" stores a rule for each pattern given
        (`patterns`, or the one `pattern`), by default the first suggestion of each subject that
        asked; every pattern must be a valid allow rule of the question's tool. "reject" with
        patterns stores a deny rule for each (only patterns the question suggested), so that the
        same question is not asked again; without, it refuses this call only.

        Raises NotFound, BadRequest (no pattern for "always", or one that is not valid).
        """
        waiting = self._waiting.get(askid)
        if waiting is None or waiting.kind != "permission" or waiting.future.done():
            raise NotFound(("id", f"no permission question {askid} is waiting"))
        chosen: list[str] = []
        if reply == "always" and waiting.once_only:
            raise BadRequest(("reply", "this question can only be answered once or reject: what it asks is never "
                                       "stored as a rule"))
        if reply == "reject":
            chosen = self._rejected_patterns(waiting, patterns or ([pattern] if pattern else []))
        if reply == "always":
            chosen = list(patterns or ([pattern] if pattern else []))
            if not chosen:
                chosen = [item["patterns"][0] for item in waiting.commands if item.get("patterns")]
            if not chosen and waiting.patterns:
                chosen = [waiting.patterns[0]]
            if not chosen:
                raise BadRequest(("pattern", "is required to always allow"))
            problems = [(name, f"{candidate}: {why}") for candidate in dict.fromkeys(chosen)
                        for name, why in rule_problems(waiting.tool, candidate, "allow", self.kinds())]
            if problems:
                raise BadRequest([("patterns" if patterns else "pattern", why) for _, why in problems])
            chosen = list(dict.fromkeys(chosen))
        waiting.future.set_result((reply, chosen))

    def _rejected_patterns(self, waiting: _Waiting, patterns: list[str]) -> list[str]:
        """The deny rules a "reject" with patterns stores (none without: this call only); each
        must be one that the question suggested, so that a reject never stores more than what
        was asked. Raises BadRequest."""
        suggested = set(waiting.patterns) | {p for item in waiting.commands for p in item.get("patterns", ())}
        chosen = list(dict.fromkeys(patterns))
        strangers = [candidate for candidate in chosen if candidate not in suggested]
        if strangers:
            raise BadRequest([("patterns", f"{candidate}: a reject stores only a pattern the question suggests")
                              for candidate in strangers])
        problems = [f"{candidate}: {why}" for candidate in chosen
                    for _name, why in rule_problems(waiting.tool, candidate, "deny", self.kinds())]
        if problems:
            raise BadRequest([("patterns", why) for why in problems])
        return chosen

    def reply_question(self, questionid: str, answer: str) -> None:
        """Answer a question of the ask tool. Raises NotFound."""
        waiting = self._waiting.get(questionid)
        if waiting is None or waiting.kind != "question" or waiting.future.done():
            raise NotFound(("id", f"no question {questionid} is waiting"))
        waiting.future.set_result(answer)

    def waiting(self, sessionid: str) -> list:
        """The asks (permission.ask, question.ask) that wait in a session, oldest first."""
        return [waiting.event for waiting in self._waiting.values()
                if waiting.sessionid == sessionid and not waiting.future.done()]

    def waiting_in(self, sessionid: str) -> int:
        return sum(1 for waiting in self._waiting.values() if waiting.sessionid == sessionid)
