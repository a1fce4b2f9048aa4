"""The permission gate: the whole life of one decision, from the candidate rules to the reply.

Owns gathering the rules a call is decided under (the project's, the global ones of the
database and of config.ini, read through rules.py; permissions.py adds the defaults), the
facts the pure decision needs from the disk (does a path argument stay inside, does the
repository name programs, which files do the project MCP servers approved to start without
asking run: `pinned_files`), asking the person when the decision is ask (through
`Questions`), and storing what "always" chose, under the tool that asked (through rules.py,
where the API saves rules too). Every decision becomes an audit record for the tool part.
Plan mode and unattended runs are refused inside `permissions.decide`, from the facts given
here.

Must not: run tools, publish anything but through `Questions`, or decide itself (permissions.py
does).
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from totem.agent.questions import Questions
from totem.agent.rules import SavedRules
from totem.clock import now_ms
from totem.mcp.definitions import offered_servers
from totem.security.boundary import BoundaryError, is_protected_env, relative_path, resolve_inside
from totem.security.permissions import (
    SCHEDULED_REASON,
    TEXT,
    Call,
    Decision,
    DecisionRow,
    Rule,
    ToolKind,
    decide,
    suggest_patterns,
)
from totem.security.shellwords import reveal
from totem.store import Store
from totem.workspace.git import repository_runs_programs


@dataclass(frozen=True)
class Asker:
    """Who a run asks, and the facts of the run a decision depends on."""

    sessionid: str
    projectid: str
    root: str  # the project folder, links resolved
    mode: str = "build"
    autoaccept: bool = False
    scheduled: bool = False
    tools: frozenset[str] | None = None  # an agent's tools: a call to any other is refused (None: all)
    asks_in: str | None = None  # a sub-agent's questions go to the person where its parent runs
    depth: int = 0  # 1 for a sub-agent's run
    # Rules of this run only (the layer "run": Sessions|prompt's `allow`), a sub-agent's its
    # parent's: decided with the saved ones, never stored.
    rules: tuple[Rule, ...] = ()

    @property
    def asked_in(self) -> str:
        """The session whose view shows this run's questions."""
        return self.asks_in or self.sessionid


class SavedRule(TypedDict):
    """A rule that a reply stored (at the project layer): allow from "always", deny from "reject"."""

    tool: str
    pattern: str
    action: str


class AuditRecord(DecisionRow):
    """The audit record of one decision, kept in the tool part's data (`decision`, `decisions`)."""

    at: int  # when it was decided, in ms
    by: str  # who settled it: "code", "rule" or "person"
    reply: NotRequired[str]  # the person's reply, when asked
    answered: NotRequired[int]  # when the person replied, in ms
    saved: NotRequired[list[SavedRule]]  # the rules "always" (allow) or "reject" with patterns (deny) stored


