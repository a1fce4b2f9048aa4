"""The adversarial perimeter suite: tokens, cookies, blocking, Origin, Host, headers, static files,
limits and bad input, all against the real server on a loopback port (DESIGN.md, "Perimeter")."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import tempfile
import time
import unittest
from unittest import mock

from websockets.exceptions import InvalidStatus

from tests.utils import MS, TOKEN, TotemCase, call, open_ws, read_answer, request
from totem.app import STATIC_DIR, App
from totem.config import parse_values
from totem.http import httpd

SECRET_MARKER = "TOTEM-SECRET-MARKER-do-not-serve"
COOKIE_PATTERN = re.compile(
    r"^totem=([A-Za-z0-9_-]{20,}); Path=/; Max-Age=(\d+); HttpOnly; SameSite=Strict$")
EVIL_ORIGIN = "http://evil.example"
ANSWER_MS = 5000


# -- small real clients ---------------------------------------------------------------------------

@contextlib.asynccontextmanager
async def connection(app):
    """A raw connection to the server, closed on the way out."""
    reader, writer = await asyncio.open_connection("127.0.0.1", app.port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def exchange(app, data: bytes, head_only: bool = False, timeout_ms: float = ANSWER_MS):
    """Send raw bytes on a new connection and read one answer."""
    async with connection(app) as (reader, writer):
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(read_answer(reader, head_only), timeout_ms * MS)


def head(*lines: str, body: bytes = b"") -> bytes:
    """A request head from its lines (latin-1), then the body."""
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def bearer(token: str = TOKEN) -> dict:
    return {"Authorization": f"Bearer {token}"}


def origin_of(app, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{app.port}"


def static_text(name: str) -> bytes:
    with open(os.path.join(STATIC_DIR, name), "rb") as handle:
        return handle.read()


class PerimeterAssertions:
    """Assertions on the error shape and the four security headers."""

    def assertError(self, answer, status: int, *names: str):
        """The exact status, and a body in the `[{"name", "error"}]` shape (with these names)."""
        self.assertEqual(answer.status, status, answer.body)
        self.assertEqual(answer.header("content-type"), "application/json; charset=utf-8")
        body = answer.json()
        self.assertIsInstance(body, list)
        self.assertTrue(body)
        for item in body:
            self.assertEqual(set(item), {"name", "error"})
            self.assertIsInstance(item["name"], str)
            self.assertIsInstance(item["error"], str)
            self.assertTrue(item["error"])
            self.assertNotIn("Traceback", item["error"])
        if names:
            self.assertEqual([item["name"] for item in body], list(names))
        return body

    def assertSecurityHeaders(self, headers):
        """nosniff, DENY, no-referrer and the CSP, each exactly once when countable."""
        if isinstance(headers, list):
            counts = {}
            for name, _value in headers:
                counts[name.lower()] = counts.get(name.lower(), 0) + 1
            for name in ("x-content-type-options", "x-frame-options", "referrer-policy",
                         "content-security-policy"):
                self.assertEqual(counts.get(name), 1, name)
            headers = {name.lower(): value for name, value in headers}
        get = headers.get
        self.assertEqual(get("x-content-type-options") or get("X-Content-Type-Options"), "nosniff")
        self.assertEqual(get("x-frame-options") or get("X-Frame-Options"), "DENY")
        self.assertEqual(get("referrer-policy") or get("Referrer-Policy"), "no-referrer")
        policy = get("content-security-policy") or get("Content-Security-Policy")
        self.assertIsNotNone(policy)
        directives = {}
        for item in policy.split(";"):
            name, _, value = item.strip().partition(" ")
            directives[name] = value.strip()
        self.assertEqual(directives.get("default-src"), "'self'")
        self.assertEqual(directives.get("frame-ancestors"), "'none'")
        self.assertEqual(directives.get("img-src"), "'self' data: blob:")
        self.assertEqual(directives.get("connect-src"), "'self'")

    def assertNoLeak(self, answer, *secrets: bytes):
        for secret in secrets + (SECRET_MARKER.encode(),):
            self.assertNotIn(secret, answer.body)


class Case(PerimeterAssertions, TotemCase):
    async def project_ids(self) -> list[str]:
        answer = await call(self.app, "projects", headers=self.auth())
        self.assertEqual(answer.status, 200, answer.body)
        return [project["id"] for project in answer.json()]

    def auth(self) -> dict:
        return bearer() if self.app.config.token else {}


# -- tokens and cookies ---------------------------------------------------------------------------

class TokenTest(Case):
    settings = {"token": TOKEN}

    async def assertBearerRefused(self, value: str):
        answer = await call(self.app, "projects", headers={"Authorization": value})
        self.assertError(answer, 401, "token")
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_token_missing_401(self):
        """An API call without any credential is 401 in the error shape."""
        answer = await call(self.app, "projects")
        self.assertError(answer, 401, "token")

    async def test_token_wrong_401(self):
        """A wrong Bearer token is 401."""
        await self.assertBearerRefused("Bearer not-the-token-at-all")

    async def test_token_one_char_off_401(self):
        """A token that differs in its last character is 401."""
        await self.assertBearerRefused(f"Bearer {TOKEN[:-1]}f")

    async def test_token_prefix_401(self):
        """A prefix of the token is 401."""
        await self.assertBearerRefused(f"Bearer {TOKEN[:-1]}")

    async def test_token_different_case_401(self):
        """The token in upper case is 401."""
        await self.assertBearerRefused(f"Bearer {TOKEN.upper()}")

    async def test_token_extra_chars_401(self):
        """The token followed by more characters is 401."""
        await self.assertBearerRefused(f"Bearer {TOKEN}x")

    async def test_token_trailing_nbsp_401(self):
        """The token followed by a non-breaking space (or NEL) is 401, not stripped away."""
        await self.assertBearerRefused(f"Bearer {TOKEN}\xa0")
        await self.assertBearerRefused(f"Bearer {TOKEN}\x85")

    async def test_token_trailing_newline_400(self):
        """A newline inside the Authorization value breaks the head: 400, never accepted."""
        answer = await exchange(self.app, head(
            "GET /api/projects HTTP/1.1", f"Host: 127.0.0.1:{self.app.port}", f"Authorization: Bearer {TOKEN}\n",
            "Connection: close"))
        self.assertError(answer, 400)

    async def test_token_empty_bearer_401(self):
        """`Bearer` with no token is 401."""
        await self.assertBearerRefused("Bearer")
        await self.assertBearerRefused("Bearer ")

    async def test_token_basic_scheme_401(self):
        """The token under the Basic scheme is 401."""
        await self.assertBearerRefused(f"Basic {TOKEN}")

    async def test_token_without_scheme_401(self):
        """The bare token without a scheme is 401."""
        await self.assertBearerRefused(TOKEN)

    async def test_token_right_bearer_200(self):
        """The right Bearer token opens the API (the scheme is case-insensitive)."""
        for scheme in ("Bearer", "bearer"):
            answer = await call(self.app, "account", headers={"Authorization": f"{scheme} {TOKEN}"})
            self.assertEqual(answer.status, 200, answer.body)
            self.assertEqual(answer.json()["user"], {"id": "local", "name": "local"})

    async def login(self, token: str = TOKEN):
        return await call(self.app, "login", {"token": token})

    async def test_login_right_token_sets_cookie(self):
        """Login with the right token answers success and an HttpOnly, SameSite=Strict cookie."""
        answer = await self.login()
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.json(), {"success": True, "value": "local"})
        match = COOKIE_PATTERN.match(answer.header("set-cookie"))
        self.assertIsNotNone(match, answer.header("set-cookie"))
        self.assertEqual(int(match.group(2)), 30 * 24 * 3600)
        self.assertNotIn("Secure", answer.header("set-cookie"))
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_login_near_misses_401(self):
        """Login with a near-miss token (space, newline, case, prefix, extra) is 401 without a cookie."""
        for given in (TOKEN + " ", " " + TOKEN, TOKEN + "\n", TOKEN.upper(), TOKEN[:-1], TOKEN + "x", ""):
            with self.subTest(given=given):
                answer = await self.login(given)
                self.assertIn(answer.status, (400, 401), answer.body)
                self.assertError(answer, answer.status, "token")
                self.assertIsNone(answer.header("set-cookie"))

    async def test_login_wrong_token_401(self):
        """Login with a wrong token is 401 and sets no cookie."""
        answer = await self.login("wrong-token-wrong-token")
        self.assertError(answer, 401, "token")
        self.assertIsNone(answer.header("set-cookie"))

    async def cookie(self) -> str:
        answer = await self.login()
        self.assertEqual(answer.status, 200, answer.body)
        return answer.header("set-cookie").split(";")[0]

    async def test_cookie_after_login_opens_account(self):
        """The login cookie opens /api/account and the other actions."""
        cookie = await self.cookie()
        answer = await call(self.app, "account", headers={"Cookie": cookie})
        self.assertEqual(answer.status, 200, answer.body)
        self.assertTrue(answer.json()["token"])
        answer = await call(self.app, "projects", headers={"Cookie": f"other=1; {cookie}; more=2"})
        self.assertEqual(answer.status, 200, answer.body)

    async def test_cookie_after_login_opens_websocket(self):
        """The login cookie opens the WebSocket."""
        cookie = await self.cookie()
        async with await open_ws(self.app, additional_headers={"Cookie": cookie}) as ws:
            self.assertEqual(ws.response.status_code, 101)

    async def test_websocket_without_credentials_401(self):
        """The WebSocket without a cookie or token is refused with 401."""
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app)
        self.assertEqual(caught.exception.response.status_code, 401)

    async def test_logout_invalidates_cookie(self):
        """After logout the old cookie value is refused server-side (API and WebSocket)."""
        cookie = await self.cookie()
        answer = await call(self.app, "logout", {}, headers={"Cookie": cookie})
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.json(), {"success": True, "value": "local"})
        self.assertEqual(answer.header("set-cookie"), "totem=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict")
        answer = await call(self.app, "account", headers={"Cookie": cookie})
        self.assertError(answer, 401, "token")
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app, additional_headers={"Cookie": cookie})
        self.assertEqual(caught.exception.response.status_code, 401)

    async def test_logout_keeps_other_logins(self):
        """Logout forgets only this browser's cookie."""
        first, second = await self.cookie(), await self.cookie()
        self.assertNotEqual(first, second)
        await call(self.app, "logout", {}, headers={"Cookie": first})
        answer = await call(self.app, "account", headers={"Cookie": second})
        self.assertEqual(answer.status, 200, answer.body)

    async def test_cookie_forged_401(self):
        """A cookie value that was never issued is 401."""
        for value in ("totem=" + "A" * 43, "totem=", "totem=" + TOKEN):
            with self.subTest(value=value):
                answer = await call(self.app, "account", headers={"Cookie": value})
                self.assertError(answer, 401, "token")

    async def test_cookie_wrong_bearer_with_good_cookie_401(self):
        """A wrong Bearer token is refused even when a good cookie comes along."""
        cookie = await self.cookie()
        answer = await call(self.app, "account", headers={"Cookie": cookie, "Authorization": "Bearer nope"})
        self.assertError(answer, 401, "token")

    async def test_page_without_cookie_redirects_login(self):
        """With a token, `/` without a cookie redirects to /login; with the cookie it is served."""
        answer = await request(self.app, "GET", "/")
        self.assertEqual(answer.status, 302)
        self.assertEqual(answer.header("location"), "/login")
        self.assertEqual(answer.body, b"")
        cookie = await self.cookie()
        answer = await request(self.app, "GET", "/", headers={"Cookie": cookie})
        self.assertEqual(answer.status, 200)
        self.assertEqual(answer.body, static_text("index.html"))


