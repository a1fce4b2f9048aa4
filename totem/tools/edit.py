"""The edit tool: replace an exact text in a file.

`old` must occur exactly once (or `replace_all` is set). The file keeps its newline style (the
newlines of `old` and `new` are turned into the file's own, so that text copied from the read
tool, which hides CRLF, still matches), its UTF-8 byte order mark and its permission bits.
When `old` is not found, the answer shows the most similar places with their line numbers;
when it is found several times, it says where.

Must not: decide what is inside the project (boundary does) or whether editing is allowed
(permissions does); rewrite a binary or non-UTF-8 file; trust `subjects()`: `run` resolves and
checks the target again.
"""

from __future__ import annotations

import asyncio

from totem.security.permissions import PATH, ToolKind
from totem.tools import files
from totem.tools.base import Tool, ToolContext, ToolError, ToolResult, cut_line, display_path

# When `old` is not found, this many similar places are shown, each cut to this many lines.
MAX_CANDIDATES = 3
MAX_CANDIDATE_LINES = 12
# Below this similarity a place is not worth showing.
MIN_CANDIDATE_RATIO = 0.3
MAX_LINE_NUMBERS_SHOWN = 20
NUMBER_WIDTH = 6


class EditTool(Tool):
    name = "edit"
    description = "Replace an exact text in a file; old must match once unless replace_all."
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "File path"},
            "old": {"type": "string", "description": "Exact text to replace"},
            "new": {"type": "string", "description": "Replacement text"},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence"},
        },
        "required": ["path", "old", "new"],
        "additionalProperties": False,
    }
    kind = ToolKind(PATH, changes=True, edits=True)

    def subjects(self, args: dict, ctx: ToolContext) -> list[str]:
        """The file edited, relative to the project. Raises ToolError when it is refused."""
        return [files.target_subject(ctx, args["path"])]

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        return await asyncio.to_thread(_edit, ctx, args["path"], args["old"], args["new"],
                                       bool(args.get("replace_all")))


    def preview(self, args: dict, ctx: ToolContext) -> list[files.Planned]:
        absolute, shown, existing, data, _lines = _plan(ctx, args["path"], args["old"], args["new"],
                                                        bool(args.get("replace_all")))
        return [files.Planned(shown, existing.data, data)]


def _edit(ctx: ToolContext, path: str, old: str, new: str, replace_all: bool) -> ToolResult:
    absolute, shown, _existing, data, lines = _plan(ctx, path, old, new, replace_all)
    temp = files.new_temp_name()
    files.journal(ctx, [files.change_entry(shown, data, temp)])
    files.write_atomic(ctx.root, absolute, data, shown, temp=temp)
    count = len(lines)
    where = f"line {lines[0]}" if count == 1 else f"lines {_numbers(lines)}"
    summary = f"edited {shown}: replaced {count} occurrence{'' if count == 1 else 's'} at {where}"
    return ToolResult(summary, title=f"{shown} (edited)",
                      data={"path": shown, "replacements": count, "lines": lines})


def _plan(ctx: ToolContext, path: str, old: str, new: str,
          replace_all: bool) -> tuple[str, str, files.Existing, bytes, list[int]]:
    """What the edit would write: (target, shown name, the file now, its new bytes, the line of
    each replacement). Changes nothing. Raises ToolError."""
    if old == "":
        raise ToolError("old is empty; give the exact text to replace (use write to create "
                        "a file or replace all of it)")
    if old == new:
        raise ToolError("old and new are the same text; nothing to change")
    absolute = files.resolve_target(ctx, path)
    shown = display_path(ctx, absolute)
    existing = files.read_existing(ctx.root, absolute, shown)
    if existing is None:
        raise ToolError(f"file not found: {shown} (use write to create a file)")
    content = files.decode_text(existing.data, shown)
    text = content.text
    given_old, given_new = old, new
    for newline in (content.newline, "\n" if content.newline == "\r\n" else "\r\n"):
        # The file's own style first; the other one for a file with mixed newlines.
        old, new = _in_style(given_old, newline), _in_style(given_new, newline)
        starts = _occurrences(text, old)
        if starts or "\n" not in given_old:
            break
    if not starts:
        old = _in_style(given_old, content.newline)
        raise ToolError(_not_found(text, old, shown))
    lines = [text.count("\n", 0, start) + 1 for start in starts]
    if len(starts) > 1 and not replace_all:
        raise ToolError(f"old occurs {len(starts)} times in {shown} (lines {_numbers(lines)}); "
                        "add surrounding lines to old so that it matches once, or set "
                        "replace_all to replace every occurrence")
    changed = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    if changed == text:
        raise ToolError("the replacement leaves the file as it is; nothing to change")
    data = content.encode(changed)
    files.check_size(len(data), shown)
    return absolute, shown, existing, data, lines


def _in_style(text: str, newline: str) -> str:
    """`text` with every newline (LF or CRLF) written as `newline`."""
    plain = text.replace("\r\n", "\n")
    return plain if newline == "\n" else plain.replace("\n", newline)


def _occurrences(text: str, old: str) -> list[int]:
    """Where `old` starts in `text`, without overlaps (as str.replace counts them)."""
    starts = []
    at = text.find(old)
    while at != -1:
        starts.append(at)
        at = text.find(old, at + len(old))
    return starts


def _numbers(lines: list[int]) -> str:
    shown = ", ".join(str(number) for number in lines[:MAX_LINE_NUMBERS_SHOWN])
    return shown + (f", … ({len(lines)} in all)" if len(lines) > MAX_LINE_NUMBERS_SHOWN else "")


def _not_found(text: str, old: str, shown: str) -> str:
    """"old was not found", with the most similar places of the file and their line numbers."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    wanted = [line.removesuffix("\r") for line in old.split("\n")]
    if len(wanted) > 1 and wanted[-1] == "":
        wanted.pop()
    message = f"old was not found in {shown}"
    if _squeeze(old) and _squeeze(old) in _squeeze(text):
        message += " (it would match if spaces, tabs and newlines were ignored: check indentation)"
    places = [place for place in files.similar_places(lines, wanted, MAX_CANDIDATES)
              if place[1] >= MIN_CANDIDATE_RATIO]
    if not places:
        return message + "; nothing in the file is similar. Read the file to see its content."
    parts = [message + "; the most similar places:"]
    for start, ratio in places:
        end = min(start + len(wanted), len(lines))
        span = f"line {start + 1}" if end - start == 1 else f"lines {start + 1}-{end}"
        parts.append(f"{span} ({round(ratio * 100)}% similar):")
        for number in range(start, min(end, start + MAX_CANDIDATE_LINES)):
            parts.append(f"{number + 1:>{NUMBER_WIDTH}}\t{cut_line(lines[number])}")
        if end - start > MAX_CANDIDATE_LINES:
            parts.append(f"{'':>{NUMBER_WIDTH}}\t… ({end - start - MAX_CANDIDATE_LINES} more lines)")
    return "\n".join(parts)


def _squeeze(text: str) -> str:
    return "".join(text.split())
