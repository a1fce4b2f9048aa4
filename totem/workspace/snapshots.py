"""Snapshots: what a change replaced, kept so that the change can be seen and taken back.

Before a tool changes a file (write, edit, patch) and before the person's Save as, the file's
content is kept; a command (a bash call, a background job), whose targets nobody knows in
advance, is bracketed by two captures of the tree, and what differs between them is what it
changed. Each change becomes a row (store: `snapshots`) naming the session, the message and the
part that made it, the path, and the SHA-256 of the content before and after (None: no file;
"": a file whose content was not kept, with the reason).

Content lives outside the project, in `<data>/snapshots/<projectid>/`: one zlib file per
distinct content, named by its hash, so a file kept twice costs once. A file over
MAX_FILE_BYTES is not kept (the row says so), nor is a protected secret file or a file with
more than one hard link (their content is never copied); a project's store is capped
(`snapshotmb`), the least recently used content going first, and an undo that needs a content
that went says so instead of guessing.

The tree of a project is listed by git from the folder's `.gitignore` files (git.unignored_files)
and kept in memory with each file's size, times, inode and hash: a capture reads only files whose
stat changed. Where inotify works (watch.py) a capture looks only at what was reported since the
last one, so a step that changed nothing costs a read of an empty queue; else it stats the tree.

Restoring (undo, redo) writes through `tools.files` (the same folder walk without links as the
tools) and never clobbers: a file whose content is not what Totem left is a conflict, left as
it is unless forced, and whatever a restore replaces is kept first, for redo.

Blocking work (reading, hashing, compressing, writing) runs on threads; the tree of a folder is
captured by one task at a time.

Must not: decide whether a change is allowed (permissions does), publish anything but
`diff.updated`, or know the HTTP API.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import hashlib
import logging
import os
import re
import secrets
import shutil
import stat
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from totem.errors import out_of_space
from totem.events import DiffUpdated
from totem.rows import SnapshotChange
from totem.security import boundary
from totem.store import Store
from totem.tools import ToolError, files as file_io
from totem.workspace import git
from totem.workspace.watch import Watcher

log = logging.getLogger("totem.snapshots")

MAX_FILE_BYTES = 2 * 1024 * 1024
DEFAULT_LIMIT_BYTES = 1024 * 1024 * 1024
SNAPSHOTS_DIR = "snapshots"
SHADOW_DIR = "ignore.git"  # the empty repository git lists a folder's ignore files with
COMPRESS_LEVEL = 1  # fast: most of what is kept is never read again
BLOB_TEMP_BYTES = 4
# The temporary file of a content being kept: <the hash less its first two digits>.<random>.tmp
BLOB_TEMP = re.compile(rf"[0-9a-f]{{62}}\.[0-9a-f]{{{BLOB_TEMP_BYTES * 2}}}\.tmp")
MAX_PATCH_BYTES = 256 * 1024  # a file's diff beyond this is cut
DIFF_CONTEXT_LINES = 3
RACY_NS = 2_000_000_000  # a file changed this shortly before a look is read again at the next
TOO_BIG = f"over {MAX_FILE_BYTES // (1024 * 1024)} MB: its content is not kept"
SECRET = "a protected secret file: its content is never copied"
# A second name of a file (`ln ~/.ssh/id_ed25519 notes.txt`) may be a secret's: its content is
# never copied into the store, whatever its name here.
HARD_LINKED = "a file with more than one hard link: its content is never copied"
NO_SPACE = "its content was not kept: the disk was full"
OVER_LIMIT = "its content was not kept: the snapshot store of the project was at its limit (snapshotmb)"
NOT_KEPT = ""  # the hash of a file that exists but whose content was not kept
LOST_TO_CAP = ("its earlier content is not kept (the snapshot store of the project was over its limit, "
               "or the disk was full)")


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the content store --------------------------------------------------------------------

class Blobs:
    """Content by hash, per project, under a cap of bytes per project."""

    def __init__(self, folder: str, limit_bytes: int = DEFAULT_LIMIT_BYTES):
        self.folder = folder
        self.limit_bytes = limit_bytes
        self._sizes: dict[str, int] = {}  # projectid -> bytes stored, once counted

    def project_folder(self, projectid: str) -> str:
        if not projectid or not all(char.isalnum() for char in projectid):
            raise ValueError(f"not a project id: {projectid!r}")
        return os.path.join(self.folder, projectid)

    def _path(self, projectid: str, digest: str) -> str:
        return os.path.join(self.project_folder(projectid), digest[:2], digest[2:])

    def put(self, projectid: str, data: bytes) -> str:
        """Keep `data`; returns its hash. Blocks."""
        digest = content_hash(data)
        path = self._path(projectid, digest)
        if os.path.exists(path):
            with contextlib.suppress(OSError):
                os.utime(path)  # used again: the cap removes it last
            return digest
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        packed = zlib.compress(data, COMPRESS_LEVEL)
        temp = f"{path}.{secrets.token_hex(BLOB_TEMP_BYTES)}.tmp"
        try:
            with open(temp, "wb") as stream:
                stream.write(packed)
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        self._count(projectid, len(packed))
        return digest

    def get(self, projectid: str, digest: str) -> bytes | None:
        """The content of a hash, None when it is not kept (never was, or the cap removed it)."""
        try:
            with open(self._path(projectid, digest), "rb") as stream:
                data = zlib.decompress(stream.read())
        except (OSError, zlib.error, ValueError):
            return None
        return data if content_hash(data) == digest else None

    def has(self, projectid: str, digest: str) -> bool:
        return os.path.exists(self._path(projectid, digest))

    def size(self, projectid: str) -> int:
        if projectid not in self._sizes:
            self._sizes[projectid] = sum(size for _path, size, _time in self._files(projectid))
        return self._sizes[projectid]

    def _count(self, projectid: str, added: int) -> None:
        if projectid in self._sizes:
            self._sizes[projectid] += added

    def _files(self, projectid: str) -> Iterable[tuple[str, int, float]]:
        top = self.project_folder(projectid)
        if not os.path.isdir(top):
            return
        for shard in os.scandir(top):
            if not shard.is_dir(follow_symlinks=False) or len(shard.name) != 2:
                continue
            for entry in os.scandir(shard.path):
                if entry.name.endswith(".tmp"):
                    continue
                info = entry.stat(follow_symlinks=False)
                yield entry.path, info.st_size, info.st_mtime

    def enforce_limit(self, projectid: str, needed: set[str], wanted: frozenset[str] = frozenset()) -> int:
        """Bring the project's store under the cap: first what neither a row (`needed`) nor a
        tree (`wanted`, for a later change) names, then what only a tree names, then the least
        recently used. Returns how many were removed. Blocks."""
        if self.size(projectid) <= self.limit_bytes:
            return 0
        stored = sorted(self._files(projectid), key=lambda item: item[2])
        named = [(item, _digest_of(item[0])) for item in stored]
        unused = [item for item, digest in named if digest not in needed and digest not in wanted]
        tree_only = [item for item, digest in named if digest not in needed and digest in wanted]
        used = [item for item, digest in named if digest in needed]
        removed = 0
        total = sum(size for _path, size, _time in stored)
        for path, size, _time in unused + tree_only + used:
            if total <= self.limit_bytes:
                break
            with contextlib.suppress(OSError):
                os.unlink(path)
                total -= size
                removed += 1
        self._sizes[projectid] = total
        return removed

    def remove_temps(self) -> int:
        """Remove the temporary files of contents being kept that a kill left (they would
        hold space that the cap does not count). Returns how many. Blocks."""
        removed = 0
        with contextlib.suppress(OSError):
            for project in os.scandir(self.folder):
                if not project.is_dir(follow_symlinks=False) or project.name == SHADOW_DIR:
                    continue
                for shard in os.scandir(project.path):
                    if not shard.is_dir(follow_symlinks=False) or len(shard.name) != 2:
                        continue
                    for entry in os.scandir(shard.path):
                        if BLOB_TEMP.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                            with contextlib.suppress(OSError):
                                os.unlink(entry.path)
                                removed += 1
        return removed

    def drop_project(self, projectid: str) -> None:
        """Remove everything kept for a project (it was forgotten). Blocks."""
        shutil.rmtree(self.project_folder(projectid), ignore_errors=True)
        self._sizes.pop(projectid, None)


def _digest_of(path: str) -> str:
    return os.path.basename(os.path.dirname(path)) + os.path.basename(path)


# -- reading a file of the project --------------------------------------------------------

@dataclass(frozen=True)
class Seen:
    """A regular file as a capture saw it."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    digest: str  # NOT_KEPT when its content was not kept
    note: str = ""  # why it was not kept
    racy: bool = False  # changed so shortly before it was read that its stat may not show a next change

    def same_stat(self, info: os.stat_result) -> bool:
        return (self.size, self.mtime_ns, self.ctime_ns, self.ino) == (
            info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)


