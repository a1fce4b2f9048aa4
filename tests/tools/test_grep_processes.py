"""The grep tool's child processes: each engine's whole process group ends with the search.

A timeout, a cancellation (abort), the count limit and the end of rg all stop the group, not
only the process that grep started: stand-in `rg` programs leave a grandchild behind to prove it.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from tests.tools.trees import project, write
from tests.utils import MS, command_line, process_stat, wait_until_ended
from totem.process import runner
from totem.tools import ToolContext, ToolError, grep as grep_module
from totem.tools.grep import GrepTool, Query, search_with_rg


def children_running(code_marker: bytes) -> list[int]:
    """The pids of this process's children whose command line holds `code_marker`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = process_stat(int(name))
        if fields and int(fields[1]) == os.getpid() and fields[0] != b"Z" and code_marker in command_line(int(name)):
            found.append(int(name))
    return found


def assert_gone(pid: int) -> None:
    """`pid` is over: killed, and reaped by us or, for an orphan, left to init (see `ended`)."""
    wait_until_ended(pid, f"process {pid}")


def fake_rg(tmp_path, body: str) -> tuple[str, str]:
    """A stand-in rg that appends its pid (and what `body` adds to "$pids") to a file; returns
    the program's path and the search's file of pids. The listing (`rg --files`, which runs
    beside the search) writes to that file's name + ".files" instead."""
    pids = str(tmp_path / "pids")
    path = tmp_path / "fake-rg"
    path.write_text(f'#!/bin/sh\npids={pids}\n[ "$1" = --files ] && pids={pids}.files\n'
                    f'echo $$ >> $pids\n{body}\n')
    path.chmod(0o755)
    return str(path), pids


async def read_pids(path: str, count: int) -> list[int]:
    for _ in range(1000):
        if os.path.exists(path):
            with open(path) as handle:
                lines = handle.read().split("\n")[:-1]  # whole lines only: one may be half written
            pids = [int(line) for line in lines]
            if len(pids) >= count:
                return pids
        await asyncio.sleep(5 * MS)
    raise AssertionError("the stand-in rg did not start")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds the child through /proc")
def test_grep_python_child_killed_with_group_on_cancel(tmp_path):
    """Cancelling a Python search stuck in a backtracking regex kills the child and its group."""
    root = project(tmp_path)
    write(root, "big.txt", "a" * 100_000 + "b\n")

    async def scenario():
        task = asyncio.create_task(GrepTool("python").run({"pattern": "(a+)+$"},
                                                          ToolContext(root, "s1")))
        for _ in range(1000):
            children = children_running(b"serve_child")
            if children:
                break
            await asyncio.sleep(5 * MS)
        else:
            raise AssertionError("the search child did not start")
        (child,) = children
        await asyncio.sleep(300 * MS)  # well inside the regex by now
        assert runner.group_running(child) and not task.done()
        task.cancel()
        began = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return child, time.monotonic() - began

    child, took = asyncio.run(scenario())
    assert took < 1000 * MS
    assert not runner.group_running(child)
    assert_gone(child)


def test_grep_rg_group_killed_on_cancel(tmp_path):
    """Cancelling an rg search kills rg's whole group, a grandchild it left in it too, and the
    group of the listing that runs beside it."""
    root = project(tmp_path)
    rg, pids = fake_rg(tmp_path, "sleep 100 &\necho $! >> $pids\nwait")

    async def scenario():
        task = asyncio.create_task(search_with_rg(Query(root, root, "x"), rg))
        started = await read_pids(pids, 2) + await read_pids(pids + ".files", 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return started

    search, search_grandchild, listing, listing_grandchild = asyncio.run(scenario())
    for leader, grandchild in ((search, search_grandchild), (listing, listing_grandchild)):
        assert not runner.group_running(leader)
        assert_gone(grandchild)
        assert_gone(leader)


def test_grep_rg_group_killed_on_timeout(tmp_path, monkeypatch):
    """At the deadline rg's whole group is stopped and the answer says the search took too long."""
    root = project(tmp_path)
    rg, pids = fake_rg(tmp_path, "sleep 100 &\necho $! >> $pids\nwait")
    monkeypatch.setattr(grep_module, "TIMEOUT_SECONDS", 0.5)

    async def scenario():
        async with asyncio.timeout(10_000 * MS):  # a kill of rg alone would wait on its pipes
            await search_with_rg(Query(root, root, "x"), rg)

    with pytest.raises(ToolError, match="the search took longer than 0.5 s and was stopped"):
        asyncio.run(scenario())
    for path in (pids, pids + ".files"):  # the search's group and the listing's
        for pid in asyncio.run(read_pids(path, 2)):
            assert_gone(pid)


def test_grep_rg_leftovers_stopped_after_exit(tmp_path):
    """What rg leaves running in its group when it exits is stopped, for the search and for
    the listing of linked files alike."""
    root = project(tmp_path)
    rg, pids = fake_rg(tmp_path, "sleep 100 >/dev/null 2>&1 &\necho $! >> $pids")
    began = time.monotonic()
    found = asyncio.run(search_with_rg(Query(root, root, "x"), rg))
    assert (found.matches, found.more, found.linked) == ([], False, [])
    assert time.monotonic() - began < 5000 * MS
    for path in (pids, pids + ".files"):  # search and listing: a leader and a sleeper each
        for pid in asyncio.run(read_pids(path, 2)):
            assert_gone(pid)


def test_grep_rg_stopped_at_count_limit(tmp_path, monkeypatch):
    """Past MAX_MATCHES_COUNTED the search ends at once and rg's group is stopped, not waited for."""
    root = project(tmp_path)
    path = write(root, "a.txt", "x\n")
    messages = [{"type": "match", "data": {"path": {"text": path}, "lines": {"text": "x\n"},
                                           "line_number": number}}
                for number in range(1, grep_module.MAX_MATCHES_COUNTED + 2)]
    messages.append({"type": "end", "data": {"path": {"text": path}, "binary_offset": None}})
    output = tmp_path / "rg.jsonl"
    output.write_text("".join(json.dumps(message) + "\n" for message in messages))
    rg, pids = fake_rg(tmp_path, f'[ "$1" = --files ] && exit 0\ncat {output}\nexec sleep 100')
    monkeypatch.setattr(grep_module, "TIMEOUT_SECONDS", 5.0)

    began = time.monotonic()
    found = asyncio.run(search_with_rg(Query(root, root, "x"), rg))
    took = time.monotonic() - began
    assert found.more and len(found.matches) == grep_module.MAX_MATCHES_COUNTED
    assert found.matches[0] == ("a.txt", 1, "x")
    assert took < 3000 * MS
    leader = asyncio.run(read_pids(pids, 1))[0]  # the search's rg; the listing's exits at once
    assert_gone(leader)

