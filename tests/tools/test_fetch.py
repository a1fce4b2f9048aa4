"""The fetch tool: URL and address checks through `permit`, redirects, caps, timeouts, TLS and
the text of a page, against real loopback HTTP servers."""

from __future__ import annotations

import asyncio
import datetime
import gzip
import json
import os
import socket
import ssl
import tempfile
import time
import unittest
import zlib
from dataclasses import dataclass
from unittest import mock

import pytest

from tests.utils import MS
from totem.tools import ToolContext, ToolError, default_registry
from totem.tools.fetch import DEFAULT_MAX_BYTES, MAX_MAX_BYTES, FetchTool, address_kind, parse_target
from totem.tools.html_text import html_to_text, meta_charset

BIG_BYTES = 50 * 1024 * 1024
SEND_CHUNK_BYTES = 64 * 1024


# -- doubles and a loopback server ------------------------------------------------------------


class Permits:
    """A `ToolContext.permit` double: records every call; answers allow, or raises ToolError
    (what the loop does on deny or reject) when `deny(subject, args, always_ask)` is true."""

    def __init__(self, deny=lambda subject, args, always_ask: False):
        self.calls: list[tuple] = []
        self._deny = deny

    async def __call__(self, tool: str, subject: str, args: dict | None = None,
                       always_ask: str | None = None) -> None:
        self.calls.append((tool, subject, args or {}, always_ask))
        if self._deny(subject, args or {}, always_ask):
            raise ToolError(f"Denied: the person rejected {tool} of {subject}")


def context(permit=None) -> ToolContext:
    return ToolContext("/", "s1", permit=permit if permit is not None else Permits())


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]


def response(status: int = 200, body: bytes = b"", content_type: str | None = "text/plain",
             **headers: str) -> bytes:
    fields = {"Content-Length": str(len(body))}
    if content_type:
        fields["Content-Type"] = content_type
    fields.update({name.replace("_", "-"): value for name, value in headers.items()})
    head = f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    return head.encode("latin-1") + body


def answer(data: bytes):
    async def handler(server, writer, request):
        writer.write(data)
        await writer.drain()
    return handler


class Server:
    """A loopback HTTP server for one test: `routes` maps a path to `handler(server, writer,
    request)`; it counts connections, keeps the requests and notices a disconnect."""

    def __init__(self, routes: dict, host: str = "127.0.0.1", ssl_context=None):
        self.routes, self.host, self.ssl_context = routes, host, ssl_context
        self.connections = 0
        self.requests: list[Request] = []
        self.disconnected = asyncio.Event()
        self.sent = 0
        self._tasks: set[asyncio.Task] = set()

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._handle, self.host, 0, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def url(self, path: str = "/", host: str | None = None) -> str:
        name = host or (f"[{self.host}]" if ":" in self.host else self.host)
        return f"{'https' if self.ssl_context else 'http'}://{name}:{self.port}{path}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())
        self.connections += 1
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, target, _ = head[0].split(" ")
            headers = {}
            for line in head[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            request = Request(method, target, headers)
            self.requests.append(request)
            handler = self.routes.get(target.split("?")[0], answer(response(404, b"no such page")))
            await handler(self, writer, request)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            self.disconnected.set()
        finally:
            self._tasks.discard(asyncio.current_task())
            writer.transport.abort()


class FetchCase(unittest.IsolatedAsyncioTestCase):
    async def fetch(self, url: str, permit=None, tool: FetchTool | None = None, **args):
        return await (tool or FetchTool()).run({"url": url, **args}, context(permit))

    async def refused(self, url: str, permit=None, tool: FetchTool | None = None, **args) -> str:
        with self.assertRaises(ToolError) as caught:
            await self.fetch(url, permit, tool, **args)
        return str(caught.exception)

    def resolving(self, names: dict, calls: list[str] | None = None):
        """Make the running loop's getaddrinfo answer each name of `names` with its addresses
        (a list, or a function giving the list of each lookup); [] means the name is unknown."""
        loop = asyncio.get_running_loop()
        real = loop.getaddrinfo

        async def getaddrinfo(host, port, *args, **kwargs):
            if host not in names:
                return await real(host, port, *args, **kwargs)
            if calls is not None:
                calls.append(host)
            addresses = names[host]() if callable(names[host]) else names[host]
            if not addresses:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                     (a, port)) for a in addresses]
        return mock.patch.object(loop, "getaddrinfo", getaddrinfo)