def _lstat_inside(root: str, relative: str, folders: dict[str, bool] | None = None) -> os.stat_result | None:
    """The lstat of a regular file reached without a link on the way, or None. `folders`
    remembers, for one walk, which folders were found free of links."""
    absolute = os.path.join(root, relative)
    try:
        info = os.lstat(absolute)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    folder = os.path.dirname(absolute)
    if folder == root:
        return info
    plain = folders.get(folder) if folders is not None else None
    if plain is None:
        plain = os.path.realpath(folder) == folder
        if folders is not None:
            folders[folder] = plain
    return info if plain else None  # a folder on the way is (now) a link: not a file of this tree


def read_kept(blobs: Blobs, projectid: str, root: str, relative: str,
              info: os.stat_result | None = None, spare: bool = False, within: bool = False) -> Seen | None:
    """Keep the current content of a file of the project; None when there is no such regular
    file (absent, a link, a folder). With `spare`, a content that the disk has no room for
    is hashed and not kept (what a file holds after a change: only a redo would need it);
    without, that raises OSError. With `within` (the first look at a tree, whose contents the
    cap may not remove), a content is hashed and not kept once the project's store is at its
    cap. Blocks."""
    info = info or _lstat_inside(root, relative)
    if info is None:
        return None
    stamp = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
    racy = time.time_ns() - max(info.st_mtime_ns, info.st_ctime_ns) < RACY_NS
    if boundary.is_protected_env(relative):
        return Seen(*stamp, NOT_KEPT, SECRET, racy)
    if info.st_nlink > 1:
        return Seen(*stamp, NOT_KEPT, HARD_LINKED, racy)
    if info.st_size > MAX_FILE_BYTES:
        return Seen(*stamp, NOT_KEPT, TOO_BIG, racy)
    try:
        with open(os.path.join(root, relative), "rb", opener=_no_follow) as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_FILE_BYTES:
        return Seen(*stamp, NOT_KEPT, TOO_BIG, racy)
    if within and blobs.size(projectid) >= blobs.limit_bytes:
        digest = content_hash(data)
        if not blobs.has(projectid, digest):
            return Seen(*stamp, digest, OVER_LIMIT, racy)
    try:
        return Seen(*stamp, blobs.put(projectid, data), racy=racy)
    except OSError as exc:
        if not spare or not out_of_space(exc):
            raise
        return Seen(*stamp, content_hash(data), NO_SPACE, racy)


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)


