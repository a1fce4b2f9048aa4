"""An approval covers exactly what the person saw: a project MCP server's start is pinned to its
definition and to the content of the project files it runs (mcp/pins.py), a change asks again and
says what changed, the question shows the variables' values (secret-looking ones masked, those
that load code flagged), and an edit of a file an approved server runs always asks.

The pure rule first (files found, the boundary, the bounds, the words of a change, the lists of
variables, the decision), then end to end against the real server, the scripted model, real git
and the standard library's scripted stdio MCP server started by a shell script of the project.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from tests.model_server import reply
from tests.test_mcp_client import McpClientCase, tool_results
from tests.utils import call, wait_until_ended
from totem.mcp import pins
from totem.mcp.definitions import (
    CODE_LOADING_ENV,
    FORBIDDEN_ENV,
    SECRET_NAME_PARTS,
    ServerDefinition,
    loads_code,
    looks_secret,
    parse_definitions,
    pin_definition,
    variable_view,
)
from totem.mcp.pins import MAX_LOAD_DEPTH, MAX_PIN_FILES, changes, pin_files, value_hash
from totem.security.permissions import Call, Rule, decide, pinned_reason
from totem.tools import tool_kinds

SCRIPTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp_servers", "scripted_server.py")
SECRET = "key-value-never-shown-5150"
KINDS = tool_kinds()


def tree(root: str, files: dict[str, str]) -> None:
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as handle:
            handle.write(text)


def pinned_paths(root: str, command: str, *args: str) -> list[str]:
    return [path for path, _digest in pin_files(root, command, args).files]


# -- the rule: which files ------------------------------------------------------------------------

def test_a_shell_script_pins_what_it_sources_and_the_program_it_runs(tmp_path):
    """`sh srv.sh` pins srv.sh, the files it sources (`.` and `source`), the Python file it
    execs and that file's project imports (package, module, relative import); a word with `$` and
    a standard-library import are not followed."""
    root = str(tmp_path)
    tree(root, {
        "srv.sh": "#!/bin/sh\n. ./env.sh\nsource lib/helpers.sh  # comment.sh\n"
                  "sh \"$DIR/dynamic.sh\"\nexec python3 server.py --config=conf.json\n",
        "env.sh": "X=1\n", "lib/helpers.sh": "true\n", "dynamic.sh": "", "comment.sh": "", "conf.json": "{}",
        "server.py": "import os\nimport tools\nfrom pkg import mod\nfrom . import sibling\n",
        "tools.py": "", "pkg/__init__.py": "", "pkg/mod.py": "", "sibling.py": "", "unrelated.py": "",
    })
    assert pinned_paths(root, "sh", "srv.sh") == [
        "conf.json", "env.sh", "lib/helpers.sh", "pkg/__init__.py", "pkg/mod.py", "server.py", "sibling.py",
        "srv.sh", "tools.py"]


def test_node_package_main_npm_scripts_and_relative_requires(tmp_path):
    """`node .` pins package.json and its main with what that requires and imports (extension
    and index resolution); `npm start` pins package.json and the files its pre/post scripts
    name; a bare package name is not followed."""
    root = str(tmp_path)
    tree(root, {
        "package.json": json.dumps({"main": "app.js", "scripts": {"prestart": "sh setup.sh", "start": "node app.js"}}),
        "app.js": "const a = require('./lib/a');\nimport b from './b.mjs';\nimport './side';\n"
                  "const express = require('express');\nexport * from './util/index.js';\n",
        "lib/a.js": "", "b.mjs": "", "side/index.js": "", "util/index.ts": "", "setup.sh": "",
        "node_modules/express/index.js": "",
    })
    assert pinned_paths(root, "node", ".") == ["app.js", "b.mjs", "lib/a.js", "package.json", "side/index.js",
                                                "util/index.ts"]
    assert pinned_paths(root, "npm", "start") == ["app.js", "b.mjs", "lib/a.js", "package.json", "setup.sh",
                                                   "side/index.js", "util/index.ts"]
    assert pinned_paths(root, "npx", "-y", "some-db-mcp") == []


def test_python_module_deno_and_a_command_of_the_project(tmp_path):
    """`python -m pkg.srv` pins the package and module; `deno run --allow-read=. x.ts` pins x.ts
    and its imports; a command named by its path (`./bin/srv`) is pinned, read as its `#!` says."""
    root = str(tmp_path)
    tree(root, {"pkg/__init__.py": "", "pkg/srv.py": "from .store import db\n", "pkg/store.py": "",
                "x.ts": "import { y } from './y.ts';\n", "y.ts": "",
                "bin/srv": "#!/usr/bin/env bash\nsource ../lib.sh\n. bin/conf.sh\n", "bin/conf.sh": "", "lib.sh": ""})
    assert pinned_paths(root, sys.executable, "-m", "pkg.srv") == ["pkg/__init__.py", "pkg/srv.py", "pkg/store.py"]
    assert pinned_paths(root, "deno", "run", "--allow-read=.", "x.ts") == ["x.ts", "y.ts"]
    assert pinned_paths(root, "./bin/srv") == ["bin/conf.sh", "bin/srv", "lib.sh"]


def test_loads_are_followed_two_levels_deep_only(tmp_path):
    """An entry's loads and theirs are pinned (MAX_LOAD_DEPTH = 2), not the level after."""
    root = str(tmp_path)
    tree(root, {"a.py": "import b\n", "b.py": "import c\n", "c.py": "import d\n", "d.py": ""})
    assert MAX_LOAD_DEPTH == 2
    assert pinned_paths(root, "python3", "a.py") == ["a.py", "b.py", "c.py"]


