"""The adversarial suite (issue 4), paths: file tool calls that try to leave the project or reach
a protected .env file, end to end (the harness and the fixture are in test_adversarial.py)."""

from __future__ import annotations

import unittest

from tests.test_adversarial import (
    PROTECTED,
    AdversarialCase,
    Case,
    bash,
    tearDownModule,  # noqa: F401 (prints the count of cases)
)


def denied(tool: str, args: dict) -> Case:
    """Outside the project: denied in code, before any rule, with no question."""
    return Case(tool, args, "deny", by="code", says="outside the project")


def refused(tool: str, args: dict, says: str = "outside the project") -> Case:
    """Refused by the boundary while the call is read. Outside the project it is denied in code
    (the write tools resolve like the read ones); other refusals (`.git`, `~`, NUL) are tool errors
    with no decision and no question."""
    if says == "outside the project":
        return denied(tool, args)
    return Case(tool, args, "refuse", says=says)


def patch(text: str) -> Case:
    return refused("patch", {"patch": text})


def leaving(outside: str) -> list[Case]:
    """`outside` is the absolute sibling folder of the project."""
    secret = f"{outside}/secret.txt"
    return [
        # read
        denied("read", {"path": ".."}),
        denied("read", {"path": "../outside/secret.txt"}),
        denied("read", {"path": "/etc/passwd"}),
        denied("read", {"path": secret}),
        denied("read", {"path": "/proc/self/environ"}),
        denied("read", {"path": "src/../../outside/secret.txt"}),
        denied("read", {"path": "link_out/secret.txt"}),
        denied("read", {"path": "link_out"}),
        denied("read", {"path": "link_file"}),
        denied("read", {"path": "broken_link"}),
        refused("read", {"path": "~"}, "~ is not expanded"),
        refused("read", {"path": "~/.bashrc"}, "~ is not expanded"),
        refused("read", {"path": "a.txt\x00../../outside/secret.txt"}, "NUL"),
        Case("read", {"path": ".git/config"}, "allow", says="[core]"),  # inside: reading is allowed
        Case("read", {"path": "src/../a.txt"}, "allow", says="hello world"),
        # glob
        denied("glob", {"pattern": "*", "path": ".."}),
        denied("glob", {"pattern": "*", "path": "/etc"}),
        denied("glob", {"pattern": "*", "path": outside}),
        denied("glob", {"pattern": "*", "path": "link_out"}),
        refused("glob", {"pattern": "*", "path": "~"}, "~ is not expanded"),
        refused("glob", {"pattern": "*", "path": "src\x00"}, "NUL"),
        Case("glob", {"pattern": "../*"}, "fail", says="contains '..'"),
        Case("glob", {"pattern": "/etc/*"}, "fail", says="absolute"),
        Case("glob", {"pattern": "link_out/*"}, "allow", says="No files match",
             unlisted=("link_out/secret.txt",)),
        Case("glob", {"pattern": "**/*"}, "allow", says="a.txt",
             unlisted=("link_file", "broken_link", "link_out/secret.txt", ".totem/skills/evil/SKILL.md",
                       ".totem/skills/outdir/SKILL.md", ".git/config")),
        Case("glob", {"pattern": "*", "path": ".git"}, "allow", says=".git is not listed"),
        # grep
        denied("grep", {"pattern": "SECRET", "path": ".."}),
        denied("grep", {"pattern": "root", "path": "/etc"}),
        denied("grep", {"pattern": "SECRET", "path": "link_out"}),
        denied("grep", {"pattern": "SECRET", "path": "link_file"}),
        refused("grep", {"pattern": "SECRET", "path": "~"}, "~ is not expanded"),
        refused("grep", {"pattern": "SECRET", "path": "a.txt\x00"}, "NUL"),
        Case("grep", {"pattern": "OUTSIDE"}, "allow", says="No matches"),
        Case("grep", {"pattern": "core", "path": ".git"}, "allow", says=".git was not searched"),
        # write
        refused("write", {"path": "../pwned", "content": "x"}),
        refused("write", {"path": f"{outside}/new.txt", "content": "x"}),
        refused("write", {"path": f"{outside}/../pwned", "content": "x"}),
        refused("write", {"path": "~/pwned", "content": "x"}, "~ is not expanded"),
        refused("write", {"path": "link_out/new.txt", "content": "x"}),
        refused("write", {"path": "link_file", "content": "x"}),
        refused("write", {"path": "broken_link", "content": "x"}),
        refused("write", {"path": ".git/config", "content": "x"}, ".git folder"),
        refused("write", {"path": ".git/hooks/pre-commit", "content": "touch ../pwned\n"}, ".git folder"),
        refused("write", {"path": "gitlink/hooks/pre-commit", "content": "touch ../pwned\n"}, ".git folder"),
        refused("write", {"path": ".GIT/config", "content": "x"}, ".git folder"),
        refused("write", {"path": "a\x00b", "content": "x"}, "NUL"),
        refused("write", {"path": ".", "content": "x"}, "project folder"),
        # edit
        refused("edit", {"path": "../outside/secret.txt", "old": "OUTSIDE", "new": "x"}),
        refused("edit", {"path": secret, "old": "OUTSIDE", "new": "x"}),
        refused("edit", {"path": "link_file", "old": "OUTSIDE", "new": "x"}),
        refused("edit", {"path": "/etc/passwd", "old": "root", "new": "x"}),
        refused("edit", {"path": ".git/config", "old": "core", "new": "x"}, ".git folder"),
        # patch
        patch("--- a/../outside/secret.txt\n+++ b/../outside/secret.txt\n@@ -1 +1 @@\n"
              "-OUTSIDE-SECRET-42\n+changed\n"),
        patch(f"--- {secret}\n+++ {secret}\n@@ -1 +1 @@\n-OUTSIDE-SECRET-42\n+changed\n"),
        patch("--- /dev/null\n+++ b/../pwned\n@@ -0,0 +1 @@\n+pwned\n"),
        patch("--- a/../outside/secret.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-OUTSIDE-SECRET-42\n"),
        patch("--- a/link_file\n+++ b/link_file\n@@ -1 +1 @@\n-OUTSIDE-SECRET-42\n+changed\n"),
        patch("--- /dev/null\n+++ b/link_out/new.txt\n@@ -0,0 +1 @@\n+pwned\n"),
        patch("diff --git a/a.txt b/../pwned\nsimilarity index 100%\nrename from a.txt\n"
              "rename to ../pwned\n"),
        patch("diff --git a/../outside/secret.txt b/stolen.txt\nsimilarity index 100%\n"
              "rename from ../outside/secret.txt\nrename to stolen.txt\n"),
        # one good target and one bad: nothing is written, the good one included
        patch("--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-hello world\n+changed\n"
              "--- /dev/null\n+++ b/../pwned\n@@ -0,0 +1 @@\n+pwned\n"),
        patch("--- /dev/null\n+++ b/../pwned\n@@ -0,0 +1 @@\n+pwned\n"
              "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-hello world\n+changed\n"),
        refused("patch", {"patch": "--- /dev/null\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1 @@\n"
                                   "+touch ../pwned\n"}, ".git folder"),
        # skill: links in .totem/skills that lead out
        denied("skill", {"name": "evil"}),
        denied("skill", {"name": "outdir"}),
        refused("skill", {"name": "../../outside"}, "a skill name is"),
    ]