def disk_digest(root: str, relative: str) -> str | None:
    """The hash of a file's content now: None when there is none, NOT_KEPT when too big, a
    secret or hard-linked (compared by the caller as "not what Totem left"). Blocks."""
    info = _lstat_inside(root, relative)
    if info is None:
        return None
    if info.st_size > MAX_FILE_BYTES or info.st_nlink > 1 or boundary.is_protected_env(relative):
        return NOT_KEPT
    try:
        with open(os.path.join(root, relative), "rb", opener=_no_follow) as stream:
            return content_hash(stream.read())
    except OSError:
        return None


# -- the tree of a folder, for commands ---------------------------------------------------

@dataclass(frozen=True)
class Change:
    """One file that differs between two captures."""

    path: str
    before: Seen | None
    after: Seen | None


class Tree:
    """What a folder's files were at the last capture."""

    def __init__(self, root: str, projectid: str, shadow: str):
        self.root = root
        self.projectid = projectid
        self.shadow = shadow
        self.files: dict[str, Seen] = {}
        self.ready = False
        self.lock = asyncio.Lock()
        self.watcher: Watcher | None = None
        self.walks = 0  # whole-tree walks so far (a figure for the benchmark and the tests)

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None

    async def capture(self, blobs: Blobs, within: bool = False) -> list[Change]:
        """What changed since the last capture (everything, the first time). The first capture,
        and one `within` (what the person changed, before a command), keep contents only while
        the project's store is under its cap: the tree needs every content it keeps, so the cap
        could not remove them later. Raises GitError."""
        async with self.lock:
            reported = self.watcher.drain() if self.watcher is not None and self.ready else None
            if reported is not None and not reported:
                return []
            if reported is None or reported.incomplete or _ignore_file_changed(reported):
                listing = await git.unignored_files(self.root, self.shadow)
                watcher = Watcher.open(self.root) if listing is not None else None
                # The folders ignored whole are not watched; without a watcher, not asked for.
                ignored = await git.ignored_folders(self.root, self.shadow) if watcher is not None else []
                return await asyncio.to_thread(self._walk_all, blobs, listing, ignored or [], watcher, within)
            pathspecs = tuple(sorted({_glob_children(folder) for folder in reported.folders}
                                     | set(reported.created)))
            listed = await git.unignored_files(self.root, self.shadow, pathspecs) if pathspecs else []
            created = tuple(sorted(reported.created))
            ignored = await git.ignored_folders(self.root, self.shadow, created) if created else []
            return await asyncio.to_thread(self._walk_some, blobs, reported, listed or [], ignored or [], within)

    def absorb(self, blobs: Blobs, paths: Iterable[str]) -> None:
        """Take in files that Totem itself just changed, so no capture counts them again.
        Blocks."""
        if not self.ready:
            return
        for path in paths:
            seen = read_kept(blobs, self.projectid, self.root, path, spare=True)
            if seen is None:
                self.files.pop(path, None)
            else:
                self.files[path] = seen

    def digests(self) -> set[str]:
        return {seen.digest for seen in self.files.values() if seen.digest}

    def _walk_all(self, blobs: Blobs, listing: list[str] | None, ignored: list[str],
                  watcher: Watcher | None, within: bool = False) -> list[Change]:
        self.walks += 1
        if listing is None:  # no git: every file but those under .git
            listing = list(_plain_listing(self.root))
        listed = set(listing)
        folders: dict[str, bool] = {}
        first = not self.ready
        changes = [change for path in listing
                   if (change := self._look(blobs, path, folders=folders, within=within or first)) is not None]
        for path in [path for path in self.files if path not in listed]:
            changes.append(Change(path, self.files.pop(path), None))
        self._rewatch(set(ignored), watcher)
        self.ready = True
        if first:
            left = [seen for seen in self.files.values() if seen.note == OVER_LIMIT]
            if left:
                log.info("the first look at %s did not keep %d files (%d bytes): the snapshot store of the project "
                         "is at its limit of %d bytes (snapshotmb); an undo of their changes will say so",
                         self.root, len(left), sum(seen.size for seen in left), blobs.limit_bytes)
        return [] if first else changes

    def _walk_some(self, blobs: Blobs, reported, listed: list[str], ignored: list[str],
                   within: bool = False) -> list[Change]:
        listed_set = set(listed)
        candidates = set(listed)
        candidates.update(path for path in reported.files if path in self.files or path in listed_set)
        if reported.folders or reported.removed:
            removed = tuple(reported.removed)
            prefixes = tuple(gone + "/" for gone in removed)
            for path in self.files:
                if path.rpartition("/")[0] in reported.folders or path in reported.removed \
                        or (prefixes and path.startswith(prefixes)):
                    candidates.add(path)
        changes = []
        for path in sorted(candidates):
            if path not in self.files and path not in listed_set:
                continue  # reported, but ignored
            change = self._look(blobs, path, force=path in reported.files, within=within)
            if change is not None:
                changes.append(change)
        for removed in reported.removed:
            if self.watcher is not None:
                self.watcher.forget(removed)
        if self.watcher is not None:
            skipped = set(ignored)
            for folder in sorted(reported.created):
                if folder not in skipped:
                    for found in _folders(self.root, folder, skipped):
                        self.watcher.watch(found)
        return changes

    def _look(self, blobs: Blobs, path: str, force: bool = False,
              folders: dict[str, bool] | None = None, within: bool = False) -> Change | None:
        """Compare one file with what the last capture saw. Its stat alone is trusted only when
        the watcher did not report it and it was not changed just before the last look (two
        writes of the same size within one tick of the clock leave the same stat: git's "racily
        clean" files)."""
        known = self.files.get(path)
        info = _lstat_inside(self.root, path, folders)
        if info is None:
            if known is None:
                return None
            del self.files[path]
            return Change(path, known, None)
        if known is not None and not force and known.same_stat(info) and not known.racy:
            return None
        seen = read_kept(blobs, self.projectid, self.root, path, info, spare=True, within=within)
        if seen is None:
            if known is not None:
                del self.files[path]
                return Change(path, known, None)
            return None
        self.files[path] = seen
        if known is not None and known.digest and known.digest == seen.digest:
            return None  # touched, same content
        return Change(path, known, seen)

    def _rewatch(self, ignored: set[str], watcher: Watcher | None) -> None:
        """Watch every folder of the tree but `.git`, links and the folders ignored whole: a
        folder with no file kept yet (empty, or only ignored files) may get one later."""
        if self.watcher is not None:
            self.watcher.close()
        self.watcher = watcher
        if self.watcher is None:
            return
        for folder in _folders(self.root, "", ignored):
            self.watcher.watch(folder)


