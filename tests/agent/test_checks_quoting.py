"""A check's `{files}` against the real shells: each file reaches the command as one argument,
byte for byte, whatever its name, and never as an option.

The model names the files a step changed, so their names are hostile input: thousands of names
made of the shell's quotes, expansions, operators, globs, blanks and newlines (and names that
begin with `-`) are put into `printf '%s\\0' {files}`, which bash and dash run with only their
builtins (PATH names nothing): what printf prints must be the names themselves, in order, a
name that begins with `-` as ./NAME. The control: the same names joined without quoting come
out otherwise, so the comparison can fail.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess

import pytest

from totem.agent.checks import Check

NAMES = int(os.environ.get("TOTEM_CHECK_NAMES", "2000"))
PER_LINE = 40  # names per command line: one shell run judges many
SHELLS = [path for path in map(shutil.which, ("bash", "dash")) if path]
PIECES = ("'", '"', "$", "`", "\\", ";", "&", "|", "*", "?", "[", "]", "{", "}", "(", ")", "~", "!", "#", " ",
          "\t", "\n", "-", "--", "=", "<", ">", "$(x)", "${x}", "$'a'", "%", "é", "a", "b", ".", "/", "*.py")


def hostile_names(count: int, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    names = []
    for _ in range(count):
        name = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6))) + rng.choice((".py", ".js", ""))
        names.append(name.lstrip("/") or "a")  # a changed file's path is relative to the project
    return names


def printed(shell: str, command: str, cwd: str) -> list[str]:
    done = subprocess.run([shell, "-c", command], cwd=cwd, env={"PATH": "/nonexistent"}, capture_output=True,
                          timeout=30, stdin=subprocess.DEVNULL)
    return done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


@pytest.mark.skipif(not SHELLS, reason="neither bash nor dash is installed")
def test_every_file_is_one_argument_and_none_an_option(tmp_path):
    check = Check("echo", "*", "printf '%s\\0' {files}")
    names = hostile_names(NAMES)
    expected = ["./" + name if name.startswith("-") else name for name in names]
    assert any(name.startswith("-") for name in names)
    work = tmp_path / "work"
    work.mkdir()
    for shell in SHELLS:
        for start in range(0, len(names), PER_LINE):
            batch = names[start:start + PER_LINE]
            got = printed(shell, check.command_for(batch), str(work))
            assert got == expected[start:start + PER_LINE], f"{shell}: {check.command_for(batch)!r}"
        # The control: unquoted, the same names do not come out as they went in.
        unquoted = check.command.replace("{files}", " ".join(names[:PER_LINE]))
        control = tmp_path / f"control-{os.path.basename(shell)}"  # where its redirections may write
        control.mkdir()
        assert printed(shell, unquoted, str(control)) != names[:PER_LINE]
    assert os.listdir(work) == []  # and nothing that the names say was done
