"""The provider client over real loopback sockets, against the scripted model server: every
fixture case end to end, body framings, HTTP errors, stalls, cancellation and network failures."""

import asyncio
import contextlib
import datetime
import json
import os
import socket
import ssl
import tempfile
import time
from unittest import mock

import pytest

from tests.model_server import (
    FastStream,
    Fixture,
    Hangup,
    HttpError,
    JsonResponse,
    ScriptedModel,
    Stall,
    Stream,
    chunk,
    expected_cases,
    finish_chunk,
    models_fixture,
    reply,
    stream_providers,
    text_chunks,
)
from totem.agent.client import ProviderConnectionError, open_stream, request_json, stream_chat
from totem.agent.kinds import kind_named
from totem.agent.provider_errors import (
    KIND_AUTH,
    KIND_CONNECTION,
    KIND_INVALID_RESPONSE,
    KIND_MODEL_NOT_FOUND,
    KIND_RATE_LIMIT,
    ProviderError,
)
from totem.agent.stream import StreamEnd, StreamError, TextDelta, ToolCallStarted

# Every wait is a multiple of MS; raise TOTEM_TEST_SLOWDOWN on a slow machine (as tests/utils.py).
MS = 0.001 * float(os.environ.get("TOTEM_TEST_SLOWDOWN", "1"))
CASES = [(p, c) for p in stream_providers() for c in expected_cases(p)]
BODY = {"model": "scripted-model", "messages": [{"role": "user", "content": "hi"}]}
OPENAI, OLLAMA = kind_named("openai"), kind_named("ollama")
# The fixtures of a wire that is not OpenAI's chunks are read by their own kind.
NATIVE_KINDS = frozenset({"anthropic", "gemini"})
RESULT_KEYS = ("content", "reasoning", "reasoning_details", "finish_reason", "usage", "error",
               "saw_done", "chunks")


async def collect(url: str, key: str | None = "sk-test", body: dict = BODY, kind=OPENAI, **options) -> list:
    async with contextlib.aclosing(stream_chat(kind, url, key, body, **options)) as stream:
        return [event async for event in stream]


def final_result(events: list):
    assert isinstance(events[-1], StreamEnd)
    return events[-1].result


def result_fields(result, expected: dict) -> dict:
    got = {key: getattr(result, key) for key in RESULT_KEYS if key in expected}
    got["tool_calls"] = [
        {"index": c.index, "id": c.id, "name": c.name, "arguments": c.arguments,
         "arguments_valid_json": c.arguments_valid,
         **({"arguments_parsed": c.parsed_arguments()} if c.arguments_valid else {})}
        for c in result.tool_calls]
    return got


def expected_fields(expected: dict) -> dict:
    return {k: v for k, v in expected.items() if k in RESULT_KEYS or k == "tool_calls"}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.asynccontextmanager
async def raw_server(response: bytes):
    """A loopback server that reads one request head and answers these exact bytes."""
    async def handle(reader, writer):
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(response)
            await writer.drain()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    finally:
        server.close()
        await server.wait_closed()


# --- every fixture case, end to end ----------------------------------------------------------


@pytest.mark.parametrize("transfer", ["chunked", "length", "close"])
@pytest.mark.parametrize("provider,case", CASES, ids=[f"{p}-{c}" for p, c in CASES])
def test_stream_chat_fixture_case_end_to_end(provider, case, transfer):
    """Each recorded case, replayed in random TCP pieces, gives the expected result."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(Fixture(provider, case, transfer=transfer, seed=len(case),
                                 max_piece=64 if transfer == "chunked" else 256))
            if provider in NATIVE_KINDS:
                kind = kind_named(provider)
                events = await collect(kind.chat_url(model.base, "scripted-model"), kind=kind)
            else:
                events = await collect(model.chat_url)
        expected = expected_cases(provider)[case]
        result = final_result(events)
        assert result_fields(result, expected) == expected_fields(expected)
        failed = expected["error"] is not None or expected["finish_reason"] in (None, "error", "refusal")
        assert (result.failure is not None) == failed
        assert sum(isinstance(e, StreamError) for e in events) == int(failed)

    asyncio.run(scenario())


def test_stream_chat_request_body_and_headers():
    """The request asks for a stream with usage and carries the key as a bearer token."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(reply("hello"))
            body = dict(BODY, stream_options={"include_obfuscation": False})
            await collect(model.chat_url, "sk-test", body)
        (request,) = model.requests
        assert (request.method, request.path) == ("POST", "/v1/chat/completions")
        assert request.body == dict(BODY, stream=True, stream_options={
            "include_obfuscation": False, "include_usage": True})
        assert body == dict(BODY, stream_options={"include_obfuscation": False})  # not mutated
        assert request.headers["authorization"] == "Bearer sk-test"
        assert request.headers["accept"] == "text/event-stream"
        assert request.headers["content-type"] == "application/json"
        assert request.headers["host"] == f"127.0.0.1:{model.port}"

    asyncio.run(scenario())


