"""The pure stream layer: SSE/NDJSON framing, chunk accumulation against every recorded fixture
case, tool calls written as text, and the meaning of provider HTTP errors."""

import json
import random

import pytest

from tests.model_server import (
    error_fixtures,
    expected_cases,
    ndjson_case,
    sse_cases,
    stream_providers,
)
from totem.agent.kinds import kind_named
from totem.agent.provider_errors import (
    KIND_AUTH,
    KIND_BILLING,
    KIND_CONNECTION,
    KIND_CONTEXT_LENGTH,
    KIND_INVALID_REQUEST,
    KIND_MODEL_NOT_FOUND,
    KIND_OVERLOADED,
    KIND_RATE_LIMIT,
    KIND_REDIRECT,
    KIND_REQUEST_TOO_LARGE,
    KIND_SERVER,
    KIND_TOOL_USE_FAILED,
    KIND_TOOLS_UNSUPPORTED,
    KIND_UNSUPPORTED,
    classify_http_error,
    stated_window,
)
from totem.agent.sse import MAX_LINE_BYTES, NdjsonDecoder, SseDecoder, SseEvent, StreamFormatError
from totem.agent.stream import (
    ChatAccumulator,
    Finish,
    ReasoningDelta,
    StreamError,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallStarted,
    Usage,
    extract_text_tool_calls,
)

CASES = [(p, c) for p in stream_providers() for c in expected_cases(p)]
# The fixtures of a wire that is not OpenAI's chunks go through their kind's decoder.
NATIVE_KINDS = frozenset({"anthropic", "gemini"})
SEEDS = (0, 1, 2)


def pieces(body: bytes, seed: int, max_piece: int = 17) -> list[bytes]:
    rng, out, start = random.Random(seed), [], 0
    while start < len(body):
        size = rng.randint(1, max_piece)
        out.append(body[start:start + size])
        start += size
    return out


def decode(body: bytes, seed: int = 0, provider: str = "openai") -> tuple[ChatAccumulator, SseDecoder | None, list]:
    """The body through the SSE decoder and the accumulator, or through the decoder of the kind of
    a provider with a wire of its own (NATIVE_KINDS; its SSE decoder is its own: None)."""
    accumulator, events = ChatAccumulator(), []
    if provider in NATIVE_KINDS:
        native = kind_named(provider).decoder(accumulator)
        for piece in pieces(body, seed):
            events += native.feed(piece)
        events += native.close() + accumulator.finish()
        return accumulator, None, events
    decoder = SseDecoder()
    for piece in pieces(body, seed):
        for event in decoder.feed(piece):
            events += accumulator.feed_sse(event)
    events += accumulator.finish()
    return accumulator, decoder, events


def summary(accumulator: ChatAccumulator, decoder: SseDecoder | None, expected: dict) -> dict:
    """The result in the shape of NAME.expected.json, limited to the keys that file has."""
    result = accumulator.result()
    calls = []
    for call in result.tool_calls:
        entry = {"index": call.index, "id": call.id, "name": call.name,
                 "arguments": call.arguments, "arguments_valid_json": call.arguments_valid}
        if call.arguments_valid:
            entry["arguments_parsed"] = call.parsed_arguments()
        calls.append(entry)
    got = {"content": result.content, "reasoning": result.reasoning,
           "reasoning_details": result.reasoning_details, "tool_calls": calls,
           "finish_reason": result.finish_reason, "usage": result.usage, "error": result.error,
           "saw_done": result.saw_done, "chunks": result.chunks}
    if decoder is not None:
        got |= {"comments": decoder.comments, "ignored_lines": decoder.ignored_lines}
    return {key: got[key] for key in expected if key in got}


def expected_fields(expected: dict) -> dict:
    return {k: v for k, v in expected.items() if k != "note"}


# --- every fixture case ----------------------------------------------------------------------


@pytest.mark.parametrize("provider,case", CASES, ids=[f"{p}-{c}" for p, c in CASES])
def test_accumulator_fixture_case_matches_expected(provider, case):
    """Every case of every NAME.expected.json comes out exactly, whatever the piece sizes."""
    body, expected = sse_cases(provider)[case], expected_cases(provider)[case]
    for seed in SEEDS:
        accumulator, decoder, _ = decode(body, seed, provider)
        assert summary(accumulator, decoder, expected) == expected_fields(expected), seed


@pytest.mark.parametrize("provider,case", CASES, ids=[f"{p}-{c}" for p, c in CASES])
def test_accumulator_fixture_case_failure_matches_ending(provider, case):
    """A case fails exactly when it has an in-stream error or ends without a finish reason."""
    expected = expected_cases(provider)[case]
    accumulator, _, events = decode(sse_cases(provider)[case], provider=provider)
    should_fail = expected["error"] is not None or expected["finish_reason"] in (None, "error", "refusal")
    errors = [e for e in events if isinstance(e, StreamError)]
    assert (accumulator.result().failure is not None) == should_fail
    assert len(errors) == (1 if should_fail else 0)


