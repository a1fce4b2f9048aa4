"""The settings use cases: read the effective values with where each comes from, and set or
clear a value at one layer (all projects, a project, a session), each checked with a clear
error. Values live in the database (removed with their project or session), never in the
repository. A run reads them when it starts (`values`), so a change applies at the next run.

Must not: parse HTTP, or let a key outside `settings.KEYS` change at run time.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from totem import settings
from totem.errors import BadRequest, NotFound
from totem.process import runner
from totem.store import Store
from totem.tools import bash

if TYPE_CHECKING:
    from totem.config import Config

SCOPES = ("all", "project", "session")
# The type each key shows in Settings|read (a list: of absolute paths).
TYPE_NAMES = {int: "integer", float: "number", bool: "boolean", list: "paths"}


class Settings:
    def __init__(self, store: Store, config: Config):
        self.store = store
        self.config_layer = settings.defaults(config, runner.DEFAULT_TIMEOUT_S, bash.OUTPUT_CAP_BYTES)

    async def read(self, projectid: str | None = None, sessionid: str | None = None) -> dict[str, dict[str, Any]]:
        """`{key: {value, source, description, type, min, max, nullable, none?}}`. Raises NotFound."""
        projectid = await self._scope_ids(projectid, sessionid)
        layers = {"config": self.config_layer, **await self.store.settings_layers(projectid, sessionid)}
        effective = settings.resolve(layers)
        return {key.name: effective[key.name] | {
            "description": key.description, "title": key.title, "type": TYPE_NAMES.get(key.kind, "number"),
            "min": key.low, "max": key.high, "nullable": key.nullable}
                | ({"none": key.none} if key.nullable else {}) for key in settings.KEYS}

    async def values(self, projectid: str, sessionid: str) -> dict[str, Any]:
        """The values a run takes from the layers above config.ini; for the others the run's own
        defaults hold (they are config.ini's)."""
        layers = {"config": self.config_layer, **await self.store.settings_layers(projectid, sessionid)}
        return {name: item["value"] for name, item in settings.resolve(layers).items() if item["source"] != "config"}

    async def set(self, scope: str, key: str, value: Any, clear: bool = False, projectid: str | None = None,
                  sessionid: str | None = None) -> dict[str, dict[str, Any]]:
        """Set (or clear) `key` at `scope`; answers the effective values there. Raises
        NotFound, BadRequest (unknown key or scope, a value of the wrong type or out of range,
        an id missing or given where the scope has none)."""
        declared = settings.BY_NAME.get(key)
        if declared is None:
            raise BadRequest(("key", f"unknown key {key!r}; the keys are: {', '.join(settings.BY_NAME)}"))
        if scope not in SCOPES:
            raise BadRequest(("scope", f"must be one of {', '.join(SCOPES)}"))
        if scope == "all" and (projectid or sessionid):
            raise BadRequest(("scope", "all projects take neither projectid nor sessionid"))
        if scope == "project" and (not projectid or sessionid):
            raise BadRequest(("projectid", "the project scope takes a projectid and no sessionid"))
        if scope == "session" and not sessionid:
            raise BadRequest(("sessionid", "the session scope takes a sessionid"))
        if not clear:
            problem = declared.check(value)
            if problem:
                raise BadRequest(("value", f"{key} {problem}"))
        projectid = await self._scope_ids(projectid, sessionid)
        await self.store.set_setting(projectid if scope != "all" else None, sessionid if scope == "session" else None,
                                     key, None if clear else json.dumps(value))
        return await self.read(projectid, sessionid)

    async def _scope_ids(self, projectid: str | None, sessionid: str | None) -> str | None:
        if sessionid:
            session = await self.store.get_session(sessionid)
            if session is None:
                raise NotFound(("sessionid", f"no session {sessionid}"))
            if projectid and projectid != session["projectid"]:
                raise BadRequest(("projectid", "the session is of another project"))
            return session["projectid"]
        if projectid and await self.store.get_project(projectid) is None:
            raise NotFound(("projectid", f"no project {projectid}"))
        return projectid
