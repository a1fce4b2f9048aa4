"""The project boundary: resolving a path inside a root, and the protected `.env` files.

Every file path that a tool, an action or a command's working directory uses goes through
`resolve_inside()`: it is joined to the root, normalized, its symbolic links resolved (also for
a file that does not exist yet: its nearest existing parent is resolved), and refused unless
the result stays inside the root. This is the only place that decides it. It reads the file
system only to resolve links (and, for a write target, to refuse a folder or a looping link); it
never opens, writes or lists anything.
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


def resolve_for_write(root: str, path: str) -> str:
    """The absolute, link-free file that a tool may create or replace for `path` inside `root`.

    Resolved like `resolve_inside()` (a link is written through to its target, which must be
    inside; a missing file is resolved through its nearest existing parent). Raises
    BoundaryError, besides the cases of `resolve_inside()`, for an empty path, the project root, a
    target inside a `.git` folder at any depth (named so before or after resolving links), a
    folder, or a symbolic link that cannot be resolved (a loop). `.env` files are not refused
    here: the permission layer asks for them.
    """
    if path == "":
        raise BoundaryError("the path is empty; name a file inside the project")
    resolved = resolve_inside(root, path)
    base = real_root(root)
    if resolved == base:
        raise BoundaryError(f"{path} is the project folder, not a file")
    lexical = os.path.relpath(os.path.normpath(os.path.join(base, path)), base)
    if is_git_path(lexical) or is_git_path(relative_path(root, resolved)):
        raise BoundaryError(f"{path} is inside a .git folder; git's own files are not changed by tools")
    if os.path.islink(resolved):  # realpath stops at a link it cannot resolve
        raise BoundaryError(f"{path} is a symbolic link that loops; not written")
    if os.path.isdir(resolved):
        raise BoundaryError(f"{path} is a folder, not a file")
    return resolved


def is_git_path(relative: str) -> bool:
    """Whether a relative path is a `.git` folder or file, or inside one, at any depth.

    Compared without case: on a case-insensitive file system `.GIT/config` is `.git/config`.
    """
    return any(part.casefold() == ".git" for part in relative.replace(os.sep, "/").split("/"))
