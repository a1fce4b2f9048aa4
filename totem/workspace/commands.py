"""The commands and agents of a project: `.totem/commands/*.md` and `.totem/agents/*.md`.

Owns reading those files (through the project boundary, like every file Totem reads for a
session), their front matter (a small, strict subset of YAML of our own: `key: value` lines,
lists as `[a, b]` or as `- item` lines below `key:`), what makes a file invalid, expanding a
command's text with its arguments (`$ARGUMENTS`, `$1` to `$9`) and the files it names (`@path`),
and what an agent changes in a run.

A project file can only narrow what a run may do, never widen it: a cloned repository must not
grant itself rights (README, Permissions). So a file may choose a model, Plan mode (never Build
over a Plan session), a prompt added to the system prompt and a subset of the built-in tools;
a key that would grant anything (`rules`, `autoaccept`, `allow`, ...), an unknown key or an
unknown tool makes the file invalid, listed with its error and never used.

Must not: decide permissions, start runs, or read anything outside the project root or any
protected secret file (`boundary.is_protected_env`, the one definition). Pure but for reading
files; the reads block and run on a worker thread.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from dataclasses import dataclass, field
from functools import cache

from totem.security.boundary import BoundaryError, OutsideError, is_protected_env, relative_path, resolve_inside

COMMANDS_FOLDER = ".totem/commands"
AGENTS_FOLDER = ".totem/agents"
FILE_SUFFIX = ".md"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_NAME_CHARS = 64
MAX_FILES = 100  # per folder; the rest are listed as one invalid entry
MAX_FILE_BYTES = 32 * 1024
MAX_FRONT_MATTER_LINES = 100
MAX_DESCRIPTION_CHARS = 500
MAX_MODEL_CHARS = 300
MAX_TOOLS = 50
# `@path` in a command: at most this many files, each at most this large. A text attachment up
# to 256 KB reaches the model whole (agent/context.py sends a larger one as a line naming it).
MAX_REFERENCES = 10
MAX_REFERENCE_BYTES = 256 * 1024
MODES = ("build", "plan")

COMMAND_KEYS = ("description", "model", "mode", "agent")
AGENT_KEYS = ("description", "model", "mode", "tools")
# Keys that would grant rights. Only the person grants them, in Totem (Permissions|save, the
# answers to questions, auto-accept on a prompt); a file that tries is refused whole.
GRANTING_KEYS = frozenset(("rules", "rule", "autoaccept", "allow", "deny", "ask", "permission", "permissions"))
KEY_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*):(?:[ \t]+(.*))?$")
ITEM_LINE = re.compile(r"^[ ]*-(?:[ \t]+(.*))?$")
# YAML's indicators that may not open a plain value; our subset does not read what they start.
PLAIN_FORBIDDEN_START = frozenset("[]{}&*!|>%@`#,?:-")
DOUBLE_QUOTE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "t": "\t"}

PLACEHOLDER = re.compile(r"\$(ARGUMENTS|[1-9])")
# `@path` at the start of a line or after white space (not `me@example.com`); punctuation that
# ends a sentence is not part of the path.
REFERENCE = re.compile(r"(?:(?<=\s)|^)@(\S+)", re.MULTILINE)
REFERENCE_TRAILING = ".,;:!?)]}'\""

Value = str | list[str]
Attachment = tuple[str, str, bytes]  # (name, media type, content), as a prompt carries files


class ProjectFileError(ValueError):
    """A command or agent that cannot be used as asked; `field` names the input to blame
    (`command`, `agent` or `arguments`), str(exc) says why."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class FrontMatterError(ValueError):
    """Front matter outside the subset this module reads; the message names the line."""


# -- front matter -------------------------------------------------------------------------------


