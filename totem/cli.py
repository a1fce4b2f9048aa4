"""`python totem.py run`: the headless client, for scripts and terminals.

    python totem.py run [--url URL] [--token-file F] [--project PATH] [--session ID | --new]
                        [--model M] [--mode build|plan] [--json] [--reject-asks] [TEXT]

An adapter like the REST API, but on the other side of it: it opens the project (`--project`,
default the current folder), creates a session (or takes `--session`), subscribes to its events
on the WebSocket, then sends `Sessions|prompt` with the text (or standard input). The answer's
text streams to stdout, tool activity to stderr (`--json`: every event as a JSON line on
stdout). It exits 0 when the session goes idle, 1 on an error (or an aborted run), 130 when
interrupted, which aborts the run first.

It never approves anything: a permission question prints what waits and that it is answered in
the Totem screen, or with `--reject-asks` is rejected (a question of the ask tool likewise). The
token comes from `--token-file` or the `token` of the local config.ini, never from the command
line (where other users of the machine could read it); it works against a server elsewhere.

Must not: import the server's modules beyond the configuration reader.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import urllib.error
import urllib.parse
import urllib.request

from totem.config import TOKENLESS, ConfigError, default_config_path, load_config
from totem.http.auth import new_signin_code, signin_url, stored_token
from totem.security.vault import VaultError

DEFAULT_URL = "http://127.0.0.1:8470"
HTTP_TIMEOUT_S = 30.0
EXIT_IDLE, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class ClientError(Exception):
    """A request the server refused, or a server that cannot be reached."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="totem.py run", description="Send a prompt to Totem and follow the run.",
                                allow_abbrev=False)
    p.add_argument("--url", help=f"the server (default: config.ini's listen and port, else {DEFAULT_URL})")
    p.add_argument("--config", default=default_config_path(), help="config.ini to read the URL and token from")
    p.add_argument("--token-file", help="a file holding the access token")
    p.add_argument("--project", default=os.getcwd(), help="the project folder (default: the current folder)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--session", help="prompt this session instead of a new one")
    which.add_argument("--new", action="store_true", help="a new session (the default)")
    p.add_argument("--model", help="the model, as <providerid>/<model>")
    p.add_argument("--mode", choices=("build", "plan"))
    p.add_argument("--json", action="store_true", help="print every event as a JSON line")
    p.add_argument("--reject-asks", action="store_true", help="reject permission questions instead of waiting")
    p.add_argument("text", nargs="*", help="the prompt (default: standard input)")
    return p


