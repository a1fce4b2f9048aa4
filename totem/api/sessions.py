"""Sessions|list, create, read, update, remove, messages, prompt, abort, todos, jobs and jobstop,
and Questions|reply: the conversations of a project.

Each handler checks the fields of its input and calls `ctx.services.sessions`, where the use
case lives (`totem/sessions.py`): the write, the events and the cascade of a removal.
"""

from __future__ import annotations

import base64
import binascii
import re

from ..sessions import DEFAULT_SESSION_NAME, MODES, REASONING_LEVELS
from . import Action, success

MAX_NAME_CHARS = 200
DEFAULT_MESSAGE_PAGE = 100
MAX_MESSAGE_PAGE = 500


async def require_session(ctx) -> dict:
    """The session of the URL id. Raises NotFound."""
    return await ctx.services.sessions.get(ctx.id)


async def list_sessions(ctx):
    params = ctx.params(("projectid",))
    projectid = params.text("projectid", required=True, max_chars=64)
    params.done()
    return await ctx.services.sessions.list(projectid)


async def create_session(ctx):
    body = await ctx.body(("projectid", "name"))
    projectid = body.text("projectid", required=True, max_chars=64)
    name = body.text("name", max_chars=MAX_NAME_CHARS, default=DEFAULT_SESSION_NAME)
    body.done()
    return await ctx.services.sessions.create(projectid, name)


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
    return await ctx.services.sessions.messages(ctx.id, before, limit)


MAX_PROMPT_CHARS = 1_000_000
MAX_ATTACHMENTS = 20
MAX_ATTACHMENT_NAME_CHARS = 255
MIME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,127}$")


def _attachments(raw) -> tuple[list[tuple[str, str, bytes]], list[tuple[str, str]]]:
    """Decoded attachments and the problems found, each named by its place in the list."""
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], [("attachments", "must be a list of {name, mime, data}")]
    if len(raw) > MAX_ATTACHMENTS:
        return [], [("attachments", f"at most {MAX_ATTACHMENTS} files")]
    files, problems = [], []
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
        try:
            content = base64.b64decode(data, validate=True) if isinstance(data, str) else None
        except (binascii.Error, ValueError):
            content = None
        if content is None:
            problems.append((f"{where}.data", "must be base64"))
            continue
        files.append((name.strip(), mime.lower(), content))
    return files, problems


async def prompt_session(ctx):
    await require_session(ctx)  # an unknown session is 404 before its body is read
    body = await ctx.body(("text", "model", "autoaccept", "mode", "reasoning", "attachments"))
    text = body.text("text", max_chars=MAX_PROMPT_CHARS, strip=False, allow_empty=True, default="")
    model = body.text("model", max_chars=300)
    autoaccept = body.boolean("autoaccept")
    mode = body.choice("mode", MODES)
    reasoning = body.choice("reasoning", REASONING_LEVELS)
    files, problems = _attachments(body.data.get("attachments"))
    body.errors.extend(problems)
    body.done()
    messageid = await ctx.services.sessions.prompt(ctx.id, text, model=model, mode=mode, autoaccept=autoaccept,
                                                   reasoning=reasoning, attachments=files)
    return {"messageid": messageid}


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
    return await ctx.services.sessions.jobs_of(ctx.id)


async def stop_job(ctx):
    await require_session(ctx)
    body = await ctx.body(("job",))
    jobid = body.text("job", required=True, max_chars=64)
    body.done()
    return await ctx.services.sessions.stop_job(ctx.id, jobid)


ACTIONS = (
    Action("sessions", "Sessions|list", list_sessions, mcp=True),
    Action("sessions_create", "Sessions|create", create_session, changes=True, mcp=True),
    Action("sessions_read", "Sessions|read", read_session, takes_id=True, mcp=True),
    Action("sessions_update", "Sessions|update", update_session, changes=True, takes_id=True),
    Action("sessions_remove", "Sessions|remove", remove_session, changes=True, takes_id=True),
    Action("sessions_messages", "Sessions|messages", list_messages, takes_id=True, mcp=True),
    Action("sessions_prompt", "Sessions|prompt", prompt_session, changes=True, takes_id=True, mcp=True),
    Action("sessions_abort", "Sessions|abort", abort_session, changes=True, takes_id=True, mcp=True),
    Action("questions_reply", "Questions|reply", reply_question, changes=True, takes_id=True),
    Action("sessions_todos", "Sessions|todos", list_todos, takes_id=True),
    Action("sessions_jobs", "Sessions|jobs", list_jobs, takes_id=True),
    Action("sessions_jobstop", "Sessions|jobstop", stop_job, changes=True, takes_id=True),
)
