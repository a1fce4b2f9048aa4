"""`totem.py run --allow RULE` against the real shells: what it takes for TOOL(PATTERN) is never
a command line.

`--allow` reads its rule as TOOL(PATTERN) when it has that form, else as a bash command line. The
claim that lets it: no line that bash or dash can run has the form, since a word followed by `(`
is a syntax error to both, save where `(` and `)` begin a function definition
(`f() { :; }; npm test`), which the reading leaves a command line. Were the claim wrong, a person
who means to allow a command line would get a rule for another tool instead.

Thousands of lines of that form, generated from tool names, other words, and the punctuation of
function definitions, subshells and lists, are parsed by `bash -n` and `dash -n` (read, never
run): every line that `allow_rule` takes as TOOL(PATTERN) is a syntax error to both shells.
The control: the reading before the exception for function definitions takes some of those same
lines that a shell accepts, so the check can fail.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil

import pytest

from totem.cli import allow_rule

LINES = int(os.environ.get("TOTEM_ALLOW_LINES", "500"))
SEED = int(os.environ.get("TOTEM_ALLOW_SEED", "11"))
SHELLS = [path for path in map(shutil.which, ("bash", "dash")) if path]
NAMES = ("read", "edit", "write", "patch", "bash", "grep", "glob", "list", "fetch", "task", "f", "npm", "a_b",
         "x-y", "Run2")
# Pieces of the inside: words, the parts of function bodies, lists, subshells, quotes, newlines.
PIECES = (" ", "  ", "x", "src/**", "*", ")", "(", ") ", " (", "{", "}", "{ :; }", ";", ":", "&&", "||", "|",
          "&", "\n", "'", '"', "\\", "$", "$(x)", "`x`", "#", "=", "()", "npm test", "echo hi")
# What the reading was before function definitions were set apart: the control.
OLD_TOOL_RULE = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)\((.*)\)", re.DOTALL)


def generated_lines(count: int, seed: int) -> list[str]:
    """NAME(INSIDE) lines: a third are function definitions followed by more (they end in `)`, as
    the form wants), the rest random pieces."""
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        if rng.random() < 0.35:
            body = rng.choice(("{ :; }", "(x)", "{ x; }", "(npm test)", "{ echo hi; }"))
            tail = rng.choice(("", "; (y)", " && (npm test)", "\n(x)", " | (x)", "; x (y)"))
            if not (body + tail).endswith(")"):
                tail += "; (x)"
            line = f"{rng.choice(NAMES)}({rng.choice(('', ' ', '  '))}){rng.choice(('', ' '))}{body}{tail}"
        else:
            line = f"{rng.choice(NAMES)}({''.join(rng.choice(PIECES) for _ in range(rng.randint(0, 8)))})"
        lines.append(line)
    return lines


async def parses(shell: str, line: str, gate: asyncio.Semaphore) -> bool:
    """Whether the shell reads the line without a syntax error (-n: it runs nothing)."""
    async with gate:
        process = await asyncio.create_subprocess_exec(
            shell, "-n", "-c", line, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL, env={"PATH": "/nonexistent"}, cwd="/")
        return await process.wait() == 0


async def accepted_by(shell: str, lines: list[str]) -> set[str]:
    gate = asyncio.Semaphore(8)
    answers = await asyncio.gather(*(parses(shell, line, gate) for line in lines))
    return {line for line, parsed in zip(lines, answers, strict=True) if parsed}


@pytest.mark.skipif(not SHELLS, reason="neither bash nor dash is installed")
def test_a_tool_rule_is_never_a_line_a_shell_can_run():
    lines = generated_lines(LINES, SEED)
    taken_as_tool = [line for line in lines if allow_rule(line) != ("bash", line.strip())]
    old_taken = [line for line in lines if OLD_TOOL_RULE.fullmatch(line.strip())]
    for shell in SHELLS:
        runnable = asyncio.run(accepted_by(shell, sorted(set(old_taken))))
        misread = [line for line in taken_as_tool if line in runnable]
        assert misread == [], f"{shell} runs lines that --allow takes as TOOL(PATTERN): {misread[:5]}"
        # The control: the old reading took lines this shell runs (function definitions).
        assert runnable, f"no generated line is one {shell} runs: the check could not fail"
        assert set(old_taken) >= set(taken_as_tool)
    # A tool rule keeps its tool and its pattern.
    assert allow_rule("edit(src/**)") == ("edit", "src/**")
    assert allow_rule(" Read( docs/* ) ") == ("read", "docs/*")
    assert allow_rule("f() { :; }; npm test") == ("bash", "f() { :; }; npm test")
