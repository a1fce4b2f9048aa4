"""The patch tool: apply a multi-file unified diff, all of it or nothing.

Accepted: plain unified diffs (`--- a/x` / `+++ b/x`, `/dev/null` for a new or deleted file)
and git's (`diff --git`, `new file mode`, `deleted file mode`, `old mode`/`new mode`,
`rename from`/`rename to`, `index`, similarity lines, C-quoted names), hunks `@@ -l,s +l,s @@`
and `\\ No newline at end of file`. Text before the first file (a commit message) is ignored.
The `a/` and `b/` prefixes are removed when both names carry them (or one is /dev/null).

Models miscount: the counts of a hunk header decide where a hunk ends, except that a hunk cut
short by the next `@@`, `diff --git` or the end of the patch is taken as it is, and change lines
right after a hunk whose counts are used up still belong to it. An empty line in a hunk is an
empty context line. A hunk applies at its line number, or at the nearest place (searching
outward, never before the previous hunk) where its context and removed lines match exactly;
lines are compared without their CR, so a patch made from the read tool's output applies to a
CRLF file, and added lines take the file's newline.

Every target is resolved by the boundary and every hunk applied in memory before anything is
written; then the files are written (each atomically), and if one write fails, the files
already written are restored and folders created for them removed.

Must not: decide what is inside the project (boundary does) or whether the change is allowed
(permissions does); trust `subjects()`: `run` parses, resolves and checks everything again.
"""

from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass, field

from totem.security.permissions import PATH, ToolKind
from totem.tools import files
from totem.tools.base import NoSpace, Tool, ToolContext, ToolError, ToolResult, cut_line, display_path

_HUNK_HEADER = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)")
# "@@" or "@@ def f():" without line numbers (a malformed "@@ -..." is an error instead).
_BARE_HUNK_HEADER = re.compile(r"@@(?: (?!-).*)?")
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3}|.)")
_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
              "\\": "\\", '"': '"'}
DEV_NULL = "/dev/null"
# Lines of a failing hunk shown: what the patch expects and what the file has there.
MAX_SHOWN_LINES = 12
# A place this similar to a failing hunk's context is pointed out.
MIN_SIMILAR_RATIO = 0.5
NUMBER_WIDTH = 6


class PatchTool(Tool):
    name = "patch"
    description = "Apply a unified diff or a *** Begin Patch envelope (renames, adds, deletes)."
    schema = {
        "type": "object",
        "properties": {
            "patch": {"type": "string", "minLength": 1, "description": "Unified diff text"},
        },
        "required": ["patch"],
        "additionalProperties": False,
    }
    kind = ToolKind(PATH, changes=True, edits=True)

    def subjects(self, args: dict, ctx: ToolContext) -> list[str]:
        """Every file the patch touches, both sides of a rename included, relative to the project.

        Raises ToolError for a patch that cannot be parsed or any target the boundary refuses.
        """
        subjects: list[str] = []
        for section in parse_patch(args["patch"]):
            for path in section.paths():
                shown = files.target_subject(ctx, path)
                if shown not in subjects:
                    subjects.append(shown)
        return subjects

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        return await asyncio.to_thread(_apply, ctx, args["patch"])

    def preview(self, args: dict, ctx: ToolContext) -> list[files.Planned]:
        return preview_of(ctx, args["patch"])


@dataclass
class Line:
    kind: str  # " " context, "-" removed, "+" added
    text: str
    no_newline: bool = False  # followed by "\ No newline at end of file"
    blank: bool = False  # an empty patch line taken as an empty context line


@dataclass
class Hunk:
    header: str
    old_start: int | None  # None for a bare "@@" without line numbers
    old_count: int
    lines: list[Line] = field(default_factory=list)

    def old_side(self) -> list[str]:
        return [line.text for line in self.lines if line.kind != "+"]

    def new_side(self) -> list[str]:
        return [line.text for line in self.lines if line.kind != "-"]


@dataclass
class Section:
    """One file of the patch, as written; the names still carry their a/ and b/ prefixes."""

    line: int  # where it starts in the patch, 1-based
    git: bool
    old: str | None = None
    new: str | None = None
    headers: bool = False  # --- and +++ were seen
    rename_from: str | None = None
    rename_to: str | None = None
    new_file_mode: int | None = None
    deleted: bool = False
    new_mode: int | None = None
    hunks: list[Hunk] = field(default_factory=list)

    def paths(self) -> list[str]:
        return [path for path in dict.fromkeys((self.old, self.new)) if path is not None]

    @property
    def change(self) -> str:
        if self.old is None:
            return "added"
        if self.new is None:
            return "deleted"
        return "renamed" if self.old != self.new else "modified"