# -- subjects and URLs (no network) ---------------------------------------------------------


def test_fetch_subjects_host_normalized():
    """The subject is the host: lower-case, IDNA-encoded, without port or trailing dot."""
    ctx = context()
    cases = {
        "HTTPS://Example.COM:8443/a?b=c#frag": "example.com",
        "http://Bücher.Example./x": "xn--bcher-kva.example",
        "http://[::1]:8080/": "::1",
        "http://[0:0:0:0:0:ffff:7f00:1]/": "::ffff:7f00:1",
        "http://127.1/": "127.0.0.1",
        "http://2130706433/": "127.0.0.1",
        "https://a-b_c.example.org": "a-b_c.example.org",
    }
    for url, host in cases.items():
        assert FetchTool().subjects({"url": url}, ctx) == [host], url


def test_fetch_userinfo_refused():
    """A URL with a user name or password is refused before anything else."""
    for url in ("http://user@example.com/", "https://user:secret@example.com/x",
                "http://example.com\\@evil.test/"):
        with pytest.raises(ToolError, match="user name or password"):
            FetchTool().subjects({"url": url}, context())


def test_fetch_scheme_refused():
    """Only http and https: file, ftp, javascript, data and scheme-less URLs are refused."""
    for url in ("file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)",
                "data:text/plain,hi", "gopher://example.com/", "example.com/page"):
        with pytest.raises(ToolError, match="only http:// and https://"):
            FetchTool().subjects({"url": url}, context())


def test_fetch_invalid_host_refused():
    """A host that is empty, malformed, numeric but not IPv4, or has a zone id is refused."""
    for url in ("http:///path", "http://exa mple.com/", "http://a..b/", "http://example.123/",
                "http://[fe80::1%25eth0]/", "http://[::1/", "http://example.com:99999/",
                "http://example.com:0/", "http://example.com/\x00"):
        with pytest.raises(ToolError):
            FetchTool().subjects({"url": url}, context())


def test_fetch_path_percent_encoded():
    """Spaces and non-ASCII characters of the path and query are sent percent-encoded."""
    target = parse_target("http://example.com/a b/é?q=x y&r=%20")
    assert target.path == "/a%20b/%C3%A9?q=x%20y&r=%20"
    assert target.url == "http://example.com/a%20b/%C3%A9?q=x%20y&r=%20"


def test_fetch_address_kind_table():
    """Every non-public range is named; public addresses (and NAT64 of them) are None."""
    table = {
        "127.0.0.1": "loopback", "::1": "loopback", "10.1.2.3": "private, RFC 1918",
        "172.16.0.1": "private, RFC 1918", "192.168.1.1": "private, RFC 1918",
        "fc00::1": "private, unique local fc00::/7", "fd12:3456::1": "private, unique local fc00::/7",
        "169.254.169.254": "cloud metadata endpoint", "fd00:ec2::254": "cloud metadata endpoint",
        "169.254.1.1": "link-local", "fe80::1": "link-local", "0.0.0.0": "unspecified",
        "::": "unspecified", "0.1.2.3": "this network, 0.0.0.0/8", "224.0.0.1": "multicast",
        "ff02::1": "multicast", "240.0.0.1": "reserved", "255.255.255.255": "reserved",
        "100.64.0.1": "shared address space, RFC 6598", "192.0.2.1": "special-purpose, not public",
        "::ffff:127.0.0.1": "IPv4-mapped loopback", "::ffff:169.254.169.254":
        "IPv4-mapped cloud metadata endpoint", "::ffff:10.0.0.1": "IPv4-mapped private, RFC 1918",
        "2002:a00:1::": "6to4 private, RFC 1918", "64:ff9b::7f00:1": "NAT64 loopback",
        "93.184.216.34": None, "8.8.8.8": None, "2606:4700:4700::1111": None,
        "::ffff:8.8.8.8": None, "64:ff9b::808:808": None,
    }
    assert {address: address_kind(address) for address in table} == table


