"""The bounds of MCP both ways: Totem's own route keeps a bounded number of MCP sessions without
evicting a live one (idle ones expire, one more initialize waits with 503), and the client reads
a stdio server's result of any size in bounded memory, cut as an HTTP one is, without ending the
server."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import tempfile
import time
import unittest

from tests.mcp_servers.fastmcp_server import big_text
from tests.model_server import reply
from tests.test_mcp import McpCase
from tests.test_mcp_client import EVENT_MS, SERVER, McpClientCase, free_port, stdio_definition, tool_results
from tests.utils import MS, call, request
from totem.agent.calls import MAX_TOOL_OUTPUT_CHARS
from totem.mcp.client import WHOLE_LINE_BYTES, McpClient, McpError
from totem.mcp.definitions import ServerDefinition
from totem.mcp.skimmer import MAX_STRING_CHARS, MAX_VALUES, CutText, Skimmer
from totem.mcp.tools import result_text

CAP = 3
IDLE_S = 60.0
CUT_NOTE = f"[output cut at {MAX_TOOL_OUTPUT_CHARS} characters]"
SCRIPTED = os.path.join(os.path.dirname(SERVER), "scripted_server.py")
BIG_MS = 120_000  # a 12 MB result: the SDK server builds and sends 24 MB


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


# -- a stdio server's big results ---------------------------------------------------------------


class BigResultsTest(McpClientCase):
    """The results of a FastMCP server (the official SDK), over stdio and Streamable HTTP."""

    async def serve_http(self, mode: str = "http") -> int:
        port = free_port()
        process = await asyncio.create_subprocess_exec(sys.executable, SERVER, mode, str(port),
                                                       stdout=asyncio.subprocess.DEVNULL,
                                                       stderr=asyncio.subprocess.DEVNULL)

        async def stop():
            process.kill()
            await process.wait()
        self.addAsyncCleanup(stop)
        deadline = time.monotonic() + EVENT_MS * MS
        while time.monotonic() < deadline:
            try:
                _reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return port
            except OSError:
                await asyncio.sleep(50 * MS)
        raise AssertionError("the HTTP MCP server did not start")

    async def test_big_stdio_results_are_cut_as_http_ones_and_the_server_serves_on(self):
        """A 4 MB result of a stdio server (an 8 MB line: the SDK sends the text twice) and a
        12 MB one (24 MB) reach the model cut at the same length with the same note as the 4 MB
        result of the same server over HTTP, byte for byte but the tool's name; the next small
        call works, and the server's process is the one that started (never restarted)."""
        port = await self.serve_http()
        self.define({"notes": stdio_definition(), "web": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}})
        for server in ("notes", "web"):
            await call(self.app, "permissions_save", {"projectid": self.project["id"], "tool": "mcp",
                                                      "pattern": f"{server}/*", "action": "allow"})
        self.model.script(reply(tool_calls=[("mcp__notes__pid", {})]),
                          reply(tool_calls=[("mcp__notes__big", {"megabytes": 4})]),
                          reply(tool_calls=[("mcp__web__big", {"megabytes": 4})]),
                          reply(tool_calls=[("mcp__notes__big", {"megabytes": 12})]),
                          reply(tool_calls=[("mcp__notes__echo", {"text": "small"})]),
                          reply(tool_calls=[("mcp__notes__pid", {})]), reply("done"))
        await self.prompt("use them")
        await self.answer("mcp-start")
        await self.answer("mcp-start")
        await self.events_until("idle", BIG_MS)
        results = [tool_results(self.model.requests[index])[-1] for index in range(1, 7)]
        first_pid, stdio_4, http_4, stdio_12, small, last_pid = results
        expected = big_text(4)[:MAX_TOOL_OUTPUT_CHARS] + "\n" + CUT_NOTE
        # (assertTrue: a failure shows the end of the result, not 50,000 characters twice)
        self.assertTrue(expected in stdio_4, stdio_4[-300:])
        self.assertTrue(stdio_4.replace("mcp__notes__", "mcp__web__") == http_4, http_4[-300:])
        self.assertTrue(expected in stdio_12, stdio_12[-300:])
        self.assertIn("echo: small", small)
        pid = first_pid.split(">\n", 1)[1].split("\n", 1)[0]
        self.assertTrue(pid.isdigit(), first_pid)
        self.assertIn(f">\n{pid}\n<", last_pid)
        listed = (await self.servers(self.session["id"]))["servers"]
        self.assertEqual({s["server"]: s["state"] for s in listed}, {"notes": "running", "web": "running"})

    async def test_a_big_json_answer_over_http_is_cut_the_same_way(self):
        """A 12 MB result of a stateless server answering JSON (a 24 MB body) is read as it
        comes and reaches the model cut with the note; the next call works."""
        port = await self.serve_http("http-json")
        self.define({"web": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}})
        await call(self.app, "permissions_save", {"projectid": self.project["id"], "tool": "mcp",
                                                  "pattern": "web/*", "action": "allow"})
        self.model.script(reply(tool_calls=[("mcp__web__big", {"megabytes": 12})]),
                          reply(tool_calls=[("mcp__web__echo", {"text": "small"})]), reply("done"))
        await self.prompt("use it")
        await self.answer("mcp-start")
        await self.events_until("idle", BIG_MS)
        big, small = (tool_results(self.model.requests[index])[-1] for index in (1, 2))
        expected = big_text(1)[:MAX_TOOL_OUTPUT_CHARS] + "\n" + CUT_NOTE
        self.assertTrue(expected in big, big[-300:])
        self.assertIn("echo: small", small)


