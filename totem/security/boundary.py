"""The project boundary: resolving a path inside a root, and the protected secret (`.env`) files.

Every file path that a tool, an action or a command's working directory uses goes through
`resolve_inside()`: it is joined to the root, normalized, its symbolic links resolved (also for
a file that does not exist yet: its nearest existing parent is resolved), and refused unless
the result stays inside the root. This is the only place that decides it. It reads the file
system only to resolve links (and, for a write target, to refuse a folder or a looping link); it
never opens, writes or lists anything. `is_protected_env()` is the one definition of a protected
secret file, for the permission engine, the search tools, the file tree and command arguments; it
looks at the text of the path only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

MAX_PATH_CHARS = 4096

# The protected secret files (`is_protected_env`), every name compared in lower case. A file name
# is protected when, with at most one editor prefix and one editor suffix taken off, it is one of
# ENV_NAMES, starts with ENV_PREFIX or ends with ENV_SUFFIX; only the exact ENV_EXAMPLES are not.
ENV_NAMES = (".env", ".envrc")  # .envrc: direnv's file of `export KEY=value` lines
ENV_PREFIX = ".env"  # followed by a separator: .env.local, .env-prod, .env_local, .env@staging
ENV_SUFFIX = ".env"  # prod.env, .prod.env, docker's --env-file web.env (not x.environment)
ENV_EXAMPLES = frozenset({".env.example", ".env.sample", ".env.template"})
# Editor backups, swap, lock and auto-save files hold the same lines as the file: `.#.env`
# (Emacs lock), `#.env#` (Emacs auto-save), `.env~`, `prod.env.bak`, `.envrc.swp` (Vim).
ENV_BACKUP_PREFIXES = (".#", "#")
ENV_BACKUP_SUFFIXES = ("~", "#", ".bak", ".old", ".orig", ".save", ".swp", ".swo")
# Every file below a folder of one of these names is protected, at any depth (`.env.d/api`).
ENV_FOLDERS = frozenset({".env", ".env.d"})


class BoundaryError(ValueError):
    """A path that is not inside the root; the message says why, for the person or the model."""


class OutsideError(BoundaryError):
    """A path that leads outside the root (the permission layer denies it, whatever the rules)."""


def real_root(root: str) -> str:
    """The root with its own symbolic links resolved."""
    return os.path.realpath(root)


def session_root(session: Mapping[str, Any], project: Mapping[str, Any]) -> str:
    """The folder a session works in, links resolved: its worktree when it has one, else its
    project's folder."""
    return real_root(session.get("worktree") or project["path"])


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
    """Whether a path names a protected secret file, which the read and write tools ask for and
    the search tools skip.

    Compared without case (`.ENV.Local`: a case-insensitive disk opens it as `.env.local`):

    protected                                        not protected
    `.env`, `.envrc`, in any folder                  `.env.example`, `.env.sample` and
    `.env.*`, `.env-*`, `.env_*`: `.env.local`,      `.env.template`, exactly these names
        `.env-prod`, `.env_local`, `.env.swp`        `x.environment`, `env`, `.envoy`
    `*.env`: `prod.env`, `.prod.env`                 a file below a folder `.env.local`
    a backup of one of these: `.env~`, `#.env#`,
        `.#.env`, `prod.env.bak`, `.envrc.swp`
    any file below a folder `.env` or `.env.d`

    `relative` is a project-relative path with `/` (links already resolved by the caller); a
    path that ends in `/` names a folder, protected when the files below it are. Pure: no I/O.
    """
    parts = relative.replace(os.sep, "/").lower().split("/")
    if any(part in ENV_FOLDERS for part in parts[:-1]):
        return True
    name = parts[-1]
    if name in ENV_EXAMPLES:
        return False
    return any(core in ENV_NAMES or _env_prefixed(core) or core.endswith(ENV_SUFFIX)
               for core in _unwrapped(name))


def _env_prefixed(name: str) -> bool:
    """`.env` followed by anything but an ASCII letter or digit (`.env.local`, `.env-prod`,
    `.env_local`); not a word that only starts alike (`.envoy`, `.environment`). grep's rg
    rules say the same as `.env[!a-zA-Z0-9]*`."""
    if not name.startswith(ENV_PREFIX) or len(name) == len(ENV_PREFIX):
        return False
    follower = name[len(ENV_PREFIX)]
    return not (follower.isascii() and follower.isalnum())


def _unwrapped(name: str) -> Iterator[str]:
    """The name, and the name with one backup prefix, one backup suffix or both taken off."""
    heads = [name] + [name[len(prefix):] for prefix in ENV_BACKUP_PREFIXES if name.startswith(prefix)]
    for head in heads:
        yield head
        yield from (head[:-len(suffix)] for suffix in ENV_BACKUP_SUFFIXES if head.endswith(suffix))


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
