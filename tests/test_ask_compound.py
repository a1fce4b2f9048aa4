"""The question of a compound command line, end to end: it lists every simple command that needs
an answer with its patterns, shows the folder, the model's description and hidden characters,
and "always" stores a rule for each chosen pattern, validated under the tool that asked."""

import os

from tests.model_server import reply
from tests.test_ask_flow import tool_results, wait_for
from tests.test_loop import LoopCase
from tests.utils import call


def bash_call(command: str, **extra):
    return ("bash", {"command": command, **extra})


class CompoundAskTest(LoopCase):
    async def project_rules(self):
        rules = (await call(self.app, "permissions", query=f"projectid={self.project['id']}")).json()
        return [(r["tool"], r["pattern"], r["action"]) for r in rules if r["layer"] == "project"]

    async def test_question_lists_each_command_that_asks(self):
        """Only the commands that ask are listed (git status is already allowed), each with its
        patterns; the question carries the reason, the folder and the description."""
        self.model.script(reply(tool_calls=[bash_call("git status && touch made && echo hi > /dev/null",
                                                      description="Make a file")]), reply("ok"))
        await self.prompt()
        ask = (await wait_for(self.ws, "permission.ask"))["data"]
        self.assertEqual([item["command"] for item in ask["commands"]], ["touch made", "echo hi"])
        self.assertEqual(ask["commands"][0]["patterns"], ["touch made", "touch made *"])
        self.assertEqual(ask["commands"][1]["patterns"], ["echo hi", "echo hi *"])
        self.assertEqual(ask["patterns"], ["touch made", "touch made *", "echo hi", "echo hi *"])
        self.assertEqual(ask["folder"], os.path.realpath(self.folder("proj")))
        self.assertEqual(ask["reason"], "approval required by the default rule bash: *")
        self.assertEqual(ask["input"]["description"], "Make a file")
        await call(self.app, "permissions_reply", {"reply": "reject"}, ident=ask["id"])
        await self.events_until("idle")
        self.assertFalse(os.path.exists(os.path.join(self.folder("proj"), "made")))

    async def test_always_stores_one_rule_per_command_and_the_line_then_runs(self):
        """"always" with one pattern per command stores each; the same line later runs unasked."""
        line = "touch made && echo hi"
        self.model.script(reply(tool_calls=[bash_call(line)]), reply("ok"))
        await self.prompt()
        ask = (await wait_for(self.ws, "permission.ask"))["data"]
        answer = await call(self.app, "permissions_reply",
                            {"reply": "always", "patterns": ["touch made", "echo *"]}, ident=ask["id"])
        self.assertEqual(answer.status, 200)
        await self.events_until("idle")
        self.assertEqual(await self.project_rules(),
                         [("bash", "touch made", "allow"), ("bash", "echo *", "allow")])
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        saved = stored[1]["parts"][0]["data"]["decision"]["saved"]
        self.assertEqual([item["pattern"] for item in saved], ["touch made", "echo *"])
        os.remove(os.path.join(self.folder("proj"), "made"))
        self.model.script(reply(tool_calls=[bash_call(line)]), reply("ok"))
        await self.prompt("again")
        events = await self.events_until("idle")
        self.assertNotIn("permission.ask", [e["type"] for e in events])
        self.assertTrue(os.path.exists(os.path.join(self.folder("proj"), "made")))
        self.assertIn("hi", tool_results(self.model.requests[-1])[0])

    async def test_always_without_patterns_takes_the_first_suggestion_of_each(self):
        """"always" alone stores the narrowest suggestion of every command that asked."""
        self.model.script(reply(tool_calls=[bash_call("touch a; touch b")]), reply("ok"))
        await self.prompt()
        ask = (await wait_for(self.ws, "permission.ask"))["data"]
        await call(self.app, "permissions_reply", {"reply": "always"}, ident=ask["id"])
        await self.events_until("idle")
        self.assertEqual(await self.project_rules(),
                         [("bash", "touch a", "allow"), ("bash", "touch b", "allow")])

    async def test_invalid_always_pattern_is_400_and_the_question_waits(self):
        """A pattern that is no valid allow rule of the asking tool is refused with the reason;
        nothing is stored, nothing runs, and the question still waits for an answer."""
        self.model.script(reply(tool_calls=[bash_call("touch made")]), reply("ok"))
        await self.prompt()
        ask = (await wait_for(self.ws, "permission.ask"))["data"]
        for body, field in (({"reply": "always", "patterns": ["sudo *"]}, "patterns"),
                            ({"reply": "always", "patterns": ["touch made", "touch x; rm y"]}, "patterns"),
                            ({"reply": "always", "pattern": "touch\x01made"}, "pattern"),
                            ({"reply": "always", "patterns": []}, "patterns"),
                            ({"reply": "always", "patterns": "touch made"}, "patterns"),
                            ({"reply": "always", "patterns": [""]}, "patterns")):
            answer = await call(self.app, "permissions_reply", body, ident=ask["id"])
            self.assertEqual(answer.status, 400, body)
            self.assertEqual({item["name"] for item in answer.json()}, {field}, answer.json())
        self.assertEqual(await self.project_rules(), [])
        self.assertFalse(os.path.exists(os.path.join(self.folder("proj"), "made")))
        answer = await call(self.app, "permissions_reply", {"reply": "reject"}, ident=ask["id"])
        self.assertEqual(answer.status, 200)
        await self.events_until("idle")
        self.assertEqual(await self.project_rules(), [])

    async def test_hidden_characters_are_shown_and_never_allowed(self):
        """A line with a zero-width space and a bidi override asks even under allow bash *, and
        the question shows them written out; no pattern is offered for it."""
        await call(self.app, "permissions_save", {"projectid": self.project["id"], "tool": "bash",
                                                  "pattern": "*", "action": "allow"})
        line = "touch ok\u200b; echo \u202eabc"
        self.model.script(reply(tool_calls=[bash_call(line)]), reply("ok"))
        await self.prompt()
        ask = (await wait_for(self.ws, "permission.ask"))["data"]
        self.assertIn("U+200B", ask["reason"])
        self.assertIn("U+202E", ask["reason"])
        self.assertEqual((ask["commands"], ask["patterns"]), ([], []))
        await call(self.app, "permissions_reply", {"reply": "reject"}, ident=ask["id"])
        await self.events_until("idle")
        self.assertEqual(os.listdir(self.folder("proj")), ["a.txt"])
