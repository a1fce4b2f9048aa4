"""Sessions|list, create, read, update, remove and messages: the conversations of a project."""

from __future__ import annotations

import base64
import binascii
import re

from ..agent.loop import REASONING_LEVELS, Prompt, RunRefused
from ..errors import BadRequest, Forbidden, NotFound
from ..jobs import JobError
from ..events import SessionUpdated
from ..store import session_view
from . import Action, success
from .projects import require_project

MAX_NAME_CHARS = 200
DEFAULT_SESSION_NAME = "New session"
DEFAULT_MESSAGE_PAGE = 100
MAX_MESSAGE_PAGE = 500


async def require_session(ctx) -> dict:
    """The session of the URL id. Raises NotFound."""
    session = await ctx.app.store.get_session(ctx.id)
    if session is None:
        raise NotFound(("id", f"no session {ctx.id}"))
    return session


async def list_sessions(ctx):
    params = ctx.params(("projectid",))
    projectid = params.text("projectid", required=True, max_chars=64)
    params.done()
    await require_project(ctx, projectid)
    return [_with_waiting(ctx, session_view(row)) for row in await ctx.app.store.list_sessions(projectid)]


def _with_waiting(ctx, session: dict) -> dict:
    """A session with the number of questions that wait for the person in it."""
    return session | {"waiting": ctx.app.runs.questions.waiting_in(session["id"])}


async def create_session(ctx):
    body = await ctx.body(("projectid", "name"))
    projectid = body.text("projectid", required=True, max_chars=64)
    name = body.text("name", max_chars=MAX_NAME_CHARS, default=DEFAULT_SESSION_NAME)
    body.done()
    row = await ctx.app.store.create_session(projectid, name)
    if row is None:
        raise NotFound(("projectid", f"no project {projectid}"))
    session = session_view(row)
    ctx.app.hub.publish(SessionUpdated(session["id"], session))
    return _with_waiting(ctx, session)


async def read_session(ctx):
    ctx.params(()).done()
    return _with_waiting(ctx, session_view(await require_session(ctx)))


async def update_session(ctx):
    await require_session(ctx)
    body = await ctx.body(("name",))
    name = body.text("name", required=True, max_chars=MAX_NAME_CHARS)
    body.done()
    row = await ctx.app.store.rename_session(ctx.id, name)
    if row is None:
        raise NotFound(("id", f"no session {ctx.id}"))
    session = session_view(row)
    ctx.app.hub.publish(SessionUpdated(session["id"], session))
    return _with_waiting(ctx, session)


async def remove_session(ctx):
    session = await require_session(ctx)
    await ctx.app.runs.abort(session["id"])
    await ctx.app.jobs.forget_session(session["id"])
    await ctx.app.store.remove_session(session["id"])
    ctx.app.hub.forget_session(session["id"])
    ctx.app.hub.publish(SessionUpdated(session["id"], {"id": session["id"], "projectid": session["projectid"],
                                                       "removed": True}))
    return success(session["id"])


async def list_messages(ctx):
    await require_session(ctx)
    params = ctx.params(("before", "limit"))
    before = params.text("before", max_chars=64)
    limit = params.integer("limit", 1, MAX_MESSAGE_PAGE, default=DEFAULT_MESSAGE_PAGE)
    params.done()
    messages, more = await ctx.app.store.list_messages(ctx.id, before, limit)
    return {"messages": messages, "more": more}


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
    session = await require_session(ctx)
    body = await ctx.body(("text", "model", "autoaccept", "mode", "reasoning", "attachments"))
    text = body.text("text", max_chars=MAX_PROMPT_CHARS, strip=False, allow_empty=True, default="")
    model = body.text("model", max_chars=300, default=session["model"])
    autoaccept = body.boolean("autoaccept", default=bool(session["autoaccept"]))
    mode = body.choice("mode", ("build", "plan"), default=session["mode"])
    reasoning = body.choice("reasoning", REASONING_LEVELS)
    files, problems = _attachments(body.data.get("attachments"))
    body.errors.extend(problems)
    body.done()
    if not (text or "").strip() and not files:
        raise BadRequest(("text", "is required (or attach a file)"))
    if not model:
        raise BadRequest(("model", "choose a model; Providers|catalog lists the ones you can use"))
    await ctx.app.providers.target(model)  # an unknown provider or model reference is refused now
    project = await ctx.app.store.get_project(session["projectid"])
    prompt = Prompt(text=text, model=model, mode=mode, autoaccept=autoaccept, reasoning=reasoning, attachments=files)
    try:
        messageid = await ctx.app.runs.start_prompt(session, project, prompt)
    except RunRefused as exc:
        raise BadRequest(("session", str(exc))) from None
    return {"messageid": messageid}


async def abort_session(ctx):
    session = await require_session(ctx)
    if not await ctx.app.runs.abort(session["id"]):
        raise BadRequest(("session", "nothing is running in this session"))
    return success(session["id"])


async def reply_question(ctx):
    body = await ctx.body(("answer",))
    answer = body.text("answer", required=True, max_chars=10_000)
    body.done()
    ctx.app.runs.reply_question(ctx.id, answer)
    return success(ctx.id)


async def list_todos(ctx):
    await require_session(ctx)
    ctx.params(()).done()
    return {"items": await ctx.app.store.get_todos(ctx.id)}


async def list_jobs(ctx):
    await require_session(ctx)
    ctx.params(()).done()
    return ctx.app.jobs.list(ctx.id)


async def stop_job(ctx):
    session = await require_session(ctx)
    body = await ctx.body(("job",))
    jobid = body.text("job", required=True, max_chars=64)
    body.done()
    if session["mode"] == "plan":
        raise Forbidden(("mode", "the session is in Plan mode, where nothing is run or stopped"))
    try:
        return await ctx.app.jobs.stop(session["id"], jobid)
    except JobError as exc:
        raise NotFound(("job", str(exc))) from None


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
