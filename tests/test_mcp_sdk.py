"""Interop with the official MCP Python SDK (`mcp` on PyPI) as the real client of `POST /$mcp/`.

Both major versions drive the same scenario (tests/mcp_clients/scenario.py) against the real
server on a loopback port and the scripted model: mcp 1.x (requirements-dev.txt) in this process
with `streamable_http_client` + `ClientSession`, mcp 2.x (requirements-mcp2.txt, in the second
virtual environment `make test` builds) as a subprocess running tests/mcp_clients/sdk2_client.py
with the SDK's default `Client` (it probes `server/discover` first, then falls back to
`initialize`). Without a token (a loopback caller) and with one (a Bearer header on the
transport); a wrong token does not connect.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from importlib.metadata import version

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.mcp_clients import scenario
from tests.model_server import ScriptedModel, Stall, reply, text_chunks
from tests.utils import MS, TOKEN, TotemCase, call

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The second environment lives inside the first (.venv/mcp2): found from the running python, so
# that a checkout without its own .venv runs with another's.
MCP2_PYTHON = os.path.join(sys.prefix, "mcp2", "bin", "python")
MCP2_CLIENT = os.path.join(ROOT, "tests", "mcp_clients", "sdk2_client.py")
MCP2_TIMEOUT_MS = 30_000
TOOLS = ["Projects_list", "Sessions_list", "Sessions_create", "Sessions_read", "Sessions_messages",
         "Sessions_prompt", "Sessions_abort", "Sessions_diff"]
KEY = "sk-test-NEVER-LEAK-0123456789abcdef"


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups: anyio task groups wrap the real one."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


class McpSdkCase(TotemCase):
    """A Totem with the MCP route, a project "proj" opened through the REST API, and a provider
    saved with the scripted model's URL. Writing files is allowed by a rule, so that the
    session's prompt changes a file without a question to the person."""

    settings: dict = {"mcp": "true"}
    rules = {"files": "allow write **"}
    token: str | None = None

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.model = await ScriptedModel().__aenter__()
        self.addAsyncCleanup(self.model.__aexit__, None, None, None)
        self.root = self.folder("proj")
        self.project = await self.rest("projects_open", {"path": self.root})
        self.provider = await self.rest("providers_save", {"name": "Scripted", "kind": "openai",
                                                            "url": self.model.url, "key": KEY})
        self.modelref = f"{self.provider['id']}/scripted-model"
        self.url = f"http://127.0.0.1:{self.app.port}/$mcp/"

    async def rest(self, name: str, body=None, ident: str | None = None):
        answer = await call(self.app, name, body, ident=ident, headers=bearer(self.token) if self.token else None)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    def script_model(self):
        """The first prompt writes the notes and answers; the second stalls until aborted."""
        self.model.script(reply(tool_calls=[("write", {"path": scenario.NOTES, "content": scenario.NOTES_TEXT})]),
                          reply("I wrote the notes."),
                          Stall(events=text_chunks("thinking")))

    # -- the clients

    async def sdk1(self, headers: dict, run_scenario: bool = True) -> dict:
        """The 1.x client in this process, its HTTP client sending `headers`; the same JSON as
        sdk2_client.py prints."""
        wire: list = []
        out: dict = {"sdk": version("mcp"), "wire": wire}
        async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(10.0),
                                     event_hooks={"response": [scenario.wire_hook(wire)]}) as http:
            try:
                async with streamable_http_client(self.url, http_client=http) as (read, write, _session_id), \
                        ClientSession(read, write) as session:
                    initialized = await session.initialize()
                    out["connected"] = True
                    out["protocolVersion"] = initialized.protocolVersion
                    out["serverInfo"] = initialized.serverInfo.model_dump(mode="json", exclude_none=True)
                    out["instructions"] = initialized.instructions
                    if run_scenario:
                        out["record"] = await scenario.run(session, self.project["id"], self.modelref)
            except Exception as exc:
                if out.get("connected"):
                    raise
                out["connected"] = False
                out["error"] = [f"{type(leaf).__module__}.{type(leaf).__name__}: {leaf}" for leaf in leaves(exc)]
        return out

    async def sdk2(self, headers: dict, run_scenario: bool = True) -> dict:
        """The 2.x client: sdk2_client.py under the second environment's python."""
        if not os.path.exists(MCP2_PYTHON):
            self.fail(f"{MCP2_PYTHON} is missing: the mcp 2.x SDK lives in a second virtual environment; "
                      f"build it with `make .venv/mcp2/.installed` (`make test` does)")
        args = {"url": self.url, "headers": headers}
        if run_scenario:
            args |= {"projectid": self.project["id"], "modelref": self.modelref}
        process = await asyncio.create_subprocess_exec(
            MCP2_PYTHON, "-X", "dev", "-W", "error", MCP2_CLIENT, json.dumps(args),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={name: value for name, value in os.environ.items() if name != "PYTHONPATH"})
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), MCP2_TIMEOUT_MS * MS)
        except TimeoutError:
            process.kill()
            await process.communicate()
            self.fail(f"the mcp 2.x client did not finish in {MCP2_TIMEOUT_MS} ms")
        self.assertEqual(process.returncode, 0, stderr.decode(errors="replace"))
        return json.loads(stdout)

    # -- the checks

    def check_connected(self, out: dict, major: str):
        """The handshake: the SDK offers 2025-11-25 (both majors), Totem echoes it."""
        self.assertTrue(out["sdk"].startswith(major + "."), out["sdk"])
        self.assertTrue(out["connected"], out.get("error"))
        self.assertEqual(out["protocolVersion"], "2025-11-25")
        self.assertEqual(out["serverInfo"], {"name": "totem", "version": "0.1.0"})
        self.assertIn("coding agent", out["instructions"])
        posts = [(rpc, status) for method, rpc, status in out["wire"] if method == "POST"]
        self.assertEqual(posts[0], ("initialize", 200), out["wire"])
        self.assertEqual(posts[1], ("notifications/initialized", 202), out["wire"])
        # The SDK opens the server's event stream after the handshake: Totem has none (405).
        self.assertTrue(all(status == 405 for method, _rpc, status in out["wire"] if method == "GET"), out["wire"])
        # It ends the MCP session on exit (a GET may still be answered after that).
        self.assertEqual([w for w in out["wire"] if w[0] != "GET"][-1], ["DELETE", None, 204], out["wire"])

    def check_probe(self, out: dict):
        """The 2.x client's first request is the `server/discover` probe (revision 2026-07-28);
        a JSON-RPC error, in a 200 (-32601) or a 4xx answer, sends it back to `initialize`. The
        probe carries no Mcp-Session-Id, so Totem answers it 400 (-32600, "Mcp-Session-Id is
        required") before it looks at the method; both make the SDK fall back. Drops it from
        `wire` for check_connected."""
        method, rpc, status = out["wire"][0]
        self.assertEqual((method, rpc), ("POST", "server/discover"), out["wire"])
        self.assertIn(status, (200, 400), out["wire"])
        self.assertNotIn("server/discover", [rpc for _method, rpc, _status in out["wire"][1:]])
        out["wire"] = out["wire"][1:]

    def check_scenario(self, out: dict):
        record = out["record"]
        tools = record["tools"]
        self.assertEqual(sorted(tool["name"] for tool in tools), sorted(TOOLS))
        self.assertIsNone(record["next_cursor"])
        for tool in tools:
            self.assertEqual(tool["inputSchema"]["type"], "object", tool)
            self.assertNotIn("outputSchema", tool)
        prompt_schema = next(tool for tool in tools if tool["name"] == "Sessions_prompt")["inputSchema"]
        self.assertEqual(set(prompt_schema["properties"]), {"id", "text", "model", "mode"})
        self.assertEqual(sorted(prompt_schema["required"]), ["id", "text"])
        self.assertEqual([p["id"] for p in record["projects"]], [self.project["id"]])
        created = record["created"]
        self.assertEqual((created["projectid"], created["name"], created["status"]),
                         (self.project["id"], "Over MCP", "idle"))
        self.assertIn(created["id"], [s["id"] for s in record["listed"]["sessions"]])
        self.assertIsInstance(record["prompted"]["messageid"], str)
        self.assertEqual(record["idle"]["status"], "idle")
        # The messages: the prompt, the model's write, its answer.
        messages = record["messages"]["messages"]
        self.assertEqual([m["role"] for m in messages], ["user", "assistant", "assistant"])
        self.assertEqual(messages[0]["id"], record["prompted"]["messageid"])
        self.assertIn(scenario.FIRST_PROMPT, json.dumps(messages[0]))
        write = messages[1]["parts"][0]
        self.assertEqual((write["kind"], write["status"]), ("tool", "done"), write)
        self.assertEqual(write["data"]["input"], {"path": scenario.NOTES, "content": scenario.NOTES_TEXT})
        self.assertIn("I wrote the notes.", json.dumps(messages[2]))
        self.assertEqual(messages[2]["model"], self.modelref)
        # The diff: the file the model wrote, with who allowed it.
        [changed] = record["diff"]
        self.assertEqual(changed["path"], scenario.NOTES)
        self.assertIn("+" + scenario.NOTES_TEXT.strip(), changed["patch"])
        allowed = changed["changes"][0]["allowed"]
        self.assertEqual((allowed["by"], allowed["rule"]["tool"], allowed["rule"]["pattern"]), ("rule", "write", "**"),
                         changed["changes"])
        with open(os.path.join(self.root, scenario.NOTES)) as handle:
            self.assertEqual(handle.read(), scenario.NOTES_TEXT)
        # The second prompt runs until Sessions_abort stops it.
        self.assertEqual(record["running"]["status"], "running")
        streaming = record["streaming"]["messages"]
        self.assertEqual([m["role"] for m in streaming[3:]], ["user", "assistant"])
        self.assertIn(scenario.SECOND_PROMPT, json.dumps(streaming[3]))
        self.assertEqual(record["abort"], {"content": [{"type": "text", "text": json.dumps(created["id"])}],
                                           "isError": False})
        self.assertEqual(record["stopped"]["status"], "aborted")
        # Failures are isError results with a text the model can read.
        self.assertEqual(record["unknown_tool"]["code"], -32602, record["unknown_tool"])
        self.assertIn("Sessions_delete", record["unknown_tool"]["message"])
        # An unknown method is -32601; arguments that fail a tool's schema are its isError result.
        self.assertEqual(record["unknown_method"]["code"], -32601, record["unknown_method"])
        self.assertIn("resources/list", record["unknown_method"]["message"])
        for name, words in (("abort_idle", "nothing is running"), ("read_missing", "nosuchsession"),
                            ("prompt_without_text", "text"), ("invalid_arguments", "invalid arguments for Sessions_read")):
            result = record[name]
            self.assertIs(result.get("isError"), True, (name, result))
            [block] = result["content"]
            self.assertEqual(block["type"], "text", (name, result))
            self.assertIn(words, block["text"], (name, result))
        self.assertIn("failed (400)", record["abort_idle"]["content"][0]["text"])
        # What the scripted model was sent.
        self.assertEqual(len(self.model.requests), 3)
        self.assertIn(scenario.FIRST_PROMPT, json.dumps(self.model.requests[0].body["messages"]))
        self.assertIn(scenario.SECOND_PROMPT, json.dumps(self.model.requests[2].body["messages"]))

    def check_refused(self, out: dict, status: int):
        """The client raised before it connected, and every request it made got `status`."""
        self.assertFalse(out["connected"], out)
        self.assertTrue(out["error"], out)
        self.assertIn("initialize", [rpc for _method, rpc, _code in out["wire"]], out["wire"])
        self.assertTrue(all(code == status for _method, _rpc, code in out["wire"]), out["wire"])


