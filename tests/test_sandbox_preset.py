"""The preset "commands inside the sandbox" (`allow sandboxed *`): a command that asks only for
want of a rule runs without a question where the wall holds (bubblewrap, every protection, the
network off); never where the network is on or a protection is missing, never past a rule of
the person that asks or denies, never for a command asked to run outside the sandbox; the pure
decision as a table, then end to end through the real server and the scripted model."""

from __future__ import annotations

import json
import os

from tests.model_server import reply
from tests.test_sandbox import NEED_BWRAP, QuestionCase
from tests.utils import call
from totem.agent.gate import walled
from totem.security.permissions import COMMAND, SANDBOXED_TOOL, Call, Rule, ToolKind, decide, rule_problems
from totem.tools import tool_kinds

BASH = ToolKind(COMMAND, changes=True)
PRESET = Rule(SANDBOXED_TOOL, "*", "allow", "global", "r1")


def decision(line: str, rules=(PRESET,), **call) -> str:
    return decide(Call("bash", (line,), BASH, **({"sandboxed": True} | call)), list(rules)).action


def test_the_preset_allows_what_would_ask_inside_the_wall():
    """Inside the wall the preset allows a plain command, a pipeline and a line Totem cannot
    fully read (nothing it runs can reach past the wall); the decision names the rule."""
    for line in ("npm test", "rm -rf build && make", "cat $(ls) | wc -l", "python - <<EOF\nprint(1)\nEOF"):
        assert decision(line) == "allow", line
    made = decide(Call("bash", ("npm test",), BASH, sandboxed=True), [PRESET])
    assert made.rule == PRESET and "inside the sandbox with the network off" in made.reason


def test_the_preset_never_applies_outside_the_wall():
    """The controls: not confined offline, no preset, outside_sandbox, Plan mode, a scheduled run."""
    assert decision("npm test", sandboxed=False) == "ask"
    assert decision("npm test", rules=()) == "ask"
    assert decision("npm test", outside_sandbox=True) == "ask"
    assert decision("npm test", mode="plan") == "deny"
    assert decision("npm test", rules=(Rule(SANDBOXED_TOOL, "*", "ask", "global"),)) == "ask"
    assert decision("npm test", sandboxed=False, scheduled=True) == "deny"


def test_a_rule_of_the_person_still_asks_or_denies():
    """An ask or deny rule of the person that matches one simple command of the line wins."""
    asks = Rule("bash", "git push *", "ask", "project", "r2")
    denies = Rule("bash", "rm *", "deny", "global", "r3")
    every = Rule("*", "curl *", "ask", "global", "r4")
    rules = (PRESET, asks, denies, every)
    assert decision("git push origin main", rules) == "ask"
    assert decision("make && git push --force origin", rules) == "ask"
    assert decision("rm -rf /", rules) == "deny"
    assert decision("curl x", rules) == "ask"
    assert decision("make test", rules) == "allow"


def test_the_preset_rule_has_one_form():
    """Only `allow sandboxed *` is a sandboxed rule; any other pattern or action is refused."""
    kinds = tool_kinds()
    assert rule_problems(SANDBOXED_TOOL, "*", "allow", kinds) == []
    for pattern, action in (("npm *", "allow"), ("*", "ask"), ("*", "deny"), ("", "allow")):
        assert rule_problems(SANDBOXED_TOOL, pattern, action, kinds), (pattern, action)


def test_the_wall_needs_bubblewrap_every_protection_and_no_network():
    whole = {"confined": True, "network": False, "missing": {}, "layers": ["bubblewrap", "landlock 7"]}
    assert walled(whole)
    assert not walled(whole | {"network": True})
    assert not walled(whole | {"missing": {"processlimit": "no cgroup"}})
    assert not walled(whole | {"layers": ["landlock 7"]})
    assert not walled({"confined": False, "why": "sandbox = off"})
    assert not walled(None)


@NEED_BWRAP
class PresetTest(QuestionCase):
    async def network(self, on: bool) -> None:
        answer = await call(self.app, "settings_save", {"scope": "session", "key": "network", "value": on,
                                                        "projectid": self.project["id"],
                                                        "sessionid": self.session["id"]})
        self.assertEqual(answer.status, 200, answer.body)

    async def preset(self) -> None:
        answer = await call(self.app, "permissions_save", {"scope": "project", "projectid": self.project["id"],
                                                           "tool": SANDBOXED_TOOL, "pattern": "*", "action": "allow"})
        self.assertEqual(answer.status, 200, answer.body)

    async def test_with_the_network_off_a_command_runs_without_a_question(self):
        await self.preset()
        await self.network(False)
        self.model.script(reply(tool_calls=[("bash", {"command": "echo made > made.txt && cat made.txt"})]),
                          reply("ok"))
        await self.prompt()
        part = await self.tool_part()
        self.assertEqual(part["status"], "done")
        self.assertEqual(part["data"]["decision"]["by"], "rule")
        self.assertEqual(part["data"]["decision"]["rule"]["tool"], SANDBOXED_TOOL)
        self.assertIn("made", part["data"]["output"])
        self.assertTrue(os.path.exists(os.path.join(self.project["path"], "made.txt")))

    async def test_with_the_network_on_the_same_command_asks(self):
        """The control: the same preset with the network on asks."""
        await self.preset()
        await self.network(True)
        self.model.script(reply(tool_calls=[("bash", {"command": "echo made > made.txt"})]), reply("ok"))
        await self.prompt()
        ask = await self.until("permission.ask")
        self.assertIs(ask["reach"]["network"], True)
        await call(self.app, "permissions_reply", {"reply": "reject"}, ident=ask["id"])
        part = await self.tool_part()
        self.assertEqual(part["status"], "denied")
        self.assertFalse(os.path.exists(os.path.join(self.project["path"], "made.txt")))

    async def test_outside_the_sandbox_still_asks_under_the_preset(self):
        await self.preset()
        await self.network(False)
        self.model.script(reply(tool_calls=[("bash", {"command": "echo x", "outside_sandbox": True})]), reply("ok"))
        await self.prompt()
        ask = await self.until("permission.ask")
        self.assertTrue(ask["once_only"])
        await call(self.app, "permissions_reply", {"reply": "reject"}, ident=ask["id"])
        part = await self.tool_part()
        self.assertEqual(part["status"], "denied", json.dumps(part["data"]["decision"]))
