"""Which files of a folder changed since the last look: Linux inotify, read without blocking.

A snapshot of the tree before and after each command must not cost a walk of every file: on a
project of 20,000 files a walk stats 20,000 files, twice per command. A watch on each folder
of the tree tells instead which names changed; a look with nothing new costs one read(2) that
finds the queue empty.

Owns the inotify descriptor and the watches (one per folder, by its path relative to the root).
`drain()` answers what changed since the last drain: names whose content or metadata changed,
folders whose entries changed (something created, removed or renamed in them), folders that
were created, and whether the answer is incomplete (the kernel's queue overflowed, a watched
folder was moved, a watch could not be added), after which the caller walks the whole tree.

Where inotify is missing (not Linux, no libc, a sandbox without it) `Watcher.open()` gives
None and the caller walks. An honest limit: a change made through a hard link from outside
the tree, or by writing through a memory map, may not be reported.

Must not: read files, decide what is ignored, or block (the descriptor is non-blocking).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from dataclasses import dataclass, field

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_DONT_FOLLOW = 0x2000000
IN_EXCL_UNLINK = 0x4000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

CONTENT = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE
ENTRIES = IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
WATCH_MASK = CONTENT | ENTRIES | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK
_EVENT = struct.Struct("iIII")
READ_BYTES = 256 * 1024


@dataclass
class Changes:
    """What a drain found, relative to the root with `/` ("" is the root)."""

    files: set[str] = field(default_factory=set)  # a name whose content or metadata changed
    folders: set[str] = field(default_factory=set)  # a folder whose entries changed
    created: set[str] = field(default_factory=set)  # a folder created or moved in
    removed: set[str] = field(default_factory=set)  # a name removed or moved away
    incomplete: bool = False  # walk the whole tree: the answer may miss something

    def __bool__(self) -> bool:
        return bool(self.files or self.folders or self.created or self.removed or self.incomplete)


class Watcher:
    """The watches on the folders of one tree."""

    def __init__(self, libc, fd: int, root: str):
        self._libc = libc
        self.fd = fd
        self.root = root
        self._paths: dict[int, str] = {}  # watch descriptor -> folder relative to the root
        self._watched: dict[str, int] = {}
        self._lost = False  # a watch could not be added, or one went stale

    @classmethod
    def open(cls, root: str) -> Watcher | None:
        """A watcher for the tree at `root`, or None where inotify is not available."""
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            init = libc.inotify_init1
        except (OSError, AttributeError):
            return None
        fd = init(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            return None
        return cls(libc, fd, root)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._paths.clear()
        self._watched.clear()

    def watching(self, folder: str) -> bool:
        return folder in self._watched

    def watch(self, folder: str) -> bool:
        """Watch one folder (relative, "" the root); False when it cannot be watched (gone, or
        the system's limit of watches is reached: the next drain is then incomplete)."""
        if folder in self._watched:
            return True
        absolute = os.path.join(self.root, folder) if folder else self.root
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(absolute), WATCH_MASK)
        if wd < 0:
            if ctypes.get_errno() in (errno.ENOSPC, errno.ENOMEM):
                self._lost = True
            return False
        old = self._paths.get(wd)
        if old is not None:  # the same folder under another name: it was moved
            self._watched.pop(old, None)
            self._lost = True
        self._paths[wd] = folder
        self._watched[folder] = wd
        return True

    def forget(self, folder: str) -> None:
        """Stop watching a folder and every folder under it."""
        prefix = folder + "/"
        for name in [name for name in self._watched if name == folder or name.startswith(prefix)]:
            wd = self._watched.pop(name)
            self._paths.pop(wd, None)
            self._libc.inotify_rm_watch(self.fd, wd)

    def drain(self) -> Changes:
        """Everything reported since the last drain."""
        found = Changes(incomplete=self._lost)
        self._lost = False
        while True:
            try:
                data = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                break
            except OSError:
                found.incomplete = True
                break
            if not data:
                break
            self._parse(data, found)
        return found

    def _parse(self, data: bytes, found: Changes) -> None:
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            offset += _EVENT.size
            name = os.fsdecode(data[offset:offset + length].rstrip(b"\0"))
            offset += length
            if mask & IN_Q_OVERFLOW:
                found.incomplete = True
                continue
            folder = self._paths.get(wd)
            if folder is None:
                continue
            if mask & IN_IGNORED:
                self._paths.pop(wd, None)
                if self._watched.get(folder) == wd:
                    del self._watched[folder]
                continue
            if mask & IN_MOVE_SELF:
                found.incomplete = True  # its path, and its watches' paths, are stale now
                continue
            if mask & IN_DELETE_SELF:
                continue
            path = f"{folder}/{name}" if folder and name else name or folder
            if mask & ENTRIES:
                found.folders.add(folder)
                if mask & (IN_DELETE | IN_MOVED_FROM):
                    found.removed.add(path)
                if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                    found.created.add(path)
                elif not mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                    found.files.add(path)
            if mask & CONTENT and not mask & IN_ISDIR:
                found.files.add(path)
