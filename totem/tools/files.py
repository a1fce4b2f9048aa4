"""What the tools that change files share: targets, reading text to change, atomic writes.

A target is resolved by `boundary.resolve_for_write()`, once for the permission subjects and
again when the tool runs. The write itself then walks from the project root to the target's
folder one component at a time with O_NOFOLLOW (creating missing folders on the way), and
creates, replaces or removes the file relative to that folder's descriptor: a folder swapped
for a symbolic link between the check and the write makes the write fail instead of landing
outside the project.

A write goes to a temporary file in the same folder (random name, O_EXCL), is flushed to disk
and renamed over the target (os.replace), so a reader sees the old file or the new one, never
half of one; on any error the temporary file is removed. The file keeps its permission bits
(only those: owner, extended attributes and hard links are not carried over, as with any
editor that saves by rename; setuid and setgid are dropped, as the kernel does on a write).

Everything here blocks: callers run it with `asyncio.to_thread`.

Must not: decide whether a path is inside the project (boundary does) or whether a change is
allowed (permissions does).
"""

from __future__ import annotations

import codecs
import difflib
import errno
import hashlib
import logging
import os
import re
import secrets
import stat
from dataclasses import dataclass
from typing import overload

from totem.security import boundary
from totem.tools.base import NoSpace, ToolContext, ToolError, display_path, resolve_path

log = logging.getLogger("totem.tools")

# The largest file a tool writes (the content of write, or the result of edit or patch).
MAX_WRITE_BYTES = 5 * 1024 * 1024
# The largest file that edit or patch reads to change (the read tool's limit).
MAX_TEXT_FILE_BYTES = 10 * 1024 * 1024
# Permission bits of a new file before the umask, as open(2) and editors create them.
NEW_FILE_MODE = 0o644
NEW_FOLDER_MODE = 0o777
# The bits a replaced file keeps: read, write and execute for owner, group and others.
KEPT_MODE_BITS = 0o777
TEMP_PREFIX = ".totem-"
TEMP_SUFFIX = ".tmp"
TEMP_RANDOM_BYTES = 8
TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + f"[0-9a-f]{{{TEMP_RANDOM_BYTES * 2}}}" + re.escape(TEMP_SUFFIX))
# A NUL byte this close to the start means binary, as in git and the read tool.
BINARY_SNIFF_BYTES = 8192
# Text in a legacy encoding has a few bytes that are not UTF-8; binary data has many.
BINARY_INVALID_RATIO = 0.3
# Similar places shown when a text is not found: how many windows get the exact (slow) ratio.
SIMILAR_PREFILTER = 40
# Above this many characters (file size times window lines), windows are ranked by equal lines.
SIMILAR_SCAN_CHARS = 2_000_000
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def resolve_target(ctx: ToolContext, path: str) -> str:
    """The absolute, link-free file to write for `path`; ToolError when the boundary refuses it."""
    return resolve_path(ctx, path, boundary.resolve_for_write)


def target_subject(ctx: ToolContext, path: str) -> str:
    """The permission subject of a write target: its resolved path relative to the project."""
    return display_path(ctx, resolve_target(ctx, path))


@dataclass(frozen=True)
class Existing:
    """A regular file as read before changing it."""

    data: bytes
    mode: int  # its permission bits (KEPT_MODE_BITS)


@dataclass(frozen=True)
class Planned:
    """A change a tool would make, as its preview shows it: the file, its bytes now and after
    (None: no file)."""

    path: str
    before: bytes | None
    after: bytes | None


@dataclass(frozen=True)
class Text:
    """The decoded content of a file, with what must survive a change."""

    text: str
    bom: bool  # a UTF-8 byte order mark, written back
    newline: str  # "\r\n" when most lines end so, else "\n"

    def encode(self, text: str) -> bytes:
        return (codecs.BOM_UTF8 if self.bom else b"") + text.encode("utf-8")


def check_parent(root: str, absolute: str, shown: str) -> None:
    """Refuse a target whose nearest existing ancestor is not a folder (a file, a looping link)."""
    folder = os.path.dirname(absolute)
    while folder != root and not os.path.lexists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise ToolError(f"cannot write {shown}: {display_path_of(root, folder)} is not a folder")


def read_existing(root: str, absolute: str, shown: str) -> Existing | None:
    """The file at `absolute` (None when it does not exist), read through the folder walk.

    Raises ToolError for something that is not a regular file, a file over
    MAX_TEXT_FILE_BYTES, or a folder on the way that changed into something else.
    """
    folder = _open_folder(root, os.path.dirname(absolute), shown, create=None)
    if folder is None:
        return None
    name = os.path.basename(absolute)
    try:
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return None
        _check_regular(info, shown)
        if info.st_size > MAX_TEXT_FILE_BYTES:
            raise ToolError(f"{shown} is {info.st_size} bytes, over the limit of "
                            f"{MAX_TEXT_FILE_BYTES} bytes for changing a file in place")
        handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=folder)
        with open(handle, "rb") as stream:
            _check_regular(os.fstat(stream.fileno()), shown)
            data = stream.read(MAX_TEXT_FILE_BYTES + 1)
        if len(data) > MAX_TEXT_FILE_BYTES:
            raise ToolError(f"{shown} is over the limit of {MAX_TEXT_FILE_BYTES} bytes")
        return Existing(data, stat.S_IMODE(info.st_mode) & KEPT_MODE_BITS)
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {_reason(exc)}") from None
    finally:
        os.close(folder)


