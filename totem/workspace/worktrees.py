"""A git worktree per session: created on a branch of its own, merged or discarded by the person.

Owns the git of worktrees, all of it through `git.run_git` (the repository vetted first, the
safe options, a timeout): `git worktree add -b totem/<name>` from the project's HEAD into
`<data>/worktrees/<sessionid>` (outside the project), the state of a worktree against the branch
the project has checked out, a merge that changes nothing unless it succeeds, and the removal
of a worktree with its branch.

A merge first commits what is uncommitted in the worktree (the author from the repository's own
config, the message from the session name), then tries it with `git merge-tree` without
touching any folder: a conflict, or a file the merge would change that has uncommitted changes
in the project's folder, refuses it and takes back that commit (the worktree's changes stay, not
committed). Only then does `git merge --no-ff` run in the project.

Must not: be reachable by a tool, MCP or a schedule (only the person's actions call it).
"""

from __future__ import annotations

import os
import re
import shutil

from totem.workspace.git import GitError, parse_status, run_git

WORKTREES_DIR = "worktrees"
BRANCH_PREFIX = "totem/"
MAX_BRANCH_NAME_CHARS = 40


class WorktreeError(Exception):
    """A worktree action refused or failed; the message says why, for the person."""


def branch_name(name: str, sessionid: str) -> str:
    """`totem/<session name>` as a branch name can hold it, else `totem/<session id>`."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:MAX_BRANCH_NAME_CHARS].strip("-")
    return BRANCH_PREFIX + (slug or sessionid)


def worktree_path(data_dir: str, sessionid: str) -> str:
    return os.path.join(os.path.realpath(data_dir), WORKTREES_DIR, sessionid)


async def _git(folder: str, *args: str) -> str:
    """git's output; WorktreeError with git's message when it fails."""
    code, out, err = await _git_code(folder, *args)
    if code != 0:
        command = next((arg for arg in args if not arg.startswith("-") and "=" not in arg), "")
        raise WorktreeError(f"git {command} failed: " + err.strip()[:500])
    return out


async def _git_code(folder: str, *args: str) -> tuple[int, str, str]:
    """(exit code, output, errors) of git run in `folder`; WorktreeError when it cannot run."""
    try:
        code, out, err = await run_git(folder, *args)
    except GitError as exc:
        raise WorktreeError(str(exc)) from None
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


async def check_repository(root: str) -> None:
    """Refuse a project that is not the top folder of a git repository with a commit."""
    code, top, _err = await _git_code(root, "rev-parse", "--show-toplevel")
    if code != 0:
        raise WorktreeError("the project is not a git repository")
    if os.path.realpath(top.strip()) != os.path.realpath(root):
        raise WorktreeError("the project folder is inside a git repository but not its top folder")
    code, _out, _err = await _git_code(root, "rev-parse", "--verify", "--quiet", "HEAD")
    if code != 0:
        raise WorktreeError("the repository has no commit yet to start a branch from")


async def create(root: str, path: str, branch: str) -> str:
    """A worktree at `path` on a new branch from HEAD; returns the branch (suffixed when the
    name is taken). Raises WorktreeError."""
    await check_repository(root)
    taken = set((await _git(root, "branch", "--list", "--format=%(refname:short)", BRANCH_PREFIX + "*")).split())
    chosen, number = branch, 2
    while chosen in taken:
        chosen, number = f"{branch}-{number}", number + 1
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    await _git(root, "worktree", "add", "--quiet", "-b", chosen, path, "HEAD")
    return chosen


async def project_branch(root: str) -> str:
    code, out, _err = await _git_code(root, "symbolic-ref", "--quiet", "--short", "HEAD")
    if code != 0:
        raise WorktreeError("the project has no branch checked out (a detached HEAD); check one out to merge into")
    return out.strip()


async def state(root: str, path: str) -> dict:
    """`{branch, base, ahead, behind, changes: [{path, status, staged}]}` of a worktree
    against the branch the project has checked out. Raises WorktreeError."""
    if not os.path.isdir(path):
        raise WorktreeError("the worktree folder is gone")
    out = await _git(path, "status", "--porcelain=v1", "-z", "--branch", "--untracked-files=all")
    branch, changes = parse_status(out.encode("utf-8", "surrogateescape"))
    into = await project_branch(root)
    base = (await _git(path, "merge-base", "HEAD", into)).strip()
    counts = (await _git(path, "rev-list", "--left-right", "--count", f"{into}...HEAD")).split()
    behind, ahead = (int(counts[0]), int(counts[1])) if len(counts) == 2 else (0, 0)
    return {"branch": branch, "into": into, "base": base, "ahead": ahead, "behind": behind, "changes": changes,
            "author": await author(root)}


async def loses_work(root: str, path: str) -> bool:
    """Whether removing the worktree would lose something: uncommitted changes, or commits
    that the project's branch does not have."""
    try:
        found = await state(root, path)
    except WorktreeError:
        return os.path.isdir(path)
    return bool(found["changes"]) or found["ahead"] > 0


MAX_AUTHOR_CHARS = 200
# What git's ident would refuse or mangle (it strips <, > and newlines from a name), or what
# would make the config line another than the one shown.
_AUTHOR_REFUSED = re.compile(r"[<>\x00-\x1f\x7f]")