# -- the rule: the boundary ------------------------------------------------------------------------

def test_files_outside_the_project_are_never_read_into_the_pin(tmp_path):
    """An argument outside the project (absolute, `..`, a link that leads out), a relative
    require that leads out and a sourced file outside are not pinned: their content does not
    change the pin; the arguments and the require are named in left_out."""
    root, outside = str(tmp_path / "project"), str(tmp_path / "outside")
    tree(outside, {"evil.sh": "echo one\n", "evil.js": "one\n"})
    tree(root, {"srv.sh": f". {outside}/evil.sh\n. ../outside/evil.sh\n", "app.js": "require('../outside/evil.js')\n"})
    os.symlink(os.path.join(outside, "evil.sh"), os.path.join(root, "link.sh"))
    args = ("srv.sh", "link.sh", f"{outside}/evil.sh", "../outside/evil.sh", "app.js")
    first = pin_files(root, "sh", args)
    assert [path for path, _ in first.files] == ["app.js", "srv.sh"]
    assert first.left_out == ("link.sh is outside the project: its content is not covered",
                              f"{outside}/evil.sh is outside the project: its content is not covered",
                              "../outside/evil.sh is outside the project: its content is not covered",
                              "../outside/evil.js (loaded by app.js) is outside the project: its content is not covered")
    tree(outside, {"evil.sh": "echo two\n", "evil.js": "two\n"})
    assert pin_files(root, "sh", args) == first


def test_a_link_inside_is_pinned_as_its_target_and_a_fifo_is_never_opened_for_reading(tmp_path):
    """A link to a file of the project pins the target (its resolved path); a FIFO named as an
    argument is skipped without blocking; an unreadable file is pinned as unreadable."""
    root = str(tmp_path)
    tree(root, {"real/srv.sh": "true\n", "locked.sh": "secret\n"})
    os.symlink("real/srv.sh", os.path.join(root, "srv.sh"))
    os.mkfifo(os.path.join(root, "pipe.sh"))
    os.chmod(os.path.join(root, "locked.sh"), 0)
    found = pin_files(root, "sh", ("srv.sh", "pipe.sh", "locked.sh"))
    if os.geteuid() == 0:  # root reads a file of mode 0
        assert [path for path, _ in found.files] == ["locked.sh", "real/srv.sh"]
    else:
        assert found.files[0] == ("locked.sh", pins.UNREADABLE)
        assert [path for path, _ in found.files] == ["locked.sh", "real/srv.sh"]
        assert "locked.sh cannot be read" in found.left_out[0]


# -- the rule: the bounds ---------------------------------------------------------------------------

def test_the_count_of_files_is_bounded_and_said(tmp_path):
    """A script that sources more than MAX_PIN_FILES files pins that many, and says the rest are
    not covered."""
    root = str(tmp_path)
    names = [f"part{index:03}.sh" for index in range(MAX_PIN_FILES + 20)]
    tree(root, {"srv.sh": "".join(f". ./{name}\n" for name in names)} | dict.fromkeys(names, ""))
    found = pin_files(root, "sh", ("srv.sh",))
    assert len(found.files) == MAX_PIN_FILES
    assert found.left_out == (f"more than {MAX_PIN_FILES} files: the others are not covered",)


