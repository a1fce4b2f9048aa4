"""The configuration file: its keys, their types and ranges, and reading it.

Owns `config.ini` (section `[totem]`): every key that the server accepts is declared once in
KEYS with its type, default and allowed range, and a bad value stops the start with one line
naming the key and what is allowed. It does not touch the network, the database or the event
loop: reading the file is the only I/O.
"""

from __future__ import annotations

import configparser
import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit

SECTION = "totem"
RULES_SECTION = "rules"
RULE_ACTIONS = ("allow", "ask", "deny")


class ConfigError(Exception):
    """A configuration value that cannot be used; the message is one line for the person."""


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("true or false")


def _int_range(low: int, high: int):
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"a whole number from {low} to {high}") from None
        if not low <= value <= high:
            raise ValueError(f"a whole number from {low} to {high}")
        return value
    return parse


def _parse_address(text: str) -> str:
    value = text.strip()
    if value == "localhost":
        return value
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError("an IP address such as 127.0.0.1, ::1 or 0.0.0.0") from None
    return value


# `token = none`: no sign-in at all, only by this explicit word (an empty value makes a token).
TOKENLESS = "none"


def _parse_token(text: str) -> str:
    value = text.strip()
    if value == TOKENLESS:
        return value
    if value and len(value) < 16:
        raise ValueError("empty (a token is made in the data folder), none (no sign-in) "
                         "or at least 16 characters")
    if any(ch.isspace() for ch in value):
        raise ValueError("a token without spaces")
    return value


def _parse_mcp_token(text: str) -> str:
    value = text.strip()
    if value and (len(value) < 16 or any(ch.isspace() for ch in value)):
        raise ValueError("empty or at least 16 characters without spaces")
    return value


def _parse_secret(text: str) -> str:
    value = text.strip()
    if value and len(value) < 16:
        raise ValueError("empty (generated in the data folder) or at least 16 characters")
    return value


def _parse_url(text: str) -> str:
    value = text.strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("an http or https URL")
    return value


def _parse_text(text: str) -> str:
    return text.strip()


def _parse_file(text: str) -> str:
    """A file's path (`~` for the home folder), or empty for none."""
    return os.path.expanduser(text.strip()) if text.strip() else ""


MAX_COST_USD = 1_000_000


def _parse_cost(text: str) -> float | None:
    """US dollars, or none (empty, `none`): no limit."""
    cleaned = text.strip().lower()
    if cleaned in ("", "none"):
        return None
    try:
        value = float(cleaned)
    except ValueError:
        raise ValueError(f"none or US dollars from 0 to {MAX_COST_USD}") from None
    if not 0 <= value <= MAX_COST_USD:  # also refuses nan and inf
        raise ValueError(f"none or US dollars from 0 to {MAX_COST_USD}")
    return value


def _parse_choice(*choices: str):
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(" or ".join(choices))
        return value
    return parse


# A list of folders (the sandbox's `writable` and `secrets`): at most this many, each absolute.
MAX_PATHS = 32
MAX_PATH_CHARS = 4096


def path_list_problem(paths) -> str | None:
    """Why `paths` is not a list of absolute, normalized paths (None when it is one)."""
    if not isinstance(paths, (list, tuple)) or len(paths) > MAX_PATHS:
        return f"must be a list of at most {MAX_PATHS} absolute paths"
    for path in paths:
        if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS or "\x00" in path:
            return f"must be a list of at most {MAX_PATHS} absolute paths"
        if not path.startswith("/") or os.path.normpath(path) != path:
            return f"must hold absolute paths without '..', '.' or '//' ({path!r} is not one)"
    return None


def _parse_paths(text: str) -> tuple[str, ...]:
    paths = tuple(part.strip() for part in text.split(os.pathsep) if part.strip())
    problem = path_list_problem(list(paths))
    if problem:
        raise ValueError(f"absolute paths separated by {os.pathsep}: it {problem}")
    return paths


