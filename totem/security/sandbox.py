"""The kernel sandbox of every process the agent starts: the policy, what this kernel can enforce
(probed once), and the argv that confines a child.

Policy (one place; README "The sandbox" says where each part holds):
- write: only the session's folder (project or worktree), its private temp folder (bound as
  /tmp, and TMPDIR), /dev/null and ptys, and the folders of the setting `writable`. Inside the
  folder, `.git/hooks`, `.git/config` (`config.worktree`, `commondir`, `modules/`, a worktree's
  own `commondir`, `gitdir` and `config.worktree`) and `.totem/` are read-only, and so are
  Totem's own code, UI and Python where a writable folder holds them (INSTALL_PARTS).
- read: everything programs need, never SECRET_PLACES (under $HOME), SYSTEM_SECRETS, Totem's
  data folder, its config file and its key, nor the places of the setting `secrets` (added to
  the list, never replacing it). A hidden place inside the project is hidden there too; a
  worktree in the data folder is bound back in.
- network: never Totem's own port (on every address); other network as the layered settings
  `network` (interactive runs, default on) and `unattendednetwork` (scheduled runs and
  sub-agents, default off) say.
- processes: no signal, trace or /proc read of a process outside the sandbox; at most
  MAX_PROCESSES processes; everything a command starts ends with it (setsid included).
- caches go to the temp folder (CACHE_VARIABLES); a refusal is named in the tool result
  (`Confinement.explain`).

Layers: bubblewrap (`bwrap`, looked for in `sandboxpath` only, never the person's PATH) gives
the mounts: `--ro-bind / /`, the private temp folder as /tmp, the writable folders bound back,
empty read-only binds over the hidden places, a PID namespace that ends with the command
(`--unshare-pid --die-with-parent`), no capabilities as root, `--unshare-net` with the network
off. bwrap waits on a pipe (`--block-fd`) once its namespaces are made, while the server puts
its child in the command's pids cgroup (root) or lowers its RLIMIT_NPROC (an ordinary user:
inside the user namespace only its processes count). Landlock on top, with the network on: a
ruleset refusing TCP connect to Totem's port on every address and scoping signals and abstract
unix sockets, built once per server and enforced on one thread of the server (`spawning.ConfinedLoop`,
an event loop that only starts and watches these commands) whose children inherit its domain:
making a domain of 65,534 port rules per command would cost some 20 ms. Without bubblewrap,
Landlock alone, from the launcher `confine.py`: file rules as an allow-list (the entries of `/`
and of the hidden places' parents, minus the hidden places; writes per top-level entry of the
project minus `.git` and `.totem`, so `.git` stays read-only and a new file at the project's
top cannot be made), TCP rules, scoping, no capabilities as root, and the launcher stays as a
subreaper that ends what is left. A project MCP server (watched on the server's own loop) takes
the network domain from the launcher too (`Confinement.launch_server`).

Modes (`sandbox` in config.ini): `auto` confines with what holds and says what does not (the
start-up line, `status()` for Account|read, `reach()` for every permission question);
`required` refuses a command when a protection it needs is missing (SandboxRefused naming it),
and never runs one outside the sandbox; `off` confines nothing and every question says so.

API: `Sandbox(config)`; `start(port)` (the probe, in the background; the network ruleset and
its thread at the first command that needs them); `await status()`; `confinement(root,
sessionid, unattended, limits, outside=False)` -> `Confinement` with `reach()`,
`await launch(argv)` -> `runner.Launch` (the `confine` of `runner.run_command`),
`await launch_server(argv)` (that of `runner.spawn_server`) and `explain(output)`;
`question_reach(confinement)`; `await forget_session(sessionid)`; `await stop()`.

Must not: decide whether a command may run (permissions does), start a process but through the
runner, or confine the server's own helpers (git, search) and the Terminal panel.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from totem.process import runner
from totem.security import confine, refusals, spawning

log = logging.getLogger("totem.sandbox")

MODES = ("auto", "required", "off")
# Where bwrap is looked for: the system's folders, never the person's or the project's PATH.
SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
# Under $HOME: credentials and keys of the usual tools (README "The sandbox" lists them).
SECRET_PLACES = (
    ".ssh", ".aws", ".gnupg", ".config/gh", ".config/hub", ".netrc", ".git-credentials",
    ".config/git/credentials", ".docker/config.json", ".kube", ".pypirc",
    # npm login writes the registry token into ~/.npmrc; a project keeps its own .npmrc.
    ".npmrc", ".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials",
    ".config/gcloud", ".azure", ".password-store", ".local/share/keyrings", ".pki",
    ".vault-token", ".terraform.d/credentials.tfrc.json", ".config/rclone", ".s3cfg",
    ".mozilla", ".config/google-chrome", ".config/chromium", ".bash_history", ".zsh_history",
)
# Outside $HOME: what a process of the same user (or root) could read or connect to otherwise.
SYSTEM_SECRETS = (
    "/etc/shadow", "/etc/gshadow", "/etc/ssh", "/etc/ssl/private",
    "/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
    "/run/podman/podman.sock", "/run/dbus/system_bus_socket",
)
# Inside the session's folder, read-only (git would run what they name; .totem defines servers).
GIT_READ_ONLY = ("config", "config.worktree", "hooks", "commondir", "modules")
WORKTREE_READ_ONLY = ("commondir", "gitdir", "config.worktree")
# A worktree session may write these of its main repository (not its config or hooks).
WORKTREE_WRITABLE = ("objects", "refs", "logs")
PROJECT_READ_ONLY = (".totem",)
# Files that, made in a gitdir during a command, would make git read another configuration:
# removed after the command (a mount cannot cover a file that does not exist yet).
GIT_TRIPWIRES = ("commondir", "config.worktree")
MAX_PROCESSES = 512
CGROUP_PREFIX = "totem-"
PROBE_TIMEOUT_S = 20.0
# The package managers' caches, redirected into the temp folder (HOME stays read-only).
CACHE_VARIABLES = {
    "XDG_CACHE_HOME": ".cache", "npm_config_cache": ".cache/npm", "PIP_CACHE_DIR": ".cache/pip",
    "YARN_CACHE_FOLDER": ".cache/yarn", "GOCACHE": ".cache/go-build", "GOMODCACHE": ".cache/go-mod",
    "CARGO_HOME": ".cache/cargo", "GRADLE_USER_HOME": ".cache/gradle", "DENO_DIR": ".cache/deno",
    "BUN_INSTALL_CACHE_DIR": ".cache/bun",
}
INSIDE_TMP = "/tmp"
LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "confine.py")
# The folder Totem runs from; its code, its UI and the Python it runs on are read-only to
# commands where a writable folder holds them (a command must not change what the server runs).
INSTALL_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALL_PARTS = ("totem", "static", "totem.py", ".venv")

# What each protection means, by name (Account|read, the questions, `required`'s errors).
PROTECTIONS = {
    "writes": "writes only in the project, its temp folder and the folders of the setting writable",
    "git": ".git/hooks, .git/config and .totem/ read-only",
    "secrets": "the secret places and Totem's data folder, config and key unreadable",
    "ownport": "no connection to Totem's own port",
    "network": "no network when the setting says off",
    "processes": "no signal, trace or /proc read of a process outside the sandbox",
    "kill": "everything a command starts ends with it, setsid included",
    "processlimit": f"at most {MAX_PROCESSES} processes (a fork bomb ends)",
    "tmp": "a private temp folder",
}
# What no layer here closes, on any kernel (README "The sandbox", "What is left").
STILL_OPEN = (
    "UDP and pathname unix sockets that are not hidden, while the network is on",
    "other programs' ports on this machine, and Totem's port through another program (a proxy, a port forward)",
    "a secret place made after a command started stays visible to that command",
    "a hard link to a secret file from a readable place",
)


class SandboxRefused(runner.CommandError):
    """A command that the sandbox will not run (`required`, a protection missing); the message
    names what is missing."""


@dataclass(frozen=True)
class Kernel:
    """What this machine offers, probed once."""

    root: bool
    landlock: int  # the ABI, 0 for none
    bwrap: str | None  # a bwrap that works, or None
    bwrap_problem: str  # why not, when None
    cgroup: str | None  # the pids hierarchy where each command gets a cgroup of its own
    cgroup_problem: str


def missing_protections(kernel: Kernel | None, network: bool) -> dict[str, str]:
    """`{protection: why it does not hold}` for a command with the network on or off."""
    if kernel is None:
        return dict.fromkeys(_needed(network), "the sandbox is off")
    missing: dict[str, str] = {}
    bwrap, abi = kernel.bwrap is not None, kernel.landlock
    if not bwrap and abi < 1:
        why = f"neither bubblewrap ({kernel.bwrap_problem}) nor Landlock in this kernel"
        return dict.fromkeys(_needed(network), why)
    if not bwrap:
        if network is False:
            missing["network"] = ("Landlock alone refuses TCP only (UDP and unix sockets stay open); "
                                  f"bubblewrap is needed ({kernel.bwrap_problem})")
        if abi < confine.SCOPE_ABI:
            missing["processes"] = f"Landlock ABI {abi} cannot scope signals (6 or newer needed)"
    if network and abi < confine.NET_ABI:
        missing["ownport"] = f"Landlock ABI {abi} has no TCP rules (4 or newer needed)"
    if not network and not bwrap and abi < confine.NET_ABI:
        missing["network"] = f"no network namespace (bubblewrap: {kernel.bwrap_problem}) nor TCP rules"
    if kernel.root and kernel.cgroup is None:
        missing["processlimit"] = f"as root only a pids cgroup limits processes ({kernel.cgroup_problem})"
    return {name: why for name, why in missing.items() if name in _needed(network)}


def _needed(network: bool) -> tuple[str, ...]:
    """The protections a command needs: the own-port rule with the network on, no network off."""
    return tuple(name for name in PROTECTIONS if name != ("network" if network else "ownport"))


@dataclass(frozen=True)
class Policy:
    """What one command may reach."""

    root: str  # the session's folder, links resolved
    temp: str  # its private temp folder (on the host)
    network: bool
    writable: tuple[str, ...] = ()  # the folders of the setting `writable` that can be written
    hidden: tuple[str, ...] = ()  # every hidden place that exists, links resolved
    read_only: tuple[str, ...] = ()  # inside writable folders
    worktree_writable: tuple[str, ...] = ()  # of the main repository of a worktree session
    tripwires: tuple[str, ...] = ()  # files removed if a command makes them
    dropped: tuple[str, ...] = ()  # writable folders refused (inside a hidden place), for reach()
    landlock_alone: bool = False  # no bubblewrap: the project's top level cannot be added to
    # Totem's own folder and its Python where they lie in /tmp or /var/tmp, which commands get
    # private: brought back read-only, so that what Totem runs (its launcher, its interpreter)
    # is there (its hidden places inside stay hidden)
    runtime: tuple[str, ...] = ()


def within(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or below it (both absolute, normalized)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def home_folder() -> str:
    return os.path.realpath(os.environ.get("HOME") or os.path.expanduser("~"))


def hidden_places(data_dir: str, config_files: Iterable[str], extra: Iterable[str] = (),
                  home: str | None = None) -> list[str]:
    """Every place that commands cannot read and that exists, links resolved, without
    duplicates or places inside another one of the list."""
    home = home or home_folder()
    candidates = [os.path.join(home, place) for place in SECRET_PLACES] + list(SYSTEM_SECRETS)
    runtime = f"/run/user/{os.getuid()}"  # the person's D-Bus bus, gpg-agent and other sockets
    candidates += [runtime, os.environ.get("XDG_RUNTIME_DIR") or runtime]
    candidates += [data_dir, os.path.join(data_dir, "secret.key"), *config_files]
    candidates += list(extra)
    found: list[str] = []
    for candidate in candidates:
        if not candidate or not os.path.isabs(candidate) or not os.path.lexists(candidate):
            continue
        found.append(os.path.realpath(candidate))
    found = sorted(set(found))
    return [path for path in found if not any(other != path and within(path, other) for other in found)]


def cover(top: str, excluded: Iterable[str]) -> list[str]:
    """Paths below `top` that together reach everything under it except `excluded` (walking into
    the folders that hold an excluded place); `[top]` when nothing is excluded below it. A link
    that leads into an excluded place, or to a folder holding one, is left out."""
    excluded = [path for path in excluded if within(path, top)]
    if not excluded:
        return [top]
    if any(path == top for path in excluded):
        return []
    found: list[str] = []
    try:
        names = sorted(os.listdir(top))
    except OSError:
        return []
    for name in names:
        path = os.path.join(top, name)
        if any(within(path, place) for place in excluded):
            continue
        real = os.path.realpath(path)
        if any(within(real, place) or within(place, real) for place in excluded if real != path):
            continue  # a link into (or above) a hidden place
        if any(within(place, path) for place in excluded):
            if os.path.isdir(path) and not os.path.islink(path):
                found += cover(path, excluded)
            continue
        found.append(path)
    return found


def git_folders(root: str) -> tuple[str | None, str | None]:
    """(the session's own gitdir, the main repository's gitdir when the folder is a worktree)."""
    dot_git = os.path.join(root, ".git")
    if os.path.isdir(dot_git) and not os.path.islink(dot_git):
        return os.path.realpath(dot_git), None
    try:
        with open(dot_git, encoding="utf-8") as handle:
            line = handle.readline().strip()
    except (OSError, UnicodeDecodeError):
        return None, None
    if not line.startswith("gitdir:"):
        return None, None
    gitdir = os.path.realpath(os.path.join(root, line[len("gitdir:"):].strip()))
    try:
        with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as handle:
            common = os.path.realpath(os.path.join(gitdir, handle.readline().strip()))
    except (OSError, UnicodeDecodeError):
        return gitdir, None
    return gitdir, common


def make_policy(root: str, temp: str, network: bool, hidden: Iterable[str], writable: Iterable[str]) -> Policy:
    """The policy of one command in `root` (reads the disk: which places exist, the worktree's
    main repository)."""
    root = os.path.realpath(root)
    hidden = tuple(hidden)
    kept, dropped = [], []
    for folder in writable:
        real = os.path.realpath(folder)
        if any(within(real, place) for place in hidden) or not os.path.isdir(real):
            dropped.append(folder)
        elif real != root:
            kept.append(real)
    read_only = [os.path.join(root, name) for name in PROJECT_READ_ONLY]
    gitdir, common = git_folders(root)
    worktree_writable: list[str] = []
    tripwires: list[str] = []
    if gitdir and common:  # a worktree: its admin folder and the main repository's objects
        worktree_writable = [os.path.join(common, name) for name in WORKTREE_WRITABLE] + [gitdir]
        read_only += [os.path.join(gitdir, name) for name in WORKTREE_READ_ONLY]
        tripwires = [os.path.join(gitdir, name) for name in GIT_TRIPWIRES]
    elif gitdir:
        read_only += [os.path.join(gitdir, name) for name in GIT_READ_ONLY]
        tripwires = [os.path.join(gitdir, name) for name in GIT_TRIPWIRES]
    runs = [os.path.join(INSTALL_ROOT, part) for part in INSTALL_PARTS] + [os.path.realpath(sys.prefix)]
    read_only += [path for path in runs if any(within(path, folder) for folder in (root, *kept))]
    return Policy(root=root, temp=temp, network=network, writable=tuple(kept), hidden=hidden,
                  read_only=tuple(path for path in read_only if os.path.lexists(path)),
                  worktree_writable=tuple(path for path in worktree_writable if os.path.isdir(path)),
                  tripwires=tuple(tripwires), dropped=tuple(dropped), runtime=runtime_folders())


def runtime_folders() -> tuple[str, ...]:
    """Totem's folder and its Python's prefixes that lie in /tmp or /var/tmp (a clone made
    there), links resolved: commands see those folders private, so they are brought back."""
    found: list[str] = []
    for path in (INSTALL_ROOT, sys.prefix, sys.base_prefix):
        real = os.path.realpath(path)
        if (within(real, INSIDE_TMP) or within(real, "/var/tmp")) and os.path.isdir(real) \
                and not any(within(real, kept) for kept in found):
            found.append(real)
    return tuple(found)


def bwrap_arguments(bwrap: str, policy: Policy, root_user: bool, empty: str) -> list[str]:
    """The bwrap argv (up to `--`) of a policy: the mounts, the namespaces, the capabilities.
    `empty` is an empty folder that read-only binds hide folders with."""
    args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session"]
    args += ["--cap-drop", "ALL"] if root_user else ["--unshare-user"]
    if not policy.network:
        args.append("--unshare-net")
    args += ["--bind", policy.temp, INSIDE_TMP]
    if os.path.isdir("/var/tmp"):
        args += ["--bind", policy.temp, "/var/tmp"]
    for folder in policy.runtime:
        args += ["--ro-bind", folder, folder]
    writable = (policy.root, *policy.writable, *policy.worktree_writable)
    # A hidden place that holds a writable folder becomes an empty tmpfs first (bwrap makes the
    # mount points in it), read-only once the folders are bound into it.
    holding = [place for place in policy.hidden if any(within(folder, place) and folder != place
                                                       for folder in writable)]
    for place in holding:
        args += ["--tmpfs", place]
    for folder in writable:
        args += ["--bind", folder, folder]
        if folder == policy.root and os.path.isdir(os.path.join(folder, ".git")):
            dot_git = os.path.join(folder, ".git")  # a mount point: it cannot be renamed away
            args += ["--bind", dot_git, dot_git]
    for path in policy.read_only:
        args += ["--ro-bind", path, path]
    for place in policy.hidden:
        if place in holding or not _visible(place, policy, (*writable, *policy.runtime)):
            continue
        if os.path.isdir(place) and not os.path.islink(place):
            args += ["--ro-bind", empty, place]
        else:
            args += ["--ro-bind", "/dev/null", place]
    for place in holding:
        args += ["--remount-ro", place]
    args += ["--chdir", policy.root]
    return args


def _visible(place: str, policy: Policy, brought_back: tuple[str, ...]) -> bool:
    """Whether a hidden place needs a mount: under the private /tmp only what a writable or a
    runtime folder brings back is seen."""
    if not within(place, INSIDE_TMP) and not within(place, "/var/tmp"):
        return True
    return any(within(place, folder) for folder in brought_back)


def landlock_arguments(policy: Policy, readable: list[str]) -> list[str]:
    """The launcher's file rules when Landlock is alone: read the allow-list, write the folders
    (the session's per top-level entry, minus what is read-only or hidden), the temp folder and
    the devices."""
    args: list[str] = []
    for path in readable:
        args += ["--read", path]
    excluded = [*policy.hidden, *policy.read_only, os.path.join(policy.root, ".git")]
    for folder in (policy.root, *policy.writable):
        for path in cover(folder, excluded):
            args += ["--write", path]
    for path in (policy.temp, "/dev/null", "/dev/pts", "/dev/tty", "/dev/ptmx"):
        if os.path.exists(path):
            args += ["--write", path]
    return args


def readable_paths(policy: Policy, temp_base: str) -> list[str]:
    """Landlock alone: what commands may read: the entries of `/` (down through the parents of
    hidden places) minus the hidden places, /tmp and /var/tmp (other users' and programs' files;
    the command has its own) and /dev (only the devices of `landlock_arguments`); and the
    session's folders (which may lie in one of those) minus the hidden places in them."""
    excluded = [*policy.hidden, "/tmp", "/var/tmp", "/dev", temp_base]
    found = cover("/", excluded)
    for folder in (policy.root, *policy.writable, *policy.worktree_writable, *policy.runtime):
        found += cover(folder, policy.hidden)
    return found + [path for path in ("/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
                    if os.path.exists(path)]


# -- the service ----------------------------------------------------------------------------------

@dataclass
class _Setup:
    kernel: Kernel
    port_ruleset: int | None = None  # refuses Totem's port (network on)
    tcp_ruleset: int | None = None  # refuses all TCP (network off, Landlock alone)
    problems: list[str] = field(default_factory=list)
    rulesets: asyncio.Future | None = None  # built at the first command that needs them
    spawner: spawning.ConfinedLoop | None = None  # the thread that holds `port_ruleset`'s domain

    def close(self) -> None:
        for fd in (self.port_ruleset, self.tcp_ruleset):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.port_ruleset = self.tcp_ruleset = None


class Confinement:
    """What one tool call's processes may reach, and how to start them so."""

    def __init__(self, sandbox: Sandbox, policy: Policy | None, unconfined: str = ""):
        self.sandbox = sandbox
        self.policy = policy  # None: nothing confines the command
        self.unconfined = unconfined  # why not: "sandbox = off", "asked to run outside the sandbox"

    def reach(self) -> dict:
        """What the command will be able to reach, for the permission question."""
        if self.policy is None:
            return {"confined": False, "why": self.unconfined}
        policy = self.policy
        kernel = self.sandbox.kernel
        missing = missing_protections(kernel, policy.network)
        reach = {"confined": True, "writes": [policy.root, "$TMPDIR (private)", *policy.writable],
                 "network": policy.network, "layers": self.sandbox.layers(), "missing": missing}
        if policy.dropped:
            reach["notwritable"] = list(policy.dropped)
        return reach

    async def launch(self, argv: list[str]) -> runner.Launch:
        """The launch of `argv` under this confinement (the `confine` of `runner.run_command`).
        Raises SandboxRefused when `sandbox = required` and a protection is missing."""
        return await self.sandbox.launch(self, list(argv))

    async def launch_server(self, argv: list[str]) -> runner.Launch:
        """The same for `runner.spawn_server` (a project's MCP server), whose child is watched
        on the server's own loop: it takes the Landlock domain from the launcher instead."""
        return await self.sandbox.launch(self, list(argv), spawned_here=True)

    def explain(self, output: str) -> list[str]:
        """Notes naming what the sandbox refused, read from the command's output."""
        if self.policy is None:
            return []
        return refusals.explain(output, self.policy, self.sandbox.port, home_folder())


def absolute_program(program: str, cwd: str) -> str:
    """The program as the launcher needs it, an absolute path: a bare name (`sh`, `npx` of an MCP
    server's definition) found on the children's PATH as the runner would find it, a relative
    path taken from the folder the child starts in. A name that is found nowhere stays as it
    is, for the start to fail with the runner's own message."""
    if os.path.isabs(program):
        return program
    if "/" in program:
        return os.path.normpath(os.path.join(cwd, program))
    return shutil.which(program, path=runner.minimal_environment()["PATH"]) or program


class Sandbox:
    """The sandbox of one Totem: its mode, the kernel's offer, the temp folders, the rulesets."""

    def __init__(self, config) -> None:
        self.mode = config.sandbox
        self.search_path = config.sandboxpath
        self.data_dir = os.path.realpath(config.data)
        # Its config file, and the one beside totem.py (the default one) whatever was read.
        self.config_files = tuple(dict.fromkeys(os.path.realpath(path) for path in (
            config.source, os.path.join(INSTALL_ROOT, "config.ini")) if path))
        self.defaults = {"network": config.network, "unattendednetwork": config.unattendednetwork,
                         "writable": tuple(config.writable), "secrets": tuple(config.secrets)}
        self.port: int | None = None
        self._setup: asyncio.Future | None = None
        self._temp_base: str | None = None
        self._sessions: dict[str, str] = {}
        self._counter = itertools.count(1)
        self._cgroups: set[str] = set()

    # -- start, status, stop -----------------------------------------------------------------

    def start(self, port: int) -> None:
        """Probe the kernel and build the network rulesets in the background; commands wait for
        it. Logs one line saying which protections hold."""
        self.port = port
        if self._setup is None:
            self._setup = asyncio.ensure_future(self._prepare())

    async def ready(self) -> _Setup | None:
        """The probe's outcome (None with `sandbox = off`)."""
        if self.mode == "off":
            return None
        if self._setup is None:
            self.start(self.port or 0)
        assert self._setup is not None
        return await asyncio.shield(self._setup)

    @property
    def kernel(self) -> Kernel | None:
        if self.mode == "off" or self._setup is None or not self._setup.done() or self._setup.exception():
            return None
        return self._setup.result().kernel

    def layers(self, kernel: Kernel | None = None) -> list[str]:
        """The layers that confine commands: "bubblewrap", "landlock <ABI>"."""
        kernel = kernel or self.kernel
        if kernel is None:
            return []
        return (["bubblewrap"] if kernel.bwrap else []) + ([f"landlock {kernel.landlock}"] if kernel.landlock else [])

    def probed(self) -> bool:
        """Whether `status()` answers at once (the probe has ended, or the sandbox is off)."""
        return self.mode == "off" or (self._setup is not None and self._setup.done())

    async def status(self) -> dict:
        """What Account|read says of the sandbox: the mode, the layers and, with the network on
        and off, which protections hold and why the others do not."""
        if self.mode == "off":
            return {"mode": "off", "layers": [], "holds": [], "missing": dict.fromkeys(PROTECTIONS, "sandbox = off"),
                    "open": list(STILL_OPEN)}
        setup = await self.ready()
        assert setup is not None
        kernel = setup.kernel
        missing = missing_protections(kernel, True) | missing_protections(kernel, False)
        return {"mode": self.mode, "layers": self.layers(), "root": kernel.root,
                "holds": [name for name in PROTECTIONS if name not in missing], "missing": missing,
                "open": list(STILL_OPEN), "problems": list(setup.problems)}

    async def stop(self) -> None:
        if self._setup is not None:
            if not self._setup.done():
                self._setup.cancel()
            with contextlib.suppress(BaseException):
                setup = await self._setup
                if setup.rulesets is not None:
                    with contextlib.suppress(BaseException):
                        await setup.rulesets
                if setup.spawner is not None:
                    await setup.spawner.stop()
                setup.close()
        for path in list(self._cgroups):
            await spawning.end_cgroup(path, None)
            self._cgroups.discard(path)
        if self._temp_base is not None:
            await asyncio.to_thread(spawning.remove_tree, self._temp_base)
            self._temp_base = None
            self._sessions.clear()

    async def forget_session(self, sessionid: str) -> None:
        """A removed session: its temp folder goes."""
        folder = self._sessions.pop(sessionid, None)
        if folder is not None:
            await asyncio.to_thread(spawning.remove_tree, folder)

    # -- one call's confinement --------------------------------------------------------------

    def confinement(self, root: str, sessionid: str, unattended: bool, limits: Mapping, outside: bool = False
                    ) -> Confinement:
        """The confinement of one tool call's processes in `root` for a session. `unattended`:
        a scheduled run or a sub-agent (the network setting is `unattendednetwork`). `limits`:
        the run's settings (`settings_service.values`). `outside`: the person was asked to run
        it outside the sandbox."""
        if self.mode == "off":
            return Confinement(self, None, "sandbox = off")
        if outside:
            return Confinement(self, None, "asked to run outside the sandbox")
        key = "unattendednetwork" if unattended else "network"
        network = bool(limits.get(key, self.defaults[key]))
        writable = tuple(limits.get("writable", self.defaults["writable"]) or ())
        secrets = tuple(limits.get("secrets", self.defaults["secrets"]) or ())
        hidden = hidden_places(self.data_dir, self.config_files, secrets)
        policy = make_policy(root, self._session_temp_path(sessionid), network, hidden, writable)
        kernel = self.kernel
        if kernel is not None and kernel.bwrap is None:
            policy = dataclasses.replace(policy, landlock_alone=True)
        return Confinement(self, policy)

    async def question_reach(self, confinement: Confinement | None) -> dict:
        """What a permission question shows of the sandbox: the reach of a command (once the
        probe has said what holds), or for another tool, only that the sandbox is off."""
        if confinement is not None:
            if confinement.policy is not None:
                await self.ready()
            return confinement.reach()
        return {"confined": False, "why": "sandbox = off"} if self.mode == "off" else {}

    def _session_temp_path(self, sessionid: str) -> str:
        folder = self._sessions.get(sessionid)
        if folder is None:
            folder = os.path.join(self._base(), _safe_name(sessionid))
            self._sessions[sessionid] = folder
        return folder

    def _base(self) -> str:
        """This server's temp folder, outside the data folder (mode 0700, removed at stop)."""
        if self._temp_base is None:
            parent = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()
            self._temp_base = os.path.realpath(tempfile.mkdtemp(prefix=f"totem-{os.getuid()}-", dir=parent))
            os.mkdir(os.path.join(self._temp_base, "empty"), 0o500)
        return self._temp_base

    async def launch(self, confinement: Confinement, argv: list[str], spawned_here: bool = False) -> runner.Launch:
        """See `Confinement.launch`; `spawned_here`: the child cannot be started from the
        spawner's thread (see `Confinement.launch_server`)."""
        if confinement.policy is None:
            if self.mode == "required":
                raise SandboxRefused("sandbox = required in config.ini: no command runs outside the sandbox")
            return runner.Launch(argv)
        setup = await self.ready()
        assert setup is not None
        policy = confinement.policy
        await self._rulesets(setup)
        missing = self._missing(setup, policy.network)
        if self.mode == "required" and missing:
            raise SandboxRefused("sandbox = required, and this command would run without: " + "; ".join(
                f"{PROTECTIONS[name]} ({why})" for name, why in missing.items()))
        argv = [absolute_program(argv[0], policy.root), *argv[1:]]
        kernel = setup.kernel
        if kernel.bwrap is None and not policy.landlock_alone:  # made before the probe had said
            policy = confinement.policy = dataclasses.replace(policy, landlock_alone=True)
        os.makedirs(policy.temp, mode=0o700, exist_ok=True)
        if kernel.bwrap is None and kernel.landlock < 1:
            return runner.Launch(argv, env=self._environment(policy, policy.temp))
        before = {path: os.path.lexists(path) for path in policy.tripwires}
        cgroup = cgroup_fd = None
        if kernel.cgroup is not None:
            name = f"{CGROUP_PREFIX}{os.getpid()}-{next(self._counter)}"
            cgroup, cgroup_fd = spawning.make_cgroup(kernel.cgroup, name, MAX_PROCESSES)
            self._cgroups.add(cgroup)
        fds = spawning.Descriptors()
        if cgroup_fd is not None:
            fds.own(cgroup_fd)
        try:
            spawner = setup.spawner if policy.network and not spawned_here else None
            if kernel.bwrap is not None:
                launch = self._bwrap_launch(setup, policy, argv, fds, cgroup_fd, spawner)
            else:
                launch = await self._landlock_launch(setup, policy, argv, cgroup_fd, spawner)
        except BaseException:
            fds.close_all()
            if cgroup is not None:
                await spawning.end_cgroup(cgroup, None)
            raise

        async def release() -> None:
            fds.close_all()
            if cgroup is not None:
                await spawning.end_cgroup(cgroup, None)
                self._cgroups.discard(cgroup)
            _spring_tripwires(before)

        return dataclasses.replace(launch, release=release)

    def _bwrap_launch(self, setup: _Setup, policy: Policy, argv: list[str], fds: spawning.Descriptors,
                      cgroup_fd: int | None, spawner: spawning.ConfinedLoop | None) -> runner.Launch:
        """bwrap for the mounts and namespaces; the launcher inside it only where Landlock must
        refuse Totem's port (the network on). bwrap waits on a pipe once its namespaces are
        made, while `started` puts its child in the command's cgroup (root) or limits its
        processes inside its user namespace (an ordinary user)."""
        kernel = setup.kernel
        assert kernel.bwrap is not None
        info_r, info_w = fds.pipe()
        block_r, block_w = fds.pipe()
        pass_fds = [info_w, block_r]
        inner = argv
        if policy.network and spawner is None and setup.port_ruleset is not None:
            inner = [os.path.realpath(sys.executable), "-I", "-S", LAUNCHER, "--ruleset-fd", str(setup.port_ruleset),
                     "--", *argv]
            pass_fds.append(setup.port_ruleset)
        wrapped = [*bwrap_arguments(kernel.bwrap, policy, kernel.root, os.path.join(self._base(), "empty")),
                   "--info-fd", str(info_w), "--block-fd", str(block_r), "--", *inner]

        async def started(_pid: int) -> None:
            fds.close(info_w)
            fds.close(block_r)
            child = await spawning.bwrap_child_pid(info_r)
            fds.close(info_r)
            if child is not None:
                spawning.limit_child(child, cgroup_fd, kernel.root, MAX_PROCESSES)
            os.write(block_w, b"1")
            fds.close(block_w)

        return runner.Launch(wrapped, env=self._environment(policy, INSIDE_TMP), pass_fds=tuple(pass_fds),
                             started=started, spawner=spawner.run if spawner is not None else None)

    async def _landlock_launch(self, setup: _Setup, policy: Policy, argv: list[str], cgroup_fd: int | None,
                               spawner: spawning.ConfinedLoop | None) -> runner.Launch:
        """Landlock alone: the launcher joins the cgroup (or limits processes), applies the
        network ruleset and the file rules it is given, and stays as the subreaper."""
        kernel = setup.kernel
        options: list[str] = []
        pass_fds: list[int] = []
        if cgroup_fd is not None:
            options += ["--cgroup-fd", str(cgroup_fd)]
            pass_fds.append(cgroup_fd)
        elif not kernel.root:
            options += ["--nproc", str(MAX_PROCESSES)]
        ruleset = None if spawner else setup.port_ruleset if policy.network else setup.tcp_ruleset
        if ruleset is not None:
            options += ["--ruleset-fd", str(ruleset)]
            pass_fds.append(ruleset)
        if kernel.root:
            options.append("--drop-caps")
        readable = await asyncio.to_thread(readable_paths, policy, self._base())
        wrapped = [os.path.realpath(sys.executable), "-I", "-S", LAUNCHER, *options,
                   *landlock_arguments(policy, readable), "--scope", "--supervise", "--", *argv]
        return runner.Launch(wrapped, env=self._environment(policy, policy.temp), pass_fds=tuple(pass_fds),
                             spawner=spawner.run if spawner is not None else None)

    def _environment(self, policy: Policy, temp: str) -> dict[str, str]:
        env = {"TMPDIR": temp, "TMP": temp, "TEMP": temp}
        env.update({name: os.path.join(temp, relative) for name, relative in CACHE_VARIABLES.items()})
        return env

    # -- the probe ---------------------------------------------------------------------------

    async def _prepare(self) -> _Setup:
        kernel = await probe(self.search_path)
        log.info("%s", self._startup_line(kernel))
        return _Setup(kernel)

    async def _rulesets(self, setup: _Setup) -> None:
        """Build the network rulesets once, in a worker thread, at the first command (65,534
        port rules take a tenth of a second: a server that runs no command never pays it)."""
        if setup.kernel.landlock < confine.NET_ABI:
            return
        if setup.rulesets is None:
            setup.rulesets = asyncio.ensure_future(self._make_rulesets(setup))
        await asyncio.shield(setup.rulesets)

    async def _make_rulesets(self, setup: _Setup) -> None:
        await asyncio.to_thread(self._build_rulesets, setup)
        await self._start_spawner(setup)

    async def _start_spawner(self, setup: _Setup) -> None:
        spawner = spawning.ConfinedLoop(setup.port_ruleset) if setup.port_ruleset is not None else None
        if spawner is not None and await spawner.start():
            setup.spawner = spawner
        elif spawner is not None:
            setup.problems.append(f"commands pay a Landlock domain each: {spawner.problem}")

    def _build_rulesets(self, setup: _Setup) -> None:
        abi = setup.kernel.landlock
        try:
            setup.port_ruleset = confine.network_ruleset(abi, {self.port} if self.port else ())
            if setup.kernel.bwrap is None:
                setup.tcp_ruleset = confine.network_ruleset(abi, all_tcp=True)
        except OSError as exc:
            setup.problems.append(f"the network ruleset could not be built: {exc}")
            log.warning("sandbox: the network ruleset could not be built: %s", exc)

    def _missing(self, setup: _Setup, network: bool) -> dict[str, str]:
        missing = missing_protections(setup.kernel, network)
        if network and setup.rulesets is not None and setup.rulesets.done() and setup.port_ruleset is None \
                and "ownport" not in missing and setup.kernel.landlock >= confine.NET_ABI:
            missing["ownport"] = "the network ruleset could not be built"
        return missing

    def _startup_line(self, kernel: Kernel) -> str:
        missing = missing_protections(kernel, True) | missing_protections(kernel, False)
        layers = " + ".join(self.layers(kernel)) or "nothing"
        held = "every protection holds" if not missing else "missing: " + "; ".join(
            f"{name} ({why})" for name, why in missing.items())
        return f"sandbox = {self.mode}: commands run under {layers}; {held}"


async def probe(search_path: str = SYSTEM_PATH) -> Kernel:
    """What this machine offers: Landlock's ABI, a bwrap that runs the launcher (found only in
    `search_path`), and (as root) a pids cgroup hierarchy where a cgroup can be made."""
    root = os.geteuid() == 0
    abi = confine.landlock_abi()
    bwrap = shutil.which("bwrap", path=search_path)
    problem = "" if bwrap else f"bwrap is not installed in {search_path}"
    if bwrap:
        problem = await _try_bwrap(bwrap, root)
        if problem:
            bwrap = None
    cgroup, cgroup_problem = (None, "")
    if root:
        cgroup, cgroup_problem = await asyncio.to_thread(spawning.find_pids_hierarchy, MAX_PROCESSES)
    return Kernel(root=root, landlock=abi, bwrap=bwrap, bwrap_problem=problem, cgroup=cgroup,
                  cgroup_problem=cgroup_problem)


async def _try_bwrap(bwrap: str, root: bool) -> str:
    """Why this bwrap cannot confine a command here ("" when it can)."""
    true = shutil.which("true", path=SYSTEM_PATH) or "/bin/true"
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
            "--unshare-net", "--die-with-parent", *(["--cap-drop", "ALL"] if root else ["--unshare-user"]),
            "--", os.path.realpath(sys.executable), "-I", "-S", LAUNCHER, "--", true]
    try:
        result = await runner.run_process(argv, cwd="/", env={"PATH": SYSTEM_PATH}, timeout_s=PROBE_TIMEOUT_S,
                                          stdout_cap=0, stderr_cap=2000)
    except OSError as exc:
        return f"bwrap cannot run: {exc.strerror or exc}"
    if result.returncode != 0:
        said = result.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"bwrap fails here: {said[-1] if said else f'status {result.returncode}'}"
    return ""


def _spring_tripwires(before: Mapping[str, bool]) -> None:
    """Remove a file that makes git read another configuration, made during the command."""
    for path, existed in before.items():
        if not existed and os.path.lexists(path):
            with contextlib.suppress(OSError):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
                log.warning("removed %s, made by a command: git would read another configuration", path)


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:64] or "session"