# -- parsing ---------------------------------------------------------------------------------

ENVELOPE_BEGIN, ENVELOPE_END = "*** Begin Patch", "*** End Patch"
_ENVELOPE_FILE = ("*** Add File: ", "*** Update File: ", "*** Delete File: ")


def parse_patch(text: str) -> list[Section]:
    """The file sections of a unified diff, or of the `*** Begin Patch` envelope some models are
    trained to write (turned into the same diff first, so the same checks apply). Raises
    ToolError saying which line is wrong."""
    if text.lstrip().startswith(ENVELOPE_BEGIN):
        text = envelope_to_diff(text)
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    sections: list[Section] = []
    current: Section | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("diff --git "):
            current = Section(index + 1, git=True)
            current.old, current.new = _git_names(line[len("diff --git "):])
            sections.append(current)
        elif _is_file_header(lines, index):
            if current is None or not current.git or current.headers or current.hunks:
                current = Section(index + 1, git=False)
                sections.append(current)
            current.old = _header_name(lines[index][4:], index)
            current.new = _header_name(lines[index + 1][4:], index + 1)
            current.headers = True
            index += 2
            continue
        elif line.startswith("@@"):
            if current is None:
                raise ToolError(f"line {index + 1} of the patch: a hunk before any file header; "
                                "start each file with '--- a/path' and '+++ b/path' lines")
            hunk, index = _parse_hunk(lines, index, _display_name(current))
            current.hunks.append(hunk)
            continue
        elif line.startswith(("GIT binary patch", "Binary files ")):
            raise ToolError(f"line {index + 1} of the patch: binary changes are not supported")
        elif current is not None and current.git and not current.hunks and not current.headers:
            _git_header(current, line, index)
        elif current is not None and line[:1] in ("+", "-"):
            raise ToolError(f"line {index + 1} of the patch is a change line outside any hunk: "
                            f"{cut_line(line)!r}; each hunk starts with '@@ -l,s +l,s @@' and its "
                            "counts must cover its lines")
        index += 1
    if not sections:
        raise ToolError("the patch has no file: each file needs '--- a/path' and '+++ b/path' "
                        "lines (or a 'diff --git' line) before its @@ hunks")
    for section in sections:
        _finish(section)
    return sections


def envelope_to_diff(text: str) -> str:
    """The unified diff that a `*** Begin Patch` ... `*** End Patch` envelope means: `*** Add
    File: p` (its lines all `+`), `*** Delete File: p`, `*** Update File: p` with an optional
    `*** Move to: q` and `@@` chunks of context, `-` and `+` lines. Raises ToolError."""
    lines = [line.removesuffix("\r") for line in text.strip().split("\n")]
    if lines[0].strip() != ENVELOPE_BEGIN or lines[-1].strip() != ENVELOPE_END:
        raise ToolError(f"a patch that starts with '{ENVELOPE_BEGIN}' must end with '{ENVELOPE_END}'")
    out: list[str] = []
    index, body = 1, lines[1:-1]
    while index - 1 < len(body):
        line = body[index - 1]
        number = index + 1
        index += 1
        if line.startswith("*** Add File: "):
            path = line[len("*** Add File: "):].strip()
            added = []
            while index - 1 < len(body) and not body[index - 1].startswith(_ENVELOPE_FILE):
                row = body[index - 1]
                if not row.startswith("+"):
                    raise ToolError(f"line {index + 1} of the patch: every line of an added file starts with '+'")
                added.append(row)
                index += 1
            out += [f"diff --git a/{path} b/{path}", "new file mode 100644", "--- /dev/null", f"+++ b/{path}"]
            if added:
                out += [f"@@ -0,0 +1,{len(added)} @@", *added]
        elif line.startswith("*** Delete File: "):
            path = line[len("*** Delete File: "):].strip()
            out += [f"diff --git a/{path} b/{path}", "deleted file mode 100644", f"--- a/{path}", "+++ /dev/null"]
        elif line.startswith("*** Update File: "):
            path = line[len("*** Update File: "):].strip()
            target = path
            if index - 1 < len(body) and body[index - 1].startswith("*** Move to: "):
                target = body[index - 1][len("*** Move to: "):].strip()
                index += 1
            if target != path:
                out += [f"diff --git a/{path} b/{target}", f"rename from {path}", f"rename to {target}"]
            out += [f"--- a/{path}", f"+++ b/{target}"]
            started = False
            while index - 1 < len(body) and not body[index - 1].startswith(_ENVELOPE_FILE):
                row = body[index - 1]
                index += 1
                if row.startswith("@@"):
                    out.append("@@" + row[2:].rstrip(" @") if row.strip() != "@@" else "@@")
                    started = True
                elif row == "*** End of File":
                    continue
                elif row[:1] in (" ", "+", "-") or row == "":
                    if not started:
                        out.append("@@")
                        started = True
                    out.append(row if row else " ")
                else:
                    raise ToolError(f"line {index} of the patch: {cut_line(row)!r} is not a change line "
                                    "(' ', '-' or '+') of an updated file")
        else:
            raise ToolError(f"line {number} of the patch: expected '*** Add File:', '*** Update File:' "
                            f"or '*** Delete File:', not {cut_line(line)!r}")
    return "\n".join(out) + "\n"


