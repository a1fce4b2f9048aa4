"""The perimeter: who may talk to Totem at all.

Owns the access token (compared in constant time; made at first start and kept in
`<data>/token` unless config.ini names one, or says `token = none`), the one-time sign-in codes
printed at start-up and by `totem token`, the login cookie, the MCP-only tokens (they open
`/$mcp/` and nothing else), the blocking of a client after repeated failures, the Host rule that
stops DNS rebinding when no token is set, the refusal of proxied requests without a token, and
the Origin rule (scheme, host and port) for requests that change something and for the
WebSocket. It answers questions about a request; it does not route or build responses (the
caller raises what it returns).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from urllib.parse import urlsplit

from totem.config import TOKENLESS
from totem.errors import Forbidden, TooManyRequests, Unauthorized

COOKIE_NAME = "totem"
COOKIE_MAX_AGE_S = 30 * 24 * 3600
SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS"))
LOOPBACK_HOSTS = frozenset(("localhost", "127.0.0.1", "::1"))
LOOPBACK_ADDRESSES = frozenset(("127.0.0.1", "::1", "::ffff:127.0.0.1"))
# The schemes of a page that may change something here, with the port that an absent one means.
DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_TRACKED_CLIENTS = 10_000
TOKEN_FILE = "token"  # in the data folder, mode 0600, made at the first start
# A sign-in code (`/login?code=...`) opens one browser once, within this many seconds of being made.
SIGNIN_CODE_TTL_S = 600
SIGNIN_NONCE_BYTES = 8
SIGNIN_MAC_BYTES = 16
MAX_USED_CODES = 10_000
# A request that names a client behind it came through a proxy: it is not this computer's.
FORWARDING_HEADERS = frozenset(("x-forwarded-for", "forwarded", "x-real-ip"))
MCP_ONLY = "this token opens only the MCP route /$mcp/"


def access_token(config) -> str:
    """The token that signs in: config.ini's `token`; "" for `token = none`; else the one in
    `<data>/token`, made (mode 0600) at the first start. Raises vault.VaultError for a token
    file that others can read, that is not a regular file or that cannot be written."""
    if config.token == TOKENLESS:
        return ""
    if config.token:
        return config.token
    from totem.security.vault import load_secret_file
    return load_secret_file(config.data, TOKEN_FILE, lost="every browser must sign in again")


def stored_token(data_dir: str) -> str:
    """The token of `<data_dir>/token`, or "" when there is none yet (never makes one).
    Raises vault.VaultError for an unsafe or damaged file."""
    from totem.security.vault import read_secret_file
    return read_secret_file(data_dir, TOKEN_FILE)


def signin_code(token: str, issued_s: int, nonce: str) -> str:
    """A code that signs one browser in once: when it was made, a nonce, and a MAC under the
    token, so that `totem token` can make one without asking the server."""
    mac = hmac.new(token.encode("utf-8"), f"totem-signin:{issued_s}:{nonce}".encode(), hashlib.sha256)
    return f"{issued_s:x}.{nonce}.{mac.hexdigest()[:2 * SIGNIN_MAC_BYTES]}"


def new_signin_code(token: str, now_s: float | None = None) -> str:
    """A fresh sign-in code for `token`."""
    return signin_code(token, int(time.time() if now_s is None else now_s), secrets.token_hex(SIGNIN_NONCE_BYTES))


def signin_url(base_url: str, code: str) -> str:
    return f"{base_url.rstrip('/')}/login?code={code}"


class SigninCodes:
    """The one-time sign-in codes of one server. A code is good once, within SIGNIN_CODE_TTL_S
    of being made, and only if it was made after this server started (a restart forgets which
    codes were used, so older ones are refused)."""

    def __init__(self, token: str, clock=time.time):
        self.token = token
        self.clock = clock
        self.started_s = int(clock())
        self._used: dict[str, int] = {}

    def new(self) -> str:
        return new_signin_code(self.token, self.clock())

    def redeem(self, code: str) -> bool:
        """Whether `code` is good; a good one is used up. Never raises."""
        issued_text, _, rest = code.partition(".")
        nonce, _, _mac = rest.partition(".")
        try:
            issued = int(issued_text, 16) if issued_text.isascii() and issued_text.isalnum() else -1
        except ValueError:
            return False
        if not self.token or issued < self.started_s or issued > self.clock() + 1:
            return False
        if self.clock() - issued > SIGNIN_CODE_TTL_S or nonce in self._used:
            return False
        if not same_token(code, signin_code(self.token, issued, nonce)):
            return False
        self._forget_expired()
        self._used[nonce] = issued
        return True

    def _forget_expired(self) -> None:
        horizon = self.clock() - SIGNIN_CODE_TTL_S
        for nonce in [nonce for nonce, issued in self._used.items() if issued < horizon]:
            del self._used[nonce]
        while len(self._used) >= MAX_USED_CODES:  # many codes in ten minutes: the oldest is expired by then
            del self._used[next(iter(self._used))]


def same_token(given: str, expected: str) -> bool:
    """Compare two tokens in constant time, whatever their lengths (security text: FUNC.sametoken)."""
    given_digest = hashlib.sha256(given.encode("utf-8", "surrogatepass")).digest()
    expected_digest = hashlib.sha256(expected.encode("utf-8")).digest()
    return hmac.compare_digest(given_digest, expected_digest) and bool(expected)


def split_host(value: str) -> tuple[str, int | None] | None:
    """Host and port of a Host header value (`[::1]:8470`, `localhost`), or None if malformed."""
    value = value.strip().lower()
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[1:end], value[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else ""
    else:
        host, _, port_text = value.partition(":")
        if ":" in port_text:
            return None
    if port_text:
        # ASCII digits only: str.isdigit() also accepts '²', which int() refuses (a 500).
        if not (port_text.isascii() and port_text.isdigit()) or len(port_text) > 5 or int(port_text) > 65535:
            return None
        return host, int(port_text)
    return host, None


def parse_origin(value: str) -> tuple[str, str, int] | None:
    """Scheme, host and port of an Origin header value (RFC 6454 section 7), the port filled in
    from the scheme when absent; None for `null`, another scheme, user info, a path or garbage."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:  # "http://[::1", a port that is not a number or out of range
        return None
    # A browser sends scheme://host[:port] and nothing else; anything more is not a page's origin.
    if (parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.username is not None
            or parts.path or parts.query or parts.fragment):
        return None
    return parts.scheme, parts.hostname, DEFAULT_PORTS[parts.scheme] if port is None else port


