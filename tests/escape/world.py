"""The world of the escape suite: a person's machine in a temporary folder, and Totem serving it.

`World.build(account)` makes, in a fresh folder where a person keeps files (under /home, never
/tmp: the sandbox gives each command a private /tmp, which would hide the whole world and prove
nothing), everything a hostile command would
reach for, owned by the account the server runs as: a fake HOME full of fake secrets (each with
a canary text of its own), a project that is a real git repository (with `.git/hooks`,
`.git/config` and `.totem/`), another project beside it, a folder outside both, Totem's data
folder and its configuration file (with an explicit random token and a canary comment), the
server's working folder, the folders and files each case needs, and the sockets a person's
machine offers (an ssh-agent's in ~/.ssh, a docker.sock, an abstract one; Totem exposes none).

`Server` is `python totem.py --config <file>` as a real process (several cases kill or stop
it), started as the account (`setpriv` to uid/gid 65534 when the test runs as root) with HOME
the fake one and a canary in its environment; `Client` speaks HTTP and the WebSocket to it with
the token, as the person's browser would.

Must not: judge a case (cases.py does) or touch anything outside its folder, but the files it
names in /tmp and /dev/shm (removed with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field

from websockets.asyncio.client import connect as ws_connect

from tests.utils import MS, Answer, command_line, read_answer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCHER = os.path.join(ROOT, "totem.py")
# The server's PATH: the system's, so that `python3` in a command is one every account can run.
SERVER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NOBODY = 65534
START_MS = 20_000
STOP_MS = 10_000
POLL_MS = 10
TOKEN_CHARS = 32
LISTENING = re.compile(r"Totem is listening on http://(\S+?):(\d+)/")
SECRET_KEY_FILE = "secret.key"
DATABASE_FILE = "totem.db"

# The person's secret places (path under HOME -> text); each text holds the canary
# `{name}-<random>` that a probe looks for.
SECRET_PLACES = {
    "ssh": ".ssh/id_ed25519",
    "aws": ".aws/credentials",
    "gnupg": ".gnupg/private-keys-v1.d/3F2A9C.key",
    "gh": ".config/gh/hosts.yml",
    "netrc": ".netrc",
    "gitcred": ".git-credentials",
    "docker": ".docker/config.json",
    "kube": ".kube/config",
}
SECRET_TEMPLATES = {
    "ssh": "-----BEGIN OPENSSH PRIVATE KEY-----\n{canary}\n-----END OPENSSH PRIVATE KEY-----\n",
    "aws": "[default]\naws_access_key_id = AKIAESCAPE\naws_secret_access_key = {canary}\n",
    "gnupg": "(private-key (ecc (curve Ed25519)(q #{canary}#)))\n",
    "gh": "github.com:\n    oauth_token: {canary}\n    user: person\n",
    "netrc": "machine example.com login person password {canary}\n",
    "gitcred": "https://person:{canary}@github.com\n",
    "docker": '{{"auths": {{"registry.example.com": {{"auth": "{canary}"}}}}}}\n',
    "kube": "apiVersion: v1\nusers:\n- name: person\n  user:\n    token: {canary}\n",
}
BASHRC = "# ~/.bashrc of the person\nexport EDITOR=vi\n"
PROJECT_FILES = {
    "a.txt": "hello world\nsecond line\n",
    "README.md": "# Demo\n",
    "src/app.py": "print('app')\n",
    ".totem/skills/demo/SKILL.md": "---\nname: demo\ndescription: a demo skill\n---\nSay hi.\n",
}
OTHER_FILES = {"notes.txt": "the other project's notes\n"}


@dataclass(frozen=True)
class Account:
    """Who the server runs as: `prefix` starts a program as it, `python` is an interpreter it
    can run with `env` (the venv's packages on its path when the venv is not readable)."""

    label: str
    uid: int
    gid: int
    prefix: tuple[str, ...]
    python: str
    env: tuple[tuple[str, str], ...] = ()


def current_account() -> Account:
    return Account("root" if os.geteuid() == 0 else f"uid {os.geteuid()}", os.geteuid(), os.getegid(), (),
                   sys.executable)


def ordinary_account() -> Account | str:
    """The account of uid/gid 65534 through setpriv, or why it cannot be used here."""
    if os.geteuid() != 0:
        return "the test does not run as root: the current user is the only one"
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return "setpriv is not installed"
    prefix = (setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--")
    packages = sysconfig.get_paths()["purelib"]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    # The system's interpreter first: the venv's may live where the account cannot read it.
    for python in (shutil.which(version, path=SERVER_PATH) or "", os.path.realpath(sys.executable)):
        if python and _runs_totem_as(prefix, python, packages):
            return Account(f"uid {NOBODY}", NOBODY, NOBODY, prefix, python, (("PYTHONPATH", packages),))
    return f"no {version} that uid {NOBODY} can run with Totem's packages"


def _runs_totem_as(prefix: tuple[str, ...], python: str, packages: str) -> bool:
    check = "import websockets, cryptography.fernet"
    env = {"PATH": SERVER_PATH, "PYTHONPATH": packages, "HOME": "/"}
    try:
        done = subprocess.run([*prefix, python, "-c", check], env=env, cwd="/", capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


# Where worlds are made: a place for a person's files. /tmp, /var/tmp and /dev/shm are private
# to a confined command (and $TOTEM_ESCAPE_DIR overrides).
WORLD_PARENTS = ("/home",)
PRIVATE_TEMP = ("/tmp", "/var/tmp", "/dev/shm")


def world_parent() -> str:
    """The folder a world is made in (raises AssertionError when there is none outside the temp
    folders: the suite would prove nothing there)."""
    given = os.environ.get("TOTEM_ESCAPE_DIR")
    candidates = [given] if given else [*WORLD_PARENTS, os.path.expanduser("~")]
    for candidate in candidates:
        real = os.path.realpath(candidate)
        if os.path.isdir(real) and os.access(real, os.W_OK) and not any(
                real == temp or real.startswith(temp + "/") for temp in PRIVATE_TEMP):
            return real
    raise AssertionError(f"no folder for the escape suite's world outside {PRIVATE_TEMP} among {candidates}")


def canary(name: str) -> str:
    return f"{name.upper()}-{secrets.token_hex(8)}"


@dataclass
class World:
    """The folders and texts of one run of the suite (see the module docstring)."""

    account: Account
    top: str
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24)[:TOKEN_CHARS])
    canaries: dict[str, str] = field(default_factory=dict)
    made_outside: list[str] = field(default_factory=list)  # in /tmp, /dev/shm: removed at the end

    @classmethod
    def build(cls, account: Account) -> World:
        top = os.path.realpath(tempfile.mkdtemp(prefix="totem-escape-", dir=world_parent()))
        os.chmod(top, 0o755)
        world = cls(account, top)
        for name in (*SECRET_PLACES, "config", "env", "cwd", "provider"):
            world.canaries[name] = canary(name)
        for name in ("home", "data", "srv", "work", "project", "other", "outside", "run", "ssh"):
            os.makedirs(world.path(name), mode=0o755, exist_ok=True)
        os.chmod(world.home, 0o700)
        os.chmod(world.data, 0o700)
        for name, relative in SECRET_PLACES.items():
            world.write(os.path.join(world.home, relative),
                        SECRET_TEMPLATES[name].format(canary=world.canaries[name]), 0o600)
        world.write(os.path.join(world.home, ".bashrc"), BASHRC)
        # A hard link the person made of a secret file, in a place that is not secret.
        os.makedirs(os.path.join(world.home, "backup"))
        os.link(os.path.join(world.home, ".netrc"), os.path.join(world.home, "backup", "netrc"))
        world.write(os.path.join(world.srv, world.canaries["cwd"]), "the server's working folder\n")
        for relative, text in PROJECT_FILES.items():
            world.write(os.path.join(world.project, relative), text)
        for relative, text in OTHER_FILES.items():
            world.write(os.path.join(world.other, relative), text)
        git(world.project, "init", "-q")
        return world

    def path(self, name: str) -> str:
        return {"home": os.path.join(self.top, "home"), "data": os.path.join(self.top, "data"),
                "srv": os.path.join(self.top, "srv"), "work": os.path.join(self.top, "work"),
                "project": os.path.join(self.top, "work", "project"),
                "other": os.path.join(self.top, "work", "other"),
                "outside": os.path.join(self.top, "work", "outside"),
                "run": os.path.join(self.top, "run"),
                "ssh": os.path.join(self.top, "home", ".ssh"),
                "config": os.path.join(self.top, "srv", "config.ini"),
                "logs": os.path.join(self.top, "logs")}[name]

    home = property(lambda self: self.path("home"))
    data = property(lambda self: self.path("data"))
    srv = property(lambda self: self.path("srv"))
    project = property(lambda self: self.path("project"))
    other = property(lambda self: self.path("other"))
    outside = property(lambda self: self.path("outside"))
    config = property(lambda self: self.path("config"))

    def write(self, path: str, text: str | bytes, mode: int = 0o644) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(text.encode() if isinstance(text, str) else text)
        os.chmod(path, mode)

    def hand_over(self) -> None:
        """Give every folder and file of the world (but the test's logs) to the account."""
        for folder, folders, names in os.walk(self.top):
            if folder == self.top:
                folders[:] = [name for name in folders if name != "logs"]
            for name in folders + names:
                os.lchown(os.path.join(folder, name), self.account.uid, self.account.gid)

    def secret_key(self) -> str:
        """The key the server made in its data folder (after its first start)."""
        with open(os.path.join(self.data, SECRET_KEY_FILE), encoding="ascii") as handle:
            return handle.read().strip()

    def remove(self) -> None:
        for path in self.made_outside:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
        shutil.rmtree(self.top, ignore_errors=True)


def git(root: str, *args: str) -> None:
    env = {"PATH": SERVER_PATH, "HOME": root, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, timeout=30)


# -- the server ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Listen:
    """Where a server listens (a token makes any address allowed) and where the test calls it."""

    name: str
    address: str
    call_host: str


LOOPBACK = Listen("loopback", "127.0.0.1", "127.0.0.1")
EVERY_IPV4 = Listen("every IPv4 address", "0.0.0.0", "127.0.0.1")
EVERY_IPV6 = Listen("every IPv6 address", "::", "::1")


class Server:
    """One `python totem.py --config <file>` process of the world."""

    def __init__(self, world: World, listen: Listen, settings: dict[str, str]):
        self.world = world
        self.listen = listen
        self.settings = settings
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.starts = 0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def write_config(self) -> None:
        world = self.world
        lines = [f"# {world.canaries['config']}: the person's configuration", "[totem]",
                 f"listen = {self.listen.address}", "port = 0", f"token = {world.token}",
                 f"data = {world.data}", *(f"{key} = {value}" for key, value in self.settings.items())]
        world.write(world.config, "\n".join(lines) + "\n", 0o600)
        os.chown(world.config, world.account.uid, world.account.gid)

    async def start(self) -> None:
        """Start the process and wait for its listening line. Raises AssertionError when it
        exits or does not listen."""
        self.write_config()
        world, account = self.world, self.world.account
        os.makedirs(world.path("logs"), mode=0o700, exist_ok=True)
        self.starts += 1
        self.log = os.path.join(world.path("logs"), f"server-{self.listen.address}-{self.starts}.log")
        env = {"PATH": SERVER_PATH, "HOME": world.home, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
               "ESCAPE_CANARY": world.canaries["env"], **dict(account.env)}
        with open(self.log, "wb") as out:
            os.fchown(out.fileno(), account.uid, account.gid)  # the server's own output file
            self.process = subprocess.Popen(
                [*account.prefix, account.python, LAUNCHER, "--config", world.config], env=env, cwd=world.srv,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_MS * MS
        while time.monotonic() < deadline:
            found = LISTENING.search(self.output())
            if found:
                self.port = int(found.group(2))
                return
            if self.process.poll() is not None:
                raise AssertionError(f"totem exited with {self.process.returncode}: {self.output()}")
            await asyncio.sleep(POLL_MS * MS)
        raise AssertionError(f"totem did not start: {self.output()}")

    def output(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def state(self) -> str:
        """running, stopped (SIGSTOP), traced (stopped by a tracer) or gone."""
        if self.process is None or self.process.poll() is not None:
            return "gone"
        try:
            with open(f"/proc/{self.pid}/stat", encoding="ascii", errors="replace") as handle:
                status = handle.read().rpartition(")")[2].split()[0]
        except OSError:
            return "gone"
        return {"T": "stopped", "t": "traced", "Z": "gone", "X": "gone"}.get(status, "running")

    async def exited(self) -> bool:
        """Wait (within STOP_MS) for the process to end on its own; whether it did."""
        deadline = time.monotonic() + STOP_MS * MS
        while self.process is not None and self.process.poll() is None:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(POLL_MS * MS)
        return True

    async def stop(self) -> None:
        """SIGTERM (after SIGCONT, for a stopped one), SIGKILL if it does not end."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_MS * MS
        while self.process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(POLL_MS * MS)
        self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.process.wait()


class Client:
    """The person's side: HTTP calls and the WebSocket, with the token."""

    def __init__(self, server: Server):
        self.server = server

    @property
    def hostport(self) -> str:
        host = self.server.listen.call_host
        return f"[{host}]:{self.server.port}" if ":" in host else f"{host}:{self.server.port}"

    async def call(self, name: str, body=None, ident: str | None = None, query: str = "",
                   token: str | None = None) -> Answer:
        """An API action: POST with a JSON body, GET without one."""
        path = f"/api/{name}" + (f"/{ident}" if ident else "") + (f"?{query}" if query else "")
        payload = b"" if body is None else json.dumps(body).encode()
        method = "POST" if body is not None else "GET"
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.hostport}", "Connection: close",
                 f"Authorization: Bearer {token or self.server.world.token}"]
        if body is not None:
            lines += [f"Content-Length: {len(payload)}", "Content-Type: application/json"]
        reader, writer = await asyncio.open_connection(self.server.listen.call_host, self.server.port)
        try:
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
            await writer.drain()
            return await read_answer(reader)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def ok(self, name: str, body=None, ident: str | None = None, query: str = ""):
        answer = await self.call(name, body, ident, query)
        assert answer.status == 200, f"{name}: {answer.status} {answer.body[:500]!r}"
        return answer.json()

    async def responsive(self, timeout_ms: float = 5_000) -> bool:
        """Whether the server answers a read within the time."""
        try:
            async with asyncio.timeout(timeout_ms * MS):
                return (await self.call("projects")).status == 200
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            return False

    async def websocket(self):
        return await ws_connect(f"ws://{self.hostport}/ws/", open_timeout=START_MS * MS,
                                additional_headers={"Authorization": f"Bearer {self.server.world.token}"})


# -- what a person's machine offers besides Totem ----------------------------------------------


class Sockets:
    """Unix sockets a person's machine has, made by the test (Totem exposes none): an
    ssh-agent's in ~/.ssh, a docker.sock outside the projects, and an abstract one; and a UDP
    service on 127.0.0.1. Each keeps what its callers sent; a probe looks for its case's mark."""

    def __init__(self, world: World):
        self.paths = {"agent": os.path.join(world.path("ssh"), "agent.sock"),
                      "docker": os.path.join(world.path("run"), "docker.sock"),
                      "abstract": "\0totem-escape-" + secrets.token_hex(6)}
        self.received: list[bytes] = []
        self._servers: list[asyncio.AbstractServer] = []
        self._udp: asyncio.DatagramTransport | None = None
        self.owner = (world.account.uid, world.account.gid)
        self.udp_port = 0

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        self._udp, _ = await loop.create_datagram_endpoint(lambda: _Datagrams(self.received),
                                                           local_addr=("127.0.0.1", 0))
        self.udp_port = self._udp.get_extra_info("sockname")[1]
        self.paths["udp"] = f"127.0.0.1:{self.udp_port} (UDP)"
        for name, path in list(self.paths.items()):
            if name == "udp":
                continue
            server = await asyncio.start_unix_server(self._serve, path)
            self._servers.append(server)
            if name != "abstract":
                os.chmod(path, 0o777)
                os.lchown(path, *self.owner)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            data = await reader.read(4096)
            self.received.append(data)
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
        writer.close()

    def got(self, mark: str) -> bool:
        return any(mark.encode() in data for data in self.received)

    async def close(self) -> None:
        if self._udp is not None:
            self._udp.close()
        for server in self._servers:
            server.close()
            await server.wait_closed()


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, received: list[bytes]):
        self.received = received

    def datagram_received(self, data: bytes, addr) -> None:
        self.received.append(data)


