"""The edit tool: exact replacement, newline style and encoding kept, and every refusal."""

from __future__ import annotations

import asyncio
import codecs
import os
import stat

import pytest

from totem.tools import ToolContext, ToolError, files
from totem.tools.edit import EditTool

from .test_write import ADVERSARIAL, adversarial_path, hostile, project, put, snapshot, temp_files


def edit(root: str, **args):
    return asyncio.run(EditTool().run(args, ToolContext(root, "s1")))


def refusal(root: str, **args) -> str:
    with pytest.raises(ToolError) as caught:
        edit(root, **args)
    return str(caught.value)


def content(root: str, relative: str) -> bytes:
    with open(os.path.join(root, relative), "rb") as handle:
        return handle.read()


def test_edit_replaces_once(tmp_path):
    """A text found once is replaced; the result gives the count and the line."""
    root = project(tmp_path)
    put(root, "app.py", "import os\n\ndef main():\n    return 1\n")
    result = edit(root, path="app.py", old="return 1", new="return 2")
    assert result.output == "edited app.py: replaced 1 occurrence at line 4"
    assert result.title == "app.py (edited)"
    assert result.data == {"path": "app.py", "replacements": 1, "lines": [4]}
    assert content(root, "app.py") == b"import os\n\ndef main():\n    return 2\n"


def test_edit_multiline_old(tmp_path):
    """old may span lines, and new may have another number of lines."""
    root = project(tmp_path)
    put(root, "a.txt", "one\ntwo\nthree\n")
    result = edit(root, path="a.txt", old="one\ntwo\n", new="uno\n")
    assert result.data["lines"] == [1]
    assert content(root, "a.txt") == b"uno\nthree\n"


def test_edit_replace_all(tmp_path):
    """replace_all replaces every occurrence and lists their lines."""
    root = project(tmp_path)
    put(root, "a.py", "x = 1\ny = x\nprint(x)\n")
    result = edit(root, path="a.py", old="x", new="value", replace_all=True)
    assert result.output == "edited a.py: replaced 3 occurrences at lines 1, 2, 3"
    assert result.data == {"path": "a.py", "replacements": 3, "lines": [1, 2, 3]}
    assert content(root, "a.py") == b"value = 1\ny = value\nprint(value)\n"


def test_edit_several_matches_refused(tmp_path):
    """Several matches without replace_all are refused with their count and lines."""
    root = project(tmp_path)
    put(root, "a.py", "x = 1\npass\nx = 1\npass\nx = 1\n")
    before = snapshot(tmp_path)
    assert refusal(root, path="a.py", old="x = 1", new="x = 2") == (
        "old occurs 3 times in a.py (lines 1, 3, 5); add surrounding lines to old so that it "
        "matches once, or set replace_all to replace every occurrence")
    assert snapshot(tmp_path) == before


def test_edit_no_match_shows_similar_lines(tmp_path):
    """A text not found shows the three most similar places with their line numbers."""
    root = project(tmp_path)
    put(root, "a.py", "def alpha():\n    return compute(1)\n\nunrelated = True\n"
                      "def beta():\n    return compute(2)\n\ndef gamma():\n    return compute(3)\n")
    before = snapshot(tmp_path)
    message = refusal(root, path="a.py", old="def alpha():\n    return compute(7)", new="x")
    lines = message.split("\n")
    assert lines[0] == "old was not found in a.py; the most similar places:"
    assert lines[1].startswith("lines 1-2 (") and lines[1].endswith("% similar):")
    assert lines[2:4] == ["     1\tdef alpha():", "     2\t    return compute(1)"]
    spans = [line.split(" (")[0] for line in lines if line.startswith("lines ")]
    assert len(spans) == 3 and spans[0] == "lines 1-2"
    assert set(spans[1:]) == {"lines 5-6", "lines 8-9"}
    assert snapshot(tmp_path) == before


def test_edit_no_match_whitespace_hint(tmp_path):
    """A text that differs only in whitespace says to check indentation."""
    root = project(tmp_path)
    put(root, "a.py", "if x:\n\treturn 1\n")
    message = refusal(root, path="a.py", old="if x:\n    return 1", new="if x:\n    return 2")
    assert message.startswith("old was not found in a.py (it would match if spaces, tabs and "
                              "newlines were ignored: check indentation); the most similar places:")
    assert "     2\t\treturn 1" in message