class CookieSecureTest(Case):
    settings = {"token": TOKEN, "cookiesecure": "true"}

    async def test_login_cookiesecure_adds_secure(self):
        """With cookiesecure the login cookie also carries `; Secure`."""
        answer = await call(self.app, "login", {"token": TOKEN})
        self.assertEqual(answer.status, 200, answer.body)
        value = answer.header("set-cookie")
        self.assertTrue(value.endswith("; HttpOnly; SameSite=Strict; Secure"), value)
        self.assertIsNotNone(COOKIE_PATTERN.match(value.removesuffix("; Secure")))


class NoTokenTest(Case):
    async def test_login_without_token_400(self):
        """Without a configured token, login answers 400 and sets nothing."""
        answer = await call(self.app, "login", {"token": TOKEN})
        self.assertError(answer, 400, "token")
        self.assertIsNone(answer.header("set-cookie"))

    async def test_logout_without_token_400(self):
        """Without a configured token, logout answers 400."""
        answer = await call(self.app, "logout", {})
        self.assertError(answer, 400, "token")

    async def test_api_without_token_needs_no_credentials(self):
        """Without a token every action and the WebSocket work without credentials."""
        answer = await call(self.app, "account")
        self.assertEqual(answer.status, 200, answer.body)
        self.assertFalse(answer.json()["token"])
        project = await self.open_project()
        session = await self.create_session(project["id"])
        answer = await call(self.app, "sessions", query=f"projectid={project['id']}")
        self.assertEqual([item["id"] for item in answer.json()["sessions"]], [session["id"]])
        answer = await call(self.app, "folders")
        self.assertEqual(answer.status, 200, answer.body)
        async with await open_ws(self.app) as ws:
            self.assertEqual(ws.response.status_code, 101)

    async def test_login_page_without_token_redirects_home(self):
        """Without a token /login redirects to the app."""
        answer = await request(self.app, "GET", "/login")
        self.assertEqual(answer.status, 302)
        self.assertEqual(answer.header("location"), "/")


# -- blocking ------------------------------------------------------------------------------------

class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class BlockingTest(Case):
    settings = {"token": TOKEN, "failures": "3", "blockminutes": "1"}

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.clock = FakeClock()
        self.app.perimeter.clock = self.clock

    async def fail_three_times(self):
        self.assertEqual((await call(self.app, "login", {"token": "wrong-wrong-wrong-1"})).status, 401)
        self.assertEqual((await call(self.app, "account", headers=bearer("wrong-wrong-2"))).status, 401)
        self.assertEqual((await call(self.app, "login", {"token": "wrong-wrong-wrong-3"})).status, 401)

    def assertBlocked(self, answer):
        self.assertError(answer, 429, "token")
        self.assertIn(int(answer.header("retry-after")), range(1, 62))
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_blocking_after_failures_429(self):
        """After `failures` wrong attempts (login and Bearer both count) the address gets 429."""
        await self.fail_three_times()
        answer = await call(self.app, "account", headers=bearer("wrong-again"))
        self.assertBlocked(answer)
        self.assertIn(int(answer.header("retry-after")), (60, 61))

    async def test_blocking_right_token_while_blocked_429(self):
        """While blocked, even the right token (Bearer or login) gets 429 and no cookie."""
        await self.fail_three_times()
        self.assertBlocked(await call(self.app, "account", headers=bearer()))
        answer = await call(self.app, "login", {"token": TOKEN})
        self.assertBlocked(answer)
        self.assertIsNone(answer.header("set-cookie"))

    async def test_blocking_window_passes_unblocked(self):
        """When the oldest failure is older than the window, the right token works again."""
        await self.fail_three_times()
        self.clock.now += 59
        self.assertBlocked(await call(self.app, "account", headers=bearer()))
        self.clock.now += 1
        answer = await call(self.app, "account", headers=bearer())
        self.assertEqual(answer.status, 200, answer.body)
        answer = await call(self.app, "login", {"token": TOKEN})
        self.assertEqual(answer.status, 200, answer.body)

    async def test_blocking_retry_after_counts_down(self):
        """Retry-After tells how long is left of the block."""
        await self.fail_three_times()
        self.clock.now += 45
        answer = await call(self.app, "account", headers=bearer())
        self.assertBlocked(answer)
        self.assertIn(int(answer.header("retry-after")), (15, 16))

    async def test_blocking_missing_cookie_not_counted(self):
        """Requests without any credential are 401 but never count towards the block."""
        for _ in range(6):
            self.assertError(await call(self.app, "projects"), 401, "token")
            self.assertEqual((await request(self.app, "GET", "/")).status, 302)
        answer = await call(self.app, "account", headers=bearer())
        self.assertEqual(answer.status, 200, answer.body)

    async def test_blocking_failures_below_limit_not_blocked(self):
        """One failure less than the limit leaves the right token working."""
        self.assertEqual((await call(self.app, "account", headers=bearer("nope-nope"))).status, 401)
        self.assertEqual((await call(self.app, "login", {"token": "nope-nope-nope"})).status, 401)
        answer = await call(self.app, "account", headers=bearer())
        self.assertEqual(answer.status, 200, answer.body)

    async def test_blocking_static_and_login_page_still_served(self):
        """A blocked address still gets the login page and static files (nothing to guess there)."""
        await self.fail_three_times()
        self.assertEqual((await request(self.app, "GET", "/login")).status, 200)
        self.assertEqual((await request(self.app, "GET", "/app.js")).status, 200)