ENV = [
    Case("read", {"path": ".env"}, "ask", (".env",)),
    Case("read", {"path": ".env.local"}, "ask", (".env.local",)),
    Case("read", {"path": ".env.production"}, "ask", (".env.production",)),
    Case("read", {"path": "config/.env"}, "ask", ("config/.env",)),
    Case("read", {"path": "./.env"}, "ask", (".env",)),
    Case("read", {"path": "config/../.env"}, "ask", (".env",)),
    Case("read", {"path": "notsecret"}, "ask", (".env",)),  # a link: the subject is what it resolves to
    Case("read", {"path": ".ENV"}, "ask", (".ENV",)),  # a case-insensitive disk would open .env
    Case("read", {"path": ".env.example.local"}, "ask", (".env.example.local",)),
    Case("read", {"path": ".env.example"}, "allow", says="changeme-example"),
    Case("read", {"path": ".env.sample"}, "allow", says="changeme-sample"),
    Case("read", {"path": ".env.template"}, "allow", says="changeme-template"),
    Case("write", {"path": ".env", "content": "X=1\n"}, "ask", (".env",)),
    Case("write", {"path": ".env.local", "content": "X=1\n"}, "ask", (".env.local",)),
    Case("write", {"path": "config/.env", "content": "X=1\n"}, "ask", ("config/.env",)),
    Case("write", {"path": ".ENV", "content": "X=1\n"}, "ask", (".ENV",)),
    Case("edit", {"path": ".env", "old": "SECRET", "new": "PUBLIC"}, "ask", (".env",)),
    Case("edit", {"path": ".env.production", "old": "PRODUCTION", "new": "X"}, "ask", (".env.production",)),
    Case("edit", {"path": "notsecret", "old": "SECRET", "new": "PUBLIC"}, "ask", (".env",)),
    Case("skill", {"name": "envskill"}, "ask", (".env",)),
    bash("cat .env", patterns=("cat .env",)),
    bash("grep -r s3cr3t .", patterns=("grep -r s3cr3t .", "grep *")),
    # search never shows a line of a protected file, nor lists one
    Case("grep", {"pattern": "s3cr3t"}, "allow", says="No matches"),
    Case("grep", {"pattern": "TOKEN", "ignore_case": True}, "allow", says="changeme-example"),
    Case("grep", {"pattern": "TOKEN", "include": ".env*"}, "allow", says=".env.example:1:"),
    Case("grep", {"pattern": "TOKEN", "include": ".env"}, "allow", says="No matches"),
    Case("grep", {"pattern": "s3cr3t", "path": "config"}, "allow", says="No matches"),
    Case("glob", {"pattern": "**/*"}, "allow", says=".env.example", unlisted=PROTECTED),
    Case("glob", {"pattern": ".env*"}, "allow", says=".env.template", unlisted=PROTECTED),
    Case("glob", {"pattern": "**/.env"}, "allow", says="No files match"),
    Case("glob", {"pattern": "*", "path": "config"}, "allow", says="No files match"),
]


