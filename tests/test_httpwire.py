"""The HTTP/1.1 response reader without sockets: a StreamReader fed fixed bytes, one table row per
framing rule, and the neutral WireError for each way a response can break."""

from __future__ import annotations

import asyncio
import errno

import pytest

from tests.utils import MS
from totem import httpwire
from totem.httpwire import CUT_SHORT, NO_ANSWER, WireError, read_response, socket_reason


async def _response(raw: bytes, method: str = "GET") -> tuple[httpwire.WireResponse, bytes]:
    reader = asyncio.StreamReader(limit=httpwire.MAX_LINE_BYTES)
    reader.feed_data(raw)
    reader.feed_eof()
    response = await read_response(reader, method)
    body = b""
    while piece := await response.next_piece():
        body += piece
    return response, body


def read(raw: bytes, method: str = "GET") -> tuple[httpwire.WireResponse, bytes]:
    return asyncio.run(_response(raw, method))


def failure(raw: bytes, method: str = "GET") -> WireError:
    with pytest.raises(WireError) as caught:
        read(raw, method)
    return caught.value


@pytest.mark.parametrize(("raw", "method", "body"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello and more", "GET", b"hello"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello", "GET", b"hello"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nignored", "GET", b""),
    (b"HTTP/1.0 200 OK\r\n\r\nuntil close", "GET", b"until close"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\nuntil close", "GET",
     b"until close"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "GET", b"abc"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "HEAD", b""),
    (b"HTTP/1.1 204 No Content\r\n\r\nignored", "GET", b""),
    (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", "GET", b""),
])
def test_read_response_framing(raw, method, body):
    """RFC 9112 section 6.3: the body is framed by method, status, Transfer-Encoding and length."""
    response, got = read(raw, method)
    assert (got, response.complete) == (body, True)


def test_read_response_chunked_extensions_trailers_and_interim():
    """A 100 Continue is skipped; chunk extensions and trailer fields are read and dropped."""
    response, body = read(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                          b"X-Seen: 1\r\nx-seen: 2\r\n\r\n5;a=b\r\nhello\r\n1\r\n!\r\n0\r\nT: 1\r\n\r\n")
    assert (response.status, response.reason) == (200, "OK")
    assert response.headers == {"transfer-encoding": "chunked", "x-seen": "1, 2"}
    assert body == b"hello!"


def test_read_response_chunked_ending_in_trailers_is_whole():
    """Once the last chunk is in, a stream that ends among the trailers leaves the body whole."""
    response, body = read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n")
    assert (body, response.complete) == (b"ok", True)


def test_read_response_length_exposed_only_for_content_length():
    """`length` is the Content-Length when it frames the body, None otherwise."""
    assert read(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc")[0].length == 3
    assert read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")[0].length is None


@pytest.mark.parametrize(("raw", "reason"), [
    (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "the status line is not HTTP/1.x"),
    (b"HTTP/1.1 20 OK\r\n\r\n", "the status line is not HTTP/1.x"),
    (b"HTTP/1.1 2000 OK\r\n\r\n", "the status line is not HTTP/1.x"),
    (b"HTTP/1.1 \xb2\xb3\xb9 OK\r\n\r\n", "the status line is not HTTP/1.x"),  # latin-1 digits
    (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "a header line has no name"),
    (b"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n", "a header line has no name"),
    (b"HTTP/1.1 200 OK\r\n" + b"A: b\r\n" * (httpwire.MAX_HEADER_LINES + 1) + b"\r\n",
     f"more than {httpwire.MAX_HEADER_LINES} header lines"),
    (b"HTTP/1.1 200 OK\r\n" + (b"A: " + b"b" * 1000 + b"\r\n") * 70 + b"\r\n",
     f"the headers are longer than {httpwire.MAX_HEADER_BYTES} bytes"),
    (b"HTTP/1.1 200 OK\r\nA: " + b"b" * httpwire.MAX_LINE_BYTES + b"\r\n\r\n",
     f"a line is longer than {httpwire.MAX_LINE_BYTES} bytes"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello", "the Content-Length header is invalid"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "the Content-Length header is invalid"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n", "the Content-Length header is invalid"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
     "a chunk size is not a hexadecimal number"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokX\r\n0\r\n\r\n",
     "a chunk does not end with CRLF"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + b"T: 1\r\n" * httpwire.MAX_HEADER_LINES,
     "too many trailer lines"),
])
def test_read_response_malformed(raw, reason):
    """Each way the bytes break HTTP/1.1 is a WireError with its reason and closed=False."""
    error = failure(raw)
    assert (error.reason, error.closed) == (reason, False)


@pytest.mark.parametrize(("raw", "reason"), [
    (b"", NO_ANSWER),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort", CUT_SHORT),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", CUT_SHORT),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", CUT_SHORT),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5", CUT_SHORT),
])
def test_read_response_closed_early(raw, reason):
    """A stream that ends before the response does is a WireError with closed=True."""
    error = failure(raw)
    assert (error.reason, error.closed) == (reason, True)