class BlockingBehindProxyTest(Case):
    settings = {"token": TOKEN, "failures": "2", "proxy": "127.0.0.1"}

    async def test_blocking_per_forwarded_address(self):
        """Behind the configured proxy, blocking is per x-forwarded-for address."""
        attacker = {"X-Forwarded-For": "203.0.113.7"}
        for _ in range(2):
            self.assertEqual((await call(self.app, "account", headers=attacker | bearer("nope-nope"))).status, 401)
        self.assertEqual((await call(self.app, "account", headers=attacker | bearer())).status, 429)
        answer = await call(self.app, "account", headers={"X-Forwarded-For": "198.51.100.1"} | bearer())
        self.assertEqual(answer.status, 200, answer.body)


# -- Origin --------------------------------------------------------------------------------------

class OriginTest(Case):
    async def test_origin_foreign_post_403(self):
        """A POST with a foreign Origin is 403 and changes nothing."""
        answer = await call(self.app, "projects_open", {"path": self.folder("p")}, headers={"Origin": EVIL_ORIGIN})
        self.assertError(answer, 403, "origin")
        self.assertSecurityHeaders(answer.raw_headers)
        self.assertEqual(await self.project_ids(), [])

    async def test_origin_foreign_unknown_action_403(self):
        """The Origin rule runs before routing: an unknown action is 403, not 404."""
        answer = await call(self.app, "no_such_action", {}, headers={"Origin": EVIL_ORIGIN})
        self.assertError(answer, 403, "origin")
        answer = await request(self.app, "POST", "/no/such/page", headers={"Origin": EVIL_ORIGIN})
        self.assertError(answer, 403, "origin")

    async def test_origin_foreign_other_methods_403(self):
        """PUT, DELETE and PATCH with a foreign Origin are refused too."""
        for method in ("PUT", "DELETE", "PATCH"):
            with self.subTest(method=method):
                answer = await request(self.app, method, "/api/projects", headers={"Origin": EVIL_ORIGIN})
                self.assertError(answer, 403, "origin")

    async def test_origin_null_post_403(self):
        """`Origin: null` (sandboxed frame, file:) is 403."""
        answer = await call(self.app, "projects_open", {"path": self.folder("p")}, headers={"Origin": "null"})
        self.assertError(answer, 403, "origin")
        self.assertEqual(await self.project_ids(), [])

    async def test_origin_malformed_post_403(self):
        """A malformed Origin (bad port, broken IPv6, other scheme) is 403, never a 500."""
        port = self.app.port
        for value in ("http://[::1", f"http://127.0.0.1:{port}x", "http://127.0.0.1:99999999",
                      f"file://127.0.0.1:{port}", f"ws://127.0.0.1:{port}", "", "garbage"):
            with self.subTest(origin=value):
                answer = await call(self.app, "projects_open", {"path": self.folder("p")},
                                    headers={"Origin": value})
                self.assertError(answer, 403, "origin")
        self.assertEqual(await self.project_ids(), [])

    async def test_origin_other_port_post_403(self):
        """Another port on the same host is another origin: 403."""
        answer = await call(self.app, "projects_open", {"path": self.folder("p")},
                            headers={"Origin": "http://127.0.0.1:1"})
        self.assertError(answer, 403, "origin")

    async def test_origin_other_loopback_name_post_403(self):
        """http://localhost is another origin than a Host of 127.0.0.1."""
        answer = await call(self.app, "projects_open", {"path": self.folder("p")},
                            headers={"Origin": origin_of(self.app, "localhost")})
        self.assertError(answer, 403, "origin")

    async def test_origin_same_post_200(self):
        """A same-origin POST is allowed."""
        answer = await call(self.app, "projects_open", {"path": self.folder("p")},
                            headers={"Origin": origin_of(self.app)})
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(await self.project_ids(), [answer.json()["id"]])

    async def test_origin_same_ipv6_post_allowed(self):
        """Host [::1]:port with the matching Origin passes the perimeter (only the empty body is wrong)."""
        port = self.app.port
        answer = await exchange(self.app, head(
            "POST /api/projects_open HTTP/1.1", f"Host: [::1]:{port}", f"Origin: http://[::1]:{port}",
            "Content-Type: application/json", "Content-Length: 0", "Connection: close"))
        self.assertError(answer, 400, "body")  # past the perimeter: the body is what is wrong

    async def test_origin_foreign_get_200(self):
        """A GET with a foreign Origin is allowed (reads only)."""
        answer = await call(self.app, "projects", headers={"Origin": EVIL_ORIGIN})
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.json(), [])

    async def test_websocket_foreign_origin_403(self):
        """A WebSocket from a foreign Origin is refused with 403."""
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app, origin=EVIL_ORIGIN)
        self.assertEqual(caught.exception.response.status_code, 403)
        self.assertSecurityHeaders(dict(caught.exception.response.headers))
        self.assertEqual(self.app.hub.connection_count, 0)

    async def test_websocket_null_origin_403(self):
        """A WebSocket with `Origin: null` is refused with 403."""
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app, origin="null")
        self.assertEqual(caught.exception.response.status_code, 403)

    async def test_websocket_without_origin_101(self):
        """A program that sends no Origin gets the WebSocket."""
        async with await open_ws(self.app) as ws:
            self.assertEqual(ws.response.status_code, 101)

    async def test_websocket_same_origin_101(self):
        """A page of the same origin gets the WebSocket."""
        async with await open_ws(self.app, origin=origin_of(self.app)) as ws:
            self.assertEqual(ws.response.status_code, 101)

    async def test_forwarded_host_ignored_without_proxy(self):
        """Without a proxy configured, x-forwarded-host cannot make a foreign Origin match."""
        port = self.app.port
        forwarded = {"X-Forwarded-Host": f"localhost:{port}", "Origin": origin_of(self.app, "localhost")}
        answer = await call(self.app, "projects_open", {"path": self.folder("p")}, headers=forwarded)
        self.assertError(answer, 403, "origin")
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app, origin=origin_of(self.app, "localhost"),
                          additional_headers={"X-Forwarded-Host": f"localhost:{port}"})
        self.assertEqual(caught.exception.response.status_code, 403)

    async def test_forwarded_host_ignored_for_loopback_check(self):
        """Without a proxy, x-forwarded-host does not replace the Host that the Host rule checks."""
        answer = await request(self.app, "GET", "/api/projects", host="evil.example",
                               headers={"X-Forwarded-Host": f"127.0.0.1:{self.app.port}"})
        self.assertError(answer, 403, "host")


