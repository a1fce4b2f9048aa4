"""Sessions|terminal, terminalinput, terminalresize, terminalstop: the person's shell of a
session. Each handler checks its fields and calls `ctx.services.terminal`; the shell itself is
`totem/process/terminal.py`. Input is base64, because a text field would be trimmed and could not carry
every byte a terminal sends.
"""

from __future__ import annotations

from typing import Any

from totem.http.api import Action, Context, success
from totem.http.api.contract import BASE64, BOOLEAN, ID_ANSWER, INTEGER, STRING, body, integer, maybe, record
from totem.http.api.sessions import decode_base64, require_session
from totem.process.terminal import MAX_COLUMNS, MAX_INPUT_BYTES, MAX_ROWS, MIN_COLUMNS, MIN_ROWS

DEFAULT_COLUMNS, DEFAULT_ROWS = 80, 24
MAX_INPUT_CHARS = (MAX_INPUT_BYTES + 2) // 3 * 4
COLUMNS = integer(MIN_COLUMNS, MAX_COLUMNS)
ROWS = integer(MIN_ROWS, MAX_ROWS)
STATE = record({"status": {"type": "string", "enum": ["none", "running", "exited"]}, "output": STRING},
               {"exit": maybe(INTEGER)}, "the shell's state and its scrollback; exit: its status once it exited")
OPEN_BODY = body(optional={"start": BOOLEAN | {"description": "start the shell when none runs"},
                           "columns": COLUMNS | {"description": f"{DEFAULT_COLUMNS} when absent"},
                           "rows": ROWS | {"description": f"{DEFAULT_ROWS} when absent"}})


async def open_terminal(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    body = await ctx.body()
    start = body.value("start", False)
    columns, rows = body.value("columns", DEFAULT_COLUMNS), body.value("rows", DEFAULT_ROWS)
    body.done()
    return await ctx.services.terminal.open(ctx.id, bool(start), columns, rows)


INPUT_BODY = body({"data": BASE64 | {"minLength": 1, "maxLength": MAX_INPUT_CHARS}})  # what the person typed


async def type_into_terminal(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    body = await ctx.body()
    text = body.text("data", strip=False)
    data = decode_base64(text) if text is not None else None
    if text is not None and data is None:
        body.errors.append(("data", "must be base64"))
    body.done()
    assert data is not None
    return success(await ctx.services.terminal.write(ctx.id, bytes(data)))


RESIZE_BODY = body({"columns": COLUMNS, "rows": ROWS})


async def resize_terminal(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    body = await ctx.body()
    columns = body.value("columns")
    rows = body.value("rows")
    body.done()
    return success(await ctx.services.terminal.resize(ctx.id, columns, rows))


async def stop_terminal(ctx: Context) -> dict[str, Any]:
    await require_session(ctx)
    ctx.params().done()
    return await ctx.services.terminal.stop(ctx.id)


ACTIONS = (
    Action("sessions_terminal", "Sessions|terminal", open_terminal, changes=True, takes_id=True, body=OPEN_BODY,
           answer=STATE),
    Action("sessions_terminalinput", "Sessions|terminalinput", type_into_terminal, changes=True, takes_id=True,
           body=INPUT_BODY, answer=ID_ANSWER),
    Action("sessions_terminalresize", "Sessions|terminalresize", resize_terminal, changes=True, takes_id=True,
           body=RESIZE_BODY, answer=ID_ANSWER),
    Action("sessions_terminalstop", "Sessions|terminalstop", stop_terminal, changes=True, takes_id=True,
           answer=STATE),
)
