"""Fitting a request into the model's window: old tool outputs pruned oldest first, never the
user's messages or the latest steps, with a note saying how to get them again; a request that
cannot fit ends the run with a clear error instead of an overflow."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.model_server import Stall, reply, text_chunks
from tests.test_loop import LoopCase
from tests.utils import MS, call, run_ended
from totem.agent.context import (
    COMPACTED_INTRO,
    COMPACTION_INSTRUCTIONS,
    KEPT_STEPS,
    PRUNE_BATCH_SHARE,
    WINDOW_SHARE,
    ContextFull,
    conversation_order,
    envelope,
    estimated_tokens,
    fit_window,
    history_messages,
    prune_boundary,
)

TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]


def conversation(steps: int, output_chars: int) -> list[dict]:
    messages = [{"role": "system", "content": "system"}, {"role": "user", "content": "U" * 2000}]
    for step in range(steps):
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{step}", "type": "function", "function": {"name": "read", "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{step}", "content": f"{step}:" + "x" * output_chars})
    return messages


def test_under_the_window_nothing_changes():
    messages = conversation(3, 100)
    assert fit_window(messages, TOOLS, 100_000) == (messages, 0)


def test_old_outputs_go_first_and_the_latest_steps_and_user_stay():
    messages = conversation(20, 4000)
    fitted, pruned = fit_window(messages, TOOLS, 16_000)
    assert pruned > 0
    assert estimated_tokens(fitted, TOOLS) <= 16_000 * 0.75
    tools = [m for m in fitted if m["role"] == "tool"]
    assert "removed to fit the context window" in tools[0]["content"] and "call read again" in tools[0]["content"]
    assert all(m["content"].startswith(f"{19 - i}:") for i, m in enumerate(reversed(tools[-KEPT_STEPS:])))
    assert fitted[1] == messages[1]  # the user's message, verbatim
    assert [m["role"] for m in fitted] == [m["role"] for m in messages]


def test_a_request_that_cannot_fit_says_so():
    messages = conversation(2, 100) + [{"role": "user", "content": "y" * 200_000}]
    with pytest.raises(ContextFull) as caught:
        fit_window(messages, TOOLS, 8192)
    assert "window" in str(caught.value)


def test_a_latest_output_past_the_window_is_cut_not_compacted():
    """One latest output larger than the window loses its middle to fit, with a note outside the
    envelope; its head and tail (the envelope's tags) stay, and so does the earlier step."""
    messages = conversation(2, 100)
    marker = "ab" * 8
    messages[-1] = messages[-1] | {"content": envelope("tool read", "H" * 5000 + "M" * 90_000 + "T" * 5000, marker)}
    fitted, cut = fit_window(messages, TOOLS, 8192)
    assert cut == 1
    assert estimated_tokens(fitted, TOOLS) <= 8192 * WINDOW_SHARE
    content = fitted[-1]["content"]
    assert content.startswith(f'<data-{marker} source="tool read" trust="untrusted">\nHHH')
    body, _, note = content.rpartition(f"</data-{marker}>\n")
    assert body.endswith("TTT\n") and "\n[…]\n" in body
    assert note.startswith("[") and "cut from its middle" in note and "read output" in note
    assert fitted[:-1] == messages[:-1]


def test_outputs_of_a_usual_size_are_not_cut():
    """When the latest outputs are of a usual size, nothing is cut: the conversation is compacted."""
    messages = conversation(2, 3000) + [{"role": "user", "content": "y" * 18_000}]
    with pytest.raises(ContextFull):
        fit_window(messages, TOOLS, 8192)


def test_a_guessed_window_cuts_nothing():
    """A window the provider does not state: old outputs are pruned, the latest left whole."""
    messages = conversation(2, 100_000)
    fitted, _pruned = fit_window(messages, TOOLS, 8192, known=False)
    assert fitted[-1] == messages[-1]


def stored(ident: str, role: str, text: str = "", **data) -> dict:
    parts = [{"kind": "text", "text": text}] if text else []
    return {"id": ident, "role": role, "data": data, "parts": parts}


def test_a_queued_prompt_enters_the_conversation_when_its_run_begins():
    """A prompt queued during a run is stored among that run's steps; the model reads it after
    them (after the last answer stored before its own), and what was sent after them stays
    after it, before its run has an answer and after."""
    run = [stored("1", "user", "first"), stored("2", "assistant", "a", prompt="1"),
           stored("3", "user", "queued"), stored("4", "user", "steer", steer=True),
           stored("5", "assistant", "b", prompt="1"), stored("6", "user", "late steer", steer=True)]
    assert [m["id"] for m in conversation_order(run)] == ["1", "2", "3", "4", "5", "6"]  # nothing names it yet
    assert [m["id"] for m in conversation_order(run, "3")] == ["1", "2", "4", "5", "3", "6"]
    answered = run + [stored("7", "assistant", "c", prompt="3")]
    assert [m["id"] for m in conversation_order(answered, "3")] == ["1", "2", "4", "5", "3", "6", "7"]
    assert [m["id"] for m in conversation_order(answered)] == ["1", "2", "4", "5", "3", "6", "7"]
    texts = [m["content"] for m in history_messages(answered, {}, "ab" * 8)]
    assert texts == ["first", "a", "steer", "b", "queued", "late steer", "c"]


def test_a_prompt_in_its_place_does_not_move():
    """A prompt and a steering message sent before its first answer keep their order; answers
    from before the marks change nothing."""
    fresh = [stored("1", "user", "x"), stored("2", "assistant", "y", prompt="1"), stored("3", "user", "go"),
             stored("4", "user", "and this", steer=True)]
    assert conversation_order(fresh, "3") is fresh
    legacy = [stored("1", "user", "x"), stored("2", "assistant", "y"), stored("3", "user", "z")]
    assert conversation_order(legacy, "3") is legacy


class WindowCase(LoopCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        await self.ws.close()  # these tests read the store and the model's requests, not the events
        self.model.serve_json("GET", "/v1/models", {"object": "list", "data": [
            {"id": "scripted-model", "object": "model", "context_length": 8192}]})
        answer = await call(self.app, "providers_catalog")  # lists the models: their windows are known
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual([(m["context"], m["contextguessed"]) for m in answer.json()["models"]], [(8192, False)])

    def chats(self) -> list:
        return [request for request in self.model.requests if request.path.endswith("/chat/completions")]


class WindowRunTest(WindowCase):
    async def test_a_long_session_stays_under_a_small_window(self):
        """Twenty steps that each read 20 lines (about 1,500 characters) with an 8K window: every request
        stays under the window, old outputs carry the note, and the run ends idle."""
        with open(f"{self.project['path']}/big.txt", "w") as handle:
            handle.write("".join(f"line {n} " + "z" * 60 + "\n" for n in range(1, 2001)))
        self.model.script(*[reply(tool_calls=[("read", {"path": "big.txt", "offset": step * 20 + 1, "limit": 20})])
                            for step in range(20)], reply("done"))
        answer = await self.prompt("read it many times")
        self.assertEqual(answer.status, 200, answer.body)
        await run_ended(self.app, self.session["id"])
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual(session["status"], "idle", session["error"])
        sizes = [len(json.dumps(request.body)) / 3.5 for request in self.chats()]
        self.assertLess(max(sizes), 8192)
        last = self.chats()[-1].body["messages"]
        self.assertTrue("removed to fit the context window" in json.dumps(last))
        self.assertTrue(f"line {19 * 20 + 1} " in json.dumps(last))  # the latest output is whole


class WindowFullTest(WindowCase):
    async def test_a_session_past_the_window_ends_with_a_clear_error(self):
        """When pruning is not enough the run stops at once with the reason, never an overflow
        sent to the model or a loop."""
        self.model.script(reply("a summary"))
        answer = await self.prompt("x" * 40_000)
        self.assertEqual(answer.status, 200, answer.body)
        await run_ended(self.app, self.session["id"])
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual(session["status"], "error")
        self.assertIn("after compacting", session["error"])
        chats = self.chats()
        self.assertEqual(len(chats), 1)  # the one compaction, never a loop, never the overflow
        self.assertEqual(chats[0].body["messages"][0]["content"], COMPACTION_INSTRUCTIONS)


class GuessedWindowTest(LoopCase):
    async def test_a_window_the_provider_does_not_state_is_the_kinds_default_said_so(self):
        self.model.serve_json("GET", "/v1/models", {"object": "list", "data": [{"id": "scripted-model"}]})
        models = (await call(self.app, "providers_catalog")).json()["models"]
        self.assertEqual([(m["context"], m["contextguessed"]) for m in models], [(32768, True)])


class CompactionTest(WindowCase):
    async def test_a_compaction_answered_with_a_tool_call_runs_no_tool(self):
        """A model that calls a tool when asked for a summary: nothing runs, the part closes as an
        error, its text is the summary. (The long session that compacts on its own is
        tests/agent/test_long_session.py.)"""
        self.model.script(reply("first answer"), reply("the summary", tool_calls=[("bash", {"command": "rm -rf x"})]))
        await self.prompt("hello there")
        await self.wait_idle()
        answer = await call(self.app, "sessions_compact", {}, ident=self.session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        await self.wait_idle()
        messages = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        summary = messages[-1]
        self.assertTrue(summary["data"].get("compaction"))
        [tool] = [part for part in summary["parts"] if part["kind"] == "tool"]
        self.assertEqual((tool["status"], tool["data"]["error"]), ("error", "no tools while compacting"))
        self.assertNotIn("output", tool["data"])
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual(session["status"], "idle")

    async def test_the_person_asks_for_a_compaction(self):
        """Sessions|compact summarizes now; the next prompt is sent from the summary."""
        fresh = await call(self.app, "sessions_compact", {}, ident=self.session["id"])
        self.assertEqual(fresh.status, 400)  # nothing to summarize yet
        self.model.script(reply("first answer"), reply("the summary of it all"), reply("after"))
        await self.prompt("hello there")
        await self.wait_idle()
        answer = await call(self.app, "sessions_compact", {}, ident=self.session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        await self.wait_idle()
        await self.prompt("and now?")
        await self.wait_idle()
        chats = self.chats()
        self.assertEqual(chats[1].body["messages"][0]["content"], COMPACTION_INSTRUCTIONS)
        last = chats[2].body["messages"]
        self.assertEqual(last[1]["content"], COMPACTED_INTRO + "the summary of it all")
        self.assertEqual(last[-1]["content"], "and now?")

    async def test_an_interrupted_compaction_is_dropped(self):
        """A summary cut by an abort is kept for the person to read and marked so, but the next
        prompt is sent from the whole conversation, never from the half summary or with it as
        an answer."""
        self.model.script(reply("first answer"), Stall(text_chunks("half a summ", 2)), reply("after"))
        await self.prompt("hello there")
        await self.wait_idle()
        answer = await call(self.app, "sessions_compact", {}, ident=self.session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        messages = []
        for _ in range(2000):  # until the half summary is stored
            messages = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
            if "half a summ" in json.dumps(messages):
                break
            await asyncio.sleep(5 * MS)
        aborted = await call(self.app, "sessions_abort", {}, ident=self.session["id"])
        self.assertEqual(aborted.status, 200, aborted.body)
        await self.wait_idle()
        summary = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"][-1]
        self.assertTrue(summary["data"]["compacting"])
        self.assertNotIn("compaction", summary["data"])
        await self.prompt("and now?")
        await self.wait_idle()
        sent = json.dumps(self.chats()[-1].body["messages"])
        self.assertNotIn("half a summ", sent)
        self.assertIn("first answer", sent)
        self.assertNotIn(COMPACTED_INTRO, sent)

    async def wait_idle(self):
        await asyncio.sleep(5 * MS)
        await run_ended(self.app, self.session["id"])


def test_old_outputs_are_pruned_in_batches_that_keep_the_prefix():
    """As a conversation grows step by step past its window, what is pruned only grows, and it
    changes in batches (PRUNE_BATCH_SHARE), not at every step: each request repeats
    the previous one's bytes up to the newest step far more often than not. Control: pruning
    one output at a time (no batch) breaks the prefix at nearly every step."""
    def pruned_sets(batch_share: float) -> list[frozenset[int]]:
        sets = []
        for steps in range(10, 120):
            fitted, _pruned = fit_window(conversation(steps, 1500), TOOLS, 16_000, batch_share=batch_share)
            sets.append(frozenset(i for i, m in enumerate(fitted) if "removed to fit" in str(m.get("content"))))
        return sets

    def changes(sets: list[frozenset[int]]) -> int:
        return sum(1 for earlier, later in zip(sets, sets[1:], strict=False) if earlier != later)

    batched = pruned_sets(PRUNE_BATCH_SHARE)
    assert all(earlier <= later for earlier, later in zip(batched, batched[1:], strict=False))
    assert 0 < changes(batched) <= len(batched) // 3, changes(batched)
    assert changes(pruned_sets(0.0)) > changes(batched) * 3


def test_a_boundary_moves_only_when_outgrown_and_then_by_a_whole_batch():
    """The decision of each request: keep the boundary while it frees enough; past it, free a
    batch more, or prune every output when less room than a batch is left. Control: without a
    batch the boundary moves one output at a time."""
    freed = [0, 10, 20, 30, 40, 50]  # what the oldest k outputs free
    assert prune_boundary(freed, 0, -1, 20) == 0  # under the budget: nothing pruned
    assert prune_boundary(freed, 0, 5, 20) == 3  # 5 needed, 20 more: 30 freed
    assert prune_boundary(freed, 3, 29, 20) == 3  # the boundary still frees enough: it stays
    assert prune_boundary(freed, 3, 31, 20) == 5  # outgrown, less than a batch of room left: all
    assert prune_boundary(freed, 3, 31, 0) == 4  # the control: one more output


def test_pruning_keeps_its_batches_once_what_cannot_be_pruned_fills_the_window():
    """When the calls (which are never pruned) take most of the budget, each step's request
    still prunes in batches: the pruned outputs change at a few steps, each time several, never
    one more at every step. Control: with no batch they change at nearly every step."""
    def heavy(steps: int) -> list[dict]:
        messages = conversation(steps, 1500)
        for message in messages:
            for tool_call in message.get("tool_calls") or ():
                tool_call["function"]["arguments"] = json.dumps({"why": "w" * 500})
        return messages

    def pruned_sets(batch_share: float) -> list[frozenset[int]]:
        sets = []
        for steps in range(26, 42):  # the calls alone: from over 40 % of the budget to two thirds
            fitted, _pruned = fit_window(heavy(steps), TOOLS, 16_000, batch_share=batch_share)
            sets.append(frozenset(i for i, m in enumerate(fitted) if "removed to fit" in str(m.get("content"))))
        return sets

    def moves(sets: list[frozenset[int]]) -> list[int]:
        return [len(later - earlier) for earlier, later in zip(sets, sets[1:], strict=False) if earlier != later]

    calls = heavy(26)[:2] + [message for message in heavy(26) if message["role"] == "assistant"]
    assert estimated_tokens(calls, TOOLS) > 16_000 * WINDOW_SHARE * 0.4
    batched = pruned_sets(PRUNE_BATCH_SHARE)
    assert all(earlier <= later for earlier, later in zip(batched, batched[1:], strict=False))
    assert 0 < len(moves(batched)) <= 3 and min(moves(batched)) >= 4, moves(batched)
    assert len(moves(pruned_sets(0.0))) >= 12