def _display_name(section: Section) -> str:
    """The name of a section still being parsed, for messages."""
    old, new = _strip_prefixes(section.old, section.new)
    return new or old or "?"


def _strip_prefixes(old: str | None, new: str | None) -> tuple[str | None, str | None]:
    """Names without git's a/ and b/, when both carry them (or one is /dev/null)."""
    if (old is None or old.startswith("a/")) and (new is None or new.startswith("b/")):
        return old and old[2:], new and new[2:]
    return old, new


def _is_file_header(lines: list[str], index: int) -> bool:
    return (lines[index].startswith("--- ") and index + 1 < len(lines)
            and lines[index + 1].startswith("+++ "))


def _parse_hunk(lines: list[str], index: int, name: str) -> tuple[Hunk, int]:
    """The hunk whose header is at `index`, and the index of the first line after it."""
    header = lines[index]
    match = _HUNK_HEADER.fullmatch(header)
    old_left: float  # lines of each side still to come: infinite for a bare "@@"
    new_left: float
    if match:
        old_start, old_count = int(match[1]), int(match[2] if match[2] is not None else 1)
        new_count = int(match[4] if match[4] is not None else 1)
        hunk = Hunk(header, old_start, old_count)
        old_left, new_left = old_count, new_count
    elif _BARE_HUNK_HEADER.fullmatch(header):
        hunk = Hunk(header, None, 0)
        old_left = new_left = math.inf
    else:
        raise ToolError(f"line {index + 1} of the patch: {header!r} is not a hunk header; it "
                        "must look like '@@ -12,5 +12,6 @@'")
    at = index + 1
    while at < len(lines):
        line = lines[at]
        if line.startswith("\\"):
            if hunk.lines:
                hunk.lines[-1].no_newline = True
            at += 1
            continue
        if line.startswith(("@@", "diff --git ")):
            break
        if _next_file_starts(lines, at) and not (old_left == 1 and new_left == 1):
            break  # counts too large: the --- / +++ / @@ of the next file end this hunk
        if old_left <= 0 and new_left <= 0:
            # The counts are used up: go on only with lines that can be nothing but more hunk.
            if _is_file_header(lines, at) or line[:1] not in ("", " ", "+", "-"):
                break
            if line == "" and not _more_hunk_follows(lines, at):
                break
        elif line != "" and line[:1] not in (" ", "+", "-"):
            raise ToolError(f"line {at + 1} of the patch, in hunk {header!r} of {name}, starts "
                            f"with neither a space, '-' nor '+': {cut_line(line)!r} (a context "
                            "line keeps its leading space)")
        kind = line[:1] or " "
        hunk.lines.append(Line(kind, line[1:], blank=line == ""))
        old_left -= kind != "+"
        new_left -= kind != "-"
        at += 1
    if old_left > 0 or new_left > 0:
        # Cut short: blank lines at its end separate it from what follows.
        while hunk.lines and hunk.lines[-1].blank:
            hunk.lines.pop()
    if not hunk.lines:
        raise ToolError(f"line {index + 1} of the patch: hunk {header!r} of {name} has no lines")
    return hunk, at


def _next_file_starts(lines: list[str], at: int) -> bool:
    return _is_file_header(lines, at) and at + 2 < len(lines) and lines[at + 2].startswith("@@")


