"""A prompt in a long session leaves the event loop free: converting the history, fitting it to
the window (and the compaction's transcript) and encoding the request run on a worker thread.
How long other requests wait is a timing, measured by bench/long_prompt.py; what a test can show
is where the work runs, and that the run gives the model the same request as before."""

from __future__ import annotations

import threading

from tests.agent.test_long_session import PricedCase
from tests.model_server import reply
from totem.agent import hooks, requests

STEPS = 300  # a user message and an answer with a tool call each: 600 messages


class LongPromptCase(PricedCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.threads: dict[str, list[bool]] = {}
        for module, name in ((requests, "history_messages"), (requests, "fit_window"),
                             (hooks, "compaction_messages")):
            self.spy(module, name)

    def spy(self, module, name: str) -> None:
        """Note, at each call of `module`.`name`, whether it ran on the event loop's thread, and run it."""
        real = getattr(module, name)
        calls = self.threads.setdefault(name, [])

        def noted(*args, **kwargs):
            calls.append(threading.current_thread() is threading.main_thread())
            return real(*args, **kwargs)
        setattr(module, name, noted)
        self.addCleanup(setattr, module, name, real)

    async def fill(self, user_text: str) -> None:
        store, sessionid = self.app.store, self.session["id"]
        for step in range(STEPS):
            user = await store.add_message(sessionid, "user")
            await store.add_part(user["id"], sessionid, "text", "done", text=f"{user_text} {step}", closed=True)
            answer = await store.add_message(sessionid, "assistant", model=self.modelref)
            data = {"tool": "read", "callid": f"c{step}", "input": {"path": "a.txt"}, "output": f"{step}: " + "x" * 400}
            await store.add_part(answer["id"], sessionid, "tool", "done", data=data, closed=True)
            await store.add_part(answer["id"], sessionid, "text", "done", text=f"Read part {step}.", closed=True)


class PrunedTest(LongPromptCase):
    context = 60_000  # the 600 messages pass it: their old outputs are pruned

    async def test_the_request_of_a_long_session_is_built_off_the_loop(self):
        """The history is converted and fitted on a worker thread, and the request the model
        gets holds the whole conversation, its old outputs pruned, the last ones whole."""
        await self.fill("go on")
        self.model.script(reply("done"))
        answer = await self.prompt("and now?")
        self.assertEqual(answer.status, 200, answer.body)
        await self.settled()
        self.assertEqual(self.threads["history_messages"], [False])
        self.assertEqual(self.threads["fit_window"], [False])
        self.assertEqual(self.threads["compaction_messages"], [])
        [request] = self.chats()
        messages = request.body["messages"]
        self.assertEqual(len(messages), 1 + STEPS * 3 + 1)
        tools = [m["content"] for m in messages if m["role"] == "tool"]
        self.assertIn("removed to fit the context window", tools[0])
        self.assertIn(f"{STEPS - 1}: " + "x" * 400, tools[-1])
        self.assertEqual(messages[-1], {"role": "user", "content": "and now?"})


class CompactedTest(LongPromptCase):
    context = 16_384  # the person's words alone pass it: the conversation is compacted first

    async def test_the_compaction_of_a_long_session_is_prepared_off_the_loop(self):
        """When pruning is not enough, the transcript to summarize is made on a worker thread
        too, and the request after it starts from the summary."""
        await self.fill("a long request of the person, kept whole in every request " * 4)
        self.model.script(reply("done"))
        answer = await self.prompt("and now?")
        self.assertEqual(answer.status, 200, answer.body)
        await self.settled()
        self.assertEqual(self.threads["compaction_messages"], [False])
        self.assertTrue(self.threads["fit_window"] and not any(self.threads["fit_window"]), self.threads)
        self.assertFalse(any(self.threads["history_messages"]), self.threads)
        compaction, step = self.chats()
        self.assertEqual(compaction.body["tools"], [])
        self.assertTrue(compaction.body["messages"][0]["content"].startswith("Summarize the conversation"))
        self.assertTrue(step.body["messages"][1]["content"].startswith("[The older part of this conversation was "
                                                                       "compacted"), step.body["messages"][1]["content"][:200])
