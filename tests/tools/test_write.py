"""The write tool and the boundary for writes: creating, replacing, atomicity and every refusal."""

from __future__ import annotations

import asyncio
import os
import stat

import pytest

from tests.tools.trees import project
from totem.security import boundary
from totem.tools import Registry, ToolContext, ToolError, files
from totem.tools.edit import EditTool
from totem.tools.patch import PatchTool
from totem.tools.write import WriteTool


def put(root: str, relative: str, content: str | bytes, mode: int | None = None) -> str:
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(content.encode() if isinstance(content, str) else content)
    if mode is not None:
        os.chmod(path, mode)
    return path


def snapshot(top) -> dict:
    """Every entry below `top` (inside and outside the project): kind, bytes or link, mode."""
    tree = {}
    for folder, names, filenames in os.walk(top):
        for name in names + filenames:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                tree[path] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                tree[path] = ("dir", stat.S_IMODE(info.st_mode))
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    tree[path] = ("file", handle.read(), stat.S_IMODE(info.st_mode))
            else:
                tree[path] = ("other", stat.S_IFMT(info.st_mode))
    return tree


def temp_files(top) -> list[str]:
    return [name for _folder, _names, filenames in os.walk(top) for name in filenames
            if name.startswith(files.TEMP_PREFIX)]


def hostile(tmp_path) -> str:
    """A project with links out and in, a .git folder, and a secret outside."""
    root = project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET\n")
    os.symlink(outside, os.path.join(root, "ext"))
    os.symlink(outside / "secret.txt", os.path.join(root, "key.txt"))
    os.symlink(outside / "missing.txt", os.path.join(root, "dangling.txt"))
    put(root, ".git/config", "[core]\n")
    put(root, ".git/hooks/pre-commit", "#!/bin/sh\n", 0o755)
    put(root, "real/data.txt", "one\ntwo\n")
    os.symlink(os.path.join(root, "real", "data.txt"), os.path.join(root, "alias.txt"))
    os.symlink(os.path.join(root, ".git", "config"), os.path.join(root, "gitconfig"))
    return root


# Paths that a write tool must refuse, with the refusal each gets.
ADVERSARIAL = [
    ("../escape.txt", "../escape.txt is outside the project"),
    ("src/../../escape.txt", "src/../../escape.txt is outside the project"),
    ("OUTSIDE/secret.txt", "is outside the project"),
    ("~/x.txt", "~ is not expanded here"),
    ("ext/secret.txt", "ext/secret.txt is outside the project"),
    ("ext/new.txt", "ext/new.txt is outside the project"),
    ("key.txt", "key.txt is outside the project"),
    ("dangling.txt", "dangling.txt is outside the project"),
    (".git/config", ".git/config is inside a .git folder"),
    (".git/hooks/pre-commit", ".git/hooks/pre-commit is inside a .git folder"),
    (".git/hooks/x", ".git/hooks/x is inside a .git folder"),
    ("vendor/lib/.git/HEAD", "vendor/lib/.git/HEAD is inside a .git folder"),
    (".GIT/config", ".GIT/config is inside a .git folder"),
    ("gitconfig", "gitconfig is inside a .git folder"),
    ("real/../.git/config", "real/../.git/config is inside a .git folder"),
    ("a.txt\x00.png", "the path contains a NUL byte"),
    ("", "the path is empty"),
    (".", ". is the project folder, not a file"),
]


def adversarial_path(tmp_path, path: str) -> str:
    return path.replace("OUTSIDE", str(tmp_path / "outside"))


def write(root: str, **args):
    return asyncio.run(WriteTool().run(args, ToolContext(root, "s1")))


def refusal(root: str, **args) -> str:
    with pytest.raises(ToolError) as caught:
        write(root, **args)
    return str(caught.value)


