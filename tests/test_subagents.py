"""Sub-agents through the task tool: a child session with the agent's narrowed tools, through the
same permission gate as its parent (Plan mode, scheduled runs, questions shown in the parent's
view), its answer returned as the tool's result, aborted with its parent, removed with it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

from tests.model_server import Stall, reply
from tests.test_ask_flow import tool_results, wait_for
from tests.test_loop import LoopCase
from tests.utils import MS, call, run_ended
from totem.agent.turns import Prompt
from totem.security.permissions import SCHEDULED_REASON


def task(agent: str, prompt: str, description: str = "a piece of work") -> tuple[str, dict]:
    return ("task", {"agent": agent, "description": description, "prompt": prompt})


def declared(request) -> list[str]:
    return [tool["function"]["name"] for tool in request.body.get("tools") or []]


class SubAgentCase(LoopCase):
    async def asyncTearDown(self):
        # Read what is left before the server stops: it would wait for a client holding unread events.
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            while True:
                await asyncio.wait_for(self.ws.recv(), 0.05)
        await super().asyncTearDown()

    def agent_file(self, name: str, text: str) -> None:
        folder = os.path.join(self.folder("proj"), ".totem", "agents")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{name}.md"), "w") as handle:
            handle.write(text)

    async def children(self) -> list[dict]:
        listed = (await call(self.app, "sessions", query=f"projectid={self.project['id']}")).json()["sessions"]
        return [s for s in listed if s.get("parent") == self.session["id"]]


class SubAgentTest(SubAgentCase):
    async def test_explore_runs_as_a_child_session_and_its_answer_returns(self):
        """The explorer gets only read, glob and grep, its own prompt (not the parent's
        conversation) and Plan mode; its final answer is the task's result."""
        self.model.script(reply(tool_calls=[task("explore", "Find where hello is written")]),
                          reply(tool_calls=[("grep", {"pattern": "hello"})]),
                          reply("hello is in a.txt, line 1"),
                          reply("The explorer found it in a.txt."))
        await self.prompt("Where is hello?")
        await self.events_until("idle")
        await run_ended(self.app, self.session["id"])
        child_request = self.model.requests[1].body
        self.assertEqual(sorted(declared(self.model.requests[1])), ["glob", "grep", "read"])
        users = [m["content"] for m in child_request["messages"] if m["role"] == "user"]
        self.assertEqual(len(users), 1)
        self.assertIn("Find where hello is written", json.dumps(users))
        self.assertNotIn("Where is hello?", json.dumps(child_request))
        self.assertIn("sub-agent that explores", child_request["messages"][0]["content"])
        self.assertIn("hello is in a.txt, line 1", tool_results(self.model.requests[3])[0])
        children = await self.children()
        self.assertEqual([(c["name"], c["mode"], c["status"]) for c in children],
                         [("a piece of work", "plan", "idle")])
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        task_part = stored[1]["parts"][0]
        self.assertEqual((task_part["status"], task_part["data"]["sessionid"]), ("done", children[0]["id"]))

    async def test_a_project_agent_narrows_tools_and_its_questions_reach_the_parent(self):
        """A project agent's tools (minus task) are all the child gets; its write asks in the
        parent's view, and the answer there lets it go on."""
        self.agent_file("writer", "---\ndescription: writes notes\ntools: [write, task]\n---\nWrite short notes.\n")
        self.model.script(reply(tool_calls=[task("writer", "Write notes.txt saying hi")]),
                          reply(tool_calls=[("write", {"path": "notes.txt", "content": "hi\n"})]),
                          reply("written"), reply("done"))
        await self.prompt("notes please")
        ask = await wait_for(self.ws, "permission.ask")
        self.assertEqual((ask["sessionid"], ask["data"]["tool"]), (self.session["id"], "write"))
        listed = (await call(self.app, "sessions", query=f"projectid={self.project['id']}")).json()["sessions"]
        self.assertEqual({s["id"]: s["waiting"] for s in listed}[self.session["id"]], 1)
        await call(self.app, "permissions_reply", {"reply": "once"}, ident=ask["data"]["id"])
        await run_ended(self.app, self.session["id"])
        self.assertEqual(declared(self.model.requests[1]), ["write"])
        self.assertIn("Write short notes.", self.model.requests[1].body["messages"][0]["content"])
        with open(os.path.join(self.folder("proj"), "notes.txt")) as handle:
            self.assertEqual(handle.read(), "hi\n")
        self.assertIn("written", tool_results(self.model.requests[3])[0])

    async def test_plan_mode_and_scheduled_runs_apply_inside_the_sub_agent(self):
        """A Plan parent's sub-agent is denied writes in code; a scheduled parent's sub-agent
        is refused what would ask, at once."""
        self.agent_file("writer", "---\ntools: [write]\n---\nWrite.\n")
        self.model.script(reply(tool_calls=[task("writer", "Write x.txt")]),
                          reply(tool_calls=[("write", {"path": "x.txt", "content": "x"})]),
                          reply("could not"), reply("ok"))
        await self.prompt("plan it", mode="plan")
        await self.events_until("idle")
        await run_ended(self.app, self.session["id"])
        self.assertIn("plan mode does not allow write", tool_results(self.model.requests[2])[0])
        self.model.script(reply(tool_calls=[task("writer", "Write y.txt")]),
                          reply(tool_calls=[("write", {"path": "y.txt", "content": "y"})]),
                          reply("could not"), reply("ok"))
        await self.app.runs.send(dict(self.session), self.project,
                                 Prompt(text="nightly", model=self.modelref, scheduled=True))
        await asyncio.sleep(50 * MS)
        await run_ended(self.app, self.session["id"])
        self.assertIn(SCHEDULED_REASON, tool_results(self.model.requests[6])[0])
        self.assertFalse(os.path.exists(os.path.join(self.folder("proj"), "y.txt")))

    async def test_aborting_the_parent_ends_the_sub_agent(self):
        """An abort of the parent while its sub-agent streams aborts the child too."""
        self.model.script(reply(tool_calls=[task("explore", "Look around")]), Stall())
        await self.prompt("look")
        for _ in range(400):
            if len(self.model.requests) >= 2:
                break
            await asyncio.sleep(5 * MS)
        child = (await self.children())[0]
        answer = await call(self.app, "sessions_abort", {}, ident=self.session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        await run_ended(self.app, child["id"])
        states = {s["id"]: s["status"] for s in (await call(
            self.app, "sessions", query=f"projectid={self.project['id']}")).json()["sessions"]}
        self.assertEqual((states[self.session["id"]], states[child["id"]]), ("aborted", "aborted"))

    async def test_bounds_unknown_agents_and_removal_with_the_parent(self):
        """A sub-agent cannot start a task (it is not among its tools); an unknown agent is an
        error naming the agents; removing the parent removes its sub-agents."""
        self.model.script(reply(tool_calls=[task("nobody", "x")]),
                          reply(tool_calls=[task("explore", "Look")]),
                          reply(tool_calls=[task("explore", "deeper")]), reply("no deeper"),
                          reply("done"))
        await self.prompt("go")
        await self.events_until("idle")
        await run_ended(self.app, self.session["id"])
        self.assertIn("no agent named nobody; the agents are: explore", tool_results(self.model.requests[1])[0])
        self.assertIn("may use only glob, grep, read", tool_results(self.model.requests[3])[0])
        children = await self.children()
        self.assertEqual(len(children), 1)
        await call(self.app, "sessions_remove", {}, ident=self.session["id"])
        listed = (await call(self.app, "sessions", query=f"projectid={self.project['id']}")).json()["sessions"]
        self.assertEqual(listed, [])
