"""The strict HTTP rules of the perimeter: an Origin is scheme, host and port; a request body is
declared application/json; a JSON object names each key once. Pure tables for the parsers, then
the real server on a loopback port, every failure path with its exact status and error shape."""

from __future__ import annotations

import asyncio
import email.utils
import os
import time

import pytest
from websockets.exceptions import InvalidStatus

from tests.test_perimeter import ANSWER_MS, EVIL_ORIGIN, Case, bearer, connection, exchange, head, origin_of
from tests.utils import MS, TOKEN, call, open_ws, read_answer, request
from totem.app import STATIC_DIR
from totem.errors import BadRequest, UnsupportedMediaType
from totem.http.auth import parse_origin
from totem.http.httpd import Request, check_json_type, http_date
from totem.http.routes import action_table

# The `+` actions that take a JSON body; the table test below fails when one is missing here.
BODY_ACTIONS = frozenset((
    "login", "projects_open", "sessions_create", "sessions_update", "sessions_prompt",
    "sessions_jobstop", "questions_reply", "providers_save", "providers_available",
    "permissions_save", "permissions_reply", "sessions_undo", "sessions_redo", "sessions_fork",
    "sessions_saveas", "sessions_terminal", "sessions_terminalinput", "sessions_terminalresize",
    "schedules_save", "settings_save", "sessions_unqueue", "mcptokens_create", "sessions_import"))
# The actions above whose id must name an existing session for the handler to reach the body.
SESSION_ID_ACTIONS = frozenset(("sessions_update", "sessions_prompt", "sessions_jobstop", "sessions_undo",
                                "sessions_redo", "sessions_fork", "sessions_saveas", "sessions_terminal",
                                "sessions_terminalinput", "sessions_terminalresize", "sessions_unqueue"))
REFUSED_TYPES = ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=x", "application/jsonx", "application/json-patch+json",
                 "text/json", "application", "", ";charset=utf-8", "application/json, text/plain")
ACCEPTED_TYPES = ("application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
                  "Application/Json ;Charset=UTF-8", "application/json;", "application/json; x=\"a;b\"")
WS_HANDSHAKE = ("Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")


# -- pure tables ---------------------------------------------------------------------------------

@pytest.mark.parametrize("when", [0, 1, 59, 86_399, 951_782_400, 951_868_799, 1_709_164_800, 1_735_689_599,
                                  1_735_689_600, 1_700_000_000.75, 4_102_444_799])
def test_the_date_header_is_the_imf_fixdate(when):
    """Every answer's Date is RFC 9110's IMF-fixdate, as email.utils writes it: leap days, the
    ends of years, a fraction of a second; and now, when no time is given."""
    assert http_date(when) == email.utils.formatdate(when, usegmt=True)
    before = time.time()
    now = http_date()
    # Whole seconds: formatdate rounds a fraction to the nearest microsecond (12.9999996 is 13),
    # where the header, as gmtime, drops it.
    assert now in {email.utils.formatdate(int(moment), usegmt=True) for moment in (before, time.time())}


@pytest.mark.parametrize("value, expected", [
    ("http://127.0.0.1:8470", ("http", "127.0.0.1", 8470)),
    ("http://localhost", ("http", "localhost", 80)),
    ("http://localhost:80", ("http", "localhost", 80)),
    ("https://totem.example", ("https", "totem.example", 443)),
    ("https://totem.example:443", ("https", "totem.example", 443)),
    ("https://totem.example:80", ("https", "totem.example", 80)),
    ("http://[::1]:8470", ("http", "::1", 8470)),
    ("HTTP://LocalHost:8470", ("http", "localhost", 8470)),
    ("http://127.0.0.1:0", ("http", "127.0.0.1", 0)),
    ("null", None), ("", None), ("garbage", None), ("ws://127.0.0.1:8470", None),
    ("file://127.0.0.1", None), ("http://[::1", None), ("http://127.0.0.1:99999", None),
    ("http://127.0.0.1:80x", None), ("http://127.0.0.1:+80", None), ("http://:80", None),
    ("http://user@127.0.0.1:8470", None), ("http://@127.0.0.1:8470", None),
    ("http://127.0.0.1:8470/", None), ("http://127.0.0.1:8470/path", None),
    ("http://127.0.0.1:8470?q", None), ("http://127.0.0.1:8470#f", None),
])
def test_parse_origin_table(value, expected):
    """An Origin is scheme://host[:port] of http or https, the port filled in from the scheme."""
    assert parse_origin(value) == expected


