"""The kernel sandbox of the agent's processes (sandbox.py, confine.py), against real processes.

Each rule is tried with the attacker's input under bubblewrap + Landlock, under Landlock alone
(bwrap looked for in a folder without it: `sandboxpath`), and as a control with `sandbox = off`,
where every one must escape: a test that cannot fail proves nothing. The commands run through
the real runner with the confinement the running server builds; the end-to-end tests go
through the scripted model and the bash tool. A layer the kernel lacks skips with the reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import unittest
import uuid

from tests.model_server import reply
from tests.test_loop import LoopCase
from tests.test_mcp_client import SERVER as MCP_SERVER, McpClientCase
from tests.utils import MS, TotemCase, call, command_line, next_event, running_totem
from totem.agent.gate import Asker
from totem.app import App
from totem.config import parse_values
from totem.process import runner
from totem.security import confine, refusals, sandbox
from totem.security.permissions import (
    COMMAND,
    OUTSIDE_SANDBOX_REASON,
    OUTSIDE_SANDBOX_UNATTENDED,
    Call,
    Rule,
    ToolKind,
    decide,
)

ABI = confine.landlock_abi()
BWRAP = shutil.which("bwrap", path=sandbox.SYSTEM_PATH)
NO_BWRAP_PATH = "/nonexistent-totem-test-bin"
REAL_HOME = os.path.realpath(os.path.expanduser("~"))
SECRET = "totem-test-secret-" + uuid.uuid4().hex[:8]
BASH = ToolKind(COMMAND, changes=True)


def bwrap_works() -> bool:
    if BWRAP is None:
        return False
    argv = [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
            *(["--cap-drop", "ALL"] if os.geteuid() == 0 else ["--unshare-user"]), "true"]
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


BWRAP_OK = bwrap_works()
NEED_BWRAP = unittest.skipUnless(BWRAP_OK and ABI >= 4, "needs bubblewrap that runs here and Landlock ABI 4+")
NEED_LANDLOCK = unittest.skipUnless(ABI >= confine.SCOPE_ABI, f"needs Landlock ABI {confine.SCOPE_ABI}+ (has {ABI})")


def processes_with(marker: str) -> list[int]:
    """The pids of this machine whose command line holds `marker`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        if marker.encode() in command_line(int(name)).replace(b"\0", b" "):
            found.append(int(name))
    return found


def kill_all(marker: str) -> None:
    for pid in processes_with(marker):
        try:
            os.kill(pid, 9)
        except OSError:
            pass


class SandboxCase(TotemCase):
    """A running Totem whose HOME is a temporary folder with secret places, a project that is a
    git repository, and a folder outside it."""

    confined = True
    sockets_open = False  # Landlock alone cannot refuse a pathname unix socket

    async def asyncSetUp(self):
        # Outside /tmp, which a confined command does not see at all: the hiding itself is tried.
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix=".totem-sandbox-test-", dir=REAL_HOME))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(self.home)
        for place, text in ((".ssh/id_ed25519", SECRET), (".aws/credentials", SECRET), (".bashrc", "# rc\n"),
                            (".config/gh/hosts.yml", SECRET), (".config/fine.txt", "fine\n")):
            os.makedirs(os.path.dirname(os.path.join(self.home, place)), exist_ok=True)
            with open(os.path.join(self.home, place), "w") as handle:
                handle.write(text)
        old_home = os.environ.get("HOME")
        os.environ["HOME"] = self.home
        self.addCleanup(os.environ.__setitem__, "HOME", old_home) if old_home else \
            self.addCleanup(os.environ.pop, "HOME", None)
        self._server = running_totem(self.tmp, self.rules, **self.settings)
        self.app = await self._server.__aenter__()
        self.sandbox = await self.app.sandbox_ready()
        self.root = self.folder("proj")
        subprocess.run(["git", "init", "-q", self.root], check=True)
        os.makedirs(os.path.join(self.root, ".git", "hooks"), exist_ok=True)
        os.makedirs(os.path.join(self.root, ".totem"))
        self.outside = self.folder("outside")

    async def sh(self, command: str, *, network: bool = True, timeout: float = 60, sessionid: str = "s1",
                 root: str | None = None, limits: dict | None = None, on_output=None):
        """Run a command line as the bash tool does: (result, confinement)."""
        root = root or self.root
        confinement = self.sandbox.confinement(root, sessionid, False, {"network": network} | (limits or {}))
        result = await runner.run_command(command, cwd=root, timeout_s=timeout, output_cap_bytes=200_000,
                                          confine=confinement.launch, on_output=on_output)
        return result, confinement

    def held(self, escaped: bool, what: str) -> None:
        """Confined: it must not have escaped. The control: it must have (else the case proves nothing)."""
        if self.confined:
            self.assertFalse(escaped, f"escaped the sandbox: {what}")
        else:
            self.assertTrue(escaped, f"the control (sandbox = off) did not escape: {what}")

    def script(self, name: str, code: str) -> str:
        """A Python file in the project, and the command line that runs it."""
        with open(os.path.join(self.root, name), "w") as handle:
            handle.write(textwrap.dedent(code))
        return f"{sys.executable} -I -S {name}"

    def read(self, path: str) -> str:
        try:
            with open(path) as handle:
                return handle.read()
        except OSError:
            return ""