def _folders(root: str, top: str, ignored: set[str]) -> Iterable[str]:
    """`top` and the folders under it, relative, but `.git`, links and `ignored`."""
    yield top
    yield from (relative for relative, entry in _entries(root, top, ignored) if entry.is_dir(follow_symlinks=False))


def _entries(root: str, top: str, ignored: set[str]) -> Iterable[tuple[str, os.DirEntry]]:
    """Every entry under `top` with its relative path, never entering `.git`, a link or a
    folder of `ignored`."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(root, folder) if folder else root))
        except OSError:
            continue
        for entry in entries:
            relative = f"{folder}/{entry.name}" if folder else entry.name
            if entry.name == ".git" or relative in ignored:
                continue
            yield relative, entry
            if entry.is_dir(follow_symlinks=False):
                stack.append(relative)


def _glob_children(folder: str) -> str:
    return f":(glob){folder}/*" if folder else ":(glob)*"


def _ignore_file_changed(reported) -> bool:
    return any(path.rpartition("/")[2] == ".gitignore"
               for path in reported.files | reported.removed | reported.created)


def _plain_listing(root: str) -> Iterable[str]:
    """Every regular file of the tree but those under `.git` (when git cannot list it)."""
    return (relative for relative, entry in _entries(root, "", set()) if entry.is_file(follow_symlinks=False))


# -- the service of the agent and of the person's actions ---------------------------------

@dataclass(frozen=True)
class Scope:
    """Who makes a change: the session, its project and folder, the message and the part."""

    sessionid: str
    projectid: str
    root: str
    messageid: str | None
    partid: str | None
    tool: str


@dataclass
class Window:
    """A command being run: its changes are what the tree shows when it ends."""

    scope: Scope
    tree: Tree
    job: bool = False
    paths: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Prior:
    """A file's content before a tool changes it."""

    digest: str | None  # None: no file; NOT_KEPT with a note
    note: str = ""