def test_write_creates_file(tmp_path):
    """A new file is created with the content as given and says so, with its line count."""
    root = project(tmp_path)
    result = write(root, path="src/app.py", content="import os\nprint(1)\n")
    assert result.output == "created src/app.py (2 lines, 19 bytes)"
    assert result.title == "src/app.py (created)"
    assert result.data == {"path": "src/app.py", "created": True, "bytes": 19}
    with open(os.path.join(root, "src/app.py"), "rb") as handle:
        assert handle.read() == b"import os\nprint(1)\n"


def test_write_replaces_file(tmp_path):
    """An existing file is replaced whole; the result says replaced."""
    root = project(tmp_path)
    put(root, "notes.md", "old\nold\nold\n")
    result = write(root, path="notes.md", content="new")
    assert result.output == "replaced notes.md (1 line, 3 bytes)"
    assert result.data == {"path": "notes.md", "created": False, "bytes": 3}
    with open(os.path.join(root, "notes.md"), "rb") as handle:
        assert handle.read() == b"new"


def test_write_content_as_given(tmp_path):
    """CRLF, a missing last newline and non-ASCII text are written byte for byte as UTF-8."""
    root = project(tmp_path)
    write(root, path="w.txt", content="café\r\nline")
    with open(os.path.join(root, "w.txt"), "rb") as handle:
        assert handle.read() == "café\r\nline".encode()


def test_write_empty_content(tmp_path):
    """Empty content creates an empty file of zero lines."""
    root = project(tmp_path)
    assert write(root, path="empty.txt", content="").output == "created empty.txt (0 lines, 0 bytes)"
    assert os.path.getsize(os.path.join(root, "empty.txt")) == 0


def test_write_creates_missing_folders(tmp_path):
    """Missing parent folders are created inside the project."""
    root = project(tmp_path)
    write(root, path="a/b/c/d.txt", content="x\n")
    assert os.path.isdir(os.path.join(root, "a/b/c"))
    assert not os.path.islink(os.path.join(root, "a"))


def test_write_new_file_mode_follows_umask(tmp_path):
    """A new file gets 0644 less the umask."""
    root = project(tmp_path)
    previous = os.umask(0o027)
    try:
        write(root, path="new.txt", content="x\n")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(os.path.join(root, "new.txt")).st_mode) == 0o640