class Client:
    """REST calls with the token header, on a worker thread each."""

    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/")
        self.token = token

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def call(self, action: str, body: dict | None = None, ident: str | None = None) -> object:
        return await asyncio.to_thread(self._call, action, body, ident)

    def _call(self, action: str, body: dict | None, ident: str | None) -> object:
        path = f"{self.url}/api/{action}" + (f"/{urllib.parse.quote(ident)}" if ident else "")
        data = json.dumps(body or {}).encode()
        request = urllib.request.Request(path, data=data, method="POST",
                                         headers=self.headers() | {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise ClientError(f"{action}: {exc.code} {_reasons(exc.read())}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ClientError(f"cannot reach {self.url}: {getattr(exc, 'reason', exc)}") from None


def _reasons(body: bytes) -> str:
    try:
        errors = json.loads(body)
        return "; ".join(f"{item['name']}: {item['error']}" if item.get("name") else item["error"] for item in errors)
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace")[:300]


def read_token(args, config) -> str:
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as handle:
                return handle.read().strip()
        except OSError as exc:
            raise ClientError(f"cannot read the token file {args.token_file}: {exc.strerror}") from None
    if config is None or config.token == TOKENLESS:
        return ""
    if config.token:
        return config.token
    try:
        return stored_token(config.data)
    except VaultError as exc:
        raise ClientError(str(exc)) from None


def server_url(args, config) -> str:
    """`--url`, else where config.ini's server listens. Raises ClientError for `port = 0`
    (the server picked a port of its own: only `--url` can say which)."""
    if args.url:
        return args.url
    if config is not None:
        if config.port == 0:
            raise ClientError("config.ini says port = 0 (a port picked at each start): give --url "
                              "with the address the server printed")
        host = "127.0.0.1" if config.listen in ("0.0.0.0", "::") else config.listen
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{config.port}"
    return DEFAULT_URL


class Follower:
    """Prints the events of one run and says how it ended."""

    def __init__(self, client: Client, as_json: bool, reject_asks: bool, out=sys.stdout, err=sys.stderr):
        self.client = client
        self.as_json = as_json
        self.reject_asks = reject_asks
        self.out = out
        self.err = err
        self.text_parts: set[str] = set()
        self.tools: dict[str, str] = {}
        self.prompted: str | None = None  # our message: events before it are another run's
        self.sessionid = ""
        self.error = ""

    async def event(self, event: dict) -> int | None:
        """Handle one event; an exit code when the run ended."""
        kind, data = event.get("type"), event.get("data") or {}
        if event.get("sessionid") != self.sessionid:
            return None  # session.status and session.updated come for every session
        if self.as_json:
            print(json.dumps(event, ensure_ascii=False), file=self.out, flush=True)
        if kind == "part.created":
            part = data["part"]
            if part["kind"] == "text":
                self.text_parts.add(part["id"])
                if part.get("text") and not self.as_json:
                    self.write(part["text"])
            elif part["kind"] == "tool":
                self.tools[part["id"]] = (part.get("data") or {}).get("tool") or "tool"
        elif kind == "part.delta" and data.get("partid") in self.text_parts and not self.as_json:
            self.write(data["text"])
        elif kind == "part.updated" and data["part"]["kind"] == "tool" and not self.as_json:
            part = data["part"]
            title = (part.get("data") or {}).get("title") or ""
            self.note(f"[{self.tools.get(part['id'], 'tool')}] {part['status']} {title}".rstrip())
        elif kind == "permission.ask":
            await self.ask(data)
        elif kind == "question.ask":
            await self.question(data)
        elif kind == "error" and not data.get("retry"):
            self.error = data.get("message", "")
        elif kind == "session.status" and self.prompted is not None:
            status = data.get("status")
            if status == "idle":
                return EXIT_IDLE
            if status in ("error", "aborted"):
                if self.error:
                    self.note(f"totem: {self.error}")
                return EXIT_ERROR
        return None

    async def ask(self, data: dict) -> None:
        what = "; ".join(item.get("shown") or item.get("command", "") for item in data.get("commands") or ()) \
            or json.dumps(data.get("input"), ensure_ascii=False)[:300]
        if self.reject_asks:
            self.note(f"[{data.get('tool')}] asks: {what} — rejected (--reject-asks)")
            await self.client.call("permissions_reply", {"reply": "reject"}, data["id"])
        else:
            self.note(f"[{data.get('tool')}] waits for your approval: {what}\n"
                      f"  answer it in the Totem screen ({self.client.url}/)")

    async def question(self, data: dict) -> None:
        if self.reject_asks:
            self.note(f"question: {data.get('text')} — answered that nobody is here (--reject-asks)")
            await self.client.call("questions_reply", {"answer": "nobody is here to answer; decide yourself"},
                                   data["id"])
        else:
            self.note(f"question: {data.get('text')}\n  answer it in the Totem screen ({self.client.url}/)")

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def note(self, text: str) -> None:
        print(text, file=self.err, flush=True)


async def run(args) -> int:
    try:
        config = load_config(args.config) if os.path.exists(args.config) else None
    except ConfigError as exc:
        print(f"totem run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        client = Client(server_url(args, config), read_token(args, config))
    except ClientError as exc:
        print(f"totem run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    text = " ".join(args.text) if args.text else await asyncio.to_thread(sys.stdin.read)
    if not text.strip():
        print("totem run: no prompt (give it as arguments or on standard input)", file=sys.stderr)
        return EXIT_USAGE
    follower = Follower(client, args.json, args.reject_asks)
    try:
        return await _follow(client, follower, args, text)
    except ClientError as exc:
        print(f"totem run: {exc}", file=sys.stderr)
        return EXIT_ERROR


async def _follow(client: Client, follower: Follower, args, text: str) -> int:
    from websockets.asyncio.client import connect
    from websockets.exceptions import WebSocketException

    if args.session:
        sessionid = args.session
        await client.call("sessions_read", None, sessionid)
    else:
        project = await client.call("projects_open", {"path": os.path.abspath(args.project)})
        session = await client.call("sessions_create", {"projectid": project["id"]})  # type: ignore[index]
        sessionid = session["id"]  # type: ignore[index]
    follower.sessionid = sessionid
    ws_url = "ws" + client.url[len("http"):] + "/ws/"
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    try:
        async with connect(ws_url, additional_headers=client.headers(), max_size=None) as ws:
            await ws.send(json.dumps({"type": "subscribe", "sessionid": sessionid}))
            body = {"text": text} | {key: value for key, value in (("model", args.model), ("mode", args.mode))
                                     if value}
            answer = await client.call("sessions_prompt", body, sessionid)
            follower.prompted = answer["messageid"]  # type: ignore[index]
            waiting = asyncio.ensure_future(interrupted.wait())
            try:
                while True:
                    received = asyncio.ensure_future(ws.recv())
                    done, _ = await asyncio.wait({received, waiting}, return_when=asyncio.FIRST_COMPLETED)
                    if waiting in done:
                        received.cancel()
                        await client.call("sessions_abort", None, sessionid)
                        follower.note("totem run: interrupted; the run was aborted")
                        return EXIT_INTERRUPTED
                    code = await follower.event(json.loads(received.result()))
                    if code is not None:
                        if not follower.as_json:
                            follower.write("\n")
                        return code
            finally:
                waiting.cancel()
    except (OSError, WebSocketException) as exc:
        raise ClientError(f"the event stream of {ws_url} ended: {exc}") from None
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return asyncio.run(run(args))


def token_main(argv: list[str]) -> int:
    """`totem.py token`: print a new one-time sign-in address of the server of config.ini."""
    p = argparse.ArgumentParser(prog="totem.py token", allow_abbrev=False,
                                description="Print an address that signs a browser in to Totem once "
                                            "(within 10 minutes of now, while the server runs).")
    p.add_argument("--config", default=default_config_path(), help="config.ini of the server")
    args = p.parse_args(argv)
    try:
        config = load_config(args.config)
        token = read_token(argparse.Namespace(token_file=None), config)
    except (ConfigError, ClientError) as exc:
        print(f"totem token: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if config.token == TOKENLESS:
        print("totem token: this Totem has no access token (token = none in config.ini): nothing to sign in to",
              file=sys.stderr)
        return EXIT_ERROR
    if not token:
        print(f"totem token: no token yet in {config.data}: start Totem once (make run), it makes one",
              file=sys.stderr)
        return EXIT_ERROR
    code = new_signin_code(token)
    if config.port == 0:  # the server picked its port: only its start-up line says which
        print("totem token: config.ini says port = 0: open this path on the address the server printed",
              file=sys.stderr)
        print(f"/login?code={code}")
        return EXIT_IDLE
    print(signin_url(server_url(argparse.Namespace(url=None), config), code))
    return EXIT_IDLE
