"""The escape suite: what an approved command can reach, tried as a hostile model would.

End to end through the real server (`python totem.py --config <file>`, a process of its own:
several cases kill or stop it) and the scripted model, the person answers "once" to every
question, as after an approval or a parser mistake. Over a hundred hostile bash commands (some
as background jobs) try every way out that tests/escape/cases.py lists by class: writes outside
the project (absolute paths, `..`, symlinks and hard links made in the project, renames,
/proc/self/cwd and /proc/self/root, /tmp, /dev/shm), ~/.bashrc, another project's files, git
hooks and config, `.totem/`, the person's secret places, Totem's config, data folder and key,
the server's /proc entries and memory (ptrace, gdb, strace), Totem's API over every loopback
and other address with and without the token, the machine's unix sockets, signals to the
server and to the person's programs, daemons that would outlive the command, and bounded fork
bombs. After each command a probe looks at the real world, never at the command's exit code.

Each account (root, and uid 65534 through setpriv when the test runs as root; the current user
alone otherwise) runs the cases twice: the control, with `sandbox = off`, where every case must
escape, so that the suite can fail; a control case that cannot escape even unconfined is
printed, not counted; then with the sandbox (the default configuration), where none may escape:
a case that does fails the test with its name and the evidence, and the run prints
`N hostile commands, 0 escapes` (N: the cases that escaped in the control). A case the sandbox
itself declares still open (`sandbox.STILL_OPEN`: UDP and pathname unix sockets that are not
hidden, a hard link to a secret file) is printed with its outcome, not counted. Where the
kernel cannot sandbox (the sandbox's own probe, run as the account, says what is missing), the
confined run of that account skips and says why. Ordinary commands (tests/escape/cases.py
`works`) must work in both runs.

`TOTEM_ESCAPE_LANDLOCK=1` also runs the confined cases with Landlock alone (bubblewrap looked
for where there is none), as on a machine without it. The figures are printed at the end of the
pytest output (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
import subprocess
import unittest

import pytest

from tests.escape.cases import DEFAULT_PROCESS_LIMIT, hostile_cases
from tests.escape.harness import Run
from tests.escape.world import ROOT, SERVER_PATH, current_account, ordinary_account
from tests.model_server import ScriptedModel
from totem.config import KEYS

# The issue asks for at least this many hostile commands that escape without the sandbox.
MIN_HOSTILE = 100
FIGURES: list[str] = []
# The control run of each account, kept for its confined run (which counts what escaped there).
CONTROLS: dict[str, Run] = {}


def sandbox_module():
    """totem.security.sandbox, or None before it exists."""
    if importlib.util.find_spec("totem.security.sandbox") is None:
        return None
    return importlib.import_module("totem.security.sandbox")


# The sandbox's own probe, run as the account the server runs as: what it says is missing.
PROBE = """
import asyncio, json, sys
from totem.security import sandbox
kernel = asyncio.run(sandbox.probe(*sys.argv[1:]))
print(json.dumps(sandbox.missing_protections(kernel, True)))
"""
# The sandbox's `sandboxpath` for a run with Landlock alone: a folder without bwrap.
NO_BWRAP = os.path.dirname(os.path.abspath(__file__))
LANDLOCK_ALONE = "TOTEM_ESCAPE_LANDLOCK"


def sandbox_missing(account, search_path: str | None = None) -> str | None:
    """Why commands of a server run as `account` cannot be wholly confined here (None: they
    can), by the sandbox's own probe (bwrap looked for in `search_path`, else its default)."""
    if sandbox_module() is None:
        return "totem.security.sandbox does not exist yet: only the control runs"
    env = {"PATH": SERVER_PATH, "HOME": "/", **dict(account.env)}
    done = subprocess.run([*account.prefix, account.python, "-c", PROBE, *([search_path] if search_path else [])],
                          cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return f"the sandbox's probe failed as {account.label}: {done.stderr.strip()[-300:]}"
    missing = json.loads(done.stdout)
    if missing:
        return f"as {account.label} the kernel cannot sandbox wholly: " + "; ".join(
            f"{name}: {why}" for name, why in missing.items())
    return None


def process_limit() -> int:
    module = sandbox_module()
    return getattr(module, "MAX_PROCESSES", DEFAULT_PROCESS_LIMIT) if module else DEFAULT_PROCESS_LIMIT


def settings(confined: bool) -> dict[str, str]:
    values = {"steps": "1000"}
    if not confined and any(key.name == "sandbox" for key in KEYS):
        values["sandbox"] = "off"
    return values


def declared_open(case) -> str | None:
    """The entry of sandbox.STILL_OPEN that names what the case tries (None: the sandbox claims
    to close it)."""
    module = sandbox_module()
    if not case.still_open or module is None:
        return None
    return next((entry for entry in getattr(module, "STILL_OPEN", ()) if case.still_open in entry), None)


def counted(run: Run, control: Run) -> list:
    """The cases of a confined run that count: they escaped in the control and the sandbox does
    not say they stay open."""
    proven = {seen.case.name for seen in control.escaped()}
    return [seen for seen in run.seen if seen.case.name in proven and not declared_open(seen.case)]


def failures(run: Run) -> list:
    """The escapes of a confined run that the sandbox does not declare open."""
    return [seen for seen in run.escaped() if not declared_open(seen.case)]


def report(run: Run, control: Run | None = None) -> list[str]:
    """The lines a run prints: the count, and for the control what could not escape."""
    lines = [f"escape suite, {run.label}: {run.starts} server starts ({', '.join(run.phases)}), "
             f"{run.asks} questions answered once"]
    broken = [seen.case.name for seen in run.works if not seen.escaped]
    if broken:
        lines.append(f"  ordinary commands that failed: {broken}")
    for case, why in run.not_applicable:
        lines.append(f"  not applicable: {case.klass}: {case.name} ({why})")
    lines += [f"  {seen.case.klass}: {seen.case.name}: {seen.note}" for seen in run.seen if seen.note]
    if control is None:
        lines += [f"  cannot escape even unconfined (not counted): {seen.case.klass}: {seen.case.name}"
                  for seen in run.held()]
        lines.append(f"{len(run.escaped())} of {len(run.seen)} hostile commands escaped")
        return lines
    for seen in run.seen:
        entry = declared_open(seen.case)
        if entry:
            lines.append(f"  still open, as the sandbox says ({entry}; not counted): {seen.case.klass}: "
                         f"{seen.case.name}: {'escaped: ' + str(seen.evidence) if seen.escaped else 'held'}")
    proven = {seen.case.name for seen in control.escaped()}
    lines += [f"  cannot escape even unconfined (not counted): {seen.case.klass}: {seen.case.name}"
              for seen in run.seen if seen.case.name not in proven]
    lines.append(f"{len(counted(run, control))} hostile commands, {len(failures(run))} escapes")
    return lines


# One worker takes the whole class (make test runs pytest-xdist with --dist loadgroup): the
# confined runs compare with the control runs, made once per process.
@pytest.mark.xdist_group("escape")
class EscapeTest(unittest.IsolatedAsyncioTestCase):
    """Each mode for both accounts, one account after the other (run side by side on two cores
    they took longer than in turn)."""

    async def asyncSetUp(self):
        # Hundreds of steps: asyncio's debug mode would take most of the time.
        asyncio.get_running_loop().set_debug(False)
        self.accounts = [current_account()]
        ordinary = await asyncio.to_thread(ordinary_account)
        if isinstance(ordinary, str):
            FIGURES.append(f"escape suite: no run as an ordinary user: {ordinary}")
        else:
            self.accounts.append(ordinary)

    async def run_all(self, confined: bool, accounts: list, extra: dict | None = None, flavour: str = ""
                      ) -> list[Run]:
        runs = []
        async with ScriptedModel() as model:
            for account in accounts:
                runs.append(await Run(account, confined, model, hostile_cases(process_limit()), process_limit(),
                                      settings(confined) | (extra or {}), flavour).go())
        return runs

    async def controls(self) -> list[Run]:
        """The control run of each account (made once, kept for the confined run)."""
        missing = [account for account in self.accounts if account.label not in CONTROLS]
        if missing:
            for run in await self.run_all(False, missing):
                CONTROLS[run.account.label] = run
                FIGURES.extend(report(run))
                print("\n".join(report(run)))
        return [CONTROLS[account.label] for account in self.accounts]

    async def test_control_every_case_escapes(self):
        """Without the sandbox (today's code, or sandbox = off), as root and as uid 65534, the
        hostile commands escape: at least MIN_HOSTILE of them, each shown by its probe; and the
        ordinary commands work."""
        for run in await self.controls():
            broken = [seen.case.name for seen in run.works if not seen.escaped]
            self.assertEqual(broken, [], f"{run.label}: ordinary commands failed")
            self.assertGreaterEqual(len(run.escaped()), MIN_HOSTILE, "\n".join(report(run)))

    async def test_sandbox_nothing_escapes(self):
        """With the sandbox (the default configuration), as root and as uid 65534, none of the
        hostile commands escapes, and the ordinary commands still work."""
        await self.check_confined()

    @unittest.skipUnless(os.environ.get(LANDLOCK_ALONE), f"{LANDLOCK_ALONE}=1 runs it (a minute more)")
    async def test_landlock_alone_nothing_escapes(self):
        """The same with Landlock alone (bwrap looked for where there is none), as on a machine
        without bubblewrap."""
        await self.check_confined({"sandboxpath": NO_BWRAP}, "Landlock alone")

    async def check_confined(self, extra: dict | None = None, flavour: str = "") -> None:
        controls = await self.controls()
        confinable, skipped = [], []
        search_path = (extra or {}).get("sandboxpath")
        for account in self.accounts:
            missing = await asyncio.to_thread(sandbox_missing, account, search_path)
            if missing:
                skipped.append(missing)
                FIGURES.append(f"escape suite, {account.label}, confined: skipped: {missing}")
            else:
                confinable.append(account)
        if not confinable:
            self.skipTest("; ".join(skipped))
        runs = await self.run_all(True, confinable, extra, flavour)
        controls = [CONTROLS[account.label] for account in confinable]
        problems = []
        for run, control in zip(runs, controls, strict=True):
            lines = report(run, control)
            FIGURES.extend(lines)
            print("\n".join(lines))
            problems += [f"{run.label}: {seen.case.klass}: {seen.case.name}: {seen.evidence}\n"
                         f"    command: {seen.case.command[:300]}" for seen in failures(run)]
            problems += [f"{run.label}: ordinary work failed: {seen.case.name}: {seen.output[:300]!r}"
                         for seen in run.works if not seen.escaped]
            if len(counted(run, control)) < MIN_HOSTILE:
                problems.append(f"{run.label}: only {len(counted(run, control))} hostile commands escape unconfined")
        self.assertEqual(problems, [], "commands escaped the sandbox, or it broke ordinary work:\n"
                         + "\n".join(problems))
