"""The MCP route over raw HTTP: the transport as the protocol says (versions, sessions, batches,
notifications, errors) and the inputs an attacker would try (an Origin, a missing or wrong token,
blocking, a caller from elsewhere, oversized and malformed bodies, autoaccept, extra tools)."""

from __future__ import annotations

import json
from unittest import mock

from tests.utils import TOKEN, TotemCase, call, request
from totem.http import httpd

EIGHT = ["Projects_list", "Sessions_list", "Sessions_create", "Sessions_read", "Sessions_messages",
         "Sessions_prompt", "Sessions_abort", "Sessions_diff"]
ACCEPT = "application/json, text/event-stream"


class McpCase(TotemCase):
    settings = {"mcp": "true"}
    auth: dict = {}

    async def post(self, message, session: str | None = None, headers: dict | None = None, raw: bytes | None = None,
                   version: str | None = None):
        sent = {"Accept": ACCEPT} | self.auth | (headers or {})
        if session:
            sent["Mcp-Session-Id"] = session
        if version:
            sent["MCP-Protocol-Version"] = version
        return await request(self.app, "POST", "/$mcp/", None if raw is not None else message, headers=sent,
                             raw_body=raw)

    async def initialize(self, version: str = "2025-11-25") -> tuple[str, dict]:
        answer = await self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        self.assertEqual(answer.status, 200, answer.body)
        session = answer.header("mcp-session-id")
        self.assertTrue(session)
        notified = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        self.assertEqual((notified.status, notified.body), (202, b""))
        return session, answer.json()["result"]

    async def rpc(self, session: str, method: str, params: dict | None = None, ident=1):
        message = {"jsonrpc": "2.0", "id": ident, "method": method} | ({"params": params} if params else {})
        answer = await self.post(message, session)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    async def tool(self, session: str, name: str, arguments: dict) -> dict:
        return (await self.rpc(session, "tools/call", {"name": name, "arguments": arguments}))["result"]


class TransportTest(McpCase):
    async def test_versions_are_negotiated(self):
        for offered, answered in (("2025-03-26", "2025-03-26"), ("2025-06-18", "2025-06-18"),
                                  ("2025-11-25", "2025-11-25"), ("2024-11-05", "2025-11-25"),
                                  ("garbage", "2025-11-25")):
            _session, result = await self.initialize(offered)
            self.assertEqual(result["protocolVersion"], answered, offered)
            self.assertEqual(result["capabilities"], {"tools": {"listChanged": False}})

    async def test_exactly_eight_tools_each_with_a_schema(self):
        session, _ = await self.initialize()
        tools = (await self.rpc(session, "tools/list"))["result"]["tools"]
        self.assertEqual([tool["name"] for tool in tools], EIGHT)
        for tool in tools:
            self.assertEqual(tool["inputSchema"]["type"], "object")
            self.assertIs(tool["inputSchema"]["additionalProperties"], False)
        bad_cursor = await self.rpc(session, "tools/list", {"cursor": "x"})
        self.assertEqual(bad_cursor["error"]["code"], -32602)

    async def test_ping_probe_unknown_method_and_sessions(self):
        session, _ = await self.initialize()
        self.assertEqual(await self.rpc(session, "ping", ident="p1"), {"jsonrpc": "2.0", "id": "p1", "result": {}})
        self.assertEqual((await self.rpc(session, "server/discover"))["error"]["code"], -32601)
        probe = await self.post({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}},
                                headers={"mcp-protocol-version": "2026-07-28", "mcp-method": "server/discover"})
        self.assertEqual((probe.status, probe.json()["id"], probe.json()["error"]["code"]), (200, 1, -32601))
        self.assertEqual((await self.rpc(session, "resources/list"))["error"]["code"], -32601)
        missing = await self.post({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        self.assertEqual(missing.status, 400)
        unknown = await self.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, "0" * 32)
        self.assertEqual(unknown.status, 404)
        wrong_version = await self.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, session, version="1999-01-01")
        self.assertEqual(wrong_version.status, 400)
        get = await request(self.app, "GET", "/$mcp/", headers={"Accept": "text/event-stream"})
        self.assertEqual(get.status, 405)
        ended = await request(self.app, "DELETE", "/$mcp/", headers={"Mcp-Session-Id": session})
        self.assertEqual(ended.status, 204)
        after = await self.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, session)
        self.assertEqual(after.status, 404)

    async def test_batches_only_in_2025_03_26(self):
        old, _ = await self.initialize("2025-03-26")
        batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "method": "notifications/x"},
                 {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
        answer = await self.post(batch, old)
        self.assertEqual(answer.status, 200)
        self.assertEqual([item["id"] for item in answer.json()], [1, 2])
        new, _ = await self.initialize("2025-06-18")
        self.assertEqual((await self.post(batch, new)).status, 400)

    async def test_a_stream_when_only_a_stream_is_accepted(self):
        session, _ = await self.initialize()
        answer = await self.post({"jsonrpc": "2.0", "id": 7, "method": "ping"}, session,
                                 headers={"Accept": "text/event-stream"})
        self.assertEqual(answer.header("content-type"), "text/event-stream")
        self.assertTrue(answer.body.startswith(b"event: message\r\ndata: "))
        self.assertEqual(json.loads(answer.body.split(b"data: ", 1)[1]), {"jsonrpc": "2.0", "id": 7, "result": {}})

    async def test_malformed_messages_are_json_rpc_errors_never_500(self):
        session, _ = await self.initialize()
        cases = [b"{not json", b"[]", b'"text"', b'{"jsonrpc":"1.0","id":1,"method":"ping"}',
                 b'{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}', b'{"jsonrpc":"2.0","id":1,"method":5}',
                 b'{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}', b'{"a":1,"a":2}',
                 b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Sessions_read","arguments":[]}}']
        for raw in cases:
            with self.subTest(raw=raw):
                answer = await self.post(None, session, raw=raw)
                self.assertIn(answer.status, (200, 400), answer.body)
                body = answer.json()
                item = body[0] if isinstance(body, list) else body
                self.assertTrue("error" in item or item.get("result", {}).get("isError"), body)
        plain = await self.post(None, session, raw=b"{}", headers={"Content-Type": "text/plain"})
        self.assertEqual(plain.status, 415)

    async def test_oversized_body_refused(self):
        """A body over 4 MB is 413, read by a client that sends all of it first (as most do): the
        server reads and drops the rest before it closes. The control, without that, is reset:
        16 MB is more than the two sockets' buffers hold."""
        session, _ = await self.initialize()
        huge = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "Sessions_read", "arguments": {"id": "x" * (16 * 1024 * 1024)}}}).encode()
        self.assertEqual((await self.post(None, session, raw=huge)).status, 413)
        with mock.patch.object(httpd, "UNREAD_LINGER_BYTES", 0), self.assertRaises(ConnectionError):
            await self.post(None, session, raw=huge)