def parse_front_matter(text: str) -> tuple[dict[str, Value], str]:
    """The fields of the front matter and the text after it.

    The front matter is optional: it opens with a line `---` as the file's first line and ends
    at the next line `---`. Inside, blank lines and `#` comments are skipped, and each other line
    is `key: value` (a plain or quoted value, or a list `[a, b]`), or `key:` followed by `- item`
    lines. Values are text or lists of text; nothing else of YAML is read (nested maps, values on
    several lines, anchors, tags, a key given twice): each is an error naming its line. Raises
    FrontMatterError.
    """
    lines = text.split("\n")
    if lines[0].rstrip("\r").rstrip() != "---":
        return {}, text
    fields: dict[str, Value] = {}
    list_key: str | None = None  # the key whose `- item` lines may follow
    empty: dict[str, int] = {}  # keys written `key:` that no item followed yet, with their line
    for index in range(1, len(lines)):
        number, line = index + 1, lines[index].rstrip("\r")
        if line.rstrip() == "---":
            if empty:
                key, at = next(iter(empty.items()))
                raise FrontMatterError(f"line {at}: {key} has no value (write [] for an empty list)")
            return fields, "\n".join(lines[index + 1:])
        if index > MAX_FRONT_MATTER_LINES:
            raise FrontMatterError(f"the front matter is longer than {MAX_FRONT_MATTER_LINES} lines")
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if "\t" in line[:len(line) - len(line.lstrip())]:
            raise FrontMatterError(f"line {number}: tabs cannot indent (YAML forbids them)")
        if line[0] in " -":
            item = ITEM_LINE.match(line)
            if item is None or list_key is None:
                raise FrontMatterError(f"line {number}: only `- item` lines may follow `key:`; "
                                       "nested values are not read")
            value = _scalar(item.group(1) or "", number)
            if value is None:
                raise FrontMatterError(f"line {number}: a list item needs a value")
            items = fields[list_key]
            assert isinstance(items, list)
            items.append(value)
            empty.pop(list_key, None)
            continue
        match = KEY_LINE.match(line)
        if match is None:
            raise FrontMatterError(f"line {number}: expected `key: value`")
        key, raw = match.group(1), (match.group(2) or "").strip()
        if key in fields:
            raise FrontMatterError(f"line {number}: {key} is given twice")
        list_key = None
        if not raw or raw.startswith("#"):
            fields[key], list_key, empty[key] = [], key, number
        elif raw.startswith("["):
            fields[key] = _flow_list(raw, number)
        else:
            scalar = _scalar(raw, number)
            assert scalar is not None
            fields[key] = scalar
    raise FrontMatterError("the front matter that opens on line 1 never ends with a line ---")


def _scalar(raw: str, number: int) -> str | None:
    """One value of a `key: value` or `- item` line: quoted, or plain up to a ` #` comment.
    None for nothing but a comment."""
    raw = raw.strip()
    if not raw or raw.startswith("#"):
        return None
    if raw[0] in "\"'":
        value, rest = _quoted(raw, number)
        rest = rest.strip()
        if rest and not rest.startswith("#"):
            raise FrontMatterError(f"line {number}: text after the closing quote")
        return value
    return _plain(raw.split(" #", 1)[0].split("\t#", 1)[0].strip(), number)


def _plain(value: str, number: int, flow: bool = False) -> str:
    """A plain (unquoted) value, refused where YAML would read it as something else."""
    if value[0] in PLAIN_FORBIDDEN_START and not (value[0] == "-" and value[1:2] not in ("", " ")):
        raise FrontMatterError(f"line {number}: a value cannot start with {value[0]!r} here; quote it")
    if ": " in value or value.endswith(":"):
        raise FrontMatterError(f"line {number}: quote a value that holds ': ' or ends with ':'")
    if flow and (" #" in value or any(char in value for char in "[]{}")):
        raise FrontMatterError(f"line {number}: quote a list item that holds brackets or ' #'")
    return value


def _quoted(raw: str, number: int) -> tuple[str, str]:
    """The quoted value at the start of `raw` and what follows its closing quote."""
    quote, out, index = raw[0], [], 1
    while index < len(raw):
        char = raw[index]
        if quote == "'" and char == "'":
            if raw[index + 1:index + 2] == "'":
                out.append("'")
                index += 2
                continue
            return "".join(out), raw[index + 1:]
        if quote == '"' and char == '"':
            return "".join(out), raw[index + 1:]
        if quote == '"' and char == "\\":
            escaped = raw[index + 1:index + 2]
            if escaped not in DOUBLE_QUOTE_ESCAPES:
                raise FrontMatterError(f"line {number}: the escape \\{escaped} is not read; "
                                       "use \\\", \\\\, \\n or \\t")
            out.append(DOUBLE_QUOTE_ESCAPES[escaped])
            index += 2
            continue
        out.append(char)
        index += 1
    raise FrontMatterError(f"line {number}: a quote that is never closed")


