"""The instructions a run reads beside the prompt, and where each came from.

Owns which files are instructions and how much of each is read: the person's own
(config.ini's `instructions`, by default ~/.config/totem/AGENTS.md), the project's (`AGENTS.md`
at its root, else `CLAUDE.md`) for the system prompt, and the nearest `AGENTS.md` (else
`CLAUDE.md`) above each file a call reads or changes, below the root, given once per run with
that call's result (`nested`). A nested file stays in the tool part's data, so the request that
carries it never changes afterwards and the part shows what was read.

Must not: read outside the project (every folder is resolved inside the root, links too), in
the folders the search tools never enter, or in folders of other people's code (VENDORED: a
package's AGENTS.md speaks for that package, not for this project); write.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from typing import TypedDict

from totem.security.boundary import BoundaryError, resolve_inside
from totem.tools.base import in_skipped_folder

FILE_NAMES = ("AGENTS.md", "CLAUDE.md")  # in a folder, the first that exists is its instructions
MAX_BYTES = 32 * 1024
MAX_NESTED_PER_CALL = 4  # folders of one call (a patch of many files) given at most
VENDORED = frozenset({"node_modules", "bower_components", "vendor", ".venv", "venv", "site-packages"})


class Instruction(TypedDict):
    source: str  # as shown: "AGENTS.md", "src/api/CLAUDE.md", or the person's file
    text: str


def read_capped(path: str) -> str | None:
    """The text of a file, cut at MAX_BYTES with a note; None when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError:
        return None
    text = raw[:MAX_BYTES].decode("utf-8", "replace")
    return text + (f"\n[{os.path.basename(path)} cut at {MAX_BYTES // 1024} KB]" if len(raw) > MAX_BYTES else "")


def _folder_file(root: str, folder: str) -> tuple[str, str] | None:
    """(source, text) of a project folder's instructions file (`folder` relative, "" the root)."""
    for name in FILE_NAMES:
        relative = posixpath.join(folder, name) if folder else name
        try:
            path = resolve_inside(root, relative)
        except BoundaryError:
            continue
        if os.path.isfile(path):
            text = read_capped(path)
            if text is not None and text.strip():
                return relative, text
    return None


def system_instructions(root: str, personal: str) -> tuple[Instruction | None, Instruction | None]:
    """(the person's instructions, the project root's): what the system prompt carries;
    `personal` is a path, "" for none. Blocks (reads files): call in a thread."""
    own = None
    text = read_capped(personal) if personal else None
    if text is not None and text.strip():
        home = os.path.expanduser("~")
        own = Instruction(source="~" + personal[len(home):] if personal.startswith(home + os.sep) else personal,
                          text=text)
    project = _folder_file(root, "")
    return own, (Instruction(source=project[0], text=project[1]) if project is not None else None)


def nested(root: str, paths: Iterable[str], given: set[str]) -> list[Instruction]:
    """The instructions nearest above each of `paths` (project-relative files), below the root
    (the system prompt has the root's), that are not in `given` (sources), at most
    MAX_NESTED_PER_CALL. Blocks (reads files): call in a thread."""
    found: list[Instruction] = []
    seen = set(given)
    for path in paths:
        folder = posixpath.dirname(path.strip("/"))
        while folder and len(found) < MAX_NESTED_PER_CALL:
            if in_skipped_folder(folder) or VENDORED.intersection(folder.split("/")):
                break
            file = _folder_file(root, folder)
            if file is not None:
                if file[0] not in seen:
                    seen.add(file[0])
                    found.append({"source": file[0], "text": file[1]})
                break  # the nearest one only
            folder = posixpath.dirname(folder)
    return found


def instructions_block(items: list[Instruction]) -> str:
    """How nested instructions follow a tool's result for the model: the project's developers'
    words, outside the envelope of the result's data."""
    return "".join(f"\n\nInstructions for the files under {posixpath.dirname(item['source'])}/ "
                   f"({item['source']}, written by the project's developers):\n{item['text']}" for item in items)
