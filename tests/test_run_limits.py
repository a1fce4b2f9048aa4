"""What one run alone is given: a spending limit (`maxcost`: the setting in its layers, a
prompt's own, a schedule's; a run and its sub-agents paid from one budget) and allow rules (the
layer "run": never stored, gone with the run, never above a person's deny or the guards), with
every refusal of a bad input."""

from __future__ import annotations

import os

from tests.model_server import chunk, reply
from tests.test_ask_flow import wait_for
from tests.test_loop import LoopCase
from tests.utils import call, run_ended

NOTE = "notes.txt"


def costing(cost: float | None, **given) -> object:
    """`reply(**given)` whose usage carries the provider's own cost, as OpenRouter's does."""
    stream = reply(usage=False, **given)
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    stream.events.append(chunk(usage=usage | ({"cost": cost} if cost is not None else {}), choices=False))
    return stream


STEPS = iter(range(1_000_000))


def reading(cost: float | None) -> object:
    """A step that reads (each with other arguments: the same call three times would ask)."""
    return costing(cost, tool_calls=[("grep", {"pattern": f"line {next(STEPS)}"})])


class RunLimitCase(LoopCase):
    async def session_row(self) -> dict:
        return (await call(self.app, "sessions_read", ident=self.session["id"])).json()

    async def messages(self) -> list[dict]:
        return (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]

    async def tool_parts(self) -> list[dict]:
        return [part for message in await self.messages() for part in message["parts"] if part["kind"] == "tool"]

    async def ended(self) -> dict:
        await run_ended(self.app, self.session["id"])
        return await self.session_row()


