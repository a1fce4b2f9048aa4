"""The MCP servers a project names: reading and validating `.totem/mcp.json` and `.mcp.json`.

Both files have the common shape `{"mcpServers": {NAME: DEFINITION}}`, where a definition starts
a program (`{"command", "args", "env"}`) or reaches a remote server (`{"type": "http", "url",
"headers"}`; `"type": "sse"` names the older HTTP+SSE transport). `.totem/mcp.json` comes first:
a name it defines is not taken again from `.mcp.json`. Every problem (a file that is not JSON, a
field of the wrong type, a name that cannot be part of a tool name) is listed with its file and
the reason, and the rest of the file still counts.

A definition's `digest` is the pin of its approval: a hash over everything that decides what
runs or where it connects (`definition_digest`: the command, arguments, environment values, URL
and headers) and the sorted (path, content hash) of every project file that it runs (`files`,
found by mcp/pins.py when `offered_servers` reads the project). A change to any of them asks
again. What the start question shows (`shown`) holds the values of the variables, except those
whose name or value looks like a secret (SECRET_NAME_PARTS), and flags the variables that make
programs load code (CODE_LOADING_ENV); the values of headers are never shown.

Must not: start anything, decide permissions, or expand variables from the server's own
environment into a definition (a project file could read the server's secrets that way).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from totem.mcp.pins import pin_files, value_hash
from totem.security.boundary import BoundaryError, resolve_inside

CONFIG_FILES = (".totem/mcp.json", ".mcp.json")
MAX_CONFIG_BYTES = 256 * 1024
MAX_SERVERS = 32
MAX_ARGS = 256
MAX_TEXT_CHARS = 4096  # of one command, argument, value or URL
# A server's name becomes part of its tools' names (`mcp__<server>__<tool>`): a few plain
# characters, and never "__", which separates the parts.
SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
# Variables that make a program load code that is not the one its command line names: the start
# question flags each with its reason. The one list of them (a prefix ends with "_").
CODE_LOADING_ENV = {
    "PYTHONPATH": "Python imports modules from these folders first",
    "PYTHONHOME": "Python loads its standard library from this folder",
    "PYTHONSTARTUP": "Python runs this file when it starts interactively",
    "PYTHONUSERBASE": "Python imports the packages installed below this folder",
    "PYTHONWARNINGS": "Python imports the module that a warning filter names",
    "NODE_OPTIONS": "Node takes --require and --import from it: code loaded before the program",
    "NODE_PATH": "Node's require() finds modules in these folders",
    "RUBYOPT": "Ruby takes -r from it: a library loaded before the program",
    "RUBYLIB": "Ruby loads libraries from these folders first",
    "PERL5OPT": "Perl takes -M from it: a module loaded before the program",
    "PERL5LIB": "Perl loads modules from these folders first",
    "PERLLIB": "Perl loads modules from these folders first",
    "JAVA_TOOL_OPTIONS": "every Java program takes -javaagent from it: code loaded before the program",
    "_JAVA_OPTIONS": "every Java program takes -javaagent from it: code loaded before the program",
    "JDK_JAVA_OPTIONS": "the java launcher takes -javaagent from it: code loaded before the program",
    "CLASSPATH": "Java loads classes from these places",
    "LD_PRELOAD": "every program loads these libraries first",
    "LD_LIBRARY_PATH": "programs load their libraries from these folders first",
    "LD_AUDIT": "every program loads these libraries as auditors",
    "DYLD_INSERT_LIBRARIES": "every program loads these libraries first (macOS)",
    "DYLD_LIBRARY_PATH": "programs load their libraries from these folders first (macOS)",
    "BASH_ENV": "bash runs this file before a script",
    "ENV": "sh runs this file when it starts",
    "ZDOTDIR": "zsh runs the start files of this folder",
    "LUA_PATH": "Lua loads modules from these places",
    "LUA_CPATH": "Lua loads native modules from these places",
    "GEM_PATH": "Ruby loads gems from these folders",
    "GEM_HOME": "Ruby loads gems from this folder",
    "GOFLAGS": "go takes -toolexec and -exec from it: programs run for every build",
    "GIT_CONFIG_COUNT": "git takes configuration from these variables (programs such as core.fsmonitor)",
    "GIT_CONFIG_KEY_": "git takes configuration from these variables (programs such as core.fsmonitor)",
    "GIT_CONFIG_VALUE_": "git takes configuration from these variables (programs such as core.fsmonitor)",
    "GIT_CONFIG_PARAMETERS": "git takes configuration from it (programs such as core.fsmonitor)",
    "GIT_CONFIG_GLOBAL": "git reads its global configuration (which may name programs) from this file",
    "GIT_CONFIG_SYSTEM": "git reads its system configuration (which may name programs) from this file",
    "GIT_EXEC_PATH": "git runs its sub-commands from this folder",
    "GIT_SSH": "git runs this program to connect",
    "GIT_SSH_COMMAND": "git runs this command to connect",
    "GIT_PROXY_COMMAND": "git runs this command to connect",
    "GIT_ASKPASS": "git runs this program to ask for a password",
    "GIT_EDITOR": "git runs this program as its editor",
    "GIT_PAGER": "git runs this program as its pager",
    "GIT_EXTERNAL_DIFF": "git runs this program for every diff",
    "GIT_TEMPLATE_DIR": "git copies hooks from this folder into new repositories",
    "GIT_DIR": "git uses this repository, whose config and hooks may name programs",
    "SSH_ASKPASS": "ssh runs this program to ask for a password",
    "EDITOR": "programs run this as their editor",
    "VISUAL": "programs run this as their editor",
    "PAGER": "programs run this as their pager",
    "LESSOPEN": "less runs this command on every file it shows",
    "npm_config_": "npm takes its configuration from these (script-shell, node-options: programs it runs)",
}
# Refused outright in a definition (besides being flagged): they change which programs or
# libraries run for every program the server starts.
FORBIDDEN_ENV = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PATH", "BASH_ENV", "ENV",
                           "PYTHONSTARTUP", "NODE_OPTIONS", "PERL5OPT", "GIT_CONFIG_COUNT"})
# A variable whose name holds one of these (without case) looks like a secret: the start question
# and every answer of the API show that it is set, never its value. The one list of them.
SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD", "AUTH",
                     "CREDENTIAL", "CRED", "COOKIE", "SESSION", "PRIVATE", "SIGNATURE", "SALT",
                     "CERT", "DSN", "BEARER", "JWT", "OTP")
TRANSPORTS = ("stdio", "http", "sse")


@dataclass(frozen=True)
class ServerDefinition:
    """One MCP server of a project, as its file defines it."""

    name: str
    source: str  # the file, relative to the project
    transport: str  # stdio, http or sse
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[str, str], ...] = ()  # (project path, sha256) of what it runs, sorted
    left_out: tuple[str, ...] = ()  # what the pin does not cover, a sentence each
    definition_digest: str = field(init=False)  # of the definition's text alone
    digest: str = field(init=False)  # the pin: the definition and the content of its files

    def __post_init__(self) -> None:
        exact = json.dumps([self.transport, self.command, list(self.args), [list(item) for item in self.env],
                            self.url, [list(item) for item in self.headers]], ensure_ascii=False)
        definition = hashlib.sha256(exact.encode()).hexdigest()
        pinned = json.dumps([definition, [list(item) for item in sorted(self.files)]], ensure_ascii=False)
        object.__setattr__(self, "definition_digest", definition)
        object.__setattr__(self, "digest", hashlib.sha256(pinned.encode()).hexdigest())

    def pinned(self, files: tuple[tuple[str, str], ...], left_out: tuple[str, ...] = ()) -> ServerDefinition:
        """The same definition pinned to these files (`digest` follows them)."""
        return dataclasses.replace(self, files=tuple(sorted(files)), left_out=tuple(left_out))

    @property
    def subject(self) -> str:
        """What the start is decided on (`mcp-start`): the name and the exact definition's hash."""
        return f"{self.name}@{self.digest}"

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "" if self.url else ""

    def shown(self, hidden: Callable[[str], bool] | None = None) -> dict:
        """What the person is shown before it starts: the exact command line, the names of the
        variables it gets (`env`) and each one's value unless it looks like a secret or
        `hidden(value)` says so (a configured key), with the reason of a variable that makes
        programs load code (`variables`), the project files the approval covers (`files`) and
        what it does not (`left_out`); or the URL, the host it goes to and the names of the
        headers (their values may be keys)."""
        base = {"server": self.name, "file": self.source, "transport": self.transport,
                "approval": approval_words(self.name, self.manifest())}
        if self.transport == "stdio":
            return base | {"command": shlex.join([self.command, *self.args]),
                           "env": [key for key, _value in self.env],
                           "variables": [variable_view(key, value, hidden) for key, value in self.env],
                           "files": [path for path, _digest in self.files], "left_out": list(self.left_out)}
        return base | {"url": self.url, "host": self.host, "headers": [key for key, _value in self.headers]}

    def manifest(self) -> dict:
        """What an approval of this definition covered, to say later what changed: the command
        line or URL, the hash of each variable's and header's value (never the value), and each
        file's content hash."""
        return {"transport": self.transport,
                "command": shlex.join([self.command, *self.args]) if self.transport == "stdio" else "",
                "url": self.url, "env": {key: value_hash(value) for key, value in self.env},
                "headers": {key: value_hash(value) for key, value in self.headers}, "files": dict(self.files)}