class OriginOtherProxyTest(Case):
    settings = {"proxy": "10.9.9.9"}

    async def test_forwarded_host_ignored_from_other_peer(self):
        """With a proxy configured, x-forwarded-host from any other peer is ignored."""
        port = self.app.port
        forwarded = {"X-Forwarded-Host": f"localhost:{port}", "Origin": origin_of(self.app, "localhost")}
        answer = await call(self.app, "projects_open", {"path": self.folder("p")}, headers=forwarded)
        self.assertError(answer, 403, "origin")
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app, origin=origin_of(self.app, "localhost"),
                          additional_headers={"X-Forwarded-Host": f"localhost:{port}"})
        self.assertEqual(caught.exception.response.status_code, 403)


class OriginProxyTest(Case):
    settings = {"proxy": "127.0.0.1"}

    async def test_forwarded_host_from_proxy_used(self):
        """From the configured proxy, x-forwarded-host is the requested host for the Origin rule."""
        port = self.app.port
        forwarded = {"X-Forwarded-Host": f"localhost:{port}", "Origin": origin_of(self.app, "localhost")}
        answer = await call(self.app, "projects_open", {"path": self.folder("p")}, headers=forwarded)
        self.assertEqual(answer.status, 200, answer.body)
        async with await open_ws(self.app, origin=origin_of(self.app, "localhost"),
                                 additional_headers={"X-Forwarded-Host": f"localhost:{port}"}) as ws:
            self.assertEqual(ws.response.status_code, 101)

    async def test_forwarded_host_from_proxy_checked_by_host_rule(self):
        """Without a token, a forwarded foreign host is refused like a foreign Host (rebinding)."""
        answer = await call(self.app, "projects", headers={"X-Forwarded-Host": "evil.example"})
        self.assertError(answer, 403, "host")


class OriginProxyTokenTest(Case):
    settings = {"token": TOKEN, "proxy": "127.0.0.1"}

    async def test_forwarded_host_https_origin_200(self):
        """Behind an HTTPS proxy, the public origin is the forwarded proto and host (default port 443)."""
        headers = bearer() | {"X-Forwarded-Host": "totem.example", "X-Forwarded-Proto": "https",
                              "Origin": "https://totem.example"}
        answer = await call(self.app, "projects_open", {"path": self.folder("p")}, headers=headers)
        self.assertEqual(answer.status, 200, answer.body)

    async def test_forwarded_host_origin_mismatch_403(self):
        """Behind the proxy, an Origin other than the forwarded host is 403 whatever the token."""
        headers = bearer() | {"X-Forwarded-Host": "totem.example", "Origin": EVIL_ORIGIN}
        answer = await call(self.app, "projects_open", {"path": self.folder("p")}, headers=headers)
        self.assertError(answer, 403, "origin")


class OriginTokenTest(Case):
    settings = {"token": TOKEN}

    async def test_origin_foreign_with_token_403(self):
        """A valid Bearer token does not lift the Origin rule."""
        answer = await call(self.app, "projects_open", {"path": self.folder("p")},
                            headers=bearer() | {"Origin": EVIL_ORIGIN})
        self.assertError(answer, 403, "origin")
        self.assertEqual(await self.project_ids(), [])

    async def test_origin_foreign_with_cookie_403(self):
        """A valid cookie does not lift the Origin rule (logout included)."""
        login = await call(self.app, "login", {"token": TOKEN})
        cookie = login.header("set-cookie").split(";")[0]
        answer = await call(self.app, "projects_open", {"path": self.folder("p")},
                            headers={"Cookie": cookie, "Origin": EVIL_ORIGIN})
        self.assertError(answer, 403, "origin")
        answer = await call(self.app, "logout", {}, headers={"Cookie": cookie, "Origin": EVIL_ORIGIN})
        self.assertError(answer, 403, "origin")
        self.assertEqual((await call(self.app, "account", headers={"Cookie": cookie})).status, 200)

    async def test_origin_foreign_login_403(self):
        """Login from a foreign page is 403 (login CSRF) and sets no cookie."""
        answer = await call(self.app, "login", {"token": TOKEN}, headers={"Origin": EVIL_ORIGIN})
        self.assertError(answer, 403, "origin")
        self.assertIsNone(answer.header("set-cookie"))

    async def test_websocket_foreign_origin_with_token_403(self):
        """A WebSocket from a foreign Origin is refused even with the right token."""
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app, origin=EVIL_ORIGIN, additional_headers=bearer())
        self.assertEqual(caught.exception.response.status_code, 403)


# -- Host ----------------------------------------------------------------------------------------

class HostTest(Case):
    """Without a token only loopback Host names are served (DNS rebinding)."""

    async def assertHostRefused(self, host_line: str | None, status: int = 403):
        """API, page and static file with this Host line are all refused; nothing is served."""
        for method, path in (("GET", "/api/projects"), ("GET", "/"), ("GET", "/app.js"),
                             ("GET", "/login"), ("POST", "/api/projects_open")):
            lines = [f"{method} {path} HTTP/1.1"] + ([host_line] if host_line is not None else [])
            lines += ["Connection: close", "Content-Length: 0"]
            answer = await exchange(self.app, head(*lines))
            with self.subTest(host=host_line, path=path):
                self.assertError(answer, status)
                self.assertSecurityHeaders(answer.raw_headers)
                self.assertNoLeak(answer, static_text("app.js")[:60], static_text("index.html")[:60])
        handshake = ["GET /ws/ HTTP/1.1"] + ([host_line] if host_line is not None else [])
        handshake += ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
                      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]
        answer = await exchange(self.app, head(*handshake))
        self.assertError(answer, status)

    async def test_host_evil_403(self):
        """`Host: evil.example` is 403."""
        await self.assertHostRefused("Host: evil.example")
        await self.assertHostRefused(f"Host: evil.example:{self.app.port}")

    async def test_host_nip_io_403(self):
        """`Host: 127.0.0.1.nip.io` (a name that resolves to loopback) is 403."""
        await self.assertHostRefused(f"Host: 127.0.0.1.nip.io:{self.app.port}")

    async def test_host_localhost_suffix_403(self):
        """`Host: localhost.evil.com` is 403."""
        await self.assertHostRefused(f"Host: localhost.evil.com:{self.app.port}")

    async def test_host_userinfo_trick_403(self):
        """`Host: localhost@evil.example` and `localhost.` are not loopback names."""
        await self.assertHostRefused("Host: localhost@evil.example")
        await self.assertHostRefused("Host: localhost.")

    async def test_host_missing_403(self):
        """A request without Host is refused."""
        answer = await exchange(self.app, head("GET /app.js HTTP/1.1", "Connection: close"))
        self.assertIn(answer.status, (400, 403))
        self.assertError(answer, answer.status)
        self.assertNoLeak(answer, static_text("app.js")[:60])

    async def test_host_empty_403(self):
        """An empty Host is refused."""
        await self.assertHostRefused("Host:")

    async def test_host_malformed_port_403(self):
        """A Host with a port that is not a number (or too large) is refused, never a 500."""
        for value in ("localhost:abc", "localhost:99999", "localhost:-1", "localhost:1:2",
                      "localhost:\xb2", "localhost:" + "9" * 5000, "127.0.0.1: 80"):
            with self.subTest(host=value):
                answer = await exchange(self.app, head("GET /api/projects HTTP/1.1", f"Host: {value}",
                                                       "Connection: close"))
                self.assertError(answer, 403, "host")

    async def test_host_malformed_brackets_403(self):
        """Broken IPv6 brackets are refused."""
        for value in ("[::1", "[::1]x", "[::1]80", "::1]:80", "[::1]:x"):
            with self.subTest(host=value):
                answer = await exchange(self.app, head("GET /api/projects HTTP/1.1", f"Host: {value}",
                                                       "Connection: close"))
                self.assertError(answer, 403, "host")

    async def test_host_duplicate_400(self):
        """Two Host headers are 400 (RFC 9112 section 3.2), whichever comes first."""
        port = self.app.port
        for first, second in ((f"127.0.0.1:{port}", "evil.example"), ("evil.example", f"127.0.0.1:{port}")):
            answer = await exchange(self.app, head("GET /api/projects HTTP/1.1", f"Host: {first}",
                                                   f"Host: {second}", "Connection: close"))
            self.assertError(answer, 400)

    async def test_host_loopback_accepted(self):
        """localhost, 127.0.0.1 and [::1] with the port (and any case) are served."""
        for value in (f"localhost:{self.app.port}", f"127.0.0.1:{self.app.port}", f"[::1]:{self.app.port}",
                      f"LocalHost:{self.app.port}", "localhost", "127.0.0.1"):
            with self.subTest(host=value):
                answer = await request(self.app, "GET", "/api/projects", host=value)
                self.assertEqual(answer.status, 200, answer.body)
                answer = await request(self.app, "GET", "/app.js", host=value)
                self.assertEqual(answer.body, static_text("app.js"))


