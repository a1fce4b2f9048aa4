"""The glob tool and compile_glob: matching, order, caps, skips and refusals."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import random
import re

import pytest

from tests.tools.trees import PLAIN_FILES, SECRET_FILES, project
from totem.tools import ToolContext, ToolError, glob as glob_module
from totem.tools.glob import GlobTool, compile_glob


def touch(root: str, relative: str, mtime: float | None = None) -> str:
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write("x\n")
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def glob(root: str, **args):
    return asyncio.run(GlobTool().run(args, ToolContext(root, "s1")))


def listed(root: str, **args) -> list[str]:
    return glob(root, **args).output.split("\n")


def refusal(root: str, **args) -> str:
    with pytest.raises(ToolError) as caught:
        glob(root, **args)
    return str(caught.value)


def test_glob_star_stays_in_folder(tmp_path):
    """* matches within one folder only; the pattern is relative to the search folder."""
    root = project(tmp_path)
    touch(root, "a.py", 100)
    touch(root, "src/b.py", 100)
    assert listed(root, pattern="*.py") == ["a.py"]


def test_glob_double_star_spans_folders(tmp_path):
    """**/ matches zero or more folders."""
    root = project(tmp_path)
    for name in ("a.py", "src/b.py", "src/deep/er/c.py", "src/d.txt"):
        touch(root, name, 100)
    assert listed(root, pattern="**/*.py") == ["a.py", "src/b.py", "src/deep/er/c.py"]
    assert listed(root, pattern="src/**") == ["src/b.py", "src/d.txt", "src/deep/er/c.py"]
    assert listed(root, pattern="src/**/c.py") == ["src/deep/er/c.py"]


def test_glob_dot_segments_normalized(tmp_path):
    """./ and empty segments are dropped: results are plain paths."""
    root = project(tmp_path)
    touch(root, "src/a.py", 100)
    assert listed(root, pattern="./src/./*.py") == ["src/a.py"]
    assert listed(root, pattern="src//*.py") == ["src/a.py"]
    assert refusal(root, pattern="./") == "the pattern names no files: give one like '*' or '**/*.py'"


def test_glob_newest_first_then_name(tmp_path):
    """Results are sorted by modification time, newest first, then by name."""
    root = project(tmp_path)
    touch(root, "old.txt", 1_000)
    touch(root, "new.txt", 3_000)
    touch(root, "b.txt", 2_000)
    touch(root, "a.txt", 2_000)
    result = glob(root, pattern="*.txt")
    assert result.output.split("\n") == ["new.txt", "a.txt", "b.txt", "old.txt"]
    assert result.title == "*.txt in . (4 files)"
    assert result.data == {"count": 4, "shown": 4, "truncated": False}


def test_glob_cap_with_note(tmp_path):
    """Past 200 results the rest is counted, not shown."""
    root = project(tmp_path)
    for i in range(230):
        touch(root, f"f{i:03}.txt", 1_000)
    lines = listed(root, pattern="*.txt")
    assert len(lines) == glob_module.MAX_RESULTS + 1
    assert lines[0] == "f000.txt"
    assert lines[-1] == "(30 more not shown)"


def test_glob_path_folder_results_relative_to_project(tmp_path):
    """With path, the pattern is relative to that folder and results to the project."""
    root = project(tmp_path)
    touch(root, "src/app/main.py", 100)
    touch(root, "main.py", 100)
    assert listed(root, pattern="**/*.py", path="src") == ["src/app/main.py"]
    assert listed(root, pattern="app/*.py", path="src/") == ["src/app/main.py"]


def test_glob_classes_question_braces(tmp_path):
    """?, [...], [!...] and {a,b} work within a segment; * matches a leading dot."""
    root = project(tmp_path)
    for name in ("a1.c", "b2.c", "c3.c", "x.ts", "y.tsx", ".hidden.c"):
        touch(root, name, 100)
    assert listed(root, pattern="[ab]?.c") == ["a1.c", "b2.c"]
    assert listed(root, pattern="[!ab]?.c") == ["c3.c"]
    assert listed(root, pattern="*.{ts,tsx}") == ["x.ts", "y.tsx"]
    assert ".hidden.c" in listed(root, pattern="*.c")


def test_glob_skips_git_and_protected_env(tmp_path):
    """.git is never entered; .env files are hidden, their examples are not."""
    root = project(tmp_path)
    for name in (".git/config", ".git/hooks/pre-commit", "sub/.git", ".env", "app/.env.local",
                 ".env.example", "app/.env.prod.sample", "README"):
        touch(root, name, 100)
    assert listed(root, pattern="**") == [".env.example", "README"]
    result = glob(root, pattern="*", path=".git")
    assert result.output == ".git is not listed: the search tools skip .git."


def test_glob_hides_every_secret_form(tmp_path):
    """Every protected form (any case, *.env, .envrc, backups, files in .env.d or .env folders)
    is hidden, whatever the pattern or the folder; the look-alikes are listed."""
    root = project(tmp_path)
    for name in SECRET_FILES + PLAIN_FILES:
        touch(root, name, 100)
    assert listed(root, pattern="**") == sorted(PLAIN_FILES)
    assert listed(root, pattern="**/*env*") == sorted(
        name for name in PLAIN_FILES if "env" in name.rsplit("/", 1)[-1])
    for args in ({"pattern": "*", "path": ".env.d"}, {"pattern": "**/*", "path": "conf"},
                 {"pattern": "venv/.env/**"}, {"pattern": "tools/.ENV/*/*"}, {"pattern": "*.env"},
                 {"pattern": "**/.envrc"}, {"pattern": "#*"}):
        assert glob(root, **args).data["count"] == 0, args
    assert listed(root, pattern="**/.[eE][nN][vV]*") == [
        ".env.example", ".env.sample", ".env.template", ".environment", ".envoy", ".envs", "app/.ENV.Example",
        "app/.env2"]


def test_glob_lists_hard_linked_files(tmp_path):
    """A file with more than one hard link is listed: names are not contents (read asks)."""
    root = project(tmp_path)
    touch(root, "a.txt", 100)
    os.link(os.path.join(root, "a.txt"), os.path.join(root, "b.txt"))
    assert listed(root, pattern="*.txt") == ["a.txt", "b.txt"]


def test_glob_no_match_hint(tmp_path):
    """No match says so, with a hint about ** when the pattern has no folder part."""
    root = project(tmp_path)
    touch(root, "src/a.py", 100)
    result = glob(root, pattern="*.py")
    assert result.output == ("No files match '*.py' in ..\nThe pattern is relative to the folder: "
                             "use '**/*.py' to search subfolders too.")
    assert result.data["count"] == 0


def test_glob_symlinked_folder_not_followed(tmp_path):
    """A linked folder is never entered: not one outside, not one inside (no loops)."""
    root = project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s\n")
    touch(root, "src/a.txt", 100)
    os.symlink(outside, os.path.join(root, "ext"))
    os.symlink(os.path.join(root, "src"), os.path.join(root, "src", "loop"))
    assert listed(root, pattern="**/*.txt") == ["src/a.txt"]
    assert listed(root, pattern="ext/*.txt")[0].startswith("No files match")


def test_glob_symlinked_files(tmp_path):
    """A linked file is listed when its target is inside the project, never when outside."""
    root = project(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("s\n")
    touch(root, "real.txt", 100)
    os.symlink(outside, os.path.join(root, "out.txt"))
    os.symlink(os.path.join(root, "real.txt"), os.path.join(root, "alias.txt"))
    os.symlink(os.path.join(root, "gone.txt"), os.path.join(root, "broken.txt"))
    assert listed(root, pattern="*.txt") == ["alias.txt", "real.txt"]


def test_glob_absolute_pattern_refused(tmp_path):
    """An absolute pattern is refused."""
    root = project(tmp_path)
    assert refusal(root, pattern="/etc/*").startswith("the pattern '/etc/*' is absolute")


def test_glob_dotdot_pattern_refused(tmp_path):
    """A pattern with a .. segment, even inside braces, is refused."""
    root = project(tmp_path)
    for pattern in ("../*", "src/../../*", "{..,src}/*", "**/.."):
        assert "contains '..'" in refusal(root, pattern=pattern)
    touch(root, "a..b.txt", 100)
    assert listed(root, pattern="a..b.*") == ["a..b.txt"]


def test_glob_tilde_is_literal(tmp_path, monkeypatch):
    """~ in a pattern is a literal folder name, never the home folder."""
    root = project(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    (home / "id_rsa").write_text("KEY\n")
    monkeypatch.setenv("HOME", str(home))
    assert listed(root, pattern="~/*")[0].startswith("No files match")


def test_glob_path_outside_refused(tmp_path):
    """A search folder outside the project, by .., absolute path or link, is refused."""
    root = project(tmp_path)
    os.symlink(tmp_path, os.path.join(root, "up"))
    assert refusal(root, pattern="*", path="..") == ".. is outside the project"
    assert refusal(root, pattern="*", path="/") == "/ is outside the project"
    assert refusal(root, pattern="*", path="up") == "up is outside the project"
    with pytest.raises(ToolError, match="outside the project"):
        GlobTool().subjects({"pattern": "*", "path": "/tmp"}, ToolContext(root, "s1"))


def test_glob_subjects_default_root(tmp_path):
    """The permission subject is the searched folder; the root is "."."""
    root = project(tmp_path)
    os.makedirs(os.path.join(root, "src"))
    ctx = ToolContext(root, "s1")
    assert GlobTool().subjects({"pattern": "*"}, ctx) == ["."]
    assert GlobTool().subjects({"pattern": "*", "path": "src/"}, ctx) == ["src"]


def test_glob_path_not_a_folder(tmp_path):
    """A file or a missing folder as path is refused."""
    root = project(tmp_path)
    touch(root, "a.txt")
    assert refusal(root, pattern="*", path="a.txt") == "a.txt is a file, not a folder; use read to see it"
    assert refusal(root, pattern="*", path="nope") == "folder not found: nope"


def test_glob_nul_refused(tmp_path):
    """A NUL byte in the pattern or the path is refused."""
    root = project(tmp_path)
    assert refusal(root, pattern="a\x00b") == "the pattern contains a NUL byte"
    assert refusal(root, pattern="*", path="a\x00") == "the path contains a NUL byte"


def test_glob_walk_cap_says_stopped(tmp_path, monkeypatch):
    """A walk past the entry cap stops and says so."""
    root = project(tmp_path)
    for i in range(20):
        touch(root, f"d{i}/f.txt", 100)
    monkeypatch.setattr(glob_module, "MAX_SCANNED_ENTRIES", 10)
    result = glob(root, pattern="**/*.txt")
    assert result.output.endswith("(stopped early: more than 10 entries; narrow the path or the pattern)")
    assert result.data["truncated"] is True


@pytest.mark.parametrize("pattern, message", [
    ("[abc", "unclosed [ in the glob '[abc'"),
    ("{a,b", "unclosed { in the glob '{a,b'"),
    ("{a,{b,c}}", "nested {} are not supported in the glob '{a,{b,c}}'"),
    ("a}b", "unmatched } in the glob 'a}b' (escape it as \\})"),
    ("ab\\", "the glob 'ab\\\\' ends with a backslash"),
])
def test_compile_glob_errors(pattern, message):
    """Malformed globs are refused with the reason."""
    with pytest.raises(ToolError) as caught:
        compile_glob(pattern)
    assert str(caught.value) == message


def test_compile_glob_name_only():
    """A file-name glob refuses folders and **."""
    for pattern in ("src/*.py", "**.py"):
        with pytest.raises(ToolError, match="must match file names only"):
            compile_glob(pattern, name_only=True)
    regex = compile_glob("*.{ts,tsx}", name_only=True)
    assert [bool(regex.fullmatch(name)) for name in ("a.ts", "a.tsx", "a.t", "dir/a.ts")] == \
        [True, True, False, False]


def test_compile_glob_escapes_regex_syntax():
    """Characters special to regular expressions are literal in a glob."""
    regex = compile_glob("a+(b)|c.$[.]\\*")
    assert regex.fullmatch("a+(b)|c.$.*")
    assert not regex.fullmatch("aa(b)|c.$.*")


def reference_match(pattern: str, path: str) -> bool:
    """An obviously correct (and exponential) glob matcher, for small inputs."""
    brace = re.search(r"\{([^{}]*)\}", pattern)
    if brace:
        return any(reference_match(pattern[:brace.start()] + option + pattern[brace.end():], path)
                   for option in brace.group(1).split(","))
    return _segments_match(pattern.split("/"), path.split("/"))


def _segments_match(patterns: list[str], names: list[str]) -> bool:
    if not patterns:
        return not names
    if patterns[0] == "**":
        if len(patterns) == 1:
            return bool(names)  # a final ** matches everything below, at least one name
        return any(_segments_match(patterns[1:], names[i:]) for i in range(len(names) + 1))
    return bool(names) and fnmatch.fnmatchcase(names[0], patterns[0]) and \
        _segments_match(patterns[1:], names[1:])


def test_compile_glob_agrees_with_reference():
    """On thousands of random globs and paths, compile_glob answers as a plain recursive matcher."""
    generator = random.Random(20240601)
    atoms = ["a", "b", ".", "*", "?", "/", "**/", "[ab]", "[!a]", "{a,b*}", "{,?b}"]
    for _ in range(4000):
        pattern = "".join(generator.choice(atoms) for _ in range(generator.randint(1, 7)))
        pattern = "/".join(part for part in pattern.split("/") if part) or "*"
        path = "/".join("".join(generator.choice("ab.") for _ in range(generator.randint(1, 5)))
                        for _ in range(generator.randint(1, 4)))
        expected = reference_match(pattern, path)
        assert bool(compile_glob(pattern).fullmatch(path)) == expected, (pattern, path)


def test_compile_glob_no_catastrophic_backtracking():
    """Many stars against a long name answer at once (a naive regex would run for hours)."""
    name = "a" * 300
    assert not compile_glob("*a*a*a*a*a*a*a*a*a*a*a*b").fullmatch(name)
    assert compile_glob("*a*a*a*a*a*a*a*a*a*a*a*a").fullmatch(name)
    deep = "/".join(["a"] * 60) + "/c"
    assert not compile_glob("**/a/**/a/**/a/**/a/**/a/**/a/**/b").fullmatch(deep)
    assert compile_glob("**/a/**/a/**/a/**/a/**/a/**/a/**/c").fullmatch(deep)


def test_compile_glob_alternatives_capped():
    """Brace alternatives that multiply past the cap are refused."""
    with pytest.raises(ToolError, match="more than 64 alternatives"):
        compile_glob("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}")
