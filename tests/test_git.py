"""Git through the real program: what a repository's own files may make git do, the refusal of
Projects|git in a repository whose config names a program, and the process group of run_git.

Every repository is real (made with git in a temporary folder), and every trap is armed: the
config also defines a filter driver `evil` that `.gitattributes` gives to a committed file whose
time has moved, so a plain `git status` run in it would create the marker. Where git can read the
config, the test runs that plain `git status` at the end to prove the marker would have appeared.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
import unittest
from unittest import mock

from tests.utils import MS, TotemCase, call
from totem.process import runner
from totem.workspace.git import (
    SAFE_OPTIONS,
    GitError,
    GitRefusedError,
    folder_status,
    repository_programs,
    repository_runs_programs,
    run_git,
)

FILTER = '[filter "evil"]\n\tclean = touch @MARKER@; cat\n'
REFUSED = "git is not run in this repository: "

# (what the case shows, config text put before FILTER, text of the reason, whether git reads it)
FORMS = [
    ("filter driver", "", "its config names a filter driver (filter.evil.clean)", True),
    ("old-style section", "[filter.evil]\n\tclean = touch @MARKER@; cat\n",
     "its config names a filter driver (filter.evil.clean)", True),
    ("upper case", '[FILTER "evil"]\n\tCLEAN = touch @MARKER@; cat\n',
     "its config names a filter driver (filter.evil.clean)", True),
    ("old-style section with a quoted part", '[Filter.Evil "X"]\n\tclean = touch @MARKER@\n',
     "its config names a filter driver (filter.evil.X.clean)", True),
    ("alias", "[alias]\n\tst = !touch @MARKER@\n", "its config names an alias (alias.st)", True),
    ("upper-case alias", "[ALIAS]\n\tSt = !touch @MARKER@\n", "its config names an alias (alias.st)", True),
    ("alias without a value", "[alias]\n\tst\n", "its config names an alias (alias.st)", True),
    ("key on the header's line", "[user] name = x\n[alias]lg = !touch @MARKER@\n",
     "its config names an alias (alias.lg)", True),
    ("two headers on one line", "[user][alias]lg = !touch @MARKER@\n",
     "its config names an alias (alias.lg)", True),
    ("include", "[include]\n\tpath = @INCLUDED@\n",
     "its config names an include of another config file (include.path)", True),
    ("includeIf", '[includeIf "gitdir:@ROOT@/"]\n\tpath = @INCLUDED@\n',
     "its config names a conditional include of another config file (includeif.gitdir:", True),
    ("bare program key", "[core]\n\tpager\n", "its config names a pager (core.pager)", True),
    ("program key in mixed case", "[Core]\n\tSSHCommand = touch @MARKER@\n",
     "its config names an ssh command (core.sshcommand)", True),
    ("line continued with a backslash", "[user]\n\tname = a \\\n\tb\n",
     "its config continues a line with a backslash", True),
    ("line git cannot read", "[user]\n\tname: x\n", "its config has a line that Totem cannot read", False),
    ("header git cannot read", '[user "x]\n', "its config has a section header that Totem cannot read",
     False),
    ("comment after a bare key", "[alias]\n\tst # no\n", "its config has a line that Totem cannot read",
     False),
]
# Every key that names a program, as (config text, name in the reason).
PROGRAM_KEYS = [
    ("[core]\n\tsshCommand = touch @MARKER@\n", "core.sshcommand"),
    ("[core]\n\tpager = touch @MARKER@\n", "core.pager"),
    ("[core]\n\teditor = touch @MARKER@\n", "core.editor"),
    ("[core]\n\taskPass = touch @MARKER@\n", "core.askpass"),
    ('[diff "evil"]\n\ttextconv = touch @MARKER@\n', "diff.evil.textconv"),
    ('[diff "evil"]\n\tcommand = touch @MARKER@\n', "diff.evil.command"),
    ("[diff]\n\texternal = touch @MARKER@\n", "diff.external"),
    ('[merge "evil"]\n\tdriver = touch @MARKER@\n', "merge.evil.driver"),
    ("[credential]\n\thelper = !touch @MARKER@\n", "credential.helper"),
    ('[credential "https://example.com"]\n\thelper = !touch @MARKER@\n',
     "credential.https://example.com.helper"),
    ("[gpg]\n\tprogram = touch @MARKER@\n", "gpg.program"),
    ("[sequence]\n\teditor = touch @MARKER@\n", "sequence.editor"),
    ('[remote "origin"]\n\turl = @ROOT@\n\tuploadpack = touch @MARKER@\n', "remote.origin.uploadpack"),
    ('[protocol "ext"]\n\tallow = always\n', "protocol.ext.allow"),
    ('[submodule "lib"]\n\tupdate = !touch @MARKER@\n', "submodule.lib.update"),
]


def git(folder: str, *args: str, home: str | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": home or folder, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=folder, env=env, check=True, capture_output=True, timeout=30)


def write(path: str, text: str, mode: str = "w") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as handle:
        handle.write(text)


def armed_repository(root: str, config: str, marker: str) -> None:
    """A repository whose committed a.txt has the filter `evil`, its time moved, then `config`."""
    os.makedirs(root, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    write(os.path.join(root, "a.txt"), "hello\n")
    write(os.path.join(root, ".gitattributes"), "* filter=evil\n")
    git(root, "add", "a.txt", ".gitattributes")  # before the config: adding would run the filter
    git(root, "commit", "-qm", "first")
    later = time.time() + 100
    os.utime(os.path.join(root, "a.txt"), (later, later))  # git status must read its content
    write(os.path.join(root, ".git", "config"), fill(config, root, marker), "a")


def fill(text: str, root: str, marker: str) -> str:
    included = os.path.join(os.path.dirname(root), "included.config")
    write(included, "[user]\n\tname = included\n")
    return text.replace("@MARKER@", marker).replace("@ROOT@", root).replace("@INCLUDED@", included)


def plain_status_runs_filter(root: str, marker: str) -> bool:
    """Whether a plain `git status` (no protection) runs the filter: the trap is armed."""
    subprocess.run(["git", "status", "--short"], cwd=root, capture_output=True, timeout=30,
                   env={"PATH": os.environ["PATH"], "HOME": root, "GIT_CONFIG_NOSYSTEM": "1"})
    ran = os.path.exists(marker)
    if ran:
        os.remove(marker)
    return ran


class RefusalTest(TotemCase):
    async def status(self, name: str) -> dict:
        project = await self.open_project(name)
        answer = await call(self.app, "projects_git", ident=project["id"])
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    def assert_refused(self, data: dict, reason: str) -> None:
        self.assertEqual({key: data[key] for key in ("repository", "branch", "files", "more")},
                         {"repository": True, "branch": None, "files": [], "more": False})
        self.assertTrue(data.get("refused", "").startswith(REFUSED), data)
        self.assertIn(reason, data["refused"])

    async def test_git_config_forms_refused_and_nothing_runs(self):
        """Every form of a config that names a program gets the reason, and git never runs its program."""
        cases = [(label, config, reason, armed) for label, config, reason, armed in FORMS]
        cases += [(name, config, f"({name})", True) for config, name in PROGRAM_KEYS]
        for number, (label, config, reason, armed) in enumerate(cases):
            with self.subTest(label):
                root = self.folder(f"repo{number}")
                marker = os.path.join(self.tmp, f"pwned{number}")
                armed_repository(root, config + FILTER, marker)
                self.assert_refused(await self.status(f"repo{number}"), reason)
                self.assertFalse(os.path.exists(marker), "a program of the repository ran")
                if armed:
                    self.assertTrue(plain_status_runs_filter(root, marker), "the trap was not armed")

    async def test_git_submodule_config_refused(self):
        """A checked-out submodule whose own config names a filter: git status would run it there."""
        root = self.folder("top")
        marker = os.path.join(self.tmp, "pwned")
        armed_repository(os.path.join(root, "lib"), FILTER, marker)
        git(root, "init", "-q")
        git(root, "add", "lib")  # an embedded repository: a gitlink, no .gitmodules needed
        self.assert_refused(await self.status("top"), "its submodule lib: its config names a filter "
                                                      "driver (filter.evil.clean)")
        self.assertFalse(os.path.exists(marker))
        self.assertTrue(plain_status_runs_filter(root, marker))

    async def test_git_worktree_and_parent_folder_refused(self):
        """A worktree (.git file, commondir) and a subfolder both read the config of the main repository."""
        root = self.folder("main")
        marker = os.path.join(self.tmp, "pwned")
        armed_repository(root, "", marker)
        git(root, "worktree", "add", "-q", os.path.join(self.tmp, "tree"))
        write(os.path.join(root, ".git", "config"), fill(FILTER, root, marker), "a")
        write(os.path.join(root, "sub", "b.txt"), "b\n")
        for name in ("tree", "main/sub"):
            self.assert_refused(await self.status(name), "its config names a filter driver (filter.evil.clean)")
        self.assertFalse(os.path.exists(marker))
        self.assertTrue(plain_status_runs_filter(root, marker))

    async def test_git_clean_repository_lists_files(self):
        """A repository whose config names no program still lists its changed files."""
        root = self.folder("clean")
        git(root, "init", "-q", "-b", "trunk")
        write(os.path.join(root, ".gitattributes"), "*.py diff=python\n")
        write(os.path.join(root, "a.py"), "one\n")
        git(root, "add", ".")
        git(root, "commit", "-qm", "first")
        write(os.path.join(root, ".git", "config"),
              '[user]\n\tname = "Some One" ; a comment\n[remote "origin"]\n\turl = https://example.com/x.git\n'
              '\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch "trunk"]\n\tremote = origin\n'
              '[diff "python"]\n\txfuncname = "^def .*"\n[core]\n\tautocrlf = false\n', "a")
        write(os.path.join(root, "a.py"), "two\n")
        write(os.path.join(root, "new.txt"), "new\n")
        data = await self.status("clean")
        self.assertEqual(data, {"repository": True, "branch": "trunk", "more": False, "leftover": [],
                                "files": [{"path": "a.py", "status": "modified", "staged": False},
                                          {"path": "new.txt", "status": "untracked", "staged": False}]})

    async def test_git_hooks_path_and_fsmonitor_overridden_not_refused(self):
        """A hook manager's core.hooksPath and a core.fsmonitor program are overridden on every
        git Totem starts, so the repository is listed and neither runs."""
        root = self.folder("husky")
        marker = os.path.join(self.tmp, "pwned")
        git(root, "init", "-q", "-b", "main")
        write(os.path.join(root, "a.txt"), "one\n")
        git(root, "add", ".")
        git(root, "commit", "-qm", "first")
        hook = os.path.join(root, ".husky", "post-index-change")
        write(hook, f"#!/bin/sh\ntouch {marker}.hook\n")
        os.chmod(hook, 0o755)
        write(os.path.join(root, ".git", "config"),
              f"[core]\n\thooksPath = .husky\n\tfsmonitor = touch {marker}\n", "a")
        write(os.path.join(root, "a.txt"), "two\n")
        data = await self.status("husky")
        self.assertNotIn("refused", data)
        self.assertEqual(data["files"], [{"path": "a.txt", "status": "modified", "staged": False},
                                         {"path": ".husky/", "status": "untracked", "staged": False}])
        self.assertFalse(os.path.exists(marker) or os.path.exists(marker + ".hook"), "a program ran")

    async def test_git_hooks_and_global_config_not_used(self):
        """What the vetting does not see is off: hooks in .git/hooks and a filter of ~/.gitconfig."""
        root = self.folder("hooked")
        marker = os.path.join(self.tmp, "pwned")
        armed_repository(root, "", marker)
        home = self.folder("home")
        write(os.path.join(home, ".gitconfig"), FILTER.replace("@MARKER@", marker))
        hook = os.path.join(root, ".git", "hooks", "post-index-change")
        write(hook, f"#!/bin/sh\ntouch {marker}.hook\n")
        os.chmod(hook, 0o755)
        with mock.patch.dict(os.environ, {"HOME": home}):
            data = await self.status("hooked")
        self.assertEqual(data["files"], [])  # the filter would make a.txt clean; git sees only stat
        self.assertNotIn("refused", data)
        self.assertFalse(os.path.exists(marker), "the filter of ~/.gitconfig ran")
        self.assertFalse(os.path.exists(marker + ".hook"), "a hook ran")
        plain = {"PATH": os.environ["PATH"], "HOME": home, "GIT_CONFIG_NOSYSTEM": "1"}
        subprocess.run(["git", "status"], cwd=root, capture_output=True, timeout=30, env=plain)
        self.assertTrue(os.path.exists(marker), "the filter's trap was not armed")
        # A plain status writes the index back (and so runs the hook) only when it chooses to; a
        # forced write of the index shows that git runs the hook whenever it writes one.
        subprocess.run(["git", "update-index", "--force-write-index"], cwd=root, capture_output=True, timeout=30,
                       env=plain)
        self.assertTrue(os.path.exists(marker + ".hook"), "the hook's trap was not armed")


class VettingTest(unittest.TestCase):
    """repository_programs on its own: files only, no server."""

    def setUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-git-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def repository(self, name: str, config: str = "") -> str:
        root = os.path.join(self.tmp, name)
        os.makedirs(root)
        git(root, "init", "-q")
        write(os.path.join(root, "a.txt"), "a\n")
        git(root, "add", "a.txt")
        git(root, "commit", "-qm", "first")
        write(os.path.join(root, ".git", "config"), config, "a")
        return root

    def test_repository_programs_plain_and_clean(self):
        """No repository and a clean one name no program; the bool follows the reason."""
        os.makedirs(os.path.join(self.tmp, "plain"))
        self.assertIsNone(repository_programs(os.path.join(self.tmp, "plain")))
        self.assertIsNone(repository_programs(self.repository("clean", "[user]\n\tname = x\n")))
        self.assertFalse(repository_runs_programs(os.path.join(self.tmp, "clean")))
        self.assertTrue(repository_runs_programs(self.repository("alias", "[alias]\n\tst = !x\n")))

    def test_repository_programs_config_oddities(self):
        """A byte-order mark, CRLF lines, NUL bytes and config.worktree are read like git reads them."""
        root = self.repository("bom")
        write(os.path.join(root, ".git", "config"), "\ufeff[alias]\r\n\tst = !x\r\n")
        self.assertEqual(repository_programs(root), "its config names an alias (alias.st)")
        write(os.path.join(root, ".git", "config"), "[user]\n\tname = a\0b\n")
        self.assertIn("NUL byte", repository_programs(root))
        write(os.path.join(root, ".git", "config"), '[user]\n\tname = "a ; [alias] b"\n')
        self.assertIsNone(repository_programs(root))
        write(os.path.join(root, ".git", "config.worktree"), "[core]\n\teditor = x\n")
        self.assertEqual(repository_programs(root), "its config.worktree names an editor (core.editor)")
        os.remove(os.path.join(root, ".git", "config.worktree"))
        os.mkfifo(os.path.join(root, ".git", "config.worktree"))  # reading it would never end
        self.assertEqual(repository_programs(root), "its config.worktree is not a regular file")

    def test_repository_programs_git_pointers(self):
        """A .git file that is no pointer, and a folder inside a git folder, count as naming programs."""
        root = os.path.join(self.tmp, "pointer")
        write(os.path.join(root, ".git"), "not a pointer\n")
        self.assertEqual(repository_programs(root), "its .git file is not a gitdir pointer")
        inside = os.path.join(self.repository("outer"), ".git", "objects")
        self.assertIn("inside a git folder", repository_programs(inside))

    def test_repository_programs_submodules(self):
        """Submodules are vetted where git status goes: checked out, at any depth, any index version."""
        root = self.repository("top")
        inner = self.repository("top/lib")
        self.repository("top/lib/deep", "[core]\n\tpager = x\n")
        git(inner, "add", "deep")
        git(root, "add", "lib")
        self.assertEqual(repository_programs(root), "its submodule lib: its submodule deep: its config "
                                                    "names a pager (core.pager)")
        for version in ("4", "3", "2"):
            git(root, "update-index", "--index-version", version)
            self.assertIn("its submodule lib", repository_programs(root))
        shutil.rmtree(os.path.join(root, "lib"))  # not checked out: git status does not go in
        self.assertIsNone(repository_programs(root))
        os.makedirs(os.path.join(root, "lib"))
        write(os.path.join(root, ".git", "config"), "[core]\n\tworktree = /elsewhere\n", "a")
        self.assertIn("core.worktree", repository_programs(root))

    def test_repository_programs_split_index_fails_closed(self):
        """A split index, which this reader does not follow, counts as naming programs."""
        root = self.repository("split")
        git(root, "update-index", "--split-index")
        self.assertIn("split index", repository_programs(root))


class RunGitTest(unittest.IsolatedAsyncioTestCase):
    """run_git with a stand-in `git` first on PATH: a program that records its pid and waits."""

    async def asyncSetUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-rungit-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.folder = os.path.join(self.tmp, "work")
        os.makedirs(self.folder)
        self.pidfile = os.path.join(self.tmp, "pid")
        self.argsfile = os.path.join(self.tmp, "args")
        self.bin = os.path.join(self.tmp, "bin")
        patcher = mock.patch.dict(os.environ, {"PATH": self.bin + os.pathsep + os.environ["PATH"]})
        patcher.start()
        self.addCleanup(patcher.stop)

    def fake_git(self, body: str) -> None:
        path = os.path.join(self.bin, "git")
        write(path, f'#!/bin/sh\necho "$@" > {self.argsfile}\nenv >> {self.argsfile}\n'
                    f"echo $$ > {self.pidfile}.tmp && mv {self.pidfile}.tmp {self.pidfile}\n{body}\n")
        os.chmod(path, 0o755)

    async def group(self) -> int:
        for _ in range(1000):
            if os.path.exists(self.pidfile):
                with open(self.pidfile) as handle:
                    return int(handle.read())
            await asyncio.sleep(5 * MS)
        self.fail("the stand-in git did not start")

    def assert_group_gone(self, pgid: int) -> None:
        running = {pid: state for pid, state in runner.group_states(pgid).items() if state != "Z"}
        self.assertEqual(running, {}, f"processes of git's group still run: {running}")

    async def test_run_git_timeout_kills_group(self):
        """On the timeout, git and what it started are stopped, and the error says so."""
        self.fake_git("sleep 100 &\nsleep 100")
        with self.assertRaisesRegex(GitError, "git took longer than"):
            async with asyncio.timeout(10_000 * MS):  # a kill of git alone would hang on its pipes
                await run_git(self.folder, "status", timeout=500 * MS)
        self.assert_group_gone(await self.group())

    async def test_run_git_cancel_kills_group(self):
        """Cancelling the caller (an abort, a closed request) stops git's whole group."""
        self.fake_git("sleep 100 &\nsleep 100")
        task = asyncio.create_task(run_git(self.folder, "status", timeout=100))
        pgid = await self.group()
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assert_group_gone(pgid)

    async def test_run_git_left_over_child_stopped(self):
        """A process that git leaves in its group after it exits is stopped too."""
        self.fake_git("sleep 100 >/dev/null 2>&1 &\necho done")
        code, stdout, _stderr = await run_git(self.folder, "status")
        self.assertEqual((code, stdout), (0, b"done\n"))
        self.assert_group_gone(await self.group())

    async def test_run_git_options_and_environment(self):
        """git gets the safe options before the command and only the environment of git.py."""
        self.fake_git("true")
        await run_git(self.folder, "status", "--short")
        with open(self.argsfile) as handle:
            args, *env = handle.read().splitlines()
        self.assertEqual(args, " ".join((*SAFE_OPTIONS, "status", "--short")))
        names = {line.split("=", 1)[0] for line in env}
        self.assertLessEqual(names - {"PWD", "SHLVL", "_", "OLDPWD"},
                             {"PATH", "HOME", "USER", "LANG", "LC_ALL", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL",
                              "GIT_ATTR_NOSYSTEM", "GIT_ALLOW_PROTOCOL", "GIT_NO_LAZY_FETCH",
                              "GIT_TERMINAL_PROMPT", "GIT_EDITOR"})
        self.assertIn(f"GIT_CONFIG_GLOBAL={os.devnull}", env)
        self.assertIn("GIT_ALLOW_PROTOCOL=", env)

    async def test_run_git_refused_never_starts_git(self):
        """In a repository that names a program, git is not started at all; status says why."""
        self.fake_git("true")
        write(os.path.join(self.folder, ".git", "config"), "[alias]\n\tst = !touch x\n")
        with self.assertRaisesRegex(GitRefusedError, r"its config names an alias \(alias.st\)"):
            await run_git(self.folder, "status")
        data = await folder_status(self.folder)
        self.assertEqual(data["refused"], REFUSED + "its config names an alias (alias.st)")
        self.assertFalse(os.path.exists(self.pidfile), "git was started")