def test_a_request_of_megabytes_arrives_byte_for_byte():
    """A long session's request (many messages, megabytes) is written in batches from the kept
    JSON of its messages: the model reads exactly the JSON of the whole body, at its length."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(reply("hello"))
            messages = [{"role": "tool", "tool_call_id": f"c{index}", "content": f"{index} é " * 30_000}
                        for index in range(12)]
            await collect(model.chat_url, None, {"model": "scripted-model", "messages": messages})
        (request,) = model.requests
        sent = dict({"model": "scripted-model", "messages": messages}, stream=True,
                    stream_options={"include_usage": True})
        assert request.raw_body == json.dumps(sent, ensure_ascii=False, separators=(",", ":")).encode()
        assert int(request.headers["content-length"]) == len(request.raw_body) > 1_500_000

    asyncio.run(scenario())


def test_stream_chat_without_key_sends_no_authorization():
    """Local servers need no key: no Authorization header is sent."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(reply("hi"))
            await collect(model.chat_url, None)
        assert "authorization" not in model.requests[0].headers

    asyncio.run(scenario())


def test_stream_chat_constructed_reply_with_reasoning_and_tools():
    """A constructed stream with reasoning, text and two fragmented tool calls accumulates."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(reply("Reading.", reasoning="Need the file.",
                               tool_calls=[("read_file", {"path": "a.py"}), ("list_dir", {"path": "."})]))
            events = await collect(model.chat_url)
        result = final_result(events)
        assert (result.content, result.reasoning, result.finish_reason) == (
            "Reading.", "Need the file.", "tool_calls")
        assert [(c.name, c.parsed_arguments()) for c in result.tool_calls] == [
            ("read_file", {"path": "a.py"}), ("list_dir", {"path": "."})]
        assert [e.name for e in events if isinstance(e, ToolCallStarted)] == ["read_file", "list_dir"]
        assert result.usage == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}

    asyncio.run(scenario())


def test_stream_chat_native_ollama_ndjson():
    """Ollama's native /api/chat NDJSON streams through the same events."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(Fixture("ollama-native", "chat_tool_calls"), Fixture("ollama-native", "chat_thinking"))
            tools = final_result(await collect(model.ollama_chat_url, None, kind=OLLAMA))
            thinking = final_result(await collect(model.ollama_chat_url, None, kind=OLLAMA))
        assert [c.name for c in tools.tool_calls] == ["read_file", "list_dir"]
        assert (thinking.content, thinking.failure) == ("9.9 is larger than 9.11.", None)
        assert model.requests[0].path == "/api/chat"
        assert model.requests[0].body == dict(BODY, stream=True)
        assert model.requests[0].headers["accept"] == "application/x-ndjson"

    asyncio.run(scenario())


def test_stream_chat_native_ollama_midstream_error():
    """A native {"error": ...} line after 200 is a StreamError, the text is kept."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(Fixture("ollama-native", "chat_midstream_error", transfer="close"))
            events = await collect(model.ollama_chat_url, None, kind=OLLAMA)
        assert final_result(events).content == " Yes."
        assert isinstance(events[-2], StreamError) and "unexpected EOF" in events[-2].message

    asyncio.run(scenario())


def test_stream_chat_whole_json_answer_accepted():
    """A server that ignores stream: true and answers one chat.completion still works."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(JsonResponse({"choices": [{"index": 0, "finish_reason": "stop",
                                                    "message": {"role": "assistant", "content": "whole"}}]}))
            events = await collect(model.chat_url)
        assert events[0] == TextDelta("whole")
        assert (final_result(events).content, final_result(events).failure) == ("whole", None)

    asyncio.run(scenario())


def test_stream_chat_fast_stream_many_deltas():
    """Thousands of small deltas arrive complete and in order."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(FastStream(5000, "ab"))
            events = await collect(model.chat_url)
        result = final_result(events)
        assert result.content == "ab" * 5000
        assert (result.finish_reason, result.usage["completion_tokens"]) == ("stop", 5000)

    asyncio.run(scenario())


# --- HTTP errors before streaming ------------------------------------------------------------


def http_error_of(provider: str, case: str, key: str = "sk-test") -> ProviderError:
    """The ProviderError that streaming raises when the model answers with this error fixture."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(HttpError.fixture(provider, case))
            with pytest.raises(ProviderError) as caught:
                await collect(model.chat_url, key)
        return caught.value

    return asyncio.run(scenario())


