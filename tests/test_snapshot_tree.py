"""The tree capture of commands, differentially: what a capture reports against what the disk
holds, over thousands of generated file operations, with inotify and with the walk.

After each batch of operations (create, overwrite with the same size, append, delete, rename a
file or a folder, remove a folder, make ignored files, links, modes), the capture must report
exactly the files whose content appeared, changed or went since the last capture, and its
picture of the tree must equal the disk: every file that git's ignore rules keep, with the hash
of its content. A miss here is a bash-made change that undo could not take back.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import shutil
import tempfile
import unittest
from unittest import mock

from totem.workspace import git
from totem.workspace.snapshots import Blobs, Tree

BATCHES = 150
SEED = int(os.environ.get("TOTEM_TREE_SEED", "1912"))
IGNORED = ("*.log", "build/")
FIGURES: list[str] = []  # printed at the end of the run (conftest.py)


def truth(root: str, listing: list[str]) -> dict[str, str]:
    found = {}
    for path in listing:
        absolute = os.path.join(root, path)
        if os.path.islink(absolute) or not os.path.isfile(absolute):
            continue
        if os.path.realpath(os.path.dirname(absolute)) != os.path.dirname(absolute):
            continue
        with open(absolute, "rb") as stream:
            found[path] = hashlib.sha256(stream.read()).hexdigest()
    return found


class Operations:
    """Random changes to a tree, each a thing a command does."""

    def __init__(self, root: str, rng: random.Random):
        self.root = root
        self.rng = rng
        self.count = 0

    def files(self) -> list[str]:
        found = []
        for folder, dirs, names in os.walk(self.root):
            dirs[:] = [d for d in dirs if d != ".git"]
            found += [os.path.relpath(os.path.join(folder, name), self.root) for name in names]
        return [path for path in found if os.path.isfile(os.path.join(self.root, path))
                and not os.path.islink(os.path.join(self.root, path))]

    def folders(self) -> list[str]:
        found = [""]
        for folder, dirs, _names in os.walk(self.root):
            dirs[:] = [d for d in dirs if d != ".git"]
            found += [os.path.relpath(os.path.join(folder, d), self.root) for d in dirs]
        return [f for f in found if not os.path.islink(os.path.join(self.root, f))]

    def content(self) -> bytes:
        return os.urandom(self.rng.randint(0, 64)).hex().encode()

    def write(self, path: str, data: bytes) -> None:
        absolute = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(absolute), exist_ok=True)
        with open(absolute, "wb") as stream:
            stream.write(data)

    def one(self) -> None:
        self.count += 1
        rng = self.rng
        files = self.files()
        kind = rng.choice(["create", "create", "same-size", "append", "delete", "rename", "rename-folder",
                           "remove-folder", "ignored", "link", "chmod", "new-folder-file"])
        if kind in ("same-size", "append", "delete", "rename", "chmod", "link") and not files:
            kind = "create"
        if kind == "create":
            folder = rng.choice(self.folders())
            self.write(os.path.join(folder, f"f{rng.randrange(1000)}.txt"), self.content())
        elif kind == "new-folder-file":
            self.write(os.path.join(rng.choice(self.folders()), f"d{rng.randrange(100)}",
                                    f"e{rng.randrange(100)}", "g.txt"), self.content())
        elif kind == "same-size":  # the stat may not change within one tick of the clock
            path = rng.choice(files)
            with open(os.path.join(self.root, path), "rb") as stream:
                size = len(stream.read())
            self.write(path, bytes(rng.choice(b"abcdef") for _ in range(size)))
        elif kind == "append":
            with open(os.path.join(self.root, rng.choice(files)), "ab") as stream:
                stream.write(self.content() + b"+")
        elif kind == "delete":
            os.unlink(os.path.join(self.root, rng.choice(files)))
        elif kind == "rename":
            source = rng.choice(files)
            target = os.path.join(rng.choice(self.folders()), f"r{rng.randrange(1000)}.txt")
            if not os.path.isdir(os.path.join(self.root, target)):
                os.replace(os.path.join(self.root, source), os.path.join(self.root, target))
        elif kind == "rename-folder":
            folders = [f for f in self.folders() if f]
            if folders:
                source = rng.choice(folders)
                target = f"m{rng.randrange(1000)}"
                if not os.path.exists(os.path.join(self.root, target)):
                    os.rename(os.path.join(self.root, source), os.path.join(self.root, target))
        elif kind == "remove-folder":
            folders = [f for f in self.folders() if f]
            if folders:
                shutil.rmtree(os.path.join(self.root, rng.choice(folders)))
        elif kind == "ignored":
            place = rng.choice(self.folders())
            self.write(os.path.join(place, rng.choice(["x.log", os.path.join("build", "out.txt")])), self.content())
        elif kind == "link":
            name = os.path.join(self.root, f"l{rng.randrange(100)}")
            if not os.path.lexists(name):
                os.symlink(os.path.join(self.root, rng.choice(files)), name)
        elif kind == "chmod":
            os.chmod(os.path.join(self.root, rng.choice(files)), rng.choice([0o644, 0o755, 0o600]))


class TreeDifferentialTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.tmp = tempfile.mkdtemp(prefix="totem-tree-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.root = os.path.realpath(os.path.join(self.tmp, "project"))
        os.makedirs(self.root)
        with open(os.path.join(self.root, ".gitignore"), "w") as stream:
            stream.write("\n".join(IGNORED) + "\n")
        self.shadow = os.path.join(self.tmp, "shadow.git")
        self.blobs = Blobs(os.path.join(self.tmp, "blobs"))

    async def differential(self, label: str, watched: bool) -> None:
        rng = random.Random(SEED + watched)
        operations = Operations(self.root, rng)
        for _ in range(20):
            operations.one()
        tree = Tree(self.root, "p1", self.shadow)
        self.addCleanup(tree.close)
        with mock.patch("totem.workspace.snapshots.Watcher.open", return_value=None) if not watched else _nothing():
            self.assertEqual(await tree.capture(self.blobs), [])  # the first capture is the baseline
            if watched:
                self.assertIsNotNone(tree.watcher, "inotify is not available here")
            before = truth(self.root, await git.unignored_files(self.root, self.shadow))
            misses = []
            for batch in range(BATCHES):
                for _ in range(rng.randint(1, 4)):
                    operations.one()
                changes = await tree.capture(self.blobs)
                after = truth(self.root, await git.unignored_files(self.root, self.shadow))
                expected = {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
                reported = {change.path for change in changes}
                picture = {path: seen.digest for path, seen in tree.files.items()}
                if reported != expected or picture != after:
                    misses.append(f"batch {batch}: missed {sorted(expected - reported)}, extra "
                                  f"{sorted(reported - expected)}, picture differs at "
                                  f"{sorted(set(picture.items()) ^ set(after.items()))[:4]}")
                    tree.files = {}  # start again from the truth, to find the next miss
                    tree.ready = False
                    await tree.capture(self.blobs)
                for change in changes:  # what a change recorded can be restored from
                    if change.before is not None and change.before.digest:
                        self.assertIsNotNone(self.blobs.get("p1", change.before.digest), change.path)
                before = after
        FIGURES.append(f"tree differential ({label}): {BATCHES} batches, {operations.count} operations, "
                      f"{tree.walks} whole-tree walks, {len(misses)} misses")
        self.maxDiff = None
        self.assertEqual(misses, [])

    async def test_watched_captures_match_the_disk(self):
        """With inotify: every change of every batch reported, the picture equal to the disk."""
        await self.differential("inotify", watched=True)

    async def test_walked_captures_match_the_disk(self):
        """Without inotify (the walk): the same."""
        await self.differential("walk", watched=False)

    async def test_nothing_changed_costs_no_walk(self):
        """With inotify, captures with nothing changed do not walk the tree again."""
        Operations(self.root, random.Random(1)).one()
        tree = Tree(self.root, "p1", self.shadow)
        self.addCleanup(tree.close)
        await tree.capture(self.blobs)
        if tree.watcher is None:
            self.skipTest("inotify is not available here")
        for _ in range(20):
            self.assertEqual(await tree.capture(self.blobs), [])
        self.assertEqual(tree.walks, 1)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    asyncio.run(unittest.main())