def test_edit_no_match_nothing_similar(tmp_path):
    """A text with nothing similar says so and suggests reading the file."""
    root = project(tmp_path)
    put(root, "a.txt", "aaaa\n")
    assert refusal(root, path="a.txt", old="zzzzqqqq", new="y") == \
        "old was not found in a.txt; nothing in the file is similar. Read the file to see its content."


def test_edit_missing_file_refused(tmp_path):
    """A missing file is refused, pointing to write."""
    root = project(tmp_path)
    before = snapshot(tmp_path)
    assert refusal(root, path="nope.py", old="a", new="b") == \
        "file not found: nope.py (use write to create a file)"
    assert refusal(root, path="no/such/dir.py", old="a", new="b") == \
        "file not found: no/such/dir.py (use write to create a file)"
    assert snapshot(tmp_path) == before


def test_edit_empty_old_refused(tmp_path):
    """An empty old is refused."""
    root = project(tmp_path)
    put(root, "a.txt", "x\n")
    assert refusal(root, path="a.txt", old="", new="y").startswith("old is empty;")
    assert content(root, "a.txt") == b"x\n"


def test_edit_same_old_and_new_refused(tmp_path):
    """old equal to new is refused; so is a change that only rewrites newlines to the same."""
    root = project(tmp_path)
    put(root, "a.txt", "x\ny\n")
    assert refusal(root, path="a.txt", old="x", new="x") == "old and new are the same text; nothing to change"
    assert refusal(root, path="a.txt", old="x\ny", new="x\r\ny") == \
        "the replacement leaves the file as it is; nothing to change"
    assert content(root, "a.txt") == b"x\ny\n"


def test_edit_binary_refused(tmp_path):
    """A binary file is refused."""
    root = project(tmp_path)
    put(root, "img.png", b"\x89PNG\r\n\x1a\n\x00\x00IHDR")
    assert refusal(root, path="img.png", old="PNG", new="JPG") == "binary file img.png (14 bytes); not changed"
    assert content(root, "img.png") == b"\x89PNG\r\n\x1a\n\x00\x00IHDR"


def test_edit_non_utf8_refused(tmp_path):
    """Text in another encoding is refused with where the first byte that is not UTF-8 is."""
    root = project(tmp_path)
    put(root, "latin.txt", "first\ncafé crème\n".encode("latin-1"))
    assert refusal(root, path="latin.txt", old="first", new="1st") == (
        "latin.txt is not UTF-8 text (byte 9 on line 2 is not UTF-8); it is not changed, so "
        "that its encoding is kept")
    assert content(root, "latin.txt") == "first\ncafé crème\n".encode("latin-1")


def test_edit_crlf_file_stays_crlf(tmp_path):
    """In a CRLF file, old written with LF matches and new lines are written as CRLF."""
    root = project(tmp_path)
    put(root, "win.txt", b"one\r\ntwo\r\nthree\r\n")
    result = edit(root, path="win.txt", old="one\ntwo\n", new="uno\ndos\nextra\n")
    assert result.data["lines"] == [1]
    assert content(root, "win.txt") == b"uno\r\ndos\r\nextra\r\nthree\r\n"


def test_edit_lf_file_stays_lf(tmp_path):
    """In an LF file, old and new written with CRLF are taken with LF."""
    root = project(tmp_path)
    put(root, "unix.txt", b"one\ntwo\n")
    edit(root, path="unix.txt", old="one\r\ntwo", new="1\r\n2")
    assert content(root, "unix.txt") == b"1\n2\n"


def test_edit_mixed_newlines(tmp_path):
    """In a file with mixed newlines, the text is matched in either style."""
    root = project(tmp_path)
    put(root, "mixed.txt", b"a\r\nb\r\nc\r\nd\ne\n")
    edit(root, path="mixed.txt", old="d\ne", new="D\nE")
    assert content(root, "mixed.txt") == b"a\r\nb\r\nc\r\nD\nE\n"


def test_edit_bom_and_last_line_kept(tmp_path):
    """A UTF-8 byte order mark and a last line without newline stay as they were."""
    root = project(tmp_path)
    put(root, "bom.txt", codecs.BOM_UTF8 + "héllo\nwörld".encode())
    edit(root, path="bom.txt", old="wörld", new="wörld!")
    assert content(root, "bom.txt") == codecs.BOM_UTF8 + "héllo\nwörld!".encode()


