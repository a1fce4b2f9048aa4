"""The permission decision: rules, matching, the built-in defaults and `decide()`.

A pure module: no I/O, no clock, no state. The permission gate builds a `Call` for each tool
call, with the tool's `ToolKind` (each tool declares what its subjects are, whether it changes
things, whether auto-accept applies to it): this module keeps no list of tools of its own. It
passes the project and global rules and acts on the `Decision`; the API lists
`default_rules()`, validates new rules with `rule_problems()` and offers `suggest_patterns()`.

The order of a decision (DESIGN.md, "Permission decision"):
1. Code first: a path outside the project is denied; Plan mode denies every tool whose kind
   `changes` files or runs a command.
2. Rules: the project rules, the global rules and the defaults (the table of the security text as
   real rules). The most specific matching rule wins: an exact pattern beats any wildcard; among
   wildcards, more literal characters; then deny; then the earlier layer; then ask over allow.
   Bash is split into simple commands (shellwords.py), each decided alone, the strictest wins;
   a line that is not fully understood is never allowed by a rule (allow becomes ask).
3. Guards on a wildcard allow (an exact rule still decides): a subject that names a protected
   .env file asks (file path, or any argument of a command); so does a command whose arguments
   lead outside the project (absolute, `~`, `..`, or refused by `Call.inside`).
4. Auto-accept turns ask into allow for the kinds that `edits` (write, edit, patch), never for a
   protected file.
5. An edit to a file that a project MCP server approved to start without asking runs (a file
   of its pin, `Call.pinned`) asks, whatever a rule or auto-accept says: the change would run at
   the server's next start without a question. No rule can allow it ("always" stores nothing).
6. A command asked to run outside the sandbox (`Call.outside_sandbox`) is asked every time,
   whatever allow rule matches (a deny still denies); a scheduled run or a sub-agent is denied
   it (nobody there chose it), and Plan mode already denies every command.
7. Inside the wall: a command that asks only because no rule of the person allows it (the
   defaults, an opaque line, a wildcard guard), that runs with every protection of the sandbox
   and the network off (`Call.sandboxed`), is allowed by a rule `allow sandboxed *` (the preset
   of the Rules dialog, SANDBOXED_TOOL), never when an ask or deny rule of the person matches.
8. A scheduled run turns any remaining ask into deny (no person is there to answer).

Must not: read files, resolve paths (the caller passes `outside`, `inside` and `pinned`), ask the
person.
"""

from __future__ import annotations

import dataclasses
import functools
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from totem.security import boundary
from totem.security.programs import risky_use
from totem.security.shellwords import Split, command_text, split_command

__all__ = [
    "ACTIONS", "LAYERS", "RUN_LAYER", "ToolKind", "PATH", "COMMAND", "HOST", "CALL", "TEXT", "Rule", "Decision", "Call",
    "Split", "default_rules", "decide", "split_command", "command_text", "suggest_patterns",
    "matches", "rule_problems", "RuleRow", "DecisionRow", "Inside"]

ACTIONS = ("allow", "ask", "deny")
# "run": the rules one run was given (Sessions|prompt's `allow`, never stored): at equal
# specificity a deny of any layer still beats them.
RUN_LAYER = "run"
LAYERS = (RUN_LAYER, "project", "global", "default")
# What a tool's subjects are, as its kind declares them (ToolKind.subject).
PATH = "path"  # project-relative paths: `*` within a folder, `**` across folders
COMMAND = "command"  # a command line, split into simple commands and matched word by word
HOST = "host"  # a host name, without case
CALL = "call"  # `server/tool` of an MCP server
TEXT = "text"  # anything else: `*` is any text
MAX_PATTERN_CHARS = 1000
MAX_REASON_SUBJECT_CHARS = 200  # a reason quotes at most this much of a command or path
SEVERITY = {"allow": 0, "ask": 1, "deny": 2}
VERBS = {"allow": "allowed", "ask": "approval required", "deny": "denied"}
SCHEDULED_REASON = "no one is here to approve (a scheduled run)"
OUTSIDE_SANDBOX_REASON = "runs outside the sandbox: asked every time, never allowed by a rule"
OUTSIDE_SANDBOX_UNATTENDED = ("a scheduled run or a sub-agent never runs a command outside the sandbox "
                              "(nobody is here to approve it)")