def _more_hunk_follows(lines: list[str], at: int) -> bool:
    while at < len(lines) and lines[at] == "":
        at += 1
    return at < len(lines) and lines[at][:1] in (" ", "+", "-") and not _is_file_header(lines, at)


def _git_header(section: Section, line: str, index: int) -> None:
    """One extended header line of a `diff --git` section."""
    if line.startswith("rename from "):
        section.rename_from = _unquote(line[len("rename from "):])
    elif line.startswith("rename to "):
        section.rename_to = _unquote(line[len("rename to "):])
    elif line.startswith("new file mode "):
        section.new_file_mode = _mode(line[len("new file mode "):], index)
    elif line.startswith("deleted file mode "):
        _mode(line[len("deleted file mode "):], index)
        section.deleted = True
    elif line.startswith("new mode "):
        section.new_mode = _mode(line[len("new mode "):], index)
    elif line.startswith("old mode "):
        _mode(line[len("old mode "):], index)
    elif line.startswith(("copy from ", "copy to ")):
        raise ToolError(f"line {index + 1} of the patch: copies are not supported; add the new "
                        "file with its whole content")


def _mode(text: str, index: int) -> int:
    """The permission bits of a git mode; ToolError for a link or a submodule."""
    text = text.strip()
    if text not in ("100644", "100755"):
        raise ToolError(f"line {index + 1} of the patch: mode {text} is not supported (only "
                        "regular files, 100644 or 100755; no links or submodules)")
    return int(text, 8) & 0o777


def _header_name(text: str, index: int) -> str | None:
    """The name of a --- or +++ line: unquoted, without a timestamp; None for /dev/null."""
    name = _unquote(text) if text.startswith('"') else text.split("\t")[0].rstrip()
    if name == DEV_NULL:
        return None
    if not name:
        raise ToolError(f"line {index + 1} of the patch names no file")
    return name


def _git_names(text: str) -> tuple[str | None, str | None]:
    """The two names of a `diff --git a/x b/x` line, when they can be told apart."""
    if text.startswith('"'):
        end = _quote_end(text)
        first, rest = _unquote(text[:end + 1]), text[end + 1:].lstrip()
        return first, (_unquote(rest) if rest.startswith('"') else rest) or None
    if text.endswith('"') and ' "' in text:
        first, second = text.rsplit(' "', 1)
        return first, _unquote('"' + second)
    half = (len(text) - 1) // 2
    if len(text) % 2 == 1 and text[half] == " " and text[2:half] == text[half + 3:]:
        return text[:half], text[half + 1:]  # "a/P b/P": the same name twice
    if text.count(" b/") == 1:
        first, second = text.split(" b/")
        return first, "b/" + second
    return None, None


def _quote_end(text: str) -> int:
    at = 1
    while at < len(text):
        if text[at] == "\\":
            at += 2
            continue
        if text[at] == '"':
            return at
        at += 1
    return len(text) - 1


def _unquote(text: str) -> str:
    """A name as git writes it: C-quoted ("a/t\\303\\251t") when it has special characters."""
    text = text.strip()
    if not (len(text) >= 2 and text.startswith('"') and text.endswith('"')):
        return text
    raw = bytearray()
    at, body = 0, text[1:-1]
    for match in _OCTAL_ESCAPE.finditer(body):
        raw += body[at:match.start()].encode("utf-8")
        escape = match[1]
        raw += bytes([int(escape, 8)]) if len(escape) == 3 else \
            _C_ESCAPES.get(escape, escape).encode("utf-8")
        at = match.end()
    raw += body[at:].encode("utf-8")
    return raw.decode("utf-8", "replace")


def _finish(section: Section) -> None:
    """Settle the old and new names of a section and check that they make sense."""
    renamed = section.rename_from is not None or section.rename_to is not None
    where = f"line {section.line} of the patch"
    if renamed and (section.rename_from is None or section.rename_to is None):
        raise ToolError(f"{where}: a rename needs both 'rename from' and 'rename to'")
    if section.rename_from is not None and section.rename_to is not None and not section.headers:
        # The names of the rename lines have no a/ and b/; --- and +++ lines, when present, do.
        section.old, section.new = "a/" + section.rename_from, "b/" + section.rename_to
    if section.git and section.new_file_mode is not None:
        section.old = None
    if section.git and section.deleted:
        section.new = None
    section.old, section.new = _strip_prefixes(section.old, section.new)
    if section.old is None and section.new is None:
        raise ToolError(f"{where}: the file section names no file (or /dev/null on both sides)")
    if renamed and (section.rename_from != section.old or section.rename_to != section.new):
        raise ToolError(f"{where}: 'rename from'/'rename to' ({section.rename_from} → "
                        f"{section.rename_to}) do not match the names of the section")
    if section.change == "renamed" and not renamed:
        raise ToolError(f"{where}: the section names two files ({section.old} and "
                        f"{section.new}); to rename a file, use a 'diff --git' section with "
                        "'rename from' and 'rename to' lines")
    if section.change == "added" and section.new_mode is not None:
        section.new_file_mode = section.new_mode


