"""Sessions|terminal, terminalinput, terminalresize, terminalstop: the person's shell of a
session. Each handler checks its fields and calls `ctx.services.terminal`; the shell itself is
`totem/process/terminal.py`. Input is base64, because a text field would be trimmed and could not carry
every byte a terminal sends.
"""

from __future__ import annotations

from totem.http.api import Action, success
from totem.http.api.sessions import decode_base64, require_session
from totem.process.terminal import MAX_COLUMNS, MAX_INPUT_BYTES, MAX_ROWS, MIN_COLUMNS, MIN_ROWS

DEFAULT_COLUMNS, DEFAULT_ROWS = 80, 24
MAX_INPUT_CHARS = (MAX_INPUT_BYTES + 2) // 3 * 4


def _size(body) -> tuple[int, int]:
    columns = body.integer("columns", MIN_COLUMNS, MAX_COLUMNS, default=DEFAULT_COLUMNS)
    rows = body.integer("rows", MIN_ROWS, MAX_ROWS, default=DEFAULT_ROWS)
    return columns, rows


async def open_terminal(ctx):
    await require_session(ctx)
    body = await ctx.body(("start", "columns", "rows"))
    start = body.boolean("start", default=False)
    columns, rows = _size(body)
    body.done()
    return await ctx.services.terminal.open(ctx.id, bool(start), columns, rows)


async def type_into_terminal(ctx):
    await require_session(ctx)
    body = await ctx.body(("data",))
    text = body.text("data", required=True, max_chars=MAX_INPUT_CHARS, strip=False)
    data = decode_base64(text) if text is not None else None
    if text is not None and data is None:
        body.errors.append(("data", "must be base64"))
    body.done()
    assert data is not None
    return success(await ctx.services.terminal.write(ctx.id, bytes(data)))


async def resize_terminal(ctx):
    await require_session(ctx)
    body = await ctx.body(("columns", "rows"))
    columns = body.integer("columns", MIN_COLUMNS, MAX_COLUMNS, required=True)
    rows = body.integer("rows", MIN_ROWS, MAX_ROWS, required=True)
    body.done()
    return success(await ctx.services.terminal.resize(ctx.id, columns, rows))


async def stop_terminal(ctx):
    await require_session(ctx)
    ctx.params(()).done()
    return await ctx.services.terminal.stop(ctx.id)


ACTIONS = (
    Action("sessions_terminal", "Sessions|terminal", open_terminal, changes=True, takes_id=True),
    Action("sessions_terminalinput", "Sessions|terminalinput", type_into_terminal, changes=True, takes_id=True),
    Action("sessions_terminalresize", "Sessions|terminalresize", resize_terminal, changes=True, takes_id=True),
    Action("sessions_terminalstop", "Sessions|terminalstop", stop_terminal, changes=True, takes_id=True),
)
