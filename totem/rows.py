"""The rows that cross modules: what the store answers and the events and services carry.

Pure declarations: the store fills them (with `data` and `usage` decoded from JSON), the
services and the agent read them, the events carry parts, messages and sessions as they are.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class ProjectRow(TypedDict):
    id: str
    path: str
    name: str
    created: int
    opened: int


class SessionRow(TypedDict):
    id: str
    projectid: str
    name: str
    status: str
    mode: str
    autoaccept: int
    model: str | None
    worktree: str | None
    created: int
    updated: int
    error: str | None
    redo: str | None  # JSON of what the last undo took away, for redo
    schedule: str | None  # the schedule this session is a run of
    parent: str | None  # the session whose run handed it its work (a sub-agent's)
    restoring: str | None  # JSON journal of an undo, redo or Save as in progress
    marker: str | None  # of the data envelopes of its runs, chosen at the first (agent/context.py)
    forkof: str | None  # the session it was forked from (Sessions|fork)


class PartRow(TypedDict):
    id: str
    messageid: str
    sessionid: str
    kind: str
    status: str
    text: str
    data: dict[str, Any]
    created: int
    updated: int
    closed: int | None


class MessageRow(TypedDict):
    id: str
    sessionid: str
    role: str
    model: str | None
    usage: dict[str, Any] | None
    data: dict[str, Any]
    created: int
    finished: int | None
    reverted: bool  # taken back by an undo: shown dimmed, never sent to the model
    parts: NotRequired[list[PartRow]]  # in a page of messages and a history


class AttachmentRow(TypedDict):
    id: str
    sessionid: str
    messageid: str | None
    name: str
    mime: str
    size: int
    data: bytes
    created: int


class AttachmentInfo(TypedDict):
    id: str
    name: str
    mime: str
    size: int


class RuleRow(TypedDict):
    id: str
    projectid: str | None
    tool: str
    pattern: str
    action: str
    created: int


class ProviderRow(TypedDict):
    id: str
    name: str
    kind: str
    url: str
    secret: bytes | None  # encrypted by the vault
    data: dict[str, Any]
    created: int
    updated: int


class SnapshotRow(TypedDict):
    """One file changed by a part (or by the person's Save as)."""

    id: str
    sessionid: str
    messageid: str | None
    partid: str | None
    path: str  # relative to the session's folder
    before: str | None  # SHA-256 of the content before; None: no file; "": not kept (note)
    after: str | None
    tool: str  # write, edit, patch, bash, job, saveas
    note: str
    reverted: bool
    created: int


class ScheduleRow(TypedDict):
    """A scheduled prompt of a project; `data` holds its fields, `next` and `last`."""

    id: str
    projectid: str
    data: dict[str, Any]
    created: int
    updated: int


class SnapshotChange(TypedDict):
    """A file change to record (SnapshotRow without what the store adds)."""

    sessionid: str
    messageid: str | None
    partid: str | None
    path: str
    before: str | None
    after: str | None
    tool: str
    note: str


class ServerPin(TypedDict):
    """What an "always" approval of a project MCP server covered."""

    server: str
    digest: str
    manifest: dict[str, Any]  # the server's manifest as it was approved (agent/servers.py)
    created: int


class McpTokenRow(TypedDict):
    """An MCP-only token, without its digest."""

    id: str
    name: str
    created: int


class TodoItem(TypedDict):
    """One task of a session's list (tools/todo.py)."""

    text: str
    status: str  # pending, in_progress, done


class SessionTokens(TypedDict):
    """The tokens of a session's answers, summed; `cost` (USD) when any answer's price was known."""

    input: int
    output: int
    estimated: bool
    cost: NotRequired[float]
    cached: NotRequired[int]  # of `input`, what the provider's prompt cache served


class InterruptedChange(TypedDict):
    """A tool part a crash left open with a journal of file changes (agent/recovery.py)."""

    id: str
    data: dict[str, Any]
    root: str  # the folder of its project