# -- applying --------------------------------------------------------------------------------

@dataclass
class _Write:
    path: str  # as named in the patch, resolved again just before the write
    absolute: str
    shown: str
    data: bytes
    original: files.Existing | None
    mode: int | None = None  # exact bits; None keeps the file's own or uses new_mode
    new_mode: int = files.NEW_FILE_MODE


@dataclass
class _Delete:
    path: str
    absolute: str
    shown: str
    original: files.Existing


def _planned(ctx: ToolContext, text: str) -> tuple[list[_Write], list[_Delete], list[dict]]:
    """What the patch would write and delete, and the report of each file. Changes nothing."""
    sections = parse_patch(text)
    writes: list[_Write] = []
    deletes: list[_Delete] = []
    report: list[dict] = []
    seen: dict[str, str] = {}
    for section in sections:
        targets: dict[str, tuple[str, str]] = {}
        for path in section.paths():
            absolute = files.resolve_target(ctx, path)
            shown = display_path(ctx, absolute)
            if absolute in seen:
                raise ToolError(f"{shown} is changed by two sections of the patch; put all of its "
                                "hunks in one section. Nothing was written")
            seen[absolute] = shown
            targets[path] = (absolute, shown)
        report.append(_plan(ctx, section, targets, writes, deletes))
    return writes, deletes, report


def preview_of(ctx: ToolContext, text: str) -> list[files.Planned]:
    writes, deletes, _report = _planned(ctx, text)
    return ([files.Planned(step.shown, step.original.data if step.original else None, step.data) for step in writes]
            + [files.Planned(step.shown, step.original.data, None) for step in deletes])


def _apply(ctx: ToolContext, text: str) -> ToolResult:
    writes, deletes, report = _planned(ctx, text)
    _write_all(ctx, writes, deletes)
    added = sum(entry["added"] for entry in report)
    removed = sum(entry["removed"] for entry in report)
    rows = []
    for entry in report:
        name = f"{entry['from']} → {entry['path']}" if entry["change"] == "renamed" else entry["path"]
        rows.append(f"  {entry['change']} {name} (+{entry['added']} -{entry['removed']})")
    count = len(report)
    head = f"applied the patch to {count} file{'' if count == 1 else 's'}:"
    return ToolResult("\n".join([head, *rows]),
                      title=f"patch: {count} file{'' if count == 1 else 's'} (+{added} -{removed})",
                      data={"files": report})


