"""The rows that cross modules: what the store answers and the events and services carry.

Pure declarations: the store fills them (with `data` and `usage` decoded from JSON), the
services and the agent read them, the events carry parts, messages and sessions as they are.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict


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


class PartRow(TypedDict):
    id: str
    messageid: str
    sessionid: str
    kind: str
    status: str
    text: str
    data: dict
    created: int
    updated: int
    closed: int | None


class MessageRow(TypedDict):
    id: str
    sessionid: str
    role: str
    model: str | None
    usage: dict | None
    data: dict
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
    data: dict
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
    data: dict
    created: int
    updated: int
