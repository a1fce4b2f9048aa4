"""join_deltas: the deltas that one read of a stream brought, joined by kind, with nothing
reordered, lost or added (checked over generated event sequences)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from totem.agent.stream import ReasoningDelta, TextDelta, ToolCallDelta, ToolCallStarted, Usage, join_deltas

texts = st.text(max_size=5)
events = st.one_of(
    st.builds(TextDelta, texts), st.builds(ReasoningDelta, texts),
    st.builds(ToolCallDelta, st.integers(0, 2), texts),
    st.builds(ToolCallStarted, st.integers(0, 2), st.just("call"), st.just("read")),
    st.builds(Usage, st.just({"prompt_tokens": 1})))


def flatten(sequence):
    """Each event as (kind, key, text), with a delta's text split into characters: joining
    deltas must keep this sequence exactly."""
    out = []
    for event in sequence:
        if isinstance(event, (TextDelta, ReasoningDelta)):
            out += [(type(event).__name__, None, ch) for ch in event.text] or [(type(event).__name__, None, "")]
        elif isinstance(event, ToolCallDelta):
            out += [("ToolCallDelta", event.index, ch) for ch in event.arguments_fragment] or [
                ("ToolCallDelta", event.index, "")]
        else:
            out.append((type(event).__name__, event, ""))
    return [item for item in out if item[2] or item[0] not in ("TextDelta", "ReasoningDelta", "ToolCallDelta")]


@settings(max_examples=400, deadline=None)
@given(st.lists(events, max_size=30))
def test_joined_deltas_keep_every_character_in_order(sequence):
    joined = join_deltas(sequence)
    assert flatten(joined) == flatten(sequence)
    for first, second in zip(joined, joined[1:], strict=False):
        same_text = isinstance(first, (TextDelta, ReasoningDelta)) and type(first) is type(second)
        same_call = isinstance(first, ToolCallDelta) and isinstance(second, ToolCallDelta) \
            and first.index == second.index
        assert not (same_text or same_call), (first, second)


def test_a_run_of_one_kind_becomes_one_delta():
    joined = join_deltas([TextDelta("a"), TextDelta("b"), ReasoningDelta("r"), ToolCallDelta(0, "{"),
                          ToolCallDelta(0, "}"), ToolCallDelta(1, "{}"), TextDelta("c")])
    assert joined == [TextDelta("ab"), ReasoningDelta("r"), ToolCallDelta(0, "{}"), ToolCallDelta(1, "{}"),
                      TextDelta("c")]
