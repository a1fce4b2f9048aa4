"""The MCP route over raw HTTP: the transport as the protocol says (versions, sessions, batches,
notifications, errors) and the inputs an attacker would try (an Origin, a missing or wrong token,
blocking, a caller from elsewhere, oversized and malformed bodies, autoaccept, extra tools)."""

from __future__ import annotations

import json

from tests.utils import TOKEN, TotemCase, call, request

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
        session, _ = await self.initialize()
        huge = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "Sessions_read", "arguments": {"id": "x" * (5 * 1024 * 1024)}}}).encode()
        self.assertEqual((await self.post(None, session, raw=huge)).status, 413)


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
        for name in ("Permissions_reply", "Terminal", "", None):
            with self.subTest(unknown=name):
                answer = await self.rpc(session, "tools/call", {"name": name, "arguments": {"id": "x"}})
                self.assertEqual(answer["error"]["code"], -32602, answer)
                self.assertIn("unknown tool", answer["error"]["message"])
        self.assertEqual(await self.app.store.list_rules(project["id"]), [])
        stored = await self.app.store.get_session(made["id"])
        self.assertFalse(stored["autoaccept"])


class OffTest(TotemCase):
    async def test_off_by_default(self):
        """With mcp = false (the default) the route does not exist: 404 for every method."""
        for method in ("POST", "GET", "DELETE"):
            for path in ("/$mcp/", "/$mcp"):
                answer = await request(self.app, method, path, {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
                                       if method == "POST" else None)
                self.assertEqual(answer.status, 404, (method, path))
                self.assertIn(b"mcp = true", answer.body)
                self.assertNotIn(b"protocolVersion", answer.body)


class NullIdTest(McpCase):
    async def test_a_request_with_a_null_id_is_invalid(self):
        """A request's id must not be null: -32600, and the method is not run."""
        session, _ = await self.initialize()
        answer = await self.post({"jsonrpc": "2.0", "id": None, "method": "tools/list"}, session)
        self.assertEqual(answer.status, 200)
        self.assertEqual(answer.json()["error"]["code"], -32600)
        self.assertIsNone(answer.json()["id"])
        self.assertNotIn("result", answer.json())
        init = await self.post({"jsonrpc": "2.0", "id": None, "method": "initialize", "params": {}})
        self.assertEqual(init.json()["error"]["code"], -32600)
        self.assertIsNone(init.header("mcp-session-id"))


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