def test_fetch_registry_has_fetch():
    """The default registry offers fetch; max_bytes is capped at 10 MB."""
    registry = default_registry()
    tool, args = registry.parse_arguments("fetch", '{"url": "https://example.com"}')
    assert isinstance(tool, FetchTool) and not tool.kind.changes and args == {"url": "https://example.com"}
    with pytest.raises(ToolError, match="max_bytes"):
        registry.parse_arguments("fetch", json.dumps({"url": "http://x", "max_bytes": MAX_MAX_BYTES + 1}))
    assert DEFAULT_MAX_BYTES == 2 * 1024 * 1024


def test_fetch_without_permit_refused():
    """Outside the agent loop (no permit callback) the tool refuses to run."""
    with pytest.raises(ToolError, match="permission callback"):
        asyncio.run(FetchTool().run({"url": "http://example.com"}, ToolContext("/", "s1")))


# -- HTML as text (no network) ----------------------------------------------------------------


PAGE = """<!DOCTYPE html><html><head><title>The &amp; page</title>
<meta charset="utf-8"><style>body { color: red }</style>
<script>document.write("<p>SCRIPT TEXT</p>")</script></head>
<body><h1>Main&nbsp;title</h1>
<nav><a href="/docs/">Docs</a> <a href="#top">Top</a> <a href="javascript:void(0)">JS</a></nav>
<p>Caf&eacute; &lt;b&gt; &#8212; <b>bold</b>
   and    spaces, <code>x = 1</code>, <a href="other.html?q=1">a link</a>.</p>
<noscript>NOSCRIPT TEXT</noscript><template><p>TEMPLATE TEXT</p></template>
<svg><title>SVG TITLE</title><text>SVG TEXT</text></svg>
<h2>List</h2><ul><li>one</li><li>two<ul><li>nested</li></ul></li></ul>
<pre><code>def f(x):
    return x &lt; 2   # kept   as is
</code></pre>
<table><tr><th>Name</th><th>Value</th></tr><tr><td>a</td><td><p>1</p></td></tr></table>
<p>line<br>break</p></body></html>"""


def test_html_text_structure():
    """Headings, paragraphs, lists, pre, tables, links and entities come out as readable text."""
    text = html_to_text(PAGE, "https://example.com/dir/page.html")
    assert text == (
        "Title: The & page\n\n"
        "# Main title\n\n"
        "Docs (https://example.com/docs/) Top JS\n\n"
        "Café <b> — bold and spaces, `x = 1`, a link (https://example.com/dir/other.html?q=1).\n\n"
        "## List\n\n"
        "- one\n- two\n  - nested\n\n"
        "```\ndef f(x):\n    return x < 2   # kept   as is\n```\n\n"
        "Name | Value\na | 1\n\n"
        "line\nbreak")


def test_html_text_drops_hidden_content():
    """Script, style, noscript, template and svg content never reaches the text."""
    text = html_to_text(PAGE, "https://example.com/")
    for hidden in ("SCRIPT TEXT", "color: red", "NOSCRIPT", "TEMPLATE", "SVG"):
        assert hidden not in text


def test_html_text_base_href_and_block_links():
    """<base href> sets the base of links; a link around blocks follows its first block."""
    text = html_to_text('<base href="https://cdn.example/x/"><a href="y"><h3>Card</h3><p>more</p></a>'
                        '<a href="https://a.example/">https://a.example/</a>', "https://example.com/")
    assert text == "### Card (https://cdn.example/x/y)\n\nmore\n\nhttps://a.example/"


def test_html_text_malformed_never_raises():
    """Unclosed and stray tags still give text."""
    text = html_to_text("<p>a<div>b</span></p><li>c<table><td>d<tr>e</table><pre>f", "http://x/")
    assert text == "a\n\nb\n\n- c\n\nd\n\ne\n\n```\nf\n```"


