"""Fuzzed WebSocket client messages: any JSON value, any text, any bytes reach the hub's one
parser, which answers a message or a ProtocolError (the connection closes with 1008), never
another exception; and the hub, fed them, keeps its state consistent."""

import asyncio
import json

from hypothesis import given, settings, strategies as st

from totem import events
from totem.events import ProtocolError, Subscribe, Unsubscribe, parse_client_message

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12)
# Messages shaped like the real ones, with every field of every type.
SHAPED = st.fixed_dictionaries(
    {"type": st.sampled_from(["subscribe", "unsubscribe", "Subscribe", "", "other"]) | JSON_VALUES},
    optional={"sessionid": JSON_VALUES | st.text(max_size=80), "extra": JSON_VALUES})
PAYLOADS = (JSON_VALUES.map(json.dumps) | SHAPED.map(json.dumps) | st.text(max_size=200)
            | st.binary(max_size=200))


class FakeSubscriber:
    def __init__(self):
        self.frames = []

    def send(self, frame):
        self.frames.append(frame)

    def close(self, code, reason):
        pass

    async def wait_closed(self):
        return None


class FakeReplay:
    async def session_exists(self, sessionid):
        return sessionid.startswith("s")

    def open_parts(self, sessionid):
        return []

    def waiting_asks(self, sessionid):
        return []


@settings(max_examples=400, deadline=None)
@given(PAYLOADS)
def test_parser_answers_a_message_or_a_protocol_error(payload):
    """Whatever arrives, the parser returns a Subscribe or Unsubscribe with a text session id,
    or raises ProtocolError."""
    try:
        message = parse_client_message(payload)
    except ProtocolError as exc:
        assert str(exc)
        return
    assert isinstance(message, (Subscribe, Unsubscribe))
    assert isinstance(message.sessionid, str) and message.sessionid


@settings(max_examples=150, deadline=None)
@given(st.lists(PAYLOADS, min_size=1, max_size=12))
def test_hub_survives_any_sequence_of_messages(payloads):
    """A connection sending any sequence of messages gets only events or a ProtocolError, and
    the hub's two views of who follows what agree afterwards."""
    async def feed():
        hub = events.Hub(FakeReplay())
        client = FakeSubscriber()
        hub.attach(client)
        for payload in payloads:
            try:
                await hub.receive(client, payload)
            except ProtocolError:
                break
        for frame in client.frames:
            assert json.loads(frame)["type"] in ("error", "part.created", "permission.ask", "question.ask")
        followed: set[str] = set()
        for payload in payloads:
            try:
                message = parse_client_message(payload)
            except ProtocolError:
                continue
            if hub.subscribed(message.sessionid):
                followed.add(message.sessionid)
        assert all(hub.subscriber_count(sessionid) == 1 for sessionid in followed)
        hub.detach(client)
        assert hub.connection_count == 0
        assert not any(hub.subscribed(sessionid) for sessionid in followed)
    asyncio.run(feed())
