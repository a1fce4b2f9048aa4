"""`python totem.py run`: the headless client, for scripts, CI jobs and terminals.

    python totem.py run [--url URL] [--config F] [--token-file F] [--project PATH]
                        [--session ID | --continue | --new] [--model M] [--mode build|plan]
                        [--agent NAME] [--command NAME] [--file PATH]...
                        [--max-cost USD] [--autoaccept] [--allow RULE]...
                        [--format text|json|jsonl] [--reject-asks] [TEXT]
    python totem.py run --models

An adapter like the REST API, but on the other side of it: it opens the project (`--project`,
default the current folder), creates a session (or takes `--session`), subscribes to its events
on the WebSocket, then sends `Sessions|prompt` with the text. The text is the arguments, with
standard input after them as a fenced block when it is a pipe, a socket or a file (`git diff |
totem run "review this"`); standard input alone when there are no arguments. No TTY is needed.

`--format text` (the default) streams the answer's text to stdout and tool activity to stderr;
`jsonl` prints every event as one JSON line; `json` prints one object when the run ends (RESULT
below). Exit codes (EXIT_*): 0 the run ended idle; 1 it failed (an error, an abort by someone
else, a server that cannot be reached, an answer that cannot be written); 2 a usage error (bad
flags, no prompt, a config that cannot say where the server is); 3 a question was rejected or
could not be answered (`--reject-asks`); 130 interrupted: SIGINT, SIGTERM or SIGHUP abort the
server's run first (a question that waits ends rejected with it), so a cancelled CI job leaves
nothing running. A client that ends any other way once the prompt is sent aborts the run too.

It never approves anything itself: a permission question prints what waits and that it is
answered in the Totem screen, or with `--reject-asks` is rejected (a question of the ask tool
likewise). What the person lets a job do without asking is said up front: `--allow` rules
(`npm test`, a bash command line; `edit(src/**)`, any tool by name) hold for that run alone and
are never stored, `--autoaccept` turns on the session's auto-accept of file edits, and
`--max-cost` stops the run once its answers cost more. The
token comes from `--token-file` or the `token` of the local config.ini, never from the command
line (where other users of the machine could read it), and is never printed; it works against a
server elsewhere.

Must not: import the server's modules beyond the configuration reader.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import mimetypes
import os
import re
import signal
import stat
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from totem.config import TOKENLESS, ConfigError, default_config_path, load_config
from totem.http.auth import new_signin_code, signin_url, stored_token
from totem.security.vault import VaultError

DEFAULT_URL = "http://127.0.0.1:8470"
HTTP_TIMEOUT_S = 30.0
EXIT_IDLE, EXIT_ERROR, EXIT_USAGE, EXIT_REFUSED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
# The signals that end the client: each aborts the server's run first.
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
FORMATS = ("text", "json", "jsonl")
STATUS_OF_EXIT = {EXIT_IDLE: "done", EXIT_ERROR: "failed", EXIT_REFUSED: "refused", EXIT_INTERRUPTED: "interrupted"}
LATEST_SESSIONS = 20  # read for --continue and for the latest model
MAX_FILE_BYTES = 20 * 1024 * 1024  # of one --file (the server's own limit applies too)
RESULT_PAGE = 200  # the messages read at the end for `--format json` (the run's are the last ones)
# The one object `--format json` prints when the run ends:
#   {sessionid, messageid, status: done|failed|refused|interrupted, exit, error, text,
#    tokens: {input, output, cost}, files: [path], questions: [{kind, tool, asked, answer}]}
# (answer: once|always|reject, the text sent for the ask tool, or null: the run ended first)


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
    which.add_argument("--continue", action="store_true", dest="resume",
                       help="prompt the project's most recently changed session")
    which.add_argument("--new", action="store_true", help="a new session (the default)")
    p.add_argument("--model", help="the model, as <providerid>/<model> (default: the session's, or for a new "
                                   "session the model of the project's latest session that has one, else the "
                                   "model of config.ini)")
    p.add_argument("--models", action="store_true", help="list the model references the server offers, and exit")
    p.add_argument("--file", action="append", default=[], metavar="PATH",
                   help="attach a file to the prompt (repeatable)")
    p.add_argument("--agent", help="a project agent (.totem/agents/NAME.md) for this prompt")
    p.add_argument("--command", help="a project command (.totem/commands/NAME.md); the text is its arguments")
    p.add_argument("--mode", choices=("build", "plan"))
    p.add_argument("--max-cost", type=cost, metavar="USD",
                   help="stop the run once its answers cost more than this many US dollars (over the maxcost setting)")
    p.add_argument("--autoaccept", action="store_true",
                   help="turn on the session's auto-accept of file edits (write, edit, patch; never commands)")
    p.add_argument("--allow", action="append", default=[], type=allow_rule, metavar="RULE",
                   help="allow without a question, in this run only (never stored): a bash command line "
                        "(`npm test`, `npm run *`), or TOOL(PATTERN) for any tool (`edit(src/**)`); repeatable")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text: the answer as it streams; jsonl: every event as a JSON line; json: one object "
                        "at the end (session, status, answer, tokens, cost, files, questions)")
    p.add_argument("--json", action="store_const", const="jsonl", dest="format", help="the same as --format jsonl")
    p.add_argument("--reject-asks", action="store_true",
                   help="reject permission questions instead of waiting (then the exit code is 3)")
    p.add_argument("text", nargs="*", help="the prompt; standard input, when it is a pipe or a file, is added "
                                            "after it as a fenced block (or is the prompt, without one)")
    p.epilog = ("exit codes: 0 done, 1 failed, 2 usage, 3 a question was rejected or could not be answered, "
                "130 interrupted (SIGINT, SIGTERM and SIGHUP abort the server's run first)")
    return p


def piped_input() -> str | None:
    """Standard input when it is a pipe, a socket (what Node and other libuv parents give a
    child) or a file, else None: never a terminal, nor a device a script may have left open.
    Blocks until it ends. Bytes that are not UTF-8 (a diff of a Latin-1 file) become U+FFFD
    rather than ending the client."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)):
        return None
    return sys.stdin.buffer.read().decode("utf-8", "replace")