def test_stream_chat_429_retry_after_is_retryable():
    """A 429 with Retry-After raises a retryable ProviderError with the delay."""
    error = http_error_of("openai", "429_rate_limit_tokens")
    assert (error.status, error.kind, error.retry, error.retry_after) == (429, KIND_RATE_LIMIT, True, 3.0)


def test_stream_chat_401_not_retryable_and_key_not_echoed():
    """A 401 is not retryable, says the key was rejected, and never contains the key."""
    error = http_error_of("groq", "401_invalid_api_key", "gsk_supersecret")
    assert (error.status, error.kind, error.retry) == (401, KIND_AUTH, False)
    assert error.message.startswith("The provider rejected the API key (401)")
    assert "gsk_supersecret" not in repr(error) + str(error)
    assert not isinstance(error, ProviderConnectionError)


def test_stream_chat_404_unknown_model():
    """An unknown model names the model in the message."""
    error = http_error_of("ollama", "404_model_not_found_v1")
    assert error.kind == KIND_MODEL_NOT_FOUND
    assert error.message.startswith("Unknown model 'qwen3-coder:30b'")


def test_stream_chat_html_502_retryable():
    """An HTML 502 from an edge proxy is retryable and readable."""
    error = http_error_of("any", "502_html_from_edge_proxy")
    assert error.retry is True and error.message.endswith("502 Bad Gateway")


# --- stalls, cancellation, cut streams -------------------------------------------------------


def test_stream_chat_stalled_stream_cancelled_within_a_second():
    """Cancelling the consumer of a stalled stream closes the socket at once; the server sees it."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(Stall(text_chunks("partial", 1)))
            first = asyncio.Event()

            async def consume():
                async with contextlib.aclosing(stream_chat(OPENAI, model.chat_url, "k", BODY)) as stream:
                    async for event in stream:
                        if isinstance(event, TextDelta):
                            first.set()

            task = asyncio.create_task(consume())
            async with asyncio.timeout(2000 * MS):
                await first.wait()
            started = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await model.wait_disconnect(1000 * MS)
            assert time.monotonic() - started < 1.0
            assert model.disconnects == 1

    asyncio.run(scenario())


def test_stream_chat_leaving_loop_early_closes_socket():
    """Breaking out of the events inside aclosing closes the connection at once."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(Stall(text_chunks("partial", 1)))
            async with contextlib.aclosing(stream_chat(OPENAI, model.chat_url, "k", BODY)) as stream:
                async for event in stream:
                    assert event == TextDelta("partial")
                    break
            await model.wait_disconnect(1000 * MS)

    asyncio.run(scenario())


def test_stream_chat_read_timeout_midstream_is_stream_error():
    """No bytes for longer than read_timeout ends the answer with a retryable StreamError."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(Stall(text_chunks("partial", 1)))
            events = await collect(model.chat_url, read_timeout=200 * MS)
        error = events[-2]
        assert isinstance(error, StreamError)
        assert (error.kind, error.retry) == (KIND_CONNECTION, True) and "timed out" in error.message
        assert final_result(events).content == "partial"

    asyncio.run(scenario())


def test_stream_chat_stall_before_headers_raises_connection_error():
    """A server that never answers raises ProviderConnectionError after read_timeout."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(Stall(before_headers=True))
            with pytest.raises(ProviderConnectionError) as caught:
                await collect(model.chat_url, read_timeout=200 * MS)
            await model.wait_disconnect(1000 * MS)
        assert caught.value.retry is True and "timed out" in caught.value.message
        assert f"127.0.0.1:{model.port}" in caught.value.message

    asyncio.run(scenario())


def test_stream_chat_stall_after_headers_cancelled_closes_socket():
    """A stream stalled right after its headers is cancelled at once, the server sees it."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(Stall())
            task = asyncio.create_task(collect(model.chat_url))
            while not model.requests:
                await asyncio.sleep(10 * MS)
            await asyncio.sleep(50 * MS)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await model.wait_disconnect(1000 * MS)

    asyncio.run(scenario())


def test_stream_chat_hangup_midbody_is_stream_error():
    """A connection closed inside the chunked body is a cut answer, not a clean end."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(Hangup(text_chunks("half an answer", 2)))
            events = await collect(model.chat_url)
        error = events[-2]
        assert isinstance(error, StreamError) and error.retry is True
        assert "before its body was complete" in error.message
        assert final_result(events).content == "half an answer"

    asyncio.run(scenario())


