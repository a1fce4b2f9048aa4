"""Git, read through the real `git` program: branch and changed files of a folder.

Owns how Totem runs git and what a repository's own files may make git do. `run_git` is the one
way the server starts git; it vets the repository first and starts nothing when its
configuration names a program (`repository_programs`), because a `.git/config` in a project
folder (a clone, an archive, a shared disk, a folder another tool prepared) could otherwise make
a plain `git status` run a program of its choice: a filter driver runs on every file that
`.gitattributes` marks. What the vetting cannot see (global and system configuration, the
hooks folder, transports) is switched off on the command line and in the environment.

`repository_programs` is also what the permission engine asks (through the agent loop) before
it treats `git status` as safe; it reads files only and never runs git.

Must not: change a repository, or start git any other way than `run_git`.
"""

from __future__ import annotations

import asyncio
import glob
import os
import re
import struct

from totem.process.runner import run_process

GIT_TIMEOUT_S = 10.0
# Between SIGTERM and SIGKILL of git's group: git removes its lock files on SIGTERM at once.
GIT_KILL_GRACE_S = 0.5
MAX_STATUS_FILES = 1000
MAX_GIT_OUTPUT_BYTES = 8 * 1024 * 1024
MAX_GIT_ERROR_BYTES = 64 * 1024
MAX_CONFIG_BYTES = 1024 * 1024
MAX_POINTER_BYTES = 4096  # a `.git` file or `commondir`: one path
MAX_INDEX_BYTES = 256 * 1024 * 1024
MAX_SUBMODULES = 100  # populated submodules vetted, all levels together
MAX_SUBMODULE_DEPTH = 4
MAX_REASON_NAME_CHARS = 80

# Options of every git the server runs. Each one closes a way for git to run a program or to
# change the repository that the vetting of the repository's config does not cover.
SAFE_OPTIONS = (
    # Never a pager. Git pages only on a terminal, which it never has here; this makes it certain.
    "--no-pager",
    # A read never writes: `git status` would otherwise refresh the index (taking index.lock).
    "--no-optional-locks",
    # The repository's config is vetted, but these two also have defaults outside it: hooks are
    # files in .git/hooks (post-index-change runs on an index write, and every later command has
    # its own), and fsmonitor may be set to the built-in daemon.
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    # Status must not try to add an untracked cache to the index (a write).
    "-c", "core.untrackedCache=false",
    # No automatic gc or maintenance after a command: it detaches into a session of its own,
    # out of reach of the timeout and of the kill of git's process group.
    "-c", "gc.auto=0",
    "-c", "maintenance.auto=false",
)

# The environment of every git the server runs, over PATH, HOME and USER.
GIT_ENVIRONMENT = {
    # Messages in English: folder_status recognises "not a git repository".
    "LANG": "C", "LC_ALL": "C",
    # Configuration comes from the repository alone, which repository_programs has vetted, and
    # from SAFE_OPTIONS: no /etc/gitconfig, no ~/.gitconfig or ~/.config/git/config (a global
    # filter driver such as git-lfs would run too). GIT_CONFIG_GLOBAL needs git >= 2.32.
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    # Likewise no /etc/gitattributes: which files get which driver comes from the repository.
    "GIT_ATTR_NOSYSTEM": "1",
    # No transport at all (a partial clone would fetch missing objects). An empty allow list is
    # stronger than `-c protocol.allow=never`, which a repository's `protocol.ext.allow=always`
    # overrides; `ext::` runs a command. git >= 2.44 does not even try a lazy fetch.
    "GIT_ALLOW_PROTOCOL": "",
    "GIT_NO_LAZY_FETCH": "1",
    "GIT_TERMINAL_PROMPT": "0",
    # A command that wants an editor fails at once instead of waiting for one.
    "GIT_EDITOR": "false",
}

STATUS_WORDS = {"M": "modified", "A": "added", "D": "deleted", "R": "renamed", "C": "copied",
                "T": "typechange", "?": "untracked", "U": "conflict"}