def test_html_text_meta_charset():
    """<meta charset> and <meta http-equiv> name the codec; unknown or non-text codecs are None."""
    assert meta_charset(b'<meta charset="windows-1252">') == "cp1252"
    assert meta_charset(b'<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">') == "shift_jis"
    assert meta_charset(b'<meta charset="ISO-8859-1">') == "cp1252"  # as browsers read it
    assert meta_charset(b'<meta charset="base64">') is None
    assert meta_charset(b'<meta charset="nonsense">') is None
    assert meta_charset(b"<p>no meta</p>") is None


# -- the network ------------------------------------------------------------------------------


class TestFetchPages(FetchCase):
    async def test_fetch_html_converted(self):
        """An HTML page comes back as text, with the status, type and size in the first line."""
        body = PAGE.encode()
        async with Server({"/dir/page.html": answer(response(200, body, "text/html; charset=utf-8"))}) as server:
            permits = Permits()
            result = await self.fetch(server.url("/dir/page.html"), permits)
        url = server.url("/dir/page.html")
        head, text = result.output.split("\n\n", 1)
        assert head == f"{url} (200, text/html, {len(body)} bytes):"
        assert text == html_to_text(PAGE, url)
        assert f"Docs (http://127.0.0.1:{server.port}/docs/)" in text
        assert "SCRIPT TEXT" not in text and "Café <b> — bold" in text
        assert result.title == f"127.0.0.1:{server.port}/dir/page.html"
        assert result.data == {"url": url, "final_url": url, "status": 200, "content_type": "text/html",
                               "bytes": len(body), "cut": False, "redirects": []}
        request = server.requests[0]
        assert (request.method, request.target) == ("GET", "/dir/page.html")
        assert request.headers["host"] == f"127.0.0.1:{server.port}"
        assert request.headers["connection"] == "close"
        assert request.headers["accept-encoding"] == "gzip, deflate"
        assert "cookie" not in request.headers and "authorization" not in request.headers

    async def test_fetch_plain_text_charset(self):
        """text/plain is returned as is, decoded with the charset of the Content-Type."""
        body = "Grüße — plain\n".encode("cp1252")
        async with Server({"/t": answer(response(200, body, "text/plain; charset=windows-1252"))}) as server:
            result = await self.fetch(server.url("/t"))
        assert result.output.endswith(":\n\nGrüße — plain\n")
        assert result.data["content_type"] == "text/plain"

    async def test_fetch_meta_charset_used(self):
        """Without a charset in the header, HTML's <meta charset> decides; bad bytes are replaced."""
        body = b'<html><head><meta charset="windows-1252"></head><p>caf\xe9 \x81</p></html>'
        async with Server({"/": answer(response(200, body, "text/html"))}) as server:
            result = await self.fetch(server.url())
        assert result.output.endswith(":\n\ncaf\u00e9 \ufffd")

    async def test_fetch_default_utf8_replaces_invalid(self):
        """Without any charset the body is UTF-8, invalid bytes shown as U+FFFD."""
        async with Server({"/": answer(response(200, b"ok \xff end", "text/markdown"))}) as server:
            result = await self.fetch(server.url())
        assert result.output.endswith(":\n\nok \ufffd end")

    async def test_fetch_json_returned(self):
        """JSON comes back as its text."""
        body = json.dumps({"name": "totem", "list": [1, 2]}).encode()
        async with Server({"/api": answer(response(200, body, "application/json"))}) as server:
            result = await self.fetch(server.url("/api"))
        assert result.output == f"{server.url('/api')} (200, application/json, {len(body)} bytes):\n\n{body.decode()}"

    async def test_fetch_binary_described(self):
        """An image is described in a line, never returned as bytes."""
        body = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
        async with Server({"/logo.png": answer(response(200, body, "image/png"))}) as server:
            result = await self.fetch(server.url("/logo.png"))
        text = result.output.split("\n\n", 1)[1]
        assert text == f"[image/png content of {len(body)} bytes; not shown: fetch returns text only]"
        assert result.data["bytes"] == len(body)

    async def test_fetch_non_2xx_is_result(self):
        """A 404 is a result carrying its status and body, not an error."""
        async with Server({}) as server:
            result = await self.fetch(server.url("/missing"))
        assert result.data["status"] == 404
        assert result.output == f"{server.url('/missing')} (404, text/plain, 12 bytes):\n\nno such page"

    async def test_fetch_chunked_body_read(self):
        """A chunked body (with extensions and trailers) is joined."""
        chunked = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n")
        async with Server({"/": answer(chunked)}) as server:
            result = await self.fetch(server.url())
        assert result.output.endswith("(200, text/plain, 12 bytes):\n\nhello, world")

    async def test_fetch_read_until_close(self):
        """A body without length or chunks is read until the server closes."""
        async with Server({"/": answer(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nold style")}) as server:
            result = await self.fetch(server.url())
        assert result.output.endswith("(200, text/plain, 9 bytes):\n\nold style")

    async def test_fetch_gzip_and_deflate_decoded(self):
        """gzip, zlib-wrapped deflate and raw deflate bodies are decoded."""
        text = b"compressed text " * 100
        raw = zlib.compressobj(wbits=-15)
        routes = {"/gzip": answer(response(200, gzip.compress(text), Content_Encoding="gzip")),
                  "/zlib": answer(response(200, zlib.compress(text), Content_Encoding="deflate")),
                  "/raw": answer(response(200, raw.compress(text) + raw.flush(), Content_Encoding="deflate"))}
        async with Server(routes) as server:
            for path in routes:
                result = await self.fetch(server.url(path))
                assert result.output.endswith(f", {len(text)} bytes):\n\n{text.decode()}"), path

    async def test_fetch_unknown_encoding_not_shown(self):
        """A content coding fetch did not ask for (br) is named, its bytes not shown."""
        async with Server({"/": answer(response(200, b"\x0b\x02\x80xx", Content_Encoding="br"))}) as server:
            result = await self.fetch(server.url())
        assert result.output.endswith(":\n\n[the body is encoded with br, which fetch cannot decode; not shown]")


class TestFetchLimits(FetchCase):
    async def test_fetch_size_cap_while_reading(self):
        """A 50 MB body sent slowly: the tool stops at the cap, says so, and drops the connection."""
        async def slow(server, writer, request):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                         + f"Content-Length: {BIG_BYTES}\r\n\r\n".encode())
            while server.sent < BIG_BYTES:
                writer.write(b"a" * SEND_CHUNK_BYTES)
                await writer.drain()
                server.sent += SEND_CHUNK_BYTES
                await asyncio.sleep(1 * MS)

        cap = 1024 * 1024
        async with Server({"/big": slow}) as server:
            started = time.monotonic()
            async with asyncio.timeout(5000 * MS):
                result = await self.fetch(server.url("/big"), max_bytes=cap)
            elapsed = time.monotonic() - started
            async with asyncio.timeout(5000 * MS):
                await server.disconnected.wait()
            sent = server.sent
        assert result.data["cut"] is True and result.data["bytes"] == cap
        assert f"(200, text/plain, {cap} bytes, cut):" in result.output
        assert result.output.endswith(f"[cut at {cap} bytes: the page is longer; "
                                      f"max_bytes can go up to {MAX_MAX_BYTES}]")
        assert sent < BIG_BYTES // 4, (sent, elapsed)

    async def test_fetch_gzip_bomb_capped(self):
        """A gzip body that inflates to 20 MB is cut at the cap of decoded bytes."""
        bomb = gzip.compress(b"\0" * (20 * 1024 * 1024), compresslevel=9)
        assert len(bomb) < 100 * 1024
        cap = 1024 * 1024
        async with Server({"/": answer(response(200, bomb, "text/plain", Content_Encoding="gzip"))}) as server:
            result = await self.fetch(server.url(), max_bytes=cap)
        assert result.data["cut"] is True and result.data["bytes"] == cap

    async def test_fetch_timeout_before_answer(self):
        """A server that never answers makes a ToolError when the total time is spent."""
        async def silent(server, writer, request):
            await asyncio.sleep(60)

        async with Server({"/": silent}) as server:
            started = time.monotonic()
            message = await self.refused(server.url(), tool=FetchTool(total_timeout=300 * MS))
            assert time.monotonic() - started < 3000 * MS
        assert message == f"127.0.0.1:{server.port} did not answer within {300 * MS:g} s"

    async def test_fetch_timeout_mid_body_partial(self):
        """A body that stalls: what arrived is returned, marked cut, with the reason."""
        async def stall(server, writer, request):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n"
                         b"first part")
            await writer.drain()
            await asyncio.sleep(60)

        async with Server({"/": stall}) as server:
            result = await self.fetch(server.url(), tool=FetchTool(total_timeout=300 * MS))
        assert result.data["cut"] is True and result.data["bytes"] == 10
        assert result.output.endswith(f":\n\nfirst part\n\n[cut: no more data within {300 * MS:g} s]")

    async def test_fetch_connection_refused(self):
        """Nothing listening: a ToolError that says so."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        message = await self.refused(f"http://127.0.0.1:{port}/")
        assert message == f"could not connect to 127.0.0.1:{port}: 127.0.0.1: connection refused"

    async def test_fetch_unresolvable_host(self):
        """A name that does not resolve is a ToolError naming it."""
        with self.resolving({"nosuch.test": []}):
            message = await self.refused("http://nosuch.test/")
        assert message.startswith("the host nosuch.test could not be resolved")

    async def test_fetch_not_http_server(self):
        """Something that is not HTTP answering is a ToolError, not a crash."""
        async with Server({"/": answer(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")}) as server:
            message = await self.refused(server.url())
        assert message == f"the response of 127.0.0.1:{server.port} is malformed: the status line is not HTTP/1.x"


class TestFetchAddresses(FetchCase):
    async def test_fetch_private_address_always_asked(self):
        """A loopback address is asked with always_ask, the address shown, before connecting."""
        async with Server({"/": answer(response(200, b"hi"))}) as server:
            permits = Permits()
            await self.fetch(server.url(), permits)
        assert permits.calls == [("fetch", "127.0.0.1", {"url": server.url(), "address": "127.0.0.1"},
                                  "resolves to 127.0.0.1 (loopback)")]

    async def test_fetch_denied_address_sends_nothing(self):
        """When the person rejects the address, no connection is made at all."""
        async with Server({"/": answer(response(200, b"hi"))}) as server:
            permits = Permits(deny=lambda subject, args, always_ask: True)
            message = await self.refused(server.url(), permits)
            await asyncio.sleep(50 * MS)
        assert message == "Denied: the person rejected fetch of 127.0.0.1"
        assert server.connections == 0 and len(permits.calls) == 1

    async def test_fetch_ipv6_literal(self):
        """An IPv6 literal host is fetched over IPv6, checked and sent with brackets in Host."""
        if not _has_ipv6_loopback():
            self.skipTest("no IPv6 loopback here")
        async with Server({"/": answer(response(200, b"over v6"))}, host="::1") as server:
            permits = Permits()
            result = await self.fetch(server.url(), permits)
        assert result.output == f"http://[::1]:{server.port}/ (200, text/plain, 7 bytes):\n\nover v6"
        assert permits.calls == [("fetch", "::1", {"url": server.url(), "address": "::1"},
                                  "resolves to ::1 (loopback)")]
        assert server.requests[0].headers["host"] == f"[::1]:{server.port}"

    async def test_fetch_several_addresses_all_checked(self):
        """Each address of a name is asked about first, then tried in order by address, not name."""
        async with Server({"/": answer(response(200, b"multi"))}) as server:
            permits = Permits()
            url = server.url(host="multi.test")
            with self.resolving({"multi.test": ["127.0.0.2", "127.0.0.1"]}), \
                    mock.patch("asyncio.open_connection", wraps=asyncio.open_connection) as opened:
                result = await self.fetch(url, permits, tool=FetchTool(connect_timeout=1000 * MS))
        assert permits.calls == [
            ("fetch", "multi.test", {"url": url, "address": "127.0.0.2"}, "resolves to 127.0.0.2 (loopback)"),
            ("fetch", "multi.test", {"url": url, "address": "127.0.0.1"}, "resolves to 127.0.0.1 (loopback)")]
        assert [call.args[0] for call in opened.call_args_list] == ["127.0.0.2", "127.0.0.1"]
        assert result.output.endswith("multi")
        assert server.requests[0].headers["host"] == f"multi.test:{server.port}"

    async def test_fetch_second_address_denied(self):
        """Rejecting any one address of the name stops the fetch before a connection."""
        async with Server({"/": answer(response(200, b"x"))}) as server:
            permits = Permits(deny=lambda subject, args, always_ask: args.get("address") == "169.254.169.254")
            with self.resolving({"meta.test": ["127.0.0.1", "169.254.169.254"]}):
                message = await self.refused(server.url(host="meta.test"), permits)
        assert message == "Denied: the person rejected fetch of meta.test"
        assert permits.calls[-1][3] == "resolves to 169.254.169.254 (cloud metadata endpoint)"
        assert server.connections == 0

    async def test_fetch_connects_to_checked_address(self):
        """The name is resolved once; a rebound second answer of the resolver is never used."""
        answers = iter([["127.0.0.1"], ["10.9.9.9"]])
        calls: list[str] = []
        async with Server({"/": answer(response(200, b"pinned"))}) as server:
            with self.resolving({"rebind.test": lambda: next(answers)}, calls):
                result = await self.fetch(server.url(host="rebind.test"))
        assert calls == ["rebind.test"]
        assert result.output.endswith("pinned")


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


class TestFetchRedirects(FetchCase):
    async def test_fetch_redirect_new_host_permitted(self):
        """A redirect to another host asks permit for that host, then checks its addresses."""
        async with Server({}) as server:
            end = server.url("/end", host="localhost")
            server.routes.update({"/start": answer(response(302, b"", None, Location=end)),
                                  "/end": answer(response(200, b"arrived"))})
            permits = Permits()
            with self.resolving({"localhost": ["127.0.0.1"]}):
                result = await self.fetch(server.url("/start"), permits)
        assert permits.calls == [
            ("fetch", "127.0.0.1", {"url": server.url("/start"), "address": "127.0.0.1"},
             "resolves to 127.0.0.1 (loopback)"),
            ("fetch", "localhost", {"url": end}, None),
            ("fetch", "localhost", {"url": end, "address": "127.0.0.1"}, "resolves to 127.0.0.1 (loopback)")]
        assert result.data["final_url"] == end and result.data["url"] == server.url("/start")
        assert result.data["redirects"] == [{"url": server.url("/start"), "status": 302, "location": end}]
        assert result.output.startswith(f"{end} (200, text/plain, 7 bytes):")
        assert result.title == f"localhost:{server.port}/end"
        assert server.requests[1].headers["host"] == f"localhost:{server.port}"

    async def test_fetch_redirect_same_host_not_asked_again(self):
        """A relative redirect on the same host and address asks nothing more; 303 becomes a GET."""
        async with Server({"/a": answer(response(303, b"", None, Location="b?x=1")),
                           "/b": answer(response(200, b"done"))}) as server:
            permits = Permits()
            result = await self.fetch(server.url("/a"), permits)
        assert len(permits.calls) == 1
        assert [r.target for r in server.requests] == ["/a", "/b?x=1"]
        assert result.data["final_url"] == server.url("/b?x=1")

    async def test_fetch_redirect_denied_host_stops(self):
        """When the new host is rejected, nothing is sent to it."""
        async with Server({}) as server:
            server.routes["/start"] = answer(response(301, b"", None, Location=server.url("/end", host="localhost")))
            permits = Permits(deny=lambda subject, args, always_ask: subject == "localhost")
            message = await self.refused(server.url("/start"), permits)
        assert message == "Denied: the person rejected fetch of localhost"
        assert [r.target for r in server.requests] == ["/start"]

    async def test_fetch_redirect_private_address_asked(self):
        """A redirect host that resolves to a private address is asked with always_ask too."""
        async with Server({}) as server:
            server.routes.update({"/start": answer(response(307, b"", None, Location=server.url("/end", host="internal.test"))),
                                  "/end": answer(response(200, b"in"))})
            permits = Permits(deny=lambda subject, args, always_ask: subject == "internal.test" and always_ask is not None)
            with self.resolving({"internal.test": ["127.0.0.1"]}):
                message = await self.refused(server.url("/start"), permits)
        assert permits.calls[1:] == [
            ("fetch", "internal.test", {"url": server.url("/end", host="internal.test")}, None),
            ("fetch", "internal.test", {"url": server.url("/end", host="internal.test"), "address": "127.0.0.1"},
             "resolves to 127.0.0.1 (loopback)")]
        assert message == "Denied: the person rejected fetch of internal.test"
        assert [r.target for r in server.requests] == ["/start"]

    async def test_fetch_redirect_loop_stops_at_five(self):
        """A redirect loop stops after five redirects, with the chain in the error."""
        async with Server({"/loop": answer(response(302, b"", None, Location="/loop"))}) as server:
            message = await self.refused(server.url("/loop"))
        assert len(server.requests) == 6
        loop = server.url("/loop")
        assert message == f"stopped after 5 redirects: {' -> '.join([loop] * 7)}"

    async def test_fetch_redirect_scheme_refused(self):
        """A redirect to file:// or ftp:// is refused, and nothing else is fetched."""
        for location in ("file:///etc/passwd", "ftp://example.com/x"):
            async with Server({"/": answer(response(302, b"", None, Location=location))}) as server:
                permits = Permits()
                message = await self.refused(server.url(), permits)
            assert message.startswith(f"{server.url()} redirects (302) to '{location}', which is not followed: "
                                      "only http:// and https://"), message
            assert len(server.requests) == 1 and len(permits.calls) == 1

    async def test_fetch_redirect_without_location_is_result(self):
        """A 3xx without Location is returned like any other status."""
        async with Server({"/": answer(response(302, b"", None))}) as server:
            result = await self.fetch(server.url())
        assert result.data["status"] == 302 and result.data["redirects"] == []
        assert result.output == f"{server.url()} (302, no content type, 0 bytes):\n\n(empty body)"


# -- TLS --------------------------------------------------------------------------------------


def _certificate(folder: str, name: str) -> tuple[str, str]:
    """A self-signed certificate for `name` and its key, as PEM files in `folder`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    cert_path, key_path = os.path.join(folder, f"{name}.pem"), os.path.join(folder, f"{name}.key")
    with open(cert_path, "wb") as handle:
        handle.write(certificate.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as handle:
        handle.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return cert_path, key_path


class TestFetchTls(FetchCase):
    def tls(self, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        folder = tempfile.TemporaryDirectory(prefix="totem-fetch-")
        self.addCleanup(folder.cleanup)
        cert, key = _certificate(folder.name, name)
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(cert, key)
        return server, ssl.create_default_context(cafile=cert)

    async def test_fetch_https_name_verified_on_checked_address(self):
        """HTTPS connects to the checked address and verifies the certificate for the name."""
        server_tls, client_tls = self.tls("tls.test")
        async with Server({"/": answer(response(200, b"secure"))}, ssl_context=server_tls) as server:
            with self.resolving({"tls.test": ["127.0.0.1"]}):
                result = await self.fetch(server.url(host="tls.test"), tool=FetchTool(tls_context=client_tls))
        assert result.output == f"https://tls.test:{server.port}/ (200, text/plain, 6 bytes):\n\nsecure"
        assert server.requests[0].headers["host"] == f"tls.test:{server.port}"

    async def test_fetch_https_wrong_name_refused(self):
        """A certificate for another name is a ToolError."""
        server_tls, client_tls = self.tls("other.test")
        async with Server({"/": answer(response(200, b"secure"))}, ssl_context=server_tls) as server:
            with self.resolving({"tls.test": ["127.0.0.1"]}):
                message = await self.refused(server.url(host="tls.test"), tool=FetchTool(tls_context=client_tls))
        assert message.startswith("the TLS certificate of tls.test is not valid (Hostname mismatch")
