"""How a confined child is started and ended: the mechanics under sandbox.py's policy.

Owns the thread that holds the Landlock domain refusing Totem's port (`ConfinedLoop`, whose
children inherit the domain), the pids cgroup of each command (made with its limit, the child
put in it while bwrap waits on a pipe, what is left in it killed, then removed), the pipes bwrap
reports its child on and waits on, and the removal of temp folders.

Must not: decide what a command may reach (sandbox.py does), or start a process but through the
runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import stat
import sys
import threading

from totem.process import runner
from totem.security import confine

log = logging.getLogger("totem.sandbox")

CGROUP_END_TIMEOUT_S = 5.0
CGROUP_POLL_S = 0.02
INFO_TIMEOUT_S = 20.0  # for bwrap to say which child it made

class ConfinedLoop:
    """An event loop in a thread of its own that holds the Landlock domain refusing Totem's
    port: a command forked from it inherits the domain, where making one per command would
    cost some 20 ms (the kernel copies its 65,534 port rules). It only starts and watches
    confined commands (runner.Launch.spawner); nothing else runs on it."""

    def __init__(self, ruleset: int) -> None:
        self.ruleset = ruleset
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.problem = ""

    async def start(self) -> bool:
        """Start the thread and enforce the ruleset on it; False (and `problem`) when the
        kernel refuses."""
        ready = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(ready,), name="totem-sandbox-spawner", daemon=True)
        self.thread.start()
        await asyncio.to_thread(ready.wait)
        return self.loop is not None

    def _main(self, ready: threading.Event) -> None:
        try:
            confine.restrict_this_thread(self.ruleset)
        except OSError as exc:
            self.problem = str(exc)
            ready.set()
            return
        loop = asyncio.new_event_loop()
        self.loop = loop
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def run(self, work):
        """Run `work()` (a coroutine function) on this loop and return what it returns (or
        raise what it raises). Cancelling the caller cancels it there and waits until it has
        ended (the child's group stopped), then re-raises."""
        assert self.loop is not None
        here = asyncio.get_running_loop()
        ended = here.create_future()
        tasks: list[asyncio.Task] = []

        def begin() -> None:  # on this loop's thread
            task = asyncio.ensure_future(work())
            tasks.append(task)
            task.add_done_callback(lambda task: here.call_soon_threadsafe(settle, ended, task))

        self.loop.call_soon_threadsafe(begin)
        try:
            return await asyncio.shield(ended)
        except asyncio.CancelledError:
            # After `begin` on the same queue: the task exists when this runs.
            self.loop.call_soon_threadsafe(lambda: tasks and tasks[0].cancel())
            while not ended.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(ended)
            if not ended.cancelled():
                ended.exception()  # retrieved: the cancellation is what goes on
            raise

    async def stop(self) -> None:
        if self.loop is not None and self.thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            await asyncio.to_thread(self.thread.join)


def settle(future: asyncio.Future, task: asyncio.Task) -> None:
    """Give `future` the outcome of a finished task of another loop."""
    if future.done():
        return
    if task.cancelled():
        future.cancel()
    elif task.exception() is not None:
        future.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        future.set_result(task.result())


def find_pids_hierarchy(limit: int) -> tuple[str | None, str]:
    """The pids hierarchy where this process can make a cgroup with pids.max: cgroup v1's
    /sys/fs/cgroup/pids, or v2's /sys/fs/cgroup with the pids controller."""
    problems = []
    for hierarchy in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
        if not os.path.exists(os.path.join(hierarchy, "cgroup.procs")):
            continue
        if hierarchy == "/sys/fs/cgroup":
            try:
                with open(os.path.join(hierarchy, "cgroup.controllers"), encoding="ascii") as handle:
                    if "pids" not in handle.read().split():
                        problems.append("cgroup v2 has no pids controller here")
                        continue
                with open(os.path.join(hierarchy, "cgroup.subtree_control"), "w", encoding="ascii") as handle:
                    handle.write("+pids")
            except OSError as exc:
                problems.append(f"{hierarchy}: {exc.strerror}")
                continue
        try:
            path, fd = make_cgroup(hierarchy, f"totem-{os.getpid()}-probe", limit)
            os.close(fd)
            os.rmdir(path)
        except OSError as exc:
            problems.append(f"{hierarchy}: {exc.strerror}")
            continue
        return hierarchy, ""
    return None, "; ".join(problems) or "no pids cgroup hierarchy is mounted"


def make_cgroup(hierarchy: str, name: str, limit: int) -> tuple[str, int]:
    """A new cgroup with pids.max, and its cgroup.procs open for writing. Raises OSError."""
    path = os.path.join(hierarchy, name)
    os.mkdir(path, 0o755)
    try:
        with open(os.path.join(path, "pids.max"), "w", encoding="ascii") as handle:
            handle.write(str(limit))
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        os.rmdir(path)
        raise
    return path, fd


async def end_cgroup(path: str, fd: int | None) -> None:
    """Kill what is left in a command's cgroup, then remove it (given up after a while: a
    process stuck in the kernel keeps it; the server's stop tries again)."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CGROUP_END_TIMEOUT_S
    while True:
        try:
            with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as handle:
                pids = [int(line) for line in handle.read().split()]
        except FileNotFoundError:
            return
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        if not pids:
            try:
                os.rmdir(path)
                return
            except FileNotFoundError:
                return
            except OSError:
                pass
        if loop.time() > deadline:
            log.warning("the cgroup %s could not be removed", path)
            return
        await asyncio.sleep(CGROUP_POLL_S)


class Descriptors:
    """The descriptors of one launch in the server, each closed once."""

    def __init__(self) -> None:
        self.open: set[int] = set()

    def own(self, fd: int) -> int:
        self.open.add(fd)
        return fd

    def pipe(self) -> tuple[int, int]:
        read, write = os.pipe2(os.O_CLOEXEC)
        return self.own(read), self.own(write)

    def close(self, fd: int) -> None:
        if fd in self.open:
            self.open.discard(fd)
            with contextlib.suppress(OSError):
                os.close(fd)

    def close_all(self) -> None:
        for fd in list(self.open):
            self.close(fd)


async def bwrap_child_pid(fd: int) -> int | None:
    """The pid (in the server's namespace) of bwrap's child, from what `--info-fd` writes
    (a JSON object, then the end of the pipe); None when bwrap ended before it said."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    data = bytearray()

    def readable() -> None:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        data.extend(chunk)
        if not chunk and not done.done():
            done.set_result(None)

    os.set_blocking(fd, False)
    loop.add_reader(fd, readable)
    try:
        async with asyncio.timeout(INFO_TIMEOUT_S):
            await done
    finally:
        loop.remove_reader(fd)
    match = re.search(rb'"child-pid"\s*:\s*(\d+)', bytes(data))
    return int(match.group(1)) if match else None


def limit_child(pid: int, cgroup_fd: int | None, root_user: bool, limit: int) -> None:
    """Put bwrap's child (still waiting) in the command's cgroup, or, for an ordinary user,
    limit its processes: its RLIMIT_NPROC counts only its user namespace's. Raises
    runner.CommandError when neither can be done (the command must not go on)."""
    try:
        if cgroup_fd is not None:
            os.write(cgroup_fd, str(pid).encode())
        elif not root_user:
            import resource  # only an ordinary user's launch needs it

            resource.prlimit(pid, resource.RLIMIT_NPROC, (limit, limit))
    except (OSError, ValueError) as exc:
        raise runner.CommandError(f"the sandbox could not limit the command's processes: {exc}") from None


def remove_tree(path: str) -> None:
    """Remove a temp folder, also the read-only folders a command left (Go's module cache)."""
    def retry(function, failed, _exc) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), stat.S_IRWXU)
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, stat.S_IRWXU)
            function(failed)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:
        shutil.rmtree(path, onerror=retry)