class ToolsTest(McpCase):
    async def test_tools_call_the_services(self):
        session, _ = await self.initialize()
        project = await self.open_project()
        projects = json.loads((await self.tool(session, "Projects_list", {}))["content"][0]["text"])
        self.assertEqual([item["id"] for item in projects], [project["id"]])
        created = await self.tool(session, "Sessions_create", {"projectid": project["id"], "name": "From MCP"})
        self.assertFalse(created["isError"])
        made = json.loads(created["content"][0]["text"])
        read = json.loads((await self.tool(session, "Sessions_read", {"id": made["id"]}))["content"][0]["text"])
        self.assertEqual((read["name"], read["waiting"]), ("From MCP", 0))
        self.assertEqual(json.loads((await self.tool(session, "Sessions_diff", {"id": made["id"]}))["content"][0]
                                    ["text"]), [])
        listed = await call(self.app, "sessions", query=f"projectid={project['id']}")
        self.assertEqual([item["id"] for item in listed.json()["sessions"]], [made["id"]])

    async def test_failures_and_bad_arguments_are_tool_errors(self):
        session, _ = await self.initialize()
        project = await self.open_project()
        made = json.loads((await self.tool(session, "Sessions_create", {"projectid": project["id"]}))
                          ["content"][0]["text"])
        for name, arguments, words in (
                ("Sessions_read", {"id": "nosuch"}, "404"),
                ("Sessions_abort", {"id": made["id"]}, "nothing is running"),
                ("Sessions_prompt", {"id": made["id"], "text": "hi", "autoaccept": True}, "autoaccept"),
                ("Sessions_prompt", {"id": made["id"], "text": "hi", "model": "nosuch/model"}, "model"),
                ("Sessions_read", {}, "id")):
            with self.subTest(name=name, arguments=arguments):
                result = await self.tool(session, name, arguments)
                self.assertTrue(result["isError"], result)
                self.assertIn(words, result["content"][0]["text"])
        for name in ("Permissions_reply", "Terminal", ""):
            with self.subTest(unknown=name):
                answer = await self.rpc(session, "tools/call", {"name": name, "arguments": {"id": "x"}})
                self.assertEqual(answer["error"]["code"], -32602, answer)
                self.assertIn("unknown tool", answer["error"]["message"])
        self.assertEqual(await self.app.store.list_rules(project["id"]), [])
        stored = await self.app.store.get_session(made["id"])
        self.assertFalse(stored["autoaccept"])