def prompt_text(words: list[str], piped: str | None) -> str:
    """The arguments, then what came on standard input as a fenced block (a fence longer than
    any run of backticks in it, so that nothing in it closes the block)."""
    text = " ".join(words)
    if piped is None or not piped.strip():
        return text
    if not text.strip():
        return piped
    longest = max((len(run) for run in re.findall("`+", piped)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{text}\n\n{fence}\n{piped.rstrip(chr(10))}\n{fence}\n"



class Client:
    """REST calls with the token header, on a worker thread each."""

    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/")
        self.token = token

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def call(self, action: str, body: dict | None = None, ident: str | None = None) -> Any:
        return await asyncio.to_thread(self._call, action, body, ident)

    async def get(self, action: str, ident: str | None = None, query: dict[str, str] | None = None) -> Any:
        return await asyncio.to_thread(self._call, action, None, ident, query or {})

    def _call(self, action: str, body: dict | None, ident: str | None, query: dict[str, str] | None = None) -> Any:
        path = f"{self.url}/api/{action}" + (f"/{urllib.parse.quote(ident)}" if ident else "")
        if query is not None:  # a read: GET with its query
            request = urllib.request.Request(path + (f"?{urllib.parse.urlencode(query)}" if query else ""),
                                             method="GET", headers=self.headers())
        else:
            request = urllib.request.Request(path, data=json.dumps(body or {}).encode(), method="POST",
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

    def __init__(self, client: Client, output: str, reject_asks: bool, out=sys.stdout, err=sys.stderr):
        self.client = client
        self.output = output  # text, json or jsonl
        self.reject_asks = reject_asks
        self.out = out
        self.err = err
        self.text_parts: set[str] = set()
        self.tools: dict[str, str] = {}
        self.prompted: str | None = None  # our message: events before it are another run's
        self.sessionid = ""
        self.error = ""
        self.questions: list[dict] = []  # {kind, tool, asked, answer} of each question of the run
        self.refused = False  # a question was rejected or answered that nobody is here

    @property
    def streams_text(self) -> bool:
        return self.output == "text"

    async def event(self, event: dict) -> int | None:
        """Handle one event; an exit code when the run ended."""
        kind, data = event.get("type"), event.get("data") or {}
        if event.get("sessionid") != self.sessionid:
            return None  # session.status and session.updated come for every session
        if self.output == "jsonl":
            self.write(json.dumps(event, ensure_ascii=False) + "\n")
        if kind == "part.created":
            part = data["part"]
            if part["kind"] == "text":
                self.text_parts.add(part["id"])
                if part.get("text") and self.streams_text:
                    self.write(part["text"])
            elif part["kind"] == "tool":
                self.tools[part["id"]] = (part.get("data") or {}).get("tool") or "tool"
        elif kind == "part.delta" and data.get("partid") in self.text_parts and self.streams_text:
            self.write(data["text"])
        elif kind == "part.updated" and data["part"]["kind"] == "tool":
            self.tool_updated(data["part"])
        elif kind == "permission.ask":
            await self.ask(data)
        elif kind == "permission.replied":
            self.answered(data.get("id"), data.get("reply"))
        elif kind == "question.ask":
            await self.question(data)
        elif kind == "error" and not data.get("retry"):
            self.error = data.get("message", "")
        elif kind == "session.status" and self.prompted is not None:
            status = data.get("status")
            if status == "idle":
                return EXIT_REFUSED if self.refused else EXIT_IDLE
            if status in ("error", "aborted"):
                if self.error and self.output != "json":
                    self.note(f"totem: {self.error}")
                return EXIT_ERROR
        return None

    def tool_updated(self, part: dict) -> None:
        """A tool's progress on stderr; the ask tool's answer, once done (question.replied does
        not carry it), goes to its question."""
        tool, info = self.tools.get(part["id"], "tool"), part.get("data") or {}
        answer = (info.get("result") or {}).get("answer")
        if tool == "ask" and part["status"] == "done" and isinstance(answer, str):
            asked = (info.get("input") or {}).get("question")
            waiting = [question for question in self.questions if question["kind"] == "question"
                       and question["answer"] is None]
            match = next((question for question in waiting if question["asked"] == asked), None)
            if match or waiting:
                (match or waiting[0])["answer"] = answer
        if self.streams_text:
            self.note(f"[{tool}] {part['status']} {info.get('title') or ''}".rstrip())

    def answered(self, askid: str | None, reply: str | None) -> None:
        for question in self.questions:
            if question.get("id") == askid and question["answer"] is None:
                question["answer"] = reply
                self.refused = self.refused or reply == "reject"

    async def ask(self, data: dict) -> None:
        what = "; ".join(item.get("shown") or item.get("command", "") for item in data.get("commands") or ()) \
            or json.dumps(data.get("input"), ensure_ascii=False)[:300]
        self.questions.append({"id": data.get("id"), "kind": "permission", "tool": data.get("tool"), "asked": what,
                               "answer": None})
        if self.reject_asks:
            self.note(f"[{data.get('tool')}] asks: {what} — rejected (--reject-asks)")
            await self.client.call("permissions_reply", {"reply": "reject"}, data["id"])
        else:
            self.note(f"[{data.get('tool')}] waits for your approval: {what}\n"
                      f"  answer it in the Totem screen ({self.client.url}/)")

    async def question(self, data: dict) -> None:
        asked = {"id": data.get("id"), "kind": "question", "tool": "ask", "asked": data.get("text"), "answer": None}
        self.questions.append(asked)
        if self.reject_asks:
            self.note(f"question: {data.get('text')} — answered that nobody is here (--reject-asks)")
            asked["answer"] = NOBODY_ANSWER
            self.refused = True
            await self.client.call("questions_reply", {"answer": NOBODY_ANSWER}, data["id"])
        else:
            self.note(f"question: {data.get('text')}\n  answer it in the Totem screen ({self.client.url}/)")

    def write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except OSError as exc:  # the reader went away (`| head`, a closed terminal)
            raise ClientError(f"cannot write the answer: {exc.strerror or exc}") from None

    def note(self, text: str) -> None:
        try:
            print(text, file=self.err, flush=True)
        except OSError:  # stderr is gone (the terminal of a SIGHUP closed): the run goes on unseen
            pass


NOBODY_ANSWER = "nobody is here to answer; decide yourself"


class Stop:
    """SIGINT, SIGTERM and SIGHUP, from the client's start to its end. Before the prompt is
    sent nothing runs on the server, and a thread may be blocked reading standard input (no
    await can interrupt it): the client ends at once. Once it is sent, `signalled` completes
    with the signal and the follower aborts the run."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.signalled: asyncio.Future[int] = self.loop.create_future()
        self.sent = False  # set just before Sessions|prompt is called

    def __enter__(self) -> Stop:
        for number in STOPPING:
            self.loop.add_signal_handler(number, self._stop, number)
        return self

    def __exit__(self, *_exc: object) -> None:
        for number in STOPPING:
            self.loop.remove_signal_handler(number)

    def _stop(self, number: int) -> None:
        if not self.sent:
            say(f"totem run: interrupted ({signal.Signals(number).name}) before the prompt was sent; nothing ran")
            os._exit(EXIT_INTERRUPTED)
        if not self.signalled.done():
            self.signalled.set_result(number)


def say(text: str) -> None:
    """A line on stderr, which may be gone (the terminal of a SIGHUP closed): then nothing."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


async def run(args) -> int:
    with Stop() as stop:
        return await _run(args, stop)


async def _run(args, stop: Stop) -> int:
    try:
        config = load_config(args.config) if os.path.exists(args.config) else None
    except ConfigError as exc:
        print(f"totem run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args.config_model = config.model if config is not None else ""
    try:
        client = Client(server_url(args, config), read_token(args, config))
    except ClientError as exc:
        print(f"totem run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.models:
        return await _list_models(client, args.format)
    text = prompt_text(args.text, await asyncio.to_thread(piped_input))
    if not text.strip() and not args.command:
        print("totem run: no prompt (give it as arguments or on standard input)", file=sys.stderr)
        return EXIT_USAGE
    try:
        args.attachments = [attachment(path) for path in args.file]
    except ClientError as exc:
        print(f"totem run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    follower = Follower(client, args.format, args.reject_asks)
    try:
        code = await _follow(client, follower, args, text, stop)
    except ClientError as exc:
        say(f"totem run: {exc}")
        code = EXIT_ERROR
        follower.error = follower.error or str(exc)
    if args.format == "json" and follower.sessionid:
        result = json.dumps(await _result(client, follower, code), ensure_ascii=False)
        try:
            print(result, flush=True)
        except OSError as exc:  # the run has ended: only the result is lost
            say(f"totem run: cannot write the result: {exc.strerror or exc}")
            return EXIT_ERROR
    return code


async def _open_session(client: Client, args) -> tuple[str, str | None]:
    """The session to prompt (`--session`, `--continue`, else a new one) and the model to send."""
    if args.session:
        await client.get("sessions_read", args.session)
        return args.session, args.model
    project = await client.call("projects_open", {"path": os.path.abspath(args.project)})
    recent = (await client.get("sessions", None, {"projectid": project["id"], "limit": str(LATEST_SESSIONS)})
              )["sessions"]
    if args.resume and not recent:
        raise ClientError(f"--continue: the project {project['path']} has no session yet")
    if args.resume:
        return recent[0]["id"], args.model
    # A new session has no model of its own: the project's latest one that has one, else config.ini's.
    model = args.model or next((session["model"] for session in recent if session.get("model")),
                               args.config_model or None)
    return (await client.call("sessions_create", {"projectid": project["id"]}))["id"], model


async def _follow(client: Client, follower: Follower, args, text: str, stop: Stop) -> int:
    from websockets.asyncio.client import connect
    from websockets.exceptions import WebSocketException

    sessionid, model = await _open_session(client, args)
    follower.sessionid = sessionid
    ws_url = "ws" + client.url[len("http"):] + "/ws/"
    try:
        async with connect(ws_url, additional_headers=client.headers(), max_size=None) as ws:
            await ws.send(json.dumps({"type": "subscribe", "sessionid": sessionid}))
            stop.sent = True
            try:
                return await _events(client, follower, ws, stop, prompt_body(text, model, args))
            except BaseException:
                # The client ends for another reason (a write to a closed terminal, a dropped
                # stream): what it started must not go on without it.
                with contextlib.suppress(ClientError):
                    await client.call("sessions_abort", None, sessionid)
                raise
    except (OSError, WebSocketException) as exc:
        raise ClientError(f"the event stream of {ws_url} ended: {exc}") from None


async def _events(client: Client, follower: Follower, ws, stop: Stop, body: dict) -> int:
    """Send the prompt and follow its events to the run's end, or to a signal: then abort the
    server's run (a question that waits ends rejected with it) and return EXIT_INTERRUPTED."""
    sessionid = follower.sessionid
    prompting: asyncio.Future[Any] = asyncio.ensure_future(client.call("sessions_prompt", body, sessionid))
    await asyncio.wait((prompting, stop.signalled), return_when=asyncio.FIRST_COMPLETED)
    if not stop.signalled.done():
        follower.prompted = (await prompting)["messageid"]
    while not stop.signalled.done():
        received: asyncio.Future[Any] = asyncio.ensure_future(ws.recv())
        await asyncio.wait((received, stop.signalled), return_when=asyncio.FIRST_COMPLETED)
        if stop.signalled.done():
            received.cancel()
            break
        code = await follower.event(json.loads(received.result()))
        if code is not None:
            if follower.streams_text:
                follower.write("\n")
            return code
    with contextlib.suppress(ClientError):  # refused, it started nothing; sent, it is aborted below
        await prompting
    await client.call("sessions_abort", None, sessionid)
    say(f"totem run: interrupted ({signal.Signals(stop.signalled.result()).name}); the run was aborted")
    return EXIT_INTERRUPTED


def prompt_body(text: str, model: str | None, args) -> dict:
    """Sessions|prompt's body: the text (a command's arguments with --command), and what the
    flags chose."""
    body: dict = {"command": args.command, "arguments": text} if args.command else {"text": text}
    chosen = (("model", model), ("mode", args.mode), ("agent", args.agent),
              ("attachments", getattr(args, "attachments", None)), ("autoaccept", args.autoaccept),
              ("allow", [{"tool": tool, "pattern": pattern} for tool, pattern in args.allow]))
    body |= {key: value for key, value in chosen if value}
    return body | ({"maxcost": args.max_cost} if args.max_cost is not None else {})


# TOOL(PATTERN): no command line of a shell has that form (a word followed by `(` is a syntax
# error), so anything else is a bash command line. Save one: a word followed by `(` and `)` begins
# a function definition (`f() { ...; }; npm test`), which is a command line, so a PATTERN that
# begins with `)` makes the whole a bash rule (tests/test_cli_allow_differential.py).
TOOL_RULE = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)\((?!\s*\))(.*)\)", re.DOTALL)


def allow_rule(given: str) -> tuple[str, str]:
    """`--allow`: (tool, pattern). The server checks that the tool exists and the pattern can be."""
    found = TOOL_RULE.fullmatch(given.strip())
    if found:
        return found.group(1).lower(), found.group(2).strip()
    if not given.strip():
        raise argparse.ArgumentTypeError("a rule is a command line, or TOOL(PATTERN)")
    return "bash", given.strip()


def cost(given: str) -> float:
    """`--max-cost`: US dollars, 0 or more."""
    try:
        value = float(given)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):  # also nan
        raise argparse.ArgumentTypeError(f"US dollars, 0 or more (not {given!r})")
    return value


def attachment(path: str) -> dict:
    """A file for `attachments`: its name, media type (by its extension; text/plain for text
    that has none) and content. Raises ClientError."""
    try:
        with open(path, "rb") as handle:
            content = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ClientError(f"--file {path}: {exc.strerror}") from None
    if len(content) > MAX_FILE_BYTES:
        raise ClientError(f"--file {path}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    mime = mimetypes.guess_type(path)[0]
    if mime is None:
        mime = "text/plain" if _is_text(content) else "application/octet-stream"
    return {"name": os.path.basename(path), "mime": mime, "data": base64.b64encode(content).decode()}


def _is_text(content: bytes) -> bool:
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in content


async def _list_models(client: Client, output: str) -> int:
    """`--models`: each reference `<providerid>/<model>` a prompt may name, with its provider;
    a provider that could not list its models says why on stderr."""
    try:
        catalog = await client.get("providers_catalog")
    except ClientError as exc:
        print(f"totem run: {exc}", file=sys.stderr)
        return EXIT_ERROR
    models = catalog["models"]
    for provider in catalog["providers"]:
        if provider.get("error"):
            print(f"totem run: {provider['name']}: {provider['error']}", file=sys.stderr)
    if output == "text":
        for model in models:
            print(f"{model['id']}\t{model['provider']['name']}")
    else:
        print(json.dumps([{"id": model["id"], "provider": model["provider"]["name"]} for model in models],
                         ensure_ascii=False))
    return EXIT_IDLE


async def _result(client: Client, follower: Follower, code: int) -> dict:
    """The object `--format json` prints (RESULT): read from the server once the run ended."""
    result: dict = {"sessionid": follower.sessionid, "messageid": None, "status": STATUS_OF_EXIT.get(code, "failed"),
                    "exit": code, "error": follower.error or None, "text": "",
                    "tokens": {"input": 0, "output": 0, "cost": 0.0}, "files": [],
                    "questions": [{key: value for key, value in question.items() if key != "id"}
                                  for question in follower.questions]}
    try:
        page = await client.get("sessions_messages", follower.sessionid, {"limit": str(RESULT_PAGE)})
        changed = await client.get("sessions_diff", follower.sessionid)
    except ClientError as exc:
        result["error"] = result["error"] or str(exc)
        return result
    ours = [message for message in page["messages"]
            if follower.prompted is not None and message["id"] > follower.prompted and message["role"] == "assistant"]
    if ours:
        result["messageid"] = ours[-1]["id"]
    result["text"] = "".join(part.get("text") or "" for message in ours for part in message["parts"]
                             if part["kind"] == "text")
    for message in ours:
        tokens = (message.get("data") or {}).get("tokens") or {}
        for key in ("input", "output", "cost"):
            result["tokens"][key] += tokens.get(key) or 0
    result["tokens"]["cost"] = round(result["tokens"]["cost"], 8)
    result["files"] = sorted(item["path"] for item in changed)
    return result


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