class HostWithTokenTest(Case):
    settings = {"token": TOKEN}

    async def test_host_other_with_token_served_when_authenticated(self):
        """With a token, another Host name is served once authenticated, and only then."""
        answer = await request(self.app, "GET", "/api/projects", host="totem.example")
        self.assertError(answer, 401, "token")
        answer = await request(self.app, "GET", "/api/projects", host="totem.example", headers=bearer())
        self.assertEqual(answer.status, 200, answer.body)
        answer = await request(self.app, "GET", "/", host="totem.example")
        self.assertEqual(answer.status, 302)
        answer = await request(self.app, "GET", "/login", host="totem.example")
        self.assertEqual(answer.status, 200)

    async def test_host_missing_with_token_refused(self):
        """Even with a token, a request without a Host is refused."""
        answer = await exchange(self.app, head("GET /api/projects HTTP/1.1", f"Authorization: Bearer {TOKEN}",
                                               "Connection: close"))
        self.assertIn(answer.status, (400, 403))
        self.assertError(answer, answer.status)


# -- security headers on every kind of answer -------------------------------------------------

class SecurityHeadersTest(Case):
    settings = {"token": TOKEN}

    async def test_headers_api_answer(self):
        """An API answer carries the security headers."""
        answer = await call(self.app, "account", headers=bearer())
        self.assertEqual(answer.status, 200)
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_headers_404(self):
        """A 404 (API and page) carries the security headers."""
        answer = await call(self.app, "no_such_action", headers=bearer())
        self.assertError(answer, 404, "action")
        self.assertSecurityHeaders(answer.raw_headers)
        answer = await request(self.app, "GET", "/no-such-file.js")
        self.assertError(answer, 404, "path")
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_headers_405(self):
        """A 405 carries the security headers."""
        answer = await call(self.app, "projects_open", headers=bearer(), method="GET")
        self.assertError(answer, 405, "method")
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_headers_400(self):
        """A 400 (malformed request and bad JSON) carries the security headers."""
        answer = await exchange(self.app, b"GARBAGE\r\n\r\n")
        self.assertError(answer, 400)
        self.assertSecurityHeaders(answer.raw_headers)
        answer = await request(self.app, "POST", "/api/projects_open", raw_body=b"", headers=bearer())
        self.assertError(answer, 400, "body")
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_headers_401(self):
        """A 401 carries the security headers."""
        answer = await call(self.app, "projects")
        self.assertError(answer, 401, "token")
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_headers_403(self):
        """A 403 carries the security headers."""
        answer = await call(self.app, "projects_open", {}, headers={"Origin": EVIL_ORIGIN})
        self.assertError(answer, 403, "origin")
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_headers_413(self):
        """A 413 carries the security headers."""
        answer = await exchange(self.app, head("POST /api/projects_open HTTP/1.1", f"Host: 127.0.0.1:{self.app.port}",
                                               f"Content-Length: {20 * 1024 * 1024 + 1}"))
        self.assertError(answer, 413)
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_headers_431(self):
        """A 431 carries the security headers."""
        lines = [f"X-Filler-{n}: x" for n in range(101)]
        answer = await exchange(self.app, head("GET / HTTP/1.1", f"Host: 127.0.0.1:{self.app.port}", *lines))
        self.assertError(answer, 431)
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_headers_static_file(self):
        """A static file carries the security headers."""
        answer = await request(self.app, "GET", "/style.css")
        self.assertEqual(answer.status, 200)
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_static_file_revalidated_by_its_etag(self):
        """A static file has a strong ETag; asked again with it (If-None-Match, or `*`, or the tag
        weak) the answer is a 304 without the body, with the tag and the headers; another tag, or
        the same after the file changed, gets the file again with its new tag."""
        static = tempfile.mkdtemp(prefix="totem-static-")
        self.addCleanup(shutil.rmtree, static, ignore_errors=True)
        with open(os.path.join(static, "app.js"), "w") as handle:
            handle.write("console.log(1);\n")
        self.app.router.static_dir = static
        first = await request(self.app, "GET", "/app.js")
        self.assertEqual(first.status, 200)
        tag = first.header("etag")
        self.assertRegex(tag, r'^"[0-9a-f]{24}"$')
        self.assertEqual(first.header("cache-control"), "no-cache")
        for value in (tag, "*", f"W/{tag}", f'"other", {tag}'):
            again = await request(self.app, "GET", "/app.js", headers={"If-None-Match": value})
            self.assertEqual((again.status, again.body, again.header("etag")), (304, b"", tag), value)
            self.assertIsNone(again.header("content-length"))
            self.assertSecurityHeaders(again.raw_headers)
        other = await request(self.app, "GET", "/app.js", headers={"If-None-Match": '"other"'})
        self.assertEqual((other.status, other.body), (200, b"console.log(1);\n"))
        with open(os.path.join(static, "app.js"), "w") as handle:
            handle.write("console.log(2);\n")
        changed = await request(self.app, "GET", "/app.js", headers={"If-None-Match": tag})
        self.assertEqual((changed.status, changed.body), (200, b"console.log(2);\n"))
        self.assertNotEqual(changed.header("etag"), tag)

    async def test_headers_login_page(self):
        """The login page carries the security headers."""
        answer = await request(self.app, "GET", "/login")
        self.assertEqual(answer.status, 200)
        self.assertEqual(answer.body, static_text("login.html"))
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_headers_redirect(self):
        """A redirect carries the security headers."""
        answer = await request(self.app, "GET", "/")
        self.assertEqual(answer.status, 302)
        self.assertSecurityHeaders(answer.raw_headers)

    async def test_headers_websocket_101(self):
        """The WebSocket 101 handshake carries the security headers."""
        async with await open_ws(self.app, additional_headers=bearer()) as ws:
            self.assertEqual(ws.response.status_code, 101)
            self.assertSecurityHeaders(list(ws.response.headers.raw_items()))

    async def test_headers_options_204(self):
        """An OPTIONS answer carries the security headers."""
        answer = await request(self.app, "OPTIONS", "/api/projects")
        self.assertEqual(answer.status, 204)
        self.assertSecurityHeaders(answer.raw_headers)


# -- static files --------------------------------------------------------------------------------

