"""Where a run stopped stays with the conversation: an aborted run marks its last message
`ended: aborted`, a failed one `ended: error` with the error, and the next run changes neither."""

from __future__ import annotations

import asyncio

from tests.model_server import HttpError, Stall, reply
from tests.test_loop import LoopCase
from tests.utils import MS, call, run_ended


class RunMarksTest(LoopCase):
    async def messages(self) -> list[dict]:
        return (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]

    async def test_a_failed_run_keeps_its_error_on_its_last_answer(self):
        self.model.script(reply(tool_calls=[("read", {"path": "a.txt"})]),
                          HttpError({"error": {"message": "the model is not there"}}, 404))
        await self.prompt("first")
        await self.events_until("error")
        await run_ended(self.app, self.session["id"])
        stored = await self.messages()
        self.assertEqual([m["role"] for m in stored], ["user", "assistant", "assistant"])
        last = stored[-1]["data"]
        self.assertEqual(last["ended"], "error")
        self.assertIn("the model is not there", last["error"])
        self.assertEqual(last["errorkind"], "model_not_found")  # what the screen offers to do follows it
        self.model.script(reply("fine now"))
        await self.prompt("second")
        await self.events_until("idle")
        stored = await self.messages()
        self.assertEqual(stored[2]["data"]["ended"], "error")  # still where it stopped
        self.assertNotIn("ended", stored[-1]["data"])

    async def test_an_aborted_run_is_marked_where_it_stopped(self):
        self.model.script(reply(tool_calls=[("read", {"path": "a.txt"})]), Stall())
        await self.prompt("first")
        for _ in range(400):
            if len(self.model.requests) >= 2:
                break
            await asyncio.sleep(5 * MS)
        await call(self.app, "sessions_abort", {}, ident=self.session["id"])
        await run_ended(self.app, self.session["id"])
        stored = await self.messages()
        self.assertEqual(stored[-1]["data"]["ended"], "aborted")
        self.assertNotIn("error", stored[-1]["data"])
        self.assertNotIn("errorkind", stored[-1]["data"])
        self.assertNotIn("ended", stored[1]["data"])

    async def test_a_run_refused_at_its_first_request_marks_that_answer(self):
        self.model.script(HttpError({"error": {"message": "Incorrect API key provided"}}, 401))
        await self.prompt("first")
        await self.events_until("error")
        await run_ended(self.app, self.session["id"])
        stored = await self.messages()
        self.assertEqual([m["role"] for m in stored], ["user", "assistant"])  # the answer that failed
        self.assertEqual(stored[-1]["data"]["ended"], "error")
        self.assertEqual(stored[-1]["data"]["errorkind"], "auth")


class StatusAfterPromptTest(LoopCase):
    async def test_read_right_after_prompt_says_running(self):
        """Sessions|read right after Sessions|prompt returned says running, every time (the
        status is stored before the prompt returns, not when the run's task first runs)."""
        sessions = self.app.services.sessions
        for attempt in range(5):
            self.model.script(Stall())
            await sessions.prompt(self.session["id"], f"attempt {attempt}", model=self.modelref)
            self.assertEqual((await sessions.read(self.session["id"]))["status"], "running", attempt)
            await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")
            await run_ended(self.app, self.session["id"])
