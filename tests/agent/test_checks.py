"""Checks after edits: a project's `.totem/checks.json` runs its commands once per step over
the files that step's write, edit and patch calls changed, through the permission gate like any
command, and the model reads what they found after the step's results; a refused, failing or
slow check never undoes the edit; a bad checks file says what is wrong. In a Total.js project the
built-in Total.js check is one of them: it runs in Totem, asks nothing, and its problems return
as a `validation` part and in the same note."""

from __future__ import annotations

import asyncio
import json
import os

from tests.model_server import reply
from tests.test_ask_flow import wait_for
from tests.test_loop import LoopCase
from tests.utils import call, run_ended
from totem.agent.checks import MAX_VALIDATED_BYTES, Check, TotalJsCheck, project_checks, read_checks
from totem.workspace.totaljs import check_files

LINT = '#!/bin/sh\nif grep -n TODO "$@"; then exit 1; fi\n'  # a stand-in linter: a TODO is a problem
TOTAL5 = json.dumps({"name": "app", "dependencies": {"total5": "^0.0.9"}})
UNBALANCED_ROUTE = "ROUTE('GET /', function($) {\n\t$.success();\n);\n"  # the `{` is never closed
ROUTE = "ROUTE('GET /', function($) {\n\t$.success();\n});\n"


def test_a_check_matches_names_or_paths_and_quotes_its_files(tmp_path):
    check = Check("lint", "*.py", "sh lint.sh {files}")
    assert check.matching(["a.py", "src/b.py", "c.txt"]) == ["a.py", "src/b.py"]
    assert Check("src", "src/*.py", "x").matching(["a.py", "src/b.py"]) == ["src/b.py"]
    assert check.command_for(["a b.py", "$(rm).py"]) == "sh lint.sh 'a b.py' '$(rm).py'"
    os.makedirs(tmp_path / ".totem")
    (tmp_path / ".totem" / "checks.json").write_text(json.dumps({"checks": [
        {"name": "lint", "files": "*.py", "command": "sh lint.sh {files}", "timeout": 30},
        {"name": "bad", "files": "*.py"}, {"name": "x", "files": "*", "command": "a\nb"},
        {"name": "y", "files": "*", "command": "c", "timeout": 0}, {"name": "z", "files": "*", "command": "c", "env": 1}]}))
    checks, problems = read_checks(str(tmp_path))
    assert checks == [Check("lint", "*.py", "sh lint.sh {files}", 30)]
    assert [problem.split(": ", 1)[1] for problem in problems] == [
        "command must be one line of text", "command must be one line of text",
        "timeout must be whole seconds from 1 to 600", "unknown key env"]
    (tmp_path / ".totem" / "checks.json").write_text("{nope")
    assert read_checks(str(tmp_path))[1][0].startswith(".totem/checks.json is not JSON")
    assert read_checks(str(tmp_path / "none")) == ([], [])


def test_the_registry_has_the_totaljs_check_only_in_a_totaljs_project(tmp_path):
    (tmp_path / ".totem").mkdir()
    (tmp_path / ".totem" / "checks.json").write_text(json.dumps({"checks": [
        {"name": "lint", "files": "*.js", "command": "eslint {files}"}]}))
    assert project_checks(str(tmp_path), {}) == ([Check("lint", "*.js", "eslint {files}")], [])  # the control
    (tmp_path / "package.json").write_text(TOTAL5)
    assert project_checks(str(tmp_path), {})[0] == [Check("lint", "*.js", "eslint {files}"), TotalJsCheck(5)]
    assert project_checks(str(tmp_path), {"forge": False})[0] == [Check("lint", "*.js", "eslint {files}")]
    assert TotalJsCheck(5).matching(["a.js", "views/index.html", "b.py", "c.JS"]) == ["a.js", "views/index.html", "c.JS"]


