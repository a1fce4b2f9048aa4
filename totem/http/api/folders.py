"""Folders|list: the folders of the computer, to choose a project from."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from totem.errors import BadRequest
from totem.http.api import Action, Context
from totem.http.api.contract import BOOLEAN, STRING, listing, query, record
from totem.http.api.projects import ABSOLUTE_PATH

MAX_FOLDER_ITEMS = 2000
MAX_RECENT_PLACES = 10
FOLDERS_QUERY = query(optional={"path": ABSOLUTE_PATH})  # the home folder when absent
FOLDERS = record({"path": STRING, "sep": STRING, "home": STRING, "items": listing(record({"name": STRING})),
                  "more": BOOLEAN, "places": listing(record({"name": STRING, "path": STRING}))},
                 description="the folders in path (hidden ones left out), and places to start from")


def _list_folders(path: str) -> tuple[list[dict[str, Any]], bool]:
    names = []
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir():  # follows links, as a file dialog does
                    names.append(entry.name)
            except OSError:
                continue
    names.sort(key=lambda name: (name.lower(), name))
    return [{"name": name} for name in names[:MAX_FOLDER_ITEMS]], len(names) > MAX_FOLDER_ITEMS


async def list_folders(ctx: Context) -> dict[str, Any]:
    """The folders in `path` (the home folder without one), and the places to start from: the
    home folder, the root and the projects opened last."""
    params = ctx.params()
    given = params.text("path")
    params.done()
    home = os.path.expanduser("~")
    path = os.path.abspath(os.path.expanduser(given)) if given else home
    if given and not os.path.isabs(os.path.expanduser(given)):
        raise BadRequest(("path", "must be an absolute path"))
    if not os.path.exists(path):
        raise BadRequest(("path", f"{path} does not exist"))
    if not os.path.isdir(path):
        raise BadRequest(("path", f"{path} is not a folder"))
    try:
        items, more = await asyncio.to_thread(_list_folders, path)
    except PermissionError:
        raise BadRequest(("path", f"{path} cannot be read: permission denied")) from None
    except OSError as exc:
        raise BadRequest(("path", f"{path} cannot be read: {exc.strerror}")) from None
    places = [{"name": "Home", "path": home}, {"name": "Root", "path": os.path.abspath(os.sep)}]
    places += await ctx.services.projects.recent(MAX_RECENT_PLACES)
    return {"path": path, "sep": os.sep, "home": home, "items": items, "more": more, "places": places}


ACTIONS = (
    Action("folders", "Folders|list", list_folders, query=FOLDERS_QUERY, answer=FOLDERS),
)