def _flow_list(raw: str, number: int) -> list[str]:
    """`[a, "b c", 'd']`: a list of plain or quoted values on one line."""
    rest = raw[1:].strip()
    items: list[str] = []
    while True:
        if rest.startswith("]"):
            tail = rest[1:].strip()
            if tail and not tail.startswith("#"):
                raise FrontMatterError(f"line {number}: text after the list's ]")
            return items
        if not rest:
            raise FrontMatterError(f"line {number}: the list is never closed with ]")
        if rest[0] in "\"'":
            value, rest = _quoted(rest, number)
        else:
            end = min((at for at in (rest.find(","), rest.find("]")) if at >= 0), default=-1)
            if end < 0:
                raise FrontMatterError(f"line {number}: the list is never closed with ]")
            value, rest = rest[:end].strip(), rest[end:]
            if not value:
                raise FrontMatterError(f"line {number}: an empty item in the list")
            value = _plain(value, number, flow=True)
        items.append(value)
        rest = rest.strip()
        if rest.startswith(","):
            rest = rest[1:].strip()
        elif not rest.startswith("]"):
            raise FrontMatterError(f"line {number}: items of a list are separated by commas")


# -- the files ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agent:
    """`.totem/agents/NAME.md`: its text is the prompt added to the system prompt."""

    name: str
    file: str  # relative to the project, with /
    description: str = ""
    model: str | None = None
    mode: str | None = None
    tools: tuple[str, ...] | None = None  # None: every tool of the run; else only these
    prompt: str = ""

    def view(self) -> dict:
        return {"name": self.name, "file": self.file, "description": self.description, "model": self.model,
                "mode": self.mode, "tools": list(self.tools) if self.tools is not None else None}


@dataclass(frozen=True)
class Command:
    """`.totem/commands/NAME.md`: its text, expanded, is the prompt."""

    name: str
    file: str
    template: str
    description: str = ""
    model: str | None = None
    mode: str | None = None
    agent: str | None = None

    def view(self) -> dict:
        return {"name": self.name, "file": self.file, "description": self.description, "model": self.model,
                "mode": self.mode, "agent": self.agent,
                "arguments": bool(PLACEHOLDER.search(self.template))}


@dataclass
class Listing:
    """What a project's folders hold: the usable commands and agents, and the invalid files."""

    commands: dict[str, Command] = field(default_factory=dict)
    agents: dict[str, Agent] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)  # file -> why it is not used

    def view(self) -> dict:
        """`{commands: [...], agents: [...], invalid: [{file, error}]}`, each sorted by name."""
        return {"commands": [self.commands[name].view() for name in sorted(self.commands)],
                "agents": [self.agents[name].view() for name in sorted(self.agents)],
                "invalid": [{"file": file, "error": error} for file, error in sorted(self.invalid.items())]}


@cache
def builtin_tools() -> tuple[str, ...]:
    """The names an agent's `tools` may list: the built-in tools, nothing else."""
    from totem.tools import default_registry  # the tool modules load once, when a file names tools
    return tuple(default_registry().names())


def read_listing(root: str) -> Listing:
    """The commands and agents of the project at `root` (links resolved). Blocks: run it on a
    worker thread. Never raises for a file: a file that cannot be used is in `invalid`."""
    listing = Listing()
    for name, file, text in _files(root, AGENTS_FOLDER, listing.invalid):
        agent, problems = _agent(name, file, text)
        if agent is None:
            listing.invalid[file] = "; ".join(problems)
        else:
            listing.agents[name] = agent
    for name, file, text in _files(root, COMMANDS_FOLDER, listing.invalid):
        command, problems = _command(name, file, text)
        if command is not None and command.agent is not None and command.agent not in listing.agents:
            agent_file = f"{AGENTS_FOLDER}/{command.agent}{FILE_SUFFIX}"
            problems = [f"agent: {command.agent} is not a valid agent"
                        + (f" ({agent_file} is invalid)" if agent_file in listing.invalid
                           else f" (no {agent_file})")]
            command = None
        if command is None:
            listing.invalid[file] = "; ".join(problems)
        else:
            listing.commands[name] = command
    return listing