# The rule tool of the preset "commands inside the sandbox": `allow sandboxed *` lets a bash
# command run without a question where the wall holds (every protection, no network).
SANDBOXED_TOOL = "sandboxed"
SANDBOXED_REASON = ("allowed without a question inside the sandbox with the network off, by the {layer} rule "
                    "sandboxed: *")
GLOB_CHARS = "*?["
# `ls` flags that only change how a listing looks (no -L: it follows links out of the project).
SAFE_LS_FLAGS = frozenset("1aAdFhlrRStu")

# bash: does this path argument stay inside the project? (It may raise ValueError or OSError
# for a path the boundary refuses, which counts as outside.)
Inside = Callable[[str], bool]


class RuleRow(TypedDict):
    """A rule as the API lists it (`Rule.to_dict()`)."""

    id: str | None
    tool: str
    pattern: str
    action: str
    layer: str


class DecisionRow(TypedDict):
    """A decision as the audit record and the API show it (`Decision.to_dict()`)."""

    action: str
    reason: str
    rule: RuleRow | None
    subject: str | None


@dataclass(frozen=True)
class Rule:
    """tool + pattern -> action, from one layer. tool "*" applies to every tool."""

    tool: str
    pattern: str
    action: str
    layer: str
    id: str | None = None

    def to_dict(self) -> RuleRow:
        return {"id": self.id, "tool": self.tool, "pattern": self.pattern, "action": self.action,
                "layer": self.layer}


@dataclass(frozen=True)
class Decision:
    """allow, ask or deny, why (a sentence for the person and the model), and what decided."""

    action: str
    reason: str
    rule: Rule | None = None  # None when code decided (plan mode, outside, a guard, scheduled)
    subject: str | None = None  # the subject that decided (bash: the simple command)
    # For an ask: the subjects that need an answer (bash: each simple command that asks), for
    # which "always" may store a rule; empty when no rule could allow the call (an opaque line).
    asks: tuple[str, ...] = ()

    def to_dict(self) -> DecisionRow:
        return {"action": self.action, "reason": self.reason,
                "rule": self.rule.to_dict() if self.rule else None, "subject": self.subject}


@dataclass(frozen=True)
class ToolKind:
    """What a tool declares to the permission engine (tools/__init__.py gathers them)."""

    subject: str  # PATH, COMMAND, HOST, CALL or TEXT
    changes: bool  # it changes files or runs a command: Plan mode denies it
    edits: bool = False  # auto-accept edits may turn its ask into allow
    searches: bool = False  # it searches contents and skips protected files in code: never asked for them


@dataclass(frozen=True)
class Call:
    """One tool call as the permission check sees it."""

    tool: str
    subjects: tuple[str, ...]  # paths, one command line, a host ... as `kind.subject` says
    kind: ToolKind = ToolKind(TEXT, changes=True)  # the tool's declaration (unknown: the strictest)
    mode: str = "build"  # build | plan (anything but "build" is treated as plan)
    autoaccept: bool = False
    scheduled: bool = False
    outside: bool = False  # the boundary found a path outside the project
    inside: Inside | None = None  # bash: does this path argument stay inside?
    # bash: the repository names programs (filter drivers, aliases, includes) that git would run,
    # so the default `git status` safe forms do not apply and no wildcard rule allows git.
    git_programs: bool = False
    # edits: the subjects that are files an approved project MCP server runs -> that server's name
    pinned: Mapping[str, str] = dataclasses.field(default_factory=dict)
    outside_sandbox: bool = False  # a command asked to run outside the sandbox
    # a command that will run with every protection of the sandbox and the network off
    sandboxed: bool = False
    subagent: bool = False  # the call of a sub-agent's run