# How many of the files an approval covers its words name; the rest are counted.
WORDS_FILES = 3


def approval_words(server: str, manifest: dict) -> str:
    """What a rule for a server's start (`mcp-start` on `name@<digest>`) covers, in words: the
    server, its command line or URL and the files it runs, as they were when it was decided.
    The digest says the same to a program; these words say it to a person."""
    if manifest.get("transport") != "stdio":
        return (f"the MCP server {server} at {manifest.get('url', '')} with its headers as they are; "
                "a change asks again")
    files = sorted(manifest.get("files") or {})
    more = len(files) - WORDS_FILES
    named = ", ".join(files[:WORDS_FILES]) + (f" and {more} more" if more > 0 else "")
    runs = f" and the {'file' if len(files) == 1 else f'{len(files)} files'} it runs ({named})" if files else ""
    return (f"the MCP server {server} as `{manifest.get('command', '')}`{runs}; "
            + ("a change to any of them asks again" if files else "a change asks again"))


def looks_secret(name: str, value: str) -> bool:
    """Whether a variable's value is kept from the page: its name holds a part of
    SECRET_NAME_PARTS (without case), or its value is a URL with a password in it."""
    upper = name.upper()
    if any(part in upper for part in SECRET_NAME_PARTS):
        return True
    try:
        return bool(urlsplit(value).password) if "://" in value else False
    except ValueError:  # not a URL urlsplit can read (a bad port or bracket): keep it from the page
        return True