def _plan(ctx: ToolContext, section: Section, targets: dict[str, tuple[str, str]],
          writes: list[_Write], deletes: list[_Delete]) -> dict:
    """Read and change one section's file in memory; queue its writes and deletes.

    `targets` holds the (absolute, shown) name of each path of the section."""
    change = section.change
    source = targets[section.old] if section.old is not None else None
    dest = targets[section.new] if section.new is not None else None
    original = files.read_existing(ctx.root, *source) if source else None
    if source and original is None:
        raise ToolError(f"cannot {'delete' if change == 'deleted' else 'change'} {source[1]}: it "
                        "does not exist. Nothing was written")
    if change in ("added", "renamed"):
        assert dest is not None  # both name a new file
        if files.read_existing(ctx.root, *dest) is not None:
            raise ToolError(f"cannot {'add' if change == 'added' else 'rename to'} {dest[1]}: it "
                            "exists already. Nothing was written")
        files.check_parent(ctx.root, *dest)
    added = sum(line.kind == "+" for hunk in section.hunks for line in hunk.lines)
    removed = sum(line.kind == "-" for hunk in section.hunks for line in hunk.lines)
    target = dest or source
    assert target is not None  # _finish refuses a section that names no file
    name = target[1]
    result = None
    if section.hunks:
        text = files.decode_text(original.data, source[1]) if source and original else \
            files.Text("", False, "\n")
        result = _apply_hunks(text.text, text.newline, section.hunks, name)
        data = text.encode(result)
        files.check_size(len(data), name)
    else:
        data = original.data if original else b""
    entry = {"path": name, "change": change, "added": added, "removed": removed}
    if change == "deleted":
        # Only the old name, whose file was read above.
        assert section.old is not None and source is not None and original is not None
        if result:
            raise ToolError(f"the patch deletes {source[1]} but its hunks leave "
                            f"{files.count_lines(result)} lines in it. Nothing was written")
        if not section.hunks:
            entry["removed"] = files.count_lines(original.data.decode("utf-8", "replace"))
        deletes.append(_Delete(section.old, *source, original))
        return entry
    mode = None
    if original is not None and (change == "renamed" or section.new_mode is not None):
        mode = original.mode
        if section.new_mode is not None:
            mode = _executable(mode, section.new_mode & 0o111 != 0)
    new_mode = section.new_file_mode if section.new_file_mode is not None else files.NEW_FILE_MODE
    assert section.new is not None and dest is not None  # every change but a delete has a new name
    writes.append(_Write(section.new, *dest, data, None if change == "renamed" else original,
                         mode, new_mode))
    if change == "renamed":
        assert section.old is not None and source is not None and original is not None  # read above
        entry["from"] = source[1]
        deletes.append(_Delete(section.old, *source, original))
    return entry


def _executable(mode: int, executable: bool) -> int:
    """`mode` with execute bits where it has read bits (as git sets 100755), or without any."""
    return mode | ((mode & 0o444) >> 2) if executable else mode & ~0o111


def _apply_hunks(text: str, newline: str, hunks: list[Hunk], name: str) -> str:
    """`text` with `hunks` applied in order. Raises ToolError showing where a hunk fails."""
    lines, ends = _split(text)
    out: list[str] = []
    out_ends: list[str] = []
    cursor = 0  # the first line of `lines` not yet copied
    drift = 0  # how far the previous hunk was from its line number
    for number, hunk in enumerate(hunks, 1):
        old = hunk.old_side()
        if hunk.old_start is None:
            expected = cursor
        else:
            # "-l,0" inserts after line l; otherwise l is the hunk's first line.
            expected = (hunk.old_start - 1 if old else hunk.old_start) + drift
        expected = max(expected, cursor)
        if old:
            place = _find(lines, old, expected, cursor)
        else:
            place = expected if expected <= len(lines) else None
        if place is None:
            raise ToolError(_failure(lines, hunk, number, name, expected))
        if hunk.old_start is not None:
            drift = place - (hunk.old_start - 1 if old else hunk.old_start)
        out += lines[cursor:place]
        out_ends += ends[cursor:place]
        at = place
        for line in hunk.lines:
            if line.kind == "-":
                at += 1
                continue
            if line.kind == " ":
                out.append(lines[at])
                out_ends.append("" if line.no_newline else ends[at])
                at += 1
            else:
                out.append(line.text)
                out_ends.append("" if line.no_newline else newline)
        cursor = at
    out += lines[cursor:]
    out_ends += ends[cursor:]
    # Only the last line may lack a newline: a line added after a last line without one, or a
    # "no newline" marker inside the file, gets the file's newline.
    for index in range(len(out) - 1):
        if not out_ends[index]:
            out_ends[index] = newline
    return "".join(line + end for line, end in zip(out, out_ends, strict=True))


def _split(text: str) -> tuple[list[str], list[str]]:
    """The lines of `text` without their newline, and each line's newline ("" for the last)."""
    lines: list[str] = []
    ends: list[str] = []
    parts = text.split("\n")
    for part in parts[:-1]:
        if part.endswith("\r"):
            lines.append(part[:-1])
            ends.append("\r\n")
        else:
            lines.append(part)
            ends.append("\n")
    if parts[-1]:
        lines.append(parts[-1])
        ends.append("")
    return lines, ends


def _find(lines: list[str], block: list[str], expected: int, low: int) -> int | None:
    """The place nearest to `expected` (not before `low`) where `block` matches exactly."""
    high = len(lines) - len(block)
    if high < low:
        return None
    expected = min(max(expected, low), high)
    first = block[0]
    for distance in range(max(expected - low, high - expected) + 1):
        for place in (expected - distance, expected + distance) if distance else (expected,):
            if low <= place <= high and lines[place] == first and \
                    lines[place:place + len(block)] == block:
                return place
    return None