def test_the_bytes_read_are_bounded_and_a_large_file_is_not_searched(tmp_path, monkeypatch):
    """A file over what is left of MAX_PIN_BYTES is not pinned (said); a file over
    MAX_SCAN_BYTES is pinned but what it loads is not followed (said)."""
    monkeypatch.setattr(pins, "MAX_PIN_BYTES", 4096)
    monkeypatch.setattr(pins, "MAX_SCAN_BYTES", 1024)
    root = str(tmp_path)
    tree(root, {"srv.sh": ". ./big.sh\n. ./huge.bin\n", "big.sh": ". ./lib.sh\n" + "#" * 1500 + "\n",
                "lib.sh": "", "huge.bin": "x" * 5000})
    found = pin_files(root, "sh", ("srv.sh",))
    assert [path for path, _ in found.files] == ["big.sh", "srv.sh"]
    assert found.left_out == ("big.sh is larger than 1 KB: what it loads is not followed",
                              "huge.bin (4 KB) is over what a pin reads (4 KB in all): a change to it will not ask again")


def test_the_paths_tried_are_bounded(tmp_path, monkeypatch):
    """A script of many file-like words stops looking them up after MAX_LOOKUPS, and says so."""
    monkeypatch.setattr(pins, "MAX_LOOKUPS", 50)
    root = str(tmp_path)
    tree(root, {"srv.sh": "".join(f"echo word{index}.txt\n" for index in range(200)) + ". ./late.sh\n",
                "late.sh": ""})
    found = pin_files(root, "sh", ("srv.sh",))
    assert [path for path, _ in found.files] == ["srv.sh"]
    assert found.left_out == ("more than 50 paths tried: what is left is not followed",)


# -- what changed, and the variables ----------------------------------------------------------------

def definition(command="sh", args=("srv.sh",), env=None, files=()) -> ServerDefinition:
    found, problems = parse_definitions({"mcpServers": {"db": {"command": command, "args": list(args),
                                                               "env": env or {}}}}, ".mcp.json")
    assert not problems, problems
    return found[0].pinned(files)


def test_changes_say_what_changed_in_the_definition_and_each_file():
    """Each difference is one sentence: the command line (with what it was), each variable by
    name (never its value), each file changed, added or removed."""
    before = definition(env={"MODE": "a", "OLD": "x"}, files=(("lib.sh", "1"), ("srv.sh", "1")))
    after = definition(args=("srv.sh", "-v"), env={"MODE": "b", "NEW": "y"}, files=(("srv.sh", "2"), ("x.sh", "1")))
    assert changes(before.manifest(), after.manifest()) == [
        "the command line changed (it was: sh srv.sh)", "the variable MODE has a new value",
        "the variable NEW was added", "the variable OLD was removed", "lib.sh was removed (it is no longer run)",
        "srv.sh changed", "x.sh was added (it is run now)"]
    assert changes(before.manifest(), before.manifest()) == []
    assert before.manifest()["env"] == {"MODE": value_hash("a"), "OLD": value_hash("x")}  # hashes only


@pytest.mark.parametrize(("name", "value", "secret"), [
    ("API_KEY", "x", True), ("github_token", "x", True), ("DB_PASSWORD", "x", True), ("AUTH_HEADER", "x", True),
    ("AWS_SECRET_ACCESS_KEY", "x", True), ("MY_CREDENTIALS", "x", True), ("PGPASS", "x", True),
    ("SESSION_COOKIE", "x", True), ("DB_URL", "postgres://app:hunter2@db/app", True),
    ("DB_URL", "postgres://db/app", False), ("MODE", "fast", False), ("VERSION", "2025-06-18", False),
    ("URL", "http://[bad", True),
])
def test_secret_looking_variables(name, value, secret):
    """A name with a part of SECRET_NAME_PARTS, or a URL with a password, is masked."""
    assert looks_secret(name, value) is secret
    assert ("value" in variable_view(name, value)) is not secret