class Rules:
    """The rules, each with the attacker's inputs; mixed into a confined case and the control."""

    async def test_writes_outside_the_project_are_refused(self):
        """A write outside the project, to ~/.bashrc, through a link made in the project, and to
        the machine's /tmp never lands."""
        marker = "totem-escape-" + uuid.uuid4().hex[:8]
        self.addCleanup(lambda: os.path.exists(f"/tmp/{marker}") and os.unlink(f"/tmp/{marker}"))
        os.makedirs(os.path.join(self.root, "src"))
        await self.sh(f"echo x > {self.outside}/direct; echo pwned >> ~/.bashrc; "
                      f"ln -s {self.outside} src/link && echo x > src/link/through; echo x > /tmp/{marker}")
        self.held(os.path.exists(os.path.join(self.outside, "direct")), "a file outside the project")
        self.held("pwned" in self.read(os.path.join(self.home, ".bashrc")), "~/.bashrc")
        self.held(os.path.exists(os.path.join(self.outside, "through")), "a link made in the project")
        self.held(os.path.exists(f"/tmp/{marker}"), "the machine's /tmp")
        self.assertTrue(os.path.islink(os.path.join(self.root, "src", "link")), "writes inside the project work")

    async def test_git_hooks_config_and_totem_stay_as_they_were(self):
        """`.git/hooks/pre-commit`, core.fsmonitor in .git/config, .totem/ and a .git moved away
        and made again: nothing changes what git or Totem will run."""
        config = self.read(os.path.join(self.root, ".git", "config"))
        await self.sh("echo evil > .git/hooks/pre-commit; printf '[core]\\n\\tfsmonitor = evil\\n' >> .git/config; "
                      "echo '{}' > .totem/mcp.json")
        self.held(os.path.exists(os.path.join(self.root, ".git", "hooks", "pre-commit")), ".git/hooks/pre-commit")
        self.held(self.read(os.path.join(self.root, ".git", "config")) != config, ".git/config")
        self.held(os.path.exists(os.path.join(self.root, ".totem", "mcp.json")), ".totem/")
        await self.sh("mv .git .git-away && mkdir .git && printf '[core]\\n\\tfsmonitor = evil\\n' > .git/config")
        self.held("evil" in self.read(os.path.join(self.root, ".git", "config")), "a .git made again")

    async def test_a_commondir_made_in_git_is_removed(self):
        """`.git/commondir` would make git read another folder's config: gone after the command."""
        await self.sh("echo ../elsewhere > .git/commondir")
        self.held(os.path.exists(os.path.join(self.root, ".git", "commondir")), ".git/commondir")

    async def test_secret_places_and_totems_own_files_are_unreadable(self):
        """~/.ssh, ~/.aws, ~/.config/gh, a place of the `secrets` setting, Totem's key and data
        folder and the config file beside totem.py: nothing of them reaches the output."""
        extra = self.folder("vault")
        with open(os.path.join(extra, "token"), "w") as handle:
            handle.write(SECRET)
        data = self.app.config.data
        with open(os.path.join(data, "notes.txt"), "w") as handle:
            handle.write(SECRET)
        config_file = os.path.join(sandbox.INSTALL_ROOT, "config.ini")
        for command in ("cat ~/.ssh/id_ed25519", "cat ~/.aws/credentials", "cat ~/.config/gh/hosts.yml",
                        f"cat {extra}/token", f"cat {data}/notes.txt", f"ls -a {data} 2>/dev/null"):
            result, _ = await self.sh(command, limits={"secrets": [extra]})
            self.held(SECRET in result.output or "notes.txt" in result.output and "ls" in command, command)
        result, _ = await self.sh(f"cat {data}/secret.key 2>/dev/null | wc -c")
        self.held(result.output.strip() != "0", "Totem's key")
        result, _ = await self.sh(f"cat {config_file}")
        self.held("[totem]" in result.output, "the config file")
        result, _ = await self.sh("cat ~/.config/fine.txt")
        self.assertIn("fine", result.output, "what is not secret stays readable")

    async def test_a_secret_place_inside_the_project_is_hidden_there_too(self):
        """With $HOME as the project, ~/.ssh stays unreadable by its path inside the project."""
        result, _ = await self.sh("cat .ssh/id_ed25519; cat ./.aws/credentials", root=self.home)
        self.held(SECRET in result.output, "a secret place inside the project")

    async def test_a_hidden_unix_socket_cannot_be_reached(self):
        """A socket listed in `secrets` (as the docker and D-Bus sockets are by default) refuses
        a connection under bubblewrap; Landlock alone leaves pathname sockets open, as the README
        says, and the control reaches it."""
        path = os.path.join(self.home, "agent.sock")
        server = socket.socket(socket.AF_UNIX)
        self.addCleanup(server.close)
        server.bind(path)
        server.listen(4)
        code = f"import socket; socket.socket(socket.AF_UNIX).connect({path!r}); print('reached')"
        result, _ = await self.sh(f"{sys.executable} -I -S -c \"{code}\"", limits={"secrets": [path]})
        reached = "reached" in result.output
        if self.sockets_open:
            self.assertTrue(reached, "Landlock alone: pathname sockets are open (README, What is left)")
        else:
            self.held(reached, "a hidden unix socket")

    async def test_totems_own_port_is_refused_on_every_loopback_address(self):
        """With the network on, TCP to Totem's port fails on 127.0.0.1 and on ::1 (a listener of
        the test holds [::1] on the same port, so the control can reach it)."""
        port = self.app.port
        v6 = socket.socket(socket.AF_INET6)
        self.addCleanup(v6.close)
        try:
            v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            v6.bind(("::1", port))
            v6.listen(8)
            hosts = ("127.0.0.1", "::1")
        except OSError:
            hosts = ("127.0.0.1",)
        for host in hosts:
            code = (f"import socket; s = socket.create_connection(({host!r}, {port}), timeout=5); "
                    "print('connected')")
            result, confinement = await self.sh(f"{sys.executable} -I -S -c \"{code}\"")
            self.held("connected" in result.output, f"Totem's port on {host}")
            if self.confined:
                self.assertTrue(any("own port" in note for note in confinement.explain(result.output)),
                                result.output)

    async def test_network_off_blocks_tcp(self):
        """With the setting network off, a TCP connection to a listener of this machine fails."""
        listener = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(listener.close)
        port = listener.getsockname()[1]
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')"
        result, _ = await self.sh(f"{sys.executable} -I -S -c \"{code}\"", network=False)
        self.held("connected" in result.output, "TCP with the network off")
        result, _ = await self.sh(f"{sys.executable} -I -S -c \"{code}\"", network=True)
        self.assertIn("connected", result.output, "with the network on other ports are reached")

    async def test_no_signal_trace_or_proc_read_outside(self):
        """kill -0 of the server, ptrace of a process of the person, /proc/<server>/environ."""
        sleeper = subprocess.Popen(["sleep", "300"])
        self.addCleanup(sleeper.wait)
        self.addCleanup(sleeper.kill)
        result, _ = await self.sh(f"kill -0 {os.getpid()} && echo signalled")
        self.held("signalled" in result.output, "a signal to the server")
        trace = textwrap.dedent(f"""
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.ptrace(0x4206, {sleeper.pid}, 0, 0) == 0:  # PTRACE_SEIZE: does not stop it
                print('traced'); libc.ptrace(17, {sleeper.pid}, 0, 0)
        """)
        result, _ = await self.sh(self.script("trace.py", trace))
        self.held("traced" in result.output, "ptrace of the person's process")
        result, _ = await self.sh(f"tr '\\0' '\\n' < /proc/{os.getpid()}/environ | grep -c '^HOME='")
        self.held(result.output.strip().startswith("1"), "/proc/<server>/environ")

    async def test_setsid_does_not_escape_the_timeout(self):
        """A child that starts its own session is gone when the command times out."""
        marker = f"{1000 + int(uuid.uuid4().hex[:4], 16)}.5"
        self.addCleanup(kill_all, f"sleep {marker}")
        result, _ = await self.sh(f"setsid sleep {marker} & sleep 600", timeout=1)
        self.assertTrue(result.timed_out)
        self.held(bool(processes_with(f"sleep {marker}")), "setsid past the timeout")

    async def test_setsid_does_not_escape_the_abort(self):
        """A child that starts its own session is gone when the command's task is cancelled."""
        marker = f"{1000 + int(uuid.uuid4().hex[:4], 16)}.25"
        self.addCleanup(kill_all, f"sleep {marker}")
        started = asyncio.Event()
        # The child says "started" from inside its new session, so the abort comes after the
        # setsid (said by the shell before it, a busy machine could abort first: no escape).
        task = asyncio.ensure_future(self.sh(f"setsid sh -c 'echo started; exec sleep {marker}' & sleep 600",
                                             on_output=lambda text: "started" in text and started.set()))
        await asyncio.wait_for(started.wait(), 30_000 * MS)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.held(bool(processes_with(f"sleep {marker}")), "setsid past the abort")

    async def test_a_process_limit_bounds_a_fork_bomb(self):
        """A bounded fork bomb (more children than MAX_PROCESSES) meets the limit, and nothing of
        it is left once the command ends."""
        wanted = sandbox.MAX_PROCESSES + 100
        bomb = textwrap.dedent(f"""
            import os, time
            for count in range({wanted}):
                try:
                    if os.fork() == 0:
                        time.sleep(120); os._exit(0)
                except OSError:
                    print('limit', count); break
            else:
                print('all', {wanted})
        """)
        marker = f"totem-bomb-{uuid.uuid4().hex[:8]}"
        self.addCleanup(kill_all, marker)
        result, _ = await self.sh(f"exec -a {marker} {self.script('bomb.py', bomb)}")
        self.held("all" in result.output, f"{wanted} processes: {result.output[-300:]}")
        self.assertEqual(processes_with(marker), [], "the processes of a command end with it")