@pytest.mark.parametrize("ending", [b"\r\n", b"\r"], ids=["crlf", "cr"])
@pytest.mark.parametrize("provider,case", CASES, ids=[f"{p}-{c}" for p, c in CASES])
def test_sse_decoder_other_line_endings_same_result(provider, case, ending):
    """CRLF and lone-CR line endings (WHATWG allows all three) decode to the same result."""
    body, expected = sse_cases(provider)[case], expected_cases(provider)[case]
    accumulator, decoder, _ = decode(body.replace(b"\n", ending), seed=3, provider=provider)
    assert summary(accumulator, decoder, expected) == expected_fields(expected)


def test_accumulator_events_text_case_in_wire_order():
    """A text answer yields TextDeltas, then Finish, then Usage, in wire order."""
    _, _, events = decode(sse_cases("openai")["text_with_usage"])
    kinds = [type(e) for e in events]
    assert kinds[-2:] == [Finish, Usage]
    assert set(kinds[:-2]) == {TextDelta}
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == expected_cases("openai")["text_with_usage"]["content"]


def test_accumulator_events_tool_calls_started_then_fragments():
    """Each tool call is announced once with id and name, then its argument fragments follow."""
    _, _, events = decode(sse_cases("openai")["tool_calls_parallel_two"])
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    assert [(e.index, e.name) for e in started] == [(0, "read_file"), (1, "list_dir")]
    assert started[0].id == "call_DIJutRtVqp4BnDtWcpdLvV4C"
    for call in expected_cases("openai")["tool_calls_parallel_two"]["tool_calls"]:
        fragments = [e.arguments_fragment for e in events
                     if isinstance(e, ToolCallDelta) and e.index == call["index"]]
        assert "".join(fragments) == call["arguments"]


def test_accumulator_events_reasoning_before_text():
    """Thinking arrives as ReasoningDelta events, separate from the answer text."""
    _, _, events = decode(sse_cases("deepseek")["reasoning_then_answer"])
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == expected_cases("deepseek")["reasoning_then_answer"]["reasoning"]
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert all(not isinstance(e, ReasoningDelta) for e in events[first_text:])


def test_accumulator_midstream_error_event_carries_code():
    """An in-stream error object becomes one StreamError with the provider's code."""
    _, _, events = decode(sse_cases("openrouter")["midstream_upstream_rate_limit"])
    (error,) = [e for e in events if isinstance(e, StreamError)]
    assert error.status == 429 and error.code == 429
    assert error.retry is True and error.kind == KIND_RATE_LIMIT
    assert "rate-limited upstream" in error.message


def test_accumulator_context_overflow_in_stream_kind_context_length():
    """LM Studio's context overflow inside a 200 stream is recognised as a context error."""
    _, _, events = decode(sse_cases("lmstudio")["context_overflow_in_stream"])
    (error,) = [e for e in events if isinstance(e, StreamError)]
    assert error.kind == KIND_CONTEXT_LENGTH and error.retry is False


def test_accumulator_stream_cut_without_done_fails_ended_early():
    """A stream that ends without [DONE] and without finish_reason is a failure."""
    accumulator, _, events = decode(sse_cases("ollama")["midstream_error_swallowed"])
    assert events[-1] == StreamError("The answer was cut off: the stream ended early.",
                                     retry=True, kind=KIND_CONNECTION)
    assert "the stream ended early" in accumulator.result().failure
    assert accumulator.result().content == "`git rebase"


# --- accumulator merging rules ---------------------------------------------------------------


def openai_chunk(delta: dict, finish_reason=None) -> dict:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def test_accumulator_tool_call_index_absent_uses_array_position():
    """Index-less calls in one chunk (Mistral) are keyed by their position in the array."""
    accumulator = ChatAccumulator()
    accumulator.feed(openai_chunk({"tool_calls": [
        {"id": "a", "function": {"name": "one", "arguments": "{}"}},
        {"id": "b", "function": {"name": "two", "arguments": "{\"x\":1}"}}]}, "tool_calls"))
    calls = accumulator.result().tool_calls
    assert [(c.index, c.id, c.name, c.arguments) for c in calls] == [
        (0, "a", "one", "{}"), (1, "b", "two", "{\"x\":1}")]