@pytest.mark.parametrize(("name", "flagged"), [
    ("PYTHONPATH", True), ("PYTHONSTARTUP", True), ("NODE_OPTIONS", True), ("NODE_PATH", True), ("RUBYOPT", True),
    ("RUBYLIB", True), ("PERL5OPT", True), ("PERL5LIB", True), ("JAVA_TOOL_OPTIONS", True), ("_JAVA_OPTIONS", True),
    ("LD_PRELOAD", True), ("LD_LIBRARY_PATH", True), ("LD_AUDIT", True), ("BASH_ENV", True), ("ENV", True),
    ("DYLD_INSERT_LIBRARIES", True), ("GIT_SSH_COMMAND", True), ("GIT_CONFIG_KEY_0", True),
    ("GIT_CONFIG_VALUE_0", True), ("npm_config_script_shell", True), ("NPM_CONFIG_NODE_OPTIONS", True),
    ("MODE", False), ("GIT_AUTHOR_NAME", False), ("NODE_ENV", False), ("PYTHONUNBUFFERED", False),
])
def test_variables_that_load_code_are_flagged_with_a_reason(name, flagged):
    """One list (CODE_LOADING_ENV, a name ending in _ is a prefix) flags each with its reason."""
    reason = loads_code(name)
    assert (reason is not None) is flagged
    if flagged:
        assert variable_view(name, "x")["loads"] == reason


def test_the_refused_variables_are_flagged_too_and_the_lists_are_single():
    """Every variable a definition may not set (but PATH) is also one that loads code; the
    secret parts are upper case (names are compared without case)."""
    assert FORBIDDEN_ENV - {"PATH"} <= set(CODE_LOADING_ENV)
    assert all(part == part.upper() for part in SECRET_NAME_PARTS)


# -- the decision: an edit of a pinned file ----------------------------------------------------------

def edit_call(*subjects: str, **options) -> Call:
    return Call("edit", subjects, KINDS["edit"], pinned={"srv.sh": "db"}, **options)


def test_an_edit_of_a_pinned_file_asks_under_auto_accept_and_any_allow_rule():
    """Auto-accept, an exact allow rule and a wildcard one all give way to an ask that says why
    and offers no pattern; a deny rule and Plan mode still deny; a scheduled run denies saying
    why; a file that is not pinned is auto-accepted as before."""
    reason = pinned_reason("srv.sh", "db")
    assert "srv.sh is run by the MCP server db, approved to start without asking" in reason
    assert "a change would run without a question" in reason
    for rules in ([], [Rule("edit", "srv.sh", "allow", "project")], [Rule("*", "**", "allow", "global")]):
        for autoaccept in (False, True):
            decision = decide(edit_call("srv.sh", autoaccept=autoaccept), rules)
            assert (decision.action, decision.reason, decision.subject, decision.asks) == ("ask", reason, "srv.sh", ())
    patch = decide(Call("patch", ("notes.txt", "srv.sh"), KINDS["patch"], pinned={"srv.sh": "db"}, autoaccept=True), [])
    assert (patch.action, patch.subject) == ("ask", "srv.sh")
    assert decide(edit_call("srv.sh", autoaccept=True), [Rule("edit", "srv.sh", "deny", "project")]).action == "deny"
    assert decide(edit_call("srv.sh", autoaccept=True, mode="plan"), []).action == "deny"
    scheduled = decide(edit_call("srv.sh", autoaccept=True, scheduled=True), [])
    assert scheduled.action == "deny" and reason in scheduled.reason and "scheduled run" in scheduled.reason
    assert decide(edit_call("notes.txt", autoaccept=True), []).action == "allow"
    # Only the tools that edit are concerned: reading a pinned file is as before.
    assert decide(Call("read", ("srv.sh",), KINDS["read"], pinned={"srv.sh": "db"}), []).action == "allow"


# -- end to end ---------------------------------------------------------------------------------------

SERVER_SCRIPT = f". ./lib.sh\nexec {shlex.quote(sys.executable)} {shlex.quote(SCRIPTED)}\n"
DEFINITION = {"command": "sh", "args": ["srv.sh"],
              "env": {"MODE": "plain", "API_KEY": SECRET, "PYTHONPATH": "vendor"}}


def git(folder: str, *args: str) -> str:
    return subprocess.run(["git", "-C", folder, "-c", "user.name=Test", "-c", "user.email=t@example.com", *args],
                          capture_output=True, text=True, check=True).stdout


