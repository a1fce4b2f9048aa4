"""The read tool: a text file of the project, as numbered lines.

Lines are shown `cat -n` style (the number right-aligned, a tab, the text), long lines are cut,
and a view that is not the whole file ends with a line saying which lines were shown, how many
there are, and the offset to read on. `.env` files are read like any other: the permission layer
asks before this tool runs.

A regular file with more than one hard link is read only after the person says yes, even under
an allow rule (`ctx.permit` with `always_ask`): its other name may be outside the project or a
secret file, and no path check can see that. The links are counted on the open file itself, so
a link made or a file swapped after the question is not read without one.

Must not: decide what is inside the project (boundary does) or whether reading is allowed
(permissions does); write anything; open a file that is not a regular file (a FIFO would block).
"""

from __future__ import annotations

import asyncio
import difflib
import os
import re
import stat

from totem.security.permissions import PATH, ToolKind
from totem.tools.base import Tool, ToolContext, ToolError, ToolResult, cut_line, display_path, resolve_path

DEFAULT_LIMIT_LINES = 2000
MAX_LIMIT_LINES = 5000
MAX_FILE_BYTES = 10 * 1024 * 1024
# A view stops at this many characters even before `limit` lines (about 25k tokens), so that a
# file of very long lines cannot flood the context; it says where to go on.
MAX_OUTPUT_CHARS = 100_000
# A NUL byte this close to the start means binary, as in git and ripgrep.
BINARY_SNIFF_BYTES = 8192
# Text in a legacy encoding has a few bytes that are not UTF-8; binary data has many.
BINARY_INVALID_RATIO = 0.3
MAX_SIMILAR_NAMES = 3
SIMILAR_NAME_CUTOFF = 0.6
NUMBER_WIDTH = 6
_INVALID_BYTE = re.compile("[\udc80-\udcff]")


class ReadTool(Tool):
    name = "read"
    kind = ToolKind(PATH, changes=False)
    description = "Read a text file; lines come numbered. Use offset/limit for long files."
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "File path"},
            "offset": {"type": "integer", "minimum": 1, "description": "First line (1-based)"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT_LINES,
                      "description": f"Lines to read (default {DEFAULT_LIMIT_LINES})"},
        },
        "required": ["path"],
        "additionalProperties": False,
    }

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        absolute = resolve_path(ctx, args["path"])
        shown = display_path(ctx, absolute)
        # One hand-over to a worker thread for a file of one name (the common case): the
        # worker reads it unless it has other names, which the person must allow first.
        lines = await asyncio.to_thread(_load_single, absolute, shown)
        if lines is None:
            approved = await _approve_links(absolute, shown, ctx)
            lines = await asyncio.to_thread(_load, absolute, shown, approved)
        offset = int(args.get("offset") or 1)
        limit = int(args.get("limit") or DEFAULT_LIMIT_LINES)
        return _view(lines, shown, offset, limit)


async def _approve_links(absolute: str, shown: str, ctx: ToolContext) -> tuple[int, int] | None:
    """(device, inode) of a regular file with more than one hard link once the person allowed
    reading it; None for any other path. Raises ToolError when denied, rejected, or outside the
    agent loop (no one to ask)."""
    try:
        info = await asyncio.to_thread(os.stat, absolute)  # follows a link: the target's links count
    except OSError:
        return None  # _load says what is wrong
    if not stat.S_ISREG(info.st_mode) or info.st_nlink < 2:
        return None
    reason = (f"the file has {info.st_nlink} hard links; its other name may be outside the "
              "project or a secret file")
    if ctx.permit is None:
        raise ToolError(f"{shown} is not read: {reason}, and only the person can allow it "
                        "(inside the agent loop)")
    await ctx.permit("read", shown, {"path": shown}, always_ask=reason)
    return info.st_dev, info.st_ino


def _load_single(absolute: str, shown: str) -> list[str] | None:
    """`_load` of a path that is not a regular file with more than one hard link (the links
    are `_approve_links`'s to ask about); None for one that is."""
    try:
        info = os.stat(absolute)  # follows a link: the target's links count
    except OSError:
        info = None  # _load says what is wrong
    if info is not None and stat.S_ISREG(info.st_mode) and info.st_nlink >= 2:
        return None
    return _load(absolute, shown)