CONFLICT_PAIRS = {"DD", "AU", "UD", "UA", "DU", "AA", "UU"}

# Sections of a repository's config that make git run a program or read more config, whatever
# their keys: filter drivers run even for `git status`; an alias turns a command into a program
# (`[alias] st = !cmd`) or into git with any `-c` option; an include reads a file Totem has not
# seen; hook.<name>.command (git >= 2.46) and pager.<command> name programs.
PROGRAM_SECTIONS = {
    "filter": "a filter driver",
    "alias": "an alias",
    "include": "an include of another config file",
    "includeif": "a conditional include of another config file",
    "hook": "a hook command",
    "pager": "a pager",
}
# (section, key) that name a program, with or without a subsection (`diff.external` and
# `diff.<driver>.textconv`, `credential.helper` and `credential.<url>.helper`).
# core.fsmonitor and core.hooksPath are not here: every git that Totem starts overrides both
# (SAFE_OPTIONS here, GIT_SAFETY for the agent's commands), and hook managers (husky) set them.
PROGRAM_KEYS = {
    ("core", "sshcommand"): "an ssh command",
    ("core", "gitproxy"): "a proxy command",
    ("core", "askpass"): "a password program",
    ("core", "pager"): "a pager",
    ("core", "editor"): "an editor",
    ("core", "alternaterefscommand"): "an alternate refs command",
    ("sequence", "editor"): "an editor",
    ("diff", "external"): "an external diff program",
    ("diff", "textconv"): "a textconv program",
    ("diff", "command"): "a diff driver command",
    ("merge", "driver"): "a merge driver",
    ("credential", "helper"): "a credential helper",
    ("gpg", "program"): "a signing program",
    ("gpg", "defaultkeycommand"): "a signing key command",
    ("remote", "uploadpack"): "a program for a remote",
    ("remote", "receivepack"): "a program for a remote",
    ("protocol", "allow"): "an allowed transport",  # ext:: runs a command
    ("submodule", "update"): "a submodule update command",  # `!cmd`, allowed in .git/config
    ("interactive", "difffilter"): "a diff filter",
    ("trailer", "command"): "a trailer command",
    ("trailer", "cmd"): "a trailer command",
    ("mergetool", "cmd"): "a merge tool",
    ("mergetool", "path"): "a merge tool",
    ("difftool", "cmd"): "a diff tool",
    ("difftool", "path"): "a diff tool",
    ("guitool", "cmd"): "a gui tool",
    ("uploadpack", "packobjectshook"): "a pack-objects hook",
    ("imap", "tunnel"): "a tunnel command",
    ("sendemail", "smtpserver"): "a mail program",
    ("sendemail", "tocmd"): "a mail command",
    ("sendemail", "cccmd"): "a mail command",
    ("man", "cmd"): "a manual viewer",
    ("man", "path"): "a manual viewer",
    ("browser", "cmd"): "a browser",
    ("browser", "path"): "a browser",
    ("web", "browser"): "a browser",
}

# git's config grammar (Documentation/config.txt): `[section]`, `[section "sub"]` with `\`
# escapes in the quoted part, the old `[section.sub]`; keys start with a letter.
_HEADER = re.compile(r'\[([A-Za-z0-9.-]+)(?:[ \t]+"((?:[^"\\]|\\.)*)")?\]')
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9-]*)[ \t]*")
_BLANKS = " \t"
_GITLINK_MODE = 0o160000
_GITLINK_BYTES = struct.pack(">I", _GITLINK_MODE)
_INDEX_SIGNATURE = b"DIRC"
_HEAD_OBJECT = re.compile(rb"(?:[0-9a-f]{40}|[0-9a-f]{64})\n?")


class GitError(Exception):
    """git failed or took too long; the message is for the person."""


class GitRefusedError(GitError):
    """git was not started: the repository names programs; the message says which."""