@pytest.mark.parametrize("value", ACCEPTED_TYPES)
def test_json_type_accepted(value):
    """application/json passes in any case and with any parameters."""
    check_json_type([("content-type", value)])


@pytest.mark.parametrize("headers", [[]] + [[("content-type", value)] for value in REFUSED_TYPES] + [
    [("content-type", "application/json"), ("content-type", "application/json")],
    [("content-type", "application/json"), ("content-type", "text/plain")],
])
def test_json_type_refused(headers):
    """A missing, other or repeated Content-Type raises UnsupportedMediaType (415) on `content-type`."""
    with pytest.raises(UnsupportedMediaType) as caught:
        check_json_type(headers)
    assert caught.value.status == 415
    assert [name for name, _ in caught.value.errors] == ["content-type"]


def _json_request(body: bytes) -> Request:
    request = Request("POST", "/api/x", "/api/x", {}, [("content-type", "application/json")], "127.0.0.1",
                      "HTTP/1.1", content_length=len(body))
    request._body = body
    return request


@pytest.mark.parametrize("body, error", [
    (b'{"a": 1, "a": 2}', 'duplicate key "a"'),
    (b'{"x": {"b": 1, "b": 2}}', 'duplicate key "b"'),
    (b'[[{"k": {"d": 1, "d": 1}}]]', 'duplicate key "d"'),
    (b'{"": 1, "": 1}', 'duplicate key ""'),
    (b'{"\\u00e9": 1, "\\u00e9": 2}', 'duplicate key "\\u00e9"'),
    (b'{"\\ud800": 1, "\\ud800": 2}', 'duplicate key "\\ud800"'),
    (b'{"a\\u0000": 1, "a\\u0000": 2}', 'duplicate key "a\\u0000"'),
    (('{"%s": 1, "%s": 2}' % ("k" * 500, "k" * 500)).encode(), 'duplicate key "' + "k" * 79 + "..."),
])
def test_json_duplicate_key_refused(body, error):
    """A key given twice in any object, at any depth, is a 400 on `body` that names it (shortened)."""
    with pytest.raises(BadRequest) as caught:
        asyncio.run(_json_request(body).json())
    assert caught.value.errors == [("body", error)]


