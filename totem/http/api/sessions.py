"""Sessions|list, create, read, update, remove, messages, prompt, abort, todos, jobs and jobstop,
and Questions|reply: the conversations of a project.

Each handler checks the fields of its input and calls `ctx.services.sessions`, where the use
case lives (`totem/services/sessions.py`): the write, the events and the cascade of a removal;
a session's jobs and worktree have services of their own (`ctx.services.jobs`, `worktrees`).
"""

from __future__ import annotations

import asyncio
import binascii
import time
from typing import Any, cast

from totem.config import MAX_COST_USD
from totem.http.api import Action, Context, success
from totem.http.api.contract import (
    ANY,
    BOOLEAN,
    ID,
    ID_ANSWER,
    INTEGER,
    NUMBER,
    STRING,
    TIME_MS,
    body,
    choice,
    integer,
    listing,
    maybe,
    patterned,
    query,
    record,
    text,
)
from totem.http.api.permissions import MAX_TOOL_CHARS
from totem.http.api.projects import GIT_FILE, GIT_STATE
from totem.http.httpd import Response, large_json_response
from totem.rows import SessionRow
from totem.security.permissions import MAX_PATTERN_CHARS
from totem.services.sessions import (
    DEFAULT_SESSION_NAME,
    DEFAULT_SESSION_PAGE,
    MESSAGE_PAGE_BYTES,
    MODES,
    REASONING_LEVELS,
)
from totem.workspace.worktrees import MAX_AUTHOR_CHARS

MAX_NAME_CHARS = 200
MAX_MODEL_CHARS = 300  # a model reference, "<providerid>/<model>"
MAX_ANSWER_CHARS = 10_000
MIN_PAGE = 1
MAX_SESSION_PAGE = 500
DEFAULT_MESSAGE_PAGE = 100
MAX_MESSAGE_PAGE = 500
# A page of messages is encoded on a worker thread, each part on its own, so that the loop is
# not held for the whole page: {messages: [{parts: [part]}]} is four levels down to a part,
# which is encoded whole (splitting its fields too made ten times the pieces, and no gain).
MESSAGE_PAGE_DEPTH = 4

SESSION = record({
    "id": STRING, "projectid": STRING, "name": STRING, "status": STRING, "mode": choice(MODES),
    "autoaccept": BOOLEAN, "model": maybe(STRING), "worktree": maybe(STRING), "created": TIME_MS,
    "updated": TIME_MS, "error": maybe(STRING), "redo": BOOLEAN, "schedule": maybe(STRING),
    "parent": maybe(STRING), "forkof": maybe(STRING), "waiting": INTEGER,
}, description="a session; status running, idle, aborted or error; parent: the session that handed it a task (a "
               "sub-agent's); forkof: the session it was forked from; waiting: the questions that wait for the person")
PART = record({"id": STRING, "messageid": STRING, "sessionid": STRING, "kind": STRING, "status": STRING,
               "text": STRING, "data": {"type": "object"}, "created": TIME_MS, "updated": TIME_MS,
               "closed": maybe(TIME_MS)})
MESSAGE = record({"id": STRING, "sessionid": STRING, "role": STRING, "model": maybe(STRING),
                  "usage": maybe({"type": "object"}), "data": {"type": "object"}, "created": TIME_MS,
                  "finished": maybe(TIME_MS), "reverted": BOOLEAN, "parts": listing(PART)})


async def require_session(ctx: Context) -> SessionRow:
    """The session of the URL id. Raises NotFound."""
    return await ctx.services.sessions.get(ctx.id)


LIST_QUERY = query({"projectid": ID}, {
    "limit": integer(MIN_PAGE, MAX_SESSION_PAGE, f"sessions in the page ({DEFAULT_SESSION_PAGE} when absent)"),
    "before": ID | {"description": "the id of the last session of the page before"}})
SESSIONS = record({"sessions": listing(SESSION), "more": BOOLEAN},
                  description="a page of the project's sessions, the most recently changed first")


async def list_sessions(ctx: Context) -> dict[str, Any]:
    params = ctx.params()
    projectid = params.text("projectid")
    limit = params.value("limit", DEFAULT_SESSION_PAGE)
    before = params.text("before")
    params.done()
    return await ctx.services.sessions.list(projectid, limit, before)


CREATE_BODY = body({"projectid": ID}, {
    "name": text(MAX_NAME_CHARS, description=f'"{DEFAULT_SESSION_NAME}" when absent'),
    "worktree": BOOLEAN | {"description": "work in a git worktree of its own"}})