class _Unsafe(Exception):
    """Why git could run a program here (the message), found while reading the repository."""


def git_environment() -> dict[str, str]:
    """The environment git runs with: enough to find itself and the user's ignore file, no more."""
    env = {key: os.environ[key] for key in ("PATH", "HOME", "USER") if key in os.environ}
    env.update(GIT_ENVIRONMENT)
    return env


async def run_git(folder: str, *args: str, timeout: float = GIT_TIMEOUT_S) -> tuple[int, bytes, bytes]:
    """Run git in a folder; returns (exit code, stdout, stderr), each cut at its cap.

    Before anything starts, the repository of the folder is vetted (repository_programs): when
    its configuration or a submodule's names a program, git is not run at all.

    git starts through `runner.run_process`, in a process group of its own with the environment
    of `git_environment()`; on the timeout, on a cancellation, and after it exits, whatever is
    left of that group is stopped (SIGTERM, then SIGKILL). Not `run_command`: that merges stderr
    into stdout and decodes text, while a status needs its NUL-separated bytes and its errors
    apart.

    Raises GitRefusedError with the reason when the repository names programs, GitError when
    git cannot start or exceeds the timeout.
    """
    reason = await asyncio.to_thread(repository_programs, folder)
    if reason:
        raise GitRefusedError(reason)
    try:
        return await _start_git(folder, list(args), timeout)
    except OSError as exc:
        if not os.path.isdir(folder):
            raise GitError(f"{folder} is not a folder") from None
        if isinstance(exc, FileNotFoundError):
            raise GitError("git is not installed") from None
        raise GitError(f"git could not start: {exc.strerror or exc}") from None


async def _start_git(cwd: str, args: list[str], timeout: float) -> tuple[int, bytes, bytes]:
    """git with SAFE_OPTIONS and git_environment() through the runner. Raises OSError when it
    cannot start, GitError when it takes too long or does not end."""
    result = await run_process(
        ["git", *SAFE_OPTIONS, *args], cwd=cwd, env=git_environment(), timeout_s=timeout,
        stdout_cap=MAX_GIT_OUTPUT_BYTES, stderr_cap=MAX_GIT_ERROR_BYTES, kill_grace_s=GIT_KILL_GRACE_S)
    if result.timed_out:
        raise GitError(f"git took longer than {timeout:g} s")
    if result.returncode is None:  # stopped, but not reaped within runner.REAP_TIMEOUT_S
        raise GitError("git did not end")
    return result.returncode, result.stdout, result.stderr


async def ignored_folders(root: str, shadow: str, pathspecs: tuple[str, ...] = (),
                          timeout: float = GIT_TIMEOUT_S) -> list[str] | None:
    """The folders under `root` that its ignore files ignore whole (relative, without the
    trailing `/`), as `unignored_files` reads them; None when git is not installed."""
    names = await _list_others(root, shadow, ("--ignored", "--directory"), pathspecs, timeout)
    return None if names is None else [name.rstrip("/") for name in names if name.endswith("/")]


async def unignored_files(root: str, shadow: str, pathspecs: tuple[str, ...] = (),
                          timeout: float = GIT_TIMEOUT_S) -> list[str] | None:
    """The files under `root` that its `.gitignore` files (and `.git/info/exclude`) do not
    ignore, relative with `/`; None when git is not installed.

    git reads the ignore files of the folder, not its repository: the repository given is
    `shadow`, an empty one in Totem's data folder (created here when missing), so a folder
    without git works the same and nothing of the project's own `.git` is read or run. A
    folder holding its own `.git` (a nested repository) is listed as that folder alone and
    dropped. `pathspecs` narrow the listing (`:(glob)dir/*`: the files of one folder).
    Raises GitError when git fails or takes too long.
    """
    names = await _list_others(root, shadow, (), pathspecs, timeout)
    return None if names is None else [name for name in names if name and not name.endswith("/")]


