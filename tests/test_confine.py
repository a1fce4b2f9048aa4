"""The sandbox's launcher (totem/security/confine.py) run as the server runs it, `python -I -S confine.py
[options] -- argv`: each option against a control without it, and the refusals that stop a
launch before anything runs. A feature the kernel lacks skips with the reason."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import unittest
import uuid

from tests.utils import command_line
from totem.security import confine

LAUNCHER = os.path.abspath(confine.__file__)
PYTHON = os.path.realpath(sys.executable)
ABI = confine.landlock_abi()
ROOT = os.geteuid() == 0
NEED_LANDLOCK = unittest.skipUnless(ABI >= confine.SCOPE_ABI, f"needs Landlock ABI {confine.SCOPE_ABI}+ (has {ABI})")


def launch(*options: str, command: list[str], pass_fds=(), timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-I", "-S", LAUNCHER, *options, "--", *command], capture_output=True,
                          text=True, pass_fds=pass_fds, timeout=timeout, check=False)


def python(code: str) -> list[str]:
    return [PYTHON, "-I", "-S", "-c", textwrap.dedent(code)]


class RefusalTest(unittest.TestCase):
    def test_a_bad_launch_runs_nothing(self):
        """An unknown option, a command that is not absolute, none at all, a bad number: status
        126 and one line saying why."""
        for options, command, why in ((("--fast",), ["/bin/true"], "unknown option"),
                                      ((), ["true"], "absolute path"),
                                      ((), [], "absolute path"),
                                      (("--nproc", "many"), ["/bin/true"], "needs a number")):
            result = launch(*options, command=command)
            self.assertEqual(result.returncode, confine.FAILED, result)
            self.assertIn("totem sandbox:", result.stderr)
            self.assertIn(why, result.stderr)

    def test_a_ruleset_that_cannot_be_enforced_stops_the_launch(self):
        """A --ruleset-fd that is no ruleset: refused, the command never runs."""
        marker = os.path.join(tempfile.gettempdir(), f"totem-confine-{uuid.uuid4().hex[:8]}")
        with open(os.devnull) as handle:
            result = launch("--ruleset-fd", str(handle.fileno()), command=["/bin/sh", "-c", f"touch {marker}"],
                            pass_fds=(handle.fileno(),))
        self.assertEqual(result.returncode, confine.FAILED, result)
        self.assertFalse(os.path.exists(marker))


@NEED_LANDLOCK
class LandlockTest(unittest.TestCase):
    def setUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-confine-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.inside, self.outside = os.path.join(self.tmp, "in"), os.path.join(self.tmp, "out")
        os.makedirs(self.inside)
        os.makedirs(self.outside)

    def test_file_rules_allow_only_their_folders(self):
        """--read / and --write one folder: a write there works, one beside it is refused; the
        control (no rules) writes both."""
        script = f"echo a > {self.inside}/a; echo b > {self.outside}/b"
        launch("--read", "/", "--write", self.inside, command=["/bin/sh", "-c", script])
        self.assertTrue(os.path.exists(os.path.join(self.inside, "a")))
        self.assertFalse(os.path.exists(os.path.join(self.outside, "b")))
        launch(command=["/bin/sh", "-c", script])
        self.assertTrue(os.path.exists(os.path.join(self.outside, "b")))

    def test_a_port_ruleset_refuses_that_port_and_only_it(self):
        """A ruleset of every port but one: that port is refused, another one connects; the
        control connects to both."""
        refused, other = socket.create_server(("127.0.0.1", 0)), socket.create_server(("127.0.0.1", 0))
        self.addCleanup(refused.close)
        self.addCleanup(other.close)
        ports = [refused.getsockname()[1], other.getsockname()[1]]
        code = f"""
            import socket
            for port in {ports!r}:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=5).close(); print(port, "connected")
                except OSError as exc:
                    print(port, exc.errno)
        """
        ruleset = confine.network_ruleset(ABI, {ports[0]})
        self.addCleanup(os.close, ruleset)
        lines = launch("--ruleset-fd", str(ruleset), command=python(code), pass_fds=(ruleset,)).stdout.splitlines()
        self.assertEqual(lines, [f"{ports[0]} 13", f"{ports[1]} connected"])
        control = launch(command=python(code)).stdout.splitlines()
        self.assertEqual(control, [f"{ports[0]} connected", f"{ports[1]} connected"])

    def test_scope_refuses_a_signal_to_an_outside_process(self):
        """--scope (with file rules): kill -0 of a process outside fails; the control succeeds."""
        sleeper = subprocess.Popen(["sleep", "60"])
        self.addCleanup(sleeper.wait)
        self.addCleanup(sleeper.kill)
        script = f"kill -0 {sleeper.pid} && echo reached"
        self.assertNotIn("reached", launch("--read", "/", "--scope", command=["/bin/sh", "-c", script]).stdout)
        self.assertIn("reached", launch(command=["/bin/sh", "-c", script]).stdout)

    def test_supervise_ends_what_left_the_group(self):
        """--supervise: a setsid child is killed when the command ends; the control leaves it.
        The command waits until the child runs sleep itself: read in the middle of its exec, a
        process's cmdline is empty, and the control would take a live child for a dead one."""
        for options, survives in ((("--supervise",), False), ((), True)):
            marker = f"{2000 + int(uuid.uuid4().hex[:4], 16)}.75"
            script = (f"setsid sleep {marker} >/dev/null 2>&1 & p=$!; "
                      "until case $(readlink /proc/$p/exe) in */sleep) true;; *) false;; esac; do :; done; echo $p")
            result = launch(*options, command=["/bin/sh", "-c", script])
            pid = int(result.stdout.split()[-1])
            alive = b"sleep" in command_line(pid)
            if alive:
                os.kill(pid, 9)
            self.assertEqual(alive, survives, options)

    @unittest.skipUnless(ROOT, "only root has capabilities to drop")
    def test_drop_caps_leaves_none(self):
        """--drop-caps: no capability, none in the bounding set either; the control has them."""
        grep = ["/bin/sh", "-c", "grep -E '^Cap(Eff|Bnd)' /proc/self/status"]
        dropped = launch("--drop-caps", command=grep).stdout.split()
        self.assertEqual(dropped, ["CapEff:", "0000000000000000", "CapBnd:", "0000000000000000"])
        self.assertNotIn("0000000000000000", launch(command=grep).stdout.split()[1])


