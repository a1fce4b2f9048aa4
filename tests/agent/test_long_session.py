"""Long sessions that keep working (issue 20): two hundred steps in an 8K window through the
scripted model, with pruning, compactions, a steering and a queued message, token totals and
their cost; and the cost of an answer where the catalog has the model's price."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from tests.model_server import ScriptedModel, Stream, chunk, reply
from tests.test_loop import LoopCase
from tests.utils import call, run_ended
from totem.agent.answers import tokens_of
from totem.agent.context import (
    CHARS_PER_TOKEN,
    COMPACTED_INTRO,
    COMPACTION_INSTRUCTIONS,
    WINDOW_SHARE,
    estimated_tokens,
)

WINDOW = 8192
STEPS = 200
STEER_AT = 150  # the steering message is sent while this chat request waits for its answer
BIG_READ_AT = 120  # this step reads a whole file, far more than the window holds
PROMPT = "Walk through big.txt and the counts, a part at a time, and tell me what you find."
STEER = "Also note every line that ends in 7."
QUEUED = "Now write a short report of it all."
SUMMARY = "Summary {n}: the person wants big.txt and the counts walked through; parts read so far are noted."
# The model's price in the catalog, as OpenRouter says it (USD per token, strings).
PRICE_PROMPT, PRICE_COMPLETION = "0.000003", "0.000015"
WHOLE = 1 << 20  # an answer leaves in one piece: the test is about the session, not the stream


def test_tokens_of_an_answer_carry_its_cost_when_it_is_known():
    """The provider's own cost wins (OpenRouter's `usage.cost`); else the tokens at the price
    (USD per million); no price and no cost from the provider: no `cost`."""
    price = {"input": 3.0, "output": 15.0}
    usage = {"prompt_tokens": 1000, "completion_tokens": 100}
    assert tokens_of(usage, {}, 0, price) == {"input": 1000, "output": 100, "estimated": False, "cost": 0.0045}
    assert tokens_of(usage | {"cost": 0.0002504}, {}, 0, price)["cost"] == 0.0002504
    assert tokens_of(usage | {"cost": "0.1"}, {}, 0, price)["cost"] == 0.0045  # not a number: computed
    assert "cost" not in tokens_of(usage, {}, 0, None)
    estimated = tokens_of(None, {"messages": [{"role": "user", "content": "x" * 3500}]}, 350, price)
    assert estimated["estimated"] is True
    assert estimated["cost"] == round((estimated["input"] * 3.0 + estimated["output"] * 15.0) / 1e6, 8)


def test_cached_input_is_read_from_each_providers_usage_and_priced_at_its_own_price():
    """OpenAI/OpenRouter, DeepSeek, Anthropic and Gemini say it each their way; the cached part is
    priced at the cache price (the input price when the catalog gives none); an estimate counts none."""
    usage = {"prompt_tokens": 1000, "completion_tokens": 100}
    for given, read, written in (({"prompt_tokens_details": {"cached_tokens": 800}}, 800, 0),
                                 ({"prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300}}, 600, 300),
                                 ({"prompt_cache_hit_tokens": 700, "prompt_cache_miss_tokens": 300}, 700, 0),
                                 ({"cache_read_input_tokens": 500, "cache_creation_input_tokens": 400}, 500, 400),
                                 ({"cachedContentTokenCount": 900}, 900, 0),
                                 ({"prompt_tokens_details": {"cached_tokens": 5000}}, 1000, 0),  # never above input
                                 ({"prompt_tokens_details": {"cached_tokens": True}}, 0, 0), ({}, 0, 0)):
        tokens = tokens_of(usage | given, {}, 0, {"input": 3.0, "output": 15.0, "cacheread": 0.3,
                                                  "cachewrite": 3.75})
        assert (tokens.get("cached", 0), tokens.get("cachewrite", 0)) == (read, written), given
        fresh = 1000 - read - written
        assert tokens["cost"] == round((fresh * 3.0 + read * 0.3 + written * 3.75 + 100 * 15.0) / 1e6, 8), given
    without = tokens_of(usage | {"prompt_tokens_details": {"cached_tokens": 800}}, {}, 0, {"input": 3.0, "output": 15.0})
    assert without["cost"] == round((1000 * 3.0 + 100 * 15.0) / 1e6, 8)  # no cache price: the input price
    assert "cached" not in tokens_of({"prompt_tokens_details": {"cached_tokens": 800}}, {"messages": []}, 10)


def is_compaction(request) -> bool:
    body = request.body if isinstance(request.body, dict) else {}
    messages = body.get("messages") or []
    return bool(messages) and messages[0].get("content") == COMPACTION_INSTRUCTIONS


@dataclass
class Held:
    """An answer that waits to be sent until the test lets it go (the test acts meanwhile)."""
    response: Stream
    reached: asyncio.Event
    release: asyncio.Event


class LongModel(ScriptedModel):
    """The scripted model, which answers every compaction request with a summary whatever the
    script holds next, as a real model would, and sends Held answers when released."""

    def __init__(self) -> None:
        super().__init__()
        self.compactions = 0

    async def _respond(self, request, reader, writer) -> None:
        if request.method == "POST" and is_compaction(request):
            self.compactions += 1
            self._script.appendleft(reply(SUMMARY.format(n=self.compactions), max_piece=WHOLE))
        await super()._respond(request, reader, writer)

    async def _send(self, response, reader, writer) -> None:
        if isinstance(response, Held):
            response.reached.set()
            await response.release.wait()
            response = response.response
        await super()._send(response, reader, writer)


def models_list(context: int, prompt: str | None = PRICE_PROMPT, completion: str | None = PRICE_COMPLETION) -> dict:
    """An OpenRouter models list with the scripted model, its window and its price."""
    entry = {"id": "scripted-model", "name": "Scripted", "context_length": context,
             "supported_parameters": ["tools"], "architecture": {"output_modalities": ["text"]}}
    if prompt is not None:
        entry["pricing"] = {"prompt": prompt, "completion": completion, "request": "0"}
    return {"data": [entry]}


class PricedCase(LoopCase):
    """A session on an OpenRouter provider (the scripted model) whose catalog gives the price."""

    context = WINDOW

    async def asyncSetUp(self):
        await super().asyncSetUp()
        await self.ws.close()  # these tests read the store and the model's requests, not the events
        self.model = await LongModel().__aenter__()
        self.addAsyncCleanup(self.model.__aexit__, None, None, None)
        answer = await call(self.app, "providers_save", {"name": "Router", "kind": "openrouter",
                                                         "url": self.model.url, "key": "sk-or-test-0123456789"})
        self.assertEqual(answer.status, 200, answer.body)
        self.providerid = answer.json()["id"]
        self.modelref = f"{self.providerid}/scripted-model"
        self.model.serve_json("GET", "/v1/models", models_list(self.context))
        catalog = await call(self.app, "providers_catalog")
        self.assertEqual(catalog.status, 200, catalog.body)
        [entry] = catalog.json()["models"]
        self.assertEqual((entry["context"], entry["price"]), (self.context, {"input": 3.0, "output": 15.0}))

    async def settled(self) -> None:
        """Wait until the script is answered and no run goes on (a queued prompt's run starts
        just after the run before it has ended)."""
        while True:
            await run_ended(self.app, self.session["id"], timeout_ms=120_000)
            await asyncio.sleep(0)
            if not self.model._script and not self.app.runs.is_running(self.session["id"]):
                return

    def chats(self) -> list:
        return [request for request in self.model.requests if request.path.endswith("/chat/completions")]

    async def answers(self) -> list[dict]:
        messages = (await call(self.app, "sessions_messages", ident=self.session["id"],
                               query="limit=500")).json()["messages"]
        return [message for message in messages if message["role"] == "assistant"]


class CostTest(PricedCase):
    context = 131072

    async def test_an_answer_of_a_priced_model_has_its_cost_summed_in_the_session(self):
        """Each answer's `data.tokens.cost` is its tokens at the catalog's price; Sessions|read sums them."""
        self.model.script(reply(tool_calls=[("read", {"path": "a.txt"})]), reply("done"))
        answer = await self.prompt("what does a.txt say?")
        self.assertEqual(answer.status, 200, answer.body)
        await run_ended(self.app, self.session["id"])
        tokens = [message["data"]["tokens"] for message in await self.answers()]
        self.assertEqual(len(tokens), 2)
        for counted in tokens:  # the scripted usage: 10 tokens in, 5 out
            self.assertEqual((counted["input"], counted["output"], counted["estimated"]), (10, 5, False))
            self.assertAlmostEqual(counted["cost"], (10 * 3.0 + 5 * 15.0) / 1e6)
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual({k: v for k, v in session["tokens"].items() if k != "cost"},
                         {"input": 20, "output": 10, "estimated": False})
        self.assertAlmostEqual(session["tokens"]["cost"], 2 * (10 * 3.0 + 5 * 15.0) / 1e6)

    async def test_cached_input_is_priced_from_the_catalog_and_summed_in_the_session(self):
        """OpenRouter's models list gives cache prices; an answer whose usage says 8 of its 10
        input tokens came from the cache costs them at the cache price, and the session sums them."""
        listed = models_list(self.context)
        listed["data"][0]["pricing"] |= {"input_cache_read": "0.0000003", "input_cache_write": "0.00000375"}
        self.model.serve_json("GET", "/v1/models", listed)
        saved = await call(self.app, "providers_save", {"id": self.providerid, "name": "Router",
                                                        "kind": "openrouter", "url": self.model.url})
        self.assertEqual(saved.status, 200, saved.body)
        [entry] = (await call(self.app, "providers_catalog")).json()["models"]
        self.assertEqual(entry["price"], {"input": 3.0, "output": 15.0, "cacheread": 0.3, "cachewrite": 3.75})
        stream = reply("cached answer", usage=False)
        stream.events.append(chunk(usage={"prompt_tokens": 10, "completion_tokens": 5,
                                          "prompt_tokens_details": {"cached_tokens": 8}}, choices=False))
        self.model.script(stream)
        await self.prompt("hi")
        await run_ended(self.app, self.session["id"])
        [message] = await self.answers()
        self.assertEqual(message["data"]["tokens"]["cached"], 8)
        self.assertAlmostEqual(message["data"]["tokens"]["cost"], (2 * 3.0 + 8 * 0.3 + 5 * 15.0) / 1e6)
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual(session["tokens"]["cached"], 8)

    async def test_without_a_price_there_is_no_cost(self):
        """A model the catalog gives no price for: no `cost` in the answer or the session."""
        self.model.serve_json("GET", "/v1/models", models_list(self.context, None, None))
        await self.providers_changed()
        self.model.script(reply("hello"))
        await self.prompt("hi")
        await run_ended(self.app, self.session["id"])
        [message] = await self.answers()
        self.assertNotIn("cost", message["data"]["tokens"])
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertNotIn("cost", session["tokens"])

    async def providers_changed(self):
        """Save the provider again: its models list is read anew."""
        saved = await call(self.app, "providers_save", {"id": self.providerid, "name": "Router",
                                                        "kind": "openrouter", "url": self.model.url})
        self.assertEqual(saved.status, 200, saved.body)
        [entry] = (await call(self.app, "providers_catalog")).json()["models"]
        self.assertIsNone(entry["price"])


class LongSessionTest(PricedCase):
    async def test_two_hundred_steps_in_an_8k_window(self):
        """Two hundred tool steps (reads of 30 lines, `seq` outputs, one whole-file read) in an
        8K window never fail: every request the model receives stays under the window, old
        outputs carry the pruning note, the whole file is cut to fit instead of compacted,
        compactions summarize and the request after one starts from the summary with the
        person's message whole, a steering message reaches the next request, a queued one runs
        after the run (its message in its place, after the run's last answer), and the
        session's totals and cost add up."""
        with open(f"{self.project['path']}/big.txt", "w") as handle:
            handle.write("".join(f"line {n} " + "z" * 60 + "\n" for n in range(1, 2001)))
        allowed = await call(self.app, "permissions_save", {"projectid": self.project["id"], "tool": "bash",
                                                            "pattern": "seq *", "action": "allow"})
        self.assertEqual(allowed.status, 200, allowed.body)
        steps = []
        for step in range(STEPS):
            if step == BIG_READ_AT:
                call_ = ("read", {"path": "big.txt"})
            elif step % 10 == 5:
                call_ = ("bash", {"command": f"seq {step * 1000} {step * 1000 + 300}"})
            else:
                call_ = ("read", {"path": "big.txt", "offset": (step * 30) % 1900 + 1, "limit": 30})
            steps.append(reply(f"step {step}", tool_calls=[call_], max_piece=WHOLE))
        reached, release = asyncio.Event(), asyncio.Event()
        steps[STEER_AT] = Held(steps[STEER_AT], reached, release)
        self.model.script(*steps, reply("done walking", max_piece=WHOLE), reply("the report", max_piece=WHOLE))
        self.app.runs.steps.limit = STEPS + 1
        answer = await self.prompt(PROMPT)
        self.assertEqual(answer.status, 200, answer.body)
        await asyncio.wait_for(reached.wait(), 60)
        steer_request = len(self.chats()) - 1
        steered = await self.prompt(STEER, steer=True)
        self.assertTrue(steered.json().get("steered"), steered.body)
        queued = await self.prompt(QUEUED)
        self.assertTrue(queued.json().get("queued"), queued.body)
        release.set()
        await self.settled()

        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual((session["status"], session["error"]), ("idle", None))
        chats = self.chats()
        compactions = [index for index, request in enumerate(chats) if is_compaction(request)]
        self.assertEqual(len(chats), STEPS + 2 + len(compactions))
        self.assertTrue(compactions, "no compaction happened")

        # Every request under the window, by the code's estimate and by its bytes.
        budget = WINDOW * WINDOW_SHARE
        for index, request in enumerate(chats):
            self.assertLessEqual(estimated_tokens(request.body["messages"], request.body.get("tools") or []),
                                 budget, index)
            self.assertLess(len(request.raw_body) / CHARS_PER_TOKEN, WINDOW, index)
        self.assertTrue(any("removed to fit the context window" in request.raw_body.decode() for request in chats))

        # The request after a compaction starts from its summary, the person's message whole.
        first = compactions[0]
        self.assertEqual(chats[first].body.get("tools") or [], [])
        after = chats[first + 1].body["messages"]
        self.assertEqual(after[1]["content"], COMPACTED_INTRO + SUMMARY.format(n=1))
        self.assertEqual(after[2]["content"], PROMPT)

        # The whole-file read, far past the window, reaches the next request cut, not compacted.
        cut = [index for index, request in enumerate(chats) if "were cut from its middle" in request.raw_body.decode()]
        self.assertTrue(cut, "the whole-file read was not cut")
        self.assertFalse(is_compaction(chats[cut[0]]))
        tool_messages = [m for m in chats[cut[0]].body["messages"] if m["role"] == "tool"]
        self.assertIn("line 1 ", tool_messages[-1]["content"])
        self.assertIn("read with offset and limit", tool_messages[-1]["content"])

        # The steering message reaches the request after the one it was sent during.
        self.assertNotIn(STEER, json.dumps(chats[steer_request].body))
        self.assertIn(STEER, json.dumps(chats[steer_request + 1].body))

        # The queued message runs after the run, as the last words of the last request.
        self.assertNotIn(QUEUED, json.dumps(chats[-2].body))
        self.assertEqual(chats[-1].body["messages"][-1]["content"], QUEUED)

        # Every tool call ran; the totals are the sums of the answers', with their cost.
        answers = await self.answers()
        tools = [part for message in answers for part in message["parts"] if part["kind"] == "tool"]
        self.assertEqual(len(tools), STEPS)
        self.assertEqual({part["status"] for part in tools}, {"done"})
        marked = [message for message in answers if message["data"].get("compaction")]
        self.assertEqual(len(marked), len(compactions))
        tokens = [message["data"]["tokens"] for message in answers]
        self.assertEqual(len(tokens), len(chats))
        totals = session["tokens"]
        self.assertEqual((totals["input"], totals["output"], totals["estimated"]),
                         (sum(t["input"] for t in tokens), sum(t["output"] for t in tokens), False))
        self.assertAlmostEqual(totals["cost"], sum(t["cost"] for t in tokens))
