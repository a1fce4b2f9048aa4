"""Sessions|list, create, read, update, remove, messages, prompt, abort, todos, jobs and jobstop,
and Questions|reply: the conversations of a project.

Each handler checks the fields of its input and calls `ctx.services.sessions`, where the use
case lives (`totem/services/sessions.py`): the write, the events and the cascade of a removal;
a session's jobs and worktree have services of their own (`ctx.services.jobs`, `worktrees`).
"""

from __future__ import annotations

import asyncio
import binascii
import re
import time
from typing import cast

from totem.http.api import Action, success
from totem.http.httpd import large_json_response
from totem.services.sessions import (
    DEFAULT_SESSION_NAME,
    DEFAULT_SESSION_PAGE,
    MESSAGE_PAGE_BYTES,
    MODES,
    REASONING_LEVELS,
)

MAX_NAME_CHARS = 200
MAX_SESSION_PAGE = 500
DEFAULT_MESSAGE_PAGE = 100
MAX_MESSAGE_PAGE = 500
# A page of messages is encoded on a worker thread, each part on its own, so that the loop is
# not held for the whole page: {messages: [{parts: [part]}]} is four levels down to a part,
# which is encoded whole (splitting its fields too made ten times the pieces, and no gain).
MESSAGE_PAGE_DEPTH = 4


async def require_session(ctx) -> dict:
    """The session of the URL id. Raises NotFound."""
    return await ctx.services.sessions.get(ctx.id)


async def list_sessions(ctx):
    params = ctx.params(("projectid", "limit", "before"))
    projectid = params.text("projectid", required=True, max_chars=64)
    limit = params.integer("limit", 1, MAX_SESSION_PAGE, default=DEFAULT_SESSION_PAGE)
    before = params.text("before", max_chars=64)
    params.done()
    return await ctx.services.sessions.list(projectid, limit, before)


async def create_session(ctx):
    body = await ctx.body(("projectid", "name", "worktree"))
    projectid = body.text("projectid", required=True, max_chars=64)
    name = body.text("name", max_chars=MAX_NAME_CHARS, default=DEFAULT_SESSION_NAME)
    worktree = body.boolean("worktree", default=False)
    body.done()
    return await ctx.services.sessions.create(projectid, name, bool(worktree))


async def read_session(ctx):
    ctx.params(()).done()
    return await ctx.services.sessions.read(ctx.id)


async def update_session(ctx):
    await require_session(ctx)
    body = await ctx.body(("name",))
    name = body.text("name", required=True, max_chars=MAX_NAME_CHARS)
    body.done()
    return await ctx.services.sessions.rename(ctx.id, name)


async def remove_session(ctx):
    return success(await ctx.services.sessions.remove(ctx.id))


async def list_messages(ctx):
    await require_session(ctx)
    params = ctx.params(("before", "limit"))
    before = params.text("before", max_chars=64)
    limit = params.integer("limit", 1, MAX_MESSAGE_PAGE, default=DEFAULT_MESSAGE_PAGE)
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
MIME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,127}$")
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


def _attachment_items(raw) -> tuple[list[tuple[str, str, str, str]], list[tuple[str, str]]]:
    """The (name, media type, base64 text, place) of each attachment and the problems found,
    each named by its place in the list."""
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], [("attachments", "must be a list of {name, mime, data}")]
    if len(raw) > MAX_ATTACHMENTS:
        return [], [("attachments", f"at most {MAX_ATTACHMENTS} files")]
    items, problems = [], []
    for index, item in enumerate(raw):
        where = f"attachments[{index}]"
        if not isinstance(item, dict) or set(item) - {"name", "mime", "data"}:
            problems.append((where, "must be an object with name, mime and data"))
            continue
        name, mime, data = item.get("name"), item.get("mime"), item.get("data")
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_ATTACHMENT_NAME_CHARS or "\x00" in name:
            problems.append((f"{where}.name", f"must be a file name of 1 to {MAX_ATTACHMENT_NAME_CHARS} characters"))
            continue
        if not isinstance(mime, str) or not MIME_PATTERN.match(mime.lower()):
            problems.append((f"{where}.mime", "must be a media type such as image/png or text/plain"))
            continue
        if not isinstance(data, str):
            problems.append((f"{where}.data", "must be base64"))
            continue
        items.append((name.strip(), mime.lower(), data, where))
    return items, problems


async def _attachments(raw) -> tuple[list[tuple[str, str, bytes]], list[tuple[str, str]]]:
    """Decoded attachments and the problems found; large ones are decoded off the loop. `raw`
    is emptied and each base64 text let go once decoded: a 20 MB prompt would otherwise hold
    its text and its bytes until the store has written them."""
    items, problems = _attachment_items(raw)
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


async def prompt_session(ctx):
    await require_session(ctx)  # an unknown session is 404 before its body is read
    body = await ctx.body(("text", "model", "autoaccept", "mode", "reasoning", "attachments", "steer", "command",
                           "arguments", "agent"))
    text = body.text("text", max_chars=MAX_PROMPT_CHARS, strip=False, allow_empty=True, default="")
    command = body.text("command", max_chars=MAX_FILE_NAME_CHARS)
    arguments = body.text("arguments", max_chars=MAX_ARGUMENTS_CHARS, strip=False, allow_empty=True)
    agent = body.text("agent", max_chars=MAX_FILE_NAME_CHARS)
    model = body.text("model", max_chars=300)
    autoaccept = body.boolean("autoaccept")
    mode = body.choice("mode", MODES)
    reasoning = body.choice("reasoning", REASONING_LEVELS)
    steer = bool(body.boolean("steer", default=False))
    files, problems = await _attachments(body.data.pop("attachments", None))
    body.errors.extend(problems)
    body.done()
    return await ctx.services.sessions.send(ctx.id, text, model=model, mode=mode, autoaccept=autoaccept,
                                            reasoning=reasoning, attachments=files, steer=steer, command=command,
                                            arguments=arguments, agent=agent)


