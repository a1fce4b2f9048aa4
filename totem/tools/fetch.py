"""The fetch tool: one web page over http or https, as readable text.

Owns: checking the URL (http and https only, no user name or password) and naming its host as
the permission subject; resolving the host without blocking the loop and, for every address that
is not public (loopback, private, link-local and the cloud metadata endpoint, ...), asking the
person through `ctx.permit(..., always_ask=...)` even when a rule allows the name (SSRF, DNS
rebinding); connecting to that checked address, never to the name again, with the name in the
Host header and for TLS; following up to MAX_REDIRECTS redirects, each new host decided again
and every hop's addresses checked again; reading the body under a byte cap while it arrives
(gzip and deflate decoded under the same cap), within a total time; turning network failures and
`httpwire.WireError` into ToolError; and turning the body into text (html_text.py).

Must not: decide permissions (the loop decides the first host before `run`, `ctx.permit` the
rest), send cookies, credentials or a body, keep a connection open after the call, buffer a body
past its cap, read HTTP framing itself (httpwire.py does), or mark the text as untrusted (the
loop wraps every tool result).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
import ssl
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit

from totem import httpwire
from totem.security.permissions import HOST, ToolKind
from totem.tools.base import Tool, ToolContext, ToolError, ToolResult
from totem.tools.html_text import body_text, codec_name

DEFAULT_MAX_BYTES = 2 * 1024 * 1024
MAX_MAX_BYTES = 10 * 1024 * 1024
MAX_REDIRECTS = 5
# Network time for the whole call, redirects included; waiting for the person does not count.
TOTAL_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 10.0
MAX_URL_CHARS = 8192
# A name may resolve to many addresses; only this many are checked, asked about and tried.
MAX_ADDRESSES = 8
# Inflating runs in steps of this much output, letting other tasks run between them.
INFLATE_STEP_BYTES = 256 * 1024
# Converting a larger body (HTMLParser is pure Python) runs in a thread.
THREAD_TEXT_BYTES = 256 * 1024
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
CONTENT_CODINGS = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}  # RFC 9110 section 8.4.1
USER_AGENT = "Totem (fetch tool)"
ACCEPT = "text/html, application/xhtml+xml, text/plain;q=0.9, application/json;q=0.9, */*;q=0.5"
# Where a path or query may keep a character as it is (RFC 3986 section 3.3 and 3.4); every
# other character, non-ASCII included, is percent-encoded as UTF-8.
PATH_SAFE = "/%:@!$&'()*+,;=-._~"
QUERY_SAFE = PATH_SAFE + "?"
_HOST_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")
# WHATWG URL: a host whose last label is a number is an IPv4 address (127.1, 0x7f.1, 2130706433).
_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)")
_RFC1918 = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # RFC 6598, carrier-grade NAT
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052: DNS64 maps every IPv4 host here
# The cloud metadata endpoints (AWS, GCP, Azure; AWS over IPv6) hand out credentials.
_METADATA = frozenset(ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254"))


class FetchTool(Tool):
    name = "fetch"
    description = "Fetch an http(s) URL as text; HTML is turned into readable text."
    schema = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "minLength": 1, "maxLength": MAX_URL_CHARS,
                    "description": "http:// or https:// URL"},
            "max_bytes": {"type": "integer", "minimum": 1, "maximum": MAX_MAX_BYTES,
                          "description": "Body cap in bytes (default 2 MB, at most 10 MB)"},
        },
        "required": ["url"],
        "additionalProperties": False,
    }
    kind = ToolKind(HOST, changes=False)

    def __init__(self, total_timeout: float = TOTAL_TIMEOUT_SECONDS,
                 connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
                 tls_context: ssl.SSLContext | None = None) -> None:
        self.total_timeout = total_timeout
        self.connect_timeout = connect_timeout
        self._tls_context = tls_context  # None: the system's CA store, loaded on first use

    def subjects(self, args: dict, ctx: ToolContext) -> list[str]:
        """The host of the URL (lower-case, IDNA, no port). Raises ToolError for a URL that is
        not http(s), has a user name or password, or has no valid host."""
        return [parse_target(args["url"]).host]

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        permit = ctx.permit
        if permit is None:
            raise ToolError("fetch runs only inside the agent loop (it needs the permission callback)")
        cap = int(args.get("max_bytes") or DEFAULT_MAX_BYTES)
        target = parse_target(args["url"])
        budget = _Budget(self.total_timeout)
        decided = {target.host}  # the loop decided the first host before this call
        approved: set[tuple[str, str]] = set()
        redirects: list[dict] = []
        while True:
            addresses = await _resolve(target, budget)
            for address in addresses:
                kind = address_kind(address)
                if kind and (target.host, address) not in approved:
                    await permit("fetch", target.host, {"url": target.url, "address": address},
                                 always_ask=f"resolves to {address} ({kind})")
                    approved.add((target.host, address))
            exchange = await self._open(target, addresses, budget)
            location = exchange.headers.get("location", "").strip()
            if exchange.status in REDIRECT_STATUSES and location:
                exchange.abort()  # before asking anyone: a person may take minutes
                target = await _follow(permit, target, exchange.status, location, redirects, decided)
                continue
            page = await _read_page(exchange, budget, cap)
            break
        return await _result(args["url"], target, page, redirects)

    async def _open(self, target: _Target, addresses: list[str], budget: _Budget) -> _Exchange:
        """Connect to the first checked address that answers, send the GET, read the head."""
        context = (self._tls_context or await httpwire.system_tls_context()) if target.https else None
        try:
            async with budget.spend():
                reader, writer = await self._connect(target, addresses, context)
                try:
                    with _network_errors(target):
                        writer.write(_request(target))
                        await writer.drain()
                        return _Exchange(await httpwire.read_response(reader), writer, target)
                except BaseException:
                    writer.transport.abort()
                    raise
        except TimeoutError:
            raise ToolError(f"{target.label} did not answer within {budget.total:g} s") from None

    async def _connect(self, target: _Target, addresses: list[str], context: ssl.SSLContext | None):
        failures = []
        for address in addresses:
            try:
                async with asyncio.timeout(self.connect_timeout):
                    return await asyncio.open_connection(
                        address, target.port, ssl=context, limit=httpwire.MAX_LINE_BYTES,
                        server_hostname=target.host if context else None)
            except TimeoutError:
                failures.append(f"{address}: timed out after {self.connect_timeout:g} s")
            except ssl.SSLCertVerificationError as exc:
                raise ToolError(f"the TLS certificate of {target.host} is not valid "
                                f"({exc.verify_message})") from None
            except ssl.SSLError as exc:
                raise ToolError(f"the TLS handshake with {target.label} failed ({exc.reason})") from None
            except OSError as exc:
                failures.append(f"{address}: {httpwire.socket_reason(exc)}")
        raise ToolError(f"could not connect to {target.label}: {'; '.join(failures)}")


def parse_target(url: str) -> _Target:
    """The scheme, host, port and request path of an http(s) URL.

    The host is lower-case, IDNA-encoded, without a trailing dot; an IP address in its usual
    form (IPv6 without brackets). Raises ToolError for another scheme, a user name or password,
    a missing or invalid host or port, or control characters.
    """
    text = url.strip()
    if len(text) > MAX_URL_CHARS:
        raise ToolError(f"the URL is longer than {MAX_URL_CHARS} characters")
    if any(ord(c) < 0x20 or c == "\x7f" for c in text):
        raise ToolError("the URL contains control characters")
    try:
        parts = urlsplit(text)
        scheme, netloc, hostname, port = parts.scheme.lower(), parts.netloc, parts.hostname, parts.port
    except ValueError as exc:
        raise ToolError(f"invalid URL {_shown(text)}: {exc}") from None
    if scheme not in ("http", "https"):
        what = f"{scheme}:" if scheme else "a URL without a scheme"
        raise ToolError(f"only http:// and https:// URLs are fetched, not {what} ({_shown(text)})")
    if "@" in netloc:
        raise ToolError("URLs with a user name or password (user@host) are refused: fetch sends "
                        "no credentials")
    if not hostname:
        raise ToolError(f"the URL {_shown(text)} has no host")
    https = scheme == "https"
    if port == 0:
        raise ToolError("the URL's port must be between 1 and 65535")
    path = quote(parts.path or "/", safe=PATH_SAFE)
    if parts.query:
        path += "?" + quote(parts.query, safe=QUERY_SAFE)
    return _Target(https, _host(hostname), port or (443 if https else 80), path)


def address_kind(address: str) -> str | None:
    """Why an address is not a public one ("loopback", "private, RFC 1918", "link-local", ...),
    None for a public address. IPv6 forms that carry an IPv4 address are judged by it."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        for embedded, how in ((ip.ipv4_mapped, "IPv4-mapped"), (ip.sixtofour, "6to4"),
                              (_nat64(ip), "NAT64")):
            if embedded is not None:
                kind = address_kind(str(embedded))
                return f"{how} {kind}" if kind else None
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip in _METADATA:
        return "cloud metadata endpoint"
    if ip.version == 4 and ip in _THIS_NETWORK:
        return "this network, 0.0.0.0/8"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if any(ip in network for network in _RFC1918):
        return "private, RFC 1918"
    if ip.version == 6 and ip in _UNIQUE_LOCAL:
        return "private, unique local fc00::/7"
    if ip.version == 6 and ip.is_site_local:
        return "private, site-local"
    if ip.version == 4 and ip in _SHARED:
        return "shared address space, RFC 6598"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "special-purpose, not public"
    return None