def test_accumulator_tool_call_index_absent_new_id_is_new_call():
    """A later index-less whole call with another id is a new call, not a continuation."""
    accumulator = ChatAccumulator()
    accumulator.feed(openai_chunk({"tool_calls": [{"id": "a", "function": {"name": "one", "arguments": "{}"}}]}))
    accumulator.feed(openai_chunk({"tool_calls": [{"id": "b", "function": {"name": "two", "arguments": "{}"}}]}))
    assert [(c.index, c.id, c.arguments) for c in accumulator.result().tool_calls] == [
        (0, "a", "{}"), (1, "b", "{}")]


def test_accumulator_tool_call_empty_id_and_name_never_overwrite():
    """Continuation entries with name "" and no id keep the first id and name."""
    accumulator = ChatAccumulator()
    accumulator.feed(openai_chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "read", "arguments": ""}}]}))
    accumulator.feed(openai_chunk({"tool_calls": [{"index": 0, "id": "", "function": {"name": "", "arguments": "{\"p\":"}}]}))
    accumulator.feed(openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}, "tool_calls"))
    (call,) = accumulator.result().tool_calls
    assert (call.id, call.name, call.arguments) == ("c1", "read", "{\"p\":1}")


def test_accumulator_tool_call_arguments_before_name_are_replayed():
    """Arguments that arrive before the name are sent with the ToolCallStarted event."""
    accumulator = ChatAccumulator()
    first = accumulator.feed(openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\""}}]}))
    second = accumulator.feed(openai_chunk({"tool_calls": [{"index": 0, "id": "x", "function": {"name": "f", "arguments": ":1}"}}]}))
    assert first == []
    assert second == [ToolCallStarted(0, "x", "f"), ToolCallDelta(0, "{\"a\":1}")]


def test_accumulator_tool_call_without_id_gets_generated_id():
    """A server that sends no tool-call id still gives the loop an id to answer."""
    accumulator = ChatAccumulator()
    accumulator.feed(openai_chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}, "tool_calls"))
    (call,) = accumulator.result().tool_calls
    assert call.id.startswith("call_") and len(call.id) == 29


def test_accumulator_truncated_arguments_not_valid():
    """Arguments cut by finish_reason=length do not parse, and parsed_arguments raises."""
    call = ToolCall(0, "id", "write_file", "{\"path\":\"a.py\",\"content\":\"imp")
    assert call.arguments_valid is False
    with pytest.raises(ValueError):
        call.parsed_arguments()
    assert ToolCall(0, "id", "git_status", "").parsed_arguments() == {}


def test_accumulator_event_error_field_raises_stream_error():
    """An `event: error` SSE event fails the answer even without an `error` key."""
    accumulator = ChatAccumulator()
    events = accumulator.feed_sse(SseEvent('{"message":"boom","type":"server_error"}', "error"))
    assert isinstance(events[0], StreamError) and "boom" in events[0].message
    assert events[0].retry is True


def test_accumulator_non_json_chunk_fails():
    """A data event that is not JSON fails the answer instead of raising."""
    accumulator = ChatAccumulator()
    (event,) = accumulator.feed_sse(SseEvent("{not json"))
    assert isinstance(event, StreamError) and accumulator.failed


def test_accumulator_done_without_finish_reason_fails():
    """[DONE] without any finish_reason (llama.cpp legacy error) is not a clean answer."""
    accumulator = ChatAccumulator()
    accumulator.feed(openai_chunk({"content": "partial"}))
    accumulator.feed_sse(SseEvent("[DONE]"))
    (event,) = accumulator.finish()
    assert "without a finish reason" in event.message
    assert accumulator.finish() == []


def test_accumulator_whole_completion_is_accepted():
    """A non-streamed chat.completion (a server that ignored stream: true) gives the same result."""
    accumulator = ChatAccumulator()
    accumulator.feed_completion({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "ok", "reasoning_content": "think",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}})
    assert accumulator.finish() == []
    result = accumulator.result()
    assert (result.content, result.reasoning, result.finish_reason) == ("ok", "think", "tool_calls")
    assert result.tool_calls == [ToolCall(0, "c", "f", "{}")]
    assert result.usage["total_tokens"] == 3


# --- Ollama native NDJSON --------------------------------------------------------------------


def decode_native(case: str, seed: int = 0) -> tuple[ChatAccumulator, list]:
    decoder, accumulator, events = NdjsonDecoder(), ChatAccumulator(), []
    for piece in pieces(ndjson_case(case), seed):
        for line in decoder.feed(piece):
            events += accumulator.feed(line)
    for line in decoder.close():
        events += accumulator.feed(line)
    return accumulator, events + accumulator.finish()


