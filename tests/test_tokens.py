"""Tokens per answer and per session: the provider's counts when it gives them, an estimate
marked as such when it does not."""

from __future__ import annotations

from tests.model_server import reply
from tests.test_loop import LoopCase
from tests.utils import call, run_ended


class TokensTest(LoopCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        await self.ws.close()  # read from the store, not the events

    async def run_prompt(self, *replies):
        self.model.script(*replies)
        answer = await self.prompt("count me")
        self.assertEqual(answer.status, 200, answer.body)
        await run_ended(self.app, self.session["id"])

    async def answers(self) -> list[dict]:
        messages = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        return [m for m in messages if m["role"] == "assistant"]

    async def test_counts_from_the_provider_and_summed(self):
        await self.run_prompt(reply(tool_calls=[("read", {"path": "a.txt"})]), reply("done"))
        answers = await self.answers()
        tokens = [m["data"]["tokens"] for m in answers]
        self.assertTrue(all(not t["estimated"] and t["input"] > 0 for t in tokens), tokens)
        self.assertEqual(tokens[0]["input"], answers[0]["usage"]["prompt_tokens"])
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual(session["tokens"], {"input": sum(t["input"] for t in tokens),
                                             "output": sum(t["output"] for t in tokens), "estimated": False})

    async def test_estimated_when_the_provider_says_nothing(self):
        await self.run_prompt(reply("a short answer of some length", usage=False))
        tokens = (await self.answers())[0]["data"]["tokens"]
        self.assertTrue(tokens["estimated"])
        self.assertGreater(tokens["input"], 100)  # the system prompt alone is longer
        self.assertGreater(tokens["output"], 3)
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertTrue(session["tokens"]["estimated"])
