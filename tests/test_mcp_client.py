"""Project MCP servers as tools, against real servers built on the official SDK (FastMCP) over
stdio, Streamable HTTP (SSE and JSON answers) and the older HTTP+SSE transport: asked before each
start (pinned to the definition's hash and the project files it runs: tests/test_mcp_pins.py) and
before each call, never started in Plan mode or a
scheduled run, stopped with their session; results scrubbed and marked as data; what a server
says about its tools cleaned and inert."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import tempfile
import time
import unittest

from tests.model_server import reply
from tests.test_loop import KEY, LoopCase
from tests.utils import MS, call, next_event, wait_until_ended
from totem.agent.turns import Prompt
from totem.mcp.client import McpClient, McpError
from totem.mcp.definitions import ServerDefinition, parse_definitions
from totem.mcp.tools import clean_text, result_text

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp_servers", "fastmcp_server.py")
EVENT_MS = 20_000  # a Python MCP server takes a second or two to start

# A header's value, never shown in a question; letters no hex digest has ("abc" once matched the
# definition's SHA-256, which the question names).
HEADER_VALUE = "key-never-shown-xyzzy"


def stdio_definition(**env) -> dict:
    return {"command": sys.executable, "args": [SERVER, "stdio"], "env": env}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tool_results(request) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


def declared(request) -> dict[str, dict]:
    return {tool["function"]["name"]: tool["function"] for tool in request.body.get("tools") or []}


class McpClientCase(LoopCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.root = self.folder("proj")

    def define(self, servers: dict, file: str = ".mcp.json") -> None:
        path = os.path.join(self.root, file)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            json.dump({"mcpServers": servers}, handle)

    async def until(self, kind: str, **match) -> dict:
        """The next event of `kind` whose data has the items of `match`."""
        deadline = time.monotonic() + EVENT_MS * MS
        while True:
            event = await next_event(self.ws, max(1, (deadline - time.monotonic()) / MS))
            if event["type"] == kind and all(event["data"].get(k) == v for k, v in match.items()):
                return event

    async def answer(self, tool: str, reply_: str = "once", **extra) -> dict:
        ask = await self.until("permission.ask", tool=tool)
        answer = await call(self.app, "permissions_reply", {"reply": reply_} | extra, ident=ask["data"]["id"])
        self.assertEqual(answer.status, 200, answer.body)
        return ask["data"]

    async def idle(self) -> list[dict]:
        return await self.events_until("idle", EVENT_MS)

    async def servers(self, sessionid: str | None = None) -> dict:
        query = f"sessionid={sessionid}" if sessionid else ""
        answer = await call(self.app, "projects_mcp", ident=self.project["id"], query=query)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    async def server_parts(self) -> list[dict]:
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        return [part for m in stored if m["data"].get("servers") for part in m["parts"]]

    def child_pid(self, sessionid: str, name: str) -> int:
        running = self.app.mcp_clients._running[sessionid][name]
        return running.client._channel.child.pid


class StdioServerTest(McpClientCase):
    async def test_start_asks_then_a_call_asks_and_its_result_arrives_as_data(self):
        """The start question shows the exact command line and the variables with their values
        (a secret-looking one masked), and says that the server's file outside the project is
        not covered; each call asks under `mcp` with the subject server/tool; the result reaches the
        model inside the untrusted envelope; the server runs in the project folder with the
        minimal environment and the variables its definition names; the start is shown in the
        conversation but never sent to the model."""
        os.environ["TOTEM_TEST_PRIVATE"] = "not-for-children"
        self.addCleanup(os.environ.pop, "TOTEM_TEST_PRIVATE", None)
        self.define({"notes": stdio_definition(GREETING="hello-value", API_TOKEN="token-never-shown")})
        self.model.script(reply(tool_calls=[("mcp__notes__echo", {"text": "hi"})]),
                          reply(tool_calls=[("mcp__notes__where", {})]), reply("done"))
        await self.prompt("use the server")
        start = await self.answer("mcp-start")
        self.assertEqual(start["input"]["command"], f"{sys.executable} {SERVER} stdio")
        self.assertEqual(start["input"]["env"], ["API_TOKEN", "GREETING"])
        self.assertEqual(start["input"]["variables"], [{"name": "API_TOKEN", "masked": True},
                                                       {"name": "GREETING", "value": "hello-value"}])
        self.assertNotIn("token-never-shown", json.dumps(start))
        self.assertEqual(start["input"]["files"], [])
        self.assertEqual(start["input"]["left_out"], [f"{SERVER} is outside the project: its content is not covered"])
        self.assertEqual(start["patterns"], [await self._subject()])
        first_call = await self.answer("mcp")
        self.assertEqual(first_call["input"], {"server": "notes", "tool": "echo", "arguments": {"text": "hi"}})
        self.assertEqual(first_call["patterns"], ["notes/echo", "notes/*"])
        await self.answer("mcp")
        await self.idle()
        first = self.model.requests[0]
        echo = declared(first)["mcp__notes__echo"]
        self.assertEqual(echo["parameters"]["properties"]["text"]["type"], "string")
        self.assertEqual([m["role"] for m in first.body["messages"]], ["system", "user"])
        results = tool_results(self.model.requests[1])
        self.assertIn('trust="untrusted"', results[0])
        self.assertIn("echo: hi", results[0])
        where = tool_results(self.model.requests[2])[1]
        self.assertIn(os.path.realpath(self.root), where)
        self.assertIn("GREETING", where)
        self.assertNotIn("TOTEM_TEST_PRIVATE", where)
        parts = await self.server_parts()
        self.assertEqual([(p["data"]["tool"], p["status"]) for p in parts], [("mcp-start", "done")])
        self.assertEqual(parts[0]["data"]["decision"]["reply"], "once")
        self.assertIn("echo", parts[0]["data"]["output"])
        listed = await self.servers(self.session["id"])
        self.assertEqual(listed["servers"][0]["state"], "running")
        self.assertIn("echo", listed["servers"][0]["tools"])
        self.assertEqual((await self.servers())["servers"][0]["sessions"], 1)

    async def test_always_is_pinned_to_the_exact_definition(self):
        """"always" stores a rule for that definition's hash: the same server starts in a new
        session without a question; a changed argument or variable asks again."""
        self.define({"notes": stdio_definition()})
        self.model.script(reply("first"))
        await self.prompt("start it")
        start = await self.answer("mcp-start", "always", pattern=(await self._subject()))
        await self.idle()
        rules = (await call(self.app, "permissions", query=f"projectid={self.project['id']}")).json()
        mine = [(r["tool"], r["pattern"]) for r in rules if r["layer"] == "project"]
        self.assertEqual(mine, [("mcp-start", f"notes@{start['patterns'][0].split('@')[1]}")])
        other = await self.create_session(self.project["id"])
        await self.ws.send(json.dumps({"type": "subscribe", "sessionid": other["id"]}))
        self.model.script(reply("second"))
        await call(self.app, "sessions_prompt", {"text": "again", "model": self.modelref}, ident=other["id"])
        events = await self.events_until("idle", EVENT_MS)
        self.assertNotIn("permission.ask", [e["type"] for e in events])
        self.assertEqual((await self.servers(other["id"]))["servers"][0]["state"], "running")
        old_pid = self.child_pid(self.session["id"], "notes")
        self.define({"notes": stdio_definition(EXTRA="1")})  # a changed definition
        self.model.script(reply("third"))
        await self.prompt("once more")
        again = await self.answer("mcp-start", "reject")
        self.assertEqual(again["input"]["env"], ["EXTRA"])
        self.assertEqual(again["input"]["changed"], ["the variable EXTRA was added"])
        await self.idle()
        wait_until_ended(old_pid, "the server of the old definition")
        self.assertEqual((await self.servers(self.session["id"]))["servers"][0]["state"], "refused")
        parts = await self.server_parts()
        self.assertEqual(parts[-1]["status"], "denied")
        self.assertIn("refused", parts[-1]["data"]["error"])

    async def _subject(self) -> str:
        listed = await self.servers()
        return f"notes@{listed['servers'][0]['digest']}"

    async def test_plan_mode_and_scheduled_runs_never_start_one_and_plan_denies_calls(self):
        """Plan mode and a scheduled run (even under an "always" rule) start nothing, said in the
        conversation; a server started before is there in Plan mode but its calls are denied."""
        self.define({"notes": stdio_definition()})
        subject = await self._subject()
        await call(self.app, "permissions_save", {"projectid": self.project["id"], "tool": "mcp-start",
                                                  "pattern": subject, "action": "allow"})
        self.model.script(reply("planned"))
        await self.prompt("plan", mode="plan")
        await self.idle()
        self.model.script(reply("scheduled"))
        await self.app.runs.send(dict(self.session), self.project,
                                 Prompt(text="nightly", model=self.modelref, scheduled=True))
        await self.idle()
        parts = await self.server_parts()
        self.assertEqual([p["status"] for p in parts], ["denied", "denied"])
        self.assertIn("plan mode", parts[0]["data"]["error"])
        self.assertIn("scheduled run", parts[1]["data"]["error"])
        self.assertEqual((await self.servers(self.session["id"]))["servers"][0]["state"], "not started")
        self.model.script(reply("started"))
        await self.prompt("build")
        await self.idle()
        self.model.script(reply(tool_calls=[("mcp__notes__echo", {"text": "x"})]), reply("ok"))
        await self.prompt("plan again", mode="plan")
        events = await self.idle()
        self.assertNotIn("permission.ask", [e["type"] for e in events])
        self.assertIn("plan mode does not allow mcp", tool_results(self.model.requests[-1])[0])

    async def test_a_server_that_exits_mid_call_or_hangs_ends_the_call_with_an_error(self):
        """A call whose server exits ends as an error naming the exit; a call that gets no answer
        ends at its timeout; the run goes on and the model reads both errors."""
        self.app.runs.parts.project_servers.call_timeout_s = 0.5
        self.define({"notes": stdio_definition()})
        await call(self.app, "permissions_save", {"projectid": self.project["id"], "tool": "mcp",
                                                  "pattern": "notes/*", "action": "allow"})
        self.model.script(reply(tool_calls=[("mcp__notes__hang", {})]),
                          reply(tool_calls=[("mcp__notes__fail", {})]),
                          reply(tool_calls=[("mcp__notes__die", {})]), reply("noted"))
        await self.prompt("try them")
        await self.answer("mcp-start")
        await self.idle()
        results = [tool_results(self.model.requests[index])[-1] for index in (1, 2, 3)]
        self.assertIn("did not answer tools/call within 0.5 s", results[0])
        self.assertIn("the database is locked", results[1])
        self.assertIn("exited (status 3)", results[2])
        self.assertEqual((await self.servers(self.session["id"]))["servers"][0]["state"], "ended")

    async def test_untrusted_descriptions_stay_inert_and_keys_arrive_scrubbed(self):
        """A description that claims approval has its invisible characters removed and changes
        nothing: the call still asks and no rule appears; a provider key printed by a tool
        reaches neither the model nor the stored part."""
        self.define({"notes": stdio_definition(LEAK_VALUE=KEY)})
        self.model.script(reply(tool_calls=[("mcp__notes__notes", {"topic": "x"})]),
                          reply(tool_calls=[("mcp__notes__leak", {})]), reply("ok"))
        await self.prompt("read the notes")
        start = await self.answer("mcp-start")
        # A value that holds a configured key is masked, whatever the variable's name.
        self.assertEqual(start["input"]["variables"], [{"name": "LEAK_VALUE", "masked": True}])
        self.assertNotIn(KEY, json.dumps(await self.servers()))
        await self.answer("mcp")
        await self.answer("mcp")
        await self.idle()
        description = declared(self.model.requests[0])["mcp__notes__notes"]["description"]
        self.assertIn("IMPORTANT SYSTEM NOTICE", description)
        for hidden in ("\u202e", "\u200b", "\u2066", "\x07"):
            self.assertNotIn(hidden, description)
        rules = (await call(self.app, "permissions", query=f"projectid={self.project['id']}")).json()
        self.assertEqual([r for r in rules if r["layer"] == "project"], [])
        everything = json.dumps([r.body for r in self.model.requests])
        self.assertNotIn(KEY, everything)
        self.assertIn("[secret:", tool_results(self.model.requests[2])[-1])
        stored = json.dumps((await call(self.app, "sessions_messages", ident=self.session["id"])).json())
        self.assertNotIn(KEY, stored)

    async def test_removing_the_session_stops_its_server(self):
        """A removed session's server process is gone; so are all at shutdown."""
        self.define({"notes": stdio_definition()})
        self.model.script(reply("ok"))
        await self.prompt("start")
        await self.answer("mcp-start")
        await self.idle()
        pid = self.child_pid(self.session["id"], "notes")
        other = await self.create_session(self.project["id"])
        await self.ws.send(json.dumps({"type": "subscribe", "sessionid": other["id"]}))
        self.model.script(reply("ok"))
        await call(self.app, "sessions_prompt", {"text": "start", "model": self.modelref}, ident=other["id"])
        await self.answer("mcp-start")
        await self.idle()
        other_pid = self.child_pid(other["id"], "notes")
        answer = await call(self.app, "sessions_remove", {}, ident=self.session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        wait_until_ended(pid, "the MCP server of the removed session")
        os.kill(other_pid, 0)  # the other session's server still runs
        await self.app.runs.stop_all()  # what shutdown does
        wait_until_ended(other_pid, "the MCP server at shutdown")

    async def test_bad_files_are_listed_and_shown_and_the_run_goes_on(self):
        """A file that is not JSON and a definition with a wrong field are errors shown in the
        session and listed by Projects|mcp; the other servers and the run are not affected."""
        with open(os.path.join(self.root, ".mcp.json"), "w") as handle:
            handle.write("{not json")
        self.define({"bad": {"command": ["not", "a", "string"]}, "a__b": {"command": "x"}}, ".totem/mcp.json")
        self.model.script(reply("fine"))
        await self.prompt("go")
        await self.idle()
        parts = await self.server_parts()
        errors = sorted(p["data"]["error"] for p in parts)
        self.assertEqual(len(errors), 3)
        self.assertTrue(any(".mcp.json: not valid JSON" in e for e in errors), errors)
        self.assertTrue(any("bad: command must be a non-empty string" in e for e in errors), errors)
        self.assertTrue(any("without __" in e for e in errors), errors)
        listed = await self.servers()
        self.assertEqual(listed["servers"], [])
        self.assertEqual(len(listed["invalid"]), 3)
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        self.assertEqual(stored[-1]["parts"][0]["text"], "fine")

    async def test_many_tools_are_declared_lean_until_their_schema_is_asked_for(self):
        """With 100 tools only mcp_schema is declared, listing each by name and short description;
        once the model asks for a tool's schema, that tool is declared whole."""
        self.define({"big": stdio_definition(MANY_TOOLS="100")})
        self.model.script(reply(tool_calls=[("mcp_schema", {"names": ["mcp__big__tool_007"]})]), reply("ok"))
        await self.prompt("look")
        await self.answer("mcp-start")
        await self.idle()
        first, second = declared(self.model.requests[0]), declared(self.model.requests[1])
        self.assertNotIn("mcp__big__tool_007", first)
        listing = first["mcp_schema"]["description"]
        self.assertIn("mcp__big__tool_007: Tool number 7 searches", listing)
        self.assertLess(len(listing), 100 * 120)
        self.assertIn("query", json.dumps(tool_results(self.model.requests[1])[0]))
        self.assertIn("query", second["mcp__big__tool_007"]["parameters"]["properties"])
        self.assertNotIn("mcp__big__tool_008", second)
        self.assertNotIn("mcp__big__tool_007:", second["mcp_schema"]["description"])


class HttpServerTest(McpClientCase):
    async def serve(self, mode: str) -> int:
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

    async def use(self, url: str) -> dict:
        self.define({"remote": {"type": "http", "url": url, "headers": {"X-Api-Key": HEADER_VALUE}}})
        self.model.script(reply(tool_calls=[("mcp__remote__echo", {"text": "over http"})]), reply("ok"))
        await self.prompt("call it")
        start = await self.answer("mcp-start")
        await self.answer("mcp")
        await self.idle()
        self.assertIn("echo: over http", tool_results(self.model.requests[1])[0])
        return start

    async def test_streamable_http_with_sse_answers_and_a_session(self):
        """A stateful Streamable HTTP server (SSE answers): the question shows the URL, its host
        and the header names, never their values."""
        port = await self.serve("http")
        start = await self.use(f"http://127.0.0.1:{port}/mcp")
        self.assertEqual((start["input"]["url"], start["input"]["host"], start["input"]["headers"]),
                         (f"http://127.0.0.1:{port}/mcp", "127.0.0.1", ["X-Api-Key"]))
        self.assertNotIn(HEADER_VALUE, json.dumps(start))

    async def test_stateless_streamable_http_with_json_answers(self):
        port = await self.serve("http-json")
        await self.use(f"http://127.0.0.1:{port}/mcp")

    async def test_the_older_http_sse_transport_as_a_fallback(self):
        """An endpoint that refuses the Streamable HTTP POST is reached with HTTP+SSE."""
        port = await self.serve("sse")
        await self.use(f"http://127.0.0.1:{port}/sse")

    async def test_an_unreachable_server_fails_its_start_with_the_reason(self):
        self.define({"remote": {"type": "http", "url": f"http://127.0.0.1:{free_port()}/mcp"}})
        self.model.script(reply("ok"))
        await self.prompt("call it")
        await self.answer("mcp-start")
        await self.idle()
        parts = await self.server_parts()
        self.assertEqual(parts[0]["status"], "error")
        self.assertIn("could not be reached", parts[0]["data"]["error"])
        self.assertEqual((await self.servers(self.session["id"]))["servers"][0]["state"], "failed")


def test_definitions_refuse_what_a_project_file_should_not_do():
    """Each bad definition is refused with its reason; good ones of the same file still count."""
    cases = {
        "a__b": ({"command": "x"}, "without __"),
        "-x": ({"command": "x"}, "must be 1 to 32"),
        "preload": ({"command": "x", "env": {"LD_PRELOAD": "/tmp/x.so"}}, "may not set LD_PRELOAD"),
        "path": ({"command": "x", "env": {"PATH": "/tmp"}}, "may not set PATH"),
        "cwd": ({"command": "x", "cwd": "/"}, "cwd is not supported"),
        "args": ({"command": "x", "args": "one"}, "args must be a list"),
        "newline": ({"command": "x\nrm -rf /"}, "on one line"),
        "scheme": ({"type": "http", "url": "file:///etc/passwd"}, "http:// or https://"),
        "userinfo": ({"type": "http", "url": "http://u:p@host/mcp"}, "user or password"),
        "kind": ({"type": "websocket", "url": "ws://host"}, "type must be"),
        "unknown": ({"command": "x", "autoapprove": True}, "unknown field 'autoapprove'"),
    }
    document = {"mcpServers": {name: entry for name, (entry, _) in cases.items()} | {"good": {"command": "ok"}}}
    found, problems = parse_definitions(document, ".mcp.json")
    assert [d.name for d in found] == ["good"]
    reasons = {p.server: p.error for p in problems}
    for name, (_entry, reason) in cases.items():
        assert reason in reasons[name], (name, reasons[name])
    assert parse_definitions([], "f")[1][0].error.startswith("the file must hold")


def test_the_digest_follows_every_part_of_a_definition_and_its_files():
    """The pin changes with each part of the definition and with each file's path or content;
    the definition's own digest does not follow the files."""
    base = {"command": "x", "args": ["a"], "env": {"K": "v"}}
    variants = [base, base | {"args": ["b"]}, base | {"env": {"K": "w"}}, base | {"command": "y"},
                {"type": "http", "url": "http://h/mcp"}, {"type": "http", "url": "http://h/mcp", "headers": {"A": "1"}}]
    definitions = [parse_definitions({"mcpServers": {"s": v}}, "f")[0][0] for v in variants]
    first = definitions[0]
    pinned = [first.pinned((("srv.sh", "1" * 64),)), first.pinned((("srv.sh", "2" * 64),)),
              first.pinned((("other.sh", "1" * 64),)), first.pinned((("a.sh", "1" * 64), ("srv.sh", "1" * 64)))]
    digests = {definition.digest for definition in definitions + pinned}
    assert len(digests) == len(variants) + len(pinned)
    assert {definition.definition_digest for definition in pinned} == {first.definition_digest}
    assert first.pinned((("b", "2"), ("a", "1"))).digest == first.pinned((("a", "1"), ("b", "2"))).digest


def test_clean_text_removes_control_and_invisible_characters():
    assert clean_text("a\u200bb\u202ec\x1b[31md\ttab\nline", 100) == "abc[31md tab line"
    assert clean_text("x" * 50, 10) == "x" * 9 + "…"
    assert clean_text(None, 10) == ""


class ClientQuirksTest(unittest.IsolatedAsyncioTestCase):
    """The client against a scripted stdio server with the quirks of real ones."""

    def definition(self, **env) -> ServerDefinition:
        script = os.path.join(os.path.dirname(SERVER), "scripted_server.py")
        return ServerDefinition("quirky", ".mcp.json", "stdio", command=sys.executable, args=(script,),
                                env=tuple(sorted(env.items())))

    async def connect(self, **env) -> McpClient:
        client = McpClient(self.definition(**env))
        await client.start(tempfile.gettempdir())
        self.addAsyncCleanup(client.close)
        return client

    async def test_banner_sorted_keys_server_ping_and_pages(self):
        """A banner line is skipped, sorted keys and an empty version are fine, the server's own
        ping is answered (it sends the first page only then), and both pages are read."""
        client = await self.connect()
        self.assertEqual((client.version, client.server_info["version"]), ("2025-06-18", ""))
        tools = await client.list_tools()
        self.assertEqual([tool["name"] for tool in tools], ["first", "second.page"])
        result = await client.call_tool("first", {})
        self.assertEqual(result_text(result), "called\n[image image/png, about 6 bytes, not shown]\n[link file:///x x]")

    async def test_each_supported_revision_and_an_unknown_one(self):
        for version in ("2025-03-26", "2025-11-25", "2024-11-05"):
            client = await self.connect(VERSION=version)
            self.assertEqual(client.version, version)
        with self.assertRaisesRegex(McpError, "speaks protocol '1999-01-01'"):
            await self.connect(VERSION="1999-01-01")

    async def test_a_server_that_stops_answering_times_out_and_an_unknown_program_fails(self):
        client = await self.connect(BEHAVIOUR="garbage")
        with self.assertRaisesRegex(McpError, "did not answer tools/list within 0.3 s"):
            await client.request("tools/list", timeout_s=0.3)
        missing = McpClient(ServerDefinition("gone", ".mcp.json", "stdio", command="no-such-program-here"))
        with self.assertRaisesRegex(McpError, "no-such-program-here was not found"):
            await missing.start(tempfile.gettempdir())


class ForgeServerTest(McpClientCase):
    """With forgemcp, a Total.js project is offered the MCP server of Forge, asked like any."""

    settings = {"forgemcp": "true", "forgeurl": "http://127.0.0.1:9/docs"}

    async def test_forge_is_asked_before_it_starts_in_total_js_projects_only(self):
        self.model.script(reply("plain project"))
        await self.prompt("hello")
        events = await self.idle()
        self.assertNotIn("permission.ask", [e["type"] for e in events])  # not a Total.js project
        with open(os.path.join(self.root, "package.json"), "w") as handle:
            json.dump({"dependencies": {"total4": "0.0.90"}}, handle)
        self.model.script(reply("total.js project"))
        await self.prompt("hello again")
        start = await self.answer("mcp-start", "reject")
        self.assertEqual((start["input"]["server"], start["input"]["file"]), ("forge", "config.ini"))
        self.assertEqual((start["input"]["url"], start["input"]["host"]), ("http://127.0.0.1:9/docs/$mcp/", "127.0.0.1"))
        await self.idle()
        listed = (await self.servers(self.session["id"]))["servers"]
        self.assertEqual([(s["server"], s["file"], s["state"]) for s in listed], [("forge", "config.ini", "refused")])
        parts = await self.server_parts()
        self.assertEqual(parts[-1]["status"], "denied")