def decode_text(data: bytes, shown: str) -> Text:
    """The UTF-8 text of a file to change. ToolError for a binary or non-UTF-8 file."""
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise ToolError(f"binary file {shown} ({len(data)} bytes); not changed")
    bom = data.startswith(codecs.BOM_UTF8)
    body = data[len(codecs.BOM_UTF8):] if bom else data
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        invalid = body.decode("utf-8", "surrogateescape")
        bad = sum(1 for char in invalid if "\udc80" <= char <= "\udcff")
        if bad > BINARY_INVALID_RATIO * len(body):
            raise ToolError(f"binary file {shown} ({len(data)} bytes); not changed") from None
        line = body[:exc.start].count(b"\n") + 1
        raise ToolError(f"{shown} is not UTF-8 text (byte {exc.start} on line {line} is not "
                        "UTF-8); it is not changed, so that its encoding is kept") from None
    return Text(text, bom, newline_of(text))


def newline_of(text: str) -> str:
    """The newline most lines of `text` end with; "\n" for a text without any."""
    crlf = text.count("\r\n")
    return "\r\n" if crlf > text.count("\n") - crlf else "\n"


def encode_new(text: str, shown: str) -> bytes:
    """UTF-8 bytes of a text a tool is about to write. ToolError past MAX_WRITE_BYTES."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(f"the new content of {shown} is not valid Unicode (a lone surrogate); "
                        "nothing written") from None
    check_size(len(data), shown)
    return data


def check_size(size: int, shown: str) -> None:
    if size > MAX_WRITE_BYTES:
        raise ToolError(f"the new content of {shown} is {size} bytes, over the limit of "
                        f"{MAX_WRITE_BYTES} bytes; nothing written")


def count_lines(text: str) -> int:
    """Lines as an editor counts them: a last line without a newline counts too."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def new_temp_name() -> str:
    """A fresh name for the temporary file of a write, in the target's folder."""
    return f"{TEMP_PREFIX}{secrets.token_hex(TEMP_RANDOM_BYTES)}{TEMP_SUFFIX}"


def is_temp_name(name: str) -> bool:
    """Whether a file name is one of a write's temporary files (never shown, removed at start)."""
    return TEMP_NAME.fullmatch(name) is not None


