"""The cost of the tree captures that bracket a command (totem/workspace/snapshots.py), on a project of
20,000 files: the issue's target is that a step that changes nothing adds under 50 ms.

A temporary project is written: 20,000 small source files of distinct content in 200 folders,
a git repository (`git init`, nothing committed: the listing does not need commits) whose
`.gitignore` ignores `node_modules/`, `build/` and `*.log`, and 1,100 ignored files under those.
The real `Snapshots` runs in this process against a real sqlite store (the session, message and
part rows exist, since snapshot rows name them) and a hub that drops what it is given.

Figures:
- the first capture (`begin_command` on a tree never seen): git lists the files, every file is
  read, hashed, compressed and stored, and each folder gets an inotify watch;
- a step that changes nothing (`begin_command` then `end_command`, nothing in between), median
  and p95 over STEPS steps: with inotify, the normal path, against the target; then with the
  watcher disabled (`Watcher.open` patched to give None for that project), so each capture runs
  `git ls-files` and lstats every file: the fallback where inotify is missing;
- a step that changes one file (the command is simulated by rewriting one file between
  `begin_command` and `end_command`): median; the benchmark fails if `end_command` does not
  report exactly that file;
- the snapshot store after the first capture, on disk (allocated blocks, the shadow repository
  git lists with included) and in bytes of compressed content, next to the project's files.

Timings come from `time.perf_counter()` around the awaited calls and are printed, never
asserted. The temporary folder is removed whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from totem.store import Store
from totem.workspace import snapshots as snapshots_module
from totem.workspace.snapshots import SHADOW_DIR, Scope, Snapshots

FOLDERS = 200  # 20 packages of 10 modules each
FILES_PER_FOLDER = 100
IGNORED_FOLDERS = 50  # under node_modules/
IGNORED_PER_FOLDER = 20
STEPS = 30  # no-change steps with inotify, and one-file steps
WALK_STEPS = 10  # no-change steps without inotify (each lists and lstats the whole tree)
TARGET_MS = 50.0
GITIGNORE = "node_modules/\nbuild/\n*.log\n"


class _NoHub:
    def publish(self, event) -> None:
        pass


def _source(folder: int, index: int) -> str:
    """A small Python file, distinct from every other (so that each is stored once)."""
    name = f"f{folder:03d}_{index:03d}"
    body = "".join(f"    total += {line} * {folder} + {index}\n" for line in range(8 + index % 24))
    return (f'"""Module {name} of the benchmark project."""\n\n\n'
            f"def {name}(value: int) -> int:\n    total = value\n{body}    return total\n")


def build_project(root: str) -> tuple[list[str], list[str]]:
    """Write the project; returns (files git should list, ignored files)."""
    listed, ignored = [".gitignore"], []
    os.makedirs(root)
    subprocess.run(["git", "init", "--quiet", root], check=True)
    with open(os.path.join(root, ".gitignore"), "w") as stream:
        stream.write(GITIGNORE)
    for folder in range(FOLDERS):
        relative = f"src/pkg{folder // 10:02d}/mod{folder % 10}"
        os.makedirs(os.path.join(root, relative))
        for index in range(FILES_PER_FOLDER):
            path = f"{relative}/f{index:03d}.py"
            with open(os.path.join(root, path), "w") as stream:
                stream.write(_source(folder, index))
            listed.append(path)
    for folder in range(IGNORED_FOLDERS):
        relative = f"node_modules/dep{folder:02d}/lib"
        os.makedirs(os.path.join(root, relative))
        for index in range(IGNORED_PER_FOLDER):
            path = f"{relative}/i{index:02d}.js"
            with open(os.path.join(root, path), "w") as stream:
                stream.write(f"module.exports = {folder * 100 + index};\n")
            ignored.append(path)
    os.makedirs(os.path.join(root, "build"))
    for index in range(50):
        for path in (f"build/out{index:02d}.o", f"src/pkg{index % 20:02d}/run{index:02d}.log"):
            with open(os.path.join(root, path), "w") as stream:
                stream.write(f"ignored {index}\n" * 20)
            ignored.append(path)
    return listed, ignored


def folder_bytes(top: str) -> tuple[int, int, int]:
    """(files, bytes of content, bytes allocated on disk) of every file under `top`."""
    files = content = disk = 0
    for folder, _dirs, names in os.walk(top):
        for name in names:
            info = os.lstat(os.path.join(folder, name))
            files += 1
            content += info.st_size
            disk += info.st_blocks * 512
    return files, content, disk


def files_bytes(root: str, paths: list[str]) -> tuple[int, int]:
    content = disk = 0
    for path in paths:
        info = os.lstat(os.path.join(root, path))
        content += info.st_size
        disk += info.st_blocks * 512
    return content, disk


def median_p95(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    rank = max(0, -(-len(ordered) * 95 // 100) - 1)  # nearest rank
    return statistics.median(ordered), ordered[rank]


@contextlib.contextmanager
def watcher_disabled(root: str):
    """`Watcher.open` gives None for the tree at `root` (as where inotify is missing)."""
    watcher = snapshots_module.Watcher
    real_open = watcher.__dict__["open"]

    def open_unless_root(cls, folder: str):
        return None if folder == root else real_open.__func__(cls, folder)
    watcher.open = classmethod(open_unless_root)
    try:
        yield
    finally:
        watcher.open = real_open


async def _steps(snaps: Snapshots, scope: Scope, count: int) -> list[float]:
    """Milliseconds of `count` steps that change nothing; raises if one reports a change."""
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        window = await snaps.begin_command(scope)
        paths = await snaps.end_command(window)
        samples.append((time.perf_counter() - started) * 1000)
        if paths:
            raise RuntimeError(f"a step that changed nothing reported {paths[:5]}")
    return samples


async def _measure(folder: str) -> list[tuple]:
    root = os.path.join(folder, "project")
    data = os.path.join(folder, "data")
    listed, ignored = build_project(root)
    rows = []
    store = Store(data)
    await store.open()
    snaps = walk_snaps = None
    try:
        project, _ = await store.open_project(root, "bench")
        session = await store.create_session(project["id"], "bench")
        message = await store.add_message(session["id"], "assistant")
        part = await store.add_part(message["id"], session["id"], "tool", "running")
        scope = Scope(session["id"], project["id"], root, message["id"], part["id"], "bash")
        snaps = Snapshots(store, _NoHub(), data)

        # 1. the first capture
        started = time.perf_counter()
        window = await snaps.begin_command(scope)
        first_s = time.perf_counter() - started
        await snaps.end_command(window)
        tree = snaps._trees[root]
        kept = set(tree.files)
        if kept != set(listed):
            raise RuntimeError(f"the tree holds {len(kept)} files, {len(set(listed) - kept)} of the "
                               f"project missing and {len(kept - set(listed))} not expected "
                               f"(e.g. {sorted(kept ^ set(listed))[:3]})")
        watched = tree.watcher is not None
        rows.append((f"snapshots: first capture of {len(listed):,} files in {FOLDERS} folders "
                     f"({len(ignored):,} ignored left out)", first_s, "s", "", None))

        # 5. the store after the first capture
        project_content, project_disk = files_bytes(root, listed)
        blobs_top = snaps.blobs.project_folder(project["id"])
        store_files, _content, store_disk = folder_bytes(blobs_top)
        packed = snaps.blobs.size(project["id"])
        _shadow_files, _shadow_content, shadow_disk = folder_bytes(os.path.join(blobs_top, SHADOW_DIR))
        rows.append((f"snapshots: store after the first capture, on disk ({store_files:,} files; "
                     f"{packed / 1e6:.1f} MB of compressed content, shadow repo "
                     f"{shadow_disk / 1e6:.2f} MB)",
                     store_disk / 1e6, "MB", "", None))
        rows.append((f"snapshots: the project's {len(listed):,} files, on disk "
                     f"({project_content / 1e6:.1f} MB of content)", project_disk / 1e6, "MB", "", None))

        # 2. a step that changes nothing, with inotify
        walks = tree.walks
        median, p95 = median_p95(await _steps(snaps, scope, STEPS))
        how = "inotify" if watched else "NO inotify here: walking"
        extra = tree.walks - walks
        label = f"snapshots: step changing nothing, {how} ({STEPS} steps, {extra} walks)"
        rows.append((f"{label}: median", median, "ms", f"< {TARGET_MS:g} ms", median < TARGET_MS))
        rows.append((f"{label}: p95", p95, "ms", f"< {TARGET_MS:g} ms", p95 < TARGET_MS))

        # 4. a step that changes one file, with inotify
        target = listed[len(listed) // 2]
        samples = []
        for step in range(STEPS):
            started = time.perf_counter()
            window = await snaps.begin_command(scope)
            with open(os.path.join(root, target), "a") as stream:  # the command
                stream.write(f"# step {step}\n")
            paths = await snaps.end_command(window)
            samples.append((time.perf_counter() - started) * 1000)
            if paths != [target]:
                raise RuntimeError(f"a step that changed {target} reported {paths[:5]}")
        median, p95 = median_p95(samples)
        rows.append((f"snapshots: step changing one file, {how} ({STEPS} steps, each reported "
                     f"{target}): median", median, "ms", "", None))

        # 3. a step that changes nothing, without inotify
        await snaps.close()  # its watches are not needed any more
        with watcher_disabled(root):
            walk_snaps = Snapshots(store, _NoHub(), data)
            window = await walk_snaps.begin_command(scope)  # its own first capture
            await walk_snaps.end_command(window)
            walk_tree = walk_snaps._trees[root]
            if walk_tree.watcher is not None:
                raise RuntimeError("the watcher could not be disabled")
            walks = walk_tree.walks
            median, p95 = median_p95(await _steps(walk_snaps, scope, WALK_STEPS))
            extra = walk_tree.walks - walks
        label = (f"snapshots: step changing nothing, no inotify (git ls-files + lstat all; "
                 f"{WALK_STEPS} steps, {extra} walks)")
        rows.append((f"{label}: median", median, "ms", "", None))
        rows.append((f"{label}: p95", p95, "ms", "", None))
    finally:
        for each in (snaps, walk_snaps):
            if each is not None:
                await each.close()
        await store.close()
    return rows


def main() -> list[tuple]:
    with tempfile.TemporaryDirectory(prefix="totem-bench-snapshots-") as folder:
        return asyncio.run(_measure(folder))


if __name__ == "__main__":
    for row in main():
        print(row)