@NEED_BWRAP
class BubblewrapTest(Rules, SandboxCase):
    """bubblewrap for the mounts and namespaces, Landlock for Totem's port."""


@NEED_LANDLOCK
class LandlockAloneTest(Rules, SandboxCase):
    """Landlock alone: bwrap is looked for where it is not."""

    settings = {"sandboxpath": NO_BWRAP_PATH}
    sockets_open = True


class ControlTest(Rules, SandboxCase):
    """sandbox = off: every rule's input must escape here."""

    confined = False
    settings = {"sandbox": "off"}


@NEED_BWRAP
class ConfinedTest(SandboxCase):
    """What only a confined command has: its temp folder, its caches, the notes on a refusal."""

    async def test_the_temp_folder_is_private_per_session_and_removed_with_it(self):
        """/tmp and TMPDIR are the session's own folder, another session does not see it, and
        it goes with the session and with the server."""
        result, confinement = await self.sh("echo $TMPDIR; echo mine > /tmp/f; ls -A /tmp", sessionid="one")
        self.assertEqual(result.output.splitlines()[0], "/tmp")
        folder = confinement.policy.temp
        self.assertEqual(self.read(os.path.join(folder, "f")), "mine\n")
        self.assertEqual(os.stat(os.path.dirname(folder)).st_mode & 0o777, 0o700)
        self.assertFalse(folder.startswith(os.path.realpath(self.app.config.data)))
        other, _ = await self.sh("ls -A /tmp; cat /tmp/f", sessionid="two")
        self.assertNotIn("mine", other.output)
        await self.sandbox.forget_session("one")
        self.assertFalse(os.path.exists(folder))
        base = os.path.dirname(folder)
        await self.sandbox.stop()
        self.assertFalse(os.path.exists(base))

    async def test_caches_go_to_the_temp_folder(self):
        """XDG_CACHE_HOME, npm's, pip's and Go's caches are in the temp folder, and writable."""
        result, _ = await self.sh("for v in XDG_CACHE_HOME npm_config_cache PIP_CACHE_DIR GOCACHE; do "
                                  "eval d=\\$$v; mkdir -p $d && touch $d/x && echo $v=$d; done")
        for name in ("XDG_CACHE_HOME", "npm_config_cache", "PIP_CACHE_DIR", "GOCACHE"):
            self.assertIn(f"{name}=/tmp/", result.output)

    async def test_a_refusal_is_named(self):
        """The notes name a write outside, a git file and a hidden place."""
        result, confinement = await self.sh("echo x >> ~/.npmrc; echo x > .git/hooks/post-commit; "
                                            "cat ~/.ssh/id_ed25519")
        notes = "\n".join(confinement.explain(result.output))
        self.assertIn(f"refused writing {self.home}/.npmrc", notes.replace("~", self.home))
        self.assertIn(".git/hooks/post-commit", notes)
        self.assertIn("hides", notes)

    async def test_the_writable_setting_adds_a_folder(self):
        """A folder of the setting `writable` can be written; one inside a hidden place cannot."""
        extra = self.folder("cache-of-the-person")
        await self.sh(f"echo x > {extra}/allowed", limits={"writable": [extra]})
        self.assertTrue(os.path.exists(os.path.join(extra, "allowed")))
        _, confinement = await self.sh(f"echo x > {self.home}/.ssh/planted",
                                       limits={"writable": [os.path.join(self.home, ".ssh")]})
        self.assertFalse(os.path.exists(os.path.join(self.home, ".ssh", "planted")))
        self.assertEqual(confinement.reach()["notwritable"], [os.path.join(self.home, ".ssh")])

    async def test_a_worktree_writes_its_objects_never_the_main_config(self):
        """A worktree in the (hidden) data folder is bound back in: git commits there, the main
        repository's config and hooks stay read-only."""
        def git(*args: str, folder: str = self.root) -> None:
            subprocess.run(["git", "-C", folder, "-c", "user.name=T", "-c", "user.email=t@e", *args],
                           check=True, capture_output=True)
        with open(os.path.join(self.root, "a.txt"), "w") as handle:
            handle.write("a\n")
        git("add", "-A")
        git("commit", "-q", "-m", "first")
        worktree = os.path.join(self.app.config.data, "worktrees", "w1")
        git("worktree", "add", "-q", "-b", "totem/w1", worktree)
        config = self.read(os.path.join(self.root, ".git", "config"))
        result, _ = await self.sh("echo b > b.txt && git add b.txt && git -c user.name=T -c user.email=t@e "
                                  f"commit -q -m second && echo committed; echo x >> {self.root}/.git/config; "
                                  f"echo x > {self.root}/.git/hooks/pre-commit", root=worktree)
        self.assertIn("committed", result.output)
        self.assertEqual(self.read(os.path.join(self.root, ".git", "config")), config)
        self.assertFalse(os.path.exists(os.path.join(self.root, ".git", "hooks", "pre-commit")))

    async def test_a_job_and_a_server_child_are_confined(self):
        """spawn_server (project MCP servers) runs under the same confinement, and ends it."""
        confinement = self.sandbox.confinement(self.root, "s1", False, {})
        seen = bytearray()
        child = await runner.spawn_server(["/bin/sh", "-c", f"echo x > {self.outside}/server; echo done"],
                                          cwd=self.root, env=runner.minimal_environment(),
                                          on_stdout=seen.extend, confine=confinement.launch_server)
        await asyncio.wait_for(asyncio.shield(child.exited), 30_000 * MS)
        await runner.end_server(child)
        self.assertFalse(os.path.exists(os.path.join(self.outside, "server")))
        self.assertIsNone(child.release)