@dataclass
class Restored:
    """What a restore did."""

    restored: list[str] = field(default_factory=list)
    conflicts: list[dict] = field(default_factory=list)  # {path, reason}
    lost: list[dict] = field(default_factory=list)  # {path, reason}
    kept: dict[str, str | None] = field(default_factory=dict)  # path -> what it replaced

    def to_json(self) -> dict:
        return {"restored": self.restored, "conflicts": self.conflicts, "lost": self.lost, "kept": self.kept}

    @classmethod
    def from_json(cls, data: dict) -> Restored:
        return cls(list(data["restored"]), list(data["conflicts"]), list(data["lost"]), dict(data["kept"]))


@dataclass
class RestorePlan:
    """A restore decided and not yet made: its journal (see Snapshots.plan_restore)."""

    done: Restored  # decided without a write: already there, conflicts, lost
    writes: list[dict]  # {path, want, replaced, temp}: the writes to make, in order

    def to_json(self) -> dict:
        return {"done": self.done.to_json(), "writes": self.writes}

    @classmethod
    def from_json(cls, data: dict) -> RestorePlan:
        return cls(Restored.from_json(data["done"]), list(data["writes"]))


class Snapshots:
    """The snapshots of every project of one Totem."""

    def __init__(self, store: Store, hub, data_dir: str, limit_bytes: int = DEFAULT_LIMIT_BYTES):
        self.store = store
        self.hub = hub
        self.folder = os.path.join(data_dir, SNAPSHOTS_DIR)
        self.blobs = Blobs(self.folder, limit_bytes)
        self._trees: dict[str, Tree] = {}  # by folder
        self._jobs: dict[str, list[Window]] = {}  # folder -> windows of running jobs
        self._tasks: set[asyncio.Task] = set()

    # -- file tools and Save as ---------------------------------------------------------

    def keep_before(self, projectid: str, root: str, paths: Iterable[str]) -> dict[str, Prior]:
        """Keep what each file is now, before a change (from a worker thread). Blocks."""
        priors = {}
        for path in paths:
            seen = read_kept(self.blobs, projectid, root, path)
            priors[path] = Prior(None) if seen is None else Prior(seen.digest, seen.note)
        return priors

    async def record_files(self, scope: Scope, priors: dict[str, Prior]) -> list[str]:
        """Record what a tool or Save as changed, from what the disk holds now; publishes
        diff.updated. Returns the paths that changed."""
        afters = await asyncio.to_thread(self._afters, scope, list(priors))
        rows = []
        for path, prior in priors.items():
            after, note = afters[path]
            if after == prior.digest and after != NOT_KEPT:
                continue
            rows.append(_row(scope, path, prior.digest, after, prior.note or note))
        await self._add(scope, rows)
        return [row["path"] for row in rows]

    def put_back(self, projectid: str, root: str, priors: dict[str, Prior]) -> list[str]:
        """Take back a tool's change whose record failed: each file as it was before (removed
        when there was none). Returns the paths that could not be put back. Blocks."""
        left = []
        for path, prior in priors.items():
            data = self.blobs.get(projectid, prior.digest) if prior.digest else None
            if prior.digest is not None and data is None:
                left.append(path)
                continue
            try:
                if disk_digest(root, path) != prior.digest:
                    _put_back(root, path, data)
            except (ToolError, boundary.BoundaryError):
                left.append(path)
        self._absorb(root, [path for path in priors if path not in left])
        return left

    def _afters(self, scope: Scope, paths: list[str]) -> dict[str, tuple[str | None, str]]:
        found: dict[str, tuple[str | None, str]] = {}
        for path in paths:
            seen = read_kept(self.blobs, scope.projectid, scope.root, path, spare=True)
            found[path] = (None, "") if seen is None else (seen.digest, seen.note)
        tree = self._trees.get(scope.root)
        if tree is not None:
            tree.absorb(self.blobs, paths)
        return found

    # -- commands -----------------------------------------------------------------------

    async def begin_command(self, scope: Scope, job: bool = False) -> Window:
        """Capture the tree before a command: what changed since the last capture was made
        by the person (nothing is recorded) or by a job still running (recorded for it)."""
        tree = self._tree(scope)
        changes = await tree.capture(self.blobs, within=True)
        running = self._jobs.get(scope.root)
        if changes and running:
            await self._record_changes(running[-1], changes)
        window = Window(scope, tree, job)
        if job:
            self._jobs.setdefault(scope.root, []).append(window)
        return window

    async def end_command(self, window: Window) -> list[str]:
        """Capture the tree after a command and record what differs for it."""
        try:
            changes = await window.tree.capture(self.blobs)
        finally:
            if window.job:
                running = self._jobs.get(window.scope.root, [])
                if window in running:
                    running.remove(window)
        await self._record_changes(window, changes)
        return window.paths

    def end_with(self, window: Window, task: asyncio.Task) -> None:
        """End a job's window when its task ends."""
        def ended(_task) -> None:
            follow = asyncio.get_running_loop().create_task(self._end_quietly(window))
            self._tasks.add(follow)
            follow.add_done_callback(self._tasks.discard)
        task.add_done_callback(ended)

    async def _end_quietly(self, window: Window) -> None:
        with contextlib.suppress(Exception):
            await self.end_command(window)

    async def _record_changes(self, window: Window, changes: list[Change]) -> None:
        rows = [_row(window.scope, change.path, _digest(change.before), _digest(change.after), _note(change))
                for change in changes]
        window.paths.extend(row["path"] for row in rows)
        await self._add(window.scope, rows)

    def _tree(self, scope: Scope) -> Tree:
        tree = self._trees.get(scope.root)
        if tree is None:
            shadow = os.path.join(self.blobs.project_folder(scope.projectid), SHADOW_DIR)
            tree = self._trees[scope.root] = Tree(scope.root, scope.projectid, shadow)
        return tree

    async def _add(self, scope: Scope, rows: list[SnapshotChange]) -> None:
        if not rows:
            return
        await self.store.add_snapshots(rows)
        self.hub.publish(DiffUpdated.of(scope.sessionid, [row["path"] for row in rows]))
        await self.enforce_limit(scope.projectid)

    async def enforce_limit(self, projectid: str) -> None:
        if await asyncio.to_thread(self.blobs.size, projectid) <= self.blobs.limit_bytes:
            return  # under the cap: no need to know what is needed
        needed = await self.store.snapshot_digests(projectid)
        wanted: set[str] = set()
        for tree in self._trees.values():
            if tree.projectid == projectid:
                wanted |= tree.digests()
        await asyncio.to_thread(self.blobs.enforce_limit, projectid, needed, frozenset(wanted))

    # -- restoring ----------------------------------------------------------------------

    def plan_restore(self, projectid: str, root: str, targets: list[dict], force: bool) -> RestorePlan:
        """Decide how to put each `{path, want, expect}` back, touching no file of the project:
        `want` is the content to restore (None: no file), `expect` what Totem left there. A file
        that holds something else is a conflict (restored anyway with `force`); what a write
        will replace is kept first (`replaced`, for redo and for completing it after a kill),
        and each write gets its temporary file's name, so that the plan is a journal. Blocks."""
        done = Restored()
        writes: list[dict] = []
        for target in targets:
            path, want, expect = target["path"], target["want"], target["expect"]
            now = disk_digest(root, path)
            if now == want and want != NOT_KEPT:
                done.restored.append(path)
                done.kept[path] = now
                continue
            if now != expect and not force:
                done.conflicts.append({"path": path, "reason": _conflict_reason(now, expect)})
                continue
            if want == NOT_KEPT:
                done.lost.append({"path": path, "reason": "its earlier content was not kept"})
                continue
            if want is not None and not self.blobs.has(projectid, want):
                done.lost.append({"path": path, "reason": LOST_TO_CAP})
                continue
            seen = read_kept(self.blobs, projectid, root, path)
            if seen is not None and seen.digest == NOT_KEPT:
                done.lost.append({"path": path, "reason": f"what it holds now is {seen.note}, so "
                                  "it would be lost: not restored"})
                continue
            writes.append({"path": path, "want": want, "replaced": seen.digest if seen is not None else None,
                           "temp": file_io.new_temp_name() if want is not None else None})
        return RestorePlan(done, writes)

    def apply_restore(self, projectid: str, root: str, plan: RestorePlan) -> Restored:
        """Make the writes of a plan; what it did, with what the plan decided. Blocks."""
        done = plan.done
        for write in plan.writes:
            self._put(projectid, root, write, done)
        self._absorb(root, done.restored)
        return done

    def complete_restore(self, projectid: str, root: str, plan: RestorePlan) -> Restored:
        """After a kill during `apply_restore`: each write of the plan is found done (the file
        has what it wants), made (the file still has what the write was to replace) or, when
        the file holds a third content, left as it is and listed as a conflict. The writes'
        temporary files are removed. Blocks."""
        done = plan.done
        folders = set()
        for write in plan.writes:
            with contextlib.suppress(boundary.BoundaryError):
                folders.add(os.path.dirname(boundary.resolve_inside(root, write["path"])))
        for folder in folders:
            file_io.remove_temp_files(folder)
        for write in plan.writes:
            path = write["path"]
            now = disk_digest(root, path)
            if now == write["want"]:
                done.restored.append(path)
                done.kept[path] = write["replaced"]
            elif now == write["replaced"]:
                self._put(projectid, root, write | {"temp": None}, done)  # a fresh temporary name
            else:
                done.conflicts.append({"path": path, "reason": "changed while Totem was stopped"})
        self._absorb(root, done.restored)
        return done

    def _put(self, projectid: str, root: str, write: dict, done: Restored) -> None:
        path, want = write["path"], write["want"]
        data = self.blobs.get(projectid, want) if want is not None else None
        if want is not None and data is None:
            done.lost.append({"path": path, "reason": LOST_TO_CAP})
            return
        try:
            _put_back(root, path, data, write.get("temp"))
        except (ToolError, boundary.BoundaryError) as exc:
            done.conflicts.append({"path": path, "reason": str(exc)})
            return
        done.restored.append(path)
        done.kept[path] = write["replaced"]

    def _absorb(self, root: str, paths: list[str]) -> None:
        tree = self._trees.get(root)
        if tree is not None:
            tree.absorb(self.blobs, paths)

    # -- reading ------------------------------------------------------------------------

    def file_diff(self, projectid: str, root: str, path: str, first: str | None) -> dict | None:
        """`{path, status, additions, deletions, patch}` from `first` (the content before the
        session's first change of the file) to the disk now; None when they are the same.
        Blocks."""
        now_digest = disk_digest(root, path)
        if now_digest == first and first != NOT_KEPT:
            return None
        status = "added" if first is None else "deleted" if now_digest is None else "modified"
        before = self.blobs.get(projectid, first) if first else b"" if first is None else None
        after = b""
        if now_digest:
            try:
                with open(os.path.join(root, path), "rb", opener=_no_follow) as stream:
                    after = stream.read(MAX_FILE_BYTES + 1)
            except OSError:
                after = b""
        if before is None or now_digest == NOT_KEPT:
            return {"path": path, "status": status, "additions": 0, "deletions": 0,
                    "patch": "", "note": "the content is not kept (too big, a secret file or hard-linked)"}
        return {"path": path, "status": status, **unified_diff(path, before, after if now_digest else None,
                                                                created=first is None)}

    def start(self) -> None:
        """At start: remove, in the background, what a kill left half-written in the store."""
        task = asyncio.get_running_loop().create_task(self._remove_temps(), name="snapshot temps")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _remove_temps(self) -> None:
        removed = await asyncio.to_thread(self.blobs.remove_temps)
        if removed:
            log.info("removed %d temporary files a stop left in %s", removed, self.folder)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for tree in self._trees.values():
            tree.close()
        self._trees.clear()

    def forget_project(self, projectid: str) -> None:
        """Drop the trees and the kept content of a removed project. Blocks."""
        for root in [root for root, tree in self._trees.items() if tree.projectid == projectid]:
            self._trees.pop(root).close()
        self.blobs.drop_project(projectid)