def loads_code(name: str) -> str | None:
    """Why a variable makes programs load code (CODE_LOADING_ENV), or None."""
    if name in CODE_LOADING_ENV:
        return CODE_LOADING_ENV[name]
    return next((reason for prefix, reason in CODE_LOADING_ENV.items()
                 if prefix.endswith("_") and name.lower().startswith(prefix.lower())), None)


def variable_view(name: str, value: str, hidden: Callable[[str], bool] | None = None) -> dict:
    """One variable as the start question shows it: `{name, value}`, or `{name, masked: true}`
    for one that looks like a secret (or that `hidden` finds); with `loads` (the reason) for one
    that loads code."""
    masked = looks_secret(name, value) or (hidden is not None and hidden(value))
    view: dict = {"name": name} | ({"masked": True} if masked else {"value": value})
    reason = loads_code(name)
    return view | ({"loads": reason} if reason else {})


@dataclass(frozen=True)
class Problem:
    """A definition that cannot be used, and why."""

    file: str
    error: str
    server: str | None = None

    def view(self) -> dict:
        return {"file": self.file, "error": self.error} | ({"server": self.server} if self.server else {})


def forge_definition(forgeurl: str) -> ServerDefinition:
    """The MCP server of Forge (config.ini's `forgemcp`): the MCP route (`/$mcp/`) of the
    Total.js application at `forgeurl`, offered to Total.js projects and asked before it starts
    like every project server."""
    return ServerDefinition("forge", "config.ini", "http", url=urljoin(forgeurl.rstrip("/") + "/", "$mcp/"))


def offered_servers(root: str, forge: ServerDefinition | None = None,
                    ) -> tuple[list[ServerDefinition], list[Problem]]:
    """The servers offered to the project at `root`: its files' (read_definitions), each
    `command` one pinned to the project files it runs (mcp/pins.py), and, when given and the
    project is a Total.js one that does not name its own `forge`, Forge's. Blocks: file reads."""
    definitions, problems = read_definitions(root)
    definitions = [pin_definition(root, definition) for definition in definitions]
    if forge is not None and all(definition.name != forge.name for definition in definitions):
        from totem.workspace import totaljs  # its patterns take a while to compile: not at start-up
        if totaljs.detect(root).totaljs:
            definitions.append(forge)
    return definitions, problems


def pin_definition(root: str, definition: ServerDefinition) -> ServerDefinition:
    """The definition pinned to the project files it runs in `root` (a remote one has none).
    Blocks: file reads."""
    if definition.transport != "stdio":
        return definition
    found = pin_files(root, definition.command, definition.args)
    return definition.pinned(found.files, found.left_out)