class PinnedServerTest(McpClientCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        tree(self.root, {"lib.sh": "MODE_NOTE=plain\n", "srv.sh": SERVER_SCRIPT})
        self.define({"notes": DEFINITION})

    def read(self, path: str) -> str:
        with open(os.path.join(self.root, path)) as handle:
            return handle.read()

    async def start_asks(self, text: str = "go", **extra) -> dict:
        self.model.script(reply("ok"))
        answer = await self.prompt(text, **extra)
        self.assertEqual(answer.status, 200, answer.body)
        return (await self.until("permission.ask", tool="mcp-start"))["data"]

    async def reply(self, ask: dict, reply_: str, **extra) -> None:
        answer = await call(self.app, "permissions_reply", {"reply": reply_} | extra, ident=ask["id"])
        self.assertEqual(answer.status, 200, answer.body)

    async def approve_always(self) -> dict:
        ask = await self.start_asks("start it")
        await self.reply(ask, "always")
        await self.idle()
        return ask

    async def another_session_asks_nothing(self) -> str:
        """Prompt a new session of the project: its run asks no question. Returns its id."""
        other = await self.create_session(self.project["id"])
        await self.ws.send(json.dumps({"type": "subscribe", "sessionid": other["id"]}))
        self.model.script(reply("again"))
        await call(self.app, "sessions_prompt", {"text": "again", "model": self.modelref}, ident=other["id"])
        events = await self.events_until("idle", 20_000)
        self.assertNotIn("permission.ask", [event["type"] for event in events])
        return other["id"]

    async def starts_without_a_question(self) -> None:
        other = await self.another_session_asks_nothing()
        self.assertEqual((await self.servers(other))["servers"][0]["state"], "running")

    async def test_the_question_shows_values_masks_secrets_flags_loaders_and_lists_the_files(self):
        """The start question lists the files its approval covers, each variable's value but the
        secret one's (masked: its value is in no event nor any API answer), and flags PYTHONPATH
        with its reason."""
        ask = await self.start_asks()
        shown = ask["input"]
        self.assertEqual(shown["files"], ["lib.sh", "srv.sh"])
        self.assertEqual(shown["left_out"], [])
        self.assertEqual(shown["variables"], [
            {"name": "API_KEY", "masked": True}, {"name": "MODE", "value": "plain"},
            {"name": "PYTHONPATH", "value": "vendor", "loads": CODE_LOADING_ENV["PYTHONPATH"]}])
        self.assertNotIn("changed", shown)
        self.assertNotIn(SECRET, json.dumps(ask))
        await self.reply(ask, "once")
        await self.idle()
        answers = [await self.servers(), await self.servers(self.session["id"])]
        for answer in (await call(self.app, "sessions_messages", ident=self.session["id"]),
                       await call(self.app, "sessions_read", ident=self.session["id"]),
                       await call(self.app, "permissions", query=f"projectid={self.project['id']}")):
            self.assertEqual(answer.status, 200, answer.body)
            answers.append(answer.json())
        self.assertNotIn(SECRET, json.dumps(answers))
        self.assertIn('"masked": true', json.dumps(answers[0]))

    async def test_an_unchanged_server_starts_without_a_question_and_a_rewritten_script_asks_again(self):
        """"always" pins the definition and its files: unchanged, another session starts it without
        a question; once srv.sh is rewritten the running server is stopped and the next start asks,
        saying that srv.sh changed."""
        await self.approve_always()
        await self.starts_without_a_question()
        old_pid = self.child_pid(self.session["id"], "notes")
        tree(self.root, {"srv.sh": "echo rewritten >&2\n" + SERVER_SCRIPT})
        ask = await self.start_asks("after the rewrite")
        self.assertEqual(ask["input"]["changed"], ["srv.sh changed"])
        wait_until_ended(old_pid, "the server of the old pin")
        await self.reply(ask, "reject")
        await self.idle()

    async def test_a_sourced_file_that_changes_or_a_new_one_asks_again(self):
        """A change in a file the script sources asks again naming it; so does a new file it
        sources from then on (added) beside the script's own change."""
        await self.approve_always()
        tree(self.root, {"lib.sh": "MODE_NOTE=changed\n"})
        ask = await self.start_asks("lib changed")
        self.assertEqual(ask["input"]["changed"], ["lib.sh changed"])
        await self.reply(ask, "always")
        await self.idle()
        tree(self.root, {"extra.sh": "true\n", "srv.sh": ". ./extra.sh\n" + SERVER_SCRIPT})
        ask = await self.start_asks("one more file")
        self.assertEqual(ask["input"]["changed"], ["extra.sh was added (it is run now)", "srv.sh changed"])
        self.assertEqual(ask["input"]["files"], ["extra.sh", "lib.sh", "srv.sh"])
        await self.reply(ask, "reject")
        await self.idle()

    async def test_a_git_pull_that_changes_the_script_asks_again(self):
        """A change committed in another clone and pulled with git asks again, naming the file."""
        git(self.root, "init", "-q")
        git(self.root, "add", "-A")
        git(self.root, "commit", "-qm", "server")
        other = os.path.join(self.tmp, "other")
        subprocess.run(["git", "clone", "-q", self.root, other], check=True, capture_output=True)
        await self.approve_always()
        tree(other, {"lib.sh": "MODE_NOTE=pulled\n"})
        git(other, "commit", "-qam", "a change from elsewhere")
        git(self.root, "pull", "-q", "--ff-only", other, "HEAD")
        ask = await self.start_asks("after the pull")
        self.assertEqual(ask["input"]["changed"], ["lib.sh changed"])
        await self.reply(ask, "reject")
        await self.idle()

    async def test_a_changed_variable_value_asks_again(self):
        """A new value of a variable asks again and says which variable (not the value)."""
        await self.approve_always()
        self.define({"notes": DEFINITION | {"env": DEFINITION["env"] | {"API_KEY": "another-never-shown"}}})
        ask = await self.start_asks("new key")
        self.assertEqual(ask["input"]["changed"], ["the variable API_KEY has a new value"])
        self.assertNotIn("another-never-shown", json.dumps(ask))
        await self.reply(ask, "reject")
        await self.idle()

    async def test_a_file_changed_while_the_question_waits_does_not_start(self):
        """What starts is what was approved: a script rewritten while its question waited is not
        started, said with the file; the next run asks again."""
        ask = await self.start_asks()
        tree(self.root, {"srv.sh": "echo swapped >&2\n" + SERVER_SCRIPT})
        await self.reply(ask, "once")
        await self.idle()
        part = (await self.server_parts())[-1]
        self.assertEqual(part["status"], "error")
        self.assertIn("what it runs changed while its start was decided (srv.sh changed)", part["data"]["error"])
        self.assertEqual((await self.servers(self.session["id"]))["servers"][0]["state"], "not started")
        again = await self.start_asks("again")
        self.assertNotIn("changed", again["input"])  # nothing was approved or started before
        await self.reply(again, "reject")
        await self.idle()

    async def test_an_auto_accepted_edit_of_a_pinned_file_asks_and_says_why(self):
        """Under auto-accept and an allow rule, an edit of srv.sh asks (the reason names the server,
        no pattern is offered, "always" is refused), while an edit of another file goes through
        unasked; the approved edit then makes the next start ask again."""
        await self.approve_always()
        await call(self.app, "permissions_save", {"projectid": self.project["id"], "tool": "edit",
                                                  "pattern": "**", "action": "allow"})
        tree(self.root, {"notes.txt": "one\n"})
        self.model.script(reply(tool_calls=[("edit", {"path": "notes.txt", "old": "one", "new": "two"})]),
                          reply(tool_calls=[("edit", {"path": "srv.sh", "old": ". ./lib.sh", "new": ". ./lib.sh\n# x"})]),
                          reply("edited"))
        await self.prompt("edit both", autoaccept=True)
        ask = (await self.until("permission.ask", tool="edit"))["data"]
        self.assertEqual(ask["input"]["path"], "srv.sh")
        self.assertEqual(ask["reason"], pinned_reason("srv.sh", "notes"))
        self.assertEqual(ask["patterns"], [])
        self.assertTrue(ask["once_only"])  # nothing "always" could store: it is refused, the question waits
        refused = await call(self.app, "permissions_reply", {"reply": "always", "patterns": ["srv.sh"]}, ident=ask["id"])
        self.assertEqual(refused.status, 400, refused.body)
        await self.reply(ask, "once")
        await self.idle()
        self.assertEqual(self.read("notes.txt"), "two\n")
        self.assertIn("# x", self.read("srv.sh"))
        rules = (await call(self.app, "permissions", query=f"projectid={self.project['id']}")).json()
        self.assertEqual(sorted((r["tool"], r["pattern"]) for r in rules if r["layer"] == "project"
                                and r["tool"] == "edit"), [("edit", "**")])
        ask = await self.start_asks("after the edit")
        self.assertEqual(ask["input"]["changed"], ["srv.sh changed"])
        await self.reply(ask, "reject")
        await self.idle()

    async def test_an_edit_of_a_file_a_server_loads_asks_even_once_its_pin_has_drifted(self):
        """After a change outside Totem the old approval no longer matches, yet its files stay
        protected: an auto-accepted write of lib.sh still asks; the model reads the reason."""
        await self.approve_always()
        tree(self.root, {"srv.sh": "# changed by git\n" + SERVER_SCRIPT})
        self.model.script(reply(tool_calls=[("write", {"path": "lib.sh", "content": "evil\n"})]), reply("stopped"))
        await self.prompt("write it", autoaccept=True)
        start = (await self.until("permission.ask", tool="mcp-start"))["data"]
        await self.reply(start, "reject")
        write = (await self.until("permission.ask", tool="write"))["data"]
        self.assertEqual(write["reason"], pinned_reason("lib.sh", "notes"))
        await self.reply(write, "reject")
        await self.idle()
        self.assertEqual(self.read("lib.sh"), "MODE_NOTE=plain\n")
        self.assertIn("rejected", tool_results(self.model.requests[-1])[-1])

    async def test_an_edit_through_a_link_to_a_pinned_file_asks(self):
        """A write to a link that leads to a pinned file is decided on the file it reaches: it
        asks, naming that file, under auto-accept; the file is unchanged once rejected."""
        await self.approve_always()
        os.symlink("lib.sh", os.path.join(self.root, "alias.sh"))
        self.model.script(reply(tool_calls=[("write", {"path": "alias.sh", "content": "evil\n"})]), reply("no"))
        await self.prompt("write the alias", autoaccept=True)
        write = (await self.until("permission.ask", tool="write"))["data"]
        self.assertEqual(write["reason"], pinned_reason("lib.sh", "notes"))
        await self.reply(write, "reject")
        await self.idle()
        self.assertEqual(self.read("lib.sh"), "MODE_NOTE=plain\n")

    async def test_save_as_of_a_pinned_file_says_why_before_it_replaces_it(self):
        """Save as of a file an approved server runs is refused without `replace`, with a problem
        `pinned` that says why; confirmed, it is written (and the next start asks again)."""
        await self.approve_always()
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        body = {"messageid": stored[-1]["id"], "path": "srv.sh", "text": "# saved\n" + SERVER_SCRIPT}
        refused = await call(self.app, "sessions_saveas", body, ident=self.session["id"])
        self.assertEqual(refused.status, 409, refused.body)
        self.assertEqual(refused.json(), [
            {"name": "replace", "error": "srv.sh exists; confirm with replace: true to replace it"},
            {"name": "pinned", "error": "srv.sh is run by the MCP server notes, approved to start without asking; "
                                        "a change would run without a question"}])
        plain = await call(self.app, "sessions_saveas", body | {"path": "other.txt"}, ident=self.session["id"])
        self.assertEqual(plain.status, 200, plain.body)
        replaced = await call(self.app, "sessions_saveas", body | {"replace": True}, ident=self.session["id"])
        self.assertEqual(replaced.status, 200, replaced.body)
        ask = await self.start_asks("after save as")
        self.assertEqual(ask["input"]["changed"], ["srv.sh changed"])
        await self.reply(ask, "reject")
        await self.idle()

    async def test_an_approval_of_the_definition_alone_asks_once_more_and_says_why(self):
        """A rule stored before files were pinned (the definition's digest alone) no longer starts
        the server: the question says the files are asked for the first time."""
        old = pin_definition(self.root, parse_definitions({"mcpServers": {"notes": DEFINITION}}, ".mcp.json")[0][0])
        await call(self.app, "permissions_save", {"projectid": self.project["id"], "tool": "mcp-start",
                                                  "pattern": f"notes@{old.definition_digest}", "action": "allow"})
        ask = await self.start_asks()
        self.assertEqual(ask["input"]["changed"], [
            "approved before Totem pinned the files a server runs: the files below are asked for the first time"])
        await self.reply(ask, "reject")
        await self.idle()

    async def rules_of_starts(self) -> list[dict]:
        answer = await call(self.app, "permissions", query=f"projectid={self.project['id']}")
        self.assertEqual(answer.status, 200, answer.body)
        return [rule for rule in answer.json() if rule["tool"] == "mcp-start" and rule["layer"] == "project"]

    async def start_parts(self, sessionid: str) -> list[dict]:
        answer = await call(self.app, "sessions_messages", ident=sessionid)
        self.assertEqual(answer.status, 200, answer.body)
        return [part for message in answer.json()["messages"] for part in message["parts"]
                if part.get("data", {}).get("tool") == "mcp-start"]

    async def test_the_question_and_the_rules_say_what_an_approval_covers_in_words(self):
        """The start question carries what "always" covers in words, and Rules lists the stored
        rule in those words (what the approval pinned), not only as name@<sha256>."""
        ask = await self.approve_always()
        words = "the MCP server notes as `sh srv.sh` and the 2 files it runs (lib.sh, srv.sh); a change to any of them asks again"
        self.assertEqual(ask["input"]["approval"], words)
        [rule] = await self.rules_of_starts()
        self.assertEqual((rule["action"], rule["pattern"], rule["described"]), ("allow", ask["patterns"][0], words))
        # Rewritten, the project's definition is another one: the rule still says what it covered.
        tree(self.root, {"srv.sh": "echo rewritten >&2\n" + SERVER_SCRIPT})
        [rule] = await self.rules_of_starts()
        self.assertEqual(rule["described"], words)

    async def test_never_start_refuses_the_definition_in_every_session_until_it_changes(self):
        """A reject with the suggested pattern stores a project deny rule: another session does not
        ask and says which rule refused, in words; Rules lists it in words; a change asks again."""
        ask = await self.start_asks()
        subject = ask["patterns"][0]
        self.assertRegex(subject, r"^notes@[0-9a-f]{64}$")
        await self.reply(ask, "reject", patterns=[subject])
        await self.idle()
        [part] = await self.start_parts(self.session["id"])
        self.assertIn("a rule of this project refuses this definition from now on", part["data"]["error"])
        self.assertEqual(part["data"]["decision"]["saved"], [{"tool": "mcp-start", "pattern": subject, "action": "deny"}])
        [rule] = await self.rules_of_starts()
        self.assertEqual((rule["action"], rule["pattern"]), ("deny", subject))
        self.assertEqual(rule["described"], ask["input"]["approval"])

        other = await self.another_session_asks_nothing()
        [part] = await self.start_parts(other)
        self.assertEqual(part["status"], "denied")
        self.assertEqual(part["data"]["error"], f"Not started: a rule for this project refuses "
                         f"{ask['input']['approval']} (Rules: remove it to be asked again)")
        self.assertNotIn(subject.split("@")[1], part["data"]["error"])

        tree(self.root, {"srv.sh": "echo rewritten >&2\n" + SERVER_SCRIPT})
        ask = await self.start_asks("after the rewrite")  # another definition: asked again
        self.assertNotEqual(ask["patterns"], [subject])
        await self.reply(ask, "reject")
        await self.idle()
        [old] = await self.rules_of_starts()
        self.assertEqual(old["described"], "the MCP server notes in a definition the project no longer has "
                                           "(a later one asks again)")

    async def test_a_reject_stores_only_what_the_question_suggested(self):
        """A reject with a pattern the question did not suggest is refused (400) and the question
        keeps waiting; a plain reject stores nothing."""
        ask = await self.start_asks()
        for patterns in (["notes@" + "0" * 64], ["*"], [ask["patterns"][0], "other@" + "1" * 64]):
            answer = await call(self.app, "permissions_reply", {"reply": "reject", "patterns": patterns}, ident=ask["id"])
            self.assertEqual(answer.status, 400, answer.body)
            self.assertIn("a reject stores only a pattern the question suggests", answer.body.decode())
        self.assertEqual(await self.rules_of_starts(), [])
        await self.reply(ask, "reject")
        await self.idle()
        self.assertEqual(await self.rules_of_starts(), [])