@NEED_LANDLOCK
class RequiredTest(SandboxCase):
    """sandbox = required with bubblewrap missing: Landlock alone cannot close the network."""

    settings = {"sandbox": "required", "sandboxpath": NO_BWRAP_PATH}

    async def test_required_refuses_what_would_run_with_a_protection_missing(self):
        """With the network off (which needs a namespace) the command is refused, naming what
        is missing; with it on, Landlock alone holds every protection and it runs; a command
        outside the sandbox is always refused."""
        with self.assertRaises(sandbox.SandboxRefused) as refused:
            await self.sh(f"echo x > {self.outside}/f", network=False)
        self.assertIn("no network when the setting says off", str(refused.exception))
        self.assertIn("bubblewrap is needed", str(refused.exception))
        self.assertFalse(os.path.exists(os.path.join(self.outside, "f")))
        result, _ = await self.sh("echo ran")
        self.assertIn("ran", result.output)
        outside = self.sandbox.confinement(self.root, "s1", False, {}, outside=True)
        with self.assertRaises(sandbox.SandboxRefused):
            await outside.launch(["/bin/true"])
        status = await self.sandbox.status()
        self.assertEqual(status["layers"], [f"landlock {ABI}"])
        self.assertIn("network", status["missing"])


@unittest.skipUnless(BWRAP_OK or ABI >= 4, "needs bubblewrap or Landlock ABI 4+ to have the network off")
class UnattendedTest(SandboxCase):
    async def test_scheduled_runs_and_sub_agents_have_the_network_off_by_default(self):
        """The confinement of a bash call (agent/calls.py): the network on for a run the person
        watches, off for a scheduled run and a sub-agent unless `unattendednetwork` says on; a
        TCP connection from a scheduled run's command fails."""
        calls, bash = self.app.runs.parts.calls, self.app.runs.registry.get("bash")
        watched = Asker("s1", "p1", self.root)
        scheduled = Asker("s1", "p1", self.root, scheduled=True)
        subagent = Asker("s2", "p1", self.root, depth=1)
        for asker, limits, network in ((watched, {}, True), (scheduled, {}, False), (subagent, {}, False),
                                       (scheduled, {"unattendednetwork": True}, True),
                                       (watched, {"network": False}, False)):
            confinement = calls.confinement(asker, bash, {"command": "true"}, limits)
            self.assertIs(confinement.policy.network, network, (asker, limits))
        outside = calls.confinement(watched, bash, {"command": "true", "outside_sandbox": True}, {})
        self.assertIsNone(outside.policy)
        listener = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(listener.close)
        code = f"import socket; socket.create_connection(('127.0.0.1', {listener.getsockname()[1]})); print('reached')"
        confinement = calls.confinement(scheduled, bash, {"command": "true"}, {})
        result = await runner.run_command(f"{sys.executable} -I -S -c \"{code}\"", cwd=self.root, timeout_s=30,
                                          output_cap_bytes=10_000, confine=confinement.launch)
        self.held("reached" in result.output, "TCP from a scheduled run's command")