class ProcessLimitTest(unittest.TestCase):
    @unittest.skipIf(ROOT, "RLIMIT_NPROC does not bind root (the sandbox uses a pids cgroup there)")
    def test_nproc_bounds_forks(self):
        """--nproc 20: the 21st fork past what this user has fails; the control makes 60."""
        code = """
            import os, time
            for count in range(60):
                try:
                    if os.fork() == 0:
                        time.sleep(20); os._exit(0)
                except OSError:
                    print("limit", count); break
        """
        self.assertIn("limit", launch("--nproc", "20", "--supervise", command=python(code)).stdout)
        self.assertNotIn("limit", launch("--supervise", command=python(code)).stdout)

    @unittest.skipUnless(ROOT and os.path.exists("/sys/fs/cgroup/pids/cgroup.procs"),
                         "needs root and cgroup v1's pids hierarchy")
    def test_cgroup_fd_joins_the_cgroup(self):
        """--cgroup-fd: the command runs in that cgroup; the control stays where it was."""
        path = f"/sys/fs/cgroup/pids/totem-test-{uuid.uuid4().hex[:8]}"
        os.mkdir(path)
        self.addCleanup(os.rmdir, path)
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        self.addCleanup(os.close, fd)
        show = ["/bin/grep", "pids", "/proc/self/cgroup"]
        self.assertIn(os.path.basename(path), launch("--cgroup-fd", str(fd), command=show, pass_fds=(fd,)).stdout)
        self.assertNotIn(os.path.basename(path), launch(command=show).stdout)
