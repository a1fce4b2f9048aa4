"""The permission rules Totem keeps: the project's and the global ones saved in the database,
and config.ini's [rules]; the one place they are read from and written to.

The gate reads them to decide a call and saves what "always" chose; the Permissions service
lists, saves and removes them for the API. Both save through `save`, so a rule is stored one
way. The defaults are permissions.py's; rules never come from files inside a project.

Must not: decide (permissions.py does), ask anyone, or check a rule (the service does).
"""

from __future__ import annotations

from totem.rows import RuleRow, ServerPin
from totem.security.permissions import Rule
from totem.store import Store


class SavedRules:
    """The stored and configured rules, over the store."""

    def __init__(self, store: Store, config_rules=()):
        self.store = store
        self.configured: tuple[tuple[str, str, str], ...] = tuple(config_rules)  # (tool, pattern, action)

    async def rows(self, projectid: str | None) -> list[RuleRow]:
        """The saved rules of a project, or the global saved rules (None), oldest first."""
        return await self.store.list_rules(projectid)

    async def candidates(self, projectid: str) -> list[Rule]:
        """The rules a project's calls are decided under, but the defaults: its own, then the
        global ones (saved, then config.ini's). One read of the store: every tool call asks."""
        own, saved = await self.store.list_rules_and_global(projectid)
        project = [Rule(r["tool"], r["pattern"], r["action"], "project", r["id"]) for r in own]
        stored = [Rule(r["tool"], r["pattern"], r["action"], "global", r["id"]) for r in saved]
        configured = [Rule(tool, pattern, action, "global") for tool, pattern, action in self.configured]
        return project + stored + configured

    async def save(self, projectid: str | None, tool: str, pattern: str, action: str) -> RuleRow | None:
        """Save a rule of a project, or a global one (None); the same tool and pattern replaces
        the old action. None when the project is gone."""
        return await self.store.add_rule(projectid, tool, pattern, action)

    async def server_pins(self, projectid: str) -> list[ServerPin]:
        """What each "always" approval of a project's MCP servers covered, newest first."""
        return await self.store.server_pins(projectid)

    async def get(self, ruleid: str) -> RuleRow | None:
        return await self.store.get_rule(ruleid)

    async def remove(self, ruleid: str) -> bool:
        return await self.store.remove_rule(ruleid)