def _failure(lines: list[str], hunk: Hunk, number: int, name: str, expected: int) -> str:
    """Where and why a hunk does not apply: what the patch expects, what the file has there."""
    old = hunk.old_side()
    parts = [f"hunk {number} of {name} does not apply: {hunk.header}"]
    if not old:
        parts.append(f"it inserts after line {expected}, but the file has only "
                     f"{len(lines)} lines")
    else:
        place = min(expected, max(len(lines) - 1, 0))
        parts.append(f"the patch expects at line {place + 1}:")
        parts += _numbered(old, place + 1)
        shown = lines[place:place + len(old)]
        if shown:
            end = place + len(shown)
            span = f"line {place + 1}" if len(shown) == 1 else f"lines {place + 1}-{end}"
            parts.append(f"the file has at {span}:")
            parts += _numbered(shown, place + 1)
        else:
            parts.append("the file is empty")
        if any(line.kind != " " for line in hunk.lines) and \
                _find(lines, hunk.new_side(), expected, 0) is not None:
            parts.append("the new lines of this hunk are in the file already: was the patch "
                         "applied before?")
        else:
            similar = files.similar_places(lines, old, 1)
            if similar and similar[0][1] >= MIN_SIMILAR_RATIO and similar[0][0] != place:
                where, ratio = similar[0]
                parts.append(f"the most similar place starts at line {where + 1} "
                             f"({round(ratio * 100)}% similar)")
    parts.append("context and removed lines must match the file exactly (read it again). "
                 "Nothing was written")
    return "\n".join(parts)


def _numbered(lines: list[str], first: int) -> list[str]:
    out = [f"{first + index:>{NUMBER_WIDTH}}\t{cut_line(line)}"
           for index, line in enumerate(lines[:MAX_SHOWN_LINES])]
    if len(lines) > MAX_SHOWN_LINES:
        out.append(f"{'':>{NUMBER_WIDTH}}\t… ({len(lines) - MAX_SHOWN_LINES} more lines)")
    return out


def _write_all(ctx: ToolContext, writes: list[_Write], deletes: list[_Delete]) -> None:
    """Write and delete, checking each target again; on a failure, restore what was done."""
    done: list[_Write | _Delete] = []
    created: list[str] = []
    temps = {id(step): files.new_temp_name() for step in writes}
    files.journal(ctx, [files.change_entry(step.shown, step.data, temps[id(step)]) for step in writes]
                  + [files.change_entry(step.shown, None) for step in deletes])
    steps: list[_Write | _Delete] = [*writes, *deletes]
    try:
        for step in steps:
            if files.resolve_target(ctx, step.path) != step.absolute:
                raise ToolError(f"{step.shown} changed (a link was swapped in?) while the patch "
                                "was being applied")
            if isinstance(step, _Write):
                files.write_atomic(ctx.root, step.absolute, step.data, step.shown, mode=step.mode,
                                   new_mode=step.new_mode, created=created, temp=temps[id(step)])
            else:
                files.remove_file(ctx.root, step.absolute, step.shown)
            done.append(step)
    except Exception as exc:
        problems = _undo(ctx, done)
        files.remove_folders(created)
        message = str(exc) if isinstance(exc, ToolError) else f"the patch failed: {exc}"
        if problems:
            raise _write_failure(exc, f"{message}; restoring failed for: {'; '.join(problems)}") from None
        if done:
            restored = ", ".join(step.shown for step in done)
            raise _write_failure(exc, f"{message}; the files already changed were restored "
                                f"({restored}): nothing was changed") from None
        raise _write_failure(exc, f"{message}; nothing was changed") from None


def _write_failure(cause: Exception, message: str) -> ToolError:
    """The error of a patch that failed: NoSpace when space ran out (the run ends then)."""
    return NoSpace(message, cause.folder) if isinstance(cause, NoSpace) else ToolError(message)


def _undo(ctx: ToolContext, done: list[_Write | _Delete]) -> list[str]:
    """Put back what `done` changed, last first; the problems met, if any."""
    problems = []
    for step in reversed(done):
        try:
            if step.original is None:
                files.remove_file(ctx.root, step.absolute, step.shown)
            else:
                files.write_atomic(ctx.root, step.absolute, step.original.data, step.shown,
                                   mode=step.original.mode)
        except ToolError as exc:
            problems.append(str(exc))
    return problems
