"""Wire details of a conversation sent back to the model, through the real loop and the scripted
model (issue 11): OpenRouter's reasoning_details, empty tool-call arguments, a write's content
stored once, and attachments read and encoded once per run."""

from __future__ import annotations

import asyncio
import base64
import json
import os

from tests.model_server import (
    Fixture,
    Stream,
    chunk,
    expected_cases,
    finish_chunk,
    reply,
    tool_call_chunks,
    usage_chunk,
)
from tests.test_loop import KEY, LoopCase
from tests.utils import call
from totem.agent.context import ENCODE_THREAD_BYTES, RunAttachments, call_arguments

MARKER = "0123456789abcdef"
DETAILS = [{"type": "reasoning.text", "text": "Read", "format": "anthropic-claude-v1", "index": 0},
           {"type": "reasoning.text", "text": " it first.", "format": "anthropic-claude-v1", "index": 0},
           {"type": "reasoning.text", "signature": "c2lnbmF0dXJl", "format": "anthropic-claude-v1", "index": 0}]
MERGED = [{"type": "reasoning.text", "text": "Read it first.", "signature": "c2lnbmF0dXJl",
           "format": "anthropic-claude-v1", "index": 0}]


def reasoning_tool_step() -> Stream:
    """An OpenRouter answer as Anthropic models stream it: reasoning with its details in
    fragments (the signature last), then a tool call."""
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"role": "assistant", "content": None, "reasoning": d.get("text"), "reasoning_details": [d]})
               for d in DETAILS]
    events += tool_call_chunks("read", {"path": "a.txt"})
    return Stream(events + [finish_chunk("tool_calls"), usage_chunk()])


def assistant_with_calls(request) -> dict:
    return next(m for m in request.body["messages"] if m["role"] == "assistant" and m.get("tool_calls"))


class WireDetailsTest(LoopCase):
    async def save_provider(self, kind: str) -> str:
        answer = await call(self.app, "providers_save", {"name": kind, "kind": kind, "url": self.model.url, "key": KEY})
        self.assertEqual(answer.status, 200, answer.body)
        return f"{answer.json()['id']}/scripted-model"

    # The stored side is one line of loop.py `_answer` (the message's data keeps
    # `result.reasoning_details`), which the lead owns; remove this mark when it lands.
    async def test_openrouter_reasoning_details_sent_back_with_the_tool_call(self):
        """OpenRouter's reasoning_details are stored with the answer and go back, merged into
        whole blocks, on the assistant message of the tool call; the attribution header rides
        on every request."""
        model = await self.save_provider("openrouter")
        self.model.script(reasoning_tool_step(), reply("It says hello."))
        answer = await self.prompt(model=model)
        self.assertEqual(answer.status, 200, answer.body)
        await self.events_until("idle")
        first, second = [r for r in self.model.requests if r.method == "POST"]
        self.assertEqual([first.headers["x-title"], second.headers["x-title"]], ["Totem", "Totem"])
        self.assertEqual(assistant_with_calls(second)["reasoning_details"], MERGED)
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        self.assertEqual(stored[1]["data"]["reasoning_details"], DETAILS)

    async def test_reasoning_details_not_sent_to_other_kinds(self):
        """An OpenAI-compatible server other than OpenRouter never gets reasoning_details (Groq and
        Mistral refuse fields they do not know)."""
        self.model.script(reasoning_tool_step(), reply("It says hello."))
        await self.prompt()
        await self.events_until("idle")
        second = [r for r in self.model.requests if r.method == "POST"][1]
        self.assertNotIn("reasoning_details", assistant_with_calls(second))
        self.assertNotIn("x-title", second.headers)

    async def test_empty_tool_arguments_sent_back_as_empty_object(self):
        """A tool call whose streamed arguments are empty (Bedrock via OpenRouter) goes back as
        "{}", never ""."""
        case = expected_cases("openrouter")["tool_call_no_arguments_bedrock"]
        self.assertEqual(case["tool_calls"][0]["arguments"], "")
        self.model.script(Fixture("openrouter", "tool_call_no_arguments_bedrock"), reply("done"))
        await self.prompt()
        await self.events_until("idle")
        second = [r for r in self.model.requests if r.method == "POST"][1]
        call_ = assistant_with_calls(second)["tool_calls"][0]
        self.assertEqual((call_["id"], call_["function"]), (case["tool_calls"][0]["id"],
                                                            {"name": "git_status", "arguments": "{}"}))

    async def write_big_file(self) -> tuple[str, list[dict]]:
        content = "line of the file\n" * 20_000
        self.model.script(reply(tool_calls=[("write", {"path": "big.txt", "content": content})], max_piece=16384),
                          reply("done"))
        answer = await self.prompt("Write big.txt", autoaccept=True)
        self.assertEqual(answer.status, 200, answer.body)
        await self.events_until("idle")
        with open(os.path.join(self.folder("proj"), "big.txt"), encoding="utf-8") as handle:
            self.assertEqual(handle.read(), content)
        return content, (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]

    async def test_write_content_sent_back_whole(self):
        """The write call goes back to the model with its whole content as JSON arguments."""
        content, _stored = await self.write_big_file()
        second = [r for r in self.model.requests if r.method == "POST"][1]
        arguments = assistant_with_calls(second)["tool_calls"][0]["function"]["arguments"]
        self.assertEqual(json.loads(arguments), {"path": "big.txt", "content": content})

    # The stored side is one line of calls.py (drop `arguments` once `input` holds them), which
    # the lead owns; context.call_arguments already writes the text back. Remove this mark then.
    async def test_write_content_stored_once(self):
        """A write's content is stored once in its part (as `input`, which the UI reads)."""
        content, stored = await self.write_big_file()
        part = next(p for m in stored for p in m["parts"] if p["kind"] == "tool")
        self.assertEqual(part["data"]["input"], {"path": "big.txt", "content": content})
        self.assertLess(len(json.dumps(part["data"])), 1.5 * len(content))  # once, not twice

    async def test_attachments_read_and_encoded_once_per_run(self):
        """A run of three steps reads and encodes each attachment once, and every request carries
        the same content."""
        image = os.urandom(ENCODE_THREAD_BYTES + 1)  # large enough to be encoded off the loop
        reads = []
        get_attachment = self.app.store.get_attachment

        async def counting(attachmentid):
            reads.append(attachmentid)
            return await get_attachment(attachmentid)

        self.app.store.get_attachment = counting
        self.model.script(reply(tool_calls=[("read", {"path": "a.txt"})]),
                          reply(tool_calls=[("grep", {"pattern": "second"})]), reply("seen"))
        answer = await self.prompt("What is this?", attachments=[
            {"name": "shot.png", "mime": "image/png", "data": base64.b64encode(image).decode()},
            {"name": "notes.txt", "mime": "text/plain", "data": base64.b64encode(b"remember me").decode()}])
        self.assertEqual(answer.status, 200, answer.body)
        await self.events_until("idle")
        requests = [r for r in self.model.requests if r.method == "POST"]
        self.assertEqual(len(requests), 3)
        self.assertEqual(len(reads), 2)
        self.assertEqual(len(set(reads)), 2)
        contents = [[m for m in r.body["messages"] if m["role"] == "user"][0]["content"] for r in requests]
        self.assertTrue(contents[0] == contents[1] == contents[2])
        self.assertEqual(contents[0][1]["image_url"]["url"],
                         "data:image/png;base64," + base64.b64encode(image).decode())
        self.assertIn("remember me", contents[0][2]["text"])


