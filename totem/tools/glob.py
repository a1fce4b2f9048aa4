"""The glob tool: files of the project whose path matches a pattern, newest first.

Also owns `compile_glob()`, the one translation of glob syntax to a regular expression, which the
grep tool uses for its `include` file-name filter. The syntax is that of ripgrep's globs (the
`globset` crate), so that grep gives the same answer with and without ripgrep: `**` as a whole
segment spans folders, `*` and `?` stay within a segment (and match a leading dot), `[...]` and
`[!...]` are character classes, `{a,b}` are alternatives (not nested), `\\` escapes.

The walk never enters `.git`, never follows a symbolic link to a folder (no loops, never out of
the project), lists a linked file only when its target is inside the project, and hides the
protected secret files (`boundary.is_protected_env`, on the whole project-relative path: also
every file below a `.env` or `.env.d` folder). Files with more than one hard link are listed:
names are not contents, and the read tool asks before it opens one.

Must not: read file contents, or decide by itself what is inside the project (boundary does).
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
import warnings

from totem.security import boundary
from totem.security.permissions import PATH, ToolKind
from totem.tools.base import (
    SKIPPED_FOLDERS,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    display_path,
    in_skipped_folder,
    resolve_path,
)

MAX_RESULTS = 200
MAX_PATTERN_CHARS = 1000
# A walk stops after this many entries or seconds and says so, instead of holding a thread.
MAX_SCANNED_ENTRIES = 200_000
WALK_TIMEOUT_SECONDS = 20.0
GLOB_SPECIALS = frozenset("*?[{\\")
MAX_GLOB_ALTERNATIVES = 64


def compile_glob(pattern: str, name_only: bool = False) -> re.Pattern:
    """The regular expression that matches exactly the paths the glob matches (use fullmatch).

    With `name_only` the glob is for file names: `/` and `**` are refused. Raises ToolError
    for a NUL byte, an unclosed `[` or `{`, a stray `}`, nested `{}` or a trailing backslash.
    """
    if "\x00" in pattern:
        raise ToolError("the glob contains a NUL byte")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(f"the glob is longer than {MAX_PATTERN_CHARS} characters")
    if name_only and ("/" in pattern or "**" in pattern):
        raise ToolError(f"{pattern!r} must match file names only: no '/' or '**' "
                        "(give the folder as path)")
    sources = [_path_source(alternative) for alternative in _expand_braces(pattern)]
    source = sources[0] if len(sources) == 1 else "(?:" + "|".join(sources) + ")"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "possible set difference" and friends: refuse, not guess
        try:
            return re.compile(f"(?s:{source})")
        except (re.error, FutureWarning) as exc:
            raise ToolError(f"invalid glob {pattern!r}: {exc}") from None


class GlobTool(Tool):
    name = "glob"
    kind = ToolKind(PATH, changes=False, searches=True)
    description = "Find files by glob pattern (** spans folders). Newest first."
    schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": 'e.g. "src/**/*.py"'},
            "path": {"type": "string", "description": "Folder to search (default: project root)"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        pattern = _check_pattern(args["pattern"])
        start = resolve_path(ctx, args.get("path") or ".")
        where = display_path(ctx, start)
        matcher = compile_glob(pattern)
        if in_skipped_folder(where):
            return ToolResult(f"{where} is not listed: the search tools skip "
                              f"{', '.join(sorted(SKIPPED_FOLDERS))}.", title=f"{pattern} in {where}",
                              data={"count": 0, "shown": 0, "truncated": False})
        if not os.path.isdir(start):
            if os.path.exists(start):
                raise ToolError(f"{where} is a file, not a folder; use read to see it")
            raise ToolError(f"folder not found: {where}")
        stop = threading.Event()
        try:
            found, stopped = await asyncio.to_thread(
                _find, ctx.root, start, boundary.relative_path(ctx.root, start), pattern, matcher, stop)
        finally:
            stop.set()  # a cancelled run leaves the thread: make it end soon
        return _answer(found, stopped, pattern, where)


def _check_pattern(pattern: str) -> str:
    if "\x00" in pattern:
        raise ToolError("the pattern contains a NUL byte")
    if pattern.startswith(("/", "\\")) or re.match(r"[A-Za-z]:[/\\]", pattern):
        raise ToolError(f"the pattern {pattern!r} is absolute: patterns are relative to path "
                        "(give the folder as path)")
    if any(part == ".." for part in re.split(r"[/{},]", pattern)):
        raise ToolError(f"the pattern {pattern!r} contains '..': give the folder as path instead")
    # "./src//*.py" is "src/*.py": paths are matched and shown in their plain form
    pattern = "/".join(part for part in pattern.split("/") if part not in ("", "."))
    if not pattern:
        raise ToolError("the pattern names no files: give one like '*' or '**/*.py'")
    return pattern


def _answer(found: list[tuple[float, str]], stopped: str, pattern: str, where: str) -> ToolResult:
    found.sort(key=lambda item: (-item[0], item[1]))
    shown = [path for _, path in found[:MAX_RESULTS]]
    lines = list(shown)
    if not found:
        lines.append(f"No files match {pattern!r} in {where}.")
        if "/" not in pattern:
            lines.append(f"The pattern is relative to the folder: use '**/{pattern}' to search "
                         "subfolders too.")
    if len(found) > MAX_RESULTS:
        lines.append(f"({len(found) - MAX_RESULTS} more not shown)")
    if stopped:
        lines.append(f"(stopped early: {stopped}; narrow the path or the pattern)")
    title = f"{pattern} in {where} ({len(found)} file{'' if len(found) == 1 else 's'})"
    data = {"count": len(found), "shown": len(shown),
            "truncated": len(found) > MAX_RESULTS or bool(stopped)}
    return ToolResult("\n".join(lines), title=title, data=data)


def _find(root: str, start: str, start_relative: str, pattern: str, matcher: re.Pattern,
          stop: threading.Event) -> tuple[list[tuple[float, str]], str]:
    """(mtime, project-relative path) of every matching file, and why the walk stopped early.

    `start` is a link-free folder inside the project and `start_relative` its project-relative
    path ("" for the root).
    """
    parts = pattern.split("/")
    literal = 0
    while literal < len(parts) - 1 and not GLOB_SPECIALS.intersection(parts[literal]):
        literal += 1
    prefix = "/".join(parts[:literal])
    top = os.path.join(start, *parts[:literal])
    # The literal head of the pattern is walked into directly: it must be a real folder, not a
    # link (links to folders are never followed) and not a skipped one.
    if (any(part in SKIPPED_FOLDERS for part in parts[:literal]) or not os.path.isdir(top)
            or os.path.realpath(top) != os.path.normpath(top)):
        return [], ""
    # Without ** or braces, every match is exactly this many folders below `start`.
    depth = None if "**" in pattern or "{" in pattern else len(parts) - 1
    deadline = time.monotonic() + WALK_TIMEOUT_SECONDS
    found: list[tuple[float, str]] = []
    scanned = 0
    pending = [(top, prefix)]
    while pending:
        folder, relative = pending.pop()
        try:
            with os.scandir(folder) as scan:
                entries = list(scan)
        except OSError:
            continue
        for entry in entries:
            scanned += 1
            if scanned > MAX_SCANNED_ENTRIES:
                return found, f"more than {MAX_SCANNED_ENTRIES} entries"
            if stop.is_set() or time.monotonic() > deadline:
                return found, f"the walk took longer than {WALK_TIMEOUT_SECONDS:g} s"
            if entry.name in SKIPPED_FOLDERS:
                continue
            path = f"{relative}/{entry.name}" if relative else entry.name
            level = path.count("/")
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth is None or level < depth:
                        pending.append((entry.path, path))
                    continue
            except OSError:
                continue
            if (depth is not None and level != depth) or not matcher.fullmatch(path):
                continue
            mtime = _file_mtime(root, entry)
            shown = f"{start_relative}/{path}" if start_relative else path
            if mtime is not None and not boundary.is_protected_env(shown):
                found.append((mtime, shown))
    return found, ""


def _file_mtime(root: str, entry: os.DirEntry) -> float | None:
    """The modification time of a regular file, or of a linked file inside the project."""
    try:
        if entry.is_symlink():
            target = os.path.realpath(entry.path)
            if not boundary.is_inside(root, target) or not os.path.isfile(target):
                return None
            return os.stat(target).st_mtime
        if entry.is_file(follow_symlinks=False):
            return entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        pass
    return None  # a socket, a FIFO, a device, or a file that vanished


# Translation. Python's re backtracks: a naive `*a*a*a*b` is exponential on a long name, and the
# GIL is held meanwhile, which would stall the event loop. So, as fnmatch does (bpo-40480), every
# `*` but the last of a segment becomes an atomic lazy group that commits to the earliest
# occurrence of the fixed-length text after it, and every `**` but the last commits to the
# earliest folder where the fixed number of segments after it match. Taking the earliest is
# never worse when what follows can skip any amount, so the answer is the same, in linear time
# per star. Braces are expanded first (their alternatives can differ in length).

def _expand_braces(pattern: str) -> list[str]:
    """The brace-free patterns that `{a,b}` alternatives stand for."""
    results = [""]
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "{":
            alternatives, i = _read_alternatives(pattern, i + 1)
            results = [result + alternative for result in results for alternative in alternatives]
            if len(results) > MAX_GLOB_ALTERNATIVES:
                raise ToolError(f"the glob {pattern!r} expands to more than "
                                f"{MAX_GLOB_ALTERNATIVES} alternatives")
            continue
        if char == "}":  # ripgrep's globset matches every file for a stray "}": refuse it
            raise ToolError(f"unmatched }} in the glob {pattern!r} (escape it as \\}})")
        chunk, i = _read_atom(pattern, i)
        results = [result + chunk for result in results]
    return results


def _read_alternatives(pattern: str, i: int) -> tuple[list[str], int]:
    alternatives, current = [], ""
    while True:
        if i >= len(pattern):
            raise ToolError(f"unclosed {{ in the glob {pattern!r}")
        char = pattern[i]
        if char == "{":
            raise ToolError(f"nested {{}} are not supported in the glob {pattern!r}")
        if char in ",}":
            alternatives.append(current)
            current = ""
            i += 1
            if char == "}":
                return alternatives, i
            continue
        chunk, i = _read_atom(pattern, i)
        current += chunk


def _read_atom(pattern: str, i: int) -> tuple[str, int]:
    """One escape (`\\x`), one whole class (`[...]`) or one character, as written."""
    if pattern[i] == "\\":
        if i + 1 == len(pattern):
            raise ToolError(f"the glob {pattern!r} ends with a backslash")
        return pattern[i:i + 2], i + 2
    if pattern[i] == "[":
        end = _class_end(pattern, i)
        return pattern[i:end], end
    return pattern[i], i + 1


def _class_end(pattern: str, i: int) -> int:
    """The index after the `]` closing the class that opens at pattern[i]."""
    j = i + 1
    if j < len(pattern) and pattern[j] in "!^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":  # a leading "]" is literal
        j += 1
    end = pattern.find("]", j)
    if end < 0:
        raise ToolError(f"unclosed [ in the glob {pattern!r}")
    return end + 1


def _path_source(pattern: str) -> str:
    """Regex source for one brace-free glob."""
    blocks: list[list[str]] = [[]]  # runs of segments between ** segments
    for segment in _split_segments(pattern):
        if segment == "**":
            if blocks[-1] or len(blocks) == 1:
                blocks.append([])
        else:
            blocks[-1].append(_segment_source(segment))
    if len(blocks) == 1:
        return "/".join(blocks[0])
    head, middle, last = blocks[0], blocks[1:-1], blocks[-1]
    source = "".join(segment + "/" for segment in head)
    for block in middle:
        source += "(?>(?:[^/]*/)*?" + "".join(segment + "/" for segment in block) + ")"
    return source + ("(?:[^/]*/)*" + "/".join(last) if last else ".*")


def _split_segments(pattern: str) -> list[str]:
    segments, current, i = [], "", 0
    while i < len(pattern):
        if pattern[i] == "/":
            segments.append(current)
            current, i = "", i + 1
            continue
        chunk, i = _read_atom(pattern, i)
        current += chunk
    return segments + [current]


def _segment_source(segment: str) -> str:
    """Regex source for one segment: never matches `/`, linear in the length of a name."""
    pieces: list[str] = [""]  # the fixed-length texts between stars
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            if pieces[-1] or len(pieces) == 1:
                pieces.append("")
            i += 1
        elif char == "?":
            pieces[-1] += "[^/]"
            i += 1
        elif char == "[":
            end = _class_end(segment, i)
            pieces[-1] += _class_source(segment[i + 1:end - 1])
            i = end
        else:
            chunk, i = _read_atom(segment, i)
            pieces[-1] += re.escape(chunk[-1])
    if len(pieces) == 1:
        return pieces[0]
    middle = "".join(f"(?>[^/]*?{piece})" for piece in pieces[1:-1] if piece)
    return pieces[0] + middle + "[^/]*" + pieces[-1]


def _class_source(body: str) -> str:
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    escaped = "".join("\\" + char if char in "\\^[]&~|" else char for char in body)
    return f"[^/{escaped}]" if negate else f"(?!/)[{escaped}]"
