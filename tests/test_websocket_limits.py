"""The WebSocket against hostile clients (issue 11): bounded memory, bounded queues, no raise.

A real `websockets` client against the real server: re-subscribing without reading keeps the
server's memory flat, a slow reader past the byte bound is closed with 1013, every malformed
message closes with 1008 and one log line, and each event is encoded once for all subscribers.
"""

import asyncio
import json
import logging
import resource
from unittest import mock

from websockets.exceptions import ConnectionClosed

from tests.model_server import ScriptedModel, Stall, text_chunks
from tests.utils import MS, TotemCase, call, next_event, open_ws, publish_until_dropped, read_until_closed
from totem import events
from totem.events import PartDelta, SessionStatus

KEY = "sk-test-NEVER-LEAK-0123456789abcdef"
OPEN_PART_CHARS = 256 * 1024
RESUBSCRIBES = 1000
PAGE_BYTES = resource.getpagesize()


def resident_bytes() -> int:
    """This process's resident memory: the server runs in it."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * PAGE_BYTES


async def subscribe(ws, sessionid: str) -> None:
    await ws.send(json.dumps({"type": "subscribe", "sessionid": sessionid}))


async def wait_until(condition, what: str) -> None:
    for _ in range(400):
        if condition():
            return
        await asyncio.sleep(5 * MS)
    raise AssertionError(f"{what} did not happen")


class ResubscribeTest(TotemCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.model = await ScriptedModel().__aenter__()
        self.addAsyncCleanup(self.model.__aexit__, None, None, None)
        project = await self.open_project()
        self.session = await self.create_session(project["id"], "streaming")
        self.other = await self.create_session(project["id"], "quiet")
        answer = await call(self.app, "providers_save", {"name": "Scripted", "kind": "openai",
                                                         "url": self.model.url, "key": KEY})
        self.assertEqual(answer.status, 200, answer.body)
        self.modelref = f"{answer.json()['id']}/scripted-model"

    async def test_resubscribing_non_reader_memory_flat(self):
        """1,000 subscribes to a session with a 256 KB open part, never read: the server sends
        the catch-up once and its memory stays flat (measured in bytes)."""
        sid = self.session["id"]
        self.model.script(Stall(events=text_chunks("x" * OPEN_PART_CHARS, pieces=8)))
        answer = await call(self.app, "sessions_prompt", {"text": "go", "model": self.modelref}, ident=sid)
        self.assertEqual(answer.status, 200, answer.body)
        await wait_until(lambda: [len(p["text"]) for p in self.app.runs.open_parts(sid)] == [OPEN_PART_CHARS],
                         "the open part")
        # max_queue=1: the client stops reading its socket after one message, as a stuck page would.
        async with await open_ws(self.app, max_queue=1) as ws:
            before = resident_bytes()
            for _ in range(RESUBSCRIBES):
                await subscribe(ws, sid)
            await subscribe(ws, self.other["id"])  # messages are handled in order: a sync point
            await wait_until(lambda: self.app.hub.subscribed(self.other["id"]), "the last subscribe")
            grown = resident_bytes() - before
            # The old server queued the whole catch-up again for each subscribe (~256 MB here).
            self.assertLess(grown, 32 * 1024 * 1024, f"the server grew by {grown} bytes")
            self.app.hub.publish(PartDelta(sid, "marker", "after"))
            first = await next_event(ws)
            self.assertEqual(first["type"], "part.created")
            self.assertEqual(len(first["data"]["part"]["text"]), OPEN_PART_CHARS)
            second = await next_event(ws)  # nothing was sent for the repeated subscribes
            self.assertEqual((second["type"], second["data"]["partid"]), ("part.delta", "marker"))
        await call(self.app, "sessions_abort", ident=sid, method="POST")


    async def test_unsubscribe_resubscribe_non_reader_closed_1013(self):
        """A non-reader that unsubscribes and subscribes again, taking a 256 KB catch-up each
        time, is closed (1013) at the byte bound, with the server's memory flat."""
        sid = self.session["id"]
        self.model.script(Stall(events=text_chunks("x" * OPEN_PART_CHARS, pieces=8)))
        answer = await call(self.app, "sessions_prompt", {"text": "go", "model": self.modelref}, ident=sid)
        self.assertEqual(answer.status, 200, answer.body)
        await wait_until(lambda: [len(p["text"]) for p in self.app.runs.open_parts(sid)] == [OPEN_PART_CHARS],
                         "the open part")
        # close_timeout: the client does not wait for a close handshake from a server that is gone.
        async with await open_ws(self.app, max_queue=1, close_timeout=100 * MS) as ws:
            before = resident_bytes()
            with self.assertLogs("totem.websocket", logging.INFO) as logs:
                for _ in range(200):  # 200 catch-ups: 51 MB if nothing bounded them
                    await subscribe(ws, sid)
                    await ws.send(json.dumps({"type": "unsubscribe", "sessionid": sid}))
                # It cannot read the close frame either: it is cut off CLOSE_TIMEOUT_S later.
                for _ in range(800):
                    if self.app.hub.connection_count == 0:
                        break
                    await asyncio.sleep(5 * MS)
            grown = resident_bytes() - before
            self.assertEqual(self.app.hub.connection_count, 0)
            self.assertLess(grown, 32 * 1024 * 1024, f"the server grew by {grown} bytes")
            self.assertIn("too slow", logs.records[0].getMessage())
        await call(self.app, "sessions_abort", ident=sid, method="POST")


