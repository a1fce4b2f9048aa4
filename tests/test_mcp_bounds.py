"""The bounds of MCP both ways: Totem's own route keeps a bounded number of MCP sessions without
evicting a live one (idle ones expire, one more initialize waits with 503), and the client reads
a stdio server's result of any size in bounded memory, cut as an HTTP one is, without ending the
server."""

from __future__ import annotations

import json

from tests.test_mcp import McpCase
from tests.utils import request

CAP = 3
IDLE_S = 60.0


class SessionBoundsTest(McpCase):
    """The cap and the idle time are narrowed on the running route, and its clock is driven."""

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.now = 1000.0
        route = self.app.mcp
        route.max_sessions, route.idle_s, route.clock = CAP, IDLE_S, lambda: self.now

    async def ping(self, session: str):
        return await self.post({"jsonrpc": "2.0", "id": "p", "method": "ping"}, session)

    async def refused_initialize(self):
        return await self.post({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})

    async def test_past_the_cap_initialize_gets_503_and_every_live_session_still_works(self):
        """With CAP live sessions one more initialize is 503 with a JSON-RPC error and
        Retry-After (the seconds until the least recently used one would expire); the oldest
        session still answers, and once one is ended with DELETE a new one is made."""
        sessions = []
        for _ in range(CAP):
            sessions.append((await self.initialize())[0])
            self.now += 10
        refused = await self.refused_initialize()
        self.assertEqual(refused.status, 503)
        self.assertEqual(refused.header("retry-after"), "30")  # the first was used at 1000, now is 1030
        body = refused.json()
        self.assertEqual((body["jsonrpc"], body["id"], body["error"]["code"]), ("2.0", 9, -32000))
        self.assertIn("try again in 30 s", body["error"]["message"])
        self.assertIsNone(refused.header("mcp-session-id"))
        for session in sessions:
            answer = await self.ping(session)
            self.assertEqual((answer.status, answer.json()["result"]), (200, {}), session)
        # Each ping used them again: the least recently used one is now the first, at 1030.
        self.now += 5
        self.assertEqual((await self.refused_initialize()).header("retry-after"), "55")
        ended = await request(self.app, "DELETE", "/$mcp/", headers={"Mcp-Session-Id": sessions[1]})
        self.assertEqual(ended.status, 204)
        fresh, _ = await self.initialize()
        self.assertEqual((await self.ping(fresh)).status, 200)
        self.assertEqual((await self.ping(sessions[0])).status, 200)
        self.assertEqual((await self.ping(sessions[1])).status, 404)

    async def test_an_idle_session_expires_and_its_client_initializes_again(self):
        """A session used within the idle time lives on, however old; one idle for longer gets
        404 (the specification's answer to an ended session), also to DELETE, and a new
        initialize works."""
        busy, _ = await self.initialize()
        idle, _ = await self.initialize()
        for _ in range(3):  # 150 s old, never idle for 60
            self.now += 50
            self.assertEqual((await self.ping(busy)).status, 200)
        gone = await self.ping(idle)
        self.assertEqual(gone.status, 404)
        self.assertEqual(gone.json()["error"]["code"], -32600)
        self.assertIn("initialize again", gone.json()["error"]["message"])
        self.now += IDLE_S + 1
        deleted = await request(self.app, "DELETE", "/$mcp/", headers={"Mcp-Session-Id": busy})
        self.assertEqual(deleted.status, 404)
        again, _ = await self.initialize()
        listed = await self.rpc(again, "tools/list")
        self.assertEqual(len(listed["result"]["tools"]), 8)

    async def test_expired_sessions_make_room_at_the_cap(self):
        """At the cap, sessions idle for longer than the idle time do not hold their place: a
        new initialize is served, and the expired ones stay ended."""
        old = [(await self.initialize())[0] for _ in range(CAP)]
        self.assertEqual((await self.refused_initialize()).status, 503)
        self.now += IDLE_S + 1
        fresh = [(await self.initialize())[0] for _ in range(CAP)]
        self.assertEqual((await self.refused_initialize()).status, 503)
        for session in old:
            self.assertEqual((await self.ping(session)).status, 404)
        for session in fresh:
            self.assertEqual((await self.ping(session)).status, 200)
        self.assertEqual(json.loads((await self.ping(fresh[0])).body)["id"], "p")
