"""The export and import use cases: a session as a JSON document or as Markdown, and a JSON
document made a new session of a project, in this Totem or another.

What an export holds (version EXPORT_VERSION): the session's name, mode, model, status, error
and times; its task list; each message that an undo did not take back with its parts (their
kind, status, text and data, so a tool part's input, output and the audit of its permission
decision), its usage and its data; and the files of its prompts in base64 while they fit the
caps (MAX_ATTACHMENT_BYTES each, MAX_ATTACHMENTS_BYTES in all), else named with a note. A
session that runs is exported as it is stored at that moment (its open parts open). Every text
of it, keys of data included, passes the one scrubber of tool output (the provider keys, the
access token, the secret), and a file whose content holds one of them is left out with a note.
Snapshots and undo history, permission rules, settings, auto-accept and the sessions of
sub-agents are never exported.

An import is checked whole before anything is written (the action's schema, then here what a
schema cannot say: the count of parts, ids given twice, what a tool part must hold, the depth
of data), then written in one transaction: new ids (the references between messages and to
their files follow), never auto-accepting, no rule, setting or snapshot; open parts closed as
`error` and a running session as `error`, saying why. It never parses HTTP and never imports
`api`, `httpd`, `websocket` or `routes`.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from totem.clock import now_ms
from totem.errors import BadRequest, NotFound
from totem.events import SessionUpdated
from totem.security.vault import Scrubber
from totem.services.export_markdown import render_markdown
from totem.store import session_view
from totem.store.exports import (
    ImportedAttachment,
    ImportedMessage,
    ImportedPart,
    ImportedSession,
    StoredSession,
)

if TYPE_CHECKING:
    from totem.events import Hub
    from totem.services.session_rows import Session, SessionRows
    from totem.store import Store

__all__ = ["EXPORT_VERSION", "FORMATS", "MAX_ATTACHMENTS_BYTES", "MAX_ATTACHMENT_BYTES", "MAX_DATA_DEPTH",
           "MAX_IMPORT_PARTS", "ROLES", "SESSION_STATUSES", "Exports"]

EXPORT_VERSION = 1
FORMATS = ("json", "markdown")
# A file is carried in base64 while it fits these: an export stays importable under the 20 MB
# body limit (base64 takes 4 bytes for 3) with room for the conversation.
MAX_ATTACHMENT_BYTES = 2 * 1024 * 1024
MAX_ATTACHMENTS_BYTES = 8 * 1024 * 1024
MAX_IMPORT_PARTS = 20_000
MAX_DATA_DEPTH = 32  # of a part's or message's data: deeper is no data Totem writes
OPEN_STATUSES = frozenset(("streaming", "pending", "running"))
SESSION_STATUSES = ("idle", "running", "aborted", "error")
ROLES = ("user", "assistant")
NOTES = ("Snapshots, undo history, permission rules, settings, auto-accept and the sessions of sub-agents are not "
         "exported.",
         "Secrets known to the exporting Totem (provider keys, its access token and secret) read [secret:<name>].")
LEFT_OUT_SIZE = (f"left out: larger than {MAX_ATTACHMENT_BYTES // (1024 * 1024)} MB, or past "
                 f"{MAX_ATTACHMENTS_BYTES // (1024 * 1024)} MB of files in this export")
LEFT_OUT_SECRET = "left out: its content holds a secret"
EXPORTED_DURING_RUN = "this session was exported while its run went on; the run did not finish here"
OPEN_AT_EXPORT = "this part was still open when the session was exported"

Problems = list[tuple[str, str]]


class Exports:
    """Sessions out of one Totem and into another."""

    def __init__(self, rows: SessionRows, store: Store, hub: Hub, scrubber: Callable[[], Scrubber]):
        self.rows = rows
        self.store = store
        self.hub = hub
        self.scrubber = scrubber  # () -> the current vault.Scrubber, the one of tool output

    async def export(self, sessionid: str, format: str = "json") -> dict[str, Any]:
        """The session as a document of version EXPORT_VERSION, or with `format` markdown as
        `{markdown}`: readable turns, tool calls with their input, a trimmed output and their
        decisions. Both are scrubbed of every secret. Raises NotFound."""
        stored = await self.store.stored_session(sessionid, MAX_ATTACHMENT_BYTES, MAX_ATTACHMENTS_BYTES)
        if stored is None:
            raise NotFound(("id", f"no session {sessionid}"))
        scrubber = self.scrubber()
        # Encoding and scrubbing megabytes is no work for the event loop.
        document = await asyncio.to_thread(build_export, stored, scrubber, now_ms())
        if format == "markdown":
            return {"markdown": await asyncio.to_thread(lambda: scrubber.scrub(render_markdown(document)))}
        return document

    async def import_session(self, projectid: str, document: dict[str, Any]) -> Session:
        """A new session of the project from an export (checked by the action's schema, its
        files' `data` decoded to bytes); publishes session.updated. Raises NotFound (no such
        project), BadRequest naming each problem (nothing is written then)."""
        if await self.store.get_project(projectid) is None:
            raise NotFound(("projectid", f"no project {projectid}"))
        problems = await asyncio.to_thread(check_import, document)
        if problems:
            raise BadRequest(problems)
        imported = await asyncio.to_thread(imported_session, document, self.store.ids.new, self.scrubber(), now_ms())
        row = await self.store.import_session(projectid, imported)
        if row is None:  # removed since it was read
            raise NotFound(("projectid", f"no project {projectid}"))
        self.hub.publish(SessionUpdated(row["id"], session_view(row)))
        return self.rows.view(row)


# -- export -------------------------------------------------------------------------------------

def build_export(stored: StoredSession, scrubber: Scrubber, stamp: int) -> dict[str, Any]:
    """The export document of a stored session, scrubbed."""
    session = stored["session"]
    messages = []
    for message in stored["messages"]:
        messages.append({
            "id": message["id"], "role": message["role"], "model": message["model"], "usage": message["usage"],
            "data": message["data"], "created": message["created"], "finished": message["finished"],
            "parts": [{"kind": part["kind"], "status": part["status"], "text": part["text"], "data": part["data"],
                       "created": part["created"], "updated": part["updated"], "closed": part["closed"]}
                      for part in message.get("parts", ())],
            "attachments": [_exported_file(item, scrubber) for item in stored["attachments"].get(message["id"], ())]})
    document = {"version": EXPORT_VERSION, "exported": stamp, "notes": list(NOTES), "name": session["name"],
                "mode": session["mode"], "model": session["model"], "status": session["status"],
                "error": session["error"], "created": session["created"], "updated": session["updated"],
                "todos": stored["todos"], "messages": messages}
    scrubbed: dict[str, Any] = scrubbed_json(document, scrubber)
    return scrubbed


def _exported_file(item: dict[str, Any], scrubber: Scrubber) -> dict[str, Any]:
    exported = {"id": item["id"], "name": item["name"], "mime": item["mime"], "size": item["size"]}
    if item["data"] is None:
        return exported | {"note": LEFT_OUT_SIZE}
    encoded = base64.b64encode(item["data"]).decode("ascii")
    # The scrubber finds a secret in base64 at any alignment, and text in the raw bytes; a
    # file that holds one cannot be scrubbed without breaking it, so it stays behind.
    raw = bytes(item["data"]).decode("utf-8", "replace")
    if scrubber.scrub(encoded) != encoded or scrubber.scrub(raw) != raw:
        return exported | {"note": LEFT_OUT_SECRET}
    return exported | {"data": encoded}


def scrubbed_json(value: Any, scrubber: Scrubber) -> Any:
    """`value` (JSON) with every text in it scrubbed, the keys of objects too."""
    if isinstance(value, str):
        return scrubber.scrub(value)
    if isinstance(value, dict):
        return {scrubber.scrub(key): scrubbed_json(item, scrubber) for key, item in value.items()}
    if isinstance(value, list):
        return [scrubbed_json(item, scrubber) for item in value]
    return value


# -- import -------------------------------------------------------------------------------------

def check_import(document: dict[str, Any]) -> Problems:
    """What the schema cannot say about a document it passed, each problem with its field."""
    problems: Problems = []
    messages = document["messages"]
    if sum(len(message["parts"]) for message in messages) > MAX_IMPORT_PARTS:
        problems.append(("session.messages", f"must hold at most {MAX_IMPORT_PARTS} parts in all"))
    seen: set[str] = set()
    for index, message in enumerate(messages):
        where = f"session.messages[{index}]"
        if message["id"] in seen:
            problems.append((f"{where}.id", "is given twice"))
        seen.add(message["id"])
        for field in ("data", "usage"):
            if _too_deep(message.get(field)):
                problems.append((f"{where}.{field}", f"must be nested at most {MAX_DATA_DEPTH} levels deep"))
        problems += _message_data_problems(message["data"], where)
        files: set[str] = set()
        for number, item in enumerate(message.get("attachments") or ()):
            if item["id"] in files:
                problems.append((f"{where}.attachments[{number}].id", "is given twice"))
            files.add(item["id"])
        for number, part in enumerate(message["parts"]):
            problems += _part_problems(part, f"{where}.parts[{number}]")
    return problems


# What the context of the next run reads from a message's data and a tool part's data.
MESSAGE_DATA_TYPES = {"prompt": str, "attachments": list, "reasoning_details": list, "compaction": bool}
TOOL_DATA_TYPES = {"input": dict, "arguments": str, "output": str, "error": str}


def _message_data_problems(data: dict[str, Any], where: str) -> Problems:
    problems = [(f"{where}.data.{name}", f"must be {_kind_words(kind)}")
                for name, kind in MESSAGE_DATA_TYPES.items() if name in data and not isinstance(data[name], kind)]
    if isinstance(data.get("attachments"), list):
        problems += [(f"{where}.data.attachments[{index}].id", "must be a text")
                     for index, item in enumerate(data["attachments"])
                     if not isinstance(item, dict) or not isinstance(item.get("id"), str)]
    return problems


def _part_problems(part: dict[str, Any], where: str) -> Problems:
    data = part["data"]
    if _too_deep(data):
        return [(f"{where}.data", f"must be nested at most {MAX_DATA_DEPTH} levels deep")]
    if part["kind"] != "tool":
        return []
    problems = [(f"{where}.data.{name}", "must be a text: a tool part names its tool and its call")
                for name in ("tool", "callid") if not isinstance(data.get(name), str)]
    return problems + [(f"{where}.data.{name}", f"must be {_kind_words(kind)}")
                       for name, kind in TOOL_DATA_TYPES.items() if name in data and not isinstance(data[name], kind)]


def _kind_words(kind: type) -> str:
    return {str: "a text", list: "an array", dict: "an object", bool: "true or false"}[kind]


def _too_deep(value: Any) -> bool:
    """Whether JSON `value` nests more than MAX_DATA_DEPTH levels (walked without recursion)."""
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_DATA_DEPTH:
                return True
            pending.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def imported_session(document: dict[str, Any], new_id: Callable[[], str], scrubber: Scrubber,
                     stamp: int) -> ImportedSession:
    """The rows of a checked document: new ids for its messages and files (references follow),
    open parts closed, a running session ended, prompts that waited no longer waiting, every
    text scrubbed of this Totem's own secrets."""
    renamed = {message["id"]: new_id() for message in document["messages"]}
    messages = [_imported_message(message, renamed, new_id, scrubber, stamp) for message in document["messages"]]
    status, error = document["status"], document.get("error")
    if status == "running":
        status, error = "error", EXPORTED_DURING_RUN
    return ImportedSession(name=scrubber.scrub(document["name"]), mode=document["mode"],
                           model=document.get("model"), status=status,
                           error=None if error is None else scrubber.scrub(error), created=document["created"],
                           messages=messages, todos=scrubbed_json(document.get("todos") or [], scrubber))


