"""Messages while a session runs: queued (run when the current run ends, removable until then,
left as said after an abort) or steering (read by the current run at its next step)."""

from __future__ import annotations

import asyncio
import json
import threading

from tests.model_server import reply
from tests.test_loop import LoopCase
from tests.utils import MS, call


def held(text: str):
    """An answer that waits after its first event until the test sets its `release`: the run
    goes on while the test sends what must come during it, however slow the machine."""
    stream = reply(text)
    stream.release, stream.hold_after = threading.Event(), 1
    return stream


class QueueTest(LoopCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        await self.ws.close()  # these tests read the store, not the events (an unread socket holds its close)

    async def send(self, text: str, **extra) -> dict:
        answer = await self.prompt(text, **extra)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    async def until_idle(self, timeout_ms: float = 20_000) -> None:
        for _ in range(int(timeout_ms / 5)):
            if not self.app.runs.is_running(self.session["id"]):
                await asyncio.sleep(20 * MS)
                if not self.app.runs.is_running(self.session["id"]):
                    return
            await asyncio.sleep(5 * MS)
        self.fail("the session kept running")

    async def until_asked(self, timeout_ms: float = 20_000) -> None:
        """Until the model has the run's first request (a busy machine may be slower to send it
        than the test to go on)."""
        for _ in range(int(timeout_ms / 5)):
            if self.chats():
                return
            await asyncio.sleep(5 * MS)
        self.fail("the model was never asked")

    async def messages(self) -> list[dict]:
        return (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]

    def chats(self) -> list:
        return [r for r in self.model.requests if r.path.endswith("/chat/completions")]

    async def test_a_queued_prompt_runs_after_the_run(self):
        first_answer = held("first answer " * 30)
        self.model.script(first_answer, reply("second answer"))
        first = await self.send("first")
        queued = await self.send("second, queued")
        self.assertEqual(queued["queued"], True)
        waiting = [m for m in await self.messages() if m["id"] == queued["messageid"]][0]
        self.assertTrue(waiting["data"]["queued"])
        first_answer.release.set()
        await self.until_idle()
        chats = self.chats()
        self.assertEqual(len(chats), 2)
        self.assertNotIn("second, queued", json.dumps(chats[0].body))
        self.assertEqual(chats[1].body["messages"][-1]["content"], "second, queued")
        ran = [m for m in await self.messages() if m["id"] == queued["messageid"]][0]
        self.assertNotIn("queued", ran["data"])
        self.assertNotEqual(first["messageid"], queued["messageid"])

    async def test_a_queued_prompt_can_be_taken_back(self):
        first_answer = held("first answer " * 30)
        self.model.script(first_answer)
        await self.send("first")
        queued = await self.send("never mind")
        answer = await call(self.app, "sessions_unqueue", {"messageid": queued["messageid"]}, ident=self.session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        again = await call(self.app, "sessions_unqueue", {"messageid": queued["messageid"]}, ident=self.session["id"])
        self.assertEqual(again.status, 404)
        first_answer.release.set()
        await self.until_idle()
        self.assertEqual(len(self.chats()), 1)
        self.assertNotIn(queued["messageid"], [m["id"] for m in await self.messages()])

    async def test_after_an_abort_queued_prompts_are_said_not_run(self):
        first_answer = held("first answer " * 40)
        self.model.script(first_answer, reply("next"))
        await self.send("first")
        queued = await self.send("queued one")
        await self.until_asked()  # the abort comes while the model answers, not before it is asked
        await call(self.app, "sessions_abort", {}, ident=self.session["id"])
        await self.until_idle()
        first_answer.release.set()  # the model's side of the aborted answer ends
        self.assertEqual(len(self.chats()), 1)
        kept = [m for m in await self.messages() if m["id"] == queued["messageid"]][0]
        self.assertNotIn("queued", kept["data"])
        await self.send("go on")
        await self.until_idle()
        self.assertIn("queued one", json.dumps(self.chats()[-1].body))

    async def test_a_steering_message_reaches_the_next_step(self):
        tool_step = reply(tool_calls=[("read", {"path": "a.txt"})])
        # The step waits until the steer is in: a busy machine could otherwise end it first.
        tool_step.release, tool_step.hold_after = threading.Event(), 1
        self.model.script(tool_step, reply("steered"))
        await self.send("look at a.txt")
        await self.until_asked()
        steered = await self.send("also say hi", steer=True)
        self.assertEqual(steered["steered"], True)
        tool_step.release.set()
        await self.until_idle()
        chats = self.chats()
        self.assertEqual(len(chats), 2)
        self.assertNotIn("also say hi", json.dumps(chats[0].body))
        self.assertIn("also say hi", json.dumps(chats[1].body))