def unified_diff(path: str, before: bytes | None, after: bytes | None, *, created: bool = False) -> dict:
    """`{additions, deletions, patch}`: the unified diff of one file (None: no file), as git
    prints it for a text file, "Binary files differ" for binary content."""
    old = before or b""
    new = after or b""
    if b"\0" in old[:8192] or b"\0" in new[:8192]:
        return {"additions": 0, "deletions": 0, "patch": f"Binary files a/{path} and b/{path} differ\n"}
    old_lines = old.decode("utf-8", "replace").splitlines(keepends=True)
    new_lines = new.decode("utf-8", "replace").splitlines(keepends=True)
    lines = list(difflib.unified_diff(old_lines, new_lines, "/dev/null" if created or before is None else f"a/{path}",
                                      "/dev/null" if after is None else f"b/{path}", n=DIFF_CONTEXT_LINES))
    additions = deletions = 0
    out = []
    size = 0
    cut = False
    for line in lines:
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        if line.startswith("+") and not line.startswith("+++"):
            additions += 1
        elif line.startswith("-") and not line.startswith("---"):
            deletions += 1
        if size + len(line) > MAX_PATCH_BYTES:
            cut = True
            continue
        size += len(line)
        out.append(line)
    patch = "".join(out)
    if cut:
        patch += f"[the diff is cut at {MAX_PATCH_BYTES} bytes]\n"
    return {"additions": additions, "deletions": deletions, "patch": patch}