def _default(tool: str, pattern: str, action: str, name: str | None = None) -> Rule:
    return Rule(tool, pattern, action, "default", id=f"default:{tool}:{name or pattern}")


# The safe `ls` form: matches only simple listing flags and plain paths inside the project.
_LS_RULE = _default("bash", "ls *", "allow", "ls-listing")
_RULE_NOTES = {_LS_RULE: "simple listing flags, paths inside the project"}
_ENV_NAMES = (".env", ".env.*")
_ENV_FINE = (".env.example", ".env.sample", ".env.template")

_DEFAULT_RULES = (
    *(_default(tool, "**", "allow") for tool in ("read", "glob", "grep", "skill", "todo", "ask")),
    _default("mcp_schema", "*", "allow"),  # the schemas of tools already started: reads nothing
    _default("task", "*", "allow"),  # a sub-agent: each of its calls is decided on its own
    *(_default("read", f"**/{name}", "ask") for name in _ENV_NAMES),
    *(_default("read", f"**/{name}", "allow") for name in _ENV_FINE),
    *(_default(tool, "**", "ask") for tool in ("write", "edit", "patch")),
    _default("bash", "*", "ask"),
    _default("bash", "pwd", "allow"),
    *(_GIT_SAFE_FORMS := tuple(_default("bash", f"git status{flag}", "allow")
                               for flag in ("", " --short", " -s", " --porcelain"))),
    _default("bash", "ls", "allow"),
    _LS_RULE,
    *(_default(tool, "*", "ask") for tool in ("fetch", "mcp", "mcp-start", "jobstop")),
)


def default_rules() -> tuple[Rule, ...]:
    """The defaults table of the security text as rules of the layer "default".

    `default:bash:ls-listing` (pattern `ls *`) only matches `ls` with simple listing flags
    (SAFE_LS_FLAGS, e.g. -la) and plain paths that `Call.inside` accepts.
    """
    return _DEFAULT_RULES


def decide(call: Call, rules: Sequence[Rule]) -> Decision:
    """The decision for one tool call under the project and global `rules` (defaults are added).

    Raises ValueError for a rule with an unknown action or layer (rule_problems() keeps them out).
    """
    if call.outside:
        return Decision("deny", "the path is outside the project")
    kind = call.kind
    if call.mode != "build" and kind.changes:
        return Decision("deny", f"plan mode does not allow {call.tool} (it changes files "
                                "or runs a command)")
    for rule in rules:
        if rule.action not in ACTIONS or rule.layer not in LAYERS:
            raise ValueError(f"invalid rule {rule.to_dict()}")
    defaults = _DEFAULT_RULES
    if call.git_programs:
        defaults = tuple(rule for rule in defaults if rule not in _GIT_SAFE_FORMS)
    candidates = (*rules, *defaults)
    # A bare string would be iterated letter by letter: take it as the one subject it is.
    subjects = (call.subjects,) if isinstance(call.subjects, str) else tuple(call.subjects) or ("",)
    if kind.subject == COMMAND:
        decisions = [_decide_line(call.tool, line, candidates, call.inside, call.git_programs)
                     for line in subjects]
    else:
        decisions = [_decide_subject(call.tool, kind, subject, candidates) for subject in subjects]
    decision = _strictest(decisions)
    if decision.action == "ask":
        asks = tuple(dict.fromkeys(subject for item in decisions for subject in item.asks))
        decision = dataclasses.replace(decision, asks=asks)
    if (decision.action == "ask" and call.autoaccept and kind.edits
            and not any(_is_env(subject) for subject in subjects)):
        decision = Decision("allow", "allowed by auto-accept edits for this session",
                            subject=decision.subject)
    pinned = next((subject for subject in subjects if subject in call.pinned), None) if kind.edits else None
    if pinned is not None and decision.action != "deny":
        decision = Decision("ask", pinned_reason(pinned, call.pinned[pinned]), subject=pinned)
    if call.outside_sandbox and decision.action != "deny":
        if call.scheduled or call.subagent:
            return Decision("deny", OUTSIDE_SANDBOX_UNATTENDED, subject=decision.subject)
        return Decision("ask", OUTSIDE_SANDBOX_REASON, subject=decision.subject,
                        asks=decision.asks or tuple(dict.fromkeys(subjects)))
    if decision.action == "ask" and kind.subject == COMMAND and call.sandboxed and not call.outside_sandbox:
        decision = _inside_the_wall(call, subjects, rules, decision)
    if decision.action == "ask" and call.scheduled:
        reason = f"{decision.reason}; {SCHEDULED_REASON}" if pinned is not None else SCHEDULED_REASON
        decision = Decision("deny", reason, subject=decision.subject)
    return decision


