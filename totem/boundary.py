"""The project boundary: resolving a path inside a root, and the protected `.env` files.

Every file path that a tool, an action or a command's working directory uses goes through
`resolve_inside()`: it is joined to the root, normalized, its symbolic links resolved (also for
a file that does not exist yet: its nearest existing parent is resolved), and refused unless
the result stays inside the root. This is the only place that decides it. It reads the file
system only to resolve links; it never opens, writes or lists anything.
"""

from __future__ import annotations

import os
import posixpath

MAX_PATH_CHARS = 4096
ENV_ALLOWED_SUFFIXES = (".example", ".sample", ".template")


class BoundaryError(ValueError):
    """A path that is not inside the root; the message says why, for the person or the model."""


class OutsideError(BoundaryError):
    """A path that leads outside the root (the permission layer denies it, whatever the rules)."""


def real_root(root: str) -> str:
    """The root with its own symbolic links resolved."""
    return os.path.realpath(root)


def resolve_inside(root: str, path: str) -> str:
    """The absolute, link-free path that `path` names inside `root`.

    `path` may be relative to the root or absolute. Raises BoundaryError for an empty or too
    long path, a NUL byte, or anything that leads outside the root after resolving links.
    """
    if not isinstance(path, str):
        raise BoundaryError("the path must be text")
    if "\x00" in path:
        raise BoundaryError("the path contains a NUL byte")
    if len(path) > MAX_PATH_CHARS:
        raise BoundaryError(f"the path is longer than {MAX_PATH_CHARS} characters")
    if path == "~" or path.startswith("~/"):
        raise BoundaryError("~ is not expanded here; give a path relative to the project")
    base = real_root(root)
    joined = os.path.normpath(os.path.join(base, path))
    resolved = os.path.realpath(joined)
    if not is_inside(base, resolved):
        raise OutsideError(f"{path} is outside the project")
    return resolved


def is_inside(base: str, candidate: str) -> bool:
    """Whether an absolute resolved path is the base or below it."""
    return candidate == base or candidate.startswith(base.rstrip(os.sep) + os.sep)


def relative_path(root: str, absolute: str) -> str:
    """The path relative to the root, with `/`, as permission patterns and the API show it."""
    relative = os.path.relpath(absolute, real_root(root))
    return "" if relative == "." else relative.replace(os.sep, "/")


def is_protected_env(relative: str) -> bool:
    """`.env` and `.env.*` (in any folder), except the example, sample and template files."""
    name = posixpath.basename(relative.replace(os.sep, "/"))
    if name == ".env":
        return True
    if name.startswith(".env."):
        return not name.endswith(ENV_ALLOWED_SUFFIXES)
    return False
