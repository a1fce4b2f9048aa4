"""The fast path of a stream's reads (`ChatAccumulator.feed_sse_events`, with the template of
text-only chunks) against the general one it stands for: every event through `feed_sse`, then
`join_deltas`, read by read. Generated streams mix the chunks of real providers (text-only,
with usage null, with a field that changes in every chunk, finish, role, reasoning, tool calls,
usage, errors, [DONE]) with chunks made to mislead a template: the prefix and suffix of an
earlier chunk around something that is not one string literal, repeated content keys,
whitespace, escapes, a non-string content, a second choice, an `event: error` of the same data.
Both paths must give the same events, the same result and the same counts."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings, strategies as st

from totem.agent.sse import SseEvent
from totem.agent.stream import ChatAccumulator, join_deltas

ALPHABET = list('ab "\\/\n\t\u00e9\u20ac\U0001f600{}[],:') + ["\u0000", "\ud800"]
# What may stand where a template expects one string literal.
MIDDLE_PIECES = list('ab"\\,:{}[] 0\n') + ['\\"', '\\u0041', '","content":"']


SEPARATORS = [(",", ":"), (", ", ": "), (",", " : ")]


class Writer(random.Random):
    """The randomness of one stream: its provider writes its JSON one way, now and then another."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.separators = self.choice(SEPARATORS)
        self.ascii = self.random() < 0.5


def dumps(value, rng: Writer) -> str:
    if rng.random() < 0.8:
        return json.dumps(value, separators=rng.separators, ensure_ascii=rng.ascii)
    return json.dumps(value, separators=rng.choice(SEPARATORS), ensure_ascii=rng.random() < 0.5)


def text_chunk(text: str, rng: Writer, style: int) -> dict:
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    if style == 1:
        chunk["usage"] = None  # OpenAI with include_usage: null in every chunk
    elif style == 2:
        chunk["obfuscation"] = "x" * rng.randrange(1, 9)  # changes in every chunk
    elif style == 3:
        chunk = {"choices": [{"delta": {"content": text}}], "model": "m"}  # another key order
    return chunk


def chunk_data(kind: str, text: str, middle: str, rng: Writer, style: int, last: str | None) -> tuple[str, str]:
    """(data, event name) of one generated event."""
    if kind == "text":
        return dumps(text_chunk(text, rng, style), rng), "message"
    if kind == "around" and last is not None:
        # An earlier text chunk's JSON with its literal replaced by raw characters.
        literal = json.dumps(text, ensure_ascii=False)
        at = last.rfind(literal) if literal in last else -1
        if at >= 0:
            return last[:at] + '"' + middle + last[at + len(literal):], "message"
        return last, "message"
    if kind == "repeat" and last is not None:
        return last, rng.choice(["message", "error"])
    if kind == "twice":
        inner = json.dumps(text)
        return ('{"choices":[{"index":0,"delta":{"content":' + inner + ',"content":' + json.dumps(middle)
                + '},"finish_reason":null}]}'), "message"
    if kind == "spaced":
        return " " + dumps(text_chunk(text, rng, 0), rng) + rng.choice(["", " ", "\n"]), "message"
    shapes = {
        "finish": {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        "finish_text": {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "length"}]},
        "role": {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
        "reasoning": {"choices": [{"index": 0, "delta": {"reasoning_content": text}}]},
        "tool": {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "c1", "function": {"name": "read", "arguments": text}}]}}]},
        "usage": {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}},
        "usage_text": {"choices": [{"index": 0, "delta": {"content": text}}], "usage": {"total_tokens": 1}},
        "error": {"error": {"message": text or "boom", "type": "server_error"}},
        "number": {"choices": [{"index": 0, "delta": {"content": 7}}]},
        "second": {"choices": [{"index": 1, "delta": {"content": text}}]},
        "two": {"choices": [{"index": 0, "delta": {"content": text}}, {"index": 1, "delta": {"content": "z"}}]},
        "groq": {"choices": [{"index": 0, "delta": {"content": text}}], "x_groq": {"id": "q"}},
        "ollama": {"message": {"content": text}, "done": False},
    }
    if kind in shapes:
        return dumps(shapes[kind], rng), "message"
    if kind == "done":
        return "[DONE]", "message"
    if kind == "broken":
        return '{"choices":[{"delta":{"content":"' + middle, "message"
    return dumps(text_chunk(text, rng, 0), rng), "error"


