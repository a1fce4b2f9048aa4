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
