"""Permission questions, the ask, todo and skill tools, and the rules API, end to end."""

import asyncio
import json
import os

from tests.model_server import reply
from tests.test_loop import LoopCase
from tests.utils import MS, call, next_event, open_ws


async def wait_for(ws, kind):
    while True:
        event = await next_event(ws)
        if event["type"] == kind:
            return event


def tool_results(request):
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


class AskFlowTest(LoopCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        with open(os.path.join(self.folder("proj"), ".env"), "w") as handle:
            handle.write("DATABASE_PASSWORD=hunter2\n")

    async def test_permission_once_runs_and_asks_again(self):
        """"once" runs the call, and the same call later asks again."""
        self.model.script(reply(tool_calls=[("read", {"path": ".env"})]),
                          reply(tool_calls=[("read", {"path": ".env"})]), reply("done"))
        await self.prompt()
        ask = await wait_for(self.ws, "permission.ask")
        listed = (await call(self.app, "sessions", query=f"projectid={self.project['id']}")).json()
        self.assertEqual([s["waiting"] for s in listed["sessions"]], [1])
        self.assertEqual(ask["data"]["tool"], "read")
        self.assertEqual(ask["data"]["input"], {"path": ".env"})
        self.assertIn(".env", ask["data"]["patterns"])
        answer = await call(self.app, "permissions_reply", {"reply": "once"}, ident=ask["data"]["id"])
        self.assertEqual(answer.status, 200)
        replied = await wait_for(self.ws, "permission.replied")
        self.assertEqual(replied["data"], {"id": ask["data"]["id"], "reply": "once"})
        second = await wait_for(self.ws, "permission.ask")
        await call(self.app, "permissions_reply", {"reply": "once"}, ident=second["data"]["id"])
        await self.events_until("idle")
        self.assertIn("hunter2", tool_results(self.model.requests[1])[0])
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        decision = stored[1]["parts"][0]["data"]["decision"]
        self.assertEqual((decision["by"], decision["reply"], decision["action"]), ("person", "once", "allow"))
        self.assertIn("answered", decision)

    async def test_permission_always_stores_rule(self):
        """"always" stores a project rule, and the next identical call runs without asking."""
        self.model.script(reply(tool_calls=[("read", {"path": ".env"})]), reply("ok"))
        await self.prompt()
        ask = await wait_for(self.ws, "permission.ask")
        await call(self.app, "permissions_reply", {"reply": "always", "pattern": ".env"}, ident=ask["data"]["id"])
        await self.events_until("idle")
        rules = (await call(self.app, "permissions", query=f"projectid={self.project['id']}")).json()
        mine = [r for r in rules if r["layer"] == "project"]
        self.assertEqual([(r["tool"], r["pattern"], r["action"]) for r in mine], [("read", ".env", "allow")])
        self.model.script(reply(tool_calls=[("read", {"path": ".env"})]), reply("ok"))
        await self.prompt("again")
        events = await self.events_until("idle")
        self.assertNotIn("permission.ask", [e["type"] for e in events])
        self.assertIn("hunter2", tool_results(self.model.requests[-1])[0])

    async def test_permission_reject_denies(self):
        """"reject" stores the call as denied and tells the model."""
        self.model.script(reply(tool_calls=[("read", {"path": ".env"})]), reply("ok"))
        await self.prompt()
        ask = await wait_for(self.ws, "permission.ask")
        await call(self.app, "permissions_reply", {"reply": "reject"}, ident=ask["data"]["id"])
        await self.events_until("idle")
        result = tool_results(self.model.requests[1])[0]
        self.assertIn("Denied", result)
        self.assertNotIn("hunter2", result)
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        self.assertEqual(stored[1]["parts"][0]["status"], "denied")

    async def test_question_resent_after_reconnect(self):
        """A client that reconnects while a question waits gets it again and can answer it."""
        self.model.script(reply(tool_calls=[("read", {"path": ".env"})]), reply("ok"))
        await self.prompt()
        ask = await wait_for(self.ws, "permission.ask")
        await self.ws.close()
        async with await open_ws(self.app) as again:
            await again.send(json.dumps({"type": "subscribe", "sessionid": self.session["id"]}))
            resent = await wait_for(again, "permission.ask")
            self.assertEqual(resent["data"]["id"], ask["data"]["id"])
            await call(self.app, "permissions_reply", {"reply": "once"}, ident=ask["data"]["id"])
            self.assertEqual((await wait_for(again, "permission.replied"))["data"]["reply"], "once")

    async def test_abort_while_question_waits(self):
        """Aborting while a question waits rejects it and ends the run as aborted."""
        self.model.script(reply(tool_calls=[("read", {"path": ".env"})]))
        await self.prompt()
        ask = await wait_for(self.ws, "permission.ask")
        await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")
        replied = await wait_for(self.ws, "permission.replied")
        self.assertEqual(replied["data"], {"id": ask["data"]["id"], "reply": "reject"})
        await self.events_until("aborted")
        answer = await call(self.app, "permissions_reply", {"reply": "once"}, ident=ask["data"]["id"])
        self.assertEqual(answer.status, 404)
        self.assertEqual(self.app.runs.questions.waiting(self.session["id"]), [])

    async def test_session_removed_while_question_waits(self):
        """Removing a session while a question waits rejects it and forgets it."""
        self.model.script(reply(tool_calls=[("read", {"path": ".env"})]))
        await self.prompt()
        ask = await wait_for(self.ws, "permission.ask")
        answer = await call(self.app, "sessions_remove", ident=self.session["id"], method="POST")
        self.assertEqual(answer.status, 200)
        replied = await wait_for(self.ws, "permission.replied")
        self.assertEqual(replied["data"], {"id": ask["data"]["id"], "reply": "reject"})
        self.assertEqual(self.app.runs.questions.waiting(self.session["id"]), [])
        self.assertFalse(self.app.runs.is_running(self.session["id"]))

    async def test_other_client_sees_reply(self):
        """permission.replied reaches every subscribed client."""
        async with await open_ws(self.app) as other:
            await other.send(json.dumps({"type": "subscribe", "sessionid": self.session["id"]}))
            for _ in range(200):
                if self.app.hub.subscriber_count(self.session["id"]) == 2:
                    break
                await asyncio.sleep(5 * MS)
            self.model.script(reply(tool_calls=[("read", {"path": ".env"})]), reply("ok"))
            await self.prompt()
            ask = await wait_for(other, "permission.ask")
            await call(self.app, "permissions_reply", {"reply": "once"}, ident=ask["data"]["id"])
            self.assertEqual((await wait_for(other, "permission.replied"))["data"]["reply"], "once")
            await self.events_until("idle")

    async def test_reply_bad_input(self):
        """A reply must be once, always or reject, for a question that waits."""
        answer = await call(self.app, "permissions_reply", {"reply": "once"}, ident="nope")
        self.assertEqual(answer.status, 404)
        for body in ({}, {"reply": "sure"}, {"reply": "once", "extra": 1}):
            answer = await call(self.app, "permissions_reply", body, ident="nope")
            self.assertEqual(answer.status, 400, body)

    async def test_ask_tool_question(self):
        """The ask tool puts a question to the person and gives the model the answer."""
        self.model.script(reply(tool_calls=[("ask", {"question": "Tabs or spaces?", "options": ["tabs", "spaces"]})]),
                          reply("ok"))
        await self.prompt()
        question = await wait_for(self.ws, "question.ask")
        self.assertEqual(question["data"]["text"], "Tabs or spaces?")
        self.assertEqual(question["data"]["options"], ["tabs", "spaces"])
        answer = await call(self.app, "questions_reply", {"answer": "tabs"}, ident=question["data"]["id"])
        self.assertEqual(answer.status, 200)
        self.assertEqual((await wait_for(self.ws, "question.replied"))["data"]["id"], question["data"]["id"])
        await self.events_until("idle")
        self.assertIn("tabs", tool_results(self.model.requests[1])[0])
        missing = await call(self.app, "questions_reply", {"answer": "x"}, ident=question["data"]["id"])
        self.assertEqual(missing.status, 404)

    async def test_todo_tool_updates_list(self):
        """The todo tool replaces the task list, announces it and Sessions|todos returns it."""
        items = [{"text": "read code", "status": "done"}, {"text": "fix bug", "status": "in_progress"}]
        self.model.script(reply(tool_calls=[("todo", {"items": items})]), reply("ok"))
        await self.prompt()
        event = await wait_for(self.ws, "todo.updated")
        self.assertEqual(event["data"]["items"], items)
        await self.events_until("idle")
        todos = (await call(self.app, "sessions_todos", ident=self.session["id"])).json()
        self.assertEqual(todos, {"items": items})
        self.assertEqual((await call(self.app, "sessions_todos", ident="nope")).status, 404)

    async def test_skill_tool_loads_file(self):
        """The skill tool reads .totem/skills/NAME/SKILL.md and refuses names that escape."""
        folder = os.path.join(self.folder("proj"), ".totem", "skills", "release")
        os.makedirs(folder)
        with open(os.path.join(folder, "SKILL.md"), "w") as handle:
            handle.write("Bump the version, tag, push.")
        self.model.script(reply(tool_calls=[("skill", {"name": "release"}), ("skill", {"name": "../../x"}),
                                            ("skill", {"name": "missing"})]), reply("ok"))
        await self.prompt()
        await self.events_until("idle")
        results = tool_results(self.model.requests[1])
        self.assertIn("Bump the version", results[0])
        self.assertIn("skill name", results[1])
        self.assertIn("skills here: release", results[2])


class RulesApiTest(LoopCase):
    async def test_list_marks_layers(self):
        """Permissions|list shows the project's, the global and the default rules, marked."""
        await call(self.app, "permissions_save", {"projectid": self.project["id"], "tool": "bash",
                                                  "pattern": "git log *", "action": "allow"})
        await call(self.app, "permissions_save", {"scope": "global", "tool": "bash",
                                                  "pattern": "rm *", "action": "deny"})
        rules = (await call(self.app, "permissions", query=f"projectid={self.project['id']}")).json()
        layers = {(r["layer"], r["tool"], r["pattern"], r["action"]) for r in rules}
        self.assertIn(("project", "bash", "git log *", "allow"), layers)
        self.assertIn(("global", "bash", "rm *", "deny"), layers)
        self.assertIn(("default", "write", "**", "ask"), layers)
        self.assertTrue(any(r["layer"] == "default" and r["tool"] == "bash" and r["action"] == "allow" for r in rules))

    async def test_save_and_remove(self):
        """A saved rule can be removed; defaults cannot."""
        saved = (await call(self.app, "permissions_save", {"projectid": self.project["id"], "tool": "read",
                                                           "pattern": "secrets/**", "action": "deny"})).json()
        self.assertEqual(saved["layer"], "project")
        answer = await call(self.app, "permissions_remove", ident=saved["id"], method="POST")
        self.assertEqual(answer.json(), {"success": True, "value": saved["id"]})
        self.assertEqual((await call(self.app, "permissions_remove", ident=saved["id"], method="POST")).status, 404)

    async def test_save_bad_input(self):
        """Bad rules answer 400 and store nothing."""
        cases = [
            {"projectid": self.project["id"], "tool": "bash", "pattern": "x", "action": "maybe"},
            {"projectid": self.project["id"], "tool": "bash", "pattern": "", "action": "allow"},
            {"tool": "bash", "pattern": "x", "action": "allow"},
            {"scope": "global", "projectid": self.project["id"], "tool": "bash", "pattern": "x", "action": "allow"},
            {"projectid": self.project["id"], "tool": "bash", "action": "allow"},
            {"projectid": self.project["id"], "tool": "bash", "pattern": "x\x00", "action": "allow"},
        ]
        for body in cases:
            answer = await call(self.app, "permissions_save", body)
            self.assertEqual(answer.status, 400, body)
        answer = await call(self.app, "permissions_save", {"projectid": "nope", "tool": "bash", "pattern": "x",
                                                           "action": "allow"})
        self.assertEqual(answer.status, 404)
        rules = (await call(self.app, "permissions", query=f"projectid={self.project['id']}")).json()
        self.assertFalse([r for r in rules if r["layer"] in ("project",) or (r["layer"] == "global" and r["removable"])])

    async def test_rules_removed_with_project(self):
        """Removing a project removes its rules."""
        await call(self.app, "permissions_save", {"projectid": self.project["id"], "tool": "read",
                                                  "pattern": "a", "action": "deny"})
        await call(self.app, "projects_remove", ident=self.project["id"], method="POST")
        self.assertEqual(await self.app.store.count_rows("rules", "projectid", self.project["id"]), 0)


class ConfigRulesTest(LoopCase):
    rules = {"no-env": "deny read .env", "readme": "allow bash cat README.md"}  # config.ini's [rules]

    async def test_config_rules_decide(self):
        """A deny rule of config.ini denies without asking; an allow rule runs without asking."""
        with open(os.path.join(self.folder("proj"), ".env"), "w") as handle:
            handle.write("X=1\n")
        with open(os.path.join(self.folder("proj"), "README.md"), "w") as handle:
            handle.write("read me\n")
        self.model.script(reply(tool_calls=[("read", {"path": ".env"}), ("bash", {"command": "cat README.md"})]),
                          reply("ok"))
        await self.prompt()
        events = await self.events_until("idle")
        self.assertNotIn("permission.ask", [e["type"] for e in events])
        results = tool_results(self.model.requests[1])
        self.assertIn("Denied", results[0])
        self.assertIn("read me", results[1])
        rules = (await call(self.app, "permissions", query=f"projectid={self.project['id']}")).json()
        mine = [r for r in rules if r.get("source") == "config.ini"]
        self.assertEqual({(r["tool"], r["pattern"], r["action"]) for r in mine},
                         {("read", ".env", "deny"), ("bash", "cat README.md", "allow")})