def remove_temp_files(folder: str) -> None:
    """Remove the temporary files of writes from a folder (only those names, only regular
    files): what a kill between a temporary file's creation and its rename left."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        if is_temp_name(name) and os.path.isfile(path) and not os.path.islink(path):
            try:
                os.unlink(path)
            except OSError as exc:
                log.warning("cannot remove the temporary file %s: %s", path, exc.strerror)


def change_entry(shown: str, data: bytes | None, temp: str | None = None) -> dict:
    """What a change will leave on disk, for the journal: the file, the SHA-256 of its new
    content (None: removed) and the temporary file the write goes through."""
    return {"path": shown, "sha256": hashlib.sha256(data).hexdigest() if data is not None else None,
            "temp": temp}


def journal(ctx: ToolContext, entries: list[dict]) -> None:
    """Record the changes before making them, so that a restart after a crash knows what landed
    and which temporary files to remove (blocks until stored; nothing outside the agent loop)."""
    if ctx.journal is not None:
        ctx.journal(entries)


def write_atomic(root: str, absolute: str, data: bytes, shown: str, *, mode: int | None = None,
                 new_mode: int = NEW_FILE_MODE, created: list[str] | None = None,
                 temp: str | None = None) -> bool:
    """Create or replace the file at `absolute` with `data`, atomically; True when created.

    The file gets `mode` exactly when given; otherwise a file that exists keeps its
    permission bits and a new one gets `new_mode` less the umask. Missing folders are created
    (their paths appended to `created`, outermost first). Raises ToolError for anything that
    is not a regular file at the target, a folder on the way that is not a folder (or became a
    link), and any OS error; the temporary file never survives an error.
    """
    folder = _open_folder(root, os.path.dirname(absolute), shown, create=created
                          if created is not None else [])
    name = os.path.basename(absolute)
    temp = temp or new_temp_name()
    made = False
    try:
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None:
            _check_regular(info, shown)
        keep = mode if mode is not None else (
            stat.S_IMODE(info.st_mode) & KEPT_MODE_BITS if info is not None else None)
        handle = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600 if keep is not None else new_mode, dir_fd=folder)
        made = True
        with open(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            if keep is not None:
                os.fchmod(stream.fileno(), keep)
            os.fsync(stream.fileno())
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
        made = False
        _sync_folder(folder)
        return info is None
    except OSError as exc:
        raise _write_error(f"cannot write {shown}", exc, root, absolute) from None
    finally:
        if made:
            try:
                os.unlink(temp, dir_fd=folder)
            except OSError:
                pass
        os.close(folder)


def remove_file(root: str, absolute: str, shown: str) -> None:
    """Delete the regular file at `absolute`. Raises ToolError when it is missing or not a file."""
    folder = _open_folder(root, os.path.dirname(absolute), shown, create=None)
    if folder is None:
        raise ToolError(f"cannot delete {shown}: it does not exist")
    try:
        name = os.path.basename(absolute)
        _check_regular(os.stat(name, dir_fd=folder, follow_symlinks=False), shown)
        os.unlink(name, dir_fd=folder)
        _sync_folder(folder)
    except OSError as exc:
        raise _write_error(f"cannot delete {shown}", exc, root, absolute) from None
    finally:
        os.close(folder)


def remove_folders(created: list[str]) -> None:
    """Remove folders that a failed change created, innermost first, if they are still empty."""
    for folder in reversed(created):
        try:
            os.rmdir(folder)
        except OSError:
            pass


def similar_places(lines: list[str], wanted: list[str], count: int) -> list[tuple[int, float]]:
    """The `count` windows of `len(wanted)` lines most similar to `wanted`, best first.

    Each is (index of its first line, similarity from 0 to 1); windows do not overlap. Every
    window is compared roughly when the file is small enough (SIMILAR_SCAN_CHARS); in a larger
    file, windows are first ranked by how many of their lines occur in `wanted`.
    """
    size = max(len(wanted), 1)
    if not lines:
        return []
    starts = range(max(len(lines) - size + 1, 1))
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2("\n".join(wanted))
    if sum(len(line) + 1 for line in lines) * size <= SIMILAR_SCAN_CHARS:
        scored = []
        for start in starts:
            matcher.set_seq1("\n".join(lines[start:start + size]))
            scored.append((matcher.real_quick_ratio() and matcher.quick_ratio(), start))
    else:
        known = {line.strip() for line in wanted}
        hits = [1 if line.strip() in known else 0 for line in lines]
        total = sum(hits[:size])
        scored = [(total, 0)]
        for start in starts[1:]:
            total += hits[start + size - 1] - hits[start - 1]
            scored.append((total, start))
    scored.sort(key=lambda item: (-item[0], item[1]))
    exact = []
    for _rough, start in scored[:SIMILAR_PREFILTER]:
        matcher.set_seq1("\n".join(lines[start:start + size]))
        exact.append((matcher.ratio(), start))
    exact.sort(key=lambda item: (-item[0], item[1]))
    chosen: list[tuple[int, float]] = []
    for ratio, start in exact:
        if all(abs(start - other) >= size for other, _ in chosen):
            chosen.append((start, ratio))
        if len(chosen) == count:
            break
    return chosen


def display_path_of(root: str, absolute: str) -> str:
    return boundary.relative_path(root, absolute) or "."


@overload
def _open_folder(root: str, folder: str, shown: str, create: list[str]) -> int: ...
@overload
def _open_folder(root: str, folder: str, shown: str, create: None) -> int | None: ...
def _open_folder(root: str, folder: str, shown: str, create: list[str] | None) -> int | None:
    """A descriptor of `folder`, reached from `root` without following any link.

    With `create` (a list), missing folders are made and appended to it; without, a missing
    folder gives None. Raises ToolError when a component is not a folder or is a link.
    """
    relative = os.path.relpath(folder, root)
    parts = [] if relative == "." else relative.split(os.sep)
    if ".." in parts:  # never: the boundary resolved it inside; refuse rather than climb
        raise ToolError(f"{shown} is outside the project")
    current = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    walked = root
    try:
        for part in parts:
            walked = os.path.join(walked, part)
            try:
                following = os.open(part, _FOLDER_FLAGS, dir_fd=current)
            except FileNotFoundError:
                if create is None:
                    os.close(current)
                    return None
                os.mkdir(part, NEW_FOLDER_MODE, dir_fd=current)
                create.append(walked)
                following = os.open(part, _FOLDER_FLAGS, dir_fd=current)
            os.close(current)
            current = following
    except OSError as exc:
        os.close(current)
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            raise ToolError(f"cannot write {shown}: {display_path_of(root, walked)} is not a "
                            "folder (or became a symbolic link); nothing written") from None
        raise _write_error(f"cannot write {shown}", exc, root, walked) from None
    return current


def _check_regular(info: os.stat_result, shown: str) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise ToolError(f"{shown} became a symbolic link after it was checked; not changed")
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{shown} is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{shown} is not a regular file (a device, socket or pipe); not changed")


def _sync_folder(folder: int) -> None:
    """Make the rename durable (the folder's entry), where the file system allows it."""
    try:
        os.fsync(folder)
    except OSError:
        pass


def _write_error(what: str, exc: OSError, root: str, path: str) -> ToolError:
    """The ToolError of a failed write: NoSpace, naming the folder, when space ran out."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return NoSpace(f"{what}: {_reason(exc)}", os.path.dirname(path))
    return ToolError(f"{what}: {_reason(exc)}")


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