async def _list_others(root: str, shadow: str, options: tuple[str, ...], pathspecs: tuple[str, ...],
                       timeout: float) -> list[str] | None:
    if not os.path.isdir(os.path.join(shadow, "objects")):
        try:
            code, _out, err = await _run_plain(root, ["init", "--quiet", "--bare", shadow], timeout)
        except FileNotFoundError:
            return None
        if code != 0:
            raise GitError("git init of the snapshot index failed: " + err.decode("utf-8", "replace")[:300])
    exclude = os.path.join(root, ".git", "info", "exclude")
    args = ["--git-dir", shadow, "--work-tree", root]
    if os.path.isfile(exclude):
        args += ["-c", f"core.excludesFile={exclude}"]
    args += ["ls-files", "-z", "--others", "--exclude-standard", *options, "--", *pathspecs]
    try:
        code, out, err = await _run_plain(root, args, timeout)
    except FileNotFoundError:
        return None
    if code != 0:
        raise GitError("git ls-files failed: " + err.decode("utf-8", "replace").strip()[:300])
    if len(out) >= MAX_GIT_OUTPUT_BYTES:
        raise GitError(f"the folder lists more than {MAX_GIT_OUTPUT_BYTES} bytes of file names")
    return [name for name in out.decode("utf-8", "surrogateescape").split("\0") if name]