def test_json_same_key_in_sibling_objects_accepted():
    """The same key in two different objects is not a duplicate."""
    body = b'{"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 3}, {"k": 4}]}'
    assert asyncio.run(_json_request(body).json()) == {"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 3}, {"k": 4}]}


def test_browser_sends_json_type():
    """The UI's fetch wrapper and the login page declare their bodies as application/json."""
    for name in ("api.js", "login.js"):
        with open(os.path.join(STATIC_DIR, name), encoding="utf-8") as handle:
            text = handle.read()
        assert "headers: { 'Content-Type': 'application/json' }" in text, name


# -- Origin: scheme, host and port ---------------------------------------------------------------

class OriginSchemePortTest(Case):
    """Totem itself speaks http: an https page, or a page on another port, is another origin."""

    async def post_open(self, origin: str, host: str | None = None, name: str = "p"):
        return await request(self.app, "POST", "/api/projects_open", {"path": self.folder(name)},
                             headers={"Origin": origin}, host=host)

    async def handshake(self, origin: str, host: str):
        return await exchange(self.app, head("GET /ws/ HTTP/1.1", f"Host: {host}", f"Origin: {origin}",
                                             *WS_HANDSHAKE))

    async def test_origin_https_on_http_server_post_403(self):
        """An https Origin with the same host and port is another origin: 403, nothing created."""
        answer = await self.post_open(f"https://127.0.0.1:{self.app.port}")
        self.assertError(answer, 403, "origin")
        self.assertSecurityHeaders(answer.raw_headers)
        self.assertEqual(await self.project_ids(), [])

    async def test_origin_other_port_post_403(self):
        """http://127.0.0.1:9999 on a server at another port is another origin."""
        port = 9999 if self.app.port != 9999 else 9998
        answer = await self.post_open(f"http://127.0.0.1:{port}")
        self.assertError(answer, 403, "origin")
        self.assertEqual(await self.project_ids(), [])

    async def test_origin_default_port_equals_absent_post_200(self):
        """Port 80 of an http Origin equals an absent port, on either side."""
        for number, (origin, host) in enumerate((("http://127.0.0.1:80", "127.0.0.1"),
                                                 ("http://127.0.0.1", "127.0.0.1:80"),
                                                 ("http://localhost:80", "localhost:80"),
                                                 ("http://localhost", "localhost"))):
            with self.subTest(origin=origin, host=host):
                answer = await self.post_open(origin, host, name=f"p{number}")
                self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(len(await self.project_ids()), 4)

    async def test_origin_default_port_of_other_scheme_post_403(self):
        """443 is the default of https only: https on 443 (or on 80) is not this http server."""
        for origin, host in (("https://127.0.0.1", "127.0.0.1:443"), ("https://127.0.0.1", "127.0.0.1"),
                             ("https://127.0.0.1:80", "127.0.0.1"), ("http://127.0.0.1", "127.0.0.1:443"),
                             ("http://127.0.0.1:443", "127.0.0.1")):
            with self.subTest(origin=origin, host=host):
                self.assertError(await self.post_open(origin, host), 403, "origin")
        self.assertEqual(await self.project_ids(), [])

    async def test_origin_not_a_bare_origin_post_403(self):
        """User info, a path, a query or a fragment is never a browser's Origin: 403."""
        port = self.app.port
        for origin in (f"http://evil.example@127.0.0.1:{port}", f"http://127.0.0.1:{port}/",
                       f"http://127.0.0.1:{port}/api", f"http://127.0.0.1:{port}?x=1",
                       f"http://127.0.0.1:{port}#x", "null"):
            with self.subTest(origin=origin):
                self.assertError(await self.post_open(origin), 403, "origin")
        self.assertEqual(await self.project_ids(), [])

    async def test_origin_twice_post_403(self):
        """Two Origin headers are refused, even when the first one is this origin."""
        port = self.app.port
        for first, second in ((origin_of(self.app), EVIL_ORIGIN), (origin_of(self.app), origin_of(self.app))):
            with self.subTest(first=first, second=second):
                answer = await exchange(self.app, head(
                    "POST /api/projects_open HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Origin: {first}",
                    f"Origin: {second}", "Content-Type: application/json", "Content-Length: 2",
                    "Connection: close", body=b"{}"))
                self.assertError(answer, 403, "origin")

    async def test_websocket_https_origin_403(self):
        """A WebSocket from the https page of the same host and port is refused with 403."""
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app, origin=f"https://127.0.0.1:{self.app.port}")
        self.assertEqual(caught.exception.response.status_code, 403)
        self.assertEqual(self.app.hub.connection_count, 0)

    async def test_websocket_other_port_403(self):
        """A WebSocket from another port of the same host is refused with 403."""
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app, origin="http://127.0.0.1:1")
        self.assertEqual(caught.exception.response.status_code, 403)

    async def test_websocket_default_port_101(self):
        """The WebSocket treats port 80 of an http Origin as an absent port, on either side."""
        for origin, host in (("http://127.0.0.1:80", "127.0.0.1"), ("http://127.0.0.1", "127.0.0.1:80")):
            with self.subTest(origin=origin, host=host):
                answer = await self.handshake(origin, host)
                self.assertEqual(answer.status, 101)

    async def test_websocket_default_port_of_other_scheme_403(self):
        """The WebSocket refuses https on its default port and http on 443."""
        for origin, host in (("https://127.0.0.1", "127.0.0.1:443"), ("https://127.0.0.1", "127.0.0.1"),
                             ("http://127.0.0.1", "127.0.0.1:443"), ("http://evil@127.0.0.1", "127.0.0.1")):
            with self.subTest(origin=origin, host=host):
                self.assertError(await self.handshake(origin, host), 403, "origin")
        self.assertEqual(self.app.hub.connection_count, 0)