class StaticCase(PerimeterAssertions, unittest.IsolatedAsyncioTestCase):
    """A server whose static folder is a temporary copy with traps placed around it."""

    settings: dict = {}

    async def asyncSetUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-static-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        site = os.path.join(self.tmp, "site")
        self.static = os.path.join(site, "static")
        shutil.copytree(STATIC_DIR, self.static)
        for path in (os.path.join(site, "config.ini"), os.path.join(self.static, ".gitignore"),
                     os.path.join(self.static, ".env"), os.path.join(self.tmp, "outside.txt")):
            with open(path, "w") as handle:
                handle.write(f"{SECRET_MARKER}\n")
        os.symlink(os.path.join(self.tmp, "outside.txt"), os.path.join(self.static, "outside.txt"))
        os.symlink(site, os.path.join(self.static, "up"))
        os.symlink("/etc", os.path.join(self.static, "etc"))
        raw = {"listen": "127.0.0.1", "port": "0", "data": os.path.join(self.tmp, "data"),
               "token": "none"} | self.settings
        self.app = App(parse_values(raw, self.tmp), static_dir=self.static)
        await self.app.start()

    async def asyncTearDown(self):
        await self.app.stop()

    async def assertNotServed(self, target: str, status: int = 404):
        answer = await exchange(self.app, head(f"GET {target} HTTP/1.1", f"Host: 127.0.0.1:{self.app.port}",
                                               "Connection: close"))
        self.assertError(answer, status)
        self.assertNoLeak(answer, b"root:")
        self.assertSecurityHeaders(answer.raw_headers)


class StaticTraversalTest(StaticCase):
    async def test_static_dotdot_404(self):
        """`/../config.ini` is 404."""
        await self.assertNotServed("/../config.ini")

    async def test_static_encoded_dotdot_404(self):
        """`/%2e%2e/config.ini` is 404."""
        await self.assertNotServed("/%2e%2e/config.ini")

    async def test_static_encoded_dotdot_slash_404(self):
        """`/%2E%2E%2Fconfig.ini` is 404."""
        await self.assertNotServed("/%2E%2E%2Fconfig.ini")

    async def test_static_dotdot_encoded_slash_404(self):
        """`/..%2fconfig.ini` is 404."""
        await self.assertNotServed("/..%2fconfig.ini")

    async def test_static_double_slash_404(self):
        """`//etc/passwd` is 404."""
        await self.assertNotServed("//etc/passwd")

    async def test_static_nested_dotdot_404(self):
        """`/static/../../etc/passwd`, `..` after a file name and a `.` segment are 404."""
        await self.assertNotServed("/static/../../etc/passwd")
        await self.assertNotServed("/app.js/../../config.ini")
        await self.assertNotServed("/./app.js")

    async def test_static_backslash_404(self):
        """Backslashes (raw or encoded) are 404."""
        await self.assertNotServed("/..\\config.ini")
        await self.assertNotServed("/%5c..%5cconfig.ini")
        await self.assertNotServed("/\\etc\\passwd")

    async def test_static_nul_refused(self):
        """An encoded NUL is refused at parsing (400), never served."""
        await self.assertNotServed("/app.js%00.png", 400)
        await self.assertNotServed("/%00../config.ini", 400)

    async def test_static_invalid_utf8_refused(self):
        """A path that is not UTF-8 once decoded is 400."""
        await self.assertNotServed("/%ff%fe.js", 400)

    async def test_static_symlink_outside_404(self):
        """A symlink inside the static folder that points outside it is 404 (file and folder)."""
        await self.assertNotServed("/outside.txt")
        await self.assertNotServed("/up/config.ini")
        await self.assertNotServed("/etc/passwd")

    async def test_static_hidden_404(self):
        """Hidden files like `/.gitignore` and `/.env` are 404."""
        await self.assertNotServed("/.gitignore")
        await self.assertNotServed("/.env")
        await self.assertNotServed("/%2egitignore")

    async def test_static_directory_404(self):
        """A folder is not a file: 404."""
        os.mkdir(os.path.join(self.static, "folder"))
        await self.assertNotServed("/folder")
        await self.assertNotServed("/folder/")

    async def test_static_served_with_type(self):
        """`/`, `/app.js`, `/style.css` are served whole with the right Content-Type."""
        for path, name, kind in (("/", "index.html", "text/html; charset=utf-8"),
                                 ("/app.js", "app.js", "text/javascript; charset=utf-8"),
                                 ("/style.css", "style.css", "text/css; charset=utf-8"),
                                 ("/events.js", "events.js", "text/javascript; charset=utf-8")):
            with self.subTest(path=path):
                answer = await request(self.app, "GET", path)
                self.assertEqual(answer.status, 200)
                self.assertEqual(answer.header("content-type"), kind)
                self.assertEqual(answer.body, static_text(name))
                self.assertSecurityHeaders(answer.raw_headers)

    async def test_static_symlink_inside_served(self):
        """A symlink that stays inside the static folder is served."""
        os.symlink(os.path.join(self.static, "style.css"), os.path.join(self.static, "alias.css"))
        answer = await request(self.app, "GET", "/alias.css")
        self.assertEqual(answer.status, 200)
        self.assertEqual(answer.body, static_text("style.css"))


class StaticWithTokenTest(StaticCase):
    settings = {"token": TOKEN}

    async def test_static_login_served_with_token(self):
        """With a token, `/login` is served as HTML and static assets need no cookie."""
        answer = await request(self.app, "GET", "/login")
        self.assertEqual(answer.status, 200)
        self.assertEqual(answer.header("content-type"), "text/html; charset=utf-8")
        self.assertEqual(answer.body, static_text("login.html"))
        answer = await request(self.app, "GET", "/app.js")
        self.assertEqual(answer.body, static_text("app.js"))

    async def test_static_root_without_cookie_302(self):
        """With a token, `/` and `/index.html` without a cookie redirect to /login; the API is 401."""
        for path in ("/", "/index.html"):
            answer = await request(self.app, "GET", path)
            self.assertEqual(answer.status, 302)
            self.assertEqual(answer.header("location"), "/login")
            self.assertNotIn(b"<html", answer.body)
        self.assertError(await call(self.app, "projects"), 401, "token")

    async def test_static_traversal_with_token_404(self):
        """With a token, traversal is still 404."""
        await self.assertNotServed("/%2e%2e/config.ini")
        await self.assertNotServed("/outside.txt")


# -- limits and HTTP framing ---------------------------------------------------------------------