class SpendingLimitTest(RunLimitCase):
    async def test_a_run_stops_before_the_call_after_its_cost_passes_the_limit(self):
        """0.004 a step against 0.01: after the third answer (0.012) no fourth call is made; the
        run ends in error `cost` with a sentence that says what it spent and what to do."""
        self.model.script(*(reading(0.004) for _ in range(5)), reply("never reached"))
        answer = await self.prompt(maxcost=0.01)
        self.assertEqual(answer.status, 200, answer.body)
        session = await self.ended()
        self.assertEqual(len(self.model.requests), 3)
        self.assertEqual(session["status"], "error")
        self.assertIn("past its spending limit of $0.0100", session["error"])
        self.assertIn("cost $0.0120", session["error"])
        last = (await self.messages())[-1]
        self.assertEqual((last["data"]["ended"], last["data"]["errorkind"]), ("error", "cost"))
        user = next(m for m in await self.messages() if m["role"] == "user")
        self.assertEqual(user["data"]["maxcost"], 0.01)  # the conversation shows what the run was given
        self.assertEqual([part["status"] for part in await self.tool_parts()], ["done"] * 3)

    async def test_the_setting_applies_in_its_layers_and_a_prompt_overrides_it(self):
        answer = await call(self.app, "settings_save", {"scope": "session", "sessionid": self.session["id"],
                                                        "key": "maxcost", "value": 0.005})
        self.assertEqual(answer.status, 200, answer.body)
        self.model.script(*(reading(0.004) for _ in range(3)), reply("done"))
        await self.prompt()
        session = await self.ended()
        self.assertEqual((len(self.model.requests), session["status"]), (2, "error"))
        self.model.forget_script()
        self.model.requests.clear()
        self.model.script(*(reading(0.004) for _ in range(3)), costing(0.004, text="done"))
        await self.prompt(maxcost=1)  # the prompt's own limit wins over the session's
        session = await self.ended()
        self.assertEqual((len(self.model.requests), session["status"]), (4, "idle"))

    async def test_a_run_under_its_limit_or_without_a_known_cost_runs_to_its_end(self):
        self.model.script(reading(None), reading(None), reply("done"))  # no price, no cost: nothing counts
        await self.prompt(maxcost=0)
        self.assertEqual((await self.ended())["status"], "idle")
        self.model.forget_script()
        self.model.script(reading(0.002), costing(0.002, text="done"))
        await self.prompt(maxcost=0.004)  # spent exactly the limit: not past it
        self.assertEqual((await self.ended())["status"], "idle")

    async def test_a_sub_agent_spends_from_its_parents_budget(self):
        """The parent's first answer (0.004) and the explorer's two (0.004 each) pass 0.01: the
        explorer stops, and the parent stops before its next call."""
        self.model.script(costing(0.004, tool_calls=[("task", {"agent": "explore", "description": "look",
                                                                "prompt": "Find hello"})]),
                          reading(0.004), reading(0.004), reply("the explorer's answer"), reply("never"))
        await self.prompt(maxcost=0.01)
        session = await self.ended()
        self.assertEqual(len(self.model.requests), 3)
        self.assertEqual(session["status"], "error")
        self.assertIn("spending limit", session["error"])
        task = next(part for part in await self.tool_parts() if part["data"]["tool"] == "task")
        self.assertEqual(task["status"], "error")
        self.assertIn("spending limit", task["data"]["error"])

    async def test_a_schedule_gives_its_runs_its_limit(self):
        answer = await call(self.app, "schedules_save", {
            "projectid": self.project["id"], "name": "nightly", "prompt": "Look at a.txt", "model": self.modelref,
            "kind": "interval", "interval": 60, "maxcost": 0.005, "enabled": False})
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.json()["maxcost"], 0.005)
        self.model.script(*(reading(0.004) for _ in range(3)), reply("done"))
        started = await call(self.app, "schedules_run", ident=answer.json()["id"], body={})
        self.assertEqual(started.status, 200, started.body)
        sessionid = started.json()["sessionid"]
        await run_ended(self.app, sessionid)
        session = (await call(self.app, "sessions_read", ident=sessionid)).json()
        self.assertEqual((len(self.model.requests), session["status"]), (2, "error"))
        self.assertIn("spending limit", session["error"])

    async def test_every_bad_limit_is_refused_and_starts_nothing(self):
        for value in (-0.01, "1", True, 1_000_001, [1]):
            with self.subTest(value=value):
                answer = await self.prompt(maxcost=value)
                self.assertEqual(answer.status, 400, answer.body)
                self.assertIn("maxcost", answer.body.decode())
        answer = await call(self.app, "schedules_save", {
            "projectid": self.project["id"], "name": "n", "prompt": "p", "model": self.modelref,
            "kind": "interval", "interval": 60, "maxcost": -1})
        self.assertEqual(answer.status, 400, answer.body)
        self.assertIn("maxcost", answer.body.decode())
        self.assertEqual(self.model.requests, [])
        self.assertEqual(await self.messages(), [])

    async def test_a_steer_cannot_bring_a_limit_or_rules(self):
        self.model.script(costing(0.001, tool_calls=[("bash", {"command": "sleep 30"})]), reply("done"))
        await self.prompt()
        await wait_for(self.ws, "permission.ask")
        for extra, field in (({"maxcost": 1}, "maxcost"), ({"allow": [{"tool": "bash", "pattern": "ls"}]}, "allow")):
            with self.subTest(field=field):
                answer = await self.prompt("and this", steer=True, **extra)
                self.assertEqual(answer.status, 400, answer.body)
                self.assertEqual(answer.json()[0]["name"], field, answer.body)
        await call(self.app, "sessions_abort", ident=self.session["id"], body={})
        await run_ended(self.app, self.session["id"])