def _inside_the_wall(call: Call, lines: tuple[str, ...], rules: Sequence[Rule], decision: Decision) -> Decision:
    """The ask of a confined, offline command turned into allow by the preset rule, unless a
    rule of the person asks for (or denies) one of its simple commands."""
    preset = next((rule for rule in rules if rule.tool == SANDBOXED_TOOL and rule.action == "allow"
                   and rule.pattern == "*"), None)
    if preset is None:
        return decision
    own = [rule for rule in rules if rule.tool in (call.tool, "*") and rule.action != "allow"]
    for line in lines:
        for argv in split_command(line).commands:
            if any(_match_argv(rule.pattern, argv, True) for rule in own):
                return decision
    return Decision("allow", SANDBOXED_REASON.format(layer=preset.layer), preset, decision.subject)


def pinned_reason(path: str, server: str) -> str:
    """Why an edit of a file that an approved MCP server runs asks, even under auto-accept or an
    allow rule."""
    return (f"approval required: {path} is run by the MCP server {server}, approved to start without "
            "asking; a change would run without a question (asked even under auto-accept or an allow rule)")


def matches(kind: ToolKind, pattern: str, subject: str) -> bool:
    """Whether a pattern matches a subject of a tool of this kind.

    File tools: `*` within one path segment, `**` as a whole segment across any number of them
    (`src/**` matches src and everything below; `**/.env` matches .env and a/.env). fetch: the
    host, case-insensitive, `*` any text (`*.example.com`). Bash: word by word (see
    `_match_words`): a `*` word stands for any number of arguments, none included (`git log *`
    matches `git log`), a `*` glued to the end of the last word continues that command's
    arguments, not the word (`git status*` matches `git status --short`, never `git status-x`),
    and a `*` inside a word matches within that word only. Every other tool: `*` is any text. A
    pattern without `*` matches exactly; `?` and `[` are plain characters.
    """
    if kind.subject == PATH:
        return _match_path(pattern, subject)
    if kind.subject == HOST:
        return _match_text(pattern.lower(), subject.lower().rstrip("."))
    if kind.subject == COMMAND:
        commands = split_command(subject).commands
        return _match_argv(pattern, commands[0] if commands else (), widen=False)
    return _match_text(pattern, subject)


