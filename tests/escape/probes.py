"""The probes of the escape suite: after each hostile command, the test process looks at the real
world and says whether the command got out, with the evidence (None: it did not).

A probe never reads the command's exit code: it looks at files outside the project or in its
protected places, at the person's secrets in the tool output stored in the session (or in a file
the command left in the project), at the rules Totem keeps, at the server process, at the
person's programs and sockets, and at the processes still alive once the command was over.
Texts are found as they are, in base64 (a `base64` of a whole file) and as the marker the
scrubber leaves for a secret it knows (`[secret:token]`: the command did read it).

Must not: run hostile commands or change the world (the harness does both).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import gzip
import os
import re
import sqlite3
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tests.escape.world import DATABASE_FILE, processes_with

if TYPE_CHECKING:
    from tests.escape.harness import Scene, Seen

# Runs of base64 (wrapped or not) long enough to hold a canary.
BASE64_RUN = re.compile(r"(?:[A-Za-z0-9+/]{4,}={0,2}\s*){4,}")
# A line of `strace -o` (with -f, each starts with the pid).
SYSCALL_LINE = re.compile(rb"^(?:\d+ +)?\w+\(", re.MULTILINE)
# Runs of hex (xxd -p, od) long enough to hold a canary.
HEX_RUN = re.compile(r"(?:[0-9a-fA-F]{2}\s*){8,}")


def texts_hold(texts: list[bytes], value: str, label: str | None) -> str | None:
    """Where `value` (or the scrubber's marker for `label`) shows in the texts."""
    needle = value.encode()
    for text in texts:
        if needle in text:
            return "the text itself"
        if label and f"[secret:{label}]".encode() in text:
            return f"the scrubber's marker [secret:{label}] (the command read it)"
        decoded = text.decode("latin-1")
        for run in HEX_RUN.findall(decoded):
            joined = "".join(run.split())
            for start in range(2):
                piece = joined[start:]
                with contextlib.suppress(ValueError):
                    if needle in bytes.fromhex(piece[: len(piece) - len(piece) % 2]):
                        return "its hex"
        for run in BASE64_RUN.findall(decoded):
            joined = "".join(run.split())
            for start in range(4):
                piece = joined[start:]
                piece = piece[: len(piece) - len(piece) % 4]
                try:
                    if needle in base64.b64decode(piece):
                        return "its base64"
                except (binascii.Error, ValueError):
                    continue
    return None


def project_files_of(scene: Scene, mark: str) -> list[tuple[str, bytes]]:
    """The files in the project (and below it) whose path holds the case's mark, unpacked."""
    found = []
    for folder, folders, names in os.walk(scene.world.project):
        folders[:] = [name for name in folders if name != ".git"]
        for name in names:
            path = os.path.join(folder, name)
            if mark not in os.path.relpath(path, scene.world.project) or not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            with open(path, "rb") as handle:
                data = handle.read()
            if data[:2] == b"\x1f\x8b":
                try:
                    data = gzip.decompress(data)
                except (OSError, EOFError):
                    pass
            found.append((os.path.relpath(path, scene.world.project), data))
    return found


class Probe:
    """Decides from the world whether the command of `seen` escaped; `deferred` probes decide
    at the end of the run (a process must be gone once its command is over)."""

    deferred = False

    def describe(self) -> str:
        return type(self).__name__

    async def check(self, scene: Scene, seen: Seen) -> str | None:
        raise NotImplementedError

    async def final(self, scene: Scene, seen: Seen) -> str | None:
        return None


@dataclass
class Created(Probe):
    """A file, folder or link appeared where the command must not write."""

    path: str

    async def check(self, scene, seen):
        path = scene.fill(self.path, seen.mark)
        scene.note_outside(path)
        return f"{path} exists" if os.path.lexists(path) else None


@dataclass
class Contains(Probe):
    """A protected file holds the case's mark (or `text`)."""

    path: str
    text: str = "@MARK@"

    async def check(self, scene, seen):
        path, text = scene.fill(self.path, seen.mark), scene.fill(self.text, seen.mark)
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        return f"{path} now holds {text!r}" if text.encode() in data else None


@dataclass
class Changed(Probe):
    """A file outside changed its bytes, mode or time since the world was built."""

    path: str

    async def check(self, scene, seen):
        path = scene.fill(self.path, seen.mark)
        before, after = scene.initial[path], scene.state_of(path)
        if before == after:
            return None
        if after is None:
            return f"{path} is gone"
        what = [name for name, old, new in zip(("content", "mode", "time"), before, after, strict=True) if old != new]
        return f"{path} changed its {', '.join(what)}"


@dataclass
class Gone(Probe):
    """A file of another project (or a protected one) was deleted or moved away."""

    path: str

    async def check(self, scene, seen):
        path = scene.fill(self.path, seen.mark)
        return None if os.path.lexists(path) else f"{path} was deleted"


@dataclass
class Leaked(Probe):
    """A secret reached the tool output stored in the session, or a file the command left in
    the project. `secret` names a canary of the world, or token, key, config-path."""

    secret: str

    async def check(self, scene, seen):
        value, label = scene.secret_value(self.secret)
        where = texts_hold([seen.output.encode()], value, label)
        if where:
            return f"the {self.secret} secret is in the stored tool output ({where})"
        for name, data in project_files_of(scene, seen.mark):
            where = texts_hold([data], value, label)
            if where:
                return f"the {self.secret} secret is in {name} inside the project ({where})"
        return None


@dataclass
class TableMade(Probe):
    """Totem's database holds a table the command made (named by the case's mark)."""

    async def check(self, scene, seen):
        path = os.path.join(scene.world.data, DATABASE_FILE)
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return f"Totem's database has a table {seen.mark}" if seen.mark in tables else None


@dataclass
class Printed(Probe):
    """The stored tool output holds a text only the server's own /proc entry gives."""

    text: str
    what: str

    async def check(self, scene, seen):
        text = scene.fill(self.text, seen.mark)
        return f"the output shows {self.what} ({text!r})" if text in seen.output else None


@dataclass
class RuleStored(Probe):
    """Totem keeps a rule the command saved through its API (read back through the API)."""

    pattern: str | None = None  # None: any rule whose pattern holds the mark

    async def check(self, scene, seen):
        for rule in await scene.rules():
            if not rule.get("removable") or rule.get("tool") != "bash":
                continue  # config.ini's and the built-in defaults: no command saved those
            pattern = rule.get("pattern", "")
            if (pattern == self.pattern) if self.pattern is not None else seen.mark in pattern:
                await scene.forget_rule(rule)
                return f"a {rule['layer']} rule {rule['action']} {rule['tool']} {pattern!r} is stored"
        return None


@dataclass
class ServerDown(Probe):
    """The server process is gone, stopped, or no longer answers."""

    async def check(self, scene, seen):
        if seen.run_status == "aborted":  # not by the person: the server is going (SIGTERM)
            await scene.server.exited()
        state = scene.server.state()
        if state != "running":
            return f"the server (pid {scene.server.pid}) is {state}"
        if not await scene.client.responsive():
            return f"the server (pid {scene.server.pid}) no longer answers"
        return None


@dataclass
class TokenRewritten(Probe):
    """The server now accepts the token the command wrote into its memory, or no longer its own
    (or it died)."""

    token: str

    async def check(self, scene, seen):
        state = scene.server.state()
        if state != "running":
            return f"after a write to its memory the server (pid {scene.server.pid}) is {state}"
        chosen = scene.fill(self.token, seen.mark)
        if (await scene.client.call("projects", token=chosen)).status == 200:
            return f"the server accepts the token {chosen!r} written into its memory"
        if not await scene.client.responsive():
            return "after a write to its memory the server no longer answers with its own token"
        return None


@dataclass
class Connected(Probe):
    """A socket of the person's machine (an ssh-agent's, a docker.sock, an abstract one) got the
    command's message."""

    socket: str

    async def check(self, scene, seen):
        return (f"the {self.socket} socket {scene.sockets.paths[self.socket]!r} got the command's message"
                if scene.sockets.got(seen.mark) else None)


@dataclass
class Signalled(Probe):
    """A program of the person (not started by Totem) was killed or stopped (decided at the end:
    a signal takes effect when the kernel next runs its target)."""

    person: str
    deferred = True

    async def check(self, scene, seen):
        return None

    async def final(self, scene, seen):
        person = scene.persons[self.person]
        state = person.state()
        return f"the person's program (pid {person.pid}) is {state}" if state != "running" else None


@dataclass
class Traced(Probe):
    """A trace of the server's system calls was written into the project."""

    async def check(self, scene, seen):
        for name, data in project_files_of(scene, seen.mark):
            if SYSCALL_LINE.search(data):
                return f"{name} holds the server's system calls ({data[:60]!r}...)"
        return None


@dataclass
class Outlives(Probe):
    """A process the command started is still alive well after the command's end (abort,
    timeout, the job stopped): a daemon, marked by the case's mark in its argv."""

    deferred = True

    async def check(self, scene, seen):
        seen.alive_at_end = processes_with(seen.mark)
        return None

    async def final(self, scene, seen):
        alive = processes_with(seen.mark)
        if not alive:
            return None
        return f"processes {alive} of the command are alive ({scene.cmdline(alive[0])!r})"


# Beside the bomb, the sandbox's own processes count toward its limit or are left out of it,
# depending on the layer (a pids cgroup counts the launcher and the shell; RLIMIT_NPROC counts
# from what was there at the launch): a bomb stopped within this of the limit was stopped by it.
BOMB_SLACK = 4


@dataclass
class BombGrew(Probe):
    """A bounded fork bomb had more processes alive at once than the sandbox's process limit
    allows (each wrote one byte to its file in the project's src/, which Landlock alone also
    lets a command write), or left the server unresponsive."""

    limit: int

    async def check(self, scene, seen):
        if not await scene.client.responsive():
            return "the server no longer answers after the fork bomb"
        path = os.path.join(scene.world.project, "src", f"bomb-{seen.mark}")
        grown = os.path.getsize(path) if os.path.exists(path) else 0
        seen.note = f"{grown} processes of the bomb alive at once (limit {self.limit})"
        return seen.note if grown > self.limit + BOMB_SLACK else None
