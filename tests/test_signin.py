"""The token by default, the one-time sign-in codes, `totem token`, the refusal of proxied
requests without a token, and the MCP-only tokens (they open `/$mcp/` and no other route)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import unittest
from urllib.parse import urlsplit

from websockets.exceptions import InvalidStatus

from tests.test_mcp import ACCEPT, McpCase
from tests.utils import MS, TOKEN, TotemCase, call, open_ws, request
from totem import cli
from totem.app import App
from totem.config import parse_values
from totem.http import auth
from totem.http.api import account
from totem.http.routes import action_table
from totem.security.vault import VaultError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "totem.py")


def _config(tmp: str, **values):
    raw = {"listen": "127.0.0.1", "port": "0", "data": os.path.join(tmp, "data")} | values
    return parse_values(raw, tmp)


class TokenFileTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-signin-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.token_path = os.path.join(self.tmp, "data", auth.TOKEN_FILE)

    async def test_first_start_makes_a_private_token_and_keeps_it(self):
        """Without a token in the config the first start makes one in <data>/token (mode 0600)
        and every later start uses the same; a request without it is 401, with it 200."""
        app = App(_config(self.tmp))
        made = app.config.token
        self.assertGreaterEqual(len(made), 32)
        self.assertEqual(stat.S_IMODE(os.stat(self.token_path).st_mode), 0o600)
        with open(self.token_path) as handle:
            self.assertEqual(handle.read().strip(), made)
        self.assertEqual(App(_config(self.tmp)).config.token, made)
        await app.start()
        try:
            self.assertEqual((await call(app, "projects")).status, 401)
            self.assertEqual((await call(app, "projects", headers={"Authorization": f"Bearer {made}"})).status, 200)
            self.assertTrue((await call(app, "account", headers={"Authorization": f"Bearer {made}"})).json()["token"])
        finally:
            await app.stop()

    async def test_a_token_file_others_can_read_stops_the_start(self):
        """A token file with group or other bits, or a link, is refused rather than used."""
        App(_config(self.tmp))
        os.chmod(self.token_path, 0o644)
        with self.assertRaisesRegex(VaultError, "can be read by other users"):
            App(_config(self.tmp))
        os.remove(self.token_path)
        os.symlink("/etc/hostname", self.token_path)
        with self.assertRaisesRegex(VaultError, "symbolic link"):
            App(_config(self.tmp))

    async def test_token_none_is_tokenless_and_makes_no_file(self):
        """`token = none` serves without sign-in and writes no token file; a configured token is
        used as it is."""
        app = App(_config(self.tmp, token="none"))
        self.assertEqual(app.config.token, "")
        self.assertFalse(os.path.exists(self.token_path))
        self.assertEqual(App(_config(self.tmp, token=TOKEN)).config.token, TOKEN)
        self.assertFalse(os.path.exists(self.token_path))


class SigninCodeTest(TotemCase):
    settings = {"token": TOKEN}

    async def login(self, body: dict):
        return await call(self.app, "login", body)

    async def test_a_code_signs_in_once(self):
        """A fresh code sets the login cookie, which opens the API; the same code a second time
        is 401 and sets nothing."""
        code = self.app.perimeter.codes.new()
        first = await self.login({"code": code})
        self.assertEqual(first.status, 200, first.body)
        cookie = first.header("set-cookie").split(";")[0]
        self.assertEqual((await call(self.app, "projects", headers={"Cookie": cookie})).status, 200)
        again = await self.login({"code": code})
        self.assertEqual(again.status, 401)
        self.assertEqual(again.json()[0]["name"], "code")
        self.assertIsNone(again.header("set-cookie"))

    async def test_forged_and_foreign_codes_are_refused(self):
        """A code with another MAC, one made with another token, a truncated one and garbage
        are 401 and count as failures."""
        code = self.app.perimeter.codes.new()
        issued, nonce, mac = code.split(".")
        forged = (f"{issued}.{nonce}.{'0' * len(mac)}", auth.new_signin_code("another-token-another-token"),
                  code[:-1], f"{issued}.{nonce}", "zz.yy.xx", ".", "")
        for given in forged:
            with self.subTest(given=given):
                answer = await self.login({"code": given})
                self.assertIn(answer.status, (400, 401), answer.body)
                self.assertIsNone(answer.header("set-cookie"))

    async def test_both_or_neither_is_400(self):
        code = self.app.perimeter.codes.new()
        self.assertEqual((await self.login({"code": code, "token": TOKEN})).status, 400)
        self.assertEqual((await self.login({})).status, 400)
        self.assertEqual((await self.login({"code": 5})).status, 400)

    async def test_the_login_page_takes_the_code_from_the_address(self):
        """/login?code= serves the sign-in page (its script sends the code and drops it from the
        address); the page itself sets no cookie on a GET."""
        answer = await request(self.app, "GET", f"/login?code={self.app.perimeter.codes.new()}")
        self.assertEqual(answer.status, 200)
        self.assertIsNone(answer.header("set-cookie"))
        with open(os.path.join(ROOT, "static", "login.js")) as handle:
            script = handle.read()
        self.assertIn("get('code')", script)
        self.assertIn("history.replaceState", script)


def test_codes_expire_and_die_with_the_server():
    """A code is good within SIGNIN_CODE_TTL_S of being made, and only when made after the server
    started: a restart forgets which codes were used, so it refuses every older one."""
    now = [1_000_000.0]
    codes = auth.SigninCodes(TOKEN, clock=lambda: now[0])
    late = codes.new()
    now[0] += auth.SIGNIN_CODE_TTL_S + 1
    assert not codes.redeem(late)
    assert codes.redeem(codes.new())
    before_start = auth.new_signin_code(TOKEN, now[0] - 5)
    restarted = auth.SigninCodes(TOKEN, clock=lambda: now[0])
    assert not restarted.redeem(before_start)
    future = auth.new_signin_code(TOKEN, now[0] + 60)
    assert not restarted.redeem(future)
    assert not auth.SigninCodes("", clock=lambda: now[0]).redeem(auth.new_signin_code("", now[0]))


class ProcessSigninTest(unittest.IsolatedAsyncioTestCase):
    """The real start: `python totem.py` prints a working sign-in address, `totem token` another."""

    async def asyncSetUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-signin-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.config = os.path.join(self.tmp, "config.ini")
        with open(self.config, "w") as handle:
            handle.write(f"[totem]\nport = 0\ndata = {self.tmp}/data\n")

    async def _login(self, url: str) -> int:
        parts = urlsplit(url)
        code = parts.query.removeprefix("code=")
        host, port = parts.hostname, parts.port

        def post() -> int:
            import urllib.error
            import urllib.request
            sent = urllib.request.Request(f"http://{host}:{port}/api/login", data=json.dumps({"code": code}).encode(),
                                          headers={"Content-Type": "application/json"}, method="POST")
            try:
                with urllib.request.urlopen(sent, timeout=10) as answer:
                    return answer.status
            except urllib.error.HTTPError as exc:
                return exc.code
        return await asyncio.to_thread(post)

    async def test_the_start_and_totem_token_print_addresses_that_sign_in(self):
        env = {key: value for key, value in os.environ.items() if key != "PYTHONASYNCIODEBUG"}
        process = await asyncio.create_subprocess_exec(
            sys.executable, LAUNCHER, "--config", self.config, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, stdin=asyncio.subprocess.DEVNULL)
        try:
            lines = [await asyncio.wait_for(process.stdout.readline(), 10_000 * MS) for _ in range(3)]
            address = lines[1].decode().rsplit(" ", 1)[-1].strip()
            self.assertIn("/login?code=", address)
            self.assertEqual(await self._login(address), 200)
            self.assertEqual(await self._login(address), 401)  # once
            # The config says port 0: `totem token` must be told where it listens to build its URL;
            # the code itself is what matters here.
            printed = await asyncio.to_thread(subprocess.run, [sys.executable, LAUNCHER, "token", "--config", self.config],
                                              capture_output=True, text=True, timeout=30)
            self.assertEqual(printed.returncode, 0, printed.stderr)
            code = printed.stdout.strip().rsplit("code=", 1)[1]
            base = address.split("/login", 1)[0]
            self.assertEqual(await self._login(f"{base}/login?code={code}"), 200)
        finally:
            process.terminate()
            await process.wait()


class TokenCommandTest(unittest.TestCase):
    def setUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-signin-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def run_token(self, text: str) -> subprocess.CompletedProcess:
        path = os.path.join(self.tmp, "config.ini")
        with open(path, "w") as handle:
            handle.write(text)
        return subprocess.run([sys.executable, LAUNCHER, "token", "--config", path], capture_output=True,
                              text=True, timeout=30)

    def test_without_a_token_file_yet_or_tokenless_it_says_so(self):
        first = self.run_token(f"[totem]\ndata = {self.tmp}/data\n")
        self.assertEqual(first.returncode, 1)
        self.assertIn("start Totem once", first.stderr)
        self.assertEqual(first.stdout, "")
        none = self.run_token(f"[totem]\ndata = {self.tmp}/data\ntoken = none\n")
        self.assertEqual(none.returncode, 1)
        self.assertIn("token = none", none.stderr)

    def test_it_prints_a_code_of_the_token_file_never_the_token(self):
        App(_config(self.tmp))  # makes <data>/token
        with open(os.path.join(self.tmp, "data", auth.TOKEN_FILE)) as handle:
            token = handle.read().strip()
        printed = self.run_token(f"[totem]\ndata = {self.tmp}/data\nport = 8471\n")
        self.assertEqual(printed.returncode, 0, printed.stderr)
        self.assertTrue(printed.stdout.startswith("http://127.0.0.1:8471/login?code="), printed.stdout)
        self.assertNotIn(token, printed.stdout + printed.stderr)

    def test_port_0_needs_an_address(self):
        """With `port = 0` the server picks its port: `totem run` asks for --url (a usage error,
        not a connection to port 0) and `totem token` prints the path to open."""
        App(_config(self.tmp))
        path = os.path.join(self.tmp, "config.ini")
        with open(path, "w") as handle:
            handle.write(f"[totem]\ndata = {self.tmp}/data\nport = 0\n")
        result = subprocess.run([sys.executable, LAUNCHER, "run", "--config", path, "hello"],
                                capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 2)
        self.assertIn("port = 0", result.stderr)
        self.assertIn("--url", result.stderr)
        printed = self.run_token(f"[totem]\ndata = {self.tmp}/data\nport = 0\n")
        self.assertEqual(printed.returncode, 0, printed.stderr)
        self.assertTrue(printed.stdout.startswith("/login?code="), printed.stdout)

    def test_run_reads_the_token_file_and_takes_no_abbreviated_option(self):
        """`totem run` finds the data folder's token by default; `--token X` is not read as
        `--token-file X` (no abbreviations): a usage error, and X is never printed."""
        App(_config(self.tmp))
        config = parse_values({"data": os.path.join(self.tmp, "data")}, self.tmp)
        import argparse
        with open(os.path.join(self.tmp, "data", auth.TOKEN_FILE)) as handle:
            self.assertEqual(cli.read_token(argparse.Namespace(token_file=None), config), handle.read().strip())
        secret_path = os.path.join(self.tmp, "data", auth.TOKEN_FILE)
        for option in ("--token", "--tok", "--token-f"):
            result = subprocess.run([sys.executable, LAUNCHER, "run", option, secret_path, "hello"],
                                    capture_output=True, text=True, timeout=30)
            self.assertEqual(result.returncode, 2, option)
            self.assertIn("unrecognized arguments", result.stderr)
            with open(secret_path) as handle:
                self.assertNotIn(handle.read().strip(), result.stdout + result.stderr)


class ForwardedTest(TotemCase):
    async def test_tokenless_requests_through_a_proxy_are_refused(self):
        """Without a token, a request that names a client behind a proxy is not local: 403 on
        every route, the API, pages, the WebSocket and MCP alike."""
        for header in ({"X-Forwarded-For": "10.0.0.9"}, {"Forwarded": "for=10.0.0.9"}, {"X-Real-IP": "10.0.0.9"},
                       {"X-Forwarded-For": "127.0.0.1"}):
            with self.subTest(header=header):
                for path in ("/api/projects", "/", "/api/account"):
                    answer = await request(self.app, "GET", path, headers=header)
                    self.assertEqual(answer.status, 403, path)
                    self.assertIn(b"proxy", answer.body)
                with self.assertRaises(InvalidStatus) as refused:
                    await open_ws(self.app, additional_headers=header)
                self.assertEqual(refused.exception.response.status_code, 403)
        self.assertEqual((await call(self.app, "projects")).status, 200)


class ForwardedWithTokenTest(TotemCase):
    settings = {"token": TOKEN}

    async def test_with_a_token_a_proxied_request_signs_in_as_usual(self):
        answer = await call(self.app, "projects", headers={"Authorization": f"Bearer {TOKEN}",
                                                           "X-Forwarded-For": "10.0.0.9"})
        self.assertEqual(answer.status, 200)


MCP_TOKEN = "mcp-only-token-of-the-config-file"


class McpTokenTest(McpCase):
    settings = {"mcp": "true", "token": TOKEN, "mcptoken": MCP_TOKEN}
    owner = {"Authorization": f"Bearer {TOKEN}"}

    async def make_token(self) -> dict:
        answer = await call(self.app, "mcptokens_create", {"name": "my editor"}, headers=self.owner)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    async def test_a_token_made_in_settings_is_shown_once_and_stored_as_a_digest(self):
        made = await self.make_token()
        self.assertTrue(made["token"].startswith("mcp-"))
        listed = (await call(self.app, "mcptokens_list", headers=self.owner)).json()
        self.assertEqual([(row["id"], row["name"]) for row in listed["tokens"]], [(made["id"], "my editor")])
        self.assertTrue(listed["config"])
        self.assertNotIn(made["token"], json.dumps(listed))
        database = os.path.join(self.tmp, "data")
        for name in os.listdir(database):
            path = os.path.join(database, name)
            if os.path.isfile(path):
                with open(path, "rb") as handle:
                    self.assertNotIn(made["token"].encode(), handle.read(), name)
        with sqlite3.connect(os.path.join(database, "totem.db")) as conn:
            self.assertEqual(conn.execute("SELECT hash FROM mcptokens").fetchone()[0],
                             auth.mcp_token_digest(made["token"]))
        self.assertTrue((await call(self.app, "account", headers=self.owner)).json()["mcptokens"])

    async def test_mcp_tokens_open_the_mcp_route(self):
        made = await self.make_token()
        for token in (made["token"], MCP_TOKEN, TOKEN):
            with self.subTest(token=token[:8]):
                self.auth = {"Authorization": f"Bearer {token}"}
                await self.initialize()

    async def test_mcp_tokens_open_no_other_route(self):
        """With an MCP-only token every action of the API (permission replies, rules, mode and
        auto-accept among them), the pages, attachments and the WebSocket are 401."""
        made = await self.make_token()
        for token in (made["token"], MCP_TOKEN):
            bearer = {"Authorization": f"Bearer {token}"}
            for name, action in sorted(action_table().items()):
                if name in ("login", "logout"):  # the sign-in actions read no Authorization header
                    continue
                path = f"/api/{name}" + ("/x" if action.takes_id else "")
                answer = await request(self.app, "POST", path, {}, headers=bearer)
                self.assertEqual(answer.status, 401, (name, answer.body))
                self.assertIn(auth.MCP_ONLY.encode(), answer.body, name)
            for path in ("/api/permissions_reply/x", "/attachments/x/"):
                self.assertEqual((await request(self.app, "GET", path, headers=bearer)).status, 401, path)
            with self.assertRaises(InvalidStatus) as refused:
                await open_ws(self.app, additional_headers=bearer)
            self.assertEqual(refused.exception.response.status_code, 401)

    async def test_a_removed_token_opens_nothing(self):
        made = await self.make_token()
        removed = await call(self.app, "mcptokens_remove", {}, ident=made["id"], headers=self.owner)
        self.assertEqual(removed.status, 200)
        self.auth = {"Authorization": f"Bearer {made['token']}"}
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
        self.assertEqual((await self.post(init)).status, 401)
        self.assertEqual((await call(self.app, "mcptokens_remove", {}, ident=made["id"], headers=self.owner)).status,
                         404)

    async def test_bad_input_makes_no_token(self):
        for body in ({}, {"name": ""}, {"name": "x" * (account.MAX_MCP_TOKEN_NAME_CHARS + 1)}, {"name": 3},
                     {"name": "a", "extra": 1}):
            with self.subTest(body=body):
                self.assertEqual((await call(self.app, "mcptokens_create", body, headers=self.owner)).status, 400)
        self.assertEqual((await call(self.app, "mcptokens_list", headers=self.owner)).json()["tokens"], [])

    async def test_an_mcp_token_cannot_make_more_tokens(self):
        self.assertEqual((await call(self.app, "mcptokens_create", {"name": "x"},
                                     headers={"Authorization": f"Bearer {MCP_TOKEN}"})).status, 401)


class McpTokenTokenlessTest(TotemCase):
    settings = {"mcp": "true", "mcptoken": MCP_TOKEN}

    async def test_even_tokenless_an_mcp_token_opens_no_other_route(self):
        bearer = {"Authorization": f"Bearer {MCP_TOKEN}"}
        answer = await call(self.app, "permissions_reply", {"reply": "always"}, ident="x", headers=bearer)
        self.assertEqual(answer.status, 401)
        self.assertEqual((await call(self.app, "projects")).status, 200)
        mcp = await request(self.app, "POST", "/$mcp/", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                                          "params": {}}, headers=bearer | {"Accept": ACCEPT})
        self.assertEqual(mcp.status, 200)


class McpToolsTest(McpCase):
    settings = {"mcp": "true"}

    async def test_no_tool_answers_questions_or_changes_rules_mode_or_autoaccept(self):
        """Whatever the credential, the MCP tools cannot reply to a question, store a rule, set
        auto-accept or widen Plan to Build."""
        session, _ = await self.initialize()
        tools = (await self.rpc(session, "tools/list"))["result"]["tools"]
        for tool in tools:
            text = json.dumps(tool).lower()
            for word in ("reply", "rule", "autoaccept", "permission"):
                self.assertNotIn(f'"{word}', text, tool["name"])
        project = await self.open_project()
        created = json.loads((await self.tool(session, "Sessions_create", {"projectid": project["id"]}))
                             ["content"][0]["text"])
        # As after a prompt the person sent in Plan mode.
        await self.app.store.set_session_options(created["id"], None, "plan", False)
        self.assertEqual((await call(self.app, "sessions_read", ident=created["id"])).json()["mode"], "plan")
        widened = await self.tool(session, "Sessions_prompt", {"id": created["id"], "text": "hi", "mode": "build"})
        self.assertTrue(widened["isError"])
        self.assertIn("cannot change a Plan session to Build", widened["content"][0]["text"])
        self.assertEqual((await call(self.app, "sessions_read", ident=created["id"])).json()["mode"], "plan")
        for extra in ({"autoaccept": True}, {"reply": "always"}):
            answer = await self.tool(session, "Sessions_prompt", {"id": created["id"], "text": "hi"} | extra)
            self.assertTrue(answer["isError"], extra)


if __name__ == "__main__":
    unittest.main()