class RunRulesTest(RunLimitCase):
    def bash(self, command: str) -> object:
        return reply(tool_calls=[("bash", {"command": command})])

    async def test_an_allow_rule_of_the_run_runs_without_a_question_and_is_never_stored(self):
        self.model.script(self.bash("echo run-rule"), reply("done"))
        await self.prompt("say it", allow=[{"tool": "bash", "pattern": "echo run-rule"}])
        self.assertEqual((await self.ended())["status"], "idle")
        part = (await self.tool_parts())[-1]
        self.assertEqual(part["status"], "done", part)
        self.assertIn("run-rule", part["text"])
        self.assertEqual(part["data"]["decision"]["rule"]["layer"], "run")
        self.assertIn("by the run rule bash: echo run-rule", part["data"]["decision"]["reason"])
        user = next(m for m in await self.messages() if m["role"] == "user")
        self.assertEqual(user["data"]["allow"], [{"tool": "bash", "pattern": "echo run-rule"}])
        rules = (await call(self.app, "permissions", query=f"projectid={self.project['id']}")).json()
        self.assertFalse([rule for rule in rules if rule["pattern"] == "echo run-rule"], rules)
        # The next run, without it, asks again.
        self.model.script(self.bash("echo run-rule"), reply("done"))
        await self.prompt("again")
        ask = await wait_for(self.ws, "permission.ask")
        self.assertEqual(ask["data"]["tool"], "bash")
        await call(self.app, "permissions_reply", {"reply": "reject"}, ident=ask["data"]["id"])
        await run_ended(self.app, self.session["id"])

    async def test_a_persons_deny_and_the_guards_still_hold(self):
        """An exact deny of the project beats the run's exact allow; a wildcard run rule does not
        allow an argument that leads out of the project (it asks), nor a secret file."""
        saved = await call(self.app, "permissions_save", {"tool": "bash", "pattern": "echo denied",
                                                          "action": "deny", "projectid": self.project["id"]})
        self.assertEqual(saved.status, 200, saved.body)
        self.model.script(self.bash("echo denied"), reply("done"))
        await self.prompt("x", allow=[{"tool": "bash", "pattern": "echo denied"}])
        await self.ended()
        part = (await self.tool_parts())[-1]
        self.assertEqual(part["status"], "denied", part)
        self.assertEqual(part["data"]["decision"]["rule"]["layer"], "project")
        for command in ("cat ~/.ssh/id_rsa", "cat .env", "cat ../other/a.txt"):
            with self.subTest(command=command):
                self.model.forget_script()
                self.model.script(self.bash(command), reply("done"))
                await self.prompt("x", allow=[{"tool": "bash", "pattern": "cat *"}])
                ask = await wait_for(self.ws, "permission.ask")
                self.assertEqual(ask["data"]["tool"], "bash")
                await call(self.app, "permissions_reply", {"reply": "reject"}, ident=ask["data"]["id"])
                await self.ended()

    async def test_a_sub_agent_holds_its_parents_run_rules(self):
        folder = os.path.join(self.folder("proj"), ".totem", "agents")
        os.makedirs(folder)
        with open(os.path.join(folder, "writer.md"), "w") as handle:
            handle.write("---\ndescription: writes notes\ntools: [write]\n---\nWrite notes.\n")
        self.model.script(reply(tool_calls=[("task", {"agent": "writer", "description": "note",
                                                      "prompt": "Write notes.txt"})]),
                          reply(tool_calls=[("write", {"path": NOTE, "content": "hi\n"})]),
                          reply("written"), reply("done"))
        await self.prompt("notes", allow=[{"tool": "write", "pattern": NOTE}])
        self.assertEqual((await self.ended())["status"], "idle")
        with open(os.path.join(self.folder("proj"), NOTE)) as handle:
            self.assertEqual(handle.read(), "hi\n")

    async def test_every_bad_rule_is_refused_and_starts_nothing(self):
        for allow, field in (([{"tool": "nosuch", "pattern": "x"}], "allow[0].tool"),
                             ([{"tool": "bash", "pattern": "ls; rm -rf x"}], "allow[0].pattern"),
                             ([{"tool": "bash", "pattern": "ls"}, {"tool": "sandboxed", "pattern": "ls"}],
                              "allow[1].pattern"),
                             ([{"tool": "bash"}], "allow[0].pattern"),
                             ([{"tool": "bash", "pattern": "ls", "action": "deny"}], "allow[0].action"),
                             ([{"tool": "bash", "pattern": "ls"}] * 33, "allow"),
                             ("ls", "allow")):
            with self.subTest(allow=allow):
                answer = await self.prompt(allow=allow)
                self.assertEqual(answer.status, 400, answer.body)
                self.assertIn(field, [error["name"] for error in answer.json()], answer.body)
        self.assertEqual(self.model.requests, [])
        self.assertEqual(await self.messages(), [])

    async def test_mcp_offers_neither_rules_nor_a_limit(self):
        from totem.http.mcp_route import mcp_tools
        prompt = next(tool for tool in mcp_tools() if tool.name == "Sessions_prompt")
        self.assertEqual(set(prompt.schema["properties"]), {"id", "text", "model", "mode"})
        self.assertFalse(prompt.schema["additionalProperties"])