def planned_diff(planned: file_io.Planned) -> dict:
    """`{path, status, additions, deletions, patch}` of a change a tool would make."""
    status = "added" if planned.before is None else "deleted" if planned.after is None else "modified"
    if boundary.is_protected_env(planned.path):
        return {"path": planned.path, "status": status, "additions": 0, "deletions": 0, "patch": "",
                "note": "a protected secret file: its content is not shown"}
    return {"path": planned.path, "status": status,
            **unified_diff(planned.path, planned.before, planned.after, created=planned.before is None)}


def _put_back(root: str, path: str, data: bytes | None, temp: str | None = None) -> None:
    absolute = boundary.resolve_for_write(root, path)
    if absolute != os.path.join(root, path):
        raise ToolError(f"{path} leads through a symbolic link now; not restored")
    if data is None:
        if os.path.lexists(absolute):
            file_io.remove_file(root, absolute, path)
        return
    created: list[str] = []
    file_io.write_atomic(root, absolute, data, path, created=created, temp=temp)


def _conflict_reason(now: str | None, expect: str | None) -> str:
    if now is None:
        return "removed since Totem changed it"
    if expect is None:
        return "a file was put there since Totem removed it"
    return "changed since Totem changed it"


def _note(change: Change) -> str:
    return " / ".join(dict.fromkeys(seen.note for seen in (change.before, change.after) if seen and seen.note))


def _digest(seen: Seen | None) -> str | None:
    return None if seen is None else seen.digest


def _row(scope: Scope, path: str, before: str | None, after: str | None, note: str) -> SnapshotChange:
    return {"sessionid": scope.sessionid, "messageid": scope.messageid, "partid": scope.partid,
            "path": path, "before": before, "after": after, "tool": scope.tool, "note": note}
