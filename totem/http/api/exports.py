"""Sessions|export and Sessions|import: a session as a JSON document (or Markdown) and a document
made a new session of a project. The use cases live in `totem/services/exports.py`.

The document's schema is declared once here: it is the export's answer and the import's input,
so what one Totem exports another takes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from totem.http.api import Action, Context, Input
from totem.http.api.contract import (
    BASE64,
    ID,
    STRING,
    body,
    choice,
    integer,
    patterned,
    query,
    record,
    text,
)
from totem.http.api.sessions import (
    MAX_ATTACHMENT_NAME_CHARS,
    MAX_ATTACHMENTS,
    MAX_MIME_CHARS,
    MAX_MODEL_CHARS,
    MAX_NAME_CHARS,
    MIME_PATTERN,
    SESSION,
    THREAD_DECODE_CHARS,
    decode_base64,
)
from totem.http.httpd import Response, large_json_response
from totem.services.exports import EXPORT_VERSION, FORMATS, MAX_ATTACHMENT_BYTES, ROLES, SESSION_STATUSES
from totem.services.prompt_plan import MODES
from totem.services.sessions import MESSAGE_PAGE_BYTES
from totem.tools.todo import MAX_TODO_ITEMS, MAX_TODO_TEXT_CHARS, TODO_STATUSES

MAX_IMPORT_MESSAGES = 5_000
MAX_MESSAGE_PARTS = 1_000
MAX_PART_TEXT_CHARS = 5_000_000
MAX_ERROR_CHARS = 100_000
MAX_NOTES = 20
MAX_NOTE_CHARS = 1_000
MAX_KIND_CHARS = 32
MAX_TIME_MS = 253_402_300_799_999  # the last millisecond of the year 9999
MAX_FILE_BYTES = 1 << 40  # what a left-out file may say it was
# An export is encoded on a worker thread, each part on its own: {messages: [{parts: [part]}]}.
EXPORT_DEPTH = 4

TIME = integer(0, MAX_TIME_MS, "milliseconds since 1970-01-01 UTC")
OBJECT = {"type": "object", "description": "as Totem stored it"}
WORD = r"^[a-z][a-z0-9_-]*$"
PART = body({
    "kind": patterned(WORD, "a kind such as text, reasoning or tool (lower-case letters, digits, - and _)",
                      MAX_KIND_CHARS),
    "status": patterned(WORD, "a status such as done or error (lower-case letters, digits, - and _)",
                        MAX_KIND_CHARS),
    "text": text(MAX_PART_TEXT_CHARS, empty=True), "data": OBJECT, "created": TIME, "updated": TIME},
    {"closed": TIME | {"description": "null: the part was still open when the session was exported"}})
FILE = body({
    "id": ID, "name": text(MAX_ATTACHMENT_NAME_CHARS),
    "mime": patterned(MIME_PATTERN, "a media type such as image/png or text/plain", MAX_MIME_CHARS),
    "size": integer(0, MAX_FILE_BYTES, "bytes")},
    {"data": BASE64 | {"maxLength": (MAX_ATTACHMENT_BYTES + 2) // 3 * 4,
                       "description": "the content in base64 (RFC 4648); absent when it was left out"},
     "note": text(MAX_NOTE_CHARS, description="why the content was left out")})
MESSAGE = body({
    "id": ID, "role": choice(ROLES), "data": OBJECT, "created": TIME,
    "parts": {"type": "array", "maxItems": MAX_MESSAGE_PARTS, "items": PART}},
    {"model": text(MAX_MODEL_CHARS), "usage": OBJECT, "finished": TIME,
     "attachments": {"type": "array", "maxItems": MAX_ATTACHMENTS, "items": FILE}})
DOCUMENT = body({
    "version": {"const": EXPORT_VERSION, "description": f"the version of the export's form, {EXPORT_VERSION}"},
    "name": text(MAX_NAME_CHARS), "mode": choice(MODES), "status": choice(SESSION_STATUSES), "created": TIME,
    "messages": {"type": "array", "maxItems": MAX_IMPORT_MESSAGES, "items": MESSAGE}}, {
    "exported": TIME, "updated": TIME, "model": text(MAX_MODEL_CHARS), "error": text(MAX_ERROR_CHARS, empty=True),
    "notes": {"type": "array", "maxItems": MAX_NOTES, "items": text(MAX_NOTE_CHARS),
              "description": "what the export leaves out (read by people, not by the import)"},
    "todos": {"type": "array", "maxItems": MAX_TODO_ITEMS, "items": body({
        "text": text(MAX_TODO_TEXT_CHARS), "status": choice(TODO_STATUSES)})}})
DOCUMENT["description"] = (f"a session exported (version {EXPORT_VERSION}): its messages, oldest first, with their "
                           "parts (a tool part's data holds its input, output and the audit of its permission "
                           "decision) and the files of its prompts; secrets read [secret:<name>]")

EXPORT_QUERY = query(optional={"format": choice(FORMATS, "json: the document, for Sessions|import (when absent); "
                                                         "markdown: the conversation for people to read")})
MARKDOWN = record({"markdown": STRING}, description="the session as Markdown")
EXPORTED = {"anyOf": [DOCUMENT, MARKDOWN], "description": "the document, or {markdown}"}


async def export_session(ctx: Context) -> Response:
    """The session as a JSON document (`format=json`, what Sessions|import takes) or as Markdown
    (`format=markdown`), scrubbed of every secret; a session that runs is exported as it is
    stored at that moment."""
    await ctx.services.sessions.get(ctx.id)  # an unknown session is 404 before anything is read
    params = ctx.params()
    format = params.value("format", "json")
    params.done()
    # Its share of the send budget first, as a page of messages takes it (Sessions|messages).
    await ctx.request.reserve(MESSAGE_PAGE_BYTES)
    return await large_json_response(await ctx.services.exports.export(ctx.id, format), EXPORT_DEPTH)


IMPORT_BODY = body({"projectid": ID, "session": DOCUMENT})


async def import_session(ctx: Context) -> dict[str, Any]:
    """A new session of the project from a document of Sessions|export (of this Totem or
    another), checked whole before anything is written; it never brings rules, settings or
    auto-accept."""
    assert ctx.action.body is not None
    # Checked on a worker thread: a document of many megabytes would hold the loop.
    checked = await asyncio.to_thread(Input, await ctx.request.json(), ctx.action.body)
    projectid = checked.text("projectid")
    document = checked.value("session")
    if document is not None:
        checked.errors.extend(await _decode_files(document))
    checked.done()
    return await ctx.services.exports.import_session(projectid, document)


async def _decode_files(document: dict[str, Any]) -> list[tuple[str, str]]:
    """Each file's base64 `data` replaced by its bytes (checked by the schema already); the
    problems found."""
    problems = []
    for index, message in enumerate(document["messages"]):
        for number, item in enumerate(message.get("attachments") or ()):
            encoded = item.get("data")
            if not isinstance(encoded, str):
                continue
            if len(encoded) > THREAD_DECODE_CHARS:
                item["data"] = await asyncio.to_thread(decode_base64, encoded)
            else:
                item["data"] = decode_base64(encoded)
            if item["data"] is None:
                problems.append((f"session.messages[{index}].attachments[{number}].data", "must be base64"))
    return problems


ACTIONS = (
    Action("sessions_export", "Sessions|export", export_session, takes_id=True, query=EXPORT_QUERY,
           answer=EXPORTED),
    Action("sessions_import", "Sessions|import", import_session, changes=True, body=IMPORT_BODY, answer=SESSION),
)