# -- the target and the network -------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    https: bool
    host: str
    port: int
    path: str  # with the query; percent-encoded

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == (443 if self.https else 80) else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.https else 'http'}://{self.host_header}{self.path}"

    @property
    def label(self) -> str:
        return self.host_header


class _Budget:
    """The network time left for one call; time spent waiting for the person does not count."""

    def __init__(self, seconds: float) -> None:
        self.total = seconds
        self.left = seconds

    @contextlib.asynccontextmanager
    async def spend(self):
        """Run the block within the time left; raises TimeoutError when it runs out."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            async with asyncio.timeout(max(self.left, 0)):
                yield
        finally:
            self.left -= loop.time() - start


def _host(hostname: str) -> str:
    host = hostname.rstrip(".")
    if "%" in host:
        raise ToolError("IPv6 zone identifiers (%) are not supported")
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        pass
    try:
        host = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise ToolError(f"the host name {_shown(hostname)} is not valid") from None
    if not _HOST_NAME.fullmatch(host):
        raise ToolError(f"the host name {_shown(hostname)} is not valid")
    if _NUMERIC_LABEL.fullmatch(host.rsplit(".", 1)[-1]):
        try:
            return socket.inet_ntoa(socket.inet_aton(host))  # the address it stands for
        except OSError:
            raise ToolError(f"the host {_shown(hostname)} is not a valid IPv4 address") from None
    return host


def _nat64(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64 else None


def _shown(text: str, limit: int = 200) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


async def _resolve(target: _Target, budget: _Budget) -> list[str]:
    """The addresses of the host (at most MAX_ADDRESSES, in the resolver's order)."""
    loop = asyncio.get_running_loop()
    try:
        async with budget.spend():
            infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except TimeoutError:
        raise ToolError(f"resolving {target.host} took longer than {budget.total:g} s") from None
    except (OSError, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ToolError(f"the host {target.host} could not be resolved ({reason})") from None
    addresses: list[str] = []
    for family, _type, _proto, _name, sockaddr in infos:
        address = sockaddr[0]  # the host, a str for the two families kept
        if family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, str) and address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ToolError(f"the host {target.host} has no IPv4 or IPv6 address")
    return addresses[:MAX_ADDRESSES]


async def _follow(permit: Callable[..., Awaitable[None]], target: _Target, status: int, location: str,
                  redirects: list[dict], decided: set[str]) -> _Target:
    """The next hop of a redirect, its host decided (through `permit`, ToolContext.permit) when it
    is new. Raises ToolError past MAX_REDIRECTS, for a location that is not an http(s) URL, or
    when the host is denied."""
    # Header bytes arrive as latin-1; a Location with raw UTF-8 in it means UTF-8.
    location = location.encode("latin-1").decode("utf-8", "replace")
    absolute = urljoin(target.url, location)
    redirects.append({"url": target.url, "status": status, "location": absolute})
    if len(redirects) > MAX_REDIRECTS:
        chain = " -> ".join([r["url"] for r in redirects] + [absolute])
        raise ToolError(f"stopped after {MAX_REDIRECTS} redirects: {chain}")
    try:
        following = parse_target(absolute)
    except ToolError as exc:
        raise ToolError(f"{target.url} redirects ({status}) to {_shown(absolute)}, which is not "
                        f"followed: {exc}") from None
    if following.host not in decided:
        await permit("fetch", following.host, {"url": following.url})
        decided.add(following.host)
    return following


def _request(target: _Target) -> bytes:
    return (f"GET {target.path} HTTP/1.1\r\nHost: {target.host_header}\r\nUser-Agent: {USER_AGENT}\r\n"
            f"Accept: {ACCEPT}\r\nAccept-Encoding: gzip, deflate\r\nConnection: close\r\n\r\n"
            ).encode("ascii")


@contextlib.contextmanager
def _network_errors(target: _Target):
    """Turn failures of the socket or of the response's framing into ToolError."""
    try:
        yield
    except httpwire.WireError as exc:
        if exc.closed:
            raise ToolError(f"the connection to {target.label} failed: {exc.reason}") from None
        raise ToolError(f"the response of {target.label} is malformed: {exc.reason}") from None
    except ssl.SSLError as exc:
        raise ToolError(f"the TLS connection to {target.label} failed ({exc.reason})") from None
    except OSError as exc:
        reason = httpwire.socket_reason(exc)
        raise ToolError(f"the connection to {target.label} failed: {reason}") from None


class _Exchange:
    """A response whose head is read and whose body is still on the socket."""

    def __init__(self, response: httpwire.WireResponse, writer: asyncio.StreamWriter,
                 target: _Target) -> None:
        self.response, self.writer, self.target = response, writer, target
        self.status, self.headers = response.status, response.headers

    async def next_piece(self) -> bytes:
        """The next piece of the body, b"" once it is complete. Raises ToolError when the
        connection fails or closes early, or the chunked framing is broken."""
        with _network_errors(self.target):
            return await self.response.next_piece()

    def abort(self) -> None:
        """Drop the connection at once (the peer sees a reset if it is still sending)."""
        self.writer.transport.abort()

    async def close(self) -> None:
        """Close gracefully after a complete body, at once otherwise."""
        if self.response.complete:
            await httpwire.close_gracefully(self.writer)
        else:
            self.abort()


# -- the body -------------------------------------------------------------------------------


@dataclass
class _Page:
    status: int
    media_type: str  # lower-case, without parameters; "" when the server sent none
    charset: str | None
    body: bytes
    cut: str = ""  # why the body is incomplete, "" when it is whole
    encoding: str = ""  # a content coding that could not be decoded


class _Inflater:
    """The decoded body, capped at `cap` bytes of output whatever the compression ratio."""

    def __init__(self, coding: str, cap: int) -> None:
        self.cap = cap
        self.body = bytearray()
        self.raw_bytes = 0
        self._pending: bytes | None = b"" if coding == "deflate" else None
        self._inflate = zlib.decompressobj(31) if coding == "gzip" else None

    async def feed(self, data: bytes) -> bool:
        """Add a piece of the body; True once the cap is reached. Raises zlib.error."""
        if len(self.body) > self.cap:
            return True  # (a max_length of 0 would mean no limit at all)
        self.raw_bytes += len(data)
        if self._pending is not None:
            # "deflate" should be zlib-wrapped (RFC 9110 section 8.4.1.2); some servers send it
            # raw. A zlib header is 2 bytes whose value is a multiple of 31, method 8.
            self._pending += data
            if len(self._pending) < 2:
                return False
            data, self._pending = self._pending, None
            wrapped = data[0] & 0x0F == 8 and int.from_bytes(data[:2], "big") % 31 == 0
            self._inflate = zlib.decompressobj(15 if wrapped else -15)
        if self._inflate is None:
            self.body += data
        else:
            while data and not self._inflate.eof:
                room = self.cap + 1 - len(self.body)
                self.body += self._inflate.decompress(data, min(room, INFLATE_STEP_BYTES))
                data = self._inflate.unconsumed_tail
                if len(self.body) > self.cap:
                    break
                if data:
                    await asyncio.sleep(0)  # a bomb inflates fast: let other tasks run
        return len(self.body) > self.cap or self.raw_bytes > self.cap

    def finish(self) -> None:
        """The end of the body: take what the decompressor still holds. Raises zlib.error."""
        if self._inflate is not None and not self._inflate.eof:
            self.body += self._inflate.flush()[:self.cap + 1 - len(self.body)]


async def _read_page(exchange: _Exchange, budget: _Budget, cap: int) -> _Page:
    """Read the body within the cap and the time left, then close the connection."""
    media_type, charset = _content_type(exchange.headers.get("content-type", ""))
    codings = [c.strip().lower() for c in exchange.headers.get("content-encoding", "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    page = _Page(exchange.status, media_type, charset, b"")
    if len(codings) > 1 or (codings and codings[0] not in CONTENT_CODINGS):
        exchange.abort()  # not asked for (Accept-Encoding), and not decodable here
        page.encoding = ", ".join(codings)
        return page
    coding = CONTENT_CODINGS[codings[0]] if codings else ""
    inflater = _Inflater(coding, cap)
    try:
        try:
            async with budget.spend():
                while piece := await exchange.next_piece():
                    if await inflater.feed(piece):
                        page.cut = f"cut at {cap} bytes: the page is longer" + (
                            f"; max_bytes can go up to {MAX_MAX_BYTES}" if cap < MAX_MAX_BYTES else "")
                        break
                    await asyncio.sleep(0)  # buffered reads do not yield; let other tasks run
                else:
                    inflater.finish()
        except TimeoutError:
            page.cut = f"cut: no more data within {budget.total:g} s"
        except zlib.error:
            page.cut = f"cut: the {coding} data is corrupt"
        except ToolError as exc:
            if not inflater.body:
                raise
            page.cut = f"cut: {exc}"
    finally:
        await exchange.close()
    page.body = bytes(inflater.body[:cap])
    return page


def _content_type(header: str) -> tuple[str, str | None]:
    media_type, *params = header.split(";")
    charset = None
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = codec_name(value)
    return media_type.strip().lower(), charset


async def _result(url: str, target: _Target, page: _Page, redirects: list[dict]) -> ToolResult:
    if page.encoding:
        text = f"[the body is encoded with {page.encoding}, which fetch cannot decode; not shown]"
    elif len(page.body) > THREAD_TEXT_BYTES:
        text = await asyncio.to_thread(body_text, page.body, page.media_type, page.charset, target.url)
    else:
        text = body_text(page.body, page.media_type, page.charset, target.url)
    if page.cut:
        text += f"\n\n[{page.cut}]"
    size = len(page.body)
    shown_type = page.media_type or "no content type"
    output = f"{target.url} ({page.status}, {shown_type}, {size} bytes{', cut' if page.cut else ''}):\n\n{text}"
    title = target.host_header + target.path.split("?", 1)[0]
    data = {"url": url, "final_url": target.url, "status": page.status, "content_type": page.media_type,
            "bytes": size, "cut": bool(page.cut), "redirects": redirects}
    return ToolResult(output, title=title, data=data)