def test_stream_chat_keepalive_comments_only_time_out():
    """Keep-alive comments alone cannot hold a stream open past keepalive_timeout."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(Stream([": keep-alive\n\n"] * 20, done=False, interval=30 * MS))
            events = await collect(model.chat_url, keepalive_timeout=150 * MS)
        assert isinstance(events[-2], StreamError) and "keep-alive" in events[-2].message

    asyncio.run(scenario())


def test_stream_chat_keepalive_comments_between_chunks_are_fine():
    """Comments between real chunks, within the limits, do not disturb the answer."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(Stream([": keep-alive\n\n", chunk({"content": "a"}), ": keep-alive\n\n",
                                 chunk({"content": "b"}), finish_chunk()], interval=10 * MS))
            events = await collect(model.chat_url, keepalive_timeout=1000 * MS)
        assert (final_result(events).content, final_result(events).failure) == ("ab", None)

    asyncio.run(scenario())


# --- network failures ------------------------------------------------------------------------


def test_stream_chat_connection_refused_closed_port():
    """A closed port gives a retryable ProviderConnectionError naming host and reason."""
    async def scenario():
        port = closed_port()
        with pytest.raises(ProviderConnectionError) as caught:
            await collect(f"http://127.0.0.1:{port}/v1/chat/completions")
        error = caught.value
        assert error.retry is True and error.kind == KIND_CONNECTION
        assert error.message == f"Could not connect to 127.0.0.1:{port}: connection refused"

    asyncio.run(scenario())


def test_open_stream_tls_untrusted_certificate_refused():
    """https to a server with a self-signed certificate fails verification, not retryable."""
    async def scenario(context):
        # The server side logs the handshake the client abandons: expected, keep it quiet.
        asyncio.get_running_loop().set_exception_handler(lambda loop, details: None)
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(ProviderConnectionError) as caught:
                async with open_stream("GET", f"https://127.0.0.1:{port}/v1/models"):
                    pass
        finally:
            server.close()
            await server.wait_closed()
        assert caught.value.retry is False and "certificate" in caught.value.message

    with tempfile.TemporaryDirectory() as folder:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*self_signed_certificate(folder))
    asyncio.run(scenario(context))


def self_signed_certificate(folder: str) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    cert_path, key_path = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path


def test_open_stream_header_with_newline_rejected_without_echo():
    """A header value with a line break is refused before connecting, without echoing it."""
    async def scenario():
        with pytest.raises(ValueError) as caught:
            async with open_stream("GET", "http://127.0.0.1:9/", {"Authorization": "Bearer sk-x\r\nX: y"}):
                pass
        assert "sk-x" not in str(caught.value)

    asyncio.run(scenario())


def test_open_stream_bad_url_rejected():
    """Only http and https URLs with a host are accepted."""
    async def scenario():
        for url in ("ftp://host/x", "http:///nohost", "localhost:8080"):
            with pytest.raises(ValueError):
                async with open_stream("GET", url):
                    pass

    asyncio.run(scenario())


# --- framing details (raw responses) ---------------------------------------------------------


def test_open_stream_chunk_extensions_trailers_and_informational():
    """A 100 Continue first, chunk extensions and trailer fields are all handled."""
    raw = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
           b"X-Seen: 1\r\nX-Seen: 2\r\n\r\n5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n")

    async def scenario():
        async with raw_server(raw) as url, open_stream("GET", url) as response:
            assert (response.status, response.headers["x-seen"]) == (200, "1, 2")
            assert await response.read(100) == b"hello world"
            assert response.complete

    asyncio.run(scenario())


def test_open_stream_content_length_short_body_is_connection_error():
    """A body shorter than its Content-Length raises a retryable connection error."""
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nonly this"

    async def scenario():
        async with raw_server(raw) as url, open_stream("GET", url) as response:
            with pytest.raises(ProviderConnectionError) as caught:
                await response.read(100)
        assert caught.value.retry is True

    asyncio.run(scenario())


def test_open_stream_bad_chunk_size_is_invalid_response():
    """A chunk size that is not hexadecimal is a malformed response."""
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"

    async def scenario():
        async with raw_server(raw) as url, open_stream("GET", url) as response:
            with pytest.raises(ProviderError) as caught:
                await response.read(100)
        assert caught.value.kind == KIND_INVALID_RESPONSE

    asyncio.run(scenario())


def test_open_stream_garbage_status_line_is_invalid_response():
    """A peer that does not speak HTTP/1.x is reported as a malformed response."""
    async def scenario():
        async with raw_server(b"SSH-2.0-OpenSSH_9.6\r\n\r\n") as url:
            with pytest.raises(ProviderError) as caught:
                async with open_stream("GET", url):
                    pass
        assert caught.value.kind == KIND_INVALID_RESPONSE

    asyncio.run(scenario())