def author_problems(name: str | None, email: str | None) -> list[tuple[str, str]]:
    """The problems of a user.name and user.email the person gave, as (field, reason)."""
    problems = []
    for field, value in (("username", name), ("useremail", email)):
        if value is None:
            continue
        if not value.strip() or len(value) > MAX_AUTHOR_CHARS:
            problems.append((field, f"must hold 1 to {MAX_AUTHOR_CHARS} characters"))
        elif _AUTHOR_REFUSED.search(value):
            problems.append((field, "must not hold <, >, a line break or another control character"))
    if email is not None and email.strip() and not re.fullmatch(r"[^@\s]+@[^@\s]+", email):
        problems.append(("useremail", "must be an address like name@example.com, without spaces"))
    return problems


async def author(root: str) -> dict[str, str | None]:
    """The author git gives the repository's commits: `{name, email}` (user.name and
    user.email, from any of git's config files), None where there is none."""
    found: dict[str, str | None] = {"name": None, "email": None}
    # One git for both (the panel reads this at every refresh); a later file's value wins.
    code, out, _err = await _git_code(root, "config", "--get-regexp", r"^user\.(name|email)$")
    for line in out.splitlines() if code == 0 else ():
        key, _, value = line.partition(" ")
        found[key.removeprefix("user.")] = value.strip() or None
    return found


async def set_author(root: str, name: str | None, email: str | None) -> None:
    """Set user.name and user.email in the repository's own config (.git/config)."""
    for key, value in (("user.name", name), ("user.email", email)):
        if value is not None:
            await _git(root, "config", "--local", key, value.strip())


async def merge(root: str, path: str, message: str) -> dict:
    """Commit the worktree's changes and merge its branch into the project's branch:
    `{merged: true, commit, files}`; refused (WorktreeError, with `files`) on a conflict or on
    uncommitted changes of the project that the merge would touch, with everything as it was."""
    into = await project_branch(root)
    missing = [f"user.{key}" for key, value in (await author(root)).items() if value is None]
    if missing:
        raise WorktreeError(f"the repository has no {' and no '.join(missing)} in its config: give them to the "
                            "merge (username, useremail) to set them in the repository, or set them yourself "
                            f"(git config {missing[0]} ...), so that the commit of the worktree has an author")
    uncommitted = bool((await _git(path, "status", "--porcelain", "--untracked-files=all")).strip())
    if uncommitted:
        await _git(path, "add", "--all")
        await _git(path, "-c", "commit.gpgSign=false", "commit", "--quiet", "--no-verify", "-m", message)
    try:
        head = (await _git(path, "rev-parse", "HEAD")).strip()
        code, out, _err = await _git_code(root, "merge-tree", "--write-tree", "--name-only", into, head)
        if code != 0:
            # The tree's id, the conflicted files, an empty line, then messages.
            conflicted = []
            for line in out.splitlines()[1:]:
                if not line:
                    break
                conflicted.append(line)
            raise MergeRefused("the merge conflicts; nothing was merged", sorted(set(conflicted)))
        touched = set((await _git(root, "diff", "--name-only", f"{into}...{head}")).split("\n")) - {""}
        dirty = {entry["path"] for entry in parse_status(
            (await _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all")).encode())[1]}
        blocking = sorted(touched & dirty)
        if blocking:
            raise MergeRefused("the project's folder has uncommitted changes to files the merge would change; "
                               "commit or stash them first", blocking)
    except WorktreeError:
        if uncommitted:  # take back the commit made for the merge; the changes stay in the worktree
            await _git(path, "reset", "--quiet", "--mixed", "HEAD~1")
        raise
    branch = (await _git(path, "symbolic-ref", "--quiet", "--short", "HEAD")).strip()
    await _git(root, "-c", "commit.gpgSign=false", "merge", "--quiet", "--no-ff", "--no-edit", "--no-verify",
               "-m", f"Merge {branch}: {message}", head)
    commit = (await _git(root, "rev-parse", "HEAD")).strip()
    return {"merged": True, "commit": commit, "into": into, "files": sorted(touched)}


class MergeRefused(WorktreeError):
    def __init__(self, message: str, files: list[str]):
        super().__init__(message)
        self.files = files


async def branch_of(path: str) -> str | None:
    if not os.path.isdir(path):
        return None
    code, out, _err = await _git_code(path, "symbolic-ref", "--quiet", "--short", "HEAD")
    return out.strip() if code == 0 else None


async def listed(root: str) -> list[dict]:
    """`[{path, branch}]`: the worktrees of the project's repository (not its own folder)."""
    out = await _git(root, "worktree", "list", "--porcelain")
    found: list[dict] = []
    current: dict = {}
    for line in out.splitlines() + [""]:
        if not line:
            if current.get("path") and os.path.realpath(current["path"]) != os.path.realpath(root):
                found.append(current)
            current = {}
        elif line.startswith("worktree "):
            current = {"path": line[len("worktree "):], "branch": None}
        elif line.startswith("branch refs/heads/"):
            current["branch"] = line[len("branch refs/heads/"):]
    return found


async def discard(root: str, path: str, branch: str | None) -> None:
    """Remove the worktree and its branch (the branch's commits go with it)."""
    if os.path.isdir(path):
        code, _out, err = await _git_code(root, "worktree", "remove", "--force", path)
        if code != 0 and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
    await _git_code(root, "worktree", "prune")
    if branch:
        await _git_code(root, "branch", "--quiet", "-D", branch)
