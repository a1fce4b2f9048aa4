"""Git, read through the real `git` program: branch and changed files of a folder.

Owns how Totem runs git: with a timeout, a minimal environment, and the repository's own
programs (fsmonitor, hooks) turned off, because a `.git/config` in a cloned project could
otherwise make a plain `git status` run a program. It never changes a repository.
"""

from __future__ import annotations

import asyncio
import os
import re

GIT_TIMEOUT_S = 10.0
MAX_STATUS_FILES = 1000
MAX_GIT_OUTPUT_BYTES = 8 * 1024 * 1024

# -c options that keep git from running anything the repository names.
SAFE_OPTIONS = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
                "-c", "core.untrackedCache=false")

STATUS_WORDS = {"M": "modified", "A": "added", "D": "deleted", "R": "renamed", "C": "copied",
                "T": "typechange", "?": "untracked", "U": "conflict"}
CONFLICT_PAIRS = {"DD", "AU", "UD", "UA", "DU", "AA", "UU"}


MAX_CONFIG_BYTES = 1024 * 1024
# Sections of a repository's own config that make git run a program or read more config.
PROGRAM_SECTIONS = re.compile(rb"^\s*\[\s*(filter|include|includeif)\b", re.IGNORECASE | re.MULTILINE)


class GitError(Exception):
    """git failed or took too long; the message is for the person."""


def git_environment() -> dict[str, str]:
    """The environment git runs with: enough to find itself and the user's identity, no more."""
    env = {key: os.environ[key] for key in ("PATH", "HOME", "USER") if key in os.environ}
    env.update({"LANG": "C", "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0",
                "GIT_CONFIG_NOSYSTEM": "1"})
    return env


async def run_git(folder: str, *args: str, timeout: float = GIT_TIMEOUT_S) -> tuple[int, bytes, bytes]:
    """Run git in a folder; returns (exit code, stdout, stderr).

    Raises GitError when git is missing or exceeds the timeout (the process is killed).
    """
    try:
        process = await asyncio.create_subprocess_exec(
            "git", *SAFE_OPTIONS, *args, cwd=folder, env=git_environment(),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        raise GitError("git is not installed") from None
    try:
        async with asyncio.timeout(timeout):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise GitError(f"git took longer than {timeout:g} s") from None
    return process.returncode, stdout[:MAX_GIT_OUTPUT_BYTES], stderr


def parse_status(output: bytes) -> tuple[str | None, list[dict]]:
    """Branch and files from `git status --porcelain=v1 -z --branch`."""
    entries = output.decode("utf-8", "replace").split("\0")
    branch = None
    files: list[dict] = []
    index = 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if not entry:
            continue
        if entry.startswith("## "):
            branch = _branch_name(entry[3:])
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            index += 1  # the original name follows a rename or copy
        files.extend(_status_entries(code, path))
    return branch, files


def _branch_name(text: str) -> str | None:
    for prefix in ("No commits yet on ", "Initial commit on "):
        if text.startswith(prefix):
            return text[len(prefix):]
    if text.startswith("HEAD (no branch)"):
        return None
    return text.split("...")[0].split(" ")[0]


def _status_entries(code: str, path: str) -> list[dict]:
    if code in CONFLICT_PAIRS:
        return [{"path": path, "status": "conflict", "staged": False}]
    if code == "??":
        return [{"path": path, "status": "untracked", "staged": False}]
    result = []
    if code[0] not in " ?!":
        result.append({"path": path, "status": STATUS_WORDS.get(code[0], "modified"), "staged": True})
    if code[1] not in " ?!":
        result.append({"path": path, "status": STATUS_WORDS.get(code[1], "modified"), "staged": False})
    return result


async def folder_status(folder: str) -> dict:
    """`{repository, branch, files: [{path, status, staged}], more}` of a folder.

    Raises GitError when git fails inside a repository or times out.
    """
    code, stdout, stderr = await run_git(
        folder, "status", "--porcelain=v1", "-z", "--branch", "--untracked-files=normal")
    if code != 0:
        if b"not a git repository" in stderr:
            return {"repository": False, "branch": None, "files": [], "more": False}
        raise GitError("git status failed: " + stderr.decode("utf-8", "replace").strip()[:300])
    branch, files = parse_status(stdout)
    return {"repository": True, "branch": branch, "files": files[:MAX_STATUS_FILES],
            "more": len(files) > MAX_STATUS_FILES}


def repository_runs_programs(folder: str) -> bool:
    """Whether the repository of a folder configures programs that even `git status` may run
    (filter drivers) or pulls in more configuration (include). Reads files only; blocking."""
    dot_git = os.path.join(folder, ".git")
    try:
        if os.path.isfile(dot_git):  # a worktree or submodule: "gitdir: <path>"
            with open(dot_git, "rb") as handle:
                pointer = handle.read(4096).decode("utf-8", "replace").strip()
            if not pointer.startswith("gitdir:"):
                return True
            git_dir = os.path.join(folder, pointer[len("gitdir:"):].strip())
        else:
            git_dir = dot_git
        configs = [os.path.join(git_dir, "config")]
        common = os.path.join(git_dir, "commondir")
        if os.path.isfile(common):
            with open(common, "rb") as handle:
                configs.append(os.path.join(git_dir, handle.read(4096).decode("utf-8", "replace").strip(), "config"))
        for path in configs:
            if os.path.exists(path):
                with open(path, "rb") as handle:
                    if PROGRAM_SECTIONS.search(handle.read(MAX_CONFIG_BYTES)):
                        return True
    except OSError:
        return True  # unreadable: assume the worst
    return False