class OriginForwardedProtoTest(Case):
    """Behind the trusted proxy, x-forwarded-proto and x-forwarded-host are the origin asked for."""

    settings = {"proxy": "127.0.0.1"}

    def forwarded(self, origin: str, proto: str | None) -> dict:
        return {"X-Forwarded-Host": "localhost", "Origin": origin} | (
            {"X-Forwarded-Proto": proto} if proto is not None else {})

    async def test_forwarded_proto_https_post_200(self):
        """x-forwarded-proto https with the forwarded host: the https Origin (port 443 or none) is this one."""
        for number, origin in enumerate(("https://localhost", "https://localhost:443")):
            with self.subTest(origin=origin):
                answer = await call(self.app, "projects_open", {"path": self.folder(f"p{number}")},
                                    headers=self.forwarded(origin, "HTTPS, http"))
                self.assertEqual(answer.status, 200, answer.body)

    async def test_forwarded_proto_scheme_mismatch_post_403(self):
        """The forwarded scheme decides: http Origin on https, https Origin on http or on no proto."""
        for origin, proto in (("http://localhost", "https"), ("https://localhost", "http"),
                              ("https://localhost", None), ("https://localhost", "ftp"),
                              ("http://localhost:443", "https")):
            with self.subTest(origin=origin, proto=proto):
                answer = await call(self.app, "projects_open", {"path": self.folder("p")},
                                    headers=self.forwarded(origin, proto))
                self.assertError(answer, 403, "origin")
        self.assertEqual(await self.project_ids(), [])

    async def test_forwarded_proto_unknown_is_http_post_200(self):
        """An x-forwarded-proto other than http or https is ignored: the scheme stays http."""
        answer = await call(self.app, "projects_open", {"path": self.folder("p")},
                            headers=self.forwarded("http://localhost", "ftp"))
        self.assertEqual(answer.status, 200, answer.body)

    async def test_websocket_forwarded_proto(self):
        """The WebSocket follows the forwarded scheme too: https page accepted, http page refused."""
        headers = {"X-Forwarded-Host": "localhost", "X-Forwarded-Proto": "https"}
        async with await open_ws(self.app, origin="https://localhost", additional_headers=headers) as ws:
            self.assertEqual(ws.response.status_code, 101)
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app, origin="http://localhost", additional_headers=headers)
        self.assertEqual(caught.exception.response.status_code, 403)


class OriginForwardedProtoOtherPeerTest(Case):
    settings = {"proxy": "10.9.9.9"}

    async def test_forwarded_proto_ignored_from_other_peer_403(self):
        """x-forwarded-proto from a peer that is not the proxy cannot make an https Origin match."""
        headers = {"X-Forwarded-Proto": "https", "Origin": f"https://127.0.0.1:{self.app.port}"}
        answer = await call(self.app, "projects_open", {"path": self.folder("p")}, headers=headers)
        self.assertError(answer, 403, "origin")
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app, origin=f"https://127.0.0.1:{self.app.port}",
                          additional_headers={"X-Forwarded-Proto": "https"})
        self.assertEqual(caught.exception.response.status_code, 403)
        self.assertEqual(await self.project_ids(), [])