class PermissionGate:
    """Decides tool calls and the subjects met during a call, asking the person when needed."""

    def __init__(self, store: Store, questions: Questions, kinds: Callable[[], Mapping[str, ToolKind]],
                 saved: SavedRules):
        self.store = store  # the pins of the project MCP servers
        self.questions = questions
        self.kinds = kinds  # () -> every tool's declaration, by name (the registry's)
        self.saved = saved  # the rules it decides under, and where "always" stores one

    async def rules(self, projectid: str) -> list[Rule]:
        """The candidate rules of a project's calls: its own, then the global ones."""
        return await self.saved.candidates(projectid)

    async def decide(self, asker: Asker, tool: str, subjects: tuple[str, ...],
                     outside: bool = False, outside_sandbox: bool = False,
                     sandboxed: bool = False) -> tuple[Decision, Call]:
        """The decision for one call under the current rules, and the call it was made for."""
        root = asker.root
        git_programs = tool == "bash" and await asyncio.to_thread(repository_runs_programs, root)
        kind = self.kinds().get(tool) or ToolKind(TEXT, changes=True)
        rules = [*asker.rules, *await self.rules(asker.projectid)]
        pinned: dict[str, str] = {}
        if kind.edits and not outside and asker.mode == "build":
            files = await self.pinned_files(asker.projectid, root, rules)
            pinned = {subject: files[subject] for subject in subjects if subject in files}
        call = Call(tool, subjects, kind, mode=asker.mode, autoaccept=asker.autoaccept, scheduled=asker.scheduled,
                    outside=outside, inside=lambda path: stays_inside(root, path), git_programs=git_programs,
                    pinned=pinned, outside_sandbox=outside_sandbox, subagent=asker.depth > 0,
                    sandboxed=sandboxed)
        return decide(call, rules), call

    async def pinned_files(self, projectid: str, root: str, rules: list[Rule] | None = None) -> dict[str, str]:
        """The project files (paths relative to `root`, links resolved) that a project MCP server
        approved to start without asking runs, each with that server's name: the files of the
        pins that "always" approved (as they were then) and those of every server whose start
        the rules now allow (as they are now). Nothing is read from the disk unless a rule allows
        some start. Blocks nothing (file reads in a thread)."""
        rules = await self.rules(projectid) if rules is None else rules
        if not any(rule.action == "allow" and rule.tool in (START_TOOL, "*") for rule in rules):
            return {}
        approved = {rule.pattern for rule in rules if rule.action == "allow" and rule.tool == START_TOOL}
        found: dict[str, str] = {}
        for pin in await self.store.server_pins(projectid):
            if f"{pin['server']}@{pin['digest']}" in approved:
                for path in pin["manifest"].get("files") or {}:
                    found.setdefault(path, pin["server"])
        definitions, _problems = await asyncio.to_thread(offered_servers, root)
        kind = self.kinds().get(START_TOOL) or ToolKind(TEXT, changes=True)
        for definition in definitions:
            if definition.files and decide(Call(START_TOOL, (definition.subject,), kind), rules).action == "allow":
                for path, _digest in definition.files:
                    found.setdefault(path, definition.name)
        return found

    async def question(self, asker: Asker, text: str, options: list[str]) -> str:
        """Ask the person a question (the ask tool, the loop guard); in a scheduled run nobody
        is there, and that is the answer at once."""
        if asker.scheduled:
            return NOBODY_HERE
        return await self.questions.question(asker.asked_in, text, options)

    async def settle(self, asker: Asker, tool: str, subjects: tuple[str, ...], args: dict, *,
                     outside: bool = False, always_ask: str | None = None,
                     before_ask: Callable[[], Awaitable[None]] | None = None,
                     preview: Callable[[], Awaitable[list[dict]]] | None = None,
                     outside_sandbox: bool = False, reach: dict | None = None) -> AuditRecord:
        """Decide, ask the person when the decision is ask (or always, with `always_ask` saying
        why), store what "always" chose; returns the audit record, whose `action` is allow or
        deny once settled. A rejected question ends as deny with `reply: reject`.
        `outside_sandbox`: a command asked to run unconfined (permissions decides: it asks every
        time, and "always" stores nothing). `reach`: what the call's processes could reach, shown
        in the question (sandbox.py)."""
        decision, call = await self.decide(asker, tool, subjects, outside, outside_sandbox, walled(reach))
        record: AuditRecord = {**decision.to_dict(), "at": now_ms(),
                               "by": "code" if decision.rule is None else "rule"}
        if decision.action == "deny" or (decision.action == "allow" and not always_ask):
            return record
        if asker.scheduled:  # what would always ask the person (fetch of a private address)
            record.update({"action": "deny", "reason": f"{subjects[0]}: {always_ask}; {SCHEDULED_REASON}",
                           "by": "code"})
            return record
        if always_ask:
            record["reason"] = f"{subjects[0]}: {always_ask}; asked even under an allow rule"
        # A file an approved MCP server runs: no rule can allow its edit, so "always" stores none;
        # a command outside the sandbox is answered once or rejected, never stored as a rule.
        unruled = always_ask or decision.subject in call.pinned or outside_sandbox
        commands = [] if always_ask or decision.subject in call.pinned else asked(decision, call)
        if outside_sandbox:
            commands = [{**item, "patterns": []} for item in commands]
        # Nothing "always" could store (an opaque command line, a pinned file, a guard that asks
        # every time, a command outside the sandbox): the person answers once or rejects.
        once_only = outside_sandbox or not commands
        if before_ask is not None:
            await before_ask()
        shown = await preview() if preview is not None else []
        reply, chosen = await self.questions.permission(
            asker.asked_in, tool, args | ({"note": always_ask} if always_ask else {}),
            list(dict.fromkeys(p for item in commands for p in item["patterns"])), commands=commands,
            reason=record["reason"], folder=asker.root, preview=shown, reach=reach or {}, once_only=once_only)
        record.update({"action": "deny" if reply == "reject" else "allow", "by": "person", "reply": reply,
                       "answered": now_ms()})
        kept = {"always": "allow", "reject": "deny"}.get(reply)
        if kept and chosen and not unruled:
            for pattern in chosen:
                await self.saved.save(asker.projectid, tool, pattern, kept)
            record["saved"] = [{"tool": tool, "pattern": pattern, "action": kept} for pattern in chosen]
        return record


def walled(reach: dict | None) -> bool:
    """Whether a command's processes run behind the whole wall: confined by bubblewrap (whose
    mounts and namespaces hold what Landlock alone leaves open: metadata changes outside, the
    /proc of other processes, unix sockets), with no protection missing and the network off
    (the condition of the preset `allow sandboxed *`)."""
    if not reach:
        return False
    return reach.get("confined") is True and reach.get("network") is False and not reach.get("missing") \
        and "bubblewrap" in (reach.get("layers") or ())


START_TOOL = "mcp-start"  # the permission of a project MCP server's start
NOBODY_HERE = "nobody is here: this is a scheduled run, no one can answer; decide yourself or stop"


def asked(decision: Decision, call: Call) -> list[dict]:
    """What a question lists: each subject that needs an answer (bash: each simple command that
    asks), shown with its hidden characters written out, and the patterns "always" may store."""
    return [{"command": subject, "shown": reveal(subject),
             "patterns": suggest_patterns(call.kind, subject, call.inside, call.git_programs)}
            for subject in decision.asks]


def stays_inside(root: str, path: str) -> bool:
    """Whether a command's path argument stays in the project and is no protected secret file
    (also through a link: `cat notsecret` where notsecret leads to .env) nor a file with more
    than one hard link (its other name may be outside or a secret)."""
    try:
        resolved = resolve_inside(root, path)
        info = os.stat(resolved) if os.path.exists(resolved) else None
    except (BoundaryError, OSError):
        return False
    if info is not None and stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        return False
    return not is_protected_env(relative_path(root, resolved))