def read_definitions(root: str) -> tuple[list[ServerDefinition], list[Problem]]:
    """The servers of the project at `root` and the problems of its files (blocks: file reads).
    A file that is absent is no problem."""
    servers: dict[str, ServerDefinition] = {}
    problems: list[Problem] = []
    for name in CONFIG_FILES:
        document, problem = _read_json(root, name)
        if problem is not None:
            problems.append(problem)
        if document is None:
            continue
        found, file_problems = parse_definitions(document, name)
        problems.extend(file_problems)
        for definition in found:
            servers.setdefault(definition.name, definition)
    if len(servers) > MAX_SERVERS:
        problems.append(Problem(CONFIG_FILES[0], f"more than {MAX_SERVERS} servers; only the first are used"))
    return list(servers.values())[:MAX_SERVERS], problems


def parse_definitions(document: object, source: str) -> tuple[list[ServerDefinition], list[Problem]]:
    """The definitions of one file's parsed JSON, and the problems found (each server apart)."""
    if not isinstance(document, dict):
        return [], [Problem(source, "the file must hold a JSON object with mcpServers")]
    servers = document.get("mcpServers")
    if servers is None:
        return [], [Problem(source, "mcpServers is missing")]
    if not isinstance(servers, dict):
        return [], [Problem(source, "mcpServers must be an object of server names")]
    found, problems = [], []
    for name, entry in servers.items():
        try:
            found.append(_definition(name, entry, source))
        except ValueError as exc:
            problems.append(Problem(source, str(exc), name if isinstance(name, str) else None))
    return found, problems


def _definition(name: str, entry: object, source: str) -> ServerDefinition:
    if not SERVER_NAME.match(name) or "__" in name:
        raise ValueError(f"the server name {name[:40]!r} must be 1 to 32 letters, digits, - or _ "
                         "(starting with a letter or digit, without __)")
    if not isinstance(entry, dict):
        raise ValueError(f"{name}: the definition must be an object")
    kind = entry.get("type", "stdio" if "command" in entry else None)
    if kind == "streamable-http":
        kind = "http"
    if kind not in TRANSPORTS:
        raise ValueError(f"{name}: type must be stdio, http or sse (or give a command)")
    allowed = {"type", "command", "args", "env", "cwd"} if kind == "stdio" else {"type", "url", "headers"}
    unknown = sorted(set(entry) - allowed - {"description", "disabled"})
    if unknown:
        raise ValueError(f"{name}: unknown field {unknown[0]!r} for a {kind} server")
    if "cwd" in entry:
        raise ValueError(f"{name}: cwd is not supported: a server runs in the project folder")
    if kind == "stdio":
        command = _text(entry.get("command"), f"{name}: command")
        args = entry.get("args", [])
        if not isinstance(args, list) or len(args) > MAX_ARGS:
            raise ValueError(f"{name}: args must be a list of at most {MAX_ARGS} strings")
        env = _pairs(entry.get("env", {}), f"{name}: env", ENV_NAME)
        for key, _value in env:
            if key in FORBIDDEN_ENV:
                raise ValueError(f"{name}: env may not set {key}")
        return ServerDefinition(name, source, "stdio", command=command,
                                args=tuple(_text(arg, f"{name}: args", empty=True) for arg in args), env=env)
    url = _text(entry.get("url"), f"{name}: url")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{name}: url must be an http:// or https:// address with a host")
    if parts.username or parts.password:
        raise ValueError(f"{name}: url may not hold a user or password; use headers")
    headers = _pairs(entry.get("headers", {}), f"{name}: headers", HEADER_NAME)
    return ServerDefinition(name, source, kind, url=url, headers=headers)


def _text(value: object, what: str, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        raise ValueError(f"{what} must be a {'' if empty else 'non-empty '}string")
    if len(value) > MAX_TEXT_CHARS or any(ch in value for ch in "\0\r\n"):
        raise ValueError(f"{what} must be at most {MAX_TEXT_CHARS} characters on one line")
    return value


def _pairs(value: object, what: str, names: re.Pattern) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object of names and string values")
    pairs = []
    for key, item in value.items():
        if not names.match(key):
            raise ValueError(f"{what}: {key[:40]!r} is not a valid name")
        pairs.append((key, _text(item, f"{what}: {key}", empty=True)))
    return tuple(sorted(pairs))


def _read_json(root: str, name: str) -> tuple[object | None, Problem | None]:
    try:
        path = resolve_inside(root, name)
    except BoundaryError as exc:
        return None, Problem(name, f"cannot be used: {exc}")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, Problem(name, f"cannot be read: {exc.strerror or exc}")
    if len(raw) > MAX_CONFIG_BYTES:
        return None, Problem(name, f"larger than {MAX_CONFIG_BYTES // 1024} KB")
    try:
        return json.loads(raw.decode("utf-8")), None
    except (UnicodeDecodeError, ValueError) as exc:
        return None, Problem(name, f"not valid JSON: {exc}")