class OffTest(TotemCase):
    async def test_off_by_default(self):
        """With mcp = false (the default) the route does not exist: 404 for every method, never
        405 (which would say that it exists), with or without a session id."""
        for method in ("POST", "GET", "DELETE", "PUT", "OPTIONS", "HEAD"):
            for path in ("/$mcp/", "/$mcp"):
                with self.subTest(method=method, path=path):
                    answer = await request(self.app, method, path,
                                           {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
                                           if method == "POST" else None,
                                           headers={"Accept": ACCEPT, "Mcp-Session-Id": "0" * 32})
                    self.assertEqual(answer.status, 404, (method, path))
                    self.assertIsNone(answer.header("allow"))
                    self.assertIsNone(answer.header("mcp-session-id"))
                    if method != "HEAD":
                        self.assertIn(b"mcp = true", answer.body)
                        self.assertNotIn(b"protocolVersion", answer.body)


class ErrorCodesTest(McpCase):
    """JSON-RPC errors as the 2025-11-25 revision says, each on the wire."""

    async def test_an_invalid_request_is_32600_in_a_400(self):
        """A request's id must be text or an integer (never null, an object, a list, a boolean
        or a fraction), `jsonrpc` must be "2.0", the method text: else -32600 in an HTTP 400,
        and the method is not run. The answer's id is null when the request's is not an id."""
        session, _ = await self.initialize()
        bad_ids = {"null id": {"jsonrpc": "2.0", "id": None, "method": "tools/list"},
                 "object id": {"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/list"},
                 "list id": {"jsonrpc": "2.0", "id": [1], "method": "tools/list"},
                 "true id": {"jsonrpc": "2.0", "id": True, "method": "tools/list"},
                 "false id": {"jsonrpc": "2.0", "id": False, "method": "tools/list"},
                 "fraction id": {"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"},
                 "null id, no jsonrpc": {"id": None, "method": "tools/list"},
                 "no id, no method": {"jsonrpc": "2.0", "params": {}},
                 "notification, method number": {"jsonrpc": "2.0", "method": 5},
                 "not an object": "tools/list", "a number": 3, "null": None}
        # JSON-RPC: "If there was an error in detecting the id", null; else the id is echoed.
        good_ids = {"no jsonrpc": {"id": 1, "method": "tools/list"},
                 "jsonrpc 1.0": {"jsonrpc": "1.0", "id": 1, "method": "tools/list"},
                 "jsonrpc number": {"jsonrpc": 2.0, "id": 1, "method": "tools/list"},
                 "method number": {"jsonrpc": "2.0", "id": 1, "method": 5},
                 "method null": {"jsonrpc": "2.0", "id": 1, "method": None},
                 "neither request nor response": {"jsonrpc": "2.0", "id": 1},
                 "result and error": {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1}}}
        for cases, ident in ((bad_ids, None), (good_ids, 1)):
            for name, message in cases.items():
                with self.subTest(name):
                    for accept in (ACCEPT, "text/event-stream"):
                        answer = await self.post(None, session, headers={"Accept": accept},
                                                 raw=json.dumps(message).encode())
                        self.assertEqual((answer.status, answer.header("content-type")),
                                         (400, "application/json"), answer.body)
                        body = answer.json()
                        self.assertEqual((body["jsonrpc"], body["id"], body["error"]["code"]), ("2.0", ident, -32600))
                        self.assertNotIn("result", body)
        init = await self.post({"jsonrpc": "2.0", "id": None, "method": "initialize", "params": {}})
        self.assertEqual((init.status, init.json()["error"]["code"], init.json()["id"]), (400, -32600, None))
        self.assertIsNone(init.header("mcp-session-id"))
        # The session still answers: a bad message changes nothing.
        self.assertEqual(await self.rpc(session, "ping"), {"jsonrpc": "2.0", "id": 1, "result": {}})

    async def test_an_invalid_request_in_a_batch_is_one_error_of_its_answer(self):
        """In a batch (2025-03-26) each invalid member gets its -32600 with a null id; the
        valid ones are answered, in a 200."""
        old, _ = await self.initialize("2025-03-26")
        answer = await self.post([{"jsonrpc": "2.0", "id": None, "method": "ping"},
                                  {"jsonrpc": "2.0", "id": 2, "method": "ping"}], old)
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.json(), [{"jsonrpc": "2.0", "id": None, "error": {
            "code": -32600, "message": "the id must be text or an integer, never null"}},
            {"jsonrpc": "2.0", "id": 2, "result": {}}])

    async def test_notifications_and_responses_get_202_without_a_body(self):
        session, _ = await self.initialize()
        for message in ({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
                        {"jsonrpc": "2.0", "method": "notifications/unknown"},
                        {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "nosuch"}},
                        {"jsonrpc": "2.0", "id": 5, "result": {}},
                        {"jsonrpc": "2.0", "id": 5, "error": {"code": -1, "message": "no"}}):
            with self.subTest(message=message):
                answer = await self.post(message, session)
                self.assertEqual((answer.status, answer.body), (202, b""))

    async def test_an_unknown_method_is_32601(self):
        session, _ = await self.initialize()
        for method in ("resources/list", "prompts/get", "tools/run", ""):
            with self.subTest(method=method):
                answer = await self.rpc(session, method, ident="m")
                self.assertEqual((answer["id"], answer["error"]["code"]), ("m", -32601), answer)
                self.assertIn("method not found", answer["error"]["message"])

    async def test_a_malformed_tools_call_is_32602(self):
        """No name, a name that is not text, arguments that are not an object, params that are
        not an object: -32602 with the request's id, not a tool result."""
        session, _ = await self.initialize()
        for params, words in (({}, "needs name"), ({"arguments": {}}, "needs name"),
                              ({"name": None}, "needs name"), ({"name": 5}, "needs name"),
                              ({"name": ["Sessions_read"]}, "needs name"),
                              ({"name": "Sessions_read", "arguments": []}, "must be an object"),
                              ({"name": "Sessions_read", "arguments": "id=x"}, "must be an object"),
                              ({"name": "Sessions_read", "arguments": None}, "must be an object"),
                              ({"name": "Nosuch", "arguments": {}}, "unknown tool 'Nosuch'")):
            with self.subTest(params=params):
                answer = await self.rpc(session, "tools/call", params, ident=9)
                self.assertEqual((answer["id"], answer["error"]["code"]), (9, -32602), answer)
                self.assertIn(words, answer["error"]["message"])
                self.assertNotIn("result", answer)
        for params in ([1], "x", 3):
            with self.subTest(params=params):
                answer = await self.post({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params},
                                         session)
                self.assertEqual((answer.status, answer.json()["id"], answer.json()["error"]["code"]),
                                 (200, 9, -32602))

    async def test_arguments_that_fail_the_schema_are_a_tool_result(self):
        """A known tool with arguments its input schema refuses: a result with isError (the
        model reads it and tries again), naming the argument; nothing is made."""
        session, _ = await self.initialize()
        project = await self.open_project()
        for name, arguments, words in (("Sessions_read", {}, "id"), ("Sessions_read", {"id": 5}, "id"),
                                       ("Sessions_create", {"projectid": project["id"], "extra": 1}, "extra"),
                                       ("Sessions_create", {"projectid": project["id"], "name": 3}, "name"),
                                       ("Sessions_prompt", {"id": "x"}, "text")):
            with self.subTest(name=name, arguments=arguments):
                answer = await self.rpc(session, "tools/call", {"name": name, "arguments": arguments})
                self.assertNotIn("error", answer)
                result = answer["result"]
                self.assertIs(result["isError"], True, result)
                self.assertIn(f"invalid arguments for {name}", result["content"][0]["text"])
                self.assertIn(words, result["content"][0]["text"])
        listed = await call(self.app, "sessions", query=f"projectid={project['id']}")
        self.assertEqual(listed.json()["sessions"], [])
        # Arguments left out are no arguments: a tool that takes none runs.
        answer = await self.rpc(session, "tools/call", {"name": "Projects_list"})
        self.assertIs(answer["result"]["isError"], False, answer)