async def unqueue_prompt(ctx):
    await require_session(ctx)
    body = await ctx.body(("messageid",))
    messageid = body.text("messageid", required=True, max_chars=64)
    body.done()
    return success(await ctx.services.sessions.unqueue(ctx.id, messageid))


async def compact_session(ctx):
    await require_session(ctx)
    ctx.params(()).done()
    return success(await ctx.services.sessions.compact(ctx.id))


async def abort_session(ctx):
    return success(await ctx.services.sessions.abort(ctx.id))


async def reply_question(ctx):
    body = await ctx.body(("answer",))
    answer = body.text("answer", required=True, max_chars=10_000)
    body.done()
    return success(ctx.services.sessions.reply_question(ctx.id, answer))


async def list_todos(ctx):
    await require_session(ctx)
    ctx.params(()).done()
    return await ctx.services.sessions.todos(ctx.id)


async def list_jobs(ctx):
    await require_session(ctx)
    ctx.params(()).done()
    return await ctx.services.jobs.list(ctx.id)


async def stop_job(ctx):
    await require_session(ctx)
    body = await ctx.body(("job",))
    jobid = body.text("job", required=True, max_chars=64)
    body.done()
    return await ctx.services.jobs.stop(ctx.id, jobid)


async def undo_session(ctx):
    await require_session(ctx)
    body = await ctx.body(("messageid", "force"))
    messageid = body.text("messageid", required=True, max_chars=64)
    force = body.boolean("force")
    body.done()
    return await ctx.services.changes.undo(ctx.id, messageid, bool(force))


async def redo_session(ctx):
    await require_session(ctx)
    body = await ctx.body(("force",))
    force = body.boolean("force")
    body.done()
    return await ctx.services.changes.redo(ctx.id, bool(force))


async def diff_session(ctx):
    await require_session(ctx)
    ctx.params(()).done()
    return await large_json_response(await ctx.services.changes.diff(ctx.id), MESSAGE_PAGE_DEPTH)


async def fork_session(ctx):
    await require_session(ctx)
    body = await ctx.body(("messageid",))
    messageid = body.text("messageid", max_chars=64)
    body.done()
    return await ctx.services.sessions.fork(ctx.id, messageid)


MAX_SAVE_PATH_CHARS = 4096
MAX_SAVE_CHARS = 5 * 1024 * 1024  # the write limit; the service counts its bytes


async def save_as(ctx):
    await require_session(ctx)
    body = await ctx.body(("messageid", "path", "text", "replace"))
    messageid = body.text("messageid", required=True, max_chars=64)
    path = body.text("path", required=True, max_chars=MAX_SAVE_PATH_CHARS)
    text = body.text("text", required=True, max_chars=MAX_SAVE_CHARS, strip=False, allow_empty=True)
    replace = body.boolean("replace")
    body.done()
    return await ctx.services.changes.save_as(ctx.id, messageid, path, text, bool(replace))


async def session_git(ctx):
    await require_session(ctx)
    ctx.params(()).done()
    return await ctx.services.worktrees.git(ctx.id)


async def merge_worktree(ctx):
    await require_session(ctx)
    ctx.params(()).done()
    return await ctx.services.worktrees.merge(ctx.id)


async def discard_worktree(ctx):
    await require_session(ctx)
    ctx.params(()).done()
    return await ctx.services.worktrees.discard(ctx.id)


ACTIONS = (
    Action("sessions", "Sessions|list", list_sessions, mcp=True),
    Action("sessions_create", "Sessions|create", create_session, changes=True, mcp=True),
    Action("sessions_read", "Sessions|read", read_session, takes_id=True, mcp=True),
    Action("sessions_update", "Sessions|update", update_session, changes=True, takes_id=True),
    Action("sessions_remove", "Sessions|remove", remove_session, changes=True, takes_id=True),
    Action("sessions_messages", "Sessions|messages", list_messages, takes_id=True, mcp=True),
    Action("sessions_prompt", "Sessions|prompt", prompt_session, changes=True, takes_id=True, mcp=True),
    Action("sessions_abort", "Sessions|abort", abort_session, changes=True, takes_id=True, mcp=True),
    Action("sessions_unqueue", "Sessions|unqueue", unqueue_prompt, changes=True, takes_id=True),
    Action("sessions_compact", "Sessions|compact", compact_session, changes=True, takes_id=True),
    Action("questions_reply", "Questions|reply", reply_question, changes=True, takes_id=True),
    Action("sessions_todos", "Sessions|todos", list_todos, takes_id=True),
    Action("sessions_jobs", "Sessions|jobs", list_jobs, takes_id=True),
    Action("sessions_jobstop", "Sessions|jobstop", stop_job, changes=True, takes_id=True),
    Action("sessions_undo", "Sessions|undo", undo_session, changes=True, takes_id=True),
    Action("sessions_git", "Sessions|git", session_git, takes_id=True),
    Action("sessions_worktreemerge", "Sessions|worktreemerge", merge_worktree, changes=True, takes_id=True),
    Action("sessions_worktreediscard", "Sessions|worktreediscard", discard_worktree, changes=True, takes_id=True),
    Action("sessions_redo", "Sessions|redo", redo_session, changes=True, takes_id=True),
    Action("sessions_diff", "Sessions|diff", diff_session, takes_id=True, mcp=True),
    Action("sessions_fork", "Sessions|fork", fork_session, changes=True, takes_id=True),
    Action("sessions_saveas", "Sessions|saveas", save_as, changes=True, takes_id=True),
)
