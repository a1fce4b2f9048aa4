"""Long sessions on a server whose window nobody states: every provider's refusal of a request
for its length is met by a compaction and one retry, the window the refusal states is kept for
the model's later requests, an Ollama prompt cut silently counts as such a refusal, and a
conversation that no compaction makes fit ends the run with a sentence that says what to do."""

from __future__ import annotations

from tests.model_server import WindowedModel, anthropic_reply, gemini_reply, is_chat_request, ollama_reply, reply
from tests.test_loop import KEY, LoopCase
from tests.utils import call, run_ended
from totem.agent.answers import silently_truncated
from totem.agent.context import COMPACTION_INSTRUCTIONS
from totem.agent.provider_errors import KIND_CONTEXT_LENGTH

WINDOW = 8192
WHOLE = 1 << 20  # an answer leaves in one piece: the test is about the session, not the stream
SUMMARY = "Summary {n}: the person wants big.txt walked through; the parts read so far are noted."
# Each provider's context-length refusal (errors.json), with the kind of provider that sends it.
REFUSALS = [
    ("openai", "openai", "400_context_length_exceeded"),
    ("openrouter", "openrouter", "400_context_too_long"),
    ("deepseek", "deepseek", "400_context_too_long"),
    ("groq", "groq", "400_context_length_exceeded"),
    ("mistral", "mistral", "400_context_too_long"),
    ("together", "together", "400_context_too_long"),
    ("llamacpp", "llamacpp", "400_exceed_context_size"),
    ("lmstudio", "lmstudio", "400_context_overflow_string_error"),
    ("gemini", "gemini", "400_input_token_count_exceeded"),
    ("compatible", "vllm", "400_context_length_object_error"),
    ("compatible", "vllm", "400_context_length_nested_error"),
    ("anthropic", "anthropic", "400_prompt_too_long"),
]
SHORT_STEPS = 14
LONG_STEPS = 200
WHOLE_READ_EVERY = 10  # every so many steps the model reads all of big.txt, far past the window


def is_summary(request) -> bool:
    system = (request.body or {}).get("system")  # Anthropic's system apart, in blocks
    if isinstance(system, list) and [block.get("text") for block in system] == [COMPACTION_INSTRUCTIONS]:
        return True
    instruction = (request.body or {}).get("systemInstruction")  # Gemini's
    if isinstance(instruction, dict) and [part.get("text") for part in instruction.get("parts") or []] \
            == [COMPACTION_INSTRUCTIONS]:
        return True
    messages = (request.body or {}).get("messages") or []
    return bool(messages) and messages[0].get("content") == COMPACTION_INSTRUCTIONS


def step_call(step: int) -> tuple[str, dict]:
    if step % WHOLE_READ_EVERY == WHOLE_READ_EVERY - 1:
        return "read", {"path": "big.txt"}
    return "read", {"path": "big.txt", "offset": (step * 30) % 1900 + 1, "limit": 30}


def test_truncation_needs_a_clear_margin():
    """Only a prompt sent well over num_ctx and read well under what was sent is a cut one:
    a prompt under the window, a server that counts a little differently, a body without
    num_ctx (not Ollama's) or without counts are not."""
    big = {"options": {"num_ctx": 1000}, "messages": [{"role": "user", "content": "x" * 14_000}]}
    cut = silently_truncated({"prompt_tokens": 1000}, big)
    assert cut is not None and cut.kind == KIND_CONTEXT_LENGTH and cut.window == 1000
    assert "1000-token window" in cut.message
    small = {"options": {"num_ctx": 1000}, "messages": [{"role": "user", "content": "x" * 3000}]}
    assert silently_truncated({"prompt_tokens": 100}, small) is None  # sent under the window
    assert silently_truncated({"prompt_tokens": 3800}, big) is None  # read more than num_ctx
    assert silently_truncated({"prompt_tokens": 1000}, {"messages": big["messages"]}) is None
    assert silently_truncated(None, big) is None
    assert silently_truncated({"prompt_tokens": 0}, big) is None