class OriginTest(McpCase):
    async def test_any_origin_is_refused(self):
        for origin in (f"http://127.0.0.1:{self.app.port}", "null", "https://evil.example", ""):
            with self.subTest(origin=origin):
                answer = await self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}},
                                         headers={"Origin": origin})
                self.assertEqual(answer.status, 403)
                self.assertIsNone(answer.header("mcp-session-id"))


class ElsewhereTest(McpCase):
    settings = {"mcp": "true", "proxy": "127.0.0.1"}

    async def test_a_caller_from_elsewhere_without_a_token(self):
        answer = await self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}},
                                 headers={"X-Forwarded-For": "10.1.2.3"})
        self.assertEqual(answer.status, 403)
        self.assertIn(b"through a proxy is not local", answer.body)


class TokenTest(McpCase):
    settings = {"mcp": "true", "token": TOKEN, "failures": "3"}
    auth = {"Authorization": f"Bearer {TOKEN}"}

    async def test_the_token_is_required_and_checked(self):
        await self.initialize()
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
        self.auth = {}
        self.assertEqual((await self.post(init)).status, 401)
        cookie_only = await self.post(init, headers={"Cookie": "totem=whatever"})
        self.assertEqual(cookie_only.status, 401)
        for wrong in ("Bearer nope", f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer\u00a0{TOKEN}"):
            answer = await self.post(init, headers={"Authorization": wrong})
            self.assertIn(answer.status, (401, 429), wrong)
        blocked = await self.post(init, headers={"Authorization": f"Bearer {TOKEN}"})
        self.assertEqual(blocked.status, 429)
        self.assertTrue(blocked.header("retry-after"))