def test_ollama_native_thinking_split_from_content():
    """message.thinking is reasoning, message.content the answer; done carries the counts."""
    for seed in SEEDS:
        accumulator, events = decode_native("chat_thinking", seed)
        result = accumulator.result()
        assert result.reasoning == "The user asks which is larger. 9.90 > 9.11."
        assert result.content == "9.9 is larger than 9.11."
        assert (result.finish_reason, result.saw_done, result.failure) == ("stop", True, None)
        assert result.usage == {"prompt_tokens": 19, "completion_tokens": 58, "total_tokens": 77}
        assert events[-2:] == [Finish("stop"), Usage(result.usage)]


def test_ollama_native_tool_calls_object_arguments():
    """Native tool calls arrive whole with object arguments, serialized to JSON text."""
    accumulator, events = decode_native("chat_tool_calls")
    calls = accumulator.result().tool_calls
    assert [(c.index, c.id, c.name) for c in calls] == [
        (0, "call_k3v9x1qa", "read_file"), (1, "call_p0d7e2mz", "list_dir")]
    assert [c.parsed_arguments() for c in calls] == [{"path": "README.md"}, {"path": "src", "depth": 1}]
    assert ToolCallStarted(0, "call_k3v9x1qa", "read_file") in events


def test_ollama_native_midstream_error_string_fails():
    """A final {"error": "..."} line keeps the text and fails the answer with its message."""
    accumulator, events = decode_native("chat_midstream_error")
    result = accumulator.result()
    assert result.content == " Yes."
    assert result.error == "an error was encountered while running the model: unexpected EOF"
    assert [e for e in events if isinstance(e, StreamError)][0].message.endswith("unexpected EOF")


def test_ndjson_decoder_last_line_without_newline():
    """A last line without its newline is decoded at close; blank lines are skipped."""
    decoder = NdjsonDecoder()
    assert decoder.feed(b'{"a":1}\n\n{"b"') == [{"a": 1}]
    assert decoder.feed(b':2}') == []
    assert decoder.close() == [{"b": 2}]


def test_ndjson_decoder_invalid_line_raises():
    """A line that is not JSON raises StreamFormatError."""
    with pytest.raises(StreamFormatError):
        NdjsonDecoder().feed(b"oops\n")


# --- SSE decoder -----------------------------------------------------------------------------


def test_sse_decoder_multiline_data_joined_with_newline():
    """Several data lines make one event joined with \\n; one leading space is stripped."""
    events = SseDecoder().feed(b"data: a\ndata:b\ndata:  c\n\n")
    assert events == [SseEvent("a\nb\n c")]


def test_sse_decoder_event_id_and_retry_fields():
    """event names the type, id sets last_event_id, retry is read, unknown fields are dropped."""
    decoder = SseDecoder()
    events = decoder.feed(b"event: error\nid: 7\nretry: 1500\nfoo: bar\ndata: x\n\n")
    assert events == [SseEvent("x", "error", "7")]
    assert (decoder.retry_ms, decoder.ignored_lines) == (1500, ["foo: bar"])


def test_sse_decoder_comments_kept_and_counted():
    """Comments are not events; their text is kept without the leading space."""
    decoder = SseDecoder()
    assert decoder.feed(b": keep-alive\n\n:x\n\n") == []
    assert (decoder.comments, decoder.comment_count) == (["keep-alive", "x"], 2)


def test_sse_decoder_utf8_split_across_feeds():
    """A multi-byte character split between two feeds decodes intact."""
    raw = "data: héllo ✓\n\n".encode()
    decoder = SseDecoder()
    cut = raw.index("✓".encode()) + 1
    assert decoder.feed(raw[:cut]) == []
    assert decoder.feed(raw[cut:]) == [SseEvent("héllo ✓")]


def test_sse_decoder_crlf_split_across_feeds():
    """A CR that ends one feed and an LF that starts the next are one line end, not two."""
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == [SseEvent("a")]
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [SseEvent("b")]


def test_sse_decoder_bom_and_field_without_colon():
    """A leading BOM is ignored; a line `data` alone adds an empty data line."""
    events = SseDecoder().feed("\ufeffdata\ndata: x\n\n".encode())
    assert events == [SseEvent("\nx")]


def test_sse_decoder_incomplete_event_not_dispatched():
    """Without its blank line an event is not dispatched, and `pending` says so."""
    decoder = SseDecoder()
    assert decoder.feed(b"data: {\"a\":1}\n") == []
    assert decoder.pending is True


def test_sse_decoder_done_marker():
    """`data: [DONE]` is recognised as the end of an OpenAI stream."""
    (event,) = SseDecoder().feed(b"data: [DONE]\n\n")
    assert event.is_done