class ServerWindowCase(LoopCase):
    """A session on a provider of `kind` served by a WindowedModel (its window stated nowhere)."""

    async def open_server(self, kind: str, window: int, refusals: list[tuple[str, str]]) -> None:
        await self.ws.close()  # these tests read the store and the server's requests, not the events
        native = kind == "ollama"
        self.kind, self.native = kind, native

        def summary(n: int):
            return self.answer(SUMMARY.format(n=n))

        self.server = await WindowedModel(window, refusals, is_summary, summary).__aenter__()
        self.addAsyncCleanup(self.server.__aexit__, None, None, None)
        saved = await call(self.app, "providers_save", {"name": f"Windowed {kind}", "kind": kind,
                                                        "url": self.server.base if kind in ("ollama", "anthropic", "gemini")
                                                        else self.server.url,
                                                        "key": KEY})
        self.assertEqual(saved.status, 200, saved.body)
        self.modelref = f"{saved.json()['id']}/scripted-model"
        with open(f"{self.project['path']}/big.txt", "w") as handle:
            handle.write("".join(f"line {n} " + "z" * 60 + "\n" for n in range(1, 2001)))

    def answer(self, text: str = "", calls: tuple = ()):
        if self.native:
            return ollama_reply(text, tool_calls=calls)
        if self.kind == "anthropic":
            return anthropic_reply(text, tool_calls=calls, max_piece=WHOLE)
        if self.kind == "gemini":
            return gemini_reply(text, tool_calls=calls, max_piece=WHOLE)
        return reply(text, tool_calls=calls, max_piece=WHOLE)

    async def walk(self, steps: int, prompt: str = "Walk through big.txt, a part at a time.") -> dict:
        """A run of `steps` tool steps and a last answer; the session after it."""
        self.server.script(*(self.answer(f"step {step}", (step_call(step),)) for step in range(steps)),
                           self.answer("done walking"))
        self.app.runs.steps.limit = steps + 1
        answer = await self.prompt(prompt)
        self.assertEqual(answer.status, 200, answer.body)
        await run_ended(self.app, self.session["id"], timeout_ms=120_000)
        return (await call(self.app, "sessions_read", ident=self.session["id"])).json()

    async def tool_statuses(self) -> list[str]:
        messages = (await call(self.app, "sessions_messages", ident=self.session["id"],
                               query="limit=500")).json()["messages"]
        return [part["status"] for message in messages if message["role"] == "assistant"
                for part in message["parts"] if part["kind"] == "tool"]

    def chats(self) -> list:
        return [r for r in self.server.requests if is_chat_request(r)]

    async def assert_never_ended_on_the_window(self, session: dict, steps: int) -> None:
        self.assertEqual((session["status"], session["error"]), ("idle", None))
        self.assertGreaterEqual(self.server.refused, 1, "the server never refused: the test proves nothing")
        self.assertGreaterEqual(self.server.summaries, 1, "no compaction after a refusal")
        self.assertEqual(await self.tool_statuses(), ["done"] * steps)
        self.assertEqual(self.server._script, type(self.server._script)())  # every answer was asked for


class RefusalTest(ServerWindowCase):
    async def test_each_providers_refusal_compacts_retries_and_keeps_the_window(self):
        """For each provider's wording of a context-length refusal: the run compacts, sends the
        request again and goes on to its end; the window the refusal taught is the model's for
        a later prompt, which the server then never refuses (Totem compacts before it must)."""
        for kind, provider, case in REFUSALS:
            with self.subTest(provider=provider, case=case):
                self.session = await self.create_session(self.project["id"])
                await self.open_server(kind, WINDOW, [(provider, case)])
                session = await self.walk(SHORT_STEPS)
                await self.assert_never_ended_on_the_window(session, SHORT_STEPS)
                kept = (await self.app.providers.target(self.modelref)).context
                self.assertIsNotNone(kept)
                self.assertLessEqual(kept, WINDOW)
                refused = self.server.refused
                session = await self.walk(3, "Now the first lines again.")
                self.assertEqual((session["status"], session["error"]), ("idle", None))
                self.assertEqual(self.server.refused, refused, "a later prompt was refused again")

    async def test_two_hundred_steps_in_an_8k_window_never_end_on_a_context_error(self):
        """Two hundred steps, a whole-file read every ten, on a vLLM-like server with an 8K
        window it enforces and states nowhere (Totem guesses 32K): the run ends done."""
        await self.open_server("compatible", WINDOW, [(p, c) for _k, p, c in REFUSALS])
        session = await self.walk(LONG_STEPS)
        await self.assert_never_ended_on_the_window(session, LONG_STEPS)
        for request in self.chats():
            self.assertNotIn("no response scripted", request.raw_body.decode())


class OllamaCutTest(ServerWindowCase):
    async def test_a_prompt_ollama_cut_silently_counts_as_a_refusal(self):
        """Ollama reads only num_ctx tokens of a longer prompt and says so only in
        prompt_eval_count: the run compacts and retries as for a refusal, and never goes on
        from an answer to a prompt the model saw only the end of."""
        await self.open_server("ollama", WINDOW, [])
        session = await self.walk(SHORT_STEPS)
        await self.assert_never_ended_on_the_window(session, SHORT_STEPS)
        for request in self.chats():  # every request says the window Totem counts on
            self.assertEqual(request.body["options"]["num_ctx"], WINDOW)

class TooSmallTest(ServerWindowCase):
    async def test_a_compaction_that_cannot_make_it_fit_ends_with_what_to_do(self):
        """A window smaller than what any request needs: the run compacts once, then ends with a
        sentence saying so and what to do, never a loop of refusals."""
        await self.open_server("llamacpp", 200, [("llamacpp", "400_exceed_context_size")])
        self.server.script(self.answer("never sent"))
        answer = await self.prompt("Look at a.txt")
        self.assertEqual(answer.status, 200, answer.body)
        await run_ended(self.app, self.session["id"])
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual(session["status"], "error")
        self.assertIn("does not fit the model's context window even after compacting", session["error"])
        self.assertIn("bigger context window", session["error"])
        self.assertIn("new session", session["error"])
        self.assertLessEqual(len(self.chats()), 3)  # the request, the compaction, the retry at most