class LimitsTest(Case):
    settings = {"headtimeout": "1", "bodytimeout": "1"}

    def host(self) -> str:
        return f"Host: 127.0.0.1:{self.app.port}"

    async def test_limit_request_line_414(self):
        """A request line over 8 KB is 414."""
        answer = await exchange(self.app, head(f"GET /{'a' * 9000} HTTP/1.1", self.host()))
        self.assertError(answer, 414)
        answer = await exchange(self.app, ("GET /" + "a" * 9000).encode())  # no line end yet
        self.assertError(answer, 414)

    async def test_limit_headers_size_431(self):
        """Headers over 32 KB are 431."""
        answer = await exchange(self.app, head("GET / HTTP/1.1", self.host(), f"X-Big: {'a' * 33000}"))
        self.assertError(answer, 431)
        answer = await exchange(self.app, head("GET / HTTP/1.1", self.host(),
                                               *(f"X-Part-{n}: {'b' * 4000}" for n in range(9))))
        self.assertError(answer, 431)

    async def test_limit_headers_count_431(self):
        """More than 100 headers is 431; 100 are fine."""
        answer = await exchange(self.app, head("GET /app.js HTTP/1.1", self.host(),
                                               *(f"X-N{n}: 1" for n in range(100))))
        self.assertError(answer, 431)
        answer = await exchange(self.app, head("GET /app.js HTTP/1.1", self.host(),
                                               *(f"X-N{n}: 1" for n in range(99))))
        self.assertEqual(answer.status, 200)

    async def test_limit_body_413_before_body(self):
        """A Content-Length over 20 MB is 413, answered from the head alone."""
        answer = await exchange(self.app, head("POST /api/projects_open HTTP/1.1", self.host(),
                                               f"Content-Length: {20 * 1024 * 1024 + 1}"))
        self.assertError(answer, 413)
        self.assertEqual(answer.header("connection"), "close")

    async def test_limit_body_413_read_by_a_client_that_sends_it_all(self):
        """The 413 of a body over 20 MB reaches a client that sends the whole body before it
        reads (most do): the server reads and drops what follows for a moment instead of
        closing on unread bytes, which resets the connection. The control is reset."""
        sent = head("POST /api/projects_open HTTP/1.1", self.host(), f"Content-Length: {21 * 1024 * 1024}",
                    body=b"x" * (21 * 1024 * 1024))
        self.assertError(await exchange(self.app, sent), 413)
        with mock.patch.object(httpd, "UNREAD_LINGER_BYTES", 0), self.assertRaises(ConnectionError):
            await exchange(self.app, sent)

    async def test_limit_body_huge_content_length_413(self):
        """A Content-Length of thousands of digits is 413, never a dropped connection."""
        answer = await exchange(self.app, head("POST /api/projects_open HTTP/1.1", self.host(),
                                               f"Content-Length: {'9' * 5000}"))
        self.assertError(answer, 413)

    async def test_limit_content_length_malformed_400(self):
        """A Content-Length that is not plain ASCII digits, or given twice differently, is 400."""
        for value in ("-1", "abc", "1.5", "+5", "\xb2", "0x10", " "):
            with self.subTest(value=value):
                answer = await exchange(self.app, head("POST /api/projects_open HTTP/1.1", self.host(),
                                                       f"Content-Length: {value}", body=b"xx"))
                self.assertError(answer, 400)
        answer = await exchange(self.app, head("POST /api/projects_open HTTP/1.1", self.host(),
                                               "Content-Length: 2", "Content-Length: 3", body=b"{}x"))
        self.assertError(answer, 400)

    async def test_limit_chunked_411(self):
        """Transfer-Encoding: chunked is 411."""
        answer = await exchange(self.app, head("POST /api/projects_open HTTP/1.1", self.host(),
                                               "Transfer-Encoding: chunked", body=b"2\r\n{}\r\n0\r\n\r\n"))
        self.assertError(answer, 411)

    async def test_limit_request_line_malformed_400(self):
        """A malformed request line is 400."""
        for line in ("GET /", "GET  / HTTP/1.1", "GET / HTTP/1.1 extra", "GET http://evil.example/ HTTP/1.1",
                     "G(T / HTTP/1.1", "GET / FTP/1.1", " / HTTP/1.1"):
            with self.subTest(line=line):
                answer = await exchange(self.app, head(line, self.host()))
                self.assertError(answer, 400)

    async def test_limit_header_malformed_400(self):
        """Malformed header lines (no colon, space in the name, folding, control characters) are 400."""
        for line in ("NoColonHere", "Bad Name: x", "X-Name : x", " X-Folded: x", ": empty-name",
                     "X-Ctl: a\x01b", "X-Del: a\x7fb", "X-Lf: a\nb"):
            with self.subTest(line=line):
                answer = await exchange(self.app, head("GET /app.js HTTP/1.1", self.host(), line))
                self.assertError(answer, 400)

    async def test_limit_http2_505(self):
        """HTTP/2.0 (and other versions) is 505."""
        for version in ("HTTP/2.0", "HTTP/1.2", "HTTP/0.9"):
            with self.subTest(version=version):
                answer = await exchange(self.app, head(f"GET / {version}", self.host()))
                self.assertError(answer, 505)

    async def test_limit_slow_head_408(self):
        """A client that sends half a head and stalls gets 408 after headtimeout."""
        started = time.monotonic()
        answer = await exchange(self.app, f"GET /api/projects HTTP/1.1\r\n{self.host()}\r\n".encode())
        self.assertError(answer, 408)
        self.assertSecurityHeaders(answer.raw_headers)
        self.assertGreaterEqual(time.monotonic() - started, 0.9)

    async def test_limit_slow_body_408(self):
        """A body that stalls gets 408 after bodytimeout, and nothing is created."""
        started = time.monotonic()
        answer = await exchange(self.app, head("POST /api/projects_open HTTP/1.1", self.host(),
                                               "Content-Type: application/json", "Content-Length: 100",
                                               body=b'{"path": '))
        self.assertError(answer, 408)
        self.assertGreaterEqual(time.monotonic() - started, 0.9)
        self.assertEqual(await self.project_ids(), [])

    async def test_limit_keepalive_two_requests(self):
        """Two requests on one connection are both answered, one after the other and pipelined."""
        async with connection(self.app) as (reader, writer):
            one = head("GET /api/projects HTTP/1.1", self.host())
            two = head("GET /app.js HTTP/1.1", self.host())
            for data in (one, two):
                writer.write(data)
                answer = await asyncio.wait_for(read_answer(reader), ANSWER_MS * MS)
                self.assertEqual(answer.status, 200)
                self.assertEqual(answer.header("connection"), "keep-alive")
            writer.write(one + two)
            first = await asyncio.wait_for(read_answer(reader), ANSWER_MS * MS)
            second = await asyncio.wait_for(read_answer(reader), ANSWER_MS * MS)
            self.assertEqual(first.json(), [])
            self.assertEqual(second.body, static_text("app.js"))

    async def test_limit_keepalive_post_bodies(self):
        """POST bodies on one keep-alive connection are framed by Content-Length."""
        async with connection(self.app) as (reader, writer):
            for name in ("a", "b"):
                body = json.dumps({"path": self.folder(name)}).encode()
                writer.write(head("POST /api/projects_open HTTP/1.1", self.host(),
                                  "Content-Type: application/json", f"Content-Length: {len(body)}", body=body))
                answer = await asyncio.wait_for(read_answer(reader), ANSWER_MS * MS)
                self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(len(await self.project_ids()), 2)

    async def test_limit_connection_close_honoured(self):
        """`Connection: close` is answered with Connection: close and the server closes."""
        async with connection(self.app) as (reader, writer):
            writer.write(head("GET /api/projects HTTP/1.1", self.host(), "Connection: close"))
            answer = await asyncio.wait_for(read_answer(reader), ANSWER_MS * MS)
            self.assertEqual(answer.status, 200)
            self.assertEqual(answer.header("connection"), "close")
            self.assertEqual(await asyncio.wait_for(reader.read(), ANSWER_MS * MS), b"")

    async def test_limit_http10_closes(self):
        """An HTTP/1.0 request without keep-alive is answered and closed."""
        async with connection(self.app) as (reader, writer):
            writer.write(head("GET /api/projects HTTP/1.0", self.host()))
            answer = await asyncio.wait_for(read_answer(reader), ANSWER_MS * MS)
            self.assertEqual(answer.status, 200)
            self.assertEqual(answer.header("connection"), "close")
            self.assertEqual(await asyncio.wait_for(reader.read(), ANSWER_MS * MS), b"")

    async def test_limit_head_no_body(self):
        """HEAD answers the headers (with the Content-Length of GET) and no body."""
        async with connection(self.app) as (reader, writer):
            writer.write(head("HEAD /app.js HTTP/1.1", self.host()))
            answer = await asyncio.wait_for(read_answer(reader, head_only=True), ANSWER_MS * MS)
            self.assertEqual(answer.status, 200)
            self.assertEqual(int(answer.header("content-length")), len(static_text("app.js")))
            self.assertEqual(answer.header("content-type"), "text/javascript; charset=utf-8")
            self.assertSecurityHeaders(answer.raw_headers)
            # The next answer starts right away: no body bytes were sent for HEAD.
            writer.write(head("HEAD /api/projects HTTP/1.1", self.host(), "Connection: close"))
            answer = await asyncio.wait_for(read_answer(reader, head_only=True), ANSWER_MS * MS)
            self.assertEqual(answer.status, 200)
            self.assertEqual(answer.header("content-length"), "2")
            self.assertEqual(await asyncio.wait_for(reader.read(), ANSWER_MS * MS), b"")

    async def test_limit_options_204_allow(self):
        """OPTIONS answers 204 with Allow (and no Content-Length, RFC 9110 section 8.6)."""
        for path, allow in (("/api/projects_open", "POST, OPTIONS"), ("/api/projects", "GET, HEAD, POST, OPTIONS"),
                            ("/", "GET, HEAD, OPTIONS")):
            with self.subTest(path=path):
                answer = await request(self.app, "OPTIONS", path)
                self.assertEqual(answer.status, 204)
                self.assertEqual(answer.header("allow"), allow)
                self.assertEqual(answer.body, b"")
                self.assertIsNone(answer.header("content-length"))

    async def test_limit_get_change_action_405(self):
        """A GET (or HEAD) to an action that changes state is 405 with Allow: POST, and changes nothing."""
        for method in ("GET", "HEAD"):
            answer = await request(self.app, method, "/api/projects_open?path=" + self.folder("p"))
            self.assertEqual(answer.status, 405)
            self.assertEqual(answer.header("allow"), "POST, OPTIONS")
            if method == "GET":
                self.assertError(answer, 405, "method")
        self.assertEqual(await self.project_ids(), [])

    async def test_limit_post_page_405(self):
        """A POST to a page is 405 with Allow."""
        answer = await request(self.app, "POST", "/")
        self.assertError(answer, 405, "method")
        self.assertEqual(answer.header("allow"), "GET, HEAD, OPTIONS")