def test_write_keeps_permission_bits(tmp_path):
    """A replaced executable stays executable, with exactly its old bits."""
    root = project(tmp_path)
    path = put(root, "run.sh", "#!/bin/sh\n", 0o755)
    write(root, path="run.sh", content="#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o755
    os.chmod(path, 0o600)
    write(root, path="run.sh", content="#!/bin/sh\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_write_content_cap_refused(tmp_path):
    """Content over MAX_WRITE_BYTES is refused and nothing is written."""
    root = project(tmp_path)
    before = snapshot(tmp_path)
    message = refusal(root, path="big.txt", content="x" * (files.MAX_WRITE_BYTES + 1))
    assert message == (f"the new content of big.txt is {files.MAX_WRITE_BYTES + 1} bytes, over the "
                       f"limit of {files.MAX_WRITE_BYTES} bytes; nothing written")
    assert snapshot(tmp_path) == before


def test_write_lone_surrogate_refused(tmp_path):
    """Content that cannot be UTF-8 (a lone surrogate from JSON) is refused."""
    root = project(tmp_path)
    assert "is not valid Unicode" in refusal(root, path="s.txt", content="a\ud800b")
    assert not os.path.exists(os.path.join(root, "s.txt"))


def test_write_folder_target_refused(tmp_path):
    """A folder is not a file to write."""
    root = project(tmp_path)
    os.makedirs(os.path.join(root, "src"))
    assert refusal(root, path="src", content="x") == "src is a folder, not a file"
    assert refusal(root, path=".", content="x") == ". is the project folder, not a file"


def test_write_parent_is_file_refused(tmp_path):
    """A path below a file cannot be created."""
    root = project(tmp_path)
    put(root, "a.txt", "x\n")
    before = snapshot(tmp_path)
    assert refusal(root, path="a.txt/b.txt", content="x") == "cannot write a.txt/b.txt: a.txt is not a folder"
    assert snapshot(tmp_path) == before


def test_write_fifo_target_refused(tmp_path):
    """A named pipe is not replaced."""
    root = project(tmp_path)
    os.mkfifo(os.path.join(root, "pipe"))
    assert refusal(root, path="pipe", content="x") == \
        "pipe is not a regular file (a device, socket or pipe); not changed"
    assert stat.S_ISFIFO(os.lstat(os.path.join(root, "pipe")).st_mode)


def test_write_env_file_allowed(tmp_path):
    """.env is written like any file: the permission layer, not the boundary, asks."""
    root = project(tmp_path)
    assert WriteTool().subjects({"path": ".env", "content": ""}, ToolContext(root, "s1")) == [".env"]
    write(root, path=".env", content="TOKEN=x\n")
    assert boundary.is_protected_env(".env")


@pytest.mark.parametrize("path, error", ADVERSARIAL)
def test_write_adversarial_path_refused(tmp_path, path, error):
    """Each path that leaves the project or enters .git is refused by subjects and run; nothing changes."""
    root = hostile(tmp_path)
    path = adversarial_path(tmp_path, path)
    before = snapshot(tmp_path)
    with pytest.raises(ToolError) as caught:
        WriteTool().subjects({"path": path, "content": "PWNED\n"}, ToolContext(root, "s1"))
    assert error in str(caught.value)
    assert error in refusal(root, path=path, content="PWNED\n")
    assert snapshot(tmp_path) == before


def test_write_symlink_inside_writes_target(tmp_path):
    """A link inside to a file inside is written through: the target changes, the link stays."""
    root = hostile(tmp_path)
    assert WriteTool().subjects({"path": "alias.txt", "content": ""},
                                ToolContext(root, "s1")) == ["real/data.txt"]
    result = write(root, path="alias.txt", content="three\n")
    assert result.data["path"] == "real/data.txt"
    assert os.path.islink(os.path.join(root, "alias.txt"))
    with open(os.path.join(root, "real/data.txt")) as handle:
        assert handle.read() == "three\n"


def test_write_symlink_folder_inside_allowed(tmp_path):
    """A linked folder inside the project is written through to the real folder."""
    root = project(tmp_path)
    os.makedirs(os.path.join(root, "real"))
    os.symlink(os.path.join(root, "real"), os.path.join(root, "linked"))
    assert write(root, path="linked/new.txt", content="x\n").data["path"] == "real/new.txt"
    assert os.path.isfile(os.path.join(root, "real/new.txt"))


def test_write_symlink_loop_refused(tmp_path):
    """A link that loops is refused, not replaced by a file."""
    root = project(tmp_path)
    os.symlink("loop", os.path.join(root, "loop"))
    assert refusal(root, path="loop", content="x") == "loop is a symbolic link that loops; not written"
    assert refusal(root, path="loop/inner.txt", content="x") == \
        "cannot write loop/inner.txt: loop is not a folder"
    assert os.path.islink(os.path.join(root, "loop"))


def test_write_hard_link_not_written_through(tmp_path):
    """A hard link to a file outside is replaced by a new file: the outside file keeps its bytes."""
    root = hostile(tmp_path)
    os.link(tmp_path / "outside" / "secret.txt", os.path.join(root, "hard.txt"))
    write(root, path="hard.txt", content="new\n")
    assert (tmp_path / "outside" / "secret.txt").read_text() == "SECRET\n"
    assert content_of(root, "hard.txt") == b"new\n"


def content_of(root: str, relative: str) -> bytes:
    with open(os.path.join(root, relative), "rb") as handle:
        return handle.read()


def test_write_run_rechecks_swapped_folder(tmp_path):
    """A folder swapped for a link out after subjects() is refused by run."""
    root = hostile(tmp_path)
    os.makedirs(os.path.join(root, "sub"))
    assert WriteTool().subjects({"path": "sub/x.txt", "content": ""},
                                ToolContext(root, "s1")) == ["sub/x.txt"]
    os.rmdir(os.path.join(root, "sub"))
    os.symlink(tmp_path / "outside", os.path.join(root, "sub"))
    before = snapshot(tmp_path)
    assert refusal(root, path="sub/x.txt", content="PWNED") == "sub/x.txt is outside the project"
    assert snapshot(tmp_path) == before


def test_write_atomic_refuses_folder_turned_link(tmp_path):
    """At the write itself, a folder on the way that became a link makes the write fail."""
    root = hostile(tmp_path)
    target = os.path.join(root, "sub", "x.txt")
    os.symlink(tmp_path / "outside", os.path.join(root, "sub"))
    before = snapshot(tmp_path)
    with pytest.raises(ToolError) as caught:
        files.write_atomic(root, target, b"PWNED", "sub/x.txt")
    assert str(caught.value) == ("cannot write sub/x.txt: sub is not a folder (or became a "
                                 "symbolic link); nothing written")
    assert snapshot(tmp_path) == before


def test_write_no_temp_file_left(tmp_path, monkeypatch):
    """No temporary file stays after a write, nor after a rename that fails."""
    root = project(tmp_path)
    put(root, "a.txt", "old\n")
    write(root, path="a.txt", content="new\n")
    assert temp_files(tmp_path) == []

    def failing_replace(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    before = snapshot(tmp_path)
    assert refusal(root, path="a.txt", content="newer\n") == "cannot write a.txt: No space left on device"
    assert refusal(root, path="n/e/w.txt", content="x") == "cannot write n/e/w.txt: No space left on device"
    assert temp_files(tmp_path) == []
    assert snapshot(tmp_path) == before


def test_write_subjects_normalized(tmp_path):
    """subjects() gives the normalized path relative to the project, also for a new file."""
    root = project(tmp_path)
    ctx = ToolContext(root, "s1")
    assert WriteTool().subjects({"path": "./src//new.py", "content": ""}, ctx) == ["src/new.py"]
    assert WriteTool().subjects({"path": os.path.join(root, "x.py"), "content": ""}, ctx) == ["x.py"]


def test_write_tools_declared(tmp_path):
    """write, edit and patch change files and have valid schemas."""
    registry = Registry([WriteTool(), EditTool(), PatchTool()])
    assert registry.names() == ["write", "edit", "patch"]
    assert all(registry.get(name).kind.changes and registry.get(name).kind.edits for name in registry.names())
    tool, args = registry.parse_arguments("write", '{"path": "a.txt", "content": "x"}')
    assert args == {"path": "a.txt", "content": "x"}
    with pytest.raises(ToolError, match="content"):
        registry.parse_arguments("write", '{"path": "a.txt"}')


def test_boundary_resolve_for_write_table(tmp_path):
    """resolve_for_write: inside paths resolve; .git, folders and the root are refused."""
    root = hostile(tmp_path)
    assert boundary.resolve_for_write(root, "new/file.txt") == os.path.join(root, "new", "file.txt")
    assert boundary.resolve_for_write(root, "alias.txt") == os.path.join(root, "real", "data.txt")
    assert boundary.resolve_for_write(root, ".gitignore") == os.path.join(root, ".gitignore")
    assert boundary.resolve_for_write(root, ".github/workflows/ci.yml").endswith("ci.yml")
    for path in (".git", ".git/config", "x/.git", "real", ".", "ext/a", "key.txt"):
        with pytest.raises(boundary.BoundaryError):
            boundary.resolve_for_write(root, path)
    assert boundary.is_git_path(".git/hooks/x") and boundary.is_git_path("a/.Git")
    assert not boundary.is_git_path(".github/x") and not boundary.is_git_path("a.git/x")