def _parse_search_path(text: str) -> str:
    folders = [part.strip() for part in text.split(os.pathsep) if part.strip()]
    if not folders or any(not os.path.isabs(folder) for folder in folders):
        raise ValueError(f"absolute folders separated by {os.pathsep}")
    return os.pathsep.join(folders)


def _parse_proxy(text: str) -> str:
    value = text.strip()
    if value:
        _parse_address(value)
    return value


@dataclass(frozen=True)
class Key:
    name: str
    parse: Callable[[str], Any]  # the text of the key to its value; ValueError says what it must be
    default: str


# The keys whose values are secrets: never quoted back in an error.
SECRET_KEYS = frozenset({"token", "secret", "mcptoken"})

# Every key of [totem]; the README and config.ini describe each one.
KEYS = (
    Key("listen", _parse_address, "127.0.0.1"),
    Key("port", _int_range(0, 65535), "8470"),
    Key("token", _parse_token, ""),
    Key("secret", _parse_secret, ""),
    Key("cookiesecure", _parse_bool, "false"),
    Key("proxy", _parse_proxy, ""),
    Key("data", _parse_text, "data"),
    Key("terminalshell", _parse_text, ""),
    Key("mcp", _parse_bool, "false"),
    Key("mcptoken", _parse_mcp_token, ""),
    Key("forgemcp", _parse_bool, "false"),
    Key("forgeurl", _parse_url, "https://docs.totaljs.com"),
    Key("forgedocs", _parse_bool, "true"),
    Key("forge", _parse_bool, "true"),
    Key("selfcheck", _parse_bool, "false"),
    Key("headtimeout", _int_range(1, 300), "10"),
    Key("bodytimeout", _int_range(1, 3600), "60"),
    Key("keepalive", _int_range(1, 3600), "30"),
    Key("writetimeout", _int_range(1, 3600), "30"),
    Key("failures", _int_range(1, 1000), "10"),
    Key("blockminutes", _int_range(1, 1440), "5"),
    Key("wsqueue", _int_range(16, 1_000_000), "4096"),
    Key("wsqueuebytes", _int_range(65_536, 1 << 30), str(8 << 20)),
    Key("wsping", _int_range(1, 3600), "20"),
    # What waits to be sent, all connections together (httpd.SendBudget), and how many
    # connections are served at once.
    Key("sendbudgetmb", _int_range(1, 1 << 16), "64"),
    Key("maxconnections", _int_range(1, 100_000), "512"),
    Key("steps", _int_range(1, 1000), "50"),
    # The person's own instructions, given to every run of every project (empty: none).
    Key("instructions", _parse_file, "~/.config/totem/AGENTS.md"),
    # The model of `totem run` when no flag, session or earlier session of the project names one.
    Key("model", _parse_text, ""),
    # US dollars one run may spend (its sub-agents with it) before it stops; a setting too.
    Key("maxcost", _parse_cost, ""),
    Key("snapshotmb", _int_range(16, 1 << 20), "1024"),
    # The kernel sandbox of the agent's processes (sandbox.py): auto, required or off; the
    # folders bwrap is looked for in; the network of commands; more writable and secret places.
    Key("sandbox", _parse_choice("auto", "required", "off"), "auto"),
    Key("sandboxpath", _parse_search_path, "/usr/bin:/bin:/usr/sbin:/sbin"),
    Key("network", _parse_bool, "true"),
    Key("unattendednetwork", _parse_bool, "false"),
    Key("writable", _parse_paths, ""),
    Key("secrets", _parse_paths, ""),
    # What the server's console says: error, warning, info (start-up, refusals, slow clients)
    # or debug (also every connection the WebSocket library opens and closes).
    Key("loglevel", _parse_choice("error", "warning", "info", "debug"), "info"),
)


