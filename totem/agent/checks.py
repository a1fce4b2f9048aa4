"""Checks after edits: what looks at the files a step changed, run once per step after its
write, edit and patch calls, batched (one run of each check over all its files), and what they
said back to the model. One registry of a project's checks (project_checks): the commands it
declares (`.totem/checks.json`: `{"checks": [{"name", "files", "command", "timeout"?}]}`, such
as `*.py` → `ruff check {files}`), and in a Total.js project (totaljs.detect, unless the `forge`
setting is off) the built-in Total.js check.

A declared check is a command like any other: it runs as a `bash` call of the step through the
same permission gate (asked like any command; "always" stores a rule as for any), the sandbox,
the scrubber, the output cap and a timeout (its own, else the commandtimeout setting); its tool
part is marked `check` and shown as one. The Total.js check runs in Totem itself (the validator
of totaljs.py, which reads the changed files and runs nothing, so nothing is asked): its result
is a `validation` part marked `check`, `{kind, check, files, problems, blocking}`. It is also
the review of a self-checked answer's code (knowledge.py). The model reads what every check
found as a note after the step's results (context.py), never as a call of its own. A check that
fails, is refused or times out never undoes or blocks the edit: it says so, and the run goes
on. A project file can only declare commands: nothing here allows one.

Must not: decide or ask (the gate does), run a process itself (the bash tool does).
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import posixpath
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from totem.agent.stream import ToolCall
from totem.security.boundary import BoundaryError, resolve_inside

if TYPE_CHECKING:
    from totem.agent.calls import ToolCalls
    from totem.agent.recorder import OpenPart, Recorder
    from totem.agent.run import Run

CHECKS_FILE = ".totem/checks.json"
MAX_CHECKS = 16
MAX_CHECKS_BYTES = 64 * 1024
MAX_TIMEOUT_S = 600
MAX_FILES_PER_CHECK = 200  # of one step's changes, given to one run of a check
EDITING_TOOLS = ("write", "edit", "patch")
TOTALJS_CHECK = "totaljs"  # the name of the built-in Total.js check
TOTALJS_FILES = (".js", ".mjs", ".cjs", ".html", ".htm")  # what the Total.js check looks at
MAX_VALIDATED_BYTES = 256 * 1024  # of one file for the Total.js check (a larger one is said, not checked)
RULE_CHECKS_FILE = "checks-file"  # a problem of .totem/checks.json itself


@dataclass(frozen=True)
class Check:
    name: str
    files: str  # a pattern: without "/" it matches a file's name in any folder, else its path
    command: str  # `{files}` becomes the matching files, each quoted for the shell
    timeout: int | None = None

    def matching(self, paths: list[str]) -> list[str]:
        if "/" in self.files:
            return [path for path in paths if fnmatch.fnmatchcase(path, self.files)]
        return [path for path in paths if fnmatch.fnmatchcase(posixpath.basename(path), self.files)]

    def command_for(self, paths: list[str]) -> str:
        return self.command.replace("{files}", " ".join(shlex.quote(path) for path in paths))


@dataclass(frozen=True)
class TotalJsCheck:
    """The built-in check of a Total.js project of `version` (4, 5 or None): the validator of
    totaljs.py over the step's changed .js and .html files, and over a self-checked answer."""

    version: int | None
    name: str = TOTALJS_CHECK

    def matching(self, paths: list[str]) -> list[str]:
        return [path for path in paths if path.lower().endswith(TOTALJS_FILES)]

    async def run(self, root: str, paths: list[str]) -> dict[str, Any]:
        """`{problems, blocking}` of the files `paths` of the project in `root`."""
        from totem.workspace import totaljs  # its patterns take a while to compile: not at start-up
        files = await asyncio.to_thread(_read_texts, root, paths)
        found = await asyncio.to_thread(totaljs.check_files, files, root=root, version=self.version)
        return found.view()

    async def review(self, root: str, answer: str, cut: bool) -> dict[str, Any] | None:
        """`{problems, blocking}` of the code blocks of an answer (cut at the output limit when
        `cut`), or None when there is nothing to say."""
        from totem.workspace import totaljs
        found = await asyncio.to_thread(totaljs.check_answer, answer, root=root, version=self.version, cut=cut)
        return found.view() if found.problems else None


def _read_texts(root: str, paths: list[str]) -> list[tuple[str, str | None]]:
    """(path, text) of each file, read inside the project and bounded (None for the text of a
    larger file, which the validator reports as not checked); a file that cannot be read (gone
    again, or a link outside) is left out. Blocks: call in a thread."""
    texts: list[tuple[str, str | None]] = []
    for path in paths:
        try:
            with open(resolve_inside(root, path), "rb") as handle:
                raw = handle.read(MAX_VALIDATED_BYTES + 1)
        except (BoundaryError, OSError):
            continue
        texts.append((path, raw.decode("utf-8", errors="replace") if len(raw) <= MAX_VALIDATED_BYTES else None))
    return texts