def suggest_patterns(kind: ToolKind, subject: str, inside: Inside | None = None,
                     git_programs: bool = False) -> list[str]:
    """Patterns to offer for "always", the narrowest first (the exact subject, then wider).

    bash: the exact command, then the program and its sub-command followed by ` *`
    (["git log --oneline", "git log *"]); nothing for a line no rule could allow. Files: the
    path, then its folder (["src/app.py", "src/**"]). mcp: "server/tool", then "server/*".
    A subject with `*` in it is never offered as an exact pattern (it would be a wildcard), and a
    wildcard is not offered where the guards of a wildcard allow would keep it from applying
    (`inside` and `git_programs`, as in `Call`, let the bash guards look at the disk).
    """
    if kind.subject == COMMAND:
        split = split_command(subject)
        if split.opaque or not split.commands:
            return []
        argv = split.commands[0]
        prefix = argv[:2] if len(argv) > 1 and _is_subcommand(argv[1]) else argv[:1]
        exact, base, wildcard = command_text(argv), command_text(prefix), " *"
        if _wildcard_guard(argv, inside) or (git_programs and posixpath.basename(argv[0]) == "git"):
            base = ""  # a wildcard would not cover this command (only an exact rule can)
    elif kind.subject == PATH:
        folder = "" if _is_env(subject) else posixpath.dirname(subject)
        exact, base, wildcard = subject, folder, "/**"
    elif kind.subject == CALL and "/" in subject:
        exact, base, wildcard = subject, subject.split("/", 1)[0], "/*"
    else:
        exact, base, wildcard = subject, "", ""
    patterns = [exact] if exact and "*" not in exact else []
    if base and "*" not in base and base + wildcard not in patterns:
        patterns.append(base + wildcard)
    return patterns


def rule_problems(tool: object, pattern: object, action: object,
                  kinds: Mapping[str, ToolKind]) -> list[tuple[str, str]]:
    """Every problem of a rule as (field, reason), for the API's 400 answer; [] when valid.

    `kinds`: the tools that rules may name, with their declarations.
    """
    problems: list[tuple[str, str]] = []
    kind = kinds.get(tool) if isinstance(tool, str) else None
    if not isinstance(tool, str) or not tool:
        problems.append(("tool", "is required"))
    elif tool != "*" and kind is None:
        problems.append(("tool", f"must be * or one of: {', '.join(kinds)}"))
    if action not in ACTIONS:
        problems.append(("action", "must be allow, ask or deny"))
    if tool == SANDBOXED_TOOL and (pattern != "*" or action != "allow"):
        problems.append(("pattern", "the sandboxed rule is only allow sandboxed *: the preset of commands "
                                    "inside the sandbox"))
        return problems
    problems += [("pattern", reason) for reason in _pattern_problems(kind, pattern, action)]
    return problems


def _pattern_problems(kind: ToolKind | None, pattern: object, action: object) -> list[str]:
    if not isinstance(pattern, str):
        return ["must be text"]
    if not pattern.strip():
        return ["must not be empty"]
    if len(pattern) > MAX_PATTERN_CHARS:
        return [f"must be at most {MAX_PATTERN_CHARS} characters"]
    if "\x00" in pattern:
        return ["must not contain a NUL character"]
    if not pattern.isprintable():
        return ["must not contain control characters"]
    if pattern != pattern.strip():
        return ["must not start or end with spaces"]
    subject = kind.subject if kind else None
    if subject == PATH and (pattern.startswith(("/", "./")) or "\\" in pattern
                            or ".." in pattern.split("/")):
        return ["must be a path relative to the project, with / (no leading / or ./, no ..)"]
    if subject == HOST and "/" in pattern:
        return ["must be a host name such as *.example.com (no scheme, no path)"]
    if subject == COMMAND:
        split = split_command(pattern)
        if not split.commands:
            return ["must name a command"]
        texts = [command_text(argv) for argv in split.commands]
        # The pattern's own wildcards stand for words: judge the command they stand in for.
        opaque = split_command(pattern.replace("*", "x")).opaque
        if opaque and action == "allow":
            return [f"cannot allow: Totem always asks for {', '.join(opaque)}"]
        if pattern not in texts:
            if len(texts) > 1:
                return ["must match one simple command (no ; && || | & or newline): one rule each"]
            return [f"must be written as Totem shows the command: {texts[0]}"]
    return []


def _rank(rule: Rule) -> tuple[bool, int, bool, int, bool]:
    """Bigger is stronger: exact, literal characters, deny, earlier layer, ask over allow."""
    exact = "*" not in rule.pattern
    literals = len(rule.pattern) - rule.pattern.count("*")
    return (exact, literals, rule.action == "deny", -LAYERS.index(rule.layer), rule.action == "ask")