def test_the_totaljs_check_reads_only_inside_and_says_what_it_could_not_check(tmp_path):
    """A link that leads outside the project is not read; a file too large to check is said,
    not read whole; the file read is checked. Control: the same files with a balanced route."""
    outside = tmp_path / "outside.js"
    outside.write_text(UNBALANCED_ROUTE)
    root = tmp_path / "proj"
    root.mkdir()
    (root / "link.js").symlink_to(outside)
    (root / "big.js").write_text("x;\n" * (MAX_VALIDATED_BYTES // 3 + 1))
    (root / "api.js").write_text(UNBALANCED_ROUTE)
    found = asyncio.run(TotalJsCheck(5).run(str(root), ["link.js", "big.js", "api.js"]))
    assert [(p["rule"], p["file"]) for p in found["problems"]] == [("not-checked", "big.js"), ("unbalanced", "api.js")]
    (root / "api.js").write_text(ROUTE)
    assert asyncio.run(TotalJsCheck(5).run(str(root), ["link.js", "api.js"])) == {"problems": [], "blocking": False}


def test_the_totaljs_validator_names_the_file_and_line_of_each_problem():
    found = check_files([("controllers/api.js", UNBALANCED_ROUTE), ("ok.js", ROUTE), ("empty.js", ""),
                         ("views/index.html", "<p>{x}</p><script>\nROUTE('GET /a', 1));\n</script>"),
                         ("huge.js", None)], root=None, version=5)
    assert [(p["rule"], p.get("file"), p.get("line")) for p in found.problems] == [
        ("unbalanced", "controllers/api.js", 3), ("unbalanced", "views/index.html", 2),
        ("not-checked", "huge.js", None)]
    assert found.blocking
    assert check_files([("ok.js", ROUTE), ("page.html", "<p>{</p>")], root=None, version=5).view() == {
        "problems": [], "blocking": False}  # the control: balanced code, and an html file's text is not code


class ChecksTest(LoopCase):
    rules = {"write": "allow write **", "lint": "allow bash ./lint.sh *", "slow": "allow bash sleep *"}

    def declare(self, *checks: dict) -> None:
        root = self.folder("proj")
        os.makedirs(os.path.join(root, ".totem"), exist_ok=True)
        with open(os.path.join(root, ".totem", "checks.json"), "w") as handle:
            json.dump({"checks": list(checks)}, handle)
        with open(os.path.join(root, "lint.sh"), "w") as handle:
            handle.write(LINT)
        os.chmod(os.path.join(root, "lint.sh"), 0o755)

    def notes(self, number: int) -> list[str]:
        return [m["content"] for m in self.model.requests[number].body["messages"]
                if m["role"] == "user" and "project's checks" in str(m["content"])]

    async def parts(self) -> list[dict]:
        messages = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        return [part for message in messages for part in message["parts"]]

    async def test_what_a_check_finds_returns_to_the_model_after_the_step(self):
        self.declare({"name": "lint", "files": "*.py", "command": "./lint.sh {files}"})
        self.model.script(reply(tool_calls=[("write", {"path": "a.py", "content": "x = 1  # TODO fix\n"}),
                                            ("write", {"path": "notes.txt", "content": "TODO too\n"}),
                                            ("write", {"path": "b.py", "content": "y = 2\n"})]),
                          reply(tool_calls=[("write", {"path": "a.py", "content": "x = 1\n"})]),
                          reply("Fixed."))
        await self.prompt("write them")
        await run_ended(self.app, self.session["id"])
        [first] = self.notes(1)
        self.assertIn("- lint on a.py, b.py: found problems (exit 1)", first)
        self.assertIn("a.py:1:x = 1  # TODO fix", first)
        self.assertNotIn("notes.txt", first)  # not a file of the check
        calls = [c["id"] for m in self.model.requests[1].body["messages"] for c in m.get("tool_calls") or []]
        self.assertFalse([c for c in calls if c.startswith("check-")], calls)  # never a call of the model's
        earlier, second = self.notes(2)
        self.assertEqual(earlier, first)  # the note of a step stays the same bytes in later requests
        self.assertIn("- lint on a.py: passed", second)
        checks = [part for part in await self.parts() if part["kind"] == "tool" and part["data"].get("check")]
        self.assertEqual([(p["data"]["check"], p["status"], p["data"]["result"]["exit_code"]) for p in checks],
                         [("lint", "done", 1), ("lint", "done", 0)])
        self.assertEqual(checks[0]["data"]["decision"]["rule"]["pattern"], "./lint.sh *")

    async def test_a_check_asks_like_any_command_and_a_refusal_keeps_the_edit(self):
        self.declare({"name": "types", "files": "*.py", "command": "sh types.sh {files}"})
        self.model.script(reply(tool_calls=[("write", {"path": "a.py", "content": "x = 1\n"})]), reply("Done."))
        await self.prompt("write it")
        ask = await wait_for(self.ws, "permission.ask")
        self.assertEqual((ask["data"]["tool"], ask["data"]["input"]["command"]), ("bash", "sh types.sh a.py"))
        self.assertIn("check types", ask["data"]["input"]["description"])
        await call(self.app, "permissions_reply", {"reply": "reject"}, ident=ask["data"]["id"])
        await run_ended(self.app, self.session["id"])
        [note] = self.notes(1)
        self.assertIn("- types on a.py: not run:", note)
        with open(os.path.join(self.folder("proj"), "a.py")) as handle:
            self.assertEqual(handle.read(), "x = 1\n")

    async def test_a_slow_check_stops_at_its_time_limit_and_the_run_goes_on(self):
        self.declare({"name": "slow", "files": "*.py", "command": "sleep 30", "timeout": 1})
        self.model.script(reply(tool_calls=[("write", {"path": "a.py", "content": "x = 1\n"})]), reply("Done."))
        await self.prompt("write it")
        await run_ended(self.app, self.session["id"], timeout_ms=60_000)
        [note] = self.notes(1)
        self.assertIn("- slow on a.py: stopped at its time limit", note)

    async def test_no_check_for_other_files_and_a_bad_file_says_why(self):
        root = self.folder("proj")
        os.makedirs(os.path.join(root, ".totem"), exist_ok=True)
        with open(os.path.join(root, ".totem", "checks.json"), "w") as handle:
            handle.write('{"checks": [{"name": "lint", "files": "*.py"}]}')
        self.model.script(reply(tool_calls=[("write", {"path": "a.py", "content": "x = 1\n"})]), reply("Done."))
        await self.prompt("write it")
        await run_ended(self.app, self.session["id"])
        self.assertEqual(self.notes(1), [])
        validations = [part for part in await self.parts() if part["kind"] == "validation"]
        self.assertEqual(validations[0]["data"]["problems"], [
            {"rule": "checks-file", "severity": "warning",
             "message": ".totem/checks.json checks[0]: command must be one line of text"}])
        self.assertFalse(validations[0]["data"]["blocking"])

    async def test_the_totaljs_check_reports_an_unbalanced_route_through_the_checks(self):
        """In a Total.js project the step's edit of a .js file is checked without a question;
        the problem is a validation part marked as the check's and a line of the note; the next
        edit's note says the check passed."""
        with open(os.path.join(self.folder("proj"), "package.json"), "w") as handle:
            handle.write(TOTAL5)
        self.model.script(reply(tool_calls=[("write", {"path": "controllers/api.js", "content": UNBALANCED_ROUTE}),
                                            ("write", {"path": "notes.txt", "content": "ROUTE((\n"})]),
                          reply(tool_calls=[("write", {"path": "controllers/api.js", "content": ROUTE})]),
                          reply("Fixed."))
        await self.prompt("add the route")
        await run_ended(self.app, self.session["id"])
        [first] = self.notes(1)
        self.assertIn("- totaljs on controllers/api.js: found 1 problem", first)
        self.assertIn("controllers/api.js:3: error: `)` on line 3 does not match the `{` opened on line 1", first)
        self.assertNotIn("notes.txt", first)
        [_, second] = self.notes(2)
        self.assertIn("- totaljs on controllers/api.js: passed", second)
        validations = [part for part in await self.parts() if part["kind"] == "validation"]
        self.assertEqual([(v["data"]["kind"], v["data"]["check"], v["data"]["files"], v["data"]["blocking"])
                          for v in validations], [("check", "totaljs", ["controllers/api.js"], True),
                                                  ("check", "totaljs", ["controllers/api.js"], False)])
        self.assertEqual(validations[0]["data"]["problems"][0]["file"], "controllers/api.js")
        with open(os.path.join(self.folder("proj"), "controllers", "api.js")) as handle:
            self.assertEqual(handle.read(), ROUTE)  # never undone nor blocked

    async def test_no_totaljs_check_outside_a_totaljs_project(self):
        """The control: the same edit in a project that is not a Total.js one is not checked."""
        self.model.script(reply(tool_calls=[("write", {"path": "controllers/api.js", "content": UNBALANCED_ROUTE})]),
                          reply("Done."))
        await self.prompt("add the route")
        await run_ended(self.app, self.session["id"])
        self.assertEqual(self.notes(1), [])
        self.assertEqual([part for part in await self.parts() if part["kind"] == "validation"], [])
