"""The agent loop end to end: the real server, a real WebSocket client and a scripted model."""

import asyncio
import base64
import glob
import json
import logging
import os
import time

from tests.model_server import HttpError, ScriptedModel, Stall, reply, text_chunks
from tests.utils import MS, TotemCase, call, next_event, open_ws, request, run_ended
from totem.tools import Registry, Tool, ToolResult, default_registry

KEY = "sk-test-NEVER-LEAK-0123456789abcdef"


class WaitTool(Tool):
    """A tool that runs until it is cancelled: a stand-in for a long search."""

    name = "wait"
    description = "Wait."
    schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def __init__(self):
        self.started = asyncio.Event()
        self.cancelled = False

    def subjects(self, args, ctx):
        return ["."]

    async def run(self, args, ctx):
        self.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return ToolResult("never")


class LoopCase(TotemCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.model = await ScriptedModel().__aenter__()
        self.addAsyncCleanup(self.model.__aexit__, None, None, None)
        self.app.runs.steps.backoff_first_s = 0.01
        root = self.folder("proj")
        with open(os.path.join(root, "a.txt"), "w") as handle:
            handle.write("hello world\nsecond line\n")
        self.project = await self.open_project("proj")
        self.session = await self.create_session(self.project["id"])
        answer = await call(self.app, "providers_save", {"name": "Scripted", "kind": "openai",
                                                         "url": self.model.url, "key": KEY})
        self.assertEqual(answer.status, 200, answer.body)
        self.provider = answer.json()
        self.modelref = f"{self.provider['id']}/scripted-model"
        self.ws = await open_ws(self.app)
        self.addAsyncCleanup(self.ws.close)
        await self.ws.send(json.dumps({"type": "subscribe", "sessionid": self.session["id"]}))
        for _ in range(200):
            if self.app.hub.subscribed(self.session["id"]):
                break
            await asyncio.sleep(5 * MS)

    async def use_only(self, name, kind, models, model):
        """The scripted server as the one provider, of `kind` (its models page `models`), so that
        every request the server sees is that kind's own; the prompts use its `model`."""
        removed = await call(self.app, "providers_remove", ident=self.provider["id"], method="POST")
        self.assertEqual(removed.status, 200, removed.body)
        self.model.serve_models(models)
        answer = await call(self.app, "providers_save", {"name": name, "kind": kind,
                                                         "url": self.model.base, "key": KEY})
        self.assertEqual(answer.status, 200, answer.body)
        self.provider = answer.json()
        self.modelref = f"{self.provider['id']}/{model}"

    async def prompt(self, text="Look at a.txt", **extra):
        body = {"text": text, "model": self.modelref} | extra
        return await call(self.app, "sessions_prompt", body, ident=self.session["id"])

    async def events_until(self, status, timeout_ms=5000):
        """Collect events up to the session.status with the given status."""
        collected = []
        deadline = time.monotonic() + timeout_ms * MS
        while True:
            event = await next_event(self.ws, max(1, (deadline - time.monotonic()) / MS))
            collected.append(event)
            if event["type"] == "session.status" and event["data"]["status"] == status:
                return collected


class LoopTest(LoopCase):
    async def test_prompt_two_tool_steps_event_sequence(self):
        """A prompt with two tool steps streams the documented events in order and stores it all."""
        self.model.script(reply(tool_calls=[("read", {"path": "a.txt"})]),
                          reply(tool_calls=[("grep", {"pattern": "second"})]),
                          reply("It says hello."))
        answer = await self.prompt()
        self.assertEqual(answer.status, 200, answer.body)
        messageid = answer.json()["messageid"]
        events = await self.events_until("idle")
        types = [e["type"] for e in events]
        self.assertEqual(types[0], "message.created")
        self.assertEqual(events[0]["data"]["message"]["id"], messageid)
        self.assertIn("session.updated", types)  # the first prompt names the session
        self.assertEqual(types[types.index("session.status")], "session.status")
        self.assertEqual(types.count("message.created"), 4)  # the user's and three model answers
        tool_events = [e for e in events if e["type"] in ("part.created", "part.updated", "part.closed")
                       and (e["data"].get("part", {}).get("kind") == "tool" or e["type"] == "part.closed")]
        statuses = [e["data"]["part"]["status"] for e in tool_events if e["type"] != "part.closed"]
        self.assertEqual(statuses[:3], ["pending", "running", "done"])
        deltas = "".join(e["data"]["text"] for e in events if e["type"] == "part.delta")
        self.assertEqual(deltas, "It says hello.")
        # Every part that opened was closed.
        opened = {e["data"]["part"]["id"] for e in events if e["type"] == "part.created"}
        closed = {e["data"]["partid"] for e in events if e["type"] == "part.closed"}
        self.assertEqual(opened, closed)
        # The second request carries the first tool result inside the untrusted envelope.
        second = self.model.requests[1].body
        tool_message = [m for m in second["messages"] if m["role"] == "tool"][0]
        self.assertIn('trust="untrusted"', tool_message["content"])
        self.assertIn("hello world", tool_message["content"])
        self.assertEqual({t["function"]["name"] for t in second["tools"]} >= {"read", "glob", "grep"}, True)
        self.assertTrue(second["stream"])
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        self.assertEqual([m["role"] for m in stored], ["user", "assistant", "assistant", "assistant"])
        read_part = stored[1]["parts"][0]
        self.assertEqual(read_part["status"], "done")
        self.assertEqual(read_part["data"]["input"], {"path": "a.txt"})
        self.assertEqual(read_part["data"]["decision"]["action"], "allow")
        self.assertIsNotNone(stored[3]["usage"])
        self.assertEqual(stored[3]["model"], self.modelref)
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual(session["name"], "Look at a.txt")
        self.assertEqual(session["status"], "idle")

    async def test_tool_outside_project_denied(self):
        """A read outside the project is denied and the model is told so."""
        self.model.script(reply(tool_calls=[("read", {"path": "../../etc/passwd"})]), reply("Sorry."))
        await self.prompt()
        await self.events_until("idle")
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        part = stored[1]["parts"][0]
        self.assertEqual(part["status"], "denied")
        self.assertIn("outside the project", part["data"]["error"])
        tool_message = [m for m in self.model.requests[1].body["messages"] if m["role"] == "tool"][0]
        self.assertIn("outside the project", tool_message["content"])

    async def test_bad_tool_calls_return_errors(self):
        """Malformed JSON, an unknown tool and a schema violation go back to the model as errors."""
        self.model.script(reply(tool_calls=[("read", '{"path": '), ("nosuch", {}), ("read", {"path": 5})]),
                          reply("ok"))
        await self.prompt()
        await self.events_until("idle")
        tool_messages = [m["content"] for m in self.model.requests[1].body["messages"] if m["role"] == "tool"]
        self.assertEqual(len(tool_messages), 3)
        self.assertIn("nosuch", tool_messages[1])
        self.assertIn("path", tool_messages[2])

    async def test_abort_mid_stream(self):
        """Abort during streaming stops within a second, closes parts as aborted and the stream."""
        self.model.script(Stall(events=text_chunks("partial answer")))
        await self.prompt()
        while (await next_event(self.ws))["type"] != "part.delta":
            pass
        started = time.monotonic()
        answer = await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")
        self.assertEqual(answer.status, 200)
        events = await self.events_until("aborted")
        self.assertLess(time.monotonic() - started, 1.0)
        self.assertIn("part.closed", [e["type"] for e in events])
        await self.model.wait_disconnect(1.0)
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        self.assertEqual(stored[-1]["parts"][0]["status"], "aborted")
        self.assertTrue(stored[-1]["parts"][0]["text"].startswith("partial"))

    async def test_abort_mid_tool(self):
        """Abort while a tool runs cancels it, closes its part as aborted and ends the run."""
        tool = WaitTool()
        self.app.runs.registry = Registry([*(default_registry().get(n) for n in default_registry().names()), tool])
        self.model.script(reply(tool_calls=[("wait", {})]))
        await self.prompt()
        while (event := await next_event(self.ws))["type"] != "permission.ask":
            pass  # a tool that no rule covers asks
        await call(self.app, "permissions_reply", {"reply": "once"}, ident=event["data"]["id"])
        await asyncio.wait_for(tool.started.wait(), 2000 * MS)
        started = time.monotonic()
        answer = await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")
        self.assertEqual(answer.status, 200)
        await self.events_until("aborted")
        self.assertLess(time.monotonic() - started, 1.0)
        self.assertTrue(tool.cancelled)
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        self.assertEqual(stored[-1]["parts"][0]["status"], "aborted")
        self.assertIsNotNone(stored[-1]["parts"][0]["closed"])

    async def test_subscriber_mid_stream_gets_open_parts(self):
        """A client that subscribes mid-stream gets the open part with its text so far, then deltas."""
        self.model.script(Stall(events=text_chunks("partial answer", pieces=2)))
        await self.prompt()
        while (await next_event(self.ws))["type"] != "part.delta":
            pass
        await asyncio.sleep(100 * MS)  # the second delta has arrived too
        async with await open_ws(self.app) as late:
            await late.send(json.dumps({"type": "subscribe", "sessionid": self.session["id"]}))
            first = await next_event(late)
            self.assertEqual(first["type"], "part.created")
            self.assertEqual(first["data"]["part"]["text"], "partial answer")
            self.assertEqual(first["data"]["part"]["status"], "streaming")
            await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")
            updated = await next_event(late)
            self.assertEqual((updated["type"], updated["data"]["part"]["status"]), ("part.updated", "aborted"))
            self.assertEqual((await next_event(late))["type"], "part.closed")

    async def test_second_prompt_while_running_is_queued(self):
        """A prompt while the session runs waits for the run (queued), never interleaved."""
        self.model.script(Stall(events=text_chunks("slow")))
        await self.prompt()
        while (await next_event(self.ws, 20_000))["type"] != "part.delta":
            pass  # the model has the first request and streams it: the run is under way
        answer = await self.prompt("again")
        self.assertEqual(answer.status, 200, answer.body)
        self.assertTrue(answer.json()["queued"])
        self.assertEqual(len([r for r in self.model.requests if r.path.endswith("/chat/completions")]), 1)
        await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")

    async def test_abort_idle_400(self):
        """Abort with nothing running says so."""
        answer = await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")
        self.assertEqual(answer.status, 400)

    async def test_retry_on_429_then_success(self):
        """A 429 publishes a retry error event and the run goes on after the pause."""
        self.model.script(HttpError({"error": {"message": "slow down"}}, 429, {"Retry-After": "0"}), reply("fine"))
        await self.prompt()
        events = await self.events_until("idle")
        errors = [e for e in events if e["type"] == "error"]
        self.assertEqual(len(errors), 1)
        self.assertIs(errors[0]["data"]["retry"], True)

    async def test_401_ends_with_error(self):
        """A rejected key ends the run with an error event before status error."""
        self.model.script(HttpError({"error": {"message": "Incorrect API key provided"}}, 401))
        await self.prompt()
        events = await self.events_until("error")
        self.assertEqual(events[-2]["type"], "error")
        self.assertIs(events[-2]["data"]["retry"], False)
        self.assertIn("401", events[-2]["data"]["message"])
        # Whoever opens the session later reads why it failed; the next run clears it.
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual((session["status"], session["error"]), ("error", events[-2]["data"]["message"]))
        self.model.script(reply("fine now"))
        await self.prompt("again")
        await self.events_until("idle")
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertIsNone(session["error"])

    async def test_bad_prompt_inputs(self):
        """Bad prompt inputs answer 400 naming the field and start nothing."""
        cases = [
            ({"model": self.modelref}, "text"),
            ({"text": "x", "model": self.modelref, "mode": "yolo"}, "mode"),
            ({"text": "x", "model": self.modelref, "autoaccept": "yes"}, "autoaccept"),
            ({"text": "x", "model": self.modelref, "reasoning": "max"}, "reasoning"),
            ({"text": "x", "model": self.modelref, "attachments": [{"name": "a", "mime": "text/plain",
                                                                     "data": "!!notbase64"}]}, "attachments[0].data"),
            ({"text": "x", "model": self.modelref, "attachments": "nope"}, "attachments"),
            ({"text": "x", "model": "nosuchprovider/model"}, "model"),
            ({"text": "x"}, "model"),
            ({"text": 5, "model": self.modelref}, "text"),
        ]
        for body, field in cases:
            answer = await call(self.app, "sessions_prompt", body, ident=self.session["id"])
            self.assertEqual(answer.status, 400, body)
            self.assertIn(field, [e["name"] for e in answer.json()], body)
        self.assertEqual(self.model.requests, [])
        answer = await call(self.app, "sessions_prompt", {"text": "x", "model": self.modelref}, ident="nope")
        self.assertEqual(answer.status, 404)

    async def test_attachments_reach_model_and_are_served(self):
        """An image goes to the model as an image part, a text file inline; both are served back."""
        png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
        self.model.script(reply("seen"))
        answer = await self.prompt("What is this?", attachments=[
            {"name": "dot.png", "mime": "image/png", "data": base64.b64encode(png).decode()},
            {"name": "notes.txt", "mime": "text/plain", "data": base64.b64encode(b"remember me").decode()},
            {"name": "evil.html", "mime": "text/html", "data": base64.b64encode(b"<script>x</script>").decode()},
            {"name": "blob.bin", "mime": "application/octet-stream", "data": base64.b64encode(b"\x00\x01").decode()},
        ])
        self.assertEqual(answer.status, 200, answer.body)
        await self.events_until("idle")
        user = [m for m in self.model.requests[0].body["messages"] if m["role"] == "user"][0]
        kinds = [c["type"] for c in user["content"]]
        self.assertIn("image_url", kinds)
        self.assertTrue(any("remember me" in c.get("text", "") for c in user["content"]))
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        files = {f["name"]: f for f in stored[0]["data"]["attachments"]}
        image = await request(self.app, "GET", f"/attachments/{files['dot.png']['id']}/")
        self.assertEqual((image.status, image.header("content-type"), image.body), (200, "image/png", png))
        html = await request(self.app, "GET", f"/attachments/{files['evil.html']['id']}/")
        self.assertEqual(html.header("content-type"), "text/plain; charset=utf-8")
        self.assertEqual(html.header("x-content-type-options"), "nosniff")
        blob = await request(self.app, "GET", f"/attachments/{files['blob.bin']['id']}/")
        self.assertEqual(blob.header("content-type"), "application/octet-stream")
        self.assertTrue(blob.header("content-disposition").startswith("attachment"))
        missing = await request(self.app, "GET", "/attachments/nope/")
        self.assertEqual(missing.status, 404)

    async def test_agents_md_and_untrusted_prompt(self):
        """The system prompt says tool output is untrusted and includes AGENTS.md."""
        with open(os.path.join(self.folder("proj"), "AGENTS.md"), "w") as handle:
            handle.write("Always use tabs.")
        self.model.script(reply("ok"))
        await self.prompt()
        await self.events_until("idle")
        system = self.model.requests[0].body["messages"][0]
        self.assertEqual(system["role"], "system")
        self.assertIn("untrusted", system["content"])
        self.assertIn("Always use tabs.", system["content"])

    async def test_text_tool_call_recognised(self):
        """A tool call written as text by a local model is run as a tool call."""
        self.model.script(reply('<tool_call>{"name": "read", "arguments": {"path": "a.txt"}}</tool_call>'),
                          reply("done"))
        await self.prompt()
        await self.events_until("idle")
        self.assertEqual(len(self.model.requests), 2)
        tool_message = [m for m in self.model.requests[1].body["messages"] if m["role"] == "tool"][0]
        self.assertIn("hello world", tool_message["content"])

    async def test_loop_guard_asks(self):
        """The same call three times in a row asks the person; Stop ends the run."""
        self.model.script(*[reply(tool_calls=[("read", {"path": "a.txt"})]) for _ in range(3)])
        await self.prompt()
        while True:
            event = await next_event(self.ws)
            if event["type"] == "question.ask":
                break
        self.assertIn("three", event["data"]["text"].replace("3", "three"))
        answer = await call(self.app, "questions_reply", {"answer": "Stop"}, ident=event["data"]["id"])
        self.assertEqual(answer.status, 200)
        await self.events_until("idle")
        self.assertEqual(len(self.model.requests), 3)

    async def test_key_never_leaks(self):
        """The provider key is in no answer, no event, no log line and not in clear in the database."""
        records = []
        handler = logging.Handler(logging.DEBUG)
        handler.emit = lambda record: records.append(record.getMessage() + str(record.args) + str(record.exc_info))
        logging.getLogger().addHandler(handler)
        self.addCleanup(logging.getLogger().removeHandler, handler)
        self.model.script(reply(tool_calls=[("read", {"path": "a.txt"})]), HttpError(
            {"error": {"message": f"Incorrect API key provided: {KEY}"}}, 401))
        await self.prompt()
        events = await self.events_until("error")
        self.assertFalse([r for r in records if KEY in r])
        self.assertEqual(self.model.requests[0].headers.get("authorization"), f"Bearer {KEY}")
        self.assertNotIn(KEY, json.dumps(events))
        for name, ident in (("providers", None), ("sessions_messages", self.session["id"]),
                            ("sessions_read", self.session["id"]), ("providers_catalog", None)):
            answer = await call(self.app, name, ident=ident)
            self.assertNotIn(KEY.encode(), answer.body, name)
        for path in glob.glob(os.path.join(self.app.config.data, "*")):
            with open(path, "rb") as handle:
                self.assertNotIn(KEY.encode(), handle.read(), path)
        for message in self.model.requests[0].body["messages"]:
            self.assertNotIn(KEY, json.dumps(message))

    async def test_step_limit(self):
        """A run stops at the step limit with an error event."""
        self.app.runs.steps.limit = 2
        self.model.script(reply(tool_calls=[("read", {"path": "a.txt"})]),
                          reply(tool_calls=[("glob", {"pattern": "*"})]))
        await self.prompt()
        events = await self.events_until("error")
        self.assertIn("step limit", events[-2]["data"]["message"])
        await run_ended(self.app, self.session["id"])
        messages = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        self.assertEqual((messages[-1]["data"]["ended"], messages[-1]["data"]["errorkind"]), ("error", "steps"))