def _strictest(decisions: list[Decision]) -> Decision:
    return max(decisions, key=lambda decision: SEVERITY[decision.action])  # the first of a tie


def _by_rule(rule: Rule, subject: str) -> Decision:
    note = _RULE_NOTES.get(rule)
    reason = f"{VERBS[rule.action]} by the {rule.layer} rule {rule.tool}: {rule.pattern}"
    return Decision(rule.action, reason + (f" ({note})" if note else ""), rule, subject,
                    asks=(subject,) if rule.action == "ask" else ())


def _no_rule(tool: str, subject: str) -> Decision:
    return Decision("ask", f"approval required: no rule covers the tool {tool}", subject=subject,
                    asks=(subject,))


def _guarded(rule: Rule, subject: str, what: str) -> Decision:
    """An ask in place of a wildcard allow (an exact rule would have decided)."""
    shown = subject if len(subject) <= MAX_REASON_SUBJECT_CHARS else (
        subject[:MAX_REASON_SUBJECT_CHARS] + "…")
    return Decision("ask", f"approval required: {shown} {what}, which the {rule.layer} rule "
                           f"{rule.tool}: {rule.pattern} cannot allow (only an exact rule can)",
                    subject=subject, asks=(subject,))


def _decide_subject(tool: str, kind: ToolKind, subject: str, rules: Sequence[Rule]) -> Decision:
    if kind.subject == HOST:
        subject = subject.lower().rstrip(".")
    found = [rule for rule in rules
             if rule.tool in (tool, "*") and matches(kind, rule.pattern, subject)]
    if not found:
        return _no_rule(tool, subject)
    rule = max(found, key=_rank)
    # The search tools skip .env files in code, even as their explicit path: nothing to ask.
    if rule.action == "allow" and "*" in rule.pattern and _is_env(subject) and not kind.searches:
        return _guarded(rule, subject, "is a protected .env file")
    return _by_rule(rule, subject)


def _decide_line(tool: str, line: str, rules: Sequence[Rule], inside: Inside | None,
                 git_programs: bool = False) -> Decision:
    split = split_command(line)
    if not split.commands:
        return _decide_subject(tool, ToolKind(TEXT, changes=True), "", rules)
    decisions = [_decide_command(tool, argv, rules, inside, git_programs) for argv in split.commands]
    decision = _strictest(decisions)
    if decision.action == "ask":
        asks = tuple(dict.fromkeys(subject for item in decisions for subject in item.asks))
        decision = dataclasses.replace(decision, asks=asks)
    if split.opaque and decision.action != "deny":
        return Decision("ask", "approval required: the command line is not fully understood "
                               f"({', '.join(split.opaque)}), so no rule can allow it",
                        subject=line)
    return decision


def _decide_command(tool: str, argv: tuple[str, ...], rules: Sequence[Rule], inside: Inside | None,
                    git_programs: bool = False) -> Decision:
    text = command_text(argv)
    # A deny rule also sees the program without its folder: `rm *` denies /bin/rm -rf x.
    bare = (posixpath.basename(argv[0]), *argv[1:]) if "/" in argv[0] else None
    found = []
    for rule in rules:
        if rule.tool not in (tool, "*"):
            continue
        # Deny and ask rules also catch abbreviated long options (`--upload-pa=` for
        # `--upload-pack*`): GNU getopt and git take any unique prefix.
        widen = rule.action != "allow"
        if _match_argv(rule.pattern, argv, widen):
            if rule != _LS_RULE or _is_listing(argv, inside):
                found.append(rule)
        elif bare is not None and rule.action == "deny" and _match_argv(rule.pattern, bare, widen):
            found.append(rule)
    if not found:
        return _no_rule(tool, text)
    rule = max(found, key=_rank)
    if rule.action == "allow" and "*" in rule.pattern:
        guard = _wildcard_guard(argv, inside)
        if not guard and git_programs and posixpath.basename(argv[0]) == "git":
            # An alias or a filter driver of the repository can make any git command run a program.
            guard = "runs git in a repository whose config names programs (aliases, filters, includes)"
        if guard:
            return _guarded(rule, text, guard)
    return _by_rule(rule, text)