class LeavingTest(AdversarialCase):
    async def test_paths_leaving_project_denied_or_refused(self):
        """Paths leaving the project (.., /, ~, links, NUL, .git, patches) are denied or refused."""
        await self.run_table("2. paths", leaving(self.outside))


class EnvTest(AdversarialCase):
    async def test_env_files_ask_and_search_skips_them(self):
        """Reading or changing a .env file asks (examples are fine); search never shows or lists one."""
        await self.run_table("3. .env", ENV)

    # Hole (a needless question, not a leak): the spec and DESIGN.md step 1 say the search tools
    # skip .env files in code, "including when a secret file is the explicit search path", and
    # the grep tool answers so. But the engine first asks: the default rule `grep: **` is a
    # wildcard allow, and the .env guard turns it into an ask. The person is asked to let the
    # model search the secrets; approving gets "not searched". The same holds for glob.
    async def test_env_explicit_search_path_answers_without_asking(self):
        """grep with path .env answers "not searched" at once, without a permission question."""
        await self.run_table("3. .env (search path hole)", [
            Case("grep", {"pattern": "TOKEN", "path": ".env"}, "allow", says="search skips secret files"),
            Case("grep", {"pattern": "TOKEN", "path": "config/.env"}, "allow",
                 says="search skips secret files"),
        ])


if __name__ == "__main__":
    unittest.main()