def test_sse_decoder_line_too_long_raises():
    """A line that never ends stops at MAX_LINE_BYTES instead of growing memory."""
    decoder = SseDecoder()
    with pytest.raises(StreamFormatError):
        for _ in range(MAX_LINE_BYTES // (1 << 20) + 2):
            decoder.feed(b"x" * (1 << 20))


# --- tool calls written as text --------------------------------------------------------------

TOOLS = {"read_file", "list_dir", "git_status"}


def test_text_tool_calls_tool_call_tag_extracted():
    """A <tool_call> JSON block with a known name becomes a call and leaves the text."""
    text = 'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    remaining, calls = extract_text_tool_calls(text, TOOLS)
    assert remaining == "Let me look."
    assert [(c.index, c.name, c.parsed_arguments()) for c in calls] == [(0, "read_file", {"path": "a.py"})]
    assert calls[0].id.startswith("call_")


@pytest.mark.parametrize("fence", ["json", "tool_call", ""])
@pytest.mark.parametrize("key", ["arguments", "parameters", "input"])
def test_text_tool_calls_fenced_block_extracted(fence, key):
    """Fenced json, tool_call or plain blocks work with arguments, parameters or input."""
    text = f'Reading:\n```{fence}\n{{"name": "list_dir", "{key}": {{"path": "src"}}}}\n```\nthen more'
    remaining, calls = extract_text_tool_calls(text, TOOLS)
    assert remaining == "Reading:\n\nthen more"
    assert [(c.name, c.parsed_arguments()) for c in calls] == [("list_dir", {"path": "src"})]


def test_text_tool_calls_other_language_fence_skipped_whole():
    """A ```python block before a json call block neither matches nor hides the call."""
    text = ('Code:\n```python\nprint("hi")\n```\nNow:\n```json\n'
            '{"name": "read_file", "arguments": {"path": "a"}}\n```')
    remaining, calls = extract_text_tool_calls(text, TOOLS)
    assert remaining == 'Code:\n```python\nprint("hi")\n```\nNow:'
    assert [c.name for c in calls] == ["read_file"]


def test_text_tool_calls_unknown_name_left_alone():
    """JSON naming a tool we do not have is ordinary text."""
    text = '```json\n{"name": "rm_rf", "arguments": {}}\n```'
    assert extract_text_tool_calls(text, TOOLS) == (text, [])


def test_text_tool_calls_fence_without_arguments_left_alone():
    """A fenced object with a known name but no arguments key is an example, not a call."""
    text = '```json\n{"name": "read_file"}\n```'
    assert extract_text_tool_calls(text, TOOLS) == (text, [])


def test_text_tool_calls_invalid_json_left_alone():
    """A block that is not JSON stays in the text."""
    text = "<tool_call>{name: read_file}</tool_call>"
    assert extract_text_tool_calls(text, TOOLS) == (text, [])


def test_text_tool_calls_several_blocks_and_list():
    """A list in one block and further blocks give several calls in order."""
    text = ('<tool_call>[{"name": "git_status"}, {"name": "read_file", "arguments": "{\\"path\\": \\"x\\"}"}]'
            '</tool_call>\n<tool_call>{"function": {"name": "list_dir", "arguments": {}}}</tool_call>')
    remaining, calls = extract_text_tool_calls(text, TOOLS)
    assert remaining == ""
    assert [(c.index, c.name, c.parsed_arguments()) for c in calls] == [
        (0, "git_status", {}), (1, "read_file", {"path": "x"}), (2, "list_dir", {})]


def test_text_tool_calls_unclosed_tag_at_end():
    """A model stopped before </tool_call>: the JSON up to the end still counts."""
    remaining, calls = extract_text_tool_calls('ok <tool_call>{"name": "git_status", "arguments": {}}', TOOLS)
    assert (remaining, [c.name for c in calls]) == ("ok", ["git_status"])


# --- HTTP errors -----------------------------------------------------------------------------

# (kind, retry, retry_after) per errors.json case; None for retry_after means "no hint".
ERROR_EXPECTATIONS = {
    ("openai", "401_invalid_api_key"): (KIND_AUTH, False, None),
    ("openai", "429_rate_limit_tokens"): (KIND_RATE_LIMIT, True, 3.0),
    ("openai", "429_insufficient_quota"): (KIND_BILLING, False, None),
    ("openai", "400_context_length_exceeded"): (KIND_CONTEXT_LENGTH, False, None),
    ("openai", "500_server_error"): (KIND_SERVER, True, None),
    ("openrouter", "401_no_auth"): (KIND_AUTH, False, None),
    ("openrouter", "402_insufficient_credits"): (KIND_BILLING, False, None),
    ("openrouter", "429_free_models_per_day"): (KIND_RATE_LIMIT, False, None),
    ("openrouter", "429_upstream_rate_limited"): (KIND_RATE_LIMIT, True, 5.0),
    ("openrouter", "400_context_too_long"): (KIND_CONTEXT_LENGTH, False, None),
    ("openrouter", "404_no_tool_endpoints"): (KIND_TOOLS_UNSUPPORTED, False, None),
    ("openrouter", "502_provider_down"): (KIND_SERVER, True, None),
    ("deepseek", "401_authentication_fails"): (KIND_AUTH, False, None),
    ("deepseek", "402_insufficient_balance"): (KIND_BILLING, False, None),
    ("deepseek", "400_reasoning_content_not_passed_back"): (KIND_INVALID_REQUEST, False, None),
    ("deepseek", "400_context_too_long"): (KIND_CONTEXT_LENGTH, False, None),
    ("deepseek", "429_rate_limit"): (KIND_RATE_LIMIT, True, None),
    ("deepseek", "503_server_overloaded"): (KIND_OVERLOADED, True, None),
    ("groq", "401_invalid_api_key"): (KIND_AUTH, False, None),
    ("groq", "429_tokens_per_minute"): (KIND_RATE_LIMIT, True, 23.5125),
    ("groq", "413_request_exceeds_tpm"): (KIND_REQUEST_TOO_LARGE, False, None),
    ("groq", "400_context_length_exceeded"): (KIND_CONTEXT_LENGTH, False, None),
    ("groq", "400_tool_use_failed"): (KIND_TOOL_USE_FAILED, False, None),
    ("groq", "503_over_capacity"): (KIND_OVERLOADED, True, None),
    ("mistral", "401_unauthorized"): (KIND_AUTH, False, None),
    ("mistral", "429_requests_rate_limit"): (KIND_RATE_LIMIT, True, 3.0),
    ("mistral", "429_service_tier_capacity"): (KIND_OVERLOADED, True, None),
    ("mistral", "400_context_too_long"): (KIND_CONTEXT_LENGTH, False, None),
    ("mistral", "422_validation"): (KIND_INVALID_REQUEST, False, None),
    ("together", "401_invalid_api_key"): (KIND_AUTH, False, None),
    ("together", "429_rate_limit"): (KIND_RATE_LIMIT, True, 2.0),
    ("together", "400_context_too_long"): (KIND_CONTEXT_LENGTH, False, None),
    ("ollama", "404_model_not_found_v1"): (KIND_MODEL_NOT_FOUND, False, None),
    ("ollama", "400_no_tool_support_v1"): (KIND_TOOLS_UNSUPPORTED, False, None),
    ("ollama", "500_runner_error_v1"): (KIND_SERVER, True, None),
    ("ollama", "native_error_plain_string"): (KIND_MODEL_NOT_FOUND, False, None),
    ("ollama", "401_cloud_model_signin"): (KIND_AUTH, False, None),
    ("llamacpp", "401_invalid_api_key"): (KIND_AUTH, False, None),
    ("llamacpp", "400_exceed_context_size"): (KIND_CONTEXT_LENGTH, False, None),
    ("llamacpp", "503_loading_model"): (KIND_OVERLOADED, True, None),
    ("llamacpp", "500_server_error"): (KIND_SERVER, True, None),
    ("llamacpp", "501_not_supported"): (KIND_UNSUPPORTED, False, None),
    ("lmstudio", "400_context_overflow_string_error"): (KIND_CONTEXT_LENGTH, False, None),
    ("lmstudio", "404_model_not_found"): (KIND_MODEL_NOT_FOUND, False, None),
    ("lmstudio", "401_api_token_required"): (KIND_AUTH, False, None),
    ("vllm", "400_context_length_object_error"): (KIND_CONTEXT_LENGTH, False, None),
    ("vllm", "400_context_length_nested_error"): (KIND_CONTEXT_LENGTH, False, None),
    ("anthropic", "401_authentication_error"): (KIND_AUTH, False, None),
    ("anthropic", "400_prompt_too_long"): (KIND_CONTEXT_LENGTH, False, None),
    ("anthropic", "400_credit_balance_too_low"): (KIND_BILLING, False, None),
    ("anthropic", "404_model_not_found"): (KIND_MODEL_NOT_FOUND, False, None),
    ("anthropic", "413_request_too_large"): (KIND_REQUEST_TOO_LARGE, False, None),
    ("anthropic", "429_rate_limit_error"): (KIND_RATE_LIMIT, True, 24.0),
    ("anthropic", "500_api_error"): (KIND_SERVER, True, None),
    ("anthropic", "529_overloaded_error"): (KIND_OVERLOADED, True, None),
    ("gemini", "400_api_key_invalid"): (KIND_AUTH, False, None),
    ("gemini", "403_permission_denied"): (KIND_AUTH, False, None),
    ("gemini", "400_input_token_count_exceeded"): (KIND_CONTEXT_LENGTH, False, None),
    ("gemini", "400_invalid_argument"): (KIND_INVALID_REQUEST, False, None),
    ("gemini", "400_failed_precondition"): (KIND_INVALID_REQUEST, False, None),
    ("gemini", "404_model_not_found"): (KIND_MODEL_NOT_FOUND, False, None),
    ("gemini", "429_resource_exhausted"): (KIND_RATE_LIMIT, True, 37.628412902),
    ("gemini", "500_internal"): (KIND_SERVER, True, None),
    ("gemini", "503_unavailable"): (KIND_OVERLOADED, True, None),
    ("any", "502_html_from_edge_proxy"): (KIND_SERVER, True, None),
}
# The window each context-length case states, as the error's `window` (None: it states none).
STATED_WINDOWS = {
    ("openai", "400_context_length_exceeded"): 128000,
    ("openrouter", "400_context_too_long"): 131072,
    ("deepseek", "400_context_too_long"): 131072,
    ("groq", "400_context_length_exceeded"): None,
    ("mistral", "400_context_too_long"): 131072,
    ("together", "400_context_too_long"): 131073,
    ("llamacpp", "400_exceed_context_size"): 8192,
    ("lmstudio", "400_context_overflow_string_error"): 4096,
    ("vllm", "400_context_length_object_error"): 8192,
    ("vllm", "400_context_length_nested_error"): 8192,
    ("anthropic", "400_prompt_too_long"): 200000,
    ("gemini", "400_input_token_count_exceeded"): 1048576,
}
ERRORS = error_fixtures()
# errors.json's retry vocabulary: which policies mean "try the same request again later".
RETRY_POLICIES = {"backoff": True, "after_delay": True, "never": False, "after_fix": False,
                  "after_compaction": False, "after_lowering_max_tokens": False}
NOW = 1788825600.0 - 3 * 3600  # three hours before the OpenRouter daily reset in errors.json


def test_classify_http_error_table_covers_every_fixture():
    """The expectation table names every case of errors.json, no more, no less."""
    assert set(ERROR_EXPECTATIONS) == {(e["provider"], e["case"]) for e in ERRORS}


@pytest.mark.parametrize("entry", ERRORS, ids=[f"{e['provider']}-{e['case']}" for e in ERRORS])
def test_classify_http_error_fixture_kind_retry_delay(entry):
    """Each errors.json answer gets its kind, retry decision, delay and a readable message."""
    error = classify_http_error(entry["status"], entry["headers"], entry["body"].encode(), now=NOW)
    kind, retry, retry_after = ERROR_EXPECTATIONS[(entry["provider"], entry["case"])]
    assert (error.kind, error.retry, error.retry_after) == (kind, retry, retry_after)
    assert error.status == entry["status"]
    if entry["retry"] in RETRY_POLICIES:
        assert error.retry is RETRY_POLICIES[entry["retry"]]
    assert error.message[0].isupper() and f"({entry['status']})" in error.message
    assert str(error) == error.message


def test_classify_http_error_reads_the_window_a_context_error_states():
    """Every context-length case of errors.json, and only those, carries the window its wording
    states; other errors carry none, even when their text has numbers of tokens."""
    for entry in ERRORS:
        error = classify_http_error(entry["status"], entry["headers"], entry["body"].encode(), now=NOW)
        key = (entry["provider"], entry["case"])
        assert (error.kind == KIND_CONTEXT_LENGTH) is (key in STATED_WINDOWS), key
        assert error.window == STATED_WINDOWS.get(key), key
    assert stated_window("This model's maximum context length is 0 tokens.") is None
    assert stated_window("Please reduce the length of the messages.") is None


def test_classify_http_error_messages_a_person_understands():
    """The key, context and model errors read as plain sentences."""
    by_case = {(e["provider"], e["case"]): e for e in ERRORS}

    def message(provider, case):
        entry = by_case[(provider, case)]
        return classify_http_error(entry["status"], entry["headers"], entry["body"].encode(), now=NOW).message

    assert message("openai", "401_invalid_api_key").startswith("The provider rejected the API key (401)")
    assert message("openai", "400_context_length_exceeded").startswith(
        "The prompt is longer than the model's context window")
    assert message("ollama", "404_model_not_found_v1").startswith("Unknown model 'qwen3-coder:30b'")
    assert message("lmstudio", "404_model_not_found").startswith("Unknown model 'qwen3-coder-30b'")
    assert "upstream connect error" in message("openrouter", "502_provider_down")
    assert message("any", "502_html_from_edge_proxy").endswith(": 502 Bad Gateway")
    assert "sign" in message("ollama", "401_cloud_model_signin")
    assert "3 hours" in message("openrouter", "429_free_models_per_day")


def test_classify_http_error_daily_reset_soon_is_retryable():
    """A daily quota that resets within minutes is worth waiting for."""
    entry = next(e for e in ERRORS if e["case"] == "429_free_models_per_day")
    error = classify_http_error(429, entry["headers"], entry["body"].encode(), now=1788825600.0 - 30)
    assert (error.retry, error.retry_after) == (True, 30.0)


def test_classify_http_error_retry_after_http_date():
    """Retry-After as an HTTP date is turned into seconds from now."""
    error = classify_http_error(503, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, b"",
                                now=1445412480.0 - 12)
    assert (error.retry, error.retry_after) == (True, 12.0)


def test_classify_http_error_retry_after_ms_preferred_when_larger():
    """retry-after-ms counts as a hint in milliseconds; the largest hint wins."""
    error = classify_http_error(429, [("retry-after-ms", "2500"), ("retry-after", "1")], b"{}", now=0)
    assert error.retry_after == 2.5


def test_classify_http_error_overloaded_529_retryable():
    """529 (overloaded) is retryable; 403 is not."""
    assert classify_http_error(529, {}, b'{"error":{"type":"overloaded_error","message":"Overloaded"}}').retry
    assert not classify_http_error(403, {}, b'{"error":{"message":"flagged"}}').retry


def test_classify_http_error_redirect_names_location():
    """A redirect is not followed: the message says where the provider moved."""
    error = classify_http_error(308, {"Location": "https://api.example.com/v1/chat/completions"}, b"")
    assert (error.kind, error.retry) == (KIND_REDIRECT, False)
    assert error.message.endswith("it moved to https://api.example.com/v1/chat/completions")


def test_classify_http_error_body_not_json_uses_text():
    """A plain-text body becomes the detail; an empty body still gives a sentence."""
    assert classify_http_error(500, {}, b"upstream crashed").message.endswith(": upstream crashed")
    assert classify_http_error(500, {}, b"").message == "The provider had a server error (500)"


def test_provider_error_round_trips_through_json_for_events():
    """The error's public fields are plain data that the loop can publish."""
    error = classify_http_error(429, {"retry-after": "3"}, b'{"error":{"message":"slow down"}}', now=0)
    data = {"message": error.message, "retry": error.retryable, "retry_after": error.retry_after,
            "kind": error.kind, "status": error.status}
    assert json.loads(json.dumps(data))["retry_after"] == 3.0


# --- linear decoding of long lines (issue 11) --------------------------------------------------
#
# A quadratic decoder re-reads its whole buffer for every piece: a line near MAX_LINE_BYTES fed in
# 1 KB pieces then costs about 16 K passes over up to 16 MB (minutes; the old NDJSON decoder took
# 5 s for 4 MB), so these tests would hang the suite. No time is asserted.

LONG_PIECE = 1024


def long_line_text() -> str:
    return "x" * (MAX_LINE_BYTES - 64)


def test_ndjson_decoder_long_line_in_small_pieces_completes():
    """A line of almost 16 MB fed in 1 KB pieces decodes: only the new bytes are searched."""
    text = long_line_text()
    body = json.dumps({"message": {"content": text}, "done": False}).encode() + b"\n" + b'{"done": true}\n'
    decoder, values = NdjsonDecoder(), []
    for start in range(0, len(body), LONG_PIECE):
        values += decoder.feed(body[start:start + LONG_PIECE])
    assert [len(v.get("message", {}).get("content", "")) for v in values] == [len(text), 0]
    assert decoder.close() == []


def test_sse_decoder_long_line_in_small_pieces_completes():
    """A data line of almost 16 MB fed in 1 KB pieces decodes as one event."""
    text = long_line_text()
    body = b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"
    decoder, events = SseDecoder(), []
    for start in range(0, len(body), LONG_PIECE):
        events += decoder.feed(body[start:start + LONG_PIECE])
    assert [len(json.loads(e.data)["choices"][0]["delta"]["content"]) for e in events] == [len(text)]


def test_ndjson_decoder_lines_split_anywhere():
    """Lines cut at every position, several in one piece or one across many, decode the same."""
    lines = [{"n": i, "text": "é" * i} for i in range(40)]
    body = b"".join(json.dumps(line, ensure_ascii=False).encode() + b"\n" for line in lines)
    for size in (1, 2, 3, 7, 64, len(body)):
        decoder, values = NdjsonDecoder(), []
        for start in range(0, len(body), size):
            values += decoder.feed(body[start:start + size])
        assert values + decoder.close() == lines, size