def _wildcard_guard(argv: tuple[str, ...], inside: Inside | None) -> str | None:
    """Why a wildcard allow rule cannot cover this command (only an exact rule can), or None."""
    if any(_names_env(arg) for arg in argv[1:]):
        return "names a protected .env file"
    if any(_leaves_project(arg, inside) for arg in argv[1:]):
        return "names a path outside the project or a protected file"
    if any(_expands(arg) for arg in argv[1:]):
        # The shell expands it, maybe through a link to a file outside or to a .env file.
        return "has a pattern that the shell expands"
    risk = risky_use(argv)
    if risk:
        return f"uses {risk}"
    return None


def _match_text(pattern: str, text: str) -> bool:
    """`*` is any text; linear in practice, and no regular expression to backtrack."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == text
    first, *middle, last = parts
    if len(first) + len(last) > len(text) or not text.startswith(first) or not text.endswith(last):
        return False
    position, end = len(first), len(text) - len(last)
    for part in middle:
        found = text.find(part, position, end)
        if found < 0:
            return False
        position = found + len(part)
    return True


@functools.lru_cache(maxsize=4096)
def _pattern_words(pattern: str) -> tuple[str, ...] | None:
    """A bash pattern as the words of its one simple command (None: it is not one)."""
    commands = split_command(pattern).commands
    return commands[0] if len(commands) == 1 else None


def _match_argv(pattern: str, argv: tuple[str, ...], widen: bool) -> bool:
    words = _pattern_words(pattern)
    if words is None:
        return False
    return _match_words(words, argv, widen)


def _match_words(words: tuple[str, ...], argv: tuple[str, ...], widen: bool) -> bool:
    """Pattern words against a command's words, by dynamic programming (no backtracking).

    `*` alone: any number of words. The last word `W*` (W not empty): the word W, then any
    arguments; for an option, also W glued to its value (`--output=x` for `--output*`, `-ox` for
    `-o*`). Any other word: `*` inside it matches within that one word. `widen`: an abbreviated
    long option of the command (`--upload-pa`) also stands for the pattern's longer one.
    """
    count = len(argv)
    following = [False] * count + [True]  # can the words after this one match argv[j:]?
    for index in range(len(words) - 1, -1, -1):
        word = words[index]
        current = [False] * (count + 1)
        if word == "*":
            current[count] = following[count]
            for j in range(count - 1, -1, -1):
                current[j] = following[j] or current[j + 1]
        elif index == len(words) - 1 and word.endswith("*"):
            stem = word[:-1]
            for j in range(count):
                current[j] = _stem_matches(stem, argv[j], widen)
        else:
            for j in range(count):
                current[j] = following[j + 1] and _word_matches(word, argv[j], widen)
        following = current
    return following[0]


def _stem_matches(stem: str, arg: str, widen: bool) -> bool:
    if _word_matches(stem, arg, widen):
        return True
    if stem.startswith("--") and "=" not in stem:
        return _word_matches(stem + "=*", arg, widen)
    if len(stem) == 2 and stem[0] == "-" and stem[1] != "-":
        return _match_text(stem + "*", arg)
    return False


def _word_matches(word: str, arg: str, widen: bool) -> bool:
    if _match_text(word, arg):
        return True
    if widen and word.startswith("--") and arg.startswith("--"):
        name = arg.split("=", 1)[0]
        literal = re.split(r"[*=]", word, maxsplit=1)[0]
        if len(name) >= 5 and len(name) < len(literal) and literal.startswith(name):
            return _match_text(word, literal + arg[len(name):])
    return False


def _match_path(pattern: str, path: str) -> bool:
    """Segment by segment; a `**` segment stands for any number of segments, zero included."""
    wanted = pattern.split("/")
    states = {0}  # how many pattern segments the path segments so far have matched
    for segment in path.split("/"):
        states = _skip_globstars(wanted, states)
        states = {index + (wanted[index] != "**") for index in states if index < len(wanted)
                  and (wanted[index] == "**" or _match_text(wanted[index], segment))}
        if not states:
            return False
    return len(wanted) in _skip_globstars(wanted, states)


def _skip_globstars(wanted: list[str], states: set[int]) -> set[int]:
    result, todo = set(states), list(states)
    while todo:
        index = todo.pop()
        if index < len(wanted) and wanted[index] == "**" and index + 1 not in result:
            result.add(index + 1)
            todo.append(index + 1)
    return result


def _is_env(path: str) -> bool:
    """boundary's protected secret file (compared without case there: .ENV is .env on some disks)."""
    return boundary.is_protected_env(path)


