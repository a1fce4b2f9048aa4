"""The event protocol: wire shapes, client messages, and the WebSocket hub on a real socket."""

import asyncio
import base64
import contextlib
import json
import os
import re
import struct
import unittest
from unittest import mock

from websockets.exceptions import ConnectionClosed

from tests.utils import MS, TotemCase, next_event, open_ws, publish_until_dropped, read_until_closed
from totem import events
from totem.events import (
    EVENT_TYPES,
    DiffUpdated,
    PartDelta,
    PermissionAsk,
    ProtocolError,
    QuestionAsk,
    SessionStatus,
    Subscribe,
    Unsubscribe,
    parse_client_message,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class WireTest(unittest.TestCase):
    def test_event_to_wire_shape(self):
        """Every event is {type, sessionid, ts, data}."""
        wire = PartDelta("s1", "p1", "hi").to_wire(123)
        self.assertEqual(wire, {"type": "part.delta", "sessionid": "s1", "ts": 123,
                                "data": {"partid": "p1", "text": "hi"}})

    def test_diff_updated_one_or_many(self):
        """diff.updated carries {path} or {paths}."""
        self.assertEqual(DiffUpdated("s", path="a").to_wire(1)["data"], {"path": "a"})
        self.assertEqual(DiffUpdated("s", paths=["a", "b"]).to_wire(1)["data"], {"paths": ["a", "b"]})

    def test_event_types_match_protocol(self):
        """The declared types are exactly those of the protocol text."""
        self.assertEqual(set(EVENT_TYPES), {
            "session.status", "session.updated", "message.created", "part.created", "part.delta",
            "part.updated", "part.closed", "permission.ask", "permission.replied", "question.ask",
            "todo.updated", "terminal.output", "terminal.exit", "diff.updated", "question.replied", "error"})

    def test_parse_client_message_valid(self):
        """subscribe and unsubscribe parse into their messages."""
        self.assertEqual(parse_client_message('{"type":"subscribe","sessionid":"a"}'), Subscribe("a"))
        self.assertEqual(parse_client_message('{"type":"unsubscribe","sessionid":"a"}'), Unsubscribe("a"))

    def test_parse_client_message_invalid(self):
        """Anything else raises ProtocolError."""
        for text in ("", "nope", "[]", "1", '{"type":"subscribe"}', '{"type":"publish","sessionid":"a"}',
                     '{"type":"subscribe","sessionid":5}', '{"type":"subscribe","sessionid":""}',
                     '{"type":"subscribe","sessionid":"' + "x" * 65 + '"}',
                     '{"type":"subscribe","sessionid":"a","extra":1}', "[" * 100000,
                     '{"type":["subscribe"],"sessionid":"a"}', '{"type":{"a":1},"sessionid":"a"}',
                     '{"type":null,"sessionid":"a"}', '{"type":"subscribe","sessionid":["a"]}',
                     '{"type":"subscribe","sessionid":{}}', '{"type":"subscribe","sessionid":null}',
                     '{"type":"subscribe","sessionid":NaN}', '{"type":"subscribe","sessionid":' + "9" * 5000 + "}",
                     b"\xff", b'{"type":"subscribe","sessionid":"\xc3"}'):
            with self.assertRaises(ProtocolError, msg=text[:40]):
                parse_client_message(text)

    def test_parse_client_message_bytes(self):
        """A message may be given as its UTF-8 bytes."""
        self.assertEqual(parse_client_message(b'{"type":"subscribe","sessionid":"\xc3\xa9"}'), Subscribe("\u00e9"))

    def test_encode_compact_utf8(self):
        """encode() gives compact UTF-8 JSON; a lone surrogate is escaped instead of raising."""
        self.assertEqual(events.encode(PartDelta("s", "p", "\u00e9"), 7),
                         '{"type":"part.delta","sessionid":"s","ts":7,"data":{"partid":"p","text":"\u00e9"}}'.encode())
        frame = events.encode(PartDelta("s", "p", "a\ud800b"), 7)
        self.assertEqual(json.loads(frame)["data"]["text"], "a\ud800b")


class FakeSubscriber:
    """An events.Subscriber that keeps what it is sent."""

    def __init__(self):
        self.frames = []
        self.closed = None

    def send(self, frame):
        self.frames.append(frame)

    def close(self, code, reason):
        self.closed = (code, reason)

    async def wait_closed(self):
        return None


class FakeReplay:
    """An events.Replay with fixed sessions, open parts and waiting asks."""

    def __init__(self, sessions=("s1", "s2"), parts=None, asks=None):
        self.sessions = set(sessions)
        self.parts = parts or {}
        self.asks = asks or {}

    def waiting_asks(self, sessionid):
        return self.asks.get(sessionid, [])

    async def session_exists(self, sessionid):
        return sessionid in self.sessions

    def open_parts(self, sessionid):
        return self.parts.get(sessionid, [])


class HubUnitTest(unittest.IsolatedAsyncioTestCase):
    """The hub without sockets, through its seams."""

    def make(self, count=3, **replay):
        hub = events.Hub(FakeReplay(**replay))
        clients = [FakeSubscriber() for _ in range(count)]
        for client in clients:
            hub.attach(client)
        return hub, clients

    async def test_one_frame_object_for_every_subscriber(self):
        """An event is encoded once: every subscriber queues the same bytes object."""
        hub, clients = self.make()
        for client in clients:
            await hub.subscribe(client, "s1")
        with mock.patch.object(events, "encode", wraps=events.encode) as encode:
            hub.publish(PartDelta("s1", "p", "x"))
        self.assertEqual(encode.call_count, 1)
        self.assertIsInstance(clients[0].frames[0], bytes)
        self.assertTrue(all(client.frames[0] is clients[0].frames[0] for client in clients))

    async def test_resubscribe_sends_nothing_new(self):
        """A repeated subscribe to a followed session sends nothing; after unsubscribe the
        catch-up comes again."""
        hub, (client,) = self.make(1, parts={"s1": [{"id": "p1", "text": "so far"}]},
                                   asks={"s1": [QuestionAsk("s1", "q1", "Which?", ["a"])]})
        for _ in range(100):
            await hub.subscribe(client, "s1")
        self.assertEqual([json.loads(f)["type"] for f in client.frames], ["part.created", "question.ask"])
        hub.unsubscribe(client, "s1")
        await hub.subscribe(client, "s1")
        self.assertEqual(len(client.frames), 4)

    async def test_receive_validates_and_routes(self):
        """receive() parses a message, subscribes or unsubscribes, and raises ProtocolError."""
        hub, (client,) = self.make(1)
        await hub.receive(client, b'{"type":"subscribe","sessionid":"s1"}')
        self.assertTrue(hub.subscribed("s1"))
        await hub.receive(client, '{"type":"unsubscribe","sessionid":"s1"}')
        self.assertFalse(hub.subscribed("s1"))
        with self.assertRaises(ProtocolError):
            await hub.receive(client, '{"type":["subscribe"],"sessionid":"s1"}')

    async def test_unknown_session_answers_error(self):
        """Subscribing to an unknown session sends an error event and follows nothing."""
        hub, (client,) = self.make(1)
        await hub.subscribe(client, "nope")
        self.assertEqual(json.loads(client.frames[0])["data"], {"message": "no session nope", "retry": False})
        self.assertEqual(hub.subscriber_count("nope"), 0)

    async def test_subscription_limit(self):
        """Past MAX_SUBSCRIPTIONS sessions a subscribe raises ProtocolError; a followed one does not."""
        sessions = [f"s{i}" for i in range(events.MAX_SUBSCRIPTIONS + 1)]
        hub, (client,) = self.make(1, sessions=sessions)
        for sessionid in sessions[:-1]:
            await hub.subscribe(client, sessionid)
        await hub.subscribe(client, sessions[0])
        with self.assertRaises(ProtocolError):
            await hub.subscribe(client, sessions[-1])

    async def test_detach_and_forget(self):
        """A detached subscriber gets nothing more; a forgotten session has no followers or asks."""
        hub, (one, two) = self.make(2)
        await hub.subscribe(one, "s1")
        await hub.subscribe(two, "s1")
        hub.detach(one)
        self.assertEqual((hub.connection_count, hub.subscriber_count("s1")), (1, 1))
        hub.publish(PermissionAsk("s1", "a1", "bash", {}, []))
        hub.forget_session("s1")
        self.assertFalse(hub.subscribed("s1"))
        hub.publish(SessionStatus("s1", "idle"))  # broadcast: the attached one only
        self.assertEqual(([json.loads(f)["type"] for f in two.frames], one.frames),
                         (["permission.ask", "session.status"], []))


class DocsAgreeTest(unittest.TestCase):
    def test_events_py_js_readme_agree(self):
        """events.py, static/events.js and the README's table name the same event types."""
        with open(os.path.join(ROOT, "static", "events.js")) as handle:
            js = handle.read()
        js_events = set(re.findall(r"[A-Z_]+: '([a-z.]+)'", js.split("export const CLIENT")[0]))
        js_client = set(re.findall(r"[A-Z_]+: '([a-z.]+)'", js.split("export const CLIENT")[1]))
        with open(os.path.join(ROOT, "README.md")) as handle:
            readme = handle.read()
        section = readme.split("## Events")[1].split("\n## ")[0]
        readme_events = set(re.findall(r"^\| `([a-z.]+)` \|", section, re.M))
        self.assertEqual(js_events, set(EVENT_TYPES))
        self.assertEqual(readme_events, set(EVENT_TYPES))
        self.assertEqual(js_client, set(events.CLIENT_TYPES))


async def subscribe(ws, sessionid):
    await ws.send(json.dumps({"type": "subscribe", "sessionid": sessionid}))


async def settle(app, sessionid, count=1):
    """Wait until `count` connections are subscribed to a session (subscribing is async)."""
    for _ in range(200):
        if app.hub.subscriber_count(sessionid) >= count:
            return
        await asyncio.sleep(5 * MS)
    raise AssertionError("subscription did not arrive")


class HubTest(TotemCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        project = await self.open_project()
        self.session = await self.create_session(project["id"], "one")
        self.other = await self.create_session(project["id"], "two")

    async def test_subscribed_session_events_only(self):
        """A client gets part events of the sessions it subscribed to, not of others."""
        async with await open_ws(self.app) as ws:
            await subscribe(ws, self.session["id"])
            await settle(self.app, self.session["id"])
            self.app.hub.publish(PartDelta(self.other["id"], "p0", "not mine"))
            self.app.hub.publish(PartDelta(self.session["id"], "p1", "mine"))
            event = await next_event(ws)
            self.assertEqual(event["type"], "part.delta")
            self.assertEqual(event["sessionid"], self.session["id"])
            self.assertEqual(event["data"], {"partid": "p1", "text": "mine"})
            self.assertIsInstance(event["ts"], int)

    async def test_session_status_to_everyone(self):
        """session.status reaches clients that did not subscribe (session lists)."""
        async with await open_ws(self.app) as ws:
            await asyncio.sleep(20 * MS)
            self.app.hub.publish(SessionStatus(self.other["id"], "running"))
            event = await next_event(ws)
            self.assertEqual((event["type"], event["data"]), ("session.status", {"status": "running"}))

    async def test_unsubscribe_stops_events(self):
        """After unsubscribe the session's events no longer arrive."""
        async with await open_ws(self.app) as ws:
            await subscribe(ws, self.session["id"])
            await settle(self.app, self.session["id"])
            await ws.send(json.dumps({"type": "unsubscribe", "sessionid": self.session["id"]}))
            for _ in range(100):
                if not self.app.hub.subscribed(self.session["id"]):
                    break
                await asyncio.sleep(5 * MS)
            self.app.hub.publish(PartDelta(self.session["id"], "p", "hidden"))
            self.app.hub.publish(SessionStatus(self.session["id"], "idle"))
            event = await next_event(ws)
            self.assertEqual(event["type"], "session.status")

    async def test_events_in_order(self):
        """Many events of one session arrive in publishing order, to two clients alike."""
        async with await open_ws(self.app) as one, await open_ws(self.app) as two:
            await subscribe(one, self.session["id"])
            await subscribe(two, self.session["id"])
            await settle(self.app, self.session["id"], 2)
            for index in range(2000):
                self.app.hub.publish(PartDelta(self.session["id"], "p", str(index)))
                if index % 100 == 0:
                    await asyncio.sleep(0)
            for ws in (one, two):
                texts = [(await next_event(ws))["data"]["text"] for _ in range(2000)]
                self.assertEqual(texts, [str(i) for i in range(2000)])

    async def test_pending_questions_resent_on_subscribe(self):
        """A client that subscribes late gets the questions that wait, answered ones not."""
        sid = self.session["id"]
        questions = self.app.runs.questions
        first = asyncio.create_task(questions.permission(sid, "bash", {"command": "ls"}, ["ls *"]))
        second = asyncio.create_task(questions.question(sid, "Which?", ["a", "b"]))
        third = asyncio.create_task(questions.permission(sid, "write", {"path": "a"}, ["a"]))
        await asyncio.sleep(0)
        ids = [event.id for event in questions.waiting(sid)]
        questions.reply_permission(ids[2], "once", None)
        await third
        async with await open_ws(self.app) as ws:
            await subscribe(ws, sid)
            one, two = await next_event(ws), await next_event(ws)
            self.assertEqual((one["type"], one["data"]["id"]), ("permission.ask", ids[0]))
            self.assertEqual(one["data"]["patterns"], ["ls *"])
            self.assertEqual((two["type"], two["data"]["id"]), ("question.ask", ids[1]))
        questions.reply_question(ids[1], "a")
        questions.reply_permission(ids[0], "reject", None)
        await asyncio.gather(first, second)
        self.assertEqual(questions.waiting(sid), [])

    async def test_unknown_session_subscribe_error(self):
        """Subscribing to an unknown session answers an error event and subscribes nothing."""
        async with await open_ws(self.app) as ws:
            await subscribe(ws, "nope")
            event = await next_event(ws)
            self.assertEqual(event["type"], "error")
            self.assertEqual(event["data"], {"message": "no session nope", "retry": False})

    async def test_removed_session_drops_subscription(self):
        """Removing a session unsubscribes its clients and rejects its questions."""
        from tests.utils import call
        sid = self.session["id"]
        asked = asyncio.create_task(self.app.runs.questions.permission(sid, "bash", {}, []))
        await asyncio.sleep(0)
        async with await open_ws(self.app) as ws:
            await subscribe(ws, sid)
            self.assertEqual((await next_event(ws))["type"], "permission.ask")
            await call(self.app, "sessions_remove", ident=sid, method="POST")
            asked.cancel()  # the run that asked would be aborted by the removal
            with contextlib.suppress(asyncio.CancelledError):
                await asked
            event = await next_event(ws)
            while event["type"] != "session.updated":
                event = await next_event(ws)
            self.assertTrue(event["data"]["session"]["removed"])
            self.assertEqual(self.app.runs.questions.waiting(sid), [])
            self.assertFalse(self.app.hub.subscribed(sid))

    async def test_bad_json_closes_1008(self):
        """A malformed message closes the connection with 1008."""
        async with await open_ws(self.app) as ws:
            await ws.send("not json")
            with self.assertRaises(ConnectionClosed):
                await next_event(ws)
            self.assertEqual(ws.close_code, 1008)

    async def test_binary_closes_1003(self):
        """A binary message closes the connection with 1003."""
        async with await open_ws(self.app) as ws:
            await ws.send(b"\x00\x01")
            with self.assertRaises(ConnectionClosed):
                await next_event(ws)
            self.assertEqual(ws.close_code, 1003)

    async def test_oversized_closes_1009(self):
        """A message over 64 KB closes the connection with 1009."""
        async with await open_ws(self.app) as ws:
            await ws.send("x" * (70 * 1024))
            with self.assertRaises(ConnectionClosed):
                await next_event(ws)
            self.assertEqual(ws.close_code, 1009)

    async def test_fragmented_message_assembled(self):
        """A subscribe sent in fragments is understood."""
        async with await open_ws(self.app) as ws:
            text = json.dumps({"type": "subscribe", "sessionid": self.session["id"]})
            await ws.send(iter([text[:10], text[10:20], text[20:]]))
            await settle(self.app, self.session["id"])
            self.app.hub.publish(PartDelta(self.session["id"], "p", "x"))
            self.assertEqual((await next_event(ws))["type"], "part.delta")

    async def test_connection_count_drops_after_close(self):
        """A closed client is removed from the hub."""
        async with await open_ws(self.app):
            await asyncio.sleep(20 * MS)
            self.assertEqual(self.app.hub.connection_count, 1)
        for _ in range(100):
            if self.app.hub.connection_count == 0:
                break
            await asyncio.sleep(5 * MS)
        self.assertEqual(self.app.hub.connection_count, 0)


class SlowClientTest(TotemCase):
    settings = {"wsqueue": 16}

    async def test_slow_client_closed_1013(self):
        """A client that stops reading is closed with 1013 once more than wsqueue events wait for
        it in the server (beyond what the sockets buffer), after a prefix of the events."""
        project = await self.open_project()
        session = await self.create_session(project["id"])
        async with await open_ws(self.app, max_queue=1) as ws:
            await subscribe(ws, session["id"])
            await settle(self.app, session["id"])
            published = await publish_until_dropped(self.app, session["id"], 1024)
            received = await read_until_closed(ws)
        self.assertEqual(ws.close_code, 1013)
        indexes = [int(event["data"]["text"][:6]) for event in received]
        self.assertEqual(indexes, list(range(len(indexes))))
        self.assertLessEqual(len(indexes), published - 16)  # the 16 that waited were dropped

    async def test_an_event_is_framed_once_for_all_its_connections(self):
        """Three connections following a session get the same bytes, framed once."""
        from websockets.frames import Frame
        project = await self.open_project()
        session = await self.create_session(project["id"])
        clients = [await open_ws(self.app) for _ in range(3)]
        try:
            for ws in clients:
                await subscribe(ws, session["id"])
            await settle(self.app, session["id"], len(clients))
            serialize = Frame.serialize
            with mock.patch.object(Frame, "serialize", autospec=True, side_effect=serialize) as framed:
                self.app.hub.publish(PartDelta(session["id"], "p", "once"))
                texts = [(await next_event(ws))["data"]["text"] for ws in clients]
            self.assertEqual(texts, ["once"] * 3)
            self.assertEqual(framed.call_count, 1)
        finally:
            for ws in clients:
                await ws.close()

    async def test_a_burst_to_a_client_that_reads_arrives_whole(self):
        """More than wsqueue events published at once (one loop turn) do not drop a client
        that reads: they go to its socket as they come."""
        project = await self.open_project()
        session = await self.create_session(project["id"])
        async with await open_ws(self.app) as ws:
            await subscribe(ws, session["id"])
            await settle(self.app, session["id"])
            for index in range(100):  # no await: all in one turn of the loop
                self.app.hub.publish(PartDelta(session["id"], "p", str(index)))
            texts = [(await next_event(ws))["data"]["text"] for _ in range(100)]
        self.assertEqual(texts, [str(index) for index in range(100)])


def masked_frame(opcode: int, payload: bytes) -> bytes:
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked


class PingTest(TotemCase):
    settings = {"wsping": 1}

    async def raw_handshake(self):
        reader, writer = await asyncio.open_connection("127.0.0.1", self.app.port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write((f"GET /ws/ HTTP/1.1\r\nHost: 127.0.0.1:{self.app.port}\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                      ).encode())
        head = await reader.readuntil(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 101"), head)
        return reader, writer

    async def test_ping_sent_and_silent_client_closed(self):
        """The server pings; a client that never answers is closed after the interval."""
        reader, writer = await self.raw_handshake()
        try:
            first = await asyncio.wait_for(reader.readexactly(2), 3000 * MS)
            self.assertEqual(first[0] & 0x0F, 0x9)  # a ping
            await reader.readexactly(first[1] & 0x7F)
            rest = await asyncio.wait_for(reader.read(), 4000 * MS)
            self.assertEqual(rest[0] & 0x0F, 0x8)  # then a close
            self.assertEqual(struct.unpack("!H", rest[2:4])[0], 1011)
        finally:
            writer.close()
            await writer.wait_closed()

    async def test_answering_client_stays(self):
        """A client that answers pings stays connected across several intervals."""
        async with await open_ws(self.app) as ws:
            await asyncio.sleep(2500 * MS)
            self.assertEqual(self.app.hub.connection_count, 1)
            await ws.ping()

    async def test_frame_right_after_handshake(self):
        """A frame sent together with the handshake is not lost."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.app.port)
        key = base64.b64encode(os.urandom(16)).decode()
        frame = masked_frame(0x1, json.dumps({"type": "subscribe", "sessionid": "nope"}).encode())
        writer.write((f"GET /ws/ HTTP/1.1\r\nHost: 127.0.0.1:{self.app.port}\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                      ).encode() + frame)
        try:
            await reader.readuntil(b"\r\n\r\n")
            header = await asyncio.wait_for(reader.readexactly(2), 2000 * MS)
            body = await reader.readexactly(header[1] & 0x7F)
            self.assertEqual(json.loads(body)["type"], "error")
        finally:
            writer.close()
            await writer.wait_closed()