class OriginCookieSecureTest(Case):
    """With cookiesecure Totem is served over HTTPS: the public scheme is https."""

    settings = {"token": TOKEN, "cookiesecure": "true"}

    async def test_cookiesecure_https_origin_200(self):
        """The https Origin of the requested host and port is this origin."""
        answer = await call(self.app, "projects_open", {"path": self.folder("p")},
                            headers=bearer() | {"Origin": f"https://127.0.0.1:{self.app.port}"})
        self.assertEqual(answer.status, 200, answer.body)
        async with await open_ws(self.app, origin=f"https://127.0.0.1:{self.app.port}",
                                 additional_headers=bearer()) as ws:
            self.assertEqual(ws.response.status_code, 101)

    async def test_cookiesecure_http_origin_403(self):
        """The http page of the same host and port is another origin, for changes and the WebSocket."""
        answer = await call(self.app, "projects_open", {"path": self.folder("p")},
                            headers=bearer() | {"Origin": origin_of(self.app)})
        self.assertError(answer, 403, "origin")
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app, origin=origin_of(self.app), additional_headers=bearer())
        self.assertEqual(caught.exception.response.status_code, 403)
        self.assertEqual(await self.project_ids(), [])


class OriginCookieSecureProxyTest(Case):
    settings = {"token": TOKEN, "cookiesecure": "true", "proxy": "127.0.0.1"}

    async def test_cookiesecure_behind_proxy_without_proto_https(self):
        """Behind the proxy without x-forwarded-proto, cookiesecure makes the public scheme https."""
        headers = bearer() | {"X-Forwarded-Host": "totem.example"}
        answer = await call(self.app, "projects_open", {"path": self.folder("a")},
                            headers=headers | {"Origin": "https://totem.example"})
        self.assertEqual(answer.status, 200, answer.body)
        answer = await call(self.app, "projects_open", {"path": self.folder("b")},
                            headers=headers | {"Origin": "http://totem.example"})
        self.assertError(answer, 403, "origin")
        self.assertEqual(len(await self.project_ids()), 1)


# -- bodies: application/json, each key once ----------------------------------------------------

class JsonBodyCase(Case):
    """A project to change, and a snapshot of everything an action could store."""

    async def asyncSetUp(self):
        await super().asyncSetUp()
        answer = await call(self.app, "projects_open", {"path": self.folder("existing")}, headers=self.auth())
        self.assertEqual(answer.status, 200, answer.body)
        self.project = answer.json()

    async def snapshot(self):
        projects = (await call(self.app, "projects", headers=self.auth())).json()
        sessions = (await call(self.app, "sessions", query=f"projectid={self.project['id']}",
                               headers=self.auth())).json()
        providers = (await call(self.app, "providers", headers=self.auth())).json()
        rules = (await call(self.app, "permissions", query=f"projectid={self.project['id']}",
                            headers=self.auth())).json()
        return projects, sessions, providers, rules

    async def post(self, name: str, raw: bytes, content_type: str | None = "application/json",
                   ident: str | None = None, headers: dict | None = None):
        path = f"/api/{name}" + (f"/{ident}" if ident else "")
        return await request(self.app, "POST", path, raw_body=raw, content_type=content_type,
                             headers=self.auth() | (headers or {}))

    async def assertRefused(self, status: int, name: str, raw: bytes, field: str, **kwargs):
        before = await self.snapshot()
        answer = await self.post(name, raw, **kwargs)
        body = self.assertError(answer, status, field)
        self.assertSecurityHeaders(answer.raw_headers)
        self.assertEqual(await self.snapshot(), before)
        return body