class StatusTest(SandboxCase):
    async def test_account_read_says_which_protections_hold(self):
        """Account|read has the mode, the layers and each protection held or missing, with why."""
        answer = await call(self.app, "account", query="wait=sandbox")
        status = answer.json()["sandbox"]
        self.assertEqual(status["mode"], "auto")
        self.assertEqual(set(status["holds"]) | set(status["missing"]), set(sandbox.PROTECTIONS))
        if BWRAP_OK and ABI >= 4:
            self.assertEqual(status["layers"], ["bubblewrap", f"landlock {ABI}"])
        self.assertTrue(status["open"])

    async def test_account_read_does_not_wait_for_the_probe_unless_asked(self):
        """Before the probe has ended Account|read says `probing` rather than waiting for it;
        `wait=sandbox` waits; another value of `wait` is 400."""
        fresh = App(parse_values({"data": os.path.join(self.tmp, "other-data"), "token": "none"}, self.tmp))
        self.assertEqual(await fresh.sandbox_status(False), {"mode": "auto", "probing": True})
        waited = (await call(self.app, "account", query="wait=sandbox")).json()["sandbox"]
        self.assertNotIn("probing", waited)
        self.assertEqual((await call(self.app, "account")).json()["sandbox"], waited)  # probed by now
        self.assertEqual((await call(self.app, "account", query="wait=forever")).status, 400)


# -- end to end: the bash tool, its question, running outside the sandbox ----------------------------

def elsewhere(case: unittest.TestCase) -> str:
    """A folder outside the project and outside /tmp (which a confined command does not see),
    removed after the test."""
    folder = os.path.realpath(tempfile.mkdtemp(prefix=".totem-sandbox-test-", dir=REAL_HOME))
    case.addCleanup(shutil.rmtree, folder, ignore_errors=True)
    return folder


class QuestionCase(LoopCase):
    async def until(self, kind: str, timeout_ms: int = 30_000) -> dict:
        while True:
            event = await next_event(self.ws, timeout_ms)
            if event["type"] == kind:
                return event["data"]

    async def tool_part(self) -> dict:
        await self.events_until("idle", 30_000)
        messages = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        return [part for m in messages for part in m["parts"] if part["kind"] == "tool"][-1]


@NEED_BWRAP
class QuestionTest(QuestionCase):
    async def test_the_question_shows_what_the_command_can_reach(self):
        """permission.ask of a command says: confined, where it writes, the network."""
        self.model.script(reply(tool_calls=[("bash", {"command": "echo hi > out.txt"})]), reply("ok"))
        await self.prompt()
        ask = await self.until("permission.ask")
        reach = ask["reach"]
        self.assertTrue(reach["confined"])
        self.assertEqual(reach["writes"][0], os.path.realpath(self.project["path"]))
        self.assertIs(reach["network"], True)
        self.assertEqual(reach["missing"], {})
        self.assertTrue(ask["once_only"])  # a redirection makes the line opaque: no rule can allow it
        await call(self.app, "permissions_reply", {"reply": "once"}, ident=ask["id"])
        part = await self.tool_part()
        self.assertEqual(part["data"]["reach"], reach)

    async def test_a_command_a_rule_can_allow_may_be_answered_always(self):
        """A confined command that a rule can match offers "always", with its patterns."""
        self.model.script(reply(tool_calls=[("bash", {"command": "touch out.txt"})]), reply("ok"))
        await self.prompt()
        ask = await self.until("permission.ask")
        self.assertTrue(ask["reach"]["confined"])
        self.assertFalse(ask["once_only"])
        self.assertTrue(ask["commands"][0]["patterns"], ask)
        await call(self.app, "permissions_reply", {"reply": "once"}, ident=ask["id"])
        await self.tool_part()

    async def test_a_refusal_is_named_in_the_tool_result(self):
        """The model reads which write the sandbox refused, and that it may ask to run outside."""
        outside = elsewhere(self)
        self.model.script(reply(tool_calls=[("bash", {"command": f"touch {outside}/x"})]), reply("ok"))
        await self.prompt()
        ask = await self.until("permission.ask")
        await call(self.app, "permissions_reply", {"reply": "once"}, ident=ask["id"])
        part = await self.tool_part()
        self.assertIn(f"the sandbox refused writing {outside}/x", part["data"]["output"])
        self.assertIn("outside_sandbox", part["data"]["output"])
        self.assertFalse(os.path.exists(os.path.join(outside, "x")))


@NEED_BWRAP
class OutsideTest(QuestionCase):
    rules = {"everything": "allow bash *"}

    async def test_outside_the_sandbox_asks_even_under_an_allow_rule_and_never_always(self):
        """With `allow bash *`, a call with outside_sandbox still asks, "always" is refused (and
        stores nothing), and "once" runs it unconfined."""
        outside = elsewhere(self)
        self.model.script(reply(tool_calls=[("bash", {"command": f"touch {outside}/x", "outside_sandbox": True})]),
                          reply("ok"))
        await self.prompt()
        ask = await self.until("permission.ask")
        self.assertTrue(ask["once_only"])
        self.assertEqual(ask["reach"], {"confined": False, "why": "asked to run outside the sandbox"})
        self.assertEqual(ask["reason"], OUTSIDE_SANDBOX_REASON)
        self.assertEqual([item["patterns"] for item in ask["commands"]], [[]])
        always = await call(self.app, "permissions_reply", {"reply": "always", "pattern": "touch *"}, ident=ask["id"])
        self.assertEqual(always.status, 400, always.body)
        self.assertEqual(always.json()[0]["name"], "reply")
        once = await call(self.app, "permissions_reply", {"reply": "once"}, ident=ask["id"])
        self.assertEqual(once.status, 200, once.body)
        part = await self.tool_part()
        self.assertTrue(os.path.exists(os.path.join(outside, "x")))
        self.assertTrue(part["data"]["result"]["outside_sandbox"])
        rules = (await call(self.app, "permissions", query=f"projectid={self.project['id']}")).json()
        self.assertEqual([rule for rule in rules if rule["layer"] == "project"], [])

    async def test_a_confined_call_runs_under_the_rule_without_asking(self):
        """Without outside_sandbox the allow rule decides (the control of the test above)."""
        self.model.script(reply(tool_calls=[("bash", {"command": "echo hi"})]), reply("ok"))
        await self.prompt()
        part = await self.tool_part()
        self.assertEqual(part["data"]["decision"]["by"], "rule")


