"""One way to start a child process (issue 10): no module of `totem/` but runner.py starts one.

The runner gives every child its own process group, an explicit environment, a timeout and
output caps, and kills the whole group on a timeout or an abort. A process started anywhere else
would escape all of it, so this scan of the package's source lists every other place that could
start one: an import of a process module, or a name that spawns, forks or execs.
"""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "totem"
# Relative to PACKAGE. The runner starts every child; confine.py is the sandbox's launcher, a
# separate single-threaded process (never imported to start anything): once it has confined
# itself it execs the command, or forks it and stays as its subreaper. It is started only by
# the runner, with the argv that sandbox.py builds.
ALLOWED = {"process/runner.py", "security/confine.py"}
# Importing any of these (or from them) is a way to start processes.
PROCESS_MODULES = {"subprocess", "pty", "multiprocessing", "asyncio.subprocess",
                   "concurrent.futures.process"}
# Names that start a process on whatever object or module they hang.
PROCESS_NAMES = {"create_subprocess_exec", "create_subprocess_shell", "subprocess_exec",
                 "subprocess_shell", "Popen", "ProcessPoolExecutor", "forkpty"}
# Functions of `os` that start a process, besides the exec* and spawn* families.
OS_NAMES = {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp"}


def _os_starter(name: str) -> bool:
    return name in OS_NAMES or name.startswith(("exec", "spawn"))


def _process_module(name: str) -> bool:
    return any(name == module or name.startswith(module + ".") for module in PROCESS_MODULES)


def process_starts(source: str, filename: str = "<source>") -> list[str]:
    """`line: what` for every place of a module's source that could start a process."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        what = None
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if _process_module(alias.name)]
            what = f"import {', '.join(names)}" if names else None
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [alias.name for alias in node.names
                     if _process_module(node.module) or alias.name in PROCESS_NAMES
                     or _process_module(f"{node.module}.{alias.name}")
                     or (node.module == "os" and _os_starter(alias.name))]
            what = f"from {node.module} import {', '.join(names)}" if names else None
        elif isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if (node.attr in PROCESS_NAMES or node.attr == "subprocess"
                    or (owner == "os" and _os_starter(node.attr))
                    or (owner == "pty" and node.attr == "fork")):
                what = f"{owner or '…'}.{node.attr}"
        elif isinstance(node, ast.Name) and node.id in PROCESS_NAMES:
            what = node.id
        if what:
            found.append(f"{node.lineno}: {what}")
    return sorted(set(found), key=lambda entry: int(entry.split(":")[0]))


def test_process_starts_only_in_runner():
    """No module of the package but runner.py imports a process module or calls a spawner."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in ALLOWED:
            continue
        offenders += [f"totem/{relative}:{entry}"
                      for entry in process_starts(path.read_text(encoding="utf-8"), str(path))]
    assert offenders == [], "start these through totem.process.runner instead:\n" + "\n".join(offenders)


def test_process_starts_scan_finds_every_form():
    """The scan flags each way of starting a process, and not harmless look-alikes."""
    flagged = {
        "import subprocess": "1: import subprocess",
        "import pty, json": "1: import pty",
        "import multiprocessing.pool": "1: import multiprocessing.pool",
        "from subprocess import run": "1: from subprocess import run",
        "from asyncio import subprocess": "1: from asyncio import subprocess",
        "from asyncio import create_subprocess_exec": "1: from asyncio import create_subprocess_exec",
        "from os import fork, getpid": "1: from os import fork",
        "from concurrent.futures import ProcessPoolExecutor":
            "1: from concurrent.futures import ProcessPoolExecutor",
        "asyncio.create_subprocess_exec('ls')": "1: asyncio.create_subprocess_exec",
        "x = 1\nasyncio.create_subprocess_shell('ls')": "2: asyncio.create_subprocess_shell",
        "loop.subprocess_exec(factory, 'ls')": "1: loop.subprocess_exec",
        "stdin = asyncio.subprocess.DEVNULL": "1: asyncio.subprocess",
        "os.fork()": "1: os.fork",
        "os.system('ls')": "1: os.system",
        "os.execvp('ls', ['ls'])": "1: os.execvp",
        "os.posix_spawn('/bin/ls', ['ls'], {})": "1: os.posix_spawn",
        "pty.fork()": "1: pty.fork",
    }
    for source, expected in flagged.items():
        assert process_starts(source) == [expected], source
    harmless = ('"""Runs in a child process, like subprocess.run would."""\n'
                "import platform\nplatform.system()\nos.getpid()\nrunner.run_process(argv)\n"
                "from . import runner\n")
    assert process_starts(harmless) == []
