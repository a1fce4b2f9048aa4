"""The read tool: numbered lines, windows, cut lines, and every refusal."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.tools.trees import project, write
from totem.tools import ToolContext, ToolError, read as read_module
from totem.tools.read import ReadTool


def read(root: str, **args):
    return asyncio.run(ReadTool().run(args, ToolContext(root, "s1")))


def refusal(root: str, **args) -> str:
    with pytest.raises(ToolError) as caught:
        read(root, **args)
    return str(caught.value)


def test_read_numbered_lines(tmp_path):
    """A small file comes back whole, cat -n style, without a footer."""
    root = project(tmp_path)
    write(root, "src/app.py", "import os\n\tprint(1)\n")
    result = read(root, path="src/app.py")
    assert result.output == "     1\timport os\n     2\t\tprint(1)"
    assert result.title == "src/app.py (2 lines)"
    assert result.data == {"path": "src/app.py", "lines": 2, "start": 1, "end": 2, "truncated": False}


def test_read_last_line_without_newline(tmp_path):
    """A last line without a newline is still a line; CRLF endings are not shown."""
    root = project(tmp_path)
    write(root, "a.txt", "one\r\ntwo\r\nthree")
    assert read(root, path="a.txt").output == "     1\tone\n     2\ttwo\n     3\tthree"


def test_read_offset_and_limit_window(tmp_path):
    """offset and limit pick a window; the footer gives the total and the next offset."""
    root = project(tmp_path)
    write(root, "n.txt", "".join(f"line {i}\n" for i in range(1, 351)))
    result = read(root, path="n.txt", offset=101, limit=100)
    lines = result.output.split("\n")
    assert lines[0] == "   101\tline 101"
    assert lines[99] == "   200\tline 200"
    assert lines[100] == "(lines 101-200 of 350; use offset=201 to read more)"
    assert result.title == "n.txt (lines 101-200 of 350)"
    assert result.data["truncated"] is True


def test_read_window_to_the_end(tmp_path):
    """A window that reaches the end says so."""
    root = project(tmp_path)
    write(root, "n.txt", "".join(f"{i}\n" for i in range(1, 11)))
    result = read(root, path="n.txt", offset=8)
    assert result.output.split("\n")[-1] == "(lines 8-10 of 10; end of file)"
    assert result.data["truncated"] is False


def test_read_default_limit(tmp_path):
    """Without limit, 2000 lines are shown and the footer tells how to go on."""
    root = project(tmp_path)
    write(root, "big.txt", "x\n" * 2500)
    lines = read(root, path="big.txt").output.split("\n")
    assert len(lines) == read_module.DEFAULT_LIMIT_LINES + 1
    assert lines[-1] == "(lines 1-2000 of 2500; use offset=2001 to read more)"


def test_read_long_line_cut(tmp_path):
    """A line over 2000 characters is cut with a marker giving its length."""
    root = project(tmp_path)
    write(root, "min.js", "a" * 5000 + "\nshort\n")
    first, second = read(root, path="min.js").output.split("\n")
    assert first == "     1\t" + "a" * 2000 + "… [line cut: 5000 chars]"
    assert second == "     2\tshort"


def test_read_output_cap(tmp_path):
    """Many long lines stop before the character cap, with the offset to go on."""
    root = project(tmp_path)
    write(root, "wide.txt", ("b" * 1990 + "\n") * 200)
    result = read(root, path="wide.txt")
    assert len(result.output) <= read_module.MAX_OUTPUT_CHARS + 200
    end = result.data["end"]
    assert 0 < end < 200
    assert result.output.endswith(f"(lines 1-{end} of 200; use offset={end + 1} to read more)")


def test_read_empty_file(tmp_path):
    """An empty file says so."""
    root = project(tmp_path)
    write(root, "empty.txt", "")
    result = read(root, path="empty.txt")
    assert result.output == "(empty file)"
    assert refusal(root, path="empty.txt", offset=2) == \
        "offset 2 is past the end of empty.txt (the file is empty)"


def test_read_offset_past_end(tmp_path):
    """An offset past the last line is refused with the number of lines."""
    root = project(tmp_path)
    write(root, "a.txt", "1\n2\n3\n")
    assert refusal(root, path="a.txt", offset=4) == "offset 4 is past the end of a.txt (3 lines)"


def test_read_folder_refused(tmp_path):
    """A folder is refused with a hint to use glob."""
    root = project(tmp_path)
    os.makedirs(os.path.join(root, "src"))
    message = refusal(root, path="src")
    assert message.startswith("src is a folder; use glob")
    assert refusal(root, path=".").startswith(". is a folder")


def test_read_missing_file_names_similar(tmp_path):
    """A missing file names up to three similar files of that folder."""
    root = project(tmp_path)
    for name in ("config.py", "Config.yml", "configs.py", "conf.py", "unrelated.txt"):
        write(root, f"pkg/{name}", "x\n")
    message = refusal(root, path="pkg/confg.py")
    assert message.startswith("file not found: pkg/confg.py; similar files: ")
    named = message.split("similar files: ")[1].split(", ")
    assert len(named) == 3 and "pkg/config.py" in named
    assert all(name.startswith("pkg/") for name in named) and "pkg/unrelated.txt" not in named


def test_read_missing_file_nothing_similar(tmp_path):
    """A missing file with nothing similar gives just the path."""
    root = project(tmp_path)
    write(root, "zzz.txt", "x\n")
    assert refusal(root, path="readme.md") == "file not found: readme.md"


def test_read_missing_folder(tmp_path):
    """A file in a folder that does not exist says the folder is missing."""
    root = project(tmp_path)
    assert refusal(root, path="nope/a.py") == "file not found: nope/a.py (the folder nope does not exist)"


def test_read_binary_nul_refused(tmp_path):
    """A NUL byte in the first 8 KB means binary: refused with the size."""
    root = project(tmp_path)
    write(root, "img.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert refusal(root, path="img.png") == "binary file img.png (16 bytes); not shown"


def test_read_binary_invalid_utf8_refused(tmp_path):
    """Data that is mostly invalid UTF-8 is binary even without a NUL byte."""
    root = project(tmp_path)
    write(root, "blob.bin", bytes(range(128, 256)) * 10)
    assert refusal(root, path="blob.bin") == "binary file blob.bin (1280 bytes); not shown"


def test_read_legacy_encoding_shown(tmp_path):
    """Text with a few bytes that are not UTF-8 is shown, those bytes as U+FFFD."""
    root = project(tmp_path)
    write(root, "latin.txt", "café crème\n".encode("latin-1"))
    assert read(root, path="latin.txt").output == "     1\tcaf\ufffd cr\ufffdme"


def test_read_too_large_refused(tmp_path):
    """A file over the size cap is refused, pointing to grep."""
    root = project(tmp_path)
    path = write(root, "huge.log", b"")
    os.truncate(path, read_module.MAX_FILE_BYTES + 1)
    message = refusal(root, path="huge.log")
    assert message == (f"huge.log is {read_module.MAX_FILE_BYTES + 1} bytes, over the read limit "
                       f"of {read_module.MAX_FILE_BYTES} bytes; use grep to find the lines you need")


def test_read_fifo_refused(tmp_path):
    """A named pipe is refused without opening it (opening would block)."""
    root = project(tmp_path)
    os.mkfifo(os.path.join(root, "pipe"))
    assert refusal(root, path="pipe") == "pipe is not a regular file (a device, socket or pipe); not read"


def test_read_env_file_read_normally(tmp_path):
    """The read tool does not refuse .env: the permission layer asks before it runs."""
    root = project(tmp_path)
    write(root, ".env", "TOKEN=abc\n")
    assert read(root, path=".env").output == "     1\tTOKEN=abc"
    assert ReadTool().subjects({"path": ".env"}, ToolContext(root, "s1")) == [".env"]


def test_read_parent_path_outside(tmp_path):
    """A path climbing out with .. is outside the project."""
    root = project(tmp_path)
    write(str(tmp_path), "secret.txt", "s\n")
    assert refusal(root, path="../secret.txt") == "../secret.txt is outside the project"
    assert refusal(root, path="src/../../secret.txt") == "src/../../secret.txt is outside the project"


def test_read_absolute_path_outside(tmp_path):
    """An absolute path outside the project is refused; one inside is read."""
    root = project(tmp_path)
    write(root, "in.txt", "inside\n")
    assert refusal(root, path="/etc/passwd") == "/etc/passwd is outside the project"
    assert read(root, path=os.path.join(root, "in.txt")).output == "     1\tinside"


def test_read_tilde_not_expanded(tmp_path, monkeypatch):
    """~ is not the home folder: ~/x names a (missing) folder inside the project."""
    root = project(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret.txt").write_text("HOME SECRET\n")
    monkeypatch.setenv("HOME", str(home))
    assert refusal(root, path="~/secret.txt") == "~ is not expanded here; give a path relative to the project"


def test_read_symlink_out_refused(tmp_path):
    """A link to a file outside, or a path through a linked folder outside, is outside."""
    root = project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "key.pem").write_text("KEY\n")
    os.symlink(outside / "key.pem", os.path.join(root, "key.pem"))
    os.symlink(outside, os.path.join(root, "ext"))
    assert refusal(root, path="key.pem") == "key.pem is outside the project"
    assert refusal(root, path="ext/key.pem") == "ext/key.pem is outside the project"
    assert refusal(root, path="ext/missing.txt") == "ext/missing.txt is outside the project"


def test_read_symlink_inside_resolved(tmp_path):
    """A link to a file inside is read, and its subject is the resolved path."""
    root = project(tmp_path)
    write(root, "real/data.txt", "ok\n")
    os.symlink(os.path.join(root, "real", "data.txt"), os.path.join(root, "alias.txt"))
    assert read(root, path="alias.txt").output == "     1\tok"
    assert ReadTool().subjects({"path": "alias.txt"}, ToolContext(root, "s1")) == ["real/data.txt"]


def test_read_nul_in_path_refused(tmp_path):
    """A NUL byte in the path is refused before any file system call."""
    root = project(tmp_path)
    assert refusal(root, path="a.txt\x00.png") == "the path contains a NUL byte"


def test_read_subjects_outside_refused(tmp_path):
    """subjects() refuses a path outside the project with the same message."""
    root = project(tmp_path)
    with pytest.raises(ToolError, match="is outside the project"):
        ReadTool().subjects({"path": "/etc/hosts"}, ToolContext(root, "s1"))
    assert ReadTool().subjects({"path": "./src//a.py"}, ToolContext(root, "s1")) == ["src/a.py"]


# Hard links: another name of the file may be outside the project or a secret file

LINKS_REASON = "the file has 2 hard links; its other name may be outside the project or a secret file"


class Permits:
    """A `ToolContext.permit` double: records every call; allows, or raises ToolError (what the
    loop does on deny or reject) when `reject` is set; `during` runs while the person is asked."""

    def __init__(self, reject: bool = False, during=None):
        self.calls: list[tuple] = []
        self.reject = reject
        self.during = during

    async def __call__(self, tool: str, subject: str, args: dict | None = None,
                       always_ask: str | None = None) -> None:
        self.calls.append((tool, subject, args or {}, always_ask))
        if self.during is not None:
            self.during()
        if self.reject:
            raise ToolError(f"Denied: the person rejected {tool} of {subject}")


def read_with(root: str, permits: Permits, **args):
    return asyncio.run(ReadTool().run(args, ToolContext(root, "s1", permit=permits)))


def linked_outside(tmp_path) -> str:
    """A project whose notes.txt is a hard link to a secret file outside it."""
    root = project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("OUTSIDE-SECRET\n")
    os.link(outside / "secret.txt", os.path.join(root, "notes.txt"))
    return root


def test_read_hard_link_asks_then_reads(tmp_path):
    """A file with a second hard link (here outside the project) is read only once the person
    allowed it, with the reason in the question."""
    root = linked_outside(tmp_path)
    permits = Permits()
    assert read_with(root, permits, path="notes.txt").output == "     1\tOUTSIDE-SECRET"
    assert permits.calls == [("read", "notes.txt", {"path": "notes.txt"}, LINKS_REASON)]


def test_read_hard_link_rejected_not_read(tmp_path):
    """A rejected question reads nothing: the error carries no line of the file."""
    root = linked_outside(tmp_path)
    permits = Permits(reject=True)
    with pytest.raises(ToolError) as caught:
        read_with(root, permits, path="notes.txt")
    assert str(caught.value) == "Denied: the person rejected read of notes.txt"
    assert len(permits.calls) == 1


def test_read_hard_link_without_permit_refused(tmp_path):
    """Outside the agent loop there is no one to ask: a hard-linked file is not read."""
    root = linked_outside(tmp_path)
    message = refusal(root, path="notes.txt")
    assert message == (f"notes.txt is not read: {LINKS_REASON}, and only the person can allow it "
                       "(inside the agent loop)")
    assert "OUTSIDE-SECRET" not in message


def test_read_hard_link_inside_project_and_through_symlink(tmp_path):
    """Two names inside the project ask too, and a symbolic link to a hard-linked file asks for
    the file it leads to (the target's links count)."""
    root = project(tmp_path)
    write(root, ".envrc", "export TOKEN=s3cr3t\n")
    os.link(os.path.join(root, ".envrc"), os.path.join(root, "copy.txt"))
    os.symlink(os.path.join(root, "copy.txt"), os.path.join(root, "alias.txt"))
    for path in ("copy.txt", "alias.txt"):
        permits = Permits(reject=True)
        with pytest.raises(ToolError):
            read_with(root, permits, path=path)
        assert permits.calls == [("read", "copy.txt", {"path": "copy.txt"}, LINKS_REASON)]


def test_read_single_link_and_folders_do_not_ask(tmp_path):
    """A file with one link reads without a question; a folder (always several links) is not a
    file to ask about."""
    root = project(tmp_path)
    write(root, "a.txt", "one\n")
    write(root, "dir/sub/x.txt", "x\n")
    assert os.stat(os.path.join(root, "dir")).st_nlink > 1
    permits = Permits(reject=True)
    assert read_with(root, permits, path="a.txt").output == "     1\tone"
    with pytest.raises(ToolError) as caught:
        read_with(root, permits, path="dir")
    assert str(caught.value).startswith("dir is a folder")
    assert permits.calls == []


def test_read_hard_link_swapped_during_question_not_read(tmp_path):
    """A file replaced while the person is asked, by another file with several links, is not
    read: the allowed file is the one that was asked about."""
    root = linked_outside(tmp_path)
    other = tmp_path / "other.txt"
    other.write_text("OTHER-SECRET\n")
    os.link(other, tmp_path / "other-link.txt")

    def swap():
        os.replace(other, os.path.join(root, "notes.txt"))

    with pytest.raises(ToolError) as caught:
        read_with(root, Permits(during=swap), path="notes.txt")
    assert str(caught.value) == ("notes.txt changed since it was checked and has 2 hard links now; "
                                 "not read (read it again to ask the person)")
