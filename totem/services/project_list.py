"""Projects|list: every project, the most recently opened first, with whether it is a Total.js
project.

Built by the composition root with the store, before the core: Projects|list is the first
request the page makes after Account|read, and it answers without waiting for the agent and
the services. The core's `Projects.list` (projects.py) gives the same answer, from here. It
imports only the store and the rows, so that the start pays for nothing more; the Total.js
detection loads with the first project to look at, in a worker thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

from totem.rows import ProjectRow
from totem.store import Store

__all__ = ["ProjectList", "project_view"]

Project = dict[str, Any]


def project_view(row: ProjectRow) -> Project:
    """The one shape of a project in answers."""
    return {"id": row["id"], "name": row["name"], "path": row["path"],
            "created": row["created"], "opened": row["opened"]}


def _detect_all(paths: list[str]) -> list[tuple[bool, int | None]]:
    """(totaljs, totaljsversion) of each folder (totaljs.detect)."""
    from totem.workspace import totaljs  # its patterns take a while to compile: not at start-up
    return [(found.totaljs, found.version) for found in map(totaljs.detect, paths)]


class ProjectList:
    """The listing of the projects, from the store alone."""

    def __init__(self, store: Store):
        self.store = store

    async def list(self) -> list[Project]:
        """Every project, the most recently opened first, each with `totaljs` (and
        `totaljsversion`, 4, 5 or None): whether it is a Total.js project (totaljs.detect)."""
        rows = await self.store.list_projects()
        if not rows:
            return []
        found = await asyncio.to_thread(_detect_all, [row["path"] for row in rows])
        return [project_view(row) | {"totaljs": totaljs, "totaljsversion": version}
                for row, (totaljs, version) in zip(rows, found, strict=True)]