# -- bad input -----------------------------------------------------------------------------------

class BadInputTest(Case):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.project = await self.open_project("existing")
        self.session = await self.create_session(self.project["id"], "kept")

    async def snapshot(self):
        projects = (await call(self.app, "projects")).json()
        sessions = (await call(self.app, "sessions", query=f"projectid={self.project['id']}")).json()
        return projects, sessions

    async def assertRefused(self, name: str, raw: bytes, *fields: str, ident: str | None = None):
        before = await self.snapshot()
        path = f"/api/{name}" + (f"/{ident}" if ident else "")
        answer = await request(self.app, "POST", path, raw_body=raw)
        body = self.assertError(answer, 400, *fields)
        self.assertEqual(await self.snapshot(), before)
        return body

    async def test_input_malformed_json_400(self):
        """Malformed JSON is 400 on `body`, and nothing changes."""
        for raw in (b"{", b'{"path": }', b"{'path': '/tmp'}", b'{"path": "/tmp"} trailing', b"nul"):
            with self.subTest(raw=raw):
                await self.assertRefused("projects_open", raw, "body")

    async def test_input_empty_body_400(self):
        """An empty body where an object is needed is 400."""
        await self.assertRefused("projects_open", b"", "body")

    async def test_input_array_400(self):
        """A JSON array (or string, number, null) instead of an object is 400."""
        for raw in (b"[]", b'[{"path": "/tmp"}]', b'"text"', b"5", b"null", b"true"):
            with self.subTest(raw=raw):
                await self.assertRefused("projects_open", raw, "body")

    async def test_input_wrong_types_400(self):
        """Fields of the wrong type are 400 naming each field."""
        for value in (5, True, ["/tmp"], {"a": 1}, 1.5):
            with self.subTest(value=value):
                await self.assertRefused("projects_open", json.dumps({"path": value}).encode(), "path")
        raw = json.dumps({"projectid": self.project["id"], "name": 7}).encode()
        await self.assertRefused("sessions_create", raw, "name")

    async def test_input_missing_fields_400(self):
        """A missing (or null) required field is 400 naming it."""
        await self.assertRefused("projects_open", b"{}", "path")
        await self.assertRefused("projects_open", b'{"path": null}', "path")
        await self.assertRefused("sessions_create", b'{"name": "x"}', "projectid")
        await self.assertRefused("sessions_update", b"{}", "name", ident=self.session["id"])

    async def test_input_unknown_fields_400(self):
        """An unknown field is 400 naming it, even next to valid ones."""
        raw = json.dumps({"path": self.folder("new"), "admin": True}).encode()
        await self.assertRefused("projects_open", raw, "admin")
        raw = json.dumps({"projectid": self.project["id"], "__proto__": {}}).encode()
        await self.assertRefused("sessions_create", raw, "__proto__")

    async def test_input_oversized_fields_400(self):
        """Oversized fields are 400 naming them."""
        raw = json.dumps({"path": "/" + "a" * 5000}).encode()
        await self.assertRefused("projects_open", raw, "path")
        raw = json.dumps({"projectid": self.project["id"], "name": "n" * 201}).encode()
        await self.assertRefused("sessions_create", raw, "name")
        raw = json.dumps({"projectid": "p" * 65}).encode()
        await self.assertRefused("sessions_create", raw, "projectid")

    async def test_input_every_problem_listed_400(self):
        """Validation lists every problem at once."""
        raw = json.dumps({"projectid": 5, "name": "", "extra": 1}).encode()
        body = await self.assertRefused("sessions_create", raw)
        self.assertEqual(sorted(item["name"] for item in body), ["extra", "name", "projectid"])

    async def test_input_huge_integer_400(self):
        """A number of thousands of digits is 400, never a 500."""
        body = await self.assertRefused("projects_open", b'{"path": ' + b"1" * 5000 + b"}", "body")
        self.assertEqual(body[0]["error"], "malformed JSON: a number too long")

    async def test_input_deep_nesting_400(self):
        """Deeply nested JSON is 400, never a 500."""
        body = await self.assertRefused("projects_open", b"[" * 200_000 + b"]" * 200_000, "body")
        self.assertEqual(body[0]["error"], "malformed JSON: nested too deeply")
        await self.assertRefused("projects_open", b'{"path": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")

    async def test_input_not_utf8_400(self):
        """A body that is not UTF-8 is 400."""
        body = await self.assertRefused("projects_open", b'{"path": "\xff\xfe"}', "body")
        self.assertEqual(body[0]["error"], "malformed JSON: not UTF-8")

    async def test_input_nul_in_text_400(self):
        """A NUL character inside a text field is 400."""
        raw = json.dumps({"projectid": self.project["id"], "name": "a\x00b"}).encode()
        await self.assertRefused("sessions_create", raw, "name")

    async def test_input_relative_path_400(self):
        """A relative or missing folder is 400 naming `path`."""
        for path in ("relative/folder", "../../etc", os.path.join(self.tmp, "missing")):
            with self.subTest(path=path):
                await self.assertRefused("projects_open", json.dumps({"path": path}).encode(), "path")

    async def test_input_unknown_query_400(self):
        """An unknown query field is 400; a query without its required field is 400."""
        answer = await request(self.app, "GET", "/api/projects?admin=1")
        self.assertError(answer, 400, "admin")
        answer = await request(self.app, "GET", "/api/sessions")
        self.assertError(answer, 400, "projectid")
        answer = await request(self.app, "GET", "/api/projects?" + "&".join(f"k{n}=1" for n in range(101)))
        self.assertError(answer, 400)

    async def test_input_unknown_ids_404(self):
        """Unknown or malformed ids are 404 in the error shape, and nothing changes."""
        before = await self.snapshot()
        for path in ("/api/sessions_remove/nope", "/api/projects_remove/" + "x" * 65,
                     "/api/sessions_remove/a%2Fb", "/api/projects_remove"):
            with self.subTest(path=path):
                answer = await request(self.app, "POST", path, raw_body=b"")
                self.assertError(answer, 404)
        self.assertEqual(await self.snapshot(), before)

    async def test_input_non_utf8_file_name_listed(self):
        """A file whose name is not UTF-8 is listed (escaped), never a 500."""
        folder = os.fsencode(self.folder("existing"))
        with open(folder + b"/bad-\xff.txt", "w"):
            pass
        answer = await call(self.app, "projects_files", ident=self.project["id"])
        self.assertEqual(answer.status, 200, answer.body)
        names = [item["name"] for item in answer.json()["items"]]
        self.assertEqual(names, ["bad-\udcff.txt"])
        self.assertEqual(os.fsencode(names[0]), b"bad-\xff.txt")