class JsonBodyTest(JsonBodyCase):
    async def test_duplicate_key_top_level_400(self):
        """`{"path": A, "path": B}` is 400 on `body` and opens no project."""
        raw = ('{"path": "%s", "path": "%s"}' % (self.folder("a"), self.folder("b"))).encode()
        body = await self.assertRefused(400, "projects_open", raw, "body")
        self.assertEqual(body[0]["error"], 'duplicate key "path"')

    async def test_duplicate_key_nested_400(self):
        """A duplicate key deep inside a value is 400 on `body` (not a field error), nothing stored."""
        pid = self.project["id"]
        for raw in (b'{"projectid": "%s", "name": {"b": 1, "b": 2}}' % pid.encode(),
                    b'{"projectid": "%s", "x": [[{"k": {"d": 1, "d": 1}}]]}' % pid.encode()):
            with self.subTest(raw=raw):
                await self.assertRefused(400, "sessions_create", raw, "body")

    async def test_duplicate_key_same_value_400(self):
        """A key given twice is refused even when both values agree."""
        raw = b'{"projectid": "%s", "projectid": "%s"}' % ((self.project["id"].encode(),) * 2)
        await self.assertRefused(400, "sessions_create", raw, "body")

    async def test_same_key_in_sibling_objects_200(self):
        """Keys may repeat across different objects: only one object's own keys must differ."""
        raw = b'{"projectid": "%s", "name": "n"}' % self.project["id"].encode()
        answer = await self.post("sessions_create", raw)
        self.assertEqual(answer.status, 200, answer.body)

    async def test_content_type_refused_415(self):
        """text/plain, a form, application/jsonx and the like are 415 on `content-type`, nothing opened."""
        raw = ('{"path": "%s"}' % self.folder("new")).encode()
        for value in REFUSED_TYPES:
            with self.subTest(content_type=value):
                await self.assertRefused(415, "projects_open", raw, "content-type", content_type=value)

    async def test_content_type_missing_415(self):
        """A JSON body without a Content-Type is 415, and so is an empty body without one."""
        await self.assertRefused(415, "projects_open", ('{"path": "%s"}' % self.folder("new")).encode(),
                                 "content-type", content_type=None)
        await self.assertRefused(415, "projects_open", b"", "content-type", content_type=None)
        answer = await request(self.app, "POST", "/api/projects_open", headers=self.auth())
        self.assertError(answer, 415, "content-type")

    async def test_content_type_repeated_415(self):
        """Two Content-Type headers are 415, even when both say application/json."""
        raw = ('{"path": "%s"}' % self.folder("new")).encode()
        for second in ("application/json", "text/plain"):
            with self.subTest(second=second):
                answer = await exchange(self.app, head(
                    "POST /api/projects_open HTTP/1.1", f"Host: 127.0.0.1:{self.app.port}",
                    "Content-Type: application/json", f"Content-Type: {second}",
                    f"Content-Length: {len(raw)}", "Connection: close", body=raw))
                self.assertError(answer, 415, "content-type")
        self.assertEqual(len(await self.project_ids()), 1)

    async def test_content_type_accepted_200(self):
        """application/json with parameters and in any case opens the project."""
        for number, value in enumerate(ACCEPTED_TYPES):
            with self.subTest(content_type=value):
                raw = ('{"path": "%s"}' % self.folder(f"p{number}")).encode()
                answer = await self.post("projects_open", raw, content_type=value)
                self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(len(await self.project_ids()), 1 + len(ACCEPTED_TYPES))

    async def test_content_type_json_empty_body_400(self):
        """An empty body declared application/json is still 400 on `body`."""
        await self.assertRefused(400, "projects_open", b"", "body")

    async def test_content_type_checked_before_body_read_415(self):
        """The 415 comes from the head alone: no waiting for a body that is never sent."""
        answer = await exchange(self.app, head(
            "POST /api/projects_open HTTP/1.1", f"Host: 127.0.0.1:{self.app.port}", "Content-Type: text/plain",
            "Content-Length: 100"), timeout_ms=ANSWER_MS)
        self.assertError(answer, 415, "content-type")
        self.assertEqual(answer.header("connection"), "close")

    async def test_content_type_refused_closes_connection(self):
        """After a 415 the unread body is never taken for the next request: the server closes."""
        host = f"Host: 127.0.0.1:{self.app.port}"
        smuggled = head("POST /api/projects_open HTTP/1.1", host, "Content-Type: application/json",
                        "Content-Length: 2", body=b"{}")
        async with connection(self.app) as (reader, writer):
            writer.write(head("POST /api/projects_open HTTP/1.1", host, "Content-Type: text/plain",
                              f"Content-Length: {len(smuggled)}", body=smuggled))
            answer = await asyncio.wait_for(read_answer(reader), ANSWER_MS * MS)
            self.assertError(answer, 415, "content-type")
            self.assertEqual(answer.header("connection"), "close")
            self.assertEqual(await asyncio.wait_for(reader.read(), ANSWER_MS * MS), b"")
        self.assertEqual(len(await self.project_ids()), 1)

    async def test_post_without_body_to_bodiless_actions_200(self):
        """A POST with no body and no type is fine where no body is taken: reads and removals."""
        answer = await request(self.app, "POST", "/api/projects", headers=self.auth())
        self.assertEqual(answer.status, 200, answer.body)
        answer = await request(self.app, "POST", f"/api/projects_remove/{self.project['id']}", headers=self.auth())
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(await self.project_ids(), [])