class SkimmedLinesTest(unittest.IsolatedAsyncioTestCase):
    """The client against the scripted stdio server's long lines of other shapes."""

    async def asyncSetUp(self):
        definition = ServerDefinition("scripted", ".mcp.json", "stdio", command=sys.executable, args=(SCRIPTED,))
        self.client = McpClient(definition)
        await self.client.start(tempfile.gettempdir())
        self.addAsyncCleanup(self.client.close)

    async def big(self, shape: str, megabytes: float = 8) -> dict:
        return await self.client.call_tool("big", {"megabytes": megabytes, "shape": shape}, timeout_s=60)

    async def small_call_works(self) -> None:
        result = await self.client.call_tool("first", {})
        self.assertTrue(result_text(result).startswith("called\n"), result)
        self.assertIsNone(self.client.ended)

    async def test_an_id_written_last_still_finds_its_request(self):
        """A 13 MB answer whose id comes after the result (the TypeScript SDK's order) answers
        its call, its text cut to MAX_STRING_CHARS characters as it came; then a small call."""
        result = await self.big("id-last")
        text = result["content"][0]["text"]
        self.assertIsInstance(text, CutText)
        self.assertEqual(len(text), MAX_STRING_CHARS)
        self.assertTrue(text.startswith('row 00000000: "quoted" \u00e9t\u00e9\nrow 00000001'), text[:80])
        self.assertGreater(text.size, 12 * 1024 * 1024)
        await self.small_call_works()

    async def test_a_broken_or_nameless_big_answer_fails_its_call_with_advice(self):
        """A long answer that is not valid JSON, or that has no id, fails the call that waits
        with an error the model can act on; the server serves on."""
        with self.assertRaisesRegex(McpError, r"the MCP server scripted sent an answer of 1[23]\.\d MB that is not "
                                              r"valid JSON \(the brackets do not match\); ask the tool for less"):
            await self.big("broken")
        await self.small_call_works()
        with self.assertRaisesRegex(McpError, "whose request could not be told .no id was read.; ask the tool for less"):
            await self.big("no-id")
        await self.small_call_works()

    async def test_a_long_line_that_is_not_json_is_skipped(self):
        """A long line of text on stdout (a program's output, not a message) is read through and
        skipped like a short one: the answer after it arrives."""
        result = await self.big("banner", megabytes=WHOLE_LINE_BYTES * 2 / 1_600_000)
        self.assertEqual(result_text(result), "after the banner")
        await self.small_call_works()


# -- the skimmer alone ----------------------------------------------------------------------------

SAMPLES = [
    {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "hi\nthere"}], "isError": False}},
    {"a": [1, -2, 2.5, -3e2, 1E+3, 0, True, False, None, "", "x\"y\\z\u00e9\U0001F600\x01\u2028"], "b": {}, "c": []},
    [[[]], {}, [{"k": {"k": [1, {"z": "w"}]}}]], "text", 12, -0.5, None, True,
]


def skim(raw: bytes, seed: int = 0, largest: int = 7) -> Skimmer:
    pieces = random.Random(seed)
    skimmer = Skimmer()
    index = 0
    while index < len(raw):
        size = pieces.randint(1, largest)
        skimmer.feed(raw[index:index + size])
        index += size
    return skimmer


def test_skimmer_gives_what_json_loads_gives_whatever_the_pieces():
    for value in SAMPLES:
        for ascii_only in (True, False):
            raw = json.dumps(value, ensure_ascii=ascii_only).encode()
            for seed in range(25):
                skimmer = skim(raw, seed)
                assert skimmer.finish() == value, (raw, seed)
                assert not skimmer.cut and skimmer.size == len(raw)


def test_skimmer_cuts_long_strings_to_their_first_characters_and_keeps_their_size():
    text = "\u00e9\U0001F600\"\\ab" * 40_000  # escapes and characters cut at every boundary of a piece
    for ascii_only in (True, False):
        raw = json.dumps({"id": 3, "result": {"text": text, "structured": {"result": text}}},
                         ensure_ascii=ascii_only).encode()
        skimmer = skim(raw, 1, largest=70_000)
        value = skimmer.finish()
        for kept in (value["result"]["text"], value["result"]["structured"]["result"]):
            assert isinstance(kept, CutText) and kept == text[:MAX_STRING_CHARS]
            assert kept.size == len(json.dumps(text, ensure_ascii=ascii_only).encode()) - 2
        assert value["id"] == 3 and skimmer.cut


def test_skimmer_past_its_budget_keeps_the_head_and_finds_an_id_written_last():
    rows = [{"n": n, "name": f"row {n}"} for n in range(100_000)]
    for ending, ident in ((', "jsonrpc": "2.0", "id": "abc"}', "abc"), (', "id": 12, "jsonrpc": "2.0"}', 12),
                          ("}", None)):
        raw = ('{"result": {"rows": ' + json.dumps(rows) + "}" + ending).encode()
        skimmer = skim(raw, 2, largest=300_000)
        value = skimmer.finish()
        kept = value["result"]["rows"]
        assert 0 < len(kept) < MAX_VALUES and kept[:-1] == rows[:len(kept) - 1]  # the last one may be cut
        assert value.get("id") == ident and skimmer.cut


def test_skimmer_refuses_what_is_not_one_json_value():
    for raw in (b'[1, 2', b'{"a": 1}}', b'{1: 2}', b"nope", b'{"a": tru}', b'"abc', b'{"a": 1} 2',
                b'{"a": 1: 2}', b'{"a"}', b"[1: 2]", b"[}", b"1" * 100, b"", b"   "):
        skimmer = skim(raw)
        try:
            value = skimmer.finish()
        except ValueError:
            continue
        raise AssertionError(f"{raw!r} was taken as {value!r}")