def _files(root: str, folder: str, invalid: dict[str, str]):
    """(name, file, text) of each `*.md` of a folder of the project that can be read; the others
    go into `invalid` with the reason. Editor files (`.x.md`, `x.md~`) are left out."""
    try:
        resolved = resolve_inside(root, folder)
    except BoundaryError as exc:
        invalid[folder] = str(exc) if isinstance(exc, OutsideError) else f"{folder}: {exc}"
        return
    try:
        with os.scandir(resolved) as entries:
            names = sorted(entry.name for entry in entries
                           if entry.name.endswith(FILE_SUFFIX) and not entry.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        invalid[folder] = f"cannot be read: {exc.strerror}"
        return
    if len(names) > MAX_FILES:
        invalid[f"{folder}/{names[MAX_FILES]}"] = (f"more than {MAX_FILES} files in {folder}: this one and the "
                                                   "rest are not read")
        names = names[:MAX_FILES]
    for filename in names:
        file = f"{folder}/{filename}"
        name = filename[:-len(FILE_SUFFIX)]
        if not NAME_PATTERN.match(name):
            invalid[file] = (f"the name {name!r} is not usable: 1 to {MAX_NAME_CHARS} letters, digits, "
                             "'-', '_' or '.', starting with a letter or digit")
            continue
        try:
            text = _read_text(root, file, MAX_FILE_BYTES)
        except ProjectFileError as exc:
            invalid[file] = str(exc)
            continue
        if text is not None:
            yield name, file, text


def _read_text(root: str, path: str, limit: int, field: str = "") -> str | None:
    """The UTF-8 text of a regular file of the project, resolved through the boundary; None when
    it is not there (or is a folder, when no `field` asks for it). Raises ProjectFileError
    (outside the project, a protected secret file also through a link, more than one hard link,
    not a regular file, too large, not text)."""
    where = f"@{path}" if field else "the file"
    try:
        resolved = resolve_inside(root, path)
    except OutsideError:
        raise ProjectFileError(field, f"{where} is outside the project") from None
    except BoundaryError as exc:
        raise ProjectFileError(field, f"{where}: {exc}") from None
    if is_protected_env(path) or is_protected_env(relative_path(root, resolved)):
        raise ProjectFileError(field, f"{where} is a protected secret file, which Totem never reads for a "
                                      "command; attach it yourself if the model must see it")
    try:
        # O_NONBLOCK: a FIFO does not hold the thread open; its type is refused just below.
        handle = os.open(resolved, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        if field:
            raise ProjectFileError(field, f"{where}: no such file in the project") from None
        return None
    except OSError as exc:
        raise ProjectFileError(field, f"{where} cannot be read: {exc.strerror}") from None
    with os.fdopen(handle, "rb") as stream:
        info = os.fstat(stream.fileno())
        if stat.S_ISDIR(info.st_mode) and not field:
            return None
        if not stat.S_ISREG(info.st_mode):
            raise ProjectFileError(field, f"{where} is not a regular file")
        if info.st_nlink > 1:
            raise ProjectFileError(field, f"{where} has {info.st_nlink} hard links: another name of it may be "
                                          "outside the project or a secret file, so it is not read")
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise ProjectFileError(field, f"{where} is larger than {limit // 1024} KB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProjectFileError(field, f"{where} is not UTF-8 text") from None
    if "\x00" in text:
        raise ProjectFileError(field, f"{where} is not text (it holds a NUL byte)")
    return text.removeprefix("\ufeff")


def _fields(text: str, keys: tuple[str, ...]) -> tuple[dict[str, Value], str, list[str]]:
    """The front matter of a file, its body and its problems (each unknown or granting key)."""
    try:
        fields, body = parse_front_matter(text)
    except FrontMatterError as exc:
        return {}, "", [str(exc)]
    problems = []
    for key in fields:
        if key.lower() in GRANTING_KEYS:
            problems.append(f"{key}: a project file cannot grant permissions; rules and auto-accept "
                            "are the person's, set in Totem")
        elif key not in keys:
            problems.append(f"{key}: unknown key; the keys are {', '.join(keys)}")
    return fields, body, problems


def _text_field(fields: dict[str, Value], key: str, max_chars: int, problems: list[str]) -> str | None:
    value = fields.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        problems.append(f"{key}: must be one value, not a list")
        return None
    if len(value) > max_chars:
        problems.append(f"{key}: must be at most {max_chars} characters")
        return None
    return value


def _mode_field(fields: dict[str, Value], problems: list[str]) -> str | None:
    mode = _text_field(fields, "mode", 10, problems)
    if mode is not None and mode not in MODES:
        problems.append(f"mode: must be {' or '.join(MODES)}")
        return None
    return mode


def _agent(name: str, file: str, text: str) -> tuple[Agent | None, list[str]]:
    fields, body, problems = _fields(text, AGENT_KEYS)
    description = _text_field(fields, "description", MAX_DESCRIPTION_CHARS, problems) or ""
    model = _text_field(fields, "model", MAX_MODEL_CHARS, problems)
    mode = _mode_field(fields, problems)
    tools = None
    if "tools" in fields:
        listed = fields["tools"]
        if not isinstance(listed, list):
            problems.append("tools: must be a list, such as [read, grep] or - item lines")
        elif len(listed) > MAX_TOOLS:
            problems.append(f"tools: at most {MAX_TOOLS} names")
        else:
            known = builtin_tools()
            unknown = [tool for tool in listed if tool not in known]
            if unknown:
                problems.append(f"tools: unknown {'tool' if len(unknown) == 1 else 'tools'} "
                                f"{', '.join(unknown)}; an agent may list only built-in tools: {', '.join(known)}")
            tools = tuple(dict.fromkeys(listed))
    if problems:
        return None, problems
    return Agent(name, file, description, model or None, mode, tools, body.strip()), []


def _command(name: str, file: str, text: str) -> tuple[Command | None, list[str]]:
    fields, body, problems = _fields(text, COMMAND_KEYS)
    description = _text_field(fields, "description", MAX_DESCRIPTION_CHARS, problems) or ""
    model = _text_field(fields, "model", MAX_MODEL_CHARS, problems)
    mode = _mode_field(fields, problems)
    agent = _text_field(fields, "agent", MAX_NAME_CHARS, problems)
    if agent is not None and not NAME_PATTERN.match(agent):
        problems.append("agent: must name a file of .totem/agents without .md")
    if not problems and not body.strip():
        problems.append("the command has no text after its front matter")
    if problems:
        return None, problems
    return Command(name, file, body.strip(), description, model or None, mode, agent or None), []


# -- running a command or an agent -------------------------------------------------------------


def expand(template: str, arguments: str) -> tuple[str, list[tuple[str, str]]]:
    """A command's text with its arguments, and each `@path` it names with the input to blame
    for it (`arguments` when the path came from them, else `command`).

    `$ARGUMENTS` is the whole arguments text; `$1` to `$9` its words as a POSIX shell splits them
    (`"a b"` is one word; a missing word is empty). A text without a placeholder gets the
    arguments as a paragraph of its own at the end. Raises ProjectFileError (quotes that do not
    close)."""
    arguments = arguments.strip()
    try:
        words = shlex.split(arguments)
    except ValueError as exc:
        raise ProjectFileError("arguments", f"cannot be split into words: {exc}") from None
    pieces: list[str] = []
    spans: list[tuple[int, int]] = []  # where the arguments landed in the text
    length = position = 0
    for match in PLACEHOLDER.finditer(template):
        literal = template[position:match.start()]
        key = match.group(1)
        value = arguments if key == "ARGUMENTS" else (words[int(key) - 1] if int(key) <= len(words) else "")
        pieces += [literal, value]
        length += len(literal)
        spans.append((length, length + len(value)))
        length += len(value)
        position = match.end()
    pieces.append(template[position:])
    length += len(template) - position
    if not spans and arguments:
        pieces.append("\n\n" + arguments)
        spans.append((length + 2, length + 2 + len(arguments)))
    text = "".join(pieces)
    references = []
    for match in REFERENCE.finditer(text):
        path = match.group(1).rstrip(REFERENCE_TRAILING)
        if not path:
            continue
        start, end = match.start(), match.start(1) + len(path)
        blame = "arguments" if any(low < end and start < high for low, high in spans) else "command"
        references.append((path, blame))
    return text, references


def read_references(root: str, references: list[tuple[str, str]]) -> list[Attachment]:
    """The files that `@path`s name, as text attachments named by their path in the project,
    each once. Blocks. Raises ProjectFileError naming the input to blame: a path outside the
    project, a protected secret file, a missing, linked, large or binary file, too many files."""
    if len(references) > MAX_REFERENCES:
        raise ProjectFileError(references[MAX_REFERENCES][1], f"at most {MAX_REFERENCES} files (@path) per command")
    files: list[Attachment] = []
    seen: set[str] = set()
    for path, blame in references:
        text = _read_text(root, path, MAX_REFERENCE_BYTES, blame)
        name = relative_path(root, resolve_inside(root, path))
        if text is not None and name not in seen:
            seen.add(name)
            files.append((name, "text/plain", text.encode("utf-8")))
    return files


@dataclass(frozen=True)
class Choice:
    """What a command or an agent makes of one prompt. Everything here narrows the run."""

    text: str | None = None  # the command's expanded text (None: the person's own text)
    files: list[Attachment] = field(default_factory=list)  # the files of its `@path`s
    model: str | None = None  # the command's model, else the agent's
    model_from: str = "command"  # the input a bad model is blamed on
    plan: bool = False  # the command or the agent asks for Plan mode
    tools: tuple[str, ...] | None = None  # the agent's tools: only these are declared and run
    instructions: str = ""  # the agent's prompt, for the end of the system prompt
    notes: dict = field(default_factory=dict)  # what the user message records: command, agent


def choose(root: str, command: str | None, arguments: str | None, agent: str | None) -> Choice:
    """The command (with its arguments) and the agent of a prompt, read from the project at
    `root`. The prompt's own `agent` replaces the command's. Blocks. Raises ProjectFileError
    (no such command or agent, an invalid file, a bad `@path`)."""
    listing = read_listing(root)
    chosen = _pick(listing, "command", command, COMMANDS_FOLDER, listing.commands) if command else None
    agent_from = "agent" if agent else "command"
    agent = agent or (chosen.agent if isinstance(chosen, Command) else None)
    picked = _pick(listing, agent_from, agent, AGENTS_FOLDER, listing.agents) if agent else None
    text, files, notes = None, [], {}
    if isinstance(chosen, Command):
        text, references = expand(chosen.template, arguments or "")
        files = read_references(root, references)
        notes = {"command": chosen.name, "arguments": (arguments or "").strip()}
    instructions = ""
    tools = None
    if isinstance(picked, Agent):
        notes["agent"] = picked.name
        tools = picked.tools
        if picked.prompt:
            instructions = (f"\n\nAgent instructions ({picked.file}, written by the project's developers; "
                            f"the person chose this agent for this prompt):\n{picked.prompt}")
    command_model = chosen.model if isinstance(chosen, Command) else None
    agent_model = picked.model if isinstance(picked, Agent) else None
    modes = [item.mode for item in (chosen, picked) if item is not None]
    return Choice(text, files, command_model or agent_model, "command" if command_model else agent_from,
                  "plan" in modes, tools, instructions, notes)


def _pick(listing: Listing, field: str, name: str, folder: str, found: dict):
    if name in found:
        return found[name]
    file = f"{folder}/{name}{FILE_SUFFIX}"
    what = "command" if folder == COMMANDS_FOLDER else "agent"
    if file in listing.invalid:
        raise ProjectFileError(field, f"the {what} {name} cannot be used: {file}: {listing.invalid[file]}")
    raise ProjectFileError(field, f"no {what} {name} in this project ({folder})")