def test_read_response_read_timeout():
    """With a read_timeout, a peer that sends nothing raises TimeoutError for the caller."""
    async def scenario():
        reader = asyncio.StreamReader(limit=httpwire.MAX_LINE_BYTES)
        reader.feed_data(b"HTTP/1.1 200 OK\r\n")
        with pytest.raises(TimeoutError):
            await read_response(reader, read_timeout=10 * MS)

    asyncio.run(scenario())


@pytest.mark.parametrize(("exc", "reason"), [
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), "connection refused"),
    (OSError("Multiple exceptions: [Errno 111] Connect call failed ('::1', 1), "
             "[Errno 111] Connect call failed ('127.0.0.1', 1)"), "connection refused"),
    (ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), "connection reset"),
    (BrokenPipeError(errno.EPIPE, "Broken pipe"), "the connection was closed by the other side"),
    (TimeoutError(), "timed out"),
    (OSError(errno.EHOSTUNREACH, "Connect call failed ('10.0.0.1', 80)"), "network unreachable"),
    (OSError(errno.EACCES, "Permission denied"), "Permission denied"),
])
def test_socket_reason(exc, reason):
    """A socket failure becomes a short phrase."""
    assert socket_reason(exc) == reason


async def _fed_in_pieces(raw: bytes, cuts: list[int]) -> bytes:
    """The body of `raw` read while its bytes arrive in pieces cut at `cuts`."""
    reader = asyncio.StreamReader(limit=httpwire.MAX_LINE_BYTES)

    async def feed():
        last = 0
        for cut in sorted(set(cuts)) + [len(raw)]:
            reader.feed_data(raw[last:cut])
            last = cut
            await asyncio.sleep(0)
        reader.feed_eof()
    feeding = asyncio.ensure_future(feed())
    response = await read_response(reader, "GET")
    body = b""
    while piece := await response.next_piece():
        body += piece
    await feeding
    return body


def test_chunked_bodies_read_whole_however_they_arrive():
    """A chunked body of generated chunks (sizes in hex of either case, extensions, trailers)
    comes out byte for byte whatever pieces the socket hands over."""
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.binary(min_size=1, max_size=300), max_size=12), st.lists(st.integers(0, 4000), max_size=20),
           st.booleans(), st.booleans())
    def check(chunks, cuts, upper, extension):
        framed = b"".join((f"{len(c):X}" if upper else f"{len(c):x}").encode()
                          + (b";name=value" if extension else b"") + b"\r\n" + c + b"\r\n" for c in chunks)
        raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + framed + b"0\r\nX-Trailer: 1\r\n\r\n"
        assert asyncio.run(_fed_in_pieces(raw, [cut for cut in cuts if cut < len(raw)])) == b"".join(chunks)
    check()