class SdkLoopbackTest(McpSdkCase):
    """No token: a caller on this computer's loopback is served."""

    async def test_sdk1_scenario(self):
        """mcp 1.x: initialize (2025-11-25), the eight tools, a prompt, its messages and diff, abort."""
        self.script_model()
        out = await self.sdk1({})
        self.check_connected(out, "1")
        self.check_scenario(out)

    async def test_sdk2_scenario(self):
        """mcp 2.x in its default mode ("auto"): the server/discover probe gets an error and the
        client falls back to initialize; then the same scenario."""
        self.script_model()
        out = await self.sdk2({})
        self.check_probe(out)
        self.check_connected(out, "2")
        self.check_scenario(out)

    async def test_origin_refused(self):
        """A client whose requests carry an Origin (a web page's) does not connect: 403."""
        for sdk in (self.sdk1, self.sdk2):
            with self.subTest(sdk=sdk.__name__):
                self.check_refused(await sdk({"Origin": "http://evil.example"}, run_scenario=False), 403)


class SdkTokenTest(McpSdkCase):
    """A token is configured: the SDKs connect with `Authorization: Bearer <token>` on their
    transport, and not with a wrong one."""

    settings = {"mcp": "true", "token": TOKEN}
    token = TOKEN

    async def test_sdk1_scenario_with_token(self):
        self.script_model()
        out = await self.sdk1(bearer(TOKEN))
        self.check_connected(out, "1")
        self.check_scenario(out)

    async def test_sdk2_scenario_with_token(self):
        self.script_model()
        out = await self.sdk2(bearer(TOKEN))
        self.check_probe(out)
        self.check_connected(out, "2")
        self.check_scenario(out)

    async def test_wrong_or_missing_token_does_not_connect(self):
        """Each SDK fails to connect with a wrong token and without one (401 on every request);
        the right token still connects afterwards (fewer failures than `failures`)."""
        for sdk in (self.sdk1, self.sdk2):
            with self.subTest(sdk=sdk.__name__):
                self.check_refused(await sdk(bearer("not-the-token"), run_scenario=False), 401)
                self.check_refused(await sdk({}, run_scenario=False), 401)
        out = await self.sdk2(bearer(TOKEN), run_scenario=False)
        self.check_probe(out)
        self.check_connected(out, "2")
        out = await self.sdk1(bearer(TOKEN), run_scenario=False)
        self.check_connected(out, "1")


class SdkOffTest(McpSdkCase):
    """With mcp = false the route does not exist: both SDKs fail to connect, every request
    they make answered 404 (not 405, which would say that the route is there)."""

    settings = {"mcp": "false"}

    async def test_route_off_is_404_to_both_sdks(self):
        for sdk in (self.sdk1, self.sdk2):
            with self.subTest(sdk=sdk.__name__):
                self.check_refused(await sdk({}, run_scenario=False), 404)


class SdkBlockedTest(McpSdkCase):
    """`failures` wrong tokens block the caller: then even the right token gets 429."""

    settings = {"mcp": "true", "token": TOKEN, "failures": "2"}
    token = TOKEN

    async def test_blocked_after_failures(self):
        # The 2.x client sends two requests with the wrong token (the probe, then initialize).
        self.check_refused(await self.sdk2(bearer("not-the-token"), run_scenario=False), 401)
        for sdk in (self.sdk1, self.sdk2):
            with self.subTest(sdk=sdk.__name__):
                self.check_refused(await sdk(bearer(TOKEN), run_scenario=False), 429)