def _load(absolute: str, shown: str, approved: tuple[int, int] | None = None) -> list[str]:
    """The decoded lines of a regular text file; ToolError for anything else, and for a file
    with more than one hard link that is not the `approved` (device, inode)."""
    try:
        info = os.stat(absolute)
    except FileNotFoundError:
        raise ToolError(_not_found(absolute, shown)) from None
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{shown} is a folder; use glob with path {shown!r} and pattern '*' "
                        "(or '**/*' for everything below it) to list its files")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{shown} is not a regular file (a device, socket or pipe); not read")
    if info.st_size > MAX_FILE_BYTES:
        raise ToolError(f"{shown} is {info.st_size} bytes, over the read limit of "
                        f"{MAX_FILE_BYTES} bytes; use grep to find the lines you need")
    try:
        with open(absolute, "rb") as handle:
            opened = os.fstat(handle.fileno())
            if opened.st_nlink > 1 and (opened.st_dev, opened.st_ino) != approved:
                raise ToolError(f"{shown} changed since it was checked and has {opened.st_nlink} "
                                "hard links now; not read (read it again to ask the person)")
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:  # it grew since the stat
        raise ToolError(f"{shown} is over the read limit of {MAX_FILE_BYTES} bytes")
    text = _decode(data)
    if text is None:
        raise ToolError(f"binary file {shown} ({len(data)} bytes); not shown")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline at the end of the last line does not start another
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _decode(data: bytes) -> str | None:
    """The text of the file, invalid bytes shown as U+FFFD; None for a binary file."""
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    escaped = data.decode("utf-8", "surrogateescape")  # one lone surrogate per invalid byte
    if len(_INVALID_BYTE.findall(escaped)) > BINARY_INVALID_RATIO * len(data):
        return None
    return data.decode("utf-8", "replace")


def _view(lines: list[str], shown: str, offset: int, limit: int) -> ToolResult:
    total = len(lines)
    if total == 0:
        if offset > 1:
            raise ToolError(f"offset {offset} is past the end of {shown} (the file is empty)")
        return ToolResult("(empty file)", title=f"{shown} (empty)",
                          data={"path": shown, "lines": 0, "start": 0, "end": 0, "truncated": False})
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of {shown} ({total} lines)")
    out: list[str] = []
    size = 0
    end = offset - 1
    for number in range(offset, min(offset + limit, total + 1)):
        line = f"{number:>{NUMBER_WIDTH}}\t{cut_line(lines[number - 1])}"
        if out and size + len(line) + 1 > MAX_OUTPUT_CHARS:
            break
        out.append(line)
        size += len(line) + 1
        end = number
    whole = offset == 1 and end == total
    if end < total:
        out.append(f"(lines {offset}-{end} of {total}; use offset={end + 1} to read more)")
    elif not whole:
        out.append(f"(lines {offset}-{end} of {total}; end of file)")
    title = f"{shown} ({total} line{'' if total == 1 else 's'})" if whole else \
        f"{shown} (lines {offset}-{end} of {total})"
    data = {"path": shown, "lines": total, "start": offset, "end": end, "truncated": end < total}
    return ToolResult("\n".join(out), title=title, data=data)


def _not_found(absolute: str, shown: str) -> str:
    """"file not found", naming up to MAX_SIMILAR_NAMES similar names in the same folder."""
    folder, name = os.path.split(absolute)
    try:
        names = os.listdir(folder)
    except OSError:
        parent = os.path.dirname(shown) or "."
        return f"file not found: {shown} (the folder {parent} does not exist)"
    lowered = {candidate.lower(): candidate for candidate in names}
    similar = difflib.get_close_matches(name.lower(), list(lowered), MAX_SIMILAR_NAMES,
                                        SIMILAR_NAME_CUTOFF)
    message = f"file not found: {shown}"
    if similar:
        parent = os.path.dirname(shown)
        paths = [f"{parent}/{lowered[s]}" if parent else lowered[s] for s in similar]
        message += "; similar files: " + ", ".join(paths)
    return message