class FakeStore:
    """Stands in for the store's attachments table and counts its reads."""

    def __init__(self, rows: dict[str, dict]):
        self.rows = rows
        self.looks: list[str] = []  # attachment_info: name, type and size
        self.reads: list[str] = []  # get_attachment: the content too

    async def attachment_info(self, attachmentid: str) -> dict | None:
        self.looks.append(attachmentid)
        row = self.rows.get(attachmentid)
        return None if row is None else {key: row[key] for key in ("name", "mime")} | {"size": len(row["data"])}

    async def get_attachment(self, attachmentid: str) -> dict | None:
        self.reads.append(attachmentid)
        return self.rows.get(attachmentid)


def test_run_attachments_encode_each_once():
    """Asked at every step, the run's attachments are read and encoded once each (a removed one
    is left out, and not read again); every step gets the very same content."""
    rows = {"a1": {"name": "dot.png", "mime": "image/png", "data": b"\x89PNG"},
            "a2": {"name": "notes.txt", "mime": "text/plain", "data": b"remember me"}}
    history = [{"id": "u1", "role": "user", "data": {"attachments": [{"id": "a1"}, {"id": "a2"}, {"id": "gone"}]},
                "parts": [{"kind": "text", "text": "hi"}]},
               {"id": "m1", "role": "assistant", "data": {}, "parts": []}]
    store, attachments = FakeStore(rows), RunAttachments()

    async def steps():
        return [await attachments.by_message(store, history, MARKER) for _ in range(3)]

    first, second, third = asyncio.run(steps())
    assert (store.looks, store.reads, attachments.encoded) == (["a1", "a2", "gone"], ["a1", "a2"], 2)
    assert list(first) == ["u1"] and len(first["u1"]) == 2
    assert all(a is b is c for a, b, c in zip(first["u1"], second["u1"], third["u1"], strict=True))
    assert first["u1"][0] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}}
    assert f"<data-{MARKER} " in first["u1"][1]["text"]


def test_run_attachments_a_big_file_only_named_is_never_read():
    """A file that is neither an image nor small enough to inline is named from its size and
    type: its content is never read back from the store."""
    rows = {"big": {"name": "dump.bin", "mime": "application/octet-stream", "data": b"x" * (300 * 1024)}}
    history = [{"id": "u1", "role": "user", "data": {"attachments": [{"id": "big"}]},
                "parts": [{"kind": "text", "text": "hi"}]}]
    store, attachments = FakeStore(rows), RunAttachments()
    found = asyncio.run(attachments.by_message(store, history, MARKER))
    assert (store.looks, store.reads) == (["big"], [])
    assert found["u1"][0]["text"] == "[attached file dump.bin (application/octet-stream, 307200 bytes) is not text and is not shown]"


def test_call_arguments_from_input_or_text():
    """A stored call's arguments go back as the text the model sent, else written from `input`;
    empty ones are "{}"."""
    assert call_arguments({"arguments": '{"path":"a"}', "input": {"path": "a"}}) == '{"path":"a"}'
    assert json.loads(call_arguments({"input": {"path": "a", "content": "é"}})) == {"path": "a", "content": "é"}
    assert call_arguments({"arguments": "{oops"}) == "{oops"
    for data in ({"arguments": ""}, {"arguments": "  "}, {"input": {}}, {}):
        assert call_arguments(data) == "{}", data
