"""The adversarial suite, git part: a repository whose own config makes git run a program takes
the default allow of `git status` away, end to end through the scripted model, the real server,
the real bash tool and a subscribed WebSocket.

The harness is the one of tests/test_adversarial.py, imported: every case is one prompt on a
fresh session, every `permission.ask` is answered "reject", and the bytes of the project and of
the folder around it are compared before and after (the marker `../pwned` that every program
here would create included). The config under test is added to the project's `.git/config` for
one table and taken away after it.
"""

from __future__ import annotations

import os
import subprocess
import time

from tests.test_adversarial import COUNTS, AdversarialCase, bash, build_tree, git

PWNED = "touch ../pwned"  # an alias runs at the top of the repository: the marker lands outside it
# In such a repository no wildcard rule allows git, so only the exact command is offered.
GIT = ("git status",)
SHORT = ("git status --short",)

# Configs that define an alias, in the forms git reads.
ALIASES = {
    "alias": f"[alias]\n\tst = !{PWNED}\n",
    "upper-case alias": f"[ALIAS]\n\tST = !{PWNED}\n",
    "alias on the header's line": f"[alias] st = !{PWNED}\n",
    "alias after another header on the line": f"[user][alias]st = !{PWNED}\n",
    "old-style alias section": f"[alias.x]\n\tst = !{PWNED}\n",
    # git refuses to alias a built-in command, so this one never runs; it is refused all the same.
    "alias named like the command": f"[alias]\n\tstatus = !{PWNED}\n",
}
ALIASED = [
    bash("git status", patterns=GIT),
    bash("git status --short", patterns=SHORT),
    bash("git status -s", patterns=("git status -s",)),
    bash("git status --porcelain", patterns=("git status --porcelain",)),
    bash("git st", patterns=("git st",)),
]
# Other configs that name a program or more config: the default allow goes too.
PROGRAMS = {
    "includeIf": '[includeIf "gitdir:/"]\n\tpath = /dev/null\n',
    "include": "[include]\n\tpath = /dev/null\n",
    "pager": f"[core]\n\tpager = {PWNED}\n",
    "ssh command": f"[core]\n\tsshCommand = {PWNED}\n",
    "textconv": f'[diff "x"]\n\ttextconv = {PWNED}\n',
    "credential helper": f"[credential]\n\thelper = !{PWNED}\n",
    "line continued": "[user]\n\tname = a \\\n\tb\n",
}
# A config that names no program: `git status` keeps its default allow and runs.
HARMLESS = '[user]\n\tname = "Some One" ; comment\n[remote "origin"]\n\turl = https://example.com/x.git\n'


class GitConfigTest(AdversarialCase):
    async def with_config(self, category: str, text: str, cases: list) -> None:
        """Run `cases` with `text` added to the project's .git/config, then restore the config."""
        path = os.path.join(self.root, ".git", "config")
        with open(path) as handle:
            original = handle.read()
        with open(path, "a") as handle:
            handle.write(text)
        try:
            await self.run_table(category, cases)
        finally:
            with open(path, "w") as handle:
                handle.write(original)

    async def test_repository_alias_takes_default_git_status_away(self):
        """With an alias in the project's .git/config, `git status` and `git st` ask; nothing runs."""
        for label, text in ALIASES.items():
            with self.subTest(label):
                await self.with_config(f"8. git aliases ({label})", text, ALIASED)

    async def test_repository_alias_rides_no_wildcard_git_rule(self):
        """With allow rules git * and git st*, a repository alias still asks: it may run a program."""
        await self.save_rule("bash", "git *")
        await self.save_rule("bash", "git st*")
        await self.with_config("8. git aliases (wildcard rules)", ALIASES["alias"], [
            bash("git st", patterns=("git st",)), bash("git st --short", patterns=("git st --short",)),
            bash("git log --oneline", patterns=("git log --oneline",))])

    async def test_repository_programs_take_default_git_status_away(self):
        """An include, includeIf, program key or unreadable line in .git/config: `git status` asks."""
        for label, text in PROGRAMS.items():
            with self.subTest(label):
                await self.with_config(f"8. git programs ({label})", text, [
                    bash("git status", patterns=GIT), bash("git status --short", patterns=SHORT)])

    async def test_harmless_config_keeps_default_git_status(self):
        """A config that names no program leaves the default allow of `git status` as it is."""
        await self.with_config("8. git harmless config", HARMLESS, [
            bash("git status", "allow", says="[exit code 0]", by="rule"),
            bash("git status --short", "allow", says="[exit code 0]", by="rule"),
            bash("git st", patterns=("git st", "git st *")),
        ])

    # Once a hole (fixed): the check read only the project's own .git/config, but `git status`
    # also runs in every checked-out submodule, with the submodule's config. An embedded
    # repository (a gitlink in the index, no .gitmodules needed) whose config names a filter
    # driver made the default-allowed `git status` run it.
    async def test_submodule_filter_takes_default_git_status_away(self):
        """A checked-out submodule whose config names a filter driver: `git status` asks; nothing runs."""
        lib = os.path.join(self.root, "lib")
        os.makedirs(lib)
        git(lib, "init", "-q")
        build_tree(lib, {"a.txt": "a\n", ".gitattributes": "* filter=evil\n"})
        git(lib, "add", ".")
        git(lib, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "first")
        with open(os.path.join(lib, ".git", "config"), "a") as handle:
            handle.write(f'[filter "evil"]\n\tclean = touch {self.tmp}/pwned; cat\n')
        later = time.time() + 100
        os.utime(os.path.join(lib, "a.txt"), (later, later))  # git must read its content
        git(self.root, "add", "lib")
        await self.run_table("8. git submodule filter", [
            bash("git status", patterns=GIT), bash("git status --short", patterns=SHORT)])
        subprocess.run(["git", "status", "--short"], cwd=self.root, capture_output=True, timeout=30,
                       env={"PATH": os.environ["PATH"], "HOME": self.root, "GIT_CONFIG_NOSYSTEM": "1"})
        self.assertTrue(os.path.exists(os.path.join(self.tmp, "pwned")), "the trap was not armed")


def tearDownModule():
    counts = ", ".join(f"{name}: {count}" for name, count in sorted(COUNTS.items()) if name.startswith("8."))
    print(f"\nadversarial git cases: {sum(n for k, n in COUNTS.items() if k.startswith('8.'))} ({counts})")