async def _run_plain(cwd: str, args: list[str], timeout: float) -> tuple[int, bytes, bytes]:
    """git with Totem's own repository (never the folder's): nothing to vet, same safeguards.
    Raises FileNotFoundError when git is missing, GitError on a timeout."""
    try:
        return await _start_git(cwd, args, timeout)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise GitError(f"git could not start: {exc.strerror or exc}") from None


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

    In a repository whose configuration names a program, git is not run: the answer has
    `repository: true`, no files, and `refused` with the reason for the person.

    Raises GitError when git fails inside a repository or times out.
    """
    try:
        code, stdout, stderr = await run_git(
            folder, "status", "--porcelain=v1", "-z", "--branch", "--untracked-files=normal")
    except GitRefusedError as exc:
        return {"repository": True, "branch": None, "files": [], "more": False,
                "refused": f"git is not run in this repository: {exc}"}
    if code != 0:
        if b"not a git repository" in stderr:
            return {"repository": False, "branch": None, "files": [], "more": False}
        raise GitError("git status failed: " + stderr.decode("utf-8", "replace").strip()[:300])
    cut = len(stdout) >= MAX_GIT_OUTPUT_BYTES
    if cut:  # the last entry may be cut in two
        stdout = stdout[:stdout.rfind(b"\0") + 1]
    branch, files = parse_status(stdout)
    return {"repository": True, "branch": branch, "files": files[:MAX_STATUS_FILES],
            "more": cut or len(files) > MAX_STATUS_FILES}


# -- what a repository's own files make git do ------------------------------------------------

def repository_programs(folder: str) -> str | None:
    """Why git run in `folder` might run a program that the repository names, or None.

    Finds the repository as git does (`.git` in the folder or a parent, a `.git` file pointing
    to a worktree's or submodule's git folder, `commondir`) and reads its config files (config,
    config.worktree), then those of the populated submodules that its index lists, since
    `git status` runs in them too. A program is named by a filter, alias, include, includeIf,
    hook or pager section, or by a key of PROGRAM_KEYS. Anything it cannot read or parse counts
    as naming a program (fail closed). The reason is short, for the person: "its config names a
    filter driver (filter.lfs.clean)". Reads files only; blocking (run it in a thread).
    Raises nothing.
    """
    try:
        for git_dir, top in _git_dirs(os.path.realpath(folder)):
            _vet(git_dir, top, depth=0, budget=[MAX_SUBMODULES])
    except _Unsafe as exc:
        return str(exc)
    except (OSError, ValueError) as exc:  # unreadable: assume the worst
        return f"its git files cannot be read ({getattr(exc, 'strerror', None) or exc})"
    return None


def repository_runs_programs(folder: str) -> bool:
    """Whether `repository_programs` finds a reason (see there). Blocking; raises nothing."""
    return repository_programs(folder) is not None


def _git_dirs(path: str) -> list[tuple[str, str]]:
    """The git folders that git may use for `path`, each with its work tree top.

    git walks up to the first `.git` file or valid `.git` folder, and takes a folder that is
    itself a git folder as a bare repository. A `.git` folder that does not surely look valid
    here is vetted too and the walk goes on: git skips it only if it is invalid, so its config
    counts as long as we cannot be sure which one git takes.
    """
    found: list[tuple[str, str]] = []
    while True:
        dot_git = os.path.join(path, ".git")
        if os.path.isfile(dot_git):
            return found + [(_pointed_git_dir(path, dot_git), path)]
        if os.path.isdir(dot_git):
            found.append((dot_git, path))
            if _surely_git_dir(dot_git):
                return found
        if _maybe_git_dir(path):
            raise _Unsafe("the folder is inside a git folder, which Totem does not read")
        parent = os.path.dirname(path)
        if parent == path:
            return found
        path = parent


def _pointed_git_dir(top: str, dot_git: str) -> str:
    """The folder a `.git` file names ("gitdir: <path>", relative to the file's folder)."""
    pointer = _read_pointer(dot_git)
    if not pointer.startswith("gitdir: "):
        raise _Unsafe("its .git file is not a gitdir pointer")
    return os.path.join(top, pointer[len("gitdir: "):])


def _read_pointer(path: str) -> str:
    with open(path, "rb") as handle:
        text = handle.read(MAX_POINTER_BYTES + 1)
    if len(text) > MAX_POINTER_BYTES or b"\0" in text:
        raise _Unsafe(f"its {os.path.basename(path)} file is not a path")
    return os.fsdecode(text.rstrip(b"\r\n \t"))


def _common_dir(git_dir: str) -> str:
    common = os.path.join(git_dir, "commondir")
    return os.path.join(git_dir, _read_pointer(common)) if os.path.isfile(common) else git_dir


def _surely_git_dir(path: str) -> bool:
    """git's is_git_directory, stricter: objects and refs folders, a HEAD naming a ref or an object."""
    try:
        common = _common_dir(path)
        head = os.path.join(path, "HEAD")
        if os.path.islink(head) or not os.path.isfile(head):
            return False
        with open(head, "rb") as handle:
            text = handle.read(MAX_POINTER_BYTES)
    except (OSError, _Unsafe):
        return False
    return (all(os.path.isdir(os.path.join(common, name)) and os.access(os.path.join(common, name), os.X_OK)
                for name in ("objects", "refs"))
            and (text.startswith(b"ref: refs/") or bool(_HEAD_OBJECT.fullmatch(text))))


def _maybe_git_dir(path: str) -> bool:
    """git's is_git_directory, looser: a HEAD beside objects and refs folders (or a commondir)."""
    if not os.path.lexists(os.path.join(path, "HEAD")):
        return False
    if os.path.lexists(os.path.join(path, "commondir")):
        return True
    return all(os.path.isdir(os.path.join(path, name)) for name in ("objects", "refs"))


def _vet(git_dir: str, top: str, depth: int, budget: list[int]) -> None:
    """Raise _Unsafe when the config of a git folder, or of a submodule below, names a program."""
    common = _common_dir(git_dir)
    values: dict[tuple[str, str], str] = {}
    for path in dict.fromkeys((os.path.join(common, "config"), os.path.join(common, "config.worktree"),
                               os.path.join(git_dir, "config.worktree"))):
        if os.path.lexists(path):
            values.update(_vet_config(path))
    sha256 = (values.get(("extensions", "objectformat")) or "").lower() == "sha256"
    links = _gitlinks(git_dir, common, 32 if sha256 else 20)
    if links and ("core", "worktree") in values:
        raise _Unsafe("its config moves the work tree (core.worktree) and it has submodules")
    for link in links:
        sub = os.path.join(top, os.fsdecode(link))
        dot_git = os.path.join(sub, ".git")
        if os.path.isfile(dot_git):
            sub_git_dir = _pointed_git_dir(sub, dot_git)
        elif os.path.isdir(dot_git):
            sub_git_dir = dot_git
        else:
            continue  # not checked out: git status does not go in
        budget[0] -= 1
        if budget[0] < 0:
            raise _Unsafe(f"it has more than {MAX_SUBMODULES} submodules")
        if depth >= MAX_SUBMODULE_DEPTH:
            raise _Unsafe(f"its submodules are nested more than {MAX_SUBMODULE_DEPTH} deep")
        try:
            _vet(sub_git_dir, sub, depth + 1, budget)
        except _Unsafe as exc:
            raise _Unsafe(f"its submodule {_shown(os.fsdecode(link))}: {exc}") from None


def _vet_config(path: str) -> dict[tuple[str, str], str]:
    """The (section, key) values of one config file; raises _Unsafe at a program or an unreadable line."""
    name = os.path.basename(path)
    if not os.path.isfile(path):  # a FIFO or a device would hang or never end
        raise _Unsafe(f"its {name} is not a regular file")
    with open(path, "rb") as handle:
        data = handle.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise _Unsafe(f"its {name} is larger than Totem reads")
    values = {}
    for section, subsection, key, value in _config_entries(data, name):
        what = PROGRAM_SECTIONS.get(section) or PROGRAM_KEYS.get((section, key))
        if what:
            shown = ".".join((section, subsection, key) if subsection is not None else (section, key))
            raise _Unsafe(f"its {name} names {what} ({_shown(shown)})")
        if subsection is None:
            values[(section, key)] = value
    return values


def _config_entries(data: bytes, name: str = "config"):
    """(section, subsection or None, key, value or None) of a git config file, in order.

    Section and key names come lowercased, as git compares them; the old `[section.sub]` form
    gives a lowercased subsection, as in git. Several headers and a key may share a line.
    Raises _Unsafe (a reason naming the line) for whatever this reader does not follow exactly:
    a line continued with a backslash, an unterminated quote, a NUL byte, a key outside a section
    or any other line git would refuse or read differently.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\0" in data:
        raise _Unsafe(f"its {name} holds a NUL byte, which Totem does not read")
    section: tuple[str, str | None] | None = None
    for number, line in enumerate(data.decode("latin-1").split("\n"), 1):
        rest = line[:-1] if line.endswith("\r") else line
        while True:
            rest = rest.lstrip(_BLANKS)
            if not rest or rest[0] in "#;":
                break
            if rest[0] == "[":
                header = _HEADER.match(rest)
                if not header:
                    raise _Unsafe(f"its {name} has a section header that Totem cannot read (line {number})")
                # git lowercases the whole unquoted part and keeps the quoted one: `[Filter.A "B"]`
                # is filter.a.B, `[filter.A]` is filter.a; the section is up to the first dot.
                base, _, subsection = header.group(1).lower().partition(".")
                quoted = header.group(2)
                if quoted is not None:
                    quoted = re.sub(r"\\(.)", r"\1", quoted)
                    subsection = f"{subsection}.{quoted}" if subsection else quoted
                if not base:
                    raise _Unsafe(f"its {name} has a section header that Totem cannot read (line {number})")
                section = (base, subsection or None)
                rest = rest[header.end():]
                continue
            key = _KEY.match(rest)
            if not key or section is None:
                raise _Unsafe(f"its {name} has a line that Totem cannot read (line {number})")
            after = rest[key.end():]
            if after and after[0] != "=":
                raise _Unsafe(f"its {name} has a line that Totem cannot read (line {number})")
            value = _config_value(after[1:], name, number) if after else None
            yield section[0], section[1], key.group(1).lower(), value
            break


def _config_value(text: str, name: str, number: int) -> str:
    """A value as git reads it: quotes removed, escapes resolved, a comment cut off."""
    value, quoted, index = [], False, 0
    text = text.strip(_BLANKS)
    while index < len(text):
        char = text[index]
        if char == "\\":
            if index + 1 == len(text):
                raise _Unsafe(f"its {name} continues a line with a backslash, which Totem does not "
                              f"read (line {number})")
            value.append({"n": "\n", "t": "\t", "b": "\b"}.get(text[index + 1], text[index + 1]))
            index += 2
            continue
        if char == '"':
            quoted = not quoted
        elif char in "#;" and not quoted:
            break
        else:
            value.append(char)
        index += 1
    if quoted:
        raise _Unsafe(f"its {name} has an unterminated quote (line {number})")
    return "".join(value).strip(_BLANKS)


def _gitlinks(git_dir: str, common: str, hash_len: int) -> list[bytes]:
    """The paths of the submodules (gitlink entries) in the index of a git folder.

    Index format: Documentation/gitformat-index.txt (versions 2, 3 and 4).
    """
    path = os.path.join(git_dir, "index")
    if not os.path.lexists(path):
        return []
    if not os.path.isfile(path):
        raise _Unsafe("its index is not a regular file")
    if os.path.getsize(path) > MAX_INDEX_BYTES:
        raise _Unsafe("its index is larger than Totem reads")
    with open(path, "rb") as handle:
        data = handle.read()
    shared = glob.glob(os.path.join(glob.escape(git_dir), "sharedindex.*"))
    if _GITLINK_BYTES not in data and not shared:
        return []  # no gitlink mode anywhere: no submodule (the common case, without parsing)
    if shared:
        raise _Unsafe("it uses a split index, which Totem does not read")
    if len(data) < 12 or data[:4] != _INDEX_SIGNATURE:
        raise _Unsafe("its index cannot be read")
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3, 4):
        raise _Unsafe(f"its index has version {version}, which Totem does not read")
    links, offset, previous = [], 12, b""
    fixed = 40 + hash_len + 2  # stat fields, object name, flags
    for _ in range(count):
        if offset + fixed > len(data):
            raise _Unsafe("its index cannot be read")
        (mode,) = struct.unpack_from(">I", data, offset + 24)
        (flags,) = struct.unpack_from(">H", data, offset + 40 + hash_len)
        start = offset + fixed + (2 if version >= 3 and flags & 0x4000 else 0)
        if version == 4:
            strip, start = _varint(data, start)
            if strip > len(previous):
                raise _Unsafe("its index cannot be read")
        end = data.find(b"\0", start)
        if end < 0:
            raise _Unsafe("its index cannot be read")
        if version == 4:
            name = previous[:len(previous) - strip] + data[start:end]
            offset = end + 1
        else:
            name = data[start:end]
            offset += (end - offset + 8) & ~7  # padded with 1 to 8 NULs to a multiple of 8
        previous = name
        if mode & 0o170000 == _GITLINK_MODE:
            links.append(name)
    return links


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    """git's offset varint (varint.c): the value and the offset after it."""
    if offset >= len(data):
        raise _Unsafe("its index cannot be read")
    byte = data[offset]
    value = byte & 0x7F
    while byte & 0x80:
        offset += 1
        if offset >= len(data):
            raise _Unsafe("its index cannot be read")
        byte = data[offset]
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, offset + 1


def _shown(name: str) -> str:
    """A name from the repository, fit to show: no control characters, bounded."""
    clean = "".join(char if char.isprintable() else "?" for char in name)
    return clean if len(clean) <= MAX_REASON_NAME_CHARS else clean[:MAX_REASON_NAME_CHARS - 1] + "…"