# --- request_json ----------------------------------------------------------------------------


def test_request_json_models_fixtures():
    """GET /v1/models, /api/tags and POST /api/show answer their fixtures."""
    async def scenario():
        async with ScriptedModel() as model:
            model.serve_models("openai_v1_models", "ollama_api_tags", "ollama_api_show")
            models = await request_json("GET", f"{model.url}/models", {"Authorization": "Bearer k"})
            tags = await request_json("GET", f"{model.base}/api/tags")
            show = await request_json("POST", f"{model.base}/api/show", json_body={"model": "qwen3-coder:30b"})
        assert models == models_fixture("openai_v1_models")
        assert tags == models_fixture("ollama_api_tags")
        assert show == models_fixture("ollama_api_show")
        assert model.requests[2].body == {"model": "qwen3-coder:30b"}
        assert "content-length" not in model.requests[0].headers

    asyncio.run(scenario())


def test_request_json_size_cap():
    """A body larger than max_bytes is refused before it is read."""
    async def scenario():
        async with ScriptedModel() as model:
            model.serve_models("openrouter_api_v1_models")
            with pytest.raises(ProviderError) as caught:
                await request_json("GET", f"{model.url}/models", max_bytes=100)
        assert caught.value.kind == KIND_INVALID_RESPONSE and "larger than 100 bytes" in caught.value.message

    asyncio.run(scenario())


def test_request_json_error_status_classified():
    """A non-2xx answer raises the classified ProviderError."""
    async def scenario():
        async with ScriptedModel() as model:
            with pytest.raises(ProviderError) as caught:
                await request_json("GET", f"{model.url}/nothing-here")
        assert caught.value.status == 404 and caught.value.retry is False

    asyncio.run(scenario())


def test_request_json_total_timeout():
    """A server that never answers a small call raises a retryable connection error."""
    async def scenario():
        async with ScriptedModel() as model:
            model.script(Stall(before_headers=True))
            with pytest.raises(ProviderConnectionError) as caught:
                await request_json("POST", model.chat_url, json_body=BODY, timeout=200 * MS)
        assert caught.value.retry is True

    asyncio.run(scenario())


class _Clock:
    """The time the stream reader sees: moved by the reads and the work of the test alone, so
    that a busy machine changes nothing."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Pieces:
    """A response of `count` one-byte pieces whose reads either return at once (bytes already
    buffered) or wait for the network: `wait_s` on the clock, and a turn of the loop."""

    def __init__(self, count: int, wait_s: float | None, clock: _Clock):
        self.left = count
        self.wait_s = wait_s
        self.clock = clock

    async def next_piece(self) -> bytes:
        if self.wait_s is not None:
            arrived = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(arrived.set_result, None)
            await arrived
            self.clock.now += self.wait_s
        if not self.left:
            return b""
        self.left -= 1
        return b"x"


async def _stream_beside_a_ticker(count: int, wait_s: float | None, work_s: float) -> tuple[int, int]:
    """Read a response as stream_chat does, each piece's parsing taking `work_s`; returns how
    often a task beside it ran meanwhile, and how often the reader yielded on its own."""
    from totem.agent.client import _LoopShare
    clock = _Clock()
    response = _Pieces(count, wait_s, clock)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    beside = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    started = ticks
    turns = _LoopShare(clock)
    real_sleep = asyncio.sleep
    yields = 0

    async def counted_sleep(delay, *args):
        nonlocal yields
        if asyncio.current_task() is not beside:
            yields += 1
        return await real_sleep(delay, *args)

    with mock.patch("asyncio.sleep", counted_sleep):
        while await turns.read(response):
            clock.now += work_s  # parsing the piece
            await turns.share()
    beside.cancel()
    return ticks - started, yields


def test_a_provider_whose_bytes_are_buffered_does_not_hold_the_loop():
    """Reads that return at once from the buffer would keep the loop to one stream: the reader
    lets other tasks run every millisecond (here 100 pieces of 0.2 ms each: about 20 times)."""
    ran, yields = asyncio.run(_stream_beside_a_ticker(100, None, 0.0002))
    assert 15 <= yields <= 20 and ran >= yields, (ran, yields)


def test_a_paced_provider_costs_no_extra_loop_turn():
    """A read that waited for the network let the loop run already: no yield is added after it."""
    ran, yields = asyncio.run(_stream_beside_a_ticker(50, 0.0005, 0.00005))
    assert yields == 0 and ran >= 50, (ran, yields)