def cookie_value(header: str | None) -> str | None:
    """Our cookie's value from a Cookie header."""
    if not header:
        return None
    for item in header.split(";"):
        name, sep, value = item.strip().partition("=")
        if sep and name == COOKIE_NAME:
            return value
    return None


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def mcp_token_digest(token: str) -> str:
    """How an MCP-only token is stored: its SHA-256 (the token is shown once, when it is made)."""
    return _digest(token)


def _bearer(request) -> str | None:
    """The token of an `Authorization: Bearer` header; "" for another scheme; None without one.
    Only spaces separate scheme and token (RFC 9110 section 11.4): str.strip() would also drop
    '\xa0' and '\x85' and accept a token that is not the one configured."""
    authorization = request.header("authorization")
    if authorization is None:
        return None
    scheme, _, given = authorization.partition(" ")
    return given.strip(" ") if scheme.lower() == "bearer" else ""


class Perimeter:
    """The checks that every request passes, in the order the router applies them."""

    def __init__(self, config, store, clock=time.monotonic):
        self.token = config.token  # resolved by access_token(): "" only for token = none
        self.codes = SigninCodes(self.token)
        self.config_mcp_digest = mcp_token_digest(config.mcptoken) if config.mcptoken else ""
        self.cookiesecure = config.cookiesecure
        self.proxy = config.proxy
        self.max_failures = config.failures
        self.window_s = config.blockminutes * 60
        self.store = store
        self.clock = clock
        self._failures: dict[str, deque[float]] = {}

    # -- where the request comes from ---------------------------------------------------------

    def _from_proxy(self, request) -> bool:
        return bool(self.proxy) and request.client == self.proxy

    def client_address(self, request) -> str:
        """The client's address: the peer, or the forwarded one when the peer is our proxy."""
        if self._from_proxy(request):
            forwarded = request.header("x-forwarded-for")
            if forwarded:
                return forwarded.split(",")[-1].strip()
        return request.client

    def requested_host(self, request) -> str | None:
        """The host that was asked for: Host, or x-forwarded-host from the trusted proxy only."""
        if self._from_proxy(request):
            forwarded = request.header("x-forwarded-host")
            if forwarded:
                return forwarded.split(",")[0].strip()
        return request.header("host")

    def requested_scheme(self, request) -> str:
        """The scheme the browser used: x-forwarded-proto (http or https) from the trusted proxy
        only; otherwise https when the config says Totem is served over HTTPS (cookiesecure),
        else http, which is all that Totem itself speaks."""
        if self._from_proxy(request):
            forwarded = (request.header("x-forwarded-proto") or "").split(",")[0].strip().lower()
            if forwarded in DEFAULT_PORTS:
                return forwarded
        return "https" if self.cookiesecure else "http"

    def check_host(self, request) -> None:
        """Without a token, only loopback Host names are served (DNS rebinding).

        Raises Forbidden (or BadRequest-like Forbidden for a missing Host).
        """
        host = self.requested_host(request)
        parsed = split_host(host or "")
        if parsed is None:
            raise Forbidden(("host", "a valid Host header is required"))
        if not self.token and parsed[0] not in LOOPBACK_HOSTS:
            raise Forbidden(("host", f"host {parsed[0]} is not served without an access token; "
                                     "use http://127.0.0.1 or http://localhost"))
        if not self.token and any(name in FORWARDING_HEADERS for name, _value in request.headers):
            # A proxy on this computer makes every client look local: without a token, none is.
            raise Forbidden(("host", "a request through a proxy is not local, and this Totem has no "
                                     "access token (token = none): remove that line to serve it"))

    def same_origin(self, request) -> bool:
        """True when there is no Origin (a program), or when its scheme, host and port are the
        ones the browser asked for (security text: FUNC.sameorigin). A default port equals an
        absent one; `null`, a malformed Origin and more than one Origin are another origin."""
        values = [value for name, value in request.headers if name == "origin"]
        if not values:
            return True
        if len(values) > 1:
            return False
        origin = parse_origin(values[0])
        if origin is None:
            return False
        requested = split_host(self.requested_host(request) or "")
        if requested is None:
            return False
        scheme = self.requested_scheme(request)
        host, port = requested
        return origin == (scheme, host, DEFAULT_PORTS[scheme] if port is None else port)

    def check_origin(self, request) -> None:
        """Refuse a change from a page of another origin. Raises Forbidden."""
        if request.method not in SAFE_METHODS and not self.same_origin(request):
            raise Forbidden(("origin", "requests from another origin cannot change anything"))

    # -- blocking ------------------------------------------------------------------------------

    def check_blocked(self, request) -> None:
        """Raises TooManyRequests with Retry-After while a client is blocked."""
        failures = self._recent_failures(self.client_address(request))
        if failures is not None and len(failures) >= self.max_failures:
            retry_after = max(1, int(failures[0] + self.window_s - self.clock()) + 1)
            raise TooManyRequests(("token", f"too many failed attempts; try again in {retry_after} s"),
                                  headers={"Retry-After": str(retry_after)})

    def _recent_failures(self, client: str) -> deque | None:
        failures = self._failures.get(client)
        if failures is None:
            return None
        horizon = self.clock() - self.window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        if not failures:
            del self._failures[client]
            return None
        return failures

    def record_failure(self, request) -> None:
        client = self.client_address(request)
        if client not in self._failures and len(self._failures) >= MAX_TRACKED_CLIENTS:
            self._forget_expired()
        self._failures.setdefault(client, deque(maxlen=self.max_failures)).append(self.clock())

    def _forget_expired(self) -> None:
        for client in list(self._failures):
            self._recent_failures(client)

    # -- identity ------------------------------------------------------------------------------

    async def authenticate(self, request) -> None:
        """Let the request through or raise Unauthorized/TooManyRequests.

        Without a token every request that passed the Host rule is the local user. With a token,
        a Bearer header or the login cookie is needed; a wrong Bearer token counts as a failure.
        """
        given = _bearer(request)
        if self.token:
            self.check_blocked(request)
            if given and same_token(given, self.token):
                return
        if given and await self.is_mcp_token(given):
            raise Unauthorized(("token", MCP_ONLY))
        if not self.token:
            return
        if given is not None:
            self.record_failure(request)
            raise Unauthorized(("token", "the access token is wrong"))
        cookie = cookie_value(request.header("cookie"))
        if cookie and await self.store.has_login(_digest(cookie)):
            return
        raise Unauthorized(("token", "sign in with the access token"))

    async def is_mcp_token(self, given: str) -> bool:
        """Whether `given` is an MCP-only token (config.ini's `mcptoken`, or one made in
        Settings). Compared by digest: the stored form is never the token."""
        digest = mcp_token_digest(given)
        if self.config_mcp_digest and hmac.compare_digest(digest, self.config_mcp_digest):
            return True
        return await self.store.has_mcp_token(digest)

    async def authenticate_mcp(self, request) -> None:
        """The MCP route's own rule. A request with an Origin (a web page) is refused, whatever
        else it carries; with a token the caller sends `Authorization: Bearer <token>` (never
        the cookie) with the access token or an MCP-only token, a wrong one counting as a
        failure as at the login; without a token only a caller on this computer's loopback.
        Raises Forbidden, Unauthorized, TooManyRequests."""
        if any(name == "origin" for name, _value in request.headers):
            raise Forbidden(("origin", "the MCP route does not serve web pages: a request with an Origin is refused"))
        if not self.token:
            if self.client_address(request) not in LOOPBACK_ADDRESSES:
                raise Forbidden(("client", "without an access token only callers on this computer are served"))
            return
        self.check_blocked(request)
        given = _bearer(request)
        if given is None:
            raise Unauthorized(("token", "send Authorization: Bearer <token>"), headers={"WWW-Authenticate": "Bearer"})
        if not given or not (same_token(given, self.token) or await self.is_mcp_token(given)):
            self.record_failure(request)
            raise Unauthorized(("token", "the access token is wrong"), headers={"WWW-Authenticate": "Bearer"})

    async def is_authenticated(self, request) -> bool:
        try:
            await self.authenticate(request)
        except (Unauthorized, TooManyRequests):
            return False
        return True

    async def login(self, request, given: str) -> str:
        """Check a token from the login form; returns the Set-Cookie value.

        Raises TooManyRequests while blocked, Unauthorized for a wrong token.
        """
        self.check_blocked(request)
        if not same_token(given, self.token):
            self.record_failure(request)
            raise Unauthorized(("token", "the access token is wrong"))
        return await self._new_login()

    async def login_with_code(self, request, code: str) -> str:
        """Check a one-time sign-in code (`/login?code=`); returns the Set-Cookie value.
        Raises TooManyRequests while blocked, Unauthorized for a code that is wrong, used or
        expired."""
        self.check_blocked(request)
        if not self.codes.redeem(code):
            self.record_failure(request)
            raise Unauthorized(("code", "this sign-in code is wrong, used or expired; "
                                        "run `python totem.py token` for a new one"))
        return await self._new_login()

    async def _new_login(self) -> str:
        value = secrets.token_urlsafe(32)
        await self.store.add_login(_digest(value))
        return self._cookie(value, COOKIE_MAX_AGE_S)

    async def logout(self, request) -> str:
        """Forget this browser's login; returns the Set-Cookie value that clears it."""
        cookie = cookie_value(request.header("cookie"))
        if cookie:
            await self.store.remove_login(_digest(cookie))
        return self._cookie("", 0)

    def _cookie(self, value: str, max_age: int) -> str:
        flags = f"{COOKIE_NAME}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict"
        return flags + "; Secure" if self.cookiesecure else flags