class ByteBoundTest(TotemCase):
    settings = {"wsqueuebytes": 65536}

    async def asyncSetUp(self):
        await super().asyncSetUp()
        project = await self.open_project()
        self.session = await self.create_session(project["id"])

    async def test_slow_reader_past_byte_bound_closed_1013(self):
        """A client that stops reading is closed with 1013 once more than wsqueuebytes wait for
        it (long before wsqueue frames), and what it had not been sent is dropped: it gets a
        prefix of the events, then the close."""
        sid = self.session["id"]
        async with await open_ws(self.app, max_queue=1) as ws:
            await subscribe(ws, sid)
            await wait_until(lambda: self.app.hub.subscribed(sid), "the subscription")
            published = await publish_until_dropped(self.app, sid, 2048)
            received = await read_until_closed(ws)
        self.assertEqual(ws.close_code, 1013)
        indexes = [int(event["data"]["text"][:6]) for event in received]
        self.assertEqual(indexes, list(range(len(indexes))))  # in order, none missing before the cut
        # What waited in the server's own queue (64 KB of frames under 2,200 bytes each) never left.
        self.assertGreaterEqual(published - len(indexes), 65536 // 2200)
        await wait_until(lambda: self.app.hub.connection_count == 0, "the hub forgetting the client")

    async def test_one_event_over_byte_bound_still_sent(self):
        """One event bigger than wsqueuebytes on its own reaches a client that reads."""
        sid = self.session["id"]
        async with await open_ws(self.app) as ws:
            await subscribe(ws, sid)
            await wait_until(lambda: self.app.hub.subscribed(sid), "the subscription")
            self.app.hub.publish(PartDelta(sid, "p", "z" * 100_000))
            event = await next_event(ws)
            self.assertEqual(len(event["data"]["text"]), 100_000)
            self.app.hub.publish(SessionStatus(sid, "idle"))
            self.assertEqual((await next_event(ws))["type"], "session.status")


# (what the client sends, whether as a text frame, the close code)
MALFORMED = [
    ("not json", True, 1008),
    ("{", True, 1008),
    ("", True, 1008),
    ("[]", True, 1008),
    ('"subscribe"', True, 1008),
    ("1", True, 1008),
    ("null", True, 1008),
    ("true", True, 1008),
    ('{"type": ["subscribe"], "sessionid": "a"}', True, 1008),
    ('{"type": {"subscribe": 1}, "sessionid": "a"}', True, 1008),
    ('{"type": 1, "sessionid": "a"}', True, 1008),
    ('{"type": null, "sessionid": "a"}', True, 1008),
    ('{"sessionid": "a"}', True, 1008),
    ('{"type": "publish", "sessionid": "a"}', True, 1008),
    ('{"type": "subscribe"}', True, 1008),
    ('{"type": "subscribe", "sessionid": ["a"]}', True, 1008),
    ('{"type": "subscribe", "sessionid": {"id": "a"}}', True, 1008),
    ('{"type": "subscribe", "sessionid": 5}', True, 1008),
    ('{"type": "subscribe", "sessionid": 1' + "1" * 5000 + "}", True, 1008),  # int past Python's digit limit
    ('{"type": "subscribe", "sessionid": NaN}', True, 1008),
    ('{"type": "subscribe", "sessionid": null}', True, 1008),
    ('{"type": "unsubscribe", "sessionid": true}', True, 1008),
    ('{"type": "subscribe", "sessionid": ""}', True, 1008),
    ('{"type": "subscribe", "sessionid": "' + "x" * 65 + '"}', True, 1008),
    ('{"type": "subscribe", "sessionid": "a", "extra": 1}', True, 1008),
    ('{"type": "subscribe", "sessionid": "a", "' + "k" * 500 + '": 1}', True, 1008),
    ("[" * 50_000, True, 1008),  # deeper than the JSON decoder's recursion
    (b"\xff\xfe{}", True, 1008),  # a text frame that is not UTF-8
    (b'{"type": "subscribe", "sessionid": "a"}', False, 1003),  # binary: only text messages
]


class MalformedMessageTest(TotemCase):
    async def test_every_malformed_message_closes_1008(self):
        """Every wrong type of client message closes with 1008 (a binary one 1003) and logs one
        line without a traceback; the server goes on serving."""
        await (await self.app.sandbox_ready()).ready()  # its one start-up line is said by then
        for payload, text, code in MALFORMED:
            with self.subTest(payload=payload[:60]):
                async with await open_ws(self.app) as ws:
                    with self.assertLogs(level=logging.INFO) as logs:  # every logger
                        await ws.send(payload, text=text)
                        with self.assertRaises(ConnectionClosed):
                            await next_event(ws)
                    self.assertEqual(ws.close_code, code)
                self.assertEqual([r for r in logs.records if r.exc_info], [])
                totem = [(r.name, r.levelname) for r in logs.records if r.name.startswith("totem")]
                self.assertEqual(totem, [("totem.websocket", "WARNING")])
                message = next(r.getMessage() for r in logs.records if r.name == "totem.websocket")
                self.assertIn(f"({code})", message)
                self.assertNotIn("\n", message)
        project = await self.open_project()
        session = await self.create_session(project["id"])
        async with await open_ws(self.app) as ws:  # still serving
            await subscribe(ws, session["id"])
            await wait_until(lambda: self.app.hub.subscribed(session["id"]), "the subscription")


class EncodeOnceTest(TotemCase):
    async def test_event_encoded_once_for_many_subscribers(self):
        """An event published to N subscribed connections is JSON-encoded once."""
        project = await self.open_project()
        sid = (await self.create_session(project["id"]))["id"]
        clients = [await open_ws(self.app) for _ in range(5)]
        try:
            for ws in clients:
                await subscribe(ws, sid)
            await wait_until(lambda: self.app.hub.subscriber_count(sid) == len(clients), "the subscriptions")
            with mock.patch.object(events, "encode", wraps=events.encode) as encode, \
                    mock.patch.object(events.json, "dumps", wraps=json.dumps) as dumps:
                self.app.hub.publish(PartDelta(sid, "p", "once"))
                self.assertEqual((encode.call_count, dumps.call_count), (1, 1))
            for ws in clients:
                self.assertEqual((await next_event(ws))["data"], {"partid": "p", "text": "once"})
        finally:
            for ws in clients:
                await ws.close()
