"""After a crash: what became of the file changes that tool calls were making when it happened.

A write, edit or patch records its journal in its part before it changes anything (the file, the
SHA-256 of its new content, the temporary file it writes through). The store closes every part a
crash left open as `error`; for the ones with a journal, this module then asks the disk: a
change whose every file has its new content landed, and its part is recorded `done`; otherwise
the part stays `error` and says which files have which content. Either way the temporary files
the change may have left in those folders are removed.

Must not: change the project's files other than removing Totem's own temporary files.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os

from totem.security.boundary import BoundaryError, resolve_inside
from totem.tools.files import remove_temp_files

log = logging.getLogger("totem.agent")

HASH_CHUNK_BYTES = 1 << 20


async def recover_changes(store) -> int:
    """Record the outcome of each interrupted change from the disk; returns how many were."""
    for interrupted in store.interrupted:
        data = interrupted["data"]
        landed, notes = await asyncio.to_thread(_outcome, interrupted["root"], data["journal"])
        data["recovered"] = "the server stopped during this call; on restart, " + (
            "every change was found on disk" if landed else "; ".join(notes))
        if landed:
            data.pop("error", None)
            data.setdefault("output", "The change was made (the server stopped before the call ended).")
        else:
            data["error"] = "The server stopped during this call: " + "; ".join(notes) + "."
        await store.update_part(interrupted["id"], status="done" if landed else "error", data=data)
    count = len(store.interrupted)
    store.interrupted = []
    return count


def _outcome(root: str, journal: list[dict]) -> tuple[bool, list[str]]:
    """(whether every change of the journal is on disk, what each file was found to be)."""
    notes, landed = [], True
    folders = set()
    for entry in journal:
        shown = entry.get("path") or "?"
        try:
            absolute = resolve_inside(root, shown)
        except BoundaryError as exc:
            landed = False
            notes.append(f"{shown}: {exc}")
            continue
        folders.add(os.path.dirname(absolute))
        found = _sha256(absolute)
        if found != entry.get("sha256"):
            landed = False
            notes.append(f"{shown} does not have its new content" if entry.get("sha256")
                         else f"{shown} was not removed")
    for folder in folders:
        remove_temp_files(folder)
    return landed, notes


def _sha256(path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(HASH_CHUNK_BYTES):
                digest.update(chunk)
    except OSError:
        return "unreadable"
    return digest.hexdigest()