@NEED_BWRAP
class ServerAndJobTest(McpClientCase):
    async def test_a_project_mcp_server_runs_confined_and_its_question_says_so(self):
        """A stdio server's program writes outside the project: the write is refused, the server
        still starts, and its start question shows what it can reach."""
        outside = elsewhere(self)
        self.define({"notes": {"command": "/bin/sh", "args": [
            "-c", f"echo x > {outside}/planted; exec {sys.executable} {MCP_SERVER} stdio"]}})
        self.model.script(reply("ok"))
        await self.prompt("start it")
        start = await self.answer("mcp-start")
        self.assertTrue(start["reach"]["confined"])
        await self.idle()
        self.assertEqual((await self.servers(self.session["id"]))["servers"][0]["state"], "running")
        self.assertFalse(os.path.exists(os.path.join(outside, "planted")))

    async def test_a_background_job_runs_confined_and_names_what_was_refused(self):
        """A job writing outside the project is refused, and its output says so."""
        outside = elsewhere(self)
        confinement = self.app.sandbox.confinement(self.root, self.session["id"], False, {})
        job = self.app.jobs.start(self.session["id"], f"touch {outside}/planted", self.root, confinement)
        await job.task
        self.assertFalse(os.path.exists(os.path.join(outside, "planted")))
        self.assertIn(f"the sandbox refused writing {outside}/planted", job.output)


class OffQuestionTest(QuestionCase):
    settings = {"sandbox": "off"}

    async def test_off_is_shown_in_every_question(self):
        """With sandbox = off a command's question and a file tool's both say so."""
        self.model.script(reply(tool_calls=[("bash", {"command": "echo hi"})]),
                          reply(tool_calls=[("write", {"path": "n.txt", "content": "x"})]), reply("ok"))
        await self.prompt()
        for tool in ("bash", "write"):
            ask = await self.until("permission.ask")
            self.assertEqual(ask["tool"], tool)
            self.assertEqual(ask["reach"], {"confined": False, "why": "sandbox = off"})
            await call(self.app, "permissions_reply", {"reply": "once"}, ident=ask["id"])
        await self.events_until("idle", 30_000)


# -- the pure parts: the decision, the settings, the argv -----------------------------------------------

def outside_call(**facts) -> Call:
    return Call("bash", ("make install",), BASH, outside_sandbox=True, **facts)


ALLOW_ALL = [Rule("bash", "*", "allow", "project", "r1")]


def test_outside_sandbox_asks_whatever_allows_it():
    """An allow rule does not cover a command outside the sandbox: it asks."""
    decision = decide(outside_call(), ALLOW_ALL)
    assert (decision.action, decision.reason) == ("ask", OUTSIDE_SANDBOX_REASON)
    assert decision.asks == ("make install",)


def test_outside_sandbox_is_denied_where_nobody_can_approve():
    """Scheduled runs and sub-agents are denied it; Plan mode denies every command; a deny rule
    still denies; without outside_sandbox the rule allows (the control)."""
    assert decide(outside_call(scheduled=True), ALLOW_ALL).reason == OUTSIDE_SANDBOX_UNATTENDED
    assert decide(outside_call(subagent=True), ALLOW_ALL).action == "deny"
    assert decide(outside_call(mode="plan"), ALLOW_ALL).action == "deny"
    assert decide(outside_call(), [Rule("bash", "make *", "deny", "project", "r2")]).action == "deny"
    assert decide(Call("bash", ("make install",), BASH), ALLOW_ALL).action == "allow"


class SettingsTest(TotemCase):
    async def test_path_settings_are_checked_and_secrets_add_up(self):
        """writable and secrets take absolute, normalized paths only; secrets of every layer
        add up, never replace the config's."""
        for value in (["relative/path"], ["/a/../b"], ["/a//b"], "/not/a/list", [1], ["/x"] * 33):
            answer = await call(self.app, "settings_save", {"scope": "all", "key": "writable", "value": value})
            self.assertEqual(answer.status, 400, (value, answer.body))
            self.assertEqual(answer.json()[0]["name"], "value")
        project = await self.open_project()
        await call(self.app, "settings_save", {"scope": "all", "key": "secrets", "value": ["/srv/a"]})
        answer = await call(self.app, "settings_save", {"scope": "project", "projectid": project["id"],
                                                        "key": "secrets", "value": ["/srv/b"]})
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.json()["secrets"]["value"], ["/srv/a", "/srv/b"])
        for key in ("network", "unattendednetwork"):
            answer = await call(self.app, "settings_save", {"scope": "all", "key": key, "value": "no"})
            self.assertEqual(answer.status, 400, answer.body)


def test_the_config_keys_are_checked():
    """sandbox is auto, required or off; sandboxpath absolute folders; writable absolute paths."""
    from totem.config import ConfigError, parse_values
    for raw in ({"sandbox": "maybe"}, {"sandboxpath": "bin"}, {"writable": "rel/dir"}, {"secrets": "/a/../b"}):
        try:
            parse_values(raw, "/tmp")
        except ConfigError as exc:
            assert next(iter(raw)) in str(exc)
        else:
            raise AssertionError(f"accepted {raw}")
    config = parse_values({"writable": "/a:/b", "network": "off"}, "/tmp")
    assert (config.writable, config.network, config.sandbox) == (("/a", "/b"), False, "auto")