class JsonBodyEveryActionTest(JsonBodyCase):
    """Every action that takes a body, signed in with the token, refuses text/plain with 415."""

    settings = {"token": TOKEN, "failures": "1"}

    async def test_every_body_action_refuses_text_plain_415(self):
        """Each `+` action of BODY_ACTIONS is 415 for a text/plain `{}`; every other changing action
        takes no body and answers without looking at its type (so BODY_ACTIONS is complete)."""
        session = await self.create_session_with_auth()
        table = action_table()
        self.assertLessEqual(BODY_ACTIONS, set(table))
        for name, action in sorted(table.items()):
            if not action.changes:
                continue
            ident = session["id"] if name in SESSION_ID_ACTIONS else ("nope" if action.takes_id else None)
            with self.subTest(action=name):
                before = await self.snapshot()
                answer = await self.post(name, b"{}", content_type="text/plain", ident=ident)
                if name in BODY_ACTIONS:
                    self.assertError(answer, 415, "content-type")
                    self.assertIsNone(answer.header("set-cookie"))
                else:
                    self.assertNotIn(answer.status, (415, 500), answer.body)
                self.assertEqual(await self.snapshot(), before)

    async def create_session_with_auth(self) -> dict:
        answer = await call(self.app, "sessions_create", {"projectid": self.project["id"]}, headers=bearer())
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    async def test_login_form_post_415(self):
        """The login taken as a form (token=...) is 415: no cookie, and not counted as a failure."""
        raw = f"token={TOKEN}".encode()
        answer = await request(self.app, "POST", "/api/login", raw_body=raw,
                               content_type="application/x-www-form-urlencoded")
        self.assertError(answer, 415, "content-type")
        self.assertIsNone(answer.header("set-cookie"))
        answer = await call(self.app, "login", {"token": TOKEN})
        self.assertEqual(answer.status, 200, answer.body)
        self.assertIsNotNone(answer.header("set-cookie"))

    async def test_login_duplicate_token_400(self):
        """`{"token": wrong, "token": right}` is 400 and signs nobody in."""
        raw = b'{"token": "wrong-token-wrong-token", "token": "%s"}' % TOKEN.encode()
        answer = await request(self.app, "POST", "/api/login", raw_body=raw)
        self.assertError(answer, 400, "body")
        self.assertIsNone(answer.header("set-cookie"))