KINDS = (["text"] * 8 + ["around"] * 3 + ["repeat", "twice", "spaced", "finish", "finish_text", "role",
         "reasoning", "tool", "usage", "usage_text", "error", "number", "second", "two", "groq", "ollama", "done",
         "broken", "event_error"])


def short(rng: Writer, most: int) -> int:
    """A length up to `most`, short ones more often (where the edge cases are)."""
    return min(rng.randrange(most + 1), rng.randrange(most + 1))


def random_stream(rng: Writer, length: int) -> list[tuple[str, str, str, int, int]]:
    """`length` events of a stream: (kind, text, raw middle, style, cut). Drawn from a seed, not
    by hypothesis piece by piece: drawing 3,000 streams of up to 40 events piece by piece took
    about 15 s, their check 1 s."""
    return [(rng.choice(KINDS), "".join(rng.choice(ALPHABET) for _ in range(short(rng, 12))),
             "".join(rng.choice(MIDDLE_PIECES) for _ in range(short(rng, 10))), rng.randrange(4), rng.randrange(1, 5))
            for _ in range(length)]


def build(stream, rng: Writer) -> list[list[SseEvent]]:
    """The events of a generated stream, cut into reads."""
    reads: list[list[SseEvent]] = [[]]
    last = None
    for kind, text, middle, style, cut in stream:
        data, name = chunk_data(kind, text, middle, rng, style, last)
        if kind == "text":
            last = data
        reads[-1].append(SseEvent(data, name))
        if cut == 1:
            reads.append([])
    return reads


def general(reads: list[list[SseEvent]]) -> tuple[list, ChatAccumulator]:
    accumulator = ChatAccumulator()
    out = []
    for read in reads:
        out.append(join_deltas([e for event in read for e in accumulator.feed_sse(event)]))
    return out, accumulator


def fast(reads: list[list[SseEvent]]) -> tuple[list, ChatAccumulator]:
    accumulator = ChatAccumulator()
    return [join_deltas(accumulator.feed_sse_events(read)) for read in reads], accumulator


def same(reads) -> None:
    expected, reference = general(reads)
    got, accumulator = fast(reads)
    assert got == expected
    reference.finish(), accumulator.finish()
    assert accumulator.result() == reference.result()
    assert (accumulator.chunks, accumulator.saw_done, accumulator.failure) == (
        reference.chunks, reference.saw_done, reference.failure)


@settings(max_examples=3000, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**32))
def test_the_fast_path_reads_every_stream_as_the_general_one(length, seed):
    rng = Writer(seed)
    same(build(random_stream(rng, length), rng))


def test_a_template_is_learned_and_used_and_a_lookalike_is_not_taken():
    """The second text chunk of a stream is read on the template (its text decoded alone); the
    same prefix and suffix around two literals, or around a literal and more, are parsed in full."""
    head = '{"id":"c","choices":[{"index":0,"delta":{"content":'
    tail = '},"finish_reason":null}]}'
    reads = [[SseEvent(head + '"one"' + tail), SseEvent(head + '"t\\u0077o \\"2\\""' + tail)],
             [SseEvent(head + '"x","content":"y"' + tail)],  # a repeated key: "y" counts
             [SseEvent(head + '"a" ' + tail)],  # whitespace after the literal: still valid JSON
             [SseEvent(head + '"b"]' + tail)]]  # not JSON: the general path fails it
    same(reads)
    accumulator = ChatAccumulator()
    texts = [event.text for read in reads[:3] for event in join_deltas(accumulator.feed_sse_events(read))]
    assert texts == ['onetwo "2"', "y", "a"]


def test_a_repeated_content_key_never_makes_the_template_take_the_wrong_literal():
    """With "content" twice, the last counts: learned from a chunk where both say the same, the
    template still reads the literal that counts (the probe proves which one), so a chunk that
    changes only the first one keeps the text of the second."""
    def twice(first: str, second: str) -> SseEvent:
        return SseEvent('{"choices":[{"index":0,"delta":{"content":"%s","content":"%s"}}]}' % (first, second))
    reads = [[twice("same", "same")], [twice("other", "same")], [twice("same", "new")]]
    same(reads)
    accumulator = ChatAccumulator()
    assert [event.text for read in reads for event in accumulator.feed_sse_events(read)] == ["same", "same", "new"]