def test_cover_leaves_out_hidden_places_and_links_into_them(tmp_path):
    """The allow-list of Landlock alone: every entry but the hidden ones, through their parents,
    and never a link that leads into one."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".config" / "gh").mkdir(parents=True)
    (home / ".config" / "fine").mkdir()
    (home / "code").mkdir()
    (home / "keys").symlink_to(home / ".ssh")
    found = sandbox.cover(str(home), [str(home / ".ssh"), str(home / ".config" / "gh")])
    assert sorted(found) == [str(home / ".config" / "fine"), str(home / "code")]
    assert sandbox.cover(str(home / "code"), [str(home / ".ssh")]) == [str(home / "code")]


def test_bwrap_arguments_hide_inside_the_project_and_bind_a_worktree_back(tmp_path):
    """A hidden place inside the project is hidden after the project is bound; a project inside
    a hidden place (a worktree in the data folder) is bound back into an empty tmpfs."""
    data = tmp_path / "data"
    worktree = data / "worktrees" / "w1"
    worktree.mkdir(parents=True)
    (tmp_path / "proj" / ".ssh").mkdir(parents=True)
    policy = sandbox.make_policy(str(tmp_path / "proj"), "/tmp/t", True,
                                 [str(data), str(tmp_path / "proj" / ".ssh")], [])
    args = sandbox.bwrap_arguments("/usr/bin/bwrap", policy, True, "/e")
    hide = args.index(str(tmp_path / "proj" / ".ssh"))
    assert args.index(str(tmp_path / "proj")) < hide
    policy = sandbox.make_policy(str(worktree), "/tmp/t", False, [str(data)], [])
    args = sandbox.bwrap_arguments("/usr/bin/bwrap", policy, False, "/e")
    assert args[args.index("--tmpfs") + 1] == str(data)
    assert args.index("--tmpfs") < args.index(str(worktree)) < args.index("--remount-ro")
    assert "--unshare-net" in args and "--unshare-user" in args


@unittest.skipUnless(BWRAP_OK, "needs bubblewrap that runs here")
def test_a_totem_folder_in_tmp_is_brought_back_read_only_its_secrets_still_hidden(tmp_path):
    """Where Totem runs from a folder in /tmp (a clone made there), commands get a private /tmp
    but still see Totem's folder (its launcher, its scripts), read-only, with its config file
    hidden; the control: without the runtime folder, the private /tmp hides it."""
    folder = tempfile.mkdtemp(prefix="totem-install-", dir="/tmp")
    try:
        with open(os.path.join(folder, "tool.sh"), "w") as handle:
            handle.write("echo from-the-install\n")
        with open(os.path.join(folder, "config.ini"), "w") as handle:
            handle.write("token = SECRET-OF-THE-CONFIG\n")
        project, temp, empty = tmp_path / "proj", tmp_path / "temp", tmp_path / "empty"
        for made in (project, temp, empty):
            made.mkdir()
        command = f"sh {folder}/tool.sh; cat {folder}/config.ini; touch {folder}/new"
        policy = sandbox.make_policy(str(project), str(temp), True, [os.path.join(folder, "config.ini")], [])
        for runtime, seen in (((folder,), True), ((), False)):
            confined = dataclasses.replace(policy, runtime=runtime)
            argv = [*sandbox.bwrap_arguments(BWRAP, confined, os.getuid() == 0, str(empty)), "--",
                    "/bin/sh", "-c", command]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            assert ("from-the-install" in out.stdout) is seen, out
            assert "SECRET-OF-THE-CONFIG" not in out.stdout
        assert not os.path.exists(os.path.join(folder, "new"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_reach_of_an_unconfined_call_says_why():
    """Off: not confined, "sandbox = off"; a question of another tool says nothing when on."""
    from totem.config import parse_values
    off = sandbox.Sandbox(parse_values({"sandbox": "off"}, "/tmp"))
    assert off.confinement("/", "s", False, {}).reach() == {"confined": False, "why": "sandbox = off"}
    assert asyncio.run(off.question_reach(None)) == {"confined": False, "why": "sandbox = off"}
    assert asyncio.run(sandbox.Sandbox(parse_values({}, "/tmp")).question_reach(None)) == {}


def test_totems_own_code_is_read_only_where_a_writable_folder_holds_it():
    """A project that is Totem's own folder: its code, UI and Python stay read-only, the rest
    (its tests, its README) writable."""
    policy = sandbox.make_policy(sandbox.INSTALL_ROOT, "/tmp/t", True, [], [])
    assert os.path.join(sandbox.INSTALL_ROOT, "totem") in policy.read_only
    assert os.path.join(sandbox.INSTALL_ROOT, "static") in policy.read_only
    assert os.path.join(sandbox.INSTALL_ROOT, "tests") not in policy.read_only
    assert sandbox.make_policy("/nonexistent/project", "/tmp/t", True, [], []).read_only == ()


def test_every_protection_is_missing_without_a_layer():
    """Neither bwrap nor Landlock: every protection a command needs is named missing."""
    kernel = sandbox.Kernel(root=False, landlock=0, bwrap=None, bwrap_problem="not installed", cgroup=None,
                            cgroup_problem="")
    missing = sandbox.missing_protections(kernel, True)
    assert set(missing) == set(sandbox.PROTECTIONS) - {"network"}
    alone = sandbox.Kernel(root=True, landlock=7, bwrap=None, bwrap_problem="x", cgroup=None, cgroup_problem="none")
    assert set(sandbox.missing_protections(alone, False)) == {"network", "processlimit"}


def test_explain_names_the_path_not_the_program():
    """A shell names itself first: the note is about the path the error is about."""
    policy = sandbox.Policy(root="/p", temp="/tmp/t", network=False, hidden=("/home/u/.ssh",))
    notes = refusals.explain("/bin/bash: line 1: /etc/x: Read-only file system\n"
                             "cat: /home/u/.ssh/id: No such file or directory\n"
                             "curl: (6) Could not resolve host: example.com\n", policy, 8470, "/home/u")
    assert notes[0].startswith("[the sandbox refused writing /etc/x:")
    assert "hides /home/u/.ssh/id" in notes[1]
    assert "network off" in notes[2]
    assert refusals.explain("cat: /p/missing: No such file or directory\n", policy, 8470, "/home/u") == []
    alone = sandbox.Policy(root="/p", temp="/tmp/t", network=True, landlock_alone=True)
    assert "top of the project" in refusals.explain("/bin/bash: line 1: new.txt: Permission denied", alone, 8470,
                                                    "/home/u")[0]


# -- as an ordinary user: the server's side run as nobody (setpriv), bubblewrap and Landlock alone ---

SETPRIV = shutil.which("setpriv", path=sandbox.SYSTEM_PATH)
SYSTEM_PYTHON = next((path for path in ("/usr/bin/python3", "/bin/python3") if os.access(path, os.X_OK)), None)
NOBODY = 65534
# Run by the system's Python as nobody: a Sandbox of the package as the server builds it, a
# listener that stands for Totem's port, and one hostile command per rule; it prints what escaped.
AS_NOBODY = r'''
import asyncio, json, os, socket, sys
sys.path.insert(0, sys.argv[1])
from totem.config import parse_values
from totem.process import runner
from totem.security.sandbox import Sandbox

async def main(base, settings):
    home, outside = os.path.join(base, "home"), os.path.join(base, "outside")
    root = os.path.join(base, "proj", "src")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    sandbox = Sandbox(parse_values({"data": os.path.join(base, "data"), **settings}, base))
    sandbox.start(port)
    confinement = sandbox.confinement(root, "s1", False, {})
    bomb = ("import os, time\n"
            "for n in range(700):\n"
            "    if os.fork() == 0:\n"
            "        time.sleep(60); os._exit(0)\n"
            "print('ALL-' + 'FORKED')\n")
    with open(os.path.join(root, "bomb.py"), "w") as handle:
        handle.write(bomb)
    checks = {
        "write outside": f"echo x > {outside}/f && echo ESCAPED",
        "read a secret place": "cat ~/.ssh/id_ed25519",
        "Totem's port": f"{sys.executable} -I -S -c \"import socket; socket.create_connection(('127.0.0.1', {port}))\" "
                        "2>/dev/null && echo ESCAPED",
        "signal the server": f"kill -0 {os.getpid()} 2>/dev/null && echo ESCAPED",
        "700 processes": f"{sys.executable} -I -S bomb.py 2>/dev/null",
    }
    escaped = {}
    for name, command in checks.items():
        result = await runner.run_command(command, cwd=root, timeout_s=60, output_cap_bytes=20000,
                                          confine=confinement.launch)
        escaped[name] = any(word in result.output for word in ("ESCAPED", "SECRET-OF-NOBODY", "ALL-FORKED"))
    status = await sandbox.status()
    await sandbox.stop()
    listener.close()
    print(json.dumps({"escaped": escaped, "layers": status["layers"], "uid": os.getuid()}))

asyncio.run(main(sys.argv[2], json.loads(sys.argv[3])))
'''


@unittest.skipUnless(os.geteuid() == 0 and SETPRIV and SYSTEM_PYTHON, "needs root (to become nobody with setpriv) "
                     "and the system's python3")
class OrdinaryUserTest(unittest.TestCase):
    """The same rules with the server run as an ordinary user (uid 65534): bubblewrap in a user
    namespace (RLIMIT_NPROC counted there), Landlock alone, and the control."""

    def run_as_nobody(self, settings: dict) -> dict:
        base = tempfile.mkdtemp(prefix="totem-nobody-")
        self.addCleanup(shutil.rmtree, base, ignore_errors=True)
        for folder in ("home/.ssh", "outside", "proj/src", "data"):
            os.makedirs(os.path.join(base, folder))
        with open(os.path.join(base, "home", ".ssh", "id_ed25519"), "w") as handle:
            handle.write("SECRET-OF-NOBODY\n")
        with open(os.path.join(base, "driver.py"), "w") as handle:
            handle.write(AS_NOBODY)
        for folder, _dirs, files in os.walk(base):
            os.chown(folder, NOBODY, NOBODY)
            for name in files:
                os.chown(os.path.join(folder, name), NOBODY, NOBODY)
        os.chmod(base, 0o755)
        package = sandbox.INSTALL_ROOT
        argv = [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "env", "-i",
                f"HOME={base}/home", "PATH=/usr/bin:/bin", SYSTEM_PYTHON, "-I", f"{base}/driver.py", package, base,
                json.dumps(settings)]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        return json.loads(result.stdout.strip().splitlines()[-1])

    @NEED_BWRAP
    def test_bubblewrap_as_an_ordinary_user(self):
        """Nothing escapes under bubblewrap in a user namespace."""
        report = self.run_as_nobody({})
        self.assertEqual(report["uid"], NOBODY)
        self.assertEqual(report["layers"], ["bubblewrap", f"landlock {ABI}"])
        self.assertEqual([name for name, escaped in report["escaped"].items() if escaped], [])

    @NEED_LANDLOCK
    def test_landlock_alone_as_an_ordinary_user(self):
        """Nothing escapes under Landlock alone (bwrap looked for where it is not)."""
        report = self.run_as_nobody({"sandboxpath": NO_BWRAP_PATH})
        self.assertEqual(report["layers"], [f"landlock {ABI}"])
        self.assertEqual([name for name, escaped in report["escaped"].items() if escaped], [])

    def test_the_control_escapes_as_an_ordinary_user(self):
        """With sandbox = off every one of those escapes (so the two above can fail)."""
        report = self.run_as_nobody({"sandbox": "off"})
        self.assertEqual([name for name, escaped in report["escaped"].items() if not escaped], [])
