"""The grep tool: lines of the project's files that match a regular expression.

Two engines give the same answer for the same tree: ripgrep when `rg` is on PATH, and a walk in
Python otherwise (in a child process, killed at the deadline like rg). Both search every file
below the path (hidden ones too; .gitignore is not consulted, since the Python walk cannot honour
it identically), except: the `.git` folder, symbolic links (never followed), files over
MAX_FILE_BYTES, binary files (a NUL byte anywhere), the protected secret files of
`boundary.is_protected_env` (the spec: search skips them, even as the explicit path), and regular
files with more than one hard link. They visit files in the same order (names sorted bytewise
within each folder, depth first) and stop after the same number of matches, so that even a cut
answer is the same; the shown lines are then sorted by path and line number.

A hard link is a second name of the same file: its other name may be outside the project or a
secret file, which the boundary cannot see. Such a file is never searched; the answer names the
skipped ones so that the model can read one (the read tool asks the person). Which files are
skipped never depends on their contents: a count of only the linked files that matched would
tell the model, pattern by pattern, what a secret says. So both engines list every linked file
of the walk: the Python walk from its own stat, the rg engine from `rg --files` with the same
filters, run beside the search; the rg engine also stats each file that matched and drops it when
it has more than one link.

ripgrep is run without a shell, without reading any configuration (`--no-config`, and no
RIPGREP_CONFIG_PATH in its environment), with the model's pattern as the value of `-e` and the
path after `--`: a pattern like `--pre=sh` is searched as text, never taken as an option.
Both engines' processes start through `runner.run_process`, each in a process group of its own
with an explicit environment (PATH only for rg, nothing for the Python child); the whole group
is stopped at the deadline, when the count limit is reached, and when the search is cancelled.

Must not: decide what is inside the project (boundary does), or search a file that the rules
above skip, whatever the model asks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from totem.process import runner
from totem.security import boundary
from totem.security.permissions import PATH, ToolKind
from totem.tools.base import (
    SKIPPED_FOLDERS,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    cut_line,
    display_path,
    in_skipped_folder,
    resolve_path,
)
from totem.tools.glob import compile_glob

MAX_MATCHES_SHOWN = 200
# Past this many matching lines the search stops: the answer says "more than".
MAX_MATCHES_COUNTED = 1000
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_PATTERN_CHARS = 1000
TIMEOUT_SECONDS = 20.0
# One line of rg --json carries a whole matching line (up to MAX_FILE_BYTES, escaped) and
# its submatches.
RG_LINE_LIMIT_BYTES = 64 * 1024 * 1024
MAX_ERROR_CHARS = 600
# Of a child's stderr this much is kept (the message shows MAX_ERROR_CHARS of it).
MAX_ERROR_BYTES = 64 * 1024
# The JSON answer of the Python child: MAX_MATCHES_COUNTED cut lines and the linked files' names.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
# Past the size that fstat gave, a file that grew is read on in pieces of this many bytes.
READ_CHUNK_BYTES = 64 * 1024
# Every name and folder that boundary.is_protected_env protects holds this, in lower case.
ENV_MARK = ".env"
# The NUL-separated paths of `rg --files` (about 600,000 files at 100 bytes a path).
MAX_LISTING_BYTES = 64 * 1024 * 1024
# Between SIGTERM and SIGKILL of a search's group: rg and the Python child have nothing to clean
# up, and SIGTERM ends either at once (Python sets no handler for it, so even inside re).
SEARCH_KILL_GRACE_S = 0.5
# The answer names at most this many of the files skipped for their hard links.
MAX_LINKED_SHOWN = 20
_GITIGNORE_SPECIALS = frozenset("\\!#?[]{},")
# boundary._env_prefixed: what follows `.env` in a secret name, as a glob class (kept as it is).
ENV_SEPARATOR_GLOB = "\0"


def env_ignore_rules() -> str:
    """boundary's protected secret files in gitignore syntax, for rg's --ignore-file.

    Written out from boundary's table: every name bare, after a backup prefix, before a backup
    suffix and between both (ripgrep's globs take `{a,b}`, but no empty alternative), then the
    exact examples taken back, every folder taken back (a folder `prod.env/` is searched, as in
    the Python walk), then the folders whose files are all protected. Letters become classes
    (`[eE]`): rg 13 applies --ignore-file-case-insensitive to the ignore files of folders, not to
    --ignore-file; and --iglob cannot take the examples back without whitelist mode, which would
    defeat the include filter. The rg engine also drops any match in a protected file.
    """
    bases = (*boundary.ENV_NAMES, boundary.ENV_PREFIX + ENV_SEPARATOR_GLOB + "*", "*" + boundary.ENV_SUFFIX)
    prefixes = "{" + ",".join(map(_gitignore_glob, boundary.ENV_BACKUP_PREFIXES)) + "}"
    suffixes = "{" + ",".join(map(_gitignore_glob, boundary.ENV_BACKUP_SUFFIXES)) + "}"
    lines = [head + _gitignore_glob(base) + tail for base in bases
             for head in ("", prefixes) for tail in ("", suffixes)]
    lines += ["!" + _gitignore_glob(name) for name in sorted(boundary.ENV_EXAMPLES)]
    lines.append("!*/")
    lines += [_gitignore_glob(name) + "/" for name in sorted(boundary.ENV_FOLDERS)]
    return "\n".join(lines) + "\n"


def _gitignore_glob(text: str) -> str:
    """A name of boundary's table as a case-insensitive gitignore glob; its `*` stays a wildcard."""
    out = []
    for char in text:
        if char == ENV_SEPARATOR_GLOB:
            out.append("[!a-zA-Z0-9]")
        elif char.isascii() and char.isalpha():
            out.append(f"[{char.lower()}{char.upper()}]")
        elif char in _GITIGNORE_SPECIALS:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


# Patterns that can match differently on a whole file than on one line: no whole-file pre-check.
_LINE_ONLY_SYNTAX = re.compile(r"\\[AZz]|\(\?<?[=!]")
# The child of search_with_python imports this module from the folder that holds the package.
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CHILD_CODE = (f"import sys; sys.path.insert(0, {_PACKAGE_PARENT!r}); "
               f"from {__name__} import serve_child; serve_child()")


@dataclass(frozen=True)
class Query:
    """One search: `start` is a link-free folder or regular file inside `root`."""

    root: str
    start: str
    pattern: str
    include: str | None = None
    ignore_case: bool = False


@dataclass
class Found:
    """Matching lines as (project-relative path, line number, text cut by cut_line), in visiting
    order."""

    matches: list[tuple[str, int, str]]
    more: bool = False  # there were more than MAX_MATCHES_COUNTED
    linked: list[str] = field(default_factory=list)  # files not searched for their hard links


class GrepTool(Tool):
    name = "grep"
    kind = ToolKind(PATH, changes=False, searches=True)
    description = "Search file contents with a regex. Output: path:line: text."
    schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "Regular expression"},
            "path": {"type": "string", "description": "File or folder (default: project root)"},
            "include": {"type": "string", "description": 'File name glob, e.g. "*.{ts,tsx}"'},
            "ignore_case": {"type": "boolean"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def __init__(self, engine: str = "auto"):
        """`engine`: "auto" (rg when on PATH, looked up at each call), "rg" or "python"."""
        if engine not in ("auto", "rg", "python"):
            raise ValueError(f"unknown grep engine {engine!r}")
        self.engine = engine

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        pattern = args["pattern"]
        if "\x00" in pattern:
            raise ToolError("the pattern contains a NUL byte")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise ToolError(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
        include = args.get("include") or None
        if include is not None:
            compile_glob(include, name_only=True)  # the same errors for both engines
        start = resolve_path(ctx, args.get("path") or ".")
        where = display_path(ctx, start)
        title = f"{pattern} in {where}"
        if in_skipped_folder(where):
            return ToolResult(f"{where} was not searched: the search tools skip "
                              f"{', '.join(sorted(SKIPPED_FOLDERS))}.", title=title,
                              data={"matches": 0, "skipped": True})
        skipped = await asyncio.to_thread(_check_start, start, where)
        if skipped:
            return ToolResult(skipped, title=title, data={"matches": 0, "skipped": True})
        query = Query(ctx.root, start, pattern, include, bool(args.get("ignore_case")))
        rg = shutil.which("rg") if self.engine == "auto" else "rg" if self.engine == "rg" else None
        if rg:
            found = await search_with_rg(query, rg)
        else:
            found = await search_with_python(query)
        return format_found(found, query, where, engine="rg" if rg else "python")


def _check_start(start: str, where: str) -> str:
    """Why an explicit path is not searched (a message for the model), or "" to search it.

    Raises ToolError for a path that does not exist or is not a file or folder.
    """
    if boundary.is_protected_env(where):
        return (f"{where} was not searched: search skips secret files (.env, .env.*, *.env, "
                ".envrc, their backups, files in .env.d). Use read on it to ask the user for "
                "permission to see it.")
    try:
        info = os.stat(start)
    except FileNotFoundError:
        raise ToolError(f"not found: {where}") from None
    except OSError as exc:
        raise ToolError(f"cannot search {where}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        return ""
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{where} is not a regular file or folder; not searched")
    if info.st_nlink > 1:
        return (f"{where} was not searched: it has {info.st_nlink} hard links, and another name "
                "of it may be outside the project or a secret file. Use read on it to ask the "
                "user for permission to see it.")
    if info.st_size > MAX_FILE_BYTES:
        return (f"{where} was not searched: it is {info.st_size} bytes, over the search limit "
                f"of {MAX_FILE_BYTES} bytes. Use read with offset and limit.")
    try:
        with open(start, "rb") as handle:
            binary = b"\x00" in handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ToolError(f"cannot search {where}: {exc.strerror}") from None
    if binary:
        return f"{where} was not searched: it is a binary file ({info.st_size} bytes)."
    return ""


def format_found(found: Found, query: Query, where: str, engine: str = "") -> ToolResult:
    """The answer for the model: a count line, `path:line: text` lines, and a note when cut."""
    matches = sorted(found.matches, key=lambda match: (match[0], match[1]))
    shown = matches[:MAX_MATCHES_SHOWN]
    files = len({path for path, _, _ in matches})
    count = f"more than {len(matches)}" if found.more else str(len(matches))
    title = f"{query.pattern} in {where} ({count} match{'' if count == '1' else 'es'})"
    linked = sorted(set(found.linked))
    data = {"matches": len(matches), "files": files, "shown": len(shown),
            "truncated": found.more or len(shown) < len(matches), "linked": len(linked),
            "engine": engine}
    if not matches:
        lines = [f"No matches for {query.pattern!r} in {where}."]
    else:
        lines = [f"{count.capitalize()} matching line{'' if count == '1' else 's'} in {files} "
                 f"file{'' if files == 1 else 's'}:"]
        lines.extend(f"{path}:{number}: {text}" for path, number, text in shown)
    if data["truncated"]:
        lines.append(f"(showing {len(shown)} of {count} matching lines; narrow the pattern, "
                     "path or include to see the rest)")
    if linked:
        lines.append(_linked_note(linked))
    return ToolResult("\n".join(lines), title=title, data=data)


def _linked_note(linked: list[str]) -> str:
    names = ", ".join(linked[:MAX_LINKED_SHOWN])
    if len(linked) > MAX_LINKED_SHOWN:
        names += f" and {len(linked) - MAX_LINKED_SHOWN} more"
    one = len(linked) == 1
    return (f"({len(linked)} file{'' if one else 's'} with more than one hard link "
            f"{'was' if one else 'were'} not searched, since another name of "
            f"{'it' if one else 'such a file'} may be outside the project or a secret file: "
            f"{names}. Use read on one to ask the user for permission to see it.)")


# ripgrep

def rg_arguments(query: Query, rg: str, ignore_file: str, listing: bool = False) -> list[str]:
    """The command line for ripgrep; the pattern only ever follows -e, the path only --.

    With `listing`, `rg --files` with the same filters: the files the search visits (NUL-ended).
    """
    args = [rg, "--files", "--null"] if listing else [rg, "--json"]
    args += ["--no-config", "--no-messages", "--no-ignore", "--hidden"]
    if not listing:
        args += ["--sort", "path", "--encoding", "none"]
    args += ["--max-filesize", str(MAX_FILE_BYTES), "--glob", "!.git", "--ignore-file", ignore_file]
    if not listing:
        args.append("--ignore-case" if query.ignore_case else "--case-sensitive")
    if query.include:
        args += ["--type-add", f"totem:{query.include}", "--type", "totem"]
    return args + (["--"] if listing else ["-e", query.pattern, "--"]) + [query.start]


async def search_with_rg(query: Query, rg: str = "rg") -> Found:
    """Search with ripgrep. Raises ToolError for an invalid pattern or a timeout."""
    # Written and removed on the loop: a few kilobytes in the temporary folder take
    # microseconds, and no await between them can leave the file behind on cancellation.
    descriptor, ignore_file = tempfile.mkstemp(prefix="totem-grep-", suffix=".ignore")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(env_ignore_rules())
        deadline = time.monotonic() + TIMEOUT_SECONDS  # for the search and the listing together
        search = rg_arguments(query, rg, ignore_file)
        if not os.path.isdir(query.start):  # a file start was checked by _check_start
            return await _run_rg(query, search)
        # The listing runs beside the search, not after it: rg searches on one thread (--sort
        # path), so the listing and its stats take another core, and the answer waits for the
        # longer of the two instead of their sum.
        listing = asyncio.ensure_future(_list_linked_with_rg(
            query, rg_arguments(query, rg, ignore_file, listing=True), deadline))
        try:
            found = await _run_rg(query, search)
            found.linked += await listing
        finally:
            # When the search failed or was cancelled: stop the listing's group and wait for it,
            # its own error aside (the search's is the answer). A no-op once it is done.
            listing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listing
        return found
    finally:
        os.unlink(ignore_file)


async def _run_rg(query: Query, args: list[str]) -> Found:
    reader = _RgReader(query.root)
    try:
        result = await runner.run_process(
            args, cwd=query.root, env=_rg_environment(), timeout_s=TIMEOUT_SECONDS,
            stdout_cap=0, stderr_cap=MAX_ERROR_BYTES, on_stdout=reader.feed,
            kill_grace_s=SEARCH_KILL_GRACE_S)
    except OSError as exc:
        raise ToolError(f"cannot run ripgrep: {exc.strerror or exc}") from None
    if result.timed_out:
        raise ToolError(_timeout_message())
    if not result.stopped:
        reader.finish()
    stderr = result.stderr.decode("utf-8", "replace").strip()
    if result.returncode == 2 and stderr and not reader.found.matches:
        what = f"invalid regex {query.pattern!r}" if "regex" in stderr else "the search failed"
        raise ToolError(f"{what}: {stderr[:MAX_ERROR_CHARS]}")
    return reader.found


def _rg_environment() -> dict[str, str]:
    """rg's whole environment: PATH, and no RIPGREP_CONFIG_PATH or anything else of the server."""
    return {"PATH": os.environ.get("PATH", os.defpath)}


class _RgReader:
    """Matches collected from rg --json as its output comes, until the end or the count limit.

    Matches of a file are kept only when its `end` message reports no binary content (ripgrep
    stops at the first NUL byte but has already printed the lines before it, and the Python
    engine skips such a file whole), the file has one link (a stat per matching file, not per
    file searched) and it is no protected secret file (the ignore rules skip those already).
    """

    def __init__(self, root: str):
        self.root = root
        self.found = Found([])
        self.pending: list[tuple[str, int, str]] = []
        self.partial = bytearray()  # the start of a line whose end has not come yet

    def feed(self, data: bytes) -> bool:
        """Read a chunk of output; True once past MAX_MATCHES_COUNTED (rg may then be stopped).

        Raises ToolError for a line over RG_LINE_LIMIT_BYTES (a huge line with countless
        matches) or one that is not JSON.
        """
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            if self.partial:
                self.partial += data[start:end]
                line, self.partial = bytes(self.partial), bytearray()
            else:
                line = data[start:end]
            start = end + 1
            if self._line(line):
                return True
        self.partial += data[start:]
        if len(self.partial) > RG_LINE_LIMIT_BYTES:
            raise ToolError("a matching line is too long to show; narrow the pattern, or use "
                            "include to leave out minified or generated files")
        return False

    def finish(self) -> None:
        """Read a last line that no newline ended. Raises ToolError as `feed` does."""
        if self.partial:
            line, self.partial = bytes(self.partial), bytearray()
            self._line(line)

    def _line(self, line: bytes) -> bool:
        if not line.strip():
            return False
        try:
            message = json.loads(line)
        except ValueError:
            raise ToolError("the search failed: ripgrep wrote a line that is not JSON") from None
        found, pending = self.found, self.pending
        kind, data = message.get("type"), message.get("data", {})
        if kind == "match" and len(found.matches) + len(pending) <= MAX_MATCHES_COUNTED:
            path = boundary.relative_path(self.root, _rg_text(data["path"]))
            text = cut_line(_strip_newline(_rg_text(data["lines"])))
            pending.append((path, data["line_number"], text))
        elif kind == "end":
            if pending and data.get("binary_offset") is None:
                relative = pending[0][0]
                links = _link_count(_rg_bytes(data["path"]))
                if links > 1:
                    found.linked.append(relative)
                elif links == 1 and not boundary.is_protected_env(relative):
                    found.matches.extend(pending)
            pending.clear()
            if len(found.matches) > MAX_MATCHES_COUNTED:
                del found.matches[MAX_MATCHES_COUNTED:]
                found.more = True
                return True
        return False


async def _list_linked_with_rg(query: Query, args: list[str], deadline: float) -> list[str]:
    """The project-relative paths of the files with more than one hard link among those that
    `rg --files` lists (beside the search, in a group of its own, stopped like the search).
    Raises ToolError when `deadline` (time.monotonic()) passes or the listing passes
    MAX_LISTING_BYTES."""
    try:
        result = await runner.run_process(
            args, cwd=query.root, env=_rg_environment(),
            timeout_s=max(deadline - time.monotonic(), 0), stdout_cap=MAX_LISTING_BYTES,
            stderr_cap=0, kill_grace_s=SEARCH_KILL_GRACE_S)
    except OSError as exc:
        raise ToolError(f"cannot run ripgrep: {exc.strerror or exc}") from None
    if result.timed_out:
        raise ToolError(_timeout_message())
    if result.stdout_cut:
        raise ToolError(f"the folder holds too many files to check them for hard links (over "
                        f"{MAX_LISTING_BYTES} bytes of names); narrow the path or use include")
    return await asyncio.to_thread(_linked_files, query.root, result.stdout.split(b"\0"), deadline)


def _linked_files(root: str, paths: list[bytes], deadline: float) -> list[str]:
    linked = []
    for path in paths:
        if time.monotonic() > deadline:
            raise ToolError(_timeout_message())
        if path and _link_count(path) > 1:
            linked.append(_printable(os.path.relpath(os.fsdecode(path), root).replace(os.sep, "/")))
    return linked


def _link_count(path: str | bytes) -> int:
    """The number of hard links of a regular file (not following a link); 0 for anything else."""
    try:
        info = os.lstat(path)
    except OSError:
        return 0
    return info.st_nlink if stat.S_ISREG(info.st_mode) else 0


def _rg_text(value: dict) -> str:
    """rg --json gives text as {"text": ...}, or {"bytes": base64} when it is not UTF-8."""
    if "text" in value:
        return value["text"]
    return base64.b64decode(value["bytes"]).decode("utf-8", "replace")


def _rg_bytes(value: dict) -> bytes:
    """A path as rg --json gives it (see _rg_text), in its own bytes: a name that is not UTF-8
    must be opened as it is, not as its printable form."""
    if "text" in value:
        return os.fsencode(value["text"])
    return base64.b64decode(value["bytes"])


# Python

async def search_with_python(query: Query) -> Found:
    """Search with the re module, in a child Python process. Raises ToolError for an invalid
    pattern or a timeout.

    Not a thread: Python's re holds the GIL while it matches, so a regex that backtracks for
    minutes on one line (ripgrep's engine is linear, re's is not) would stall the event loop and
    could not be stopped. A child process (through the runner, with an empty environment) is
    killed with its group at the deadline or on cancellation, like ripgrep.
    """
    _compile_pattern(query.pattern, query.ignore_case)  # refuse a bad regex before spawning
    request = json.dumps({"root": query.root, "start": query.start, "pattern": query.pattern,
                          "include": query.include, "ignore_case": query.ignore_case,
                          "timeout": TIMEOUT_SECONDS}).encode()
    try:
        result = await runner.run_process(
            [sys.executable, "-I", "-c", _CHILD_CODE], cwd=query.root, env={},
            timeout_s=TIMEOUT_SECONDS, stdin_bytes=request, stdout_cap=MAX_ANSWER_BYTES,
            stderr_cap=MAX_ERROR_BYTES, kill_grace_s=SEARCH_KILL_GRACE_S)
    except OSError as exc:
        raise ToolError(f"cannot start the search: {exc.strerror or exc}") from None
    if result.timed_out:
        raise ToolError(_timeout_message())
    if result.stdout_cut:
        raise ToolError(f"the search failed: its answer is over {MAX_ANSWER_BYTES} bytes; "
                        "narrow the path or use include")
    try:
        answer = json.loads(result.stdout)
    except ValueError:
        detail = result.stderr.decode("utf-8", "replace").strip()[-MAX_ERROR_CHARS:]
        raise ToolError(f"the search failed: {detail or f'exit status {result.returncode}'}") from None
    if "error" in answer:
        raise ToolError(answer["error"])
    return Found([(path, number, text) for path, number, text in answer["matches"]], answer["more"],
                 answer["linked"])


def serve_child() -> None:
    """The child side of search_with_python: a JSON query on stdin, a JSON answer on stdout."""
    request = json.load(sys.stdin)
    query = Query(request["root"], request["start"], request["pattern"], request["include"],
                  request["ignore_case"])
    try:
        found = _search_files(query, time.monotonic() + request["timeout"])
        answer = {"matches": found.matches, "more": found.more, "linked": found.linked}
    except ToolError as exc:
        answer = {"error": str(exc)}
    json.dump(answer, sys.stdout)


def _timeout_message() -> str:
    return (f"the search took longer than {TIMEOUT_SECONDS:g} s and was stopped; narrow the "
            "path or use include")


def _compile_pattern(pattern: str, ignore_case: bool) -> tuple[re.Pattern, re.Pattern | None]:
    flags = re.IGNORECASE if ignore_case else 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "possible nested set": a different meaning in rg
        try:
            line_regex = re.compile(pattern, flags)
            file_regex = None if _LINE_ONLY_SYNTAX.search(pattern) else \
                re.compile(pattern, flags | re.MULTILINE)
        except (re.error, FutureWarning, DeprecationWarning) as exc:
            raise ToolError(f"invalid regex {pattern!r}: {exc}") from None
    return line_regex, file_regex


def _search_files(query: Query, deadline: float) -> Found:
    line_regex, file_regex = _compile_pattern(query.pattern, query.ignore_case)
    required = required_texts(query.pattern, query.ignore_case)
    include = compile_glob(query.include, name_only=True) if query.include else None
    found = Found([])
    linked: list[str] = []  # project-relative, as the walk met them
    if os.path.isdir(query.start):
        files = _walk_sorted(query.root, query.start, include, linked)
    else:  # an explicit file: checked by _check_start, include ignored
        files = iter([(query.start, boundary.relative_path(query.root, query.start))])
    for path, relative in files:
        if time.monotonic() > deadline:
            raise ToolError(_timeout_message())
        try:
            links, data = _read_file(path)
        except OSError:
            continue
        if links > 1:  # a link made since the walk's stat
            linked.append(relative)
            continue
        if len(data) > MAX_FILE_BYTES or b"\x00" in data:
            continue
        if required is not None and not required.held_by(data):
            continue
        text = data.decode("utf-8", "replace")
        if file_regex is not None and not file_regex.search(text):
            continue
        relative = _printable(relative)
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        for number, line in enumerate(lines, 1):
            if line_regex.search(line):
                found.matches.append((relative, number, cut_line(_strip_newline(line))))
        if len(found.matches) > MAX_MATCHES_COUNTED:
            del found.matches[MAX_MATCHES_COUNTED:]
            found.more = True
            break
    if found.more:
        # The linked files of the rest of the walk too (stat only, no reads), as ripgrep's
        # listing does: the skipped files must not depend on where the matches ran out.
        for _ in files:
            if time.monotonic() > deadline:
                break
    found.linked = [_printable(path) for path in linked]
    return found


def _read_file(path: str) -> tuple[int, bytes]:
    """(hard links, the first MAX_FILE_BYTES + 1 bytes) of a file; no bytes when it has more
    than one link. Raises OSError.

    The first read asks for the size that fstat gives, not for the cap: a buffer of the cap for
    each file (2 MB, allocated and given back) cost more than the reading itself. Then it reads
    on to the end, in case the file grew, never past the cap.
    """
    descriptor = os.open(path, os.O_RDONLY)
    try:
        info = os.fstat(descriptor)
        if info.st_nlink > 1:
            return info.st_nlink, b""
        data = os.read(descriptor, min(info.st_size, MAX_FILE_BYTES) + 1)
        while len(data) <= MAX_FILE_BYTES:
            more = os.read(descriptor, min(READ_CHUNK_BYTES, MAX_FILE_BYTES + 1 - len(data)))
            if not more:
                break
            data += more
        return info.st_nlink, data
    finally:
        os.close(descriptor)


@dataclass(frozen=True)
class Required:
    """UTF-8 texts of which every line that a pattern matches holds one at least."""

    texts: tuple[bytes, ...]
    folded: bool = False  # lower-case ASCII texts, of a pattern that ignores case

    def held_by(self, data: bytes) -> bool:
        """Whether the raw bytes of a file may hold a match: False when they hold no text."""
        if self.folded:
            if not data.isascii():  # Unicode case folding goes beyond ASCII: no shortcut
                return True
            data = data.lower()
        return any(text in data for text in self.texts)


def required_texts(pattern: str, ignore_case: bool) -> Required | None:
    """The texts of which every line that `pattern` matches holds one at least, or None when
    the pattern gives none. A file that holds none of them is neither decoded nor matched:
    `in` on bytes runs at memory speed, while Python's re tries each position of a text (about
    50 MB/s for a pattern that starts with \\b); ripgrep likewise looks for its literals first.

    Read from the re module's own parse tree, so that it agrees with the compiled pattern: the
    longest run of literal characters of the top-level sequence, or of a group, a repeat of at
    least once or each branch of an alternation inside it. Classes, lookarounds and
    backreferences end a run. With `ignore_case` (or `(?i)`) the texts are lower-case ASCII
    and hold only for a file of ASCII bytes (see Required.held_by): a non-ASCII letter ends a
    run, since Unicode case folding matches `s` with `ſ` and `k` with the Kelvin sign. U+FFFD
    ends a run too: the decoding puts it where the bytes were not UTF-8.
    """
    try:  # a private module: where another Python release changes it, no shortcut, same answers
        parser: Any = importlib.import_module("re._parser")
        parsed = parser.parse(pattern, re.IGNORECASE if ignore_case else 0)
        fold = bool(parsed.state.flags & re.IGNORECASE)
        texts = _required_in(parser, list(parsed), fold)
    except Exception:
        return None
    return None if texts is None else Required(tuple(sorted(text.encode() for text in texts)), fold)


def _required_in(parser: Any, items: list, fold: bool) -> frozenset[str] | None:
    """The best set of alternative texts that a sequence of the parse tree requires (see
    required_texts): the one whose shortest text is the longest; None when there is none."""
    best: frozenset[str] | None = None
    run: list[str] = []

    def consider(texts: frozenset[str] | None) -> None:
        nonlocal best
        if texts and all(texts) and (best is None or min(map(len, texts)) > min(map(len, best))):
            best = texts

    repeats = (parser.MAX_REPEAT, parser.MIN_REPEAT, parser.POSSESSIVE_REPEAT)
    for op, value in [*items, (None, None)]:  # a last item to end the last run
        if op is parser.LITERAL and _usable_literal(value, fold):
            run.append(chr(value).lower() if fold else chr(value))
            continue
        if run:
            consider(frozenset(["".join(run)]))
            run = []
        if op is parser.SUBPATTERN:
            _group, added, _removed, inner = value
            if fold or not added & re.IGNORECASE:
                consider(_required_in(parser, list(inner), fold))
        elif op is parser.BRANCH:
            branches = [_required_in(parser, list(branch), fold) for branch in value[1]]
            if all(branches):
                consider(frozenset(text for texts in branches if texts for text in texts))
        elif op in repeats and value[0] >= 1:
            consider(_required_in(parser, list(value[2]), fold))
        elif op is parser.ATOMIC_GROUP:
            consider(_required_in(parser, list(value), fold))
    return best


def _usable_literal(code: int, fold: bool) -> bool:
    if fold:
        return code < 128
    return code != 0xFFFD and not 0xD800 <= code <= 0xDFFF  # a lone surrogate has no UTF-8


def _walk_sorted(root: str, top: str, include: re.Pattern | None,
                 linked: list[str]) -> Iterator[tuple[str, str]]:
    """(path, project-relative path) of the files below `top` in ripgrep's --sort path order,
    with ripgrep's skips.

    Regular files with more than one hard link are not yielded: their project-relative paths
    are appended to `linked`.
    """
    stack = [(iter(_sorted_entries(top)), boundary.relative_path(root, top))]
    while stack:
        entries, folder = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        if entry.name in SKIPPED_FOLDERS:
            continue
        relative = f"{folder}/{entry.name}" if folder else entry.name
        try:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append((iter(_sorted_entries(entry.path)), relative))
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            if _is_protected(relative):
                continue
            if include is not None and not include.fullmatch(entry.name):
                continue
            info = entry.stat(follow_symlinks=False)
            if info.st_size > MAX_FILE_BYTES:
                continue
            if info.st_nlink > 1:
                linked.append(relative)
                continue
        except OSError:
            continue
        yield entry.path, relative


def _is_protected(relative: str) -> bool:
    """boundary.is_protected_env, checked in full only for the paths that can be protected:
    every protected name and folder of boundary's tables holds ".env" (a test checks it)."""
    return ENV_MARK in relative.lower() and boundary.is_protected_env(relative)


def _sorted_entries(folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda entry: os.fsencode(entry.name))
    except OSError:
        return []


def _printable(path: str) -> str:
    """A file name that is not UTF-8 with U+FFFD for its bad bytes, as ripgrep's JSON gives it."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _strip_newline(line: str) -> str:
    if line.endswith("\n"):
        line = line[:-1]
    return line[:-1] if line.endswith("\r") else line
