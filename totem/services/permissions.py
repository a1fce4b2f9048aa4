"""The permission use cases: list the rules of a project with their layers, save one, remove
one, and reply to a permission question.

Rules come from three layers: the project's (saved in the database from "always" answers and
here), the global ones (config.ini's [rules], and rules saved with scope global) and the
built-in defaults. Rules never come from files inside a project: a cloned repository must not
grant itself rights. Rules are read and stored through agent/rules.py, as the gate's "always"
stores them; the decision is the gate's and permissions.py's. Raises the errors of `errors.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from totem.agent.gate import START_TOOL
from totem.agent.rules import SavedRules
from totem.errors import BadRequest, NotFound
from totem.mcp.definitions import approval_words, offered_servers
from totem.rows import RuleRow
from totem.security.permissions import ToolKind, default_rules, rule_problems

if TYPE_CHECKING:
    from totem.agent.loop import Runs
    from totem.services.projects import Projects

Patterns = list[str]  # named here, since `Permissions.list` hides the builtin inside the class
Listed = list[dict[str, Any]]


def rule_view(row: RuleRow, layer: str) -> dict[str, Any]:
    return {"id": row["id"], "tool": row["tool"], "pattern": row["pattern"], "action": row["action"],
            "layer": layer, "projectid": row.get("projectid"), "removable": True}


class Permissions:
    """The rules people keep, and their replies to the gate's questions."""

    def __init__(self, rules: SavedRules, kinds: Callable[[], Mapping[str, ToolKind]], projects: Projects, runs: Runs):
        self.rules = rules
        self.kinds = kinds  # () -> the tools a rule may name, with their declarations (the registry's)
        self.projects = projects  # a project's rules need the project
        self.runs = runs  # the questions that wait

    def tools(self) -> Mapping[str, ToolKind]:
        """What a rule may name: each tool of the registry, with the kind of its subject."""
        return self.kinds()

    async def list(self, projectid: str | None = None) -> list[dict[str, Any]]:
        """Every rule a call of the project is decided under, layer by layer (the project's,
        the global saved ones, config.ini's, the defaults); without `projectid`, the global
        ones and the defaults. Raises NotFound (no such project)."""
        rules = []
        if projectid:
            project = await self.projects.get(projectid)
            rules += [rule_view(row, "project") for row in await self.rules.rows(projectid)]
        rules += [rule_view(row, "global") for row in await self.rules.rows(None)]
        if projectid and any(rule["tool"] == START_TOOL for rule in rules):
            await self._describe_starts(rules, projectid, project["path"])
        rules += [{"id": None, "tool": tool, "pattern": pattern, "action": action, "layer": "global",
                   "projectid": None, "removable": False, "source": "config.ini"}
                  for tool, pattern, action in self.rules.configured]
        rules += [rule.to_dict() | {"projectid": None, "removable": False} for rule in default_rules()]
        return rules

    async def _describe_starts(self, rules: Listed, projectid: str, root: str) -> None:
        """Give each rule for one exact definition of an MCP server's start (`name@<digest>`)
        the words of what it covers (`described`): from what its approval pinned, else from the
        project's definition of today when it is the same, else that it is an older one."""
        starts = [(rule, name, digest) for rule in rules if rule["tool"] == START_TOOL
                  for name, at, digest in [rule["pattern"].rpartition("@")] if at and name]
        covered = {pin["digest"]: approval_words(pin["server"], pin["manifest"])
                   for pin in await self.rules.server_pins(projectid)}
        if any(digest not in covered for _rule, _name, digest in starts):  # a deny has no pin: read today's
            definitions, _problems = await asyncio.to_thread(offered_servers, root)
            covered |= {definition.digest: approval_words(definition.name, definition.manifest())
                        for definition in definitions}
        for rule, name, digest in starts:
            rule["described"] = covered.get(digest) or (
                f"the MCP server {name} in a definition the project no longer has (a later one asks again)")

    async def save(self, scope: str, projectid: str | None, tool: str, pattern: str, action: str) -> dict[str, Any]:
        """Save a rule of a project (`scope` project) or a global one; the same tool and pattern
        replaces the old action. Raises BadRequest (a project rule without a project, a global
        one with one, an unknown tool, a pattern the tool cannot match), NotFound (no such
        project)."""
        if scope == "project" and not projectid:
            raise BadRequest(("projectid", "is required for a project rule"))
        if scope == "global" and projectid:
            raise BadRequest(("projectid", "a global rule belongs to no project"))
        problems = rule_problems(tool, pattern, action, self.kinds())
        if problems:
            raise BadRequest(problems)
        row = await self.rules.save(projectid if scope == "project" else None, tool, pattern, action)
        if row is None:
            raise NotFound(("projectid", f"no project {projectid}"))
        return rule_view(row, scope)

    async def remove(self, ruleid: str) -> str:
        """Remove a saved rule; returns its id. Raises NotFound (config.ini's rules and the
        defaults are not saved ones)."""
        if await self.rules.get(ruleid) is None:
            raise NotFound(("id", f"no saved rule {ruleid}; rules of config.ini and the defaults cannot be "
                                  "removed here"))
        await self.rules.remove(ruleid)
        return ruleid

    def reply(self, askid: str, reply: str, pattern: str | None, patterns: Patterns | None) -> str:
        """The person's reply to a permission question (once, always or reject); with always,
        `pattern` or `patterns` choose the rules it stores. Returns the id. Raises NotFound."""
        self.runs.reply_permission(askid, reply, pattern, patterns)
        return askid