def _values(arg: str, separators: str) -> list[str]:
    """An argument and the values inside it: after `=` (and the given separators), and the value
    glued to a short option (`-f.env`)."""
    values = [arg, *re.split(f"[{re.escape(separators)}]", arg)]
    if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
        values.append(arg[2:])
    return [value for value in values if value]


def _names_env(arg: str) -> bool:
    """Whether an argument may name a protected .env file: `.env`, `a/.env.local`,
    `--file=.env`, `HEAD:.env`, `@.env`, or a glob that bash could expand to one (a wildcard
    matches a leading dot only when the name itself starts with `.` or a bracket)."""
    for value in _values(arg, "=:@,"):
        name = posixpath.basename(value)
        if _is_env(value) or (name[:1] in (".", "[") and any(c in name for c in GLOB_CHARS)):
            return True
    return False


def _may_leave(value: str) -> bool:
    """Without looking at the disk: absolute, `~`, a `..` segment, or a dot glob (`.*` is `..`)."""
    if value.startswith(("/", "~")):
        return True
    return any(segment == ".." or (segment[:1] in (".", "[") and
                                   any(c in segment for c in GLOB_CHARS))
               for segment in value.split("/"))


def _path_values(arg: str) -> list[str]:
    """The paths an argument may hold: itself, and what follows `=`, `@`, `,`, a blank, or a `:`
    that does not start a URL (`w ../out/x`, `--output=/etc/x`, `a:/etc/x`, `-f/etc/x`)."""
    values = _values(arg, "=@,")
    for value in list(values):
        values += [piece for piece in re.split(r"\s+|:(?!//)", value) if piece]
    return values


def _leaves_project(arg: str, inside: Inside | None) -> bool:
    for value in _path_values(arg):
        if _may_leave(value):
            return True
        if inside is not None and not value.startswith("-") and not _stays(inside, value):
            return True
    return False


def _expands(arg: str) -> bool:
    """Whether the shell may expand an argument into file names (`*`, `?`, `[...]`)."""
    return any(c in value for value in _values(arg, "=") for c in GLOB_CHARS)


def _stays(inside: Inside, path: str) -> bool:
    try:
        return bool(inside(path))
    except (ValueError, OSError):  # a boundary refusal is an answer: outside
        return False


def _is_listing(argv: tuple[str, ...], inside: Inside | None) -> bool:
    """`ls` with simple listing flags and plain paths inside the project (None: no paths)."""
    if argv[0] != "ls":
        return False
    for arg in argv[1:]:
        if arg.startswith("-"):
            if arg == "-" or arg.startswith("--") or not set(arg[1:]) <= SAFE_LS_FLAGS:
                return False
        elif (inside is None or any(c in arg for c in GLOB_CHARS + "{~") or _may_leave(arg)
              or not _stays(inside, arg)):
            return False
    return True


def _is_subcommand(word: str) -> bool:
    """A word like log, run, install: lowercase letters, digits and dashes, not an option."""
    return (word[:1].isascii() and word[:1].islower()
            and all(c.isascii() and (c.islower() or c.isdigit() or c == "-") for c in word))