async def create_session(ctx: Context) -> dict[str, Any]:
    body = await ctx.body()
    projectid = body.text("projectid")
    name = body.text("name", DEFAULT_SESSION_NAME)
    worktree = body.value("worktree", False)
    body.done()
    return await ctx.services.sessions.create(projectid, name, bool(worktree))


READ_ANSWER = record(SESSION["properties"] | {
    "tokens": record({"input": INTEGER, "output": INTEGER, "estimated": BOOLEAN},
                     {"cost": NUMBER, "cached": INTEGER | {"description": "of input, what the prompt cache served"}})},
    description=SESSION["description"] + "; tokens: summed over its answers")


async def read_session(ctx: Context) -> dict[str, Any]:
    ctx.params().done()
    return await ctx.services.sessions.read(ctx.id)


UPDATE_BODY = body({"name": text(MAX_NAME_CHARS)})


async def update_session(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    body = await ctx.body()
    name = body.text("name")
    body.done()
    return await ctx.services.sessions.rename(ctx.id, name)


async def remove_session(ctx: Context) -> dict[str, Any]:
    return success(await ctx.services.sessions.remove(ctx.id))


MESSAGES_QUERY = query(optional={
    "before": ID | {"description": "a message id: the messages older than it"},
    "limit": integer(MIN_PAGE, MAX_MESSAGE_PAGE, f"messages in the page ({DEFAULT_MESSAGE_PAGE} when absent)")})
MESSAGES = record({"messages": listing(MESSAGE), "more": BOOLEAN},
                  description="a page of messages with their parts, oldest first")


async def list_messages(ctx: Context) -> Response:
    await require_session(ctx)
    params = ctx.params()
    before = params.text("before")
    limit = params.value("limit", DEFAULT_MESSAGE_PAGE)
    params.done()
    # The page's share of the send budget is taken before it is read: many clients asking at
    # once wait for it (or get 503) instead of each holding a page being built.
    await ctx.request.reserve(MESSAGE_PAGE_BYTES)
    return await large_json_response(await ctx.services.sessions.messages(ctx.id, before, limit),
                                     MESSAGE_PAGE_DEPTH)


MAX_PROMPT_CHARS = 1_000_000
MAX_FILE_NAME_CHARS = 64  # of a project command or agent (project_commands.NAME_PATTERN)
MAX_ARGUMENTS_CHARS = 100_000
MAX_ATTACHMENTS = 20
MAX_ATTACHMENT_NAME_CHARS = 255
MAX_MIME_CHARS = 64 + 1 + 128
# A media type (RFC 6838's restricted names), in any case: it is stored in lower case.
MIME_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9!#$&^_.+-]{0,63}/[a-zA-Z0-9][a-zA-Z0-9!#$&^_.+-]{0,127}$"
# Base64 above this size is decoded on a worker thread, in steps of BASE64_STEP_CHARS: one
# b64decode of 20 MB held the interpreter, and so the loop, for 48 ms (issue 11).
THREAD_DECODE_CHARS = 1024 * 1024
BASE64_STEP_CHARS = 256 * 1024  # a multiple of 4; one strict step of 1 MB takes 4 ms
MAX_PADDING_CHARS = 2


def decode_base64(text: str, step: int = BASE64_STEP_CHARS) -> bytes | bytearray | None:
    """Strict base64 (RFC 4648 alphabet, padding only at the end) as bytes, None when it is not.

    Decodes `step` characters at a time and lets other threads run between steps, so that on a
    worker thread it never keeps the event loop waiting for the interpreter for more than a
    step; the result and the refusals are those of `base64.b64decode(text, validate=True)`."""
    if not text.isascii():
        return None
    # Each step but the last is whole groups of four without padding, decoded as the whole text
    # would decode them; the last takes the trailing padding, whatever the whole would make of it.
    body_end = len(text)
    while body_end and text[body_end - 1] == "=":
        body_end -= 1
        if len(text) - body_end > MAX_PADDING_CHARS:  # never valid; the whole decode says why
            return _strict_base64(text)
    # Grown in place, so that the pages of a large file are touched a step at a time (a join
    # would fault in 11 MB at once): the content is a bytearray, which the store takes as a blob.
    content = bytearray()
    for start in range(0, max(body_end, 1), step):
        last = start + step >= body_end
        chunk = text[start:len(text) if last else start + step]
        if not last and "=" in chunk:
            return None
        decoded = _strict_base64(chunk)
        if decoded is None:
            return None
        content += decoded
        if not last:
            time.sleep(0)  # hand the interpreter to the event loop if it waits for it
    return content


def _strict_base64(text: str) -> bytes | None:
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except binascii.Error:
        return None


ATTACHMENT = body({
    "name": text(MAX_ATTACHMENT_NAME_CHARS, description="the file's name"),
    "mime": patterned(MIME_PATTERN, "a media type such as image/png or text/plain", MAX_MIME_CHARS),
    # No pattern: a 20 MB text would be scanned on the event loop; it is decoded off it.
    "data": {"type": "string", "description": "the content in base64 (RFC 4648)"}})
ATTACHMENTS = {"type": "array", "maxItems": MAX_ATTACHMENTS, "items": ATTACHMENT,
               "description": "files of the prompt"}


def _attachment_items(raw: list[dict[str, str]] | None) -> list[tuple[str, str, str, str]]:
    """The (name, media type, base64 text, place) of each attachment, checked by its schema."""
    return [(item["name"].strip(), item["mime"].lower(), item["data"], f"attachments[{index}]")
            for index, item in enumerate(raw or ())]


async def _attachments(raw: list[dict[str, str]] | None) -> tuple[list[tuple[str, str, bytes]], list[tuple[str, str]]]:
    """Decoded attachments and the problems found; large ones are decoded off the loop. `raw`
    is emptied and each base64 text let go once decoded: a 20 MB prompt would otherwise hold
    its text and its bytes until the store has written them."""
    items, problems = _attachment_items(raw), []
    if isinstance(raw, list):
        raw.clear()
    files = []
    items.reverse()
    while items:
        name, mime, data, where = items.pop()
        if len(data) > THREAD_DECODE_CHARS:
            content = await asyncio.to_thread(decode_base64, data)
        else:
            content = decode_base64(data)
        del data
        if content is None:
            problems.append((f"{where}.data", "must be base64"))
            continue
        # A bytearray when it came in steps (see decode_base64); its one reader, the store,
        # binds it as the blob that bytes would be.
        files.append((name, mime, cast(bytes, content)))
    return files, problems


MAX_RUN_RULES = 32  # allow rules one prompt may bring for its run
MAXCOST = {"type": "number", "minimum": 0, "maximum": MAX_COST_USD}
MODEL = text(MAX_MODEL_CHARS, description="a model reference, <providerid>/<model> (Providers|catalog)")
PROMPT_BODY = body(optional={
    "text": text(MAX_PROMPT_CHARS, empty=True, description="the prompt (or a command, or files)"),
    "model": MODEL, "autoaccept": BOOLEAN, "mode": choice(MODES), "reasoning": choice(REASONING_LEVELS),
    "attachments": ATTACHMENTS, "steer": BOOLEAN | {"description": "during a run: read at its next step"},
    "command": text(MAX_FILE_NAME_CHARS, description="a project command, in place of text"),
    "arguments": text(MAX_ARGUMENTS_CHARS, empty=True, description="the text the command takes"),
    "agent": text(MAX_FILE_NAME_CHARS, description="a project agent for this prompt"),
    "maxcost": MAXCOST | {"description": "US dollars this prompt's run may spend before it stops (over the "
                                         "maxcost setting)"},
    "allow": {"type": "array", "maxItems": MAX_RUN_RULES, "description": "allow rules of this prompt's run alone "
              "(its sub-agents too), never stored: the layer run of the decision",
              "items": body({"tool": text(MAX_TOOL_CHARS, description="a name of Permissions|tools, or *"),
                             "pattern": text(MAX_PATTERN_CHARS, description="what the rule allows")})}})
PROMPTED = record({"messageid": STRING}, {"queued": BOOLEAN, "steered": BOOLEAN},
                  "the prompt's message; queued: it waits for the current run, steered: the run reads it")


async def prompt_session(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)  # an unknown session is 404 before its body is read
    body = await ctx.body()
    text = body.text("text", "", strip=False)
    command = body.text("command")
    arguments = body.text("arguments", strip=False)
    agent = body.text("agent")
    model = body.text("model")
    autoaccept = body.value("autoaccept")
    mode = body.value("mode")
    reasoning = body.value("reasoning")
    steer = bool(body.value("steer", False))
    maxcost = body.value("maxcost")
    allow = tuple((rule["tool"], rule["pattern"]) for rule in body.value("allow") or ())
    files, problems = await _attachments(body.take("attachments"))
    body.errors.extend(problems)
    body.done()
    return await ctx.services.sessions.send(ctx.id, text, model=model, mode=mode, autoaccept=autoaccept,
                                            reasoning=reasoning, attachments=files, steer=steer, command=command,
                                            arguments=arguments, agent=agent, maxcost=maxcost, allow=allow)


UNQUEUE_BODY = body({"messageid": ID})


async def unqueue_prompt(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    body = await ctx.body()
    messageid = body.text("messageid")
    body.done()
    return success(await ctx.services.sessions.unqueue(ctx.id, messageid))


async def compact_session(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    ctx.params().done()
    return success(await ctx.services.sessions.compact(ctx.id))


async def abort_session(ctx: Context) -> dict[str, Any]:
    return success(await ctx.services.sessions.abort(ctx.id))


ANSWER_BODY = body({"answer": text(MAX_ANSWER_CHARS)})


async def reply_question(ctx: Context) -> dict[str, Any]:
    body = await ctx.body()
    answer = body.text("answer")
    body.done()
    return success(ctx.services.sessions.reply_question(ctx.id, answer))


TODOS = record({"items": listing(record({"text": STRING, "status": STRING}))}, description="the task list")
JOB = record({"id": STRING, "command": STRING, "status": STRING, "output": STRING},
             {"exit_code": maybe(INTEGER), "started": maybe(NUMBER), "finished": maybe(NUMBER)})


async def list_todos(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    ctx.params().done()
    return await ctx.services.sessions.todos(ctx.id)


async def list_jobs(ctx: Context) -> list[dict[str, Any]]:
    await require_session(ctx)
    ctx.params().done()
    return await ctx.services.jobs.list(ctx.id)


STOP_JOB_BODY = body({"job": ID})


async def stop_job(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    body = await ctx.body()
    jobid = body.text("job")
    body.done()
    return await ctx.services.jobs.stop(ctx.id, jobid)


FORCE = BOOLEAN | {"description": "restore the files that changed since, too"}
UNDO_BODY = body({"messageid": ID}, {"force": FORCE})
RESTORED = {"restored": listing(ANY), "conflicts": listing(ANY), "lost": listing(ANY)}
UNDONE = record({"messageid": STRING, "reverted": listing(STRING)} | RESTORED)
REDONE = record({"messages": listing(STRING)} | RESTORED)


async def undo_session(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    body = await ctx.body()
    messageid = body.text("messageid")
    force = body.value("force")
    body.done()
    return await ctx.services.changes.undo(ctx.id, messageid, bool(force))


REDO_BODY = body(optional={"force": FORCE})


async def redo_session(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    body = await ctx.body()
    force = body.value("force")
    body.done()
    return await ctx.services.changes.redo(ctx.id, bool(force))


DIFF = listing(record({"path": STRING, "status": STRING, "additions": INTEGER, "deletions": INTEGER,
                       "patch": STRING, "changes": listing({"type": "object"})}),
              "each file the session changed, from before its first change to now; changes: the audit of each")


async def diff_session(ctx: Context) -> Response:
    await require_session(ctx)
    ctx.params().done()
    return await large_json_response(await ctx.services.changes.diff(ctx.id), MESSAGE_PAGE_DEPTH)


FORK_BODY = body(optional={"messageid": ID | {"description": "the last message copied (all when absent)"}})


async def fork_session(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    body = await ctx.body()
    messageid = body.text("messageid")
    body.done()
    return await ctx.services.sessions.fork(ctx.id, messageid)


MAX_SAVE_PATH_CHARS = 4096
MAX_SAVE_CHARS = 5 * 1024 * 1024  # the write limit; the service counts its bytes


SAVE_AS_BODY = body({"messageid": ID, "path": text(MAX_SAVE_PATH_CHARS, description="a file of the project"),
                     "text": text(MAX_SAVE_CHARS, empty=True)},
                    {"replace": BOOLEAN | {"description": "replace the file when it exists"}})
SAVED = record({"path": STRING, "created": BOOLEAN, "bytes": INTEGER})


async def save_as(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    body = await ctx.body()
    messageid = body.text("messageid")
    path = body.text("path")
    text = body.text("text", strip=False)
    replace = body.value("replace")
    body.done()
    return await ctx.services.changes.save_as(ctx.id, messageid, path, text, bool(replace))


WORKTREE_STATE = record({"worktree": {"const": True}, "path": STRING, "branch": STRING, "into": maybe(STRING),
                         "base": maybe(STRING), "ahead": INTEGER, "behind": INTEGER, "changes": listing(GIT_FILE),
                         "author": record({"name": maybe(STRING), "email": maybe(STRING)}, description=(
                             "the repository's user.name and user.email, the author of the merge's commit "
                             "(null: not set; Sessions|worktreemerge can set them)"))},
                        description="the session's worktree against the project's branch")
MERGE_BODY = body(optional={
    "username": text(MAX_AUTHOR_CHARS, description="set as the repository's user.name before the merge"),
    "useremail": text(MAX_AUTHOR_CHARS, description="set as the repository's user.email before the merge")})
SESSION_GIT = {"anyOf": [WORKTREE_STATE, GIT_STATE]}
MERGED = record({"merged": BOOLEAN, "commit": maybe(STRING), "into": maybe(STRING), "files": listing(ANY)})


async def session_git(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    ctx.params().done()
    return await ctx.services.worktrees.git(ctx.id)


async def merge_worktree(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    ctx.params().done()
    body = await ctx.body_if_any()
    username = body.text("username", strip=False)
    useremail = body.text("useremail", strip=False)
    body.done()
    return await ctx.services.worktrees.merge(ctx.id, username, useremail)


async def discard_worktree(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    ctx.params().done()
    return await ctx.services.worktrees.discard(ctx.id)


ACTIONS = (
    Action("sessions", "Sessions|list", list_sessions, mcp=True, query=LIST_QUERY, answer=SESSIONS),
    Action("sessions_create", "Sessions|create", create_session, changes=True, mcp=True, body=CREATE_BODY,
           answer=SESSION),
    Action("sessions_read", "Sessions|read", read_session, takes_id=True, mcp=True, answer=READ_ANSWER),
    Action("sessions_update", "Sessions|update", update_session, changes=True, takes_id=True, body=UPDATE_BODY,
           answer=SESSION),
    Action("sessions_remove", "Sessions|remove", remove_session, changes=True, takes_id=True, answer=ID_ANSWER),
    Action("sessions_messages", "Sessions|messages", list_messages, takes_id=True, mcp=True, query=MESSAGES_QUERY,
           answer=MESSAGES),
    Action("sessions_prompt", "Sessions|prompt", prompt_session, changes=True, takes_id=True, mcp=True,
           body=PROMPT_BODY, answer=PROMPTED),
    Action("sessions_abort", "Sessions|abort", abort_session, changes=True, takes_id=True, mcp=True,
           answer=ID_ANSWER),
    Action("sessions_unqueue", "Sessions|unqueue", unqueue_prompt, changes=True, takes_id=True, body=UNQUEUE_BODY,
           answer=ID_ANSWER),
    Action("sessions_compact", "Sessions|compact", compact_session, changes=True, takes_id=True, answer=ID_ANSWER),
    Action("questions_reply", "Questions|reply", reply_question, changes=True, takes_id=True, body=ANSWER_BODY,
           answer=ID_ANSWER),
    Action("sessions_todos", "Sessions|todos", list_todos, takes_id=True, answer=TODOS),
    Action("sessions_jobs", "Sessions|jobs", list_jobs, takes_id=True, answer=listing(JOB)),
    Action("sessions_jobstop", "Sessions|jobstop", stop_job, changes=True, takes_id=True, body=STOP_JOB_BODY,
           answer=JOB),
    Action("sessions_undo", "Sessions|undo", undo_session, changes=True, takes_id=True, body=UNDO_BODY,
           answer=UNDONE),
    Action("sessions_git", "Sessions|git", session_git, takes_id=True, answer=SESSION_GIT),
    Action("sessions_worktreemerge", "Sessions|worktreemerge", merge_worktree, changes=True, takes_id=True,
           body=MERGE_BODY, answer=MERGED),
    Action("sessions_worktreediscard", "Sessions|worktreediscard", discard_worktree, changes=True, takes_id=True,
           answer=SESSION),
    Action("sessions_redo", "Sessions|redo", redo_session, changes=True, takes_id=True, body=REDO_BODY,
           answer=REDONE),
    Action("sessions_diff", "Sessions|diff", diff_session, takes_id=True, mcp=True, answer=DIFF),
    Action("sessions_fork", "Sessions|fork", fork_session, changes=True, takes_id=True, body=FORK_BODY,
           answer=SESSION),
    Action("sessions_saveas", "Sessions|saveas", save_as, changes=True, takes_id=True, body=SAVE_AS_BODY,
           answer=SAVED),
)
