"""BodyEncoder: a run's request bodies encoded message by message, kept between steps, give the
same bytes as encoding each body whole."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from totem.agent.bodies import BodyEncoder

texts = st.text(max_size=20)
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]),
                                           "content": texts}), max_size=8)


def whole(body) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, min_size=1, max_size=5), texts)
def test_steps_encode_as_the_whole_body(steps, model):
    encoder = BodyEncoder()
    history: list[dict] = []
    for added in steps:
        history = history + added  # the same dicts again, and new ones after them
        body = {"model": model, "messages": history, "tools": [{"type": "function"}], "stream": True}
        assert encoder.encode(body) == whole(body)


def test_a_field_holding_the_marks_text_is_encoded_whole():
    body = {"model": "\x00messages\x00", "messages": [{"role": "user", "content": "hi"}]}
    assert BodyEncoder().encode(body) == whole(body)
    assert BodyEncoder().encode({"no": "messages"}) == whole({"no": "messages"})


tools = st.lists(st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": texts, "description": texts})}), max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(messages, tools), min_size=1, max_size=4), texts)
def test_a_steps_body_and_its_streamed_request_encode_as_the_whole(steps, model):
    """Each step encodes its body, then the streamed request made of it (the same tools array and
    messages, with fields added around them); a new tools array at each step: the same bytes
    as encoding each whole."""
    encoder = BodyEncoder()
    history: list[dict] = []
    for added, offered in steps:
        history = history + added
        body = {"model": model, "messages": history, "tools": offered}
        assert encoder.encode(body) == whole(body)
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        assert encoder.encode(streamed) == whole(streamed)
        assert encoder.encode({"tools": offered, **body}) == whole({"tools": offered, **body})


def test_a_field_holding_the_tools_marks_text_is_encoded_whole():
    offered = [{"type": "function", "function": {"name": "read"}}]
    body = {"model": "\x00tools\x00", "messages": [{"role": "user", "content": "hi"}], "tools": offered}
    encoder = BodyEncoder()
    assert encoder.encode(body) == whole(body)
    assert encoder.encode(body | {"stream": True}) == whole(body | {"stream": True})
    named = [{"type": "function", "function": {"name": "\x00tools\x00 \x00messages\x00"}}]
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": named}
    assert encoder.encode(body) == whole(body)
    assert encoder.encode(body) == whole(body)