def _imported_message(message: dict[str, Any], renamed: dict[str, str], new_id: Callable[[], str],
                      scrubber: Scrubber, stamp: int) -> ImportedMessage:
    files: list[ImportedAttachment] = []
    file_ids: dict[str, str] = {}  # the export's id of a file -> its new id
    for item in message.get("attachments") or ():
        if isinstance(item.get("data"), bytes | bytearray):  # decoded by the adapter; else left out there
            files.append(ImportedAttachment(id=new_id(), name=scrubber.scrub(item["name"]),
                                            mime=item["mime"].lower(), data=item["data"]))
            file_ids[item["id"]] = files[-1]["id"]
    data = dict(scrubbed_json(message["data"], scrubber))
    data.pop("queued", None)  # nothing waits here to run it: it stays said, as after a crash
    if isinstance(data.get("prompt"), str):
        if data["prompt"] in renamed:
            data["prompt"] = renamed[data["prompt"]]
        else:
            data.pop("prompt")  # it named a message the export did not hold
    if isinstance(data.get("attachments"), list):
        data["attachments"] = [item | {"id": file_ids[item["id"]]} for item in data["attachments"]
                               if item["id"] in file_ids]
        if not data["attachments"]:
            data.pop("attachments")
    parts = [_imported_part(part, scrubber, stamp) for part in message["parts"]]
    finished = message.get("finished")
    if finished is None and message["role"] == "assistant":  # an answer that streamed at the export
        finished = stamp
    return ImportedMessage(id=renamed[message["id"]], role=message["role"], model=message.get("model"),
                           usage=scrubbed_json(message.get("usage"), scrubber), data=data,
                           created=message["created"], finished=finished,
                           parts=parts, attachments=files)


def _imported_part(part: dict[str, Any], scrubber: Scrubber, stamp: int) -> ImportedPart:
    data = scrubbed_json(part["data"], scrubber)
    status, closed = part["status"], part.get("closed")
    if closed is None or status in OPEN_STATUSES:
        status, closed = "error", stamp
        if part["kind"] == "tool" and "error" not in data and "output" not in data:
            data["error"] = OPEN_AT_EXPORT
    return ImportedPart(kind=part["kind"], status=status, text=scrubber.scrub(part["text"]), data=data,
                        created=part["created"], updated=part["updated"], closed=closed)
