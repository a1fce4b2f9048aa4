"""What a prompt leaves in a session: the user message with its attachments, and the session's
name from its first line.

Must not: start runs or call models (loop.py does).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from totem.events import MessageCreated, SessionUpdated
from totem.store import session_view

SESSION_NAME_CHARS = 60
DEFAULT_SESSION_NAME = "New session"


@dataclass
class Prompt:
    """What a person sent: text, options and files (name, mime, bytes)."""

    text: str
    model: str
    mode: str = "build"
    autoaccept: bool = False
    reasoning: str | None = None
    attachments: list[tuple[str, str, bytes]] = field(default_factory=list)
    scheduled: bool = False  # a run of a schedule: nobody is there to answer
    # What a project's command or agent made of the prompt (project_commands.py); it only narrows.
    tools: tuple[str, ...] | None = None  # the run declares and runs only these tools (None: all)
    instructions: str = ""  # the agent's prompt, added to the end of the system prompt
    notes: dict = field(default_factory=dict)  # kept in the message's data: command, arguments, agent
    keep: tuple[str, str] | None = None  # (model, mode) the session keeps when the run's came from a file
    # For this run only (never kept by the session): its spending limit in US dollars, over the
    # settings' maxcost; and (tool, pattern) allow rules, decided in the layer "run".
    maxcost: float | None = None
    allow: tuple[tuple[str, str], ...] = ()


async def store_user_message(store, hub, session: dict, prompt: Prompt, extra: dict | None = None) -> dict:
    """Store the prompt as a user message (its attachments first referenced by it), remember
    the session's options, announce the message, and name a new session after it. `extra`
    goes into the message's data (`queued`, `steer`)."""
    sessionid = session["id"]
    messageid = store.ids.new()
    files = []
    extra = prompt.notes | dict(extra or {})
    if prompt.attachments:
        # The message row must exist before its attachments reference it.
        message = await store.add_message(sessionid, "user", data={}, newid=messageid)
        files = await store.add_attachments(sessionid, messageid, prompt.attachments)
        await store.finish_message(messageid, None, {"attachments": files} | extra)
    else:
        message = await store.add_message(sessionid, "user", data=extra or None, newid=messageid)
    part = await store.add_part(messageid, sessionid, "text", "done", prompt.text, closed=True)
    message["data"] = ({"attachments": files} if files else {}) | extra
    message["parts"] = [part]
    model, mode = prompt.keep or (prompt.model, prompt.mode)
    row = await store.set_session_options(sessionid, model, mode, prompt.autoaccept)
    hub.publish(MessageCreated(sessionid, message))
    # Another tab, or a schedule's session opened later, shows the options the prompt runs with.
    if row is not None and (row["model"], row["mode"], bool(row["autoaccept"])) != \
            (session.get("model"), session.get("mode"), bool(session.get("autoaccept"))):
        hub.publish(SessionUpdated(sessionid, session_view(row)))
    await _name_session(store, hub, session, prompt)
    return message


async def _name_session(store, hub, session: dict, prompt: Prompt) -> None:
    if session["name"] != DEFAULT_SESSION_NAME or await store.count_messages(session["id"]) != 1:
        return
    first_line = prompt.text.strip().splitlines()[0] if prompt.text.strip() else ""
    name = first_line[:SESSION_NAME_CHARS].strip() or (prompt.attachments[0][0] if prompt.attachments else "")
    if not name:
        return
    row = await store.rename_session(session["id"], name)
    if row is not None:
        hub.publish(SessionUpdated(session["id"], session_view(row)))