def project_checks(root: str, limits: dict[str, Any]) -> tuple[list[Check | TotalJsCheck], list[str]]:
    """The registry of the project's checks: the declared ones (read_checks), then the Total.js
    check when the project is a Total.js one and the `forge` setting is on; and the problems
    of its checks file. Blocks (reads files): call in a thread."""
    declared, problems = read_checks(root)
    checks: list[Check | TotalJsCheck] = list(declared)
    if limits.get("forge", True):
        from totem.workspace import totaljs
        detection = totaljs.detect(root)
        if detection.totaljs:
            checks.append(TotalJsCheck(detection.version))
    return checks, problems


def read_checks(root: str) -> tuple[list[Check], list[str]]:
    """The project's checks and the problems of its file (each in words; a bad entry is left
    out, the others kept). No file: no checks. Blocks (reads a file): call in a thread."""
    try:
        path = resolve_inside(root, CHECKS_FILE)
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CHECKS_BYTES + 1)
    except (BoundaryError, FileNotFoundError, NotADirectoryError):
        return [], []
    except OSError as exc:
        return [], [f"{CHECKS_FILE} cannot be read: {exc.strerror}"]
    if len(raw) > MAX_CHECKS_BYTES:
        return [], [f"{CHECKS_FILE} is larger than {MAX_CHECKS_BYTES // 1024} KB"]
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return [], [f"{CHECKS_FILE} is not JSON: {exc}"]
    entries = document.get("checks") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        return [], [f'{CHECKS_FILE} must be {{"checks": [{{"name", "files", "command"}}, ...]}}']
    checks: list[Check] = []
    problems: list[str] = []
    for index, entry in enumerate(entries[:MAX_CHECKS]):
        check, problem = _check_of(entry)
        if problem:
            problems.append(f"{CHECKS_FILE} checks[{index}]: {problem}")
        elif check is not None:
            checks.append(check)
    if len(entries) > MAX_CHECKS:
        problems.append(f"{CHECKS_FILE}: only the first {MAX_CHECKS} checks are run")
    return checks, problems


def _check_of(entry: Any) -> tuple[Check | None, str | None]:
    if not isinstance(entry, dict):
        return None, "must be an object"
    unknown = sorted(set(entry) - {"name", "files", "command", "timeout"})
    if unknown:
        return None, f"unknown key {unknown[0]}"
    texts: dict[str, str] = {}
    for key in ("name", "files", "command"):
        value = entry.get(key)
        if not isinstance(value, str) or not value.strip() or "\0" in value or "\n" in value:
            return None, f"{key} must be one line of text"
        texts[key] = value
    timeout = entry.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)
                                or not 1 <= timeout <= MAX_TIMEOUT_S):
        return None, f"timeout must be whole seconds from 1 to {MAX_TIMEOUT_S}"
    return Check(texts["name"].strip(), texts["files"].strip(), texts["command"].strip(), timeout), None


def edited_paths(parts: list[OpenPart]) -> list[str]:
    """The files the step's write, edit and patch calls changed (done), in order, once each."""
    found: dict[str, None] = {}
    for part in parts:
        data = part.data
        if data.get("tool") in EDITING_TOOLS and "output" in data and "error" not in data:
            for subject in data.get("subjects") or ():
                if isinstance(subject, str):
                    found.setdefault(subject, None)
    return list(found)


class ProjectChecks:
    """Runs a project's checks after the edits of a step."""

    def __init__(self, calls: ToolCalls, recorder: Recorder):
        self.calls = calls
        self.recorder = recorder

    async def after_step(self, run: Run, parts: list[OpenPart]) -> None:
        """Each check whose files the step changed, run once over them as a bash call of the
        step's answer (the gate, the sandbox, the caps); its part marked `check`."""
        changed = [path for path in edited_paths(parts)
                   if os.path.isfile(os.path.join(run.request.asker.root, path))]  # a deleted file is not checked
        if not changed or not parts:
            return
        request = run.request
        root = request.asker.root
        checks, problems = await asyncio.to_thread(project_checks, root, request.limits)
        first = parts[0].part
        for problem in problems:
            await self.recorder.add_whole(request.sessionid, first["messageid"], "validation", "", "done",
                                          data={"kind": "check", "blocking": False, "problems": [
                                              {"rule": RULE_CHECKS_FILE, "severity": "warning", "message": problem}]})
        for number, check in enumerate(checks):
            files = check.matching(changed)[:MAX_FILES_PER_CHECK]
            if not files:
                continue
            if isinstance(check, TotalJsCheck):
                found = await check.run(root, files)
                await self.recorder.add_whole(request.sessionid, first["messageid"], "validation", "", "done",
                                              data={"kind": "check", "check": check.name, "files": files} | found)
                continue
            command = check.command_for(files)
            callid = f"check-{first['messageid']}-{number}"
            arguments: dict[str, Any] = {"command": command,
                                         "description": f"the project's check {check.name} after the edits"}
            if check.timeout:
                arguments["timeout"] = check.timeout
            part = await self.recorder.open(request.sessionid, first["messageid"], "tool", status="pending",
                                            data={"callid": callid, "tool": "bash", "arguments": "",
                                                  "check": check.name, "files": files})
            await self.calls.run(request.asker, part, ToolCall(0, callid, "bash", json.dumps(arguments)),
                                 request.limits, run.tools)