def test_edit_keeps_permission_bits(tmp_path):
    """An executable script stays executable (0755) after an edit."""
    root = project(tmp_path)
    path = put(root, "run.sh", "#!/bin/sh\necho one\n", 0o755)
    edit(root, path="run.sh", old="echo one", new="echo two")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o755
    assert content(root, "run.sh") == b"#!/bin/sh\necho two\n"


def test_edit_result_too_large_refused(tmp_path):
    """An edit whose result passes MAX_WRITE_BYTES is refused."""
    root = project(tmp_path)
    put(root, "a.txt", "x\n")
    message = refusal(root, path="a.txt", old="x", new="y" * (files.MAX_WRITE_BYTES + 1))
    assert message.startswith("the new content of a.txt is ")
    assert content(root, "a.txt") == b"x\n"


def test_edit_folder_refused(tmp_path):
    """A folder is not a file to edit."""
    root = project(tmp_path)
    os.makedirs(os.path.join(root, "src"))
    assert refusal(root, path="src", old="a", new="b") == "src is a folder, not a file"


def test_edit_fifo_refused(tmp_path):
    """A named pipe is refused without opening it."""
    root = project(tmp_path)
    os.mkfifo(os.path.join(root, "pipe"))
    assert refusal(root, path="pipe", old="a", new="b") == \
        "pipe is not a regular file (a device, socket or pipe); not changed"


@pytest.mark.parametrize("path, error", ADVERSARIAL)
def test_edit_adversarial_path_refused(tmp_path, path, error):
    """Each path that leaves the project or enters .git is refused by subjects and run; nothing changes."""
    root = hostile(tmp_path)
    put(root, ".git/hooks/x", "#!/bin/sh\nSECRET\n")
    path = adversarial_path(tmp_path, path)
    before = snapshot(tmp_path)
    with pytest.raises(ToolError) as caught:
        EditTool().subjects({"path": path, "old": "SECRET", "new": "PWNED"}, ToolContext(root, "s1"))
    assert error in str(caught.value)
    assert error in refusal(root, path=path, old="SECRET", new="PWNED")
    assert snapshot(tmp_path) == before


def test_edit_symlink_inside_edits_target(tmp_path):
    """A link inside to a file inside is edited through; the link stays a link."""
    root = hostile(tmp_path)
    ctx = ToolContext(root, "s1")
    assert EditTool().subjects({"path": "alias.txt", "old": "two", "new": "2"}, ctx) == ["real/data.txt"]
    assert edit(root, path="alias.txt", old="two", new="2").data["path"] == "real/data.txt"
    assert content(root, "real/data.txt") == b"one\n2\n"
    assert os.path.islink(os.path.join(root, "alias.txt"))


def test_edit_run_rechecks_swapped_link(tmp_path):
    """A file swapped for a link out after subjects() is refused by run."""
    root = hostile(tmp_path)
    put(root, "conf.txt", "SECRET\n")
    assert EditTool().subjects({"path": "conf.txt", "old": "SECRET", "new": "PWNED"},
                               ToolContext(root, "s1")) == ["conf.txt"]
    os.unlink(os.path.join(root, "conf.txt"))
    os.symlink(tmp_path / "outside" / "secret.txt", os.path.join(root, "conf.txt"))
    before = snapshot(tmp_path)
    assert refusal(root, path="conf.txt", old="SECRET", new="PWNED") == "conf.txt is outside the project"
    assert snapshot(tmp_path) == before


def test_edit_no_temp_file_left(tmp_path, monkeypatch):
    """No temporary file stays after an edit, nor after one whose rename fails."""
    root = project(tmp_path)
    put(root, "a.txt", "old\n", 0o755)
    edit(root, path="a.txt", old="old", new="new")
    assert temp_files(tmp_path) == []

    def failing_replace(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", failing_replace)
    before = snapshot(tmp_path)
    assert refusal(root, path="a.txt", old="new", new="newer") == "cannot write a.txt: Input/output error"
    assert temp_files(tmp_path) == []
    assert snapshot(tmp_path) == before


def test_edit_subjects(tmp_path):
    """subjects() names the one file edited, normalized."""
    root = project(tmp_path)
    assert EditTool().subjects({"path": "./a//b.py", "old": "x", "new": "y"},
                               ToolContext(root, "s1")) == ["a/b.py"]
