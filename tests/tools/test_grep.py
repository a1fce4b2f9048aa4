"""The grep tool: output, caps, skips, refusals, option injection, and rg/Python parity.

Every behaviour test runs with both engines; the rg half is skipped only when ripgrep is not
installed. The parity tests run both on the same trees and compare the answers byte for byte.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess

import pytest

from tests.tools.trees import PLAIN_FILES, SECRET_FILES, project, write
from totem.security import boundary
from totem.tools import ToolContext, ToolError, grep as grep_module
from totem.tools.grep import GrepTool, Query, Required, env_ignore_rules, rg_arguments

RG = shutil.which("rg")
ENGINES = [
    pytest.param("rg", marks=pytest.mark.skipif(
        RG is None, reason="ripgrep (rg) is not on PATH; install it (apt-get install -y ripgrep) "
                           "to test the rg engine")),
    "python",
]
needs_rg = pytest.mark.skipif(RG is None, reason="ripgrep (rg) is not on PATH; parity needs both engines")


def grep(engine: str, root: str, **args):
    return asyncio.run(GrepTool(engine).run(args, ToolContext(root, "s1")))


def body(engine: str, root: str, **args) -> list[str]:
    """The match lines only (without the count line and the note)."""
    lines = grep(engine, root, **args).output.split("\n")
    return [line for line in lines[1:] if not line.startswith("(")]


def refusal(engine: str, root: str, **args) -> str:
    with pytest.raises(ToolError) as caught:
        grep(engine, root, **args)
    return str(caught.value)


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_output_sorted_with_count(engine, tmp_path):
    """Matches come as path:line: text, sorted by path then line, after a count line."""
    root = project(tmp_path)
    write(root, "src/b.py", "x = 1\ndef todo():\n    pass  # TODO\n")
    write(root, "src/a.py", "# TODO first\nok\n")
    write(root, "README.md", "nothing\n")
    result = grep(engine, root, pattern="TODO|todo")
    assert result.output == ("3 matching lines in 2 files:\n"
                             "src/a.py:1: # TODO first\n"
                             "src/b.py:2: def todo():\n"
                             "src/b.py:3:     pass  # TODO")
    assert result.title == "TODO|todo in . (3 matches)"
    assert result.data == {"matches": 3, "files": 2, "shown": 3, "truncated": False, "linked": 0,
                           "engine": engine}


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_no_match(engine, tmp_path):
    """No match is an answer, not an error."""
    root = project(tmp_path)
    write(root, "a.txt", "hello\n")
    result = grep(engine, root, pattern="absent")
    assert result.output == "No matches for 'absent' in .."
    assert result.data["matches"] == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_include_and_ignore_case(engine, tmp_path):
    """include filters file names (with braces); ignore_case folds case."""
    root = project(tmp_path)
    for name in ("a.ts", "b.tsx", "c.js", "deep/d.TS"):
        write(root, name, "Needle\n")
    assert body(engine, root, pattern="needle", include="*.{ts,tsx}") == []
    assert body(engine, root, pattern="needle", include="*.{ts,tsx}", ignore_case=True) == \
        ["a.ts:1: Needle", "b.tsx:1: Needle"]
    assert body(engine, root, pattern="Needle", include="*.[tT][sS]") == ["a.ts:1: Needle", "deep/d.TS:1: Needle"]


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_ignore_case_beyond_ascii(engine, tmp_path):
    """ignore_case folds Unicode case: `k` finds the Kelvin sign and `s` the long s, also in a file
    that holds the ASCII spelling nowhere."""
    root = project(tmp_path)
    write(root, "units.txt", "5 \u212a\n")
    write(root, "old.txt", "\u017ftop\n")
    write(root, "plain.txt", "nothing here\n")
    assert body(engine, root, pattern="5 k", ignore_case=True) == ["units.txt:1: 5 \u212a"]
    assert body(engine, root, pattern="STOP", ignore_case=True) == ["old.txt:1: \u017ftop"]
    assert body(engine, root, pattern="(?i)stop") == ["old.txt:1: \u017ftop"]
    assert body(engine, root, pattern="stop") == []


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_path_file_and_folder(engine, tmp_path):
    """path narrows the search to a folder or one file."""
    root = project(tmp_path)
    write(root, "src/a.py", "hit\n")
    write(root, "lib/b.py", "hit\n")
    assert body(engine, root, pattern="hit", path="src") == ["src/a.py:1: hit"]
    assert body(engine, root, pattern="hit", path="lib/b.py") == ["lib/b.py:1: hit"]
    assert body(engine, root, pattern="hit", path=os.path.join(root, "lib")) == ["lib/b.py:1: hit"]


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_cap_shown_matches(engine, tmp_path):
    """Past 200 matching lines the rest is counted and a note says how to narrow."""
    root = project(tmp_path)
    write(root, "many.txt", "hit\n" * 250)
    result = grep(engine, root, pattern="hit")
    lines = result.output.split("\n")
    assert lines[0] == "250 matching lines in 1 file:"
    assert len(lines) == 1 + grep_module.MAX_MATCHES_SHOWN + 1
    assert lines[-2] == "many.txt:200: hit"
    assert lines[-1] == ("(showing 200 of 250 matching lines; narrow the pattern, path or include "
                         "to see the rest)")
    assert result.data["truncated"] is True


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_count_cap_says_more_than(engine, tmp_path):
    """Past the counting cap the search stops and says "more than"."""
    root = project(tmp_path)
    write(root, "a.txt", "hit\n" * 700)
    write(root, "b.txt", "hit\n" * 700)
    lines = grep(engine, root, pattern="hit").output.split("\n")
    assert lines[0] == "More than 1000 matching lines in 2 files:"
    assert lines[-1].startswith("(showing 200 of more than 1000 matching lines;")


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_long_line_cut(engine, tmp_path):
    """A matching line over 2000 characters is cut with a marker."""
    root = project(tmp_path)
    write(root, "min.js", "x" * 3000 + "needle\n")
    assert body(engine, root, pattern="needle") == ["min.js:1: " + "x" * 2000 + "… [line cut: 3006 chars]"]


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_skips_git_env_binary_large(engine, tmp_path):
    """.git, protected .env files, binaries and files over the cap are not searched."""
    root = project(tmp_path)
    write(root, ".git/config", "secret\n")
    write(root, "sub/.git", "gitdir: secret\n")
    write(root, ".env", "secret\n")
    write(root, "app/.env.local", "secret\n")
    write(root, ".env.example", "secret=\n")
    write(root, "app/.env.prod.template", "secret=\n")  # only the exact examples are searched
    write(root, "tools/.env/lib/site.py", "secret = 1\n")  # below a folder named .env
    write(root, "tools/.venv/lib/site.py", "secret = 1\n")
    write(root, "logo.png", b"secret\x00\x01")
    write(root, "late.bin", b"secret\n" * 20_000 + b"\x00")
    write(root, "big.txt", b"secret\n" + b"x" * grep_module.MAX_FILE_BYTES)
    write(root, ".hidden.txt", "secret\n")
    assert body(engine, root, pattern="secret") == [
        ".env.example:1: secret=", ".hidden.txt:1: secret", "tools/.venv/lib/site.py:1: secret = 1"]


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_explicit_secret_file_not_searched(engine, tmp_path):
    """A protected .env file as the explicit path, also through a link, is not searched."""
    root = project(tmp_path)
    write(root, "config/.env.production", "API_KEY=abc\n")
    os.symlink(os.path.join(root, "config", ".env.production"), os.path.join(root, "settings"))
    for path in ("config/.env.production", "settings"):
        result = grep(engine, root, pattern="API_KEY", path=path)
        assert result.output == ("config/.env.production was not searched: search skips secret "
                                 "files (.env, .env.*, *.env, .envrc, their backups, files in "
                                 ".env.d). Use read on it to ask the user for permission to see it.")
        assert "abc" not in result.output
    assert body(engine, root, pattern="API_KEY", path="config") == []


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_skips_every_secret_form(engine, tmp_path):
    """Every protected form (any case, *.env, .envrc, editor backups, files below .env.d or .env
    folders) is skipped, with and without ignore_case and include; the look-alikes are searched."""
    root = project(tmp_path)
    for name in SECRET_FILES:
        write(root, name, "TOKEN=s3cr3t\n")
    for name in PLAIN_FILES:
        write(root, name, "TOKEN=plain\n")
    expected = sorted(f"{name}:1: TOKEN=plain" for name in PLAIN_FILES)
    assert body(engine, root, pattern="TOKEN") == expected
    assert body(engine, root, pattern="token", ignore_case=True) == expected
    assert body(engine, root, pattern="s3cr3t") == []
    assert body(engine, root, pattern="s3cr3t", include="*env*") == []
    assert body(engine, root, pattern="s3cr3t", include="*") == []
    for folder in ("app", "conf", "deploy", "venv", "tools", "cfg"):
        assert "s3cr3t" not in grep(engine, root, pattern="TOKEN", path=folder).output


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_explicit_secret_forms_not_searched(engine, tmp_path):
    """Each protected form as the explicit path, and a folder of protected files, is not searched."""
    root = project(tmp_path)
    for name in SECRET_FILES:
        write(root, name, "TOKEN=s3cr3t\n")
    for path in (*SECRET_FILES, ".env.d", "conf/.env.d", "conf/.env.d/sub", "venv/.env/lib",
                 "tools/.ENV"):
        result = grep(engine, root, pattern="TOKEN", path=path)
        assert result.output.startswith(f"{path} was not searched: search skips secret files"), path
        assert result.data == {"matches": 0, "skipped": True}


@needs_rg
def test_grep_rg_ignore_rules_agree_with_boundary(tmp_path):
    """ripgrep, given the ignore rules written from boundary's table, skips exactly the files that
    boundary.is_protected_env protects: every name with every backup prefix and suffix, in
    three cases, and files below look-alike folders."""
    root = project(tmp_path)
    cores = [".env", ".envrc", ".env.local", ".env.example", ".env.sample", ".env.template",
             ".env.", "prod.env", ".prod.env", "x.environment", "env", ".envoy", "a.txt", ".venv",
             "my.env.txt", ".env.example.bak", ".env-prod", ".env_local", ".env@x", ".envs", ".env2",
             ".env-example"]
    affixes = [("", ""), *((p, "") for p in (*boundary.ENV_BACKUP_PREFIXES, "##")),
               *(("", s) for s in (*boundary.ENV_BACKUP_SUFFIXES, "~~", ".txt")), ("#", "#"),
               (".#", "~")]
    names = {prefix + core + suffix for core in cores for prefix, suffix in affixes}
    names |= {name.upper() for name in names} | {name.title() for name in names}
    paths = {f"files/{name}" for name in names}
    for folder in (".env", ".ENV", ".env.d", ".Env.D", ".env.local", "prod.env", ".envrc",
                   ".env.example", ".env.dd", "x"):
        paths |= {f"dirs/{folder}/a.txt", f"dirs/{folder}/sub/b.txt"}
    for path in paths:
        write(root, path, "x\n")
    ignore = tmp_path / "rules"
    ignore.write_text(env_ignore_rules())
    listed = subprocess.run([RG, "--files", "--no-config", "--no-ignore", "--hidden", "--ignore-file",
                             str(ignore), root], capture_output=True, text=True, check=True).stdout
    searched = {os.path.relpath(path, root) for path in listed.splitlines()}
    assert {path for path in paths if path not in searched} == \
        {path for path in paths if boundary.is_protected_env(path)}
    assert len(searched) > len(paths) / 4


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_explicit_skipped_files(engine, tmp_path):
    """An explicit binary, oversized or .git path gets a message instead of results."""
    root = project(tmp_path)
    write(root, "logo.png", b"PNG\x00data")
    path = write(root, "huge.log", b"")
    os.truncate(path, grep_module.MAX_FILE_BYTES + 1)
    write(root, ".git/HEAD", "ref: refs/heads/main\n")
    assert grep(engine, root, pattern="PNG", path="logo.png").output == \
        "logo.png was not searched: it is a binary file (8 bytes)."
    assert grep(engine, root, pattern="x", path="huge.log").output.startswith(
        f"huge.log was not searched: it is {grep_module.MAX_FILE_BYTES + 1} bytes")
    assert grep(engine, root, pattern="ref", path=".git").output == \
        ".git was not searched: the search tools skip .git."
    assert grep(engine, root, pattern="ref", path=".git/HEAD").output.startswith(".git/HEAD was not searched")


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_symlinks_not_followed(engine, tmp_path):
    """Links met in the tree are skipped, whether they point inside or outside."""
    root = project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("needle outside\n")
    write(root, "real.txt", "needle inside\n")
    os.symlink(outside, os.path.join(root, "ext"))
    os.symlink(outside / "secret.txt", os.path.join(root, "leak.txt"))
    os.symlink(os.path.join(root, "real.txt"), os.path.join(root, "alias.txt"))
    assert body(engine, root, pattern="needle") == ["real.txt:1: needle inside"]


def linked_tree(tmp_path) -> str:
    """A project with a hard link to a secret outside it, two names of one file inside it, a link
    to a linked file, and plain files."""
    root = project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("needle OUTSIDE-SECRET\n")
    os.link(outside / "secret.txt", os.path.join(root, "notes.txt"))
    write(root, "src/a.txt", "needle plain\n")
    write(root, "src/b.txt", "needle twice\n")
    os.link(os.path.join(root, "src", "b.txt"), os.path.join(root, "src", "c.txt"))
    os.symlink(os.path.join(root, "notes.txt"), os.path.join(root, "alias.txt"))
    os.makedirs(os.path.join(root, "empty", "sub"))  # a folder has several links: not a file
    return root


LINKED_NOTE = ("(3 files with more than one hard link were not searched, since another name of "
               "such a file may be outside the project or a secret file: notes.txt, src/b.txt, "
               "src/c.txt. Use read on one to ask the user for permission to see it.)")


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_skips_hard_linked_files(engine, tmp_path):
    """A regular file with more than one hard link is never searched; the answer names the
    skipped files whatever the pattern (their contents decide nothing), and folders do not count."""
    root = linked_tree(tmp_path)
    result = grep(engine, root, pattern="needle")
    assert result.output == "1 matching line in 1 file:\nsrc/a.txt:1: needle plain\n" + LINKED_NOTE
    assert result.data["linked"] == 3
    for pattern in ("OUTSIDE-SECRET", "twice", "absent"):  # no oracle: the same note every time
        result = grep(engine, root, pattern=pattern)
        assert result.output == f"No matches for {pattern!r} in ..\n" + LINKED_NOTE
        assert "OUTSIDE-SECRET" not in result.output.replace(repr(pattern), "")
    assert grep(engine, root, pattern="needle", path="src").output == (
        "1 matching line in 1 file:\nsrc/a.txt:1: needle plain\n(2 files with more than one hard "
        "link were not searched, since another name of such a file may be outside the project or "
        "a secret file: src/b.txt, src/c.txt. Use read on one to ask the user for permission to "
        "see it.)")
    assert grep(engine, root, pattern="needle", include="a.txt").output == \
        "1 matching line in 1 file:\nsrc/a.txt:1: needle plain"


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_explicit_hard_linked_file_not_searched(engine, tmp_path):
    """A hard-linked file as the explicit path, also through a symbolic link, is not searched."""
    root = linked_tree(tmp_path)
    for path, shown in (("notes.txt", "notes.txt"), ("alias.txt", "notes.txt"), ("src/c.txt", "src/c.txt")):
        result = grep(engine, root, pattern="needle", path=path)
        assert result.output == (f"{shown} was not searched: it has 2 hard links, and another name "
                                 "of it may be outside the project or a secret file. Use read on "
                                 "it to ask the user for permission to see it.")
        assert result.data == {"matches": 0, "skipped": True}


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_many_hard_linked_files_named_up_to_cap(engine, tmp_path):
    """Past MAX_LINKED_SHOWN skipped files the answer counts the rest."""
    root = project(tmp_path)
    write(root, "one.txt", "x\n")
    for i in range(grep_module.MAX_LINKED_SHOWN + 4):
        os.link(os.path.join(root, "one.txt"), os.path.join(root, f"l{i:02}.txt"))
    result = grep(engine, root, pattern="x")
    assert result.data["linked"] == grep_module.MAX_LINKED_SHOWN + 5
    assert result.output.endswith(", l19.txt and 5 more. Use read on one to ask the user for "
                                  "permission to see it.)")


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_path_outside_refused(engine, tmp_path):
    """A path outside the project (.., absolute, linked folder or file) is refused."""
    root = project(tmp_path)
    (tmp_path / "outside.txt").write_text("needle\n")
    os.symlink(tmp_path, os.path.join(root, "up"))
    os.symlink(tmp_path / "outside.txt", os.path.join(root, "o.txt"))
    for path in ("..", "../outside.txt", str(tmp_path / "outside.txt"), "up", "up/outside.txt", "o.txt"):
        assert refusal(engine, root, pattern="needle", path=path) == f"{path} is outside the project"


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_tilde_not_home(engine, tmp_path, monkeypatch):
    """~ is not expanded: it names a missing folder inside the project."""
    root = project(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("needle\n")
    monkeypatch.setenv("HOME", str(home))
    assert refusal(engine, root, pattern="needle", path="~") == "~ is not expanded here; give a path relative to the project"


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_missing_and_special_paths(engine, tmp_path):
    """A missing path or a FIFO is refused."""
    root = project(tmp_path)
    os.mkfifo(os.path.join(root, "pipe"))
    assert refusal(engine, root, pattern="x", path="nope") == "not found: nope"
    assert refusal(engine, root, pattern="x", path="pipe") == "pipe is not a regular file or folder; not searched"


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_invalid_regex(engine, tmp_path):
    """An invalid regex is refused with the regex error."""
    root = project(tmp_path)
    write(root, "a.txt", "x\n")
    message = refusal(engine, root, pattern="(unclosed")
    assert message.startswith("invalid regex '(unclosed': ")
    assert "unclosed group" in message or "missing )" in message


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("pattern", ["--pre=sh", "-f", "--files", "-e", "--", "-v"])
def test_grep_option_like_pattern_is_text(engine, pattern, tmp_path):
    """A pattern that looks like an option is searched as text, never taken as one."""
    root = project(tmp_path)
    write(root, "opts.txt", "--pre=sh\n-f\n--files\n-e\n--\n-v\nplain\n")
    write(root, "sh", "#!/bin/sh\necho pwned\n")
    lines = body(engine, root, pattern=pattern)
    assert lines and all(pattern in line for line in lines)
    assert all("pwned" not in line and "plain" not in line for line in lines)


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_nul_in_arguments_refused(engine, tmp_path):
    """A NUL byte in the pattern, the include or the path is refused."""
    root = project(tmp_path)
    assert refusal(engine, root, pattern="a\x00b") == "the pattern contains a NUL byte"
    assert refusal(engine, root, pattern="a", include="*\x00") == "the glob contains a NUL byte"
    assert refusal(engine, root, pattern="a", path="x\x00") == "the path contains a NUL byte"


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_include_with_folder_refused(engine, tmp_path):
    """include is a file-name glob: a folder part is refused with a hint."""
    root = project(tmp_path)
    assert refusal(engine, root, pattern="a", include="src/*.py") == \
        "'src/*.py' must match file names only: no '/' or '**' (give the folder as path)"


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_timeout(engine, tmp_path, monkeypatch):
    """A search over the time limit is stopped (rg killed) and reported."""
    root = project(tmp_path)
    write(root, "a.txt", "x\n")
    monkeypatch.setattr(grep_module, "TIMEOUT_SECONDS", 0.0)
    assert refusal(engine, root, pattern="x").startswith("the search took longer than 0 s and was stopped")


def test_grep_python_backtracking_killed(tmp_path, monkeypatch):
    """A regex that would backtrack for hours in Python's re is stopped at the deadline.

    The Python engine runs in a child process: were it a thread, this test would hang (re holds
    the GIL, so not even the event loop's timeout could fire).
    """
    root = project(tmp_path)
    write(root, "a.txt", "a" * 40 + "b\n")
    monkeypatch.setattr(grep_module, "TIMEOUT_SECONDS", 0.5)
    assert refusal("python", root, pattern="(a+)+$") == (
        "the search took longer than 0.5 s and was stopped; narrow the path or use include")


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_cancelled(engine, tmp_path):
    """Cancelling a search ends it without leaking a process or a warning."""
    root = project(tmp_path)
    for i in range(200):
        write(root, f"d{i % 10}/f{i}.txt", "needle\n" * 50)

    async def scenario():
        task = asyncio.ensure_future(GrepTool(engine).run({"pattern": "needle"}, ToolContext(root, "s1")))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


def test_grep_rg_arguments_pattern_after_e():
    """The pattern is always the value of -e and the path always follows --."""
    query = Query("/p", "/p/src", "--pre=sh", include="*.py", ignore_case=True)
    args = rg_arguments(query, "rg", "/tmp/ignore")
    assert args[-4:] == ["-e", "--pre=sh", "--", "/p/src"]
    assert "--no-config" in args and "--ignore-case" in args
    assert args[args.index("--type-add") + 1] == "totem:*.py"


def test_grep_rg_environment_has_no_config(tmp_path, monkeypatch):
    """RIPGREP_CONFIG_PATH is neither read nor passed on: a config cannot add --pre."""
    if RG is None:
        pytest.skip("ripgrep (rg) is not on PATH")
    root = project(tmp_path)
    write(root, "a.txt", "needle\n")
    config = tmp_path / "rgrc"
    config.write_text("--invert-match\n")
    monkeypatch.setenv("RIPGREP_CONFIG_PATH", str(config))
    assert body("rg", root, pattern="needle") == ["a.txt:1: needle"]


REQUIRED_TEXTS = [
    (r"kref_put\(&\w+->refcount", False, Required((b"kref_put(&",))),
    (r"\bpci_fixup\b", False, Required((b"pci_fixup",))),
    ("TODO|FIXME", False, Required((b"FIXME", b"TODO"))),
    ("(foo|bar)+x", False, Required((b"bar", b"foo"))),
    ("ab(cdef)?gh", False, Required((b"ab",))),  # an optional group requires nothing
    ("a[bc]de.fgh", False, Required((b"fgh",))),
    ("x*", False, None),
    ("ab|c*", False, None),  # a branch that requires nothing
    ("(?=abc)", False, None),
    (r"(\w+)\1", False, None),
    ("Hello", True, Required((b"hello",), folded=True)),
    ("(?i)Hello", False, Required((b"hello",), folded=True)),
    ("a(?i:bcd)e", False, Required((b"a",))),
    ("café", False, Required(("café".encode(),))),
    ("café", True, Required((b"caf",), folded=True)),  # Unicode case folding: a non-ASCII letter ends the run
    ("\u017ftop", True, Required((b"top",), folded=True)),
    ("ab\ufffdcd", False, Required((b"ab",))),  # U+FFFD stands for bytes that were not UTF-8
    ("(?x) a b c", False, Required((b"abc",))),
]


@pytest.mark.parametrize("pattern, ignore_case, required", REQUIRED_TEXTS)
def test_grep_required_texts(pattern, ignore_case, required):
    """The texts that a line must hold for the Python engine's pattern to match it: the longest
    literal run of the parse tree, alternatives of a branch, nothing for optional parts; lower
    case when the pattern ignores case."""
    assert grep_module.required_texts(pattern, ignore_case) == required


def test_grep_required_folded_only_for_ascii():
    """Texts of a pattern that ignores case rule out a file of ASCII bytes only."""
    required = Required((b"stop",), folded=True)
    assert required.held_by(b"x = 1\nSTOP\n") and not required.held_by(b"x = 1\ngo\n")
    assert required.held_by("\u017ftop\n".encode())
    assert not Required((b"stop",)).held_by(b"STOP\n")


def test_grep_env_mark_in_every_protected_name():
    """Every name and folder that boundary protects holds ENV_MARK, which lets the Python walk
    check the other paths at a glance."""
    tables = (*boundary.ENV_NAMES, boundary.ENV_PREFIX, boundary.ENV_SUFFIX, *boundary.ENV_FOLDERS)
    assert all(grep_module.ENV_MARK in name for name in tables)
    for path in SECRET_FILES:
        assert boundary.is_protected_env(path) and grep_module.ENV_MARK in path.lower(), path


# rg and Python give the same answer

def parity_tree(root: str) -> None:
    """A tree with the corners where two engines could disagree."""
    write(root, "a.py", "def alpha():\n    return 'Alpha'\n")
    write(root, "a/b.py", "alpha = 1\n")  # "a/b.py" vs "a.py": folder order vs string order
    write(root, "A/upper.py", "ALPHA\n")
    write(root, "src/main.ts", "import { alpha } from './a'\r\nconsole.log(alpha)\r\n")
    write(root, "src/view.tsx", "export const Alpha = () => null")  # no final newline
    write(root, "src/ünï.txt", "alpha ünïcode\n")
    write(root, "bom.txt", "\ufeffalpha with bom\n")
    write(root, "latin1.txt", "alpha caf\xe9\n".encode("latin-1"))
    write(root, "empty.txt", "")
    write(root, "blank_lines.txt", "\n\nalpha\n\n")
    write(root, ".hidden/dot.py", "alpha hidden\n")
    write(root, ".git/objects/x", "alpha in git\n")
    write(root, ".env", "ALPHA=secret\n")
    write(root, "cfg/.env.dev", "alpha=secret\n")
    write(root, "cfg/.env.example", "alpha=\n")
    write(root, "bin/tool", b"alpha\x00\x01\x02")
    write(root, "bin/late", b"alpha\n" * 20_000 + b"\x00")
    write(root, "big/huge.txt", b"alpha\n" + b"x" * grep_module.MAX_FILE_BYTES)
    write(root, "big/exact.txt", b"alpha\n" + b"x" * (grep_module.MAX_FILE_BYTES - 6))
    write(root, "long/min.js", "var a=1;" * 400 + "alpha()\n")
    write(root, os.fsdecode(b"raw/caf\xe9.txt"), "alpha in a latin-1 name\n")
    os.symlink(os.path.join(root, "a.py"), os.path.join(root, "link.py"))
    for i in range(30):
        write(root, f"many/{i:02}.txt", "alpha\n" * 40)  # 1200 lines: the counting cap
    write(root, "envs/prod.env", "alpha=secret\n")
    write(root, "envs/.envrc", "export ALPHA=secret\n")
    write(root, "envs/.env.d/api", "alpha=secret\n")
    write(root, "envs/#.env#", "alpha=secret\n")
    write(root, "linked/one.txt", "alpha linked\n")
    os.link(os.path.join(root, "linked", "one.txt"), os.path.join(root, "linked", "two.py"))
    write(root, "zz/late.txt", "alpha late\n")  # after the cap: its link is still named
    os.link(os.path.join(root, "zz", "late.txt"), os.path.join(root, "zz", "late2.txt"))


PARITY_QUERIES = [
    {"pattern": "alpha"},
    {"pattern": "alpha", "ignore_case": True},
    {"pattern": "^alpha$"},
    {"pattern": "alpha", "include": "*.{py,ts,tsx}"},
    {"pattern": "alpha", "include": "*.[pt]?", "ignore_case": True},
    {"pattern": "alpha", "include": "{a*,*.t[s],[!a-z]*}"},
    {"pattern": r"\balpha\b", "path": "src"},
    {"pattern": "ALPHA|Alpha", "path": "A/upper.py"},
    {"pattern": r"console\.log\(\w+\)$", "path": "src/main.ts"},
    {"pattern": "[^\\x00-\\x7f]", "path": "src"},
    {"pattern": "alpha", "path": "many"},
    {"pattern": "alpha", "path": "cfg"},
    {"pattern": "alpha", "path": "envs"},
    {"pattern": "alpha", "path": "linked"},
    {"pattern": "secret", "ignore_case": True},
    {"pattern": "^$", "path": "blank_lines.txt"},
    {"pattern": "no such text anywhere"},
    {"pattern": r"(?i)ALPHA\b"},
    {"pattern": "alpha|zeta", "path": "src"},
    {"pattern": r"al(p|q)ha+ [a-z]+"},
    {"pattern": "in a latin-1 name"},  # a file whose name is not UTF-8
    {"pattern": "ünï"},
    {"pattern": "ÜNÏCODE", "ignore_case": True},
]


@needs_rg
@pytest.mark.parametrize("query", PARITY_QUERIES, ids=[str(q) for q in PARITY_QUERIES])
def test_grep_parity_rg_and_python(query, tmp_path):
    """ripgrep and the Python walk give the same answer on the same tree."""
    root = project(tmp_path)
    parity_tree(root)
    with_rg = grep("rg", root, **query)
    with_python = grep("python", root, **query)
    assert with_rg.output == with_python.output
    assert with_rg.title == with_python.title
    assert "huge.txt" not in with_rg.output  # one byte over the cap: skipped by both
    assert {**with_rg.data, "engine": ""} == {**with_python.data, "engine": ""}


@needs_rg
def test_grep_parity_count_cap_order(tmp_path):
    """Both engines visit files in the same order, so a search cut at the cap shows the same lines."""
    root = project(tmp_path)
    for name in ("b", "a.x", "a", "a-b", "a_b", "B", "é", "z/y", "a/b/c", "a/b.c"):
        write(root, f"{name}/f.txt" if "/" not in name else f"{name}.txt", "hit\n" * 150)
    with_rg = grep("rg", root, pattern="hit")
    with_python = grep("python", root, pattern="hit")
    assert with_rg.output.split("\n")[0] == "More than 1000 matching lines in 7 files:"
    assert with_rg.output == with_python.output