@dataclass(frozen=True)
class Config:
    """The typed values of the configuration file."""

    listen: str
    port: int
    token: str
    secret: str
    cookiesecure: bool
    proxy: str
    data: str
    terminalshell: str
    mcp: bool
    mcptoken: str
    forgemcp: bool
    forgeurl: str
    forgedocs: bool
    forge: bool
    selfcheck: bool
    headtimeout: int
    bodytimeout: int
    keepalive: int
    writetimeout: int
    failures: int
    blockminutes: int
    wsqueue: int
    wsqueuebytes: int
    wsping: int
    sendbudgetmb: int
    maxconnections: int
    steps: int
    instructions: str
    model: str
    maxcost: float | None
    snapshotmb: int
    sandbox: str
    sandboxpath: str
    network: bool
    unattendednetwork: bool
    writable: tuple
    secrets: tuple
    loglevel: str
    rules: tuple = ()  # global permission rules of [rules]: (tool, pattern, action)
    source: str = ""  # the file it was read from ("" when given otherwise)

    def replace(self, **changes) -> Config:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Config(**values)


def is_loopback(address: str) -> bool:
    """Whether a listen address only reaches this computer."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def parse_rule(name: str, text: str) -> tuple[str, str, str]:
    """`ACTION TOOL PATTERN` (e.g. `allow bash git log *`) as (tool, pattern, action).

    Raises ConfigError naming the rule.
    """
    parts = text.strip().split(None, 2)
    if len(parts) != 3 or parts[0] not in RULE_ACTIONS:
        raise ConfigError(f"config: rule '{name}' must be 'ACTION TOOL PATTERN' with ACTION allow, ask or deny, "
                          f"not {text.strip()!r}")
    action, tool, pattern = parts
    from totem.security.permissions import rule_problems  # pure; only needed when rules are configured
    from totem.tools import tool_kinds
    problems = rule_problems(tool, pattern, action, tool_kinds())
    if problems:
        raise ConfigError(f"config: rule '{name}': {problems[0][0]} {problems[0][1]}")
    return tool, pattern, action


def parse_values(raw: dict[str, str], base_dir: str, raw_rules: dict[str, str] | None = None,
                 source: str = "") -> Config:
    """Type-check raw strings into a Config.

    Raises ConfigError for an unknown key, a bad value, or a non-loopback listen address
    without a token.
    """
    known = {key.name for key in KEYS}
    for name in raw:
        if name not in known:
            raise ConfigError(f"config: unknown key '{name}' in [{SECTION}]")
    values = {}
    for key in KEYS:
        text = raw.get(key.name, key.default)
        try:
            values[key.name] = key.parse(text)
        except ValueError as exc:
            # A secret's bad value is not echoed: the line may end up in a log or on a screen.
            shown = "" if key.name in SECRET_KEYS else f", not {text.strip()!r}"
            raise ConfigError(f"config: '{key.name}' must be {exc}{shown}") from None
    if not os.path.isabs(values["data"]):
        values["data"] = os.path.join(base_dir, values["data"] or "data")
    values["rules"] = tuple(parse_rule(name, text) for name, text in (raw_rules or {}).items())
    values["source"] = os.path.abspath(source) if source else ""
    config = Config(**values)
    if not is_loopback(config.listen) and config.token == TOKENLESS:
        raise ConfigError(
            f"config: 'listen' is {config.listen}, which other computers can reach; "
            "remove 'token = none' to listen there with an access token, or listen on 127.0.0.1")
    return config


def load_config(path: str) -> Config:
    """Read and validate a configuration file; a missing file gives the defaults.

    Raises ConfigError with one line for the person.
    """
    # Only '=' separates a key from its value: rule patterns may contain ':'.
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"), delimiters=("=",))
    try:
        with open(path, encoding="utf-8") as handle:
            parser.read_file(handle)
    except FileNotFoundError:
        if path != default_config_path():
            raise ConfigError(f"config: no file at {path}") from None
    except (configparser.Error, UnicodeDecodeError) as exc:
        first_line = str(exc).splitlines()[0]
        raise ConfigError(f"config: {path} cannot be read: {first_line}") from None
    raw = dict(parser[SECTION]) if parser.has_section(SECTION) else {}
    rules = dict(parser[RULES_SECTION]) if parser.has_section(RULES_SECTION) else {}
    return parse_values(raw, os.path.dirname(os.path.abspath(path)), rules, source=path)


def default_config_path() -> str:
    """config.ini beside totem.py."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "config.ini")