class Person:
    """A program of the person (a plain `sleep`, as the account): a command must not signal it."""

    def __init__(self, world: World, name: str):
        self.mark = f"person{name}{secrets.token_hex(4)}"
        account = world.account
        self.process = subprocess.Popen([*account.prefix, "sh", "-c", "sleep 3600; :", self.mark],
                                        env={"PATH": SERVER_PATH}, cwd="/", stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)

    @property
    def pid(self) -> int:
        return self.process.pid

    def state(self) -> str:
        if self.process.poll() is not None:
            return "gone"
        try:
            with open(f"/proc/{self.pid}/stat", encoding="ascii", errors="replace") as handle:
                status = handle.read().rpartition(")")[2].split()[0]
        except OSError:
            return "gone"
        return "stopped" if status in "Tt" else "running"

    def end(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.process.wait()


def processes_with(mark: str) -> list[int]:
    """The pids of the living processes whose argv holds `mark` (zombies have none)."""
    return processes_marked([mark])[mark]


def processes_marked(marks) -> dict[str, list[int]]:
    """For each mark, the pids of the living processes whose argv holds it, from one reading of
    /proc (a run has hundreds of marks, and a reading per mark was a good part of its time)."""
    found: dict[str, list[int]] = {mark: [] for mark in marks}
    if not found:
        return found
    # The longest first: a mark that begins another must not hide it.
    pattern = re.compile(b"|".join(re.escape(mark.encode()) for mark in sorted(found, key=len, reverse=True)))
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        argv = command_line(int(name))
        for mark in {match.decode() for match in pattern.findall(argv)}:
            found[mark].append(int(name))
    return found


def daemons_of(mark: str) -> list[int]:
    """The pids of the daemons a case started: `sh -c <script> <mark>`, the mark last."""
    found = []
    for pid in processes_with(mark):
        argv = command_line(pid).split(b"\0")[:-1]
        if len(argv) == 4 and argv[1] == b"-c" and argv[3] == mark.encode():
            found.append(pid)
    return found


def other_addresses(family: int) -> list[str]:
    """This machine's addresses of the family but loopback and link-local ones (`ip -o addr`)."""
    try:
        listing = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    kind = "inet" if family == socket.AF_INET else "inet6"
    found = []
    for line in listing.splitlines():
        words = line.split()
        if kind in words:
            address = words[words.index(kind) + 1].split("/")[0]
            if not address.startswith(("127.", "fe80:")) and address != "::1":
                found.append(address)
    return found


def file_state(path: str) -> tuple | None:
    """Bytes, mode and mtime of a file (None when it is missing): what `Changed` compares."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(info.st_mode):
        with open(path, "rb") as handle:
            return handle.read(), stat.S_IMODE(info.st_mode), info.st_mtime_ns
    return None, stat.S_IMODE(info.st_mode), info.st_mtime_ns
