"""The patch tool: parsing, applying, all or nothing, and every refusal."""

from __future__ import annotations

import asyncio
import os
import stat

import pytest

from totem.tools import ToolContext, ToolError
from totem.tools.patch import PatchTool

from .test_write import hostile, project, put, snapshot, temp_files


def patch(root: str, text: str):
    return asyncio.run(PatchTool().run({"patch": text}, ToolContext(root, "s1")))


def subjects(root: str, text: str) -> list[str]:
    return PatchTool().subjects({"patch": text}, ToolContext(root, "s1"))


def refusal(root: str, text: str) -> str:
    with pytest.raises(ToolError) as caught:
        patch(root, text)
    return str(caught.value)


def content(root: str, relative: str) -> bytes:
    with open(os.path.join(root, relative), "rb") as handle:
        return handle.read()


def numbered(count: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, count + 1))


MODIFY = """\
--- a/src/app.py
+++ b/src/app.py
@@ -1,3 +1,4 @@
 import os
-print(1)
+print(2)
+print(3)
 done()
"""


def test_patch_modifies_file(tmp_path):
    """A hunk changes a file; the result lists it with its +/- counts."""
    root = project(tmp_path)
    put(root, "src/app.py", "import os\nprint(1)\ndone()\n")
    result = patch(root, MODIFY)
    assert content(root, "src/app.py") == b"import os\nprint(2)\nprint(3)\ndone()\n"
    assert result.output == "applied the patch to 1 file:\n  modified src/app.py (+2 -1)"
    assert result.title == "patch: 1 file (+2 -1)"
    assert result.data == {"files": [{"path": "src/app.py", "change": "modified", "added": 2, "removed": 1}]}


def test_patch_multi_file_git(tmp_path):
    """A git diff with a change, a new file, a deletion and a rename applies whole."""
    root = project(tmp_path)
    put(root, "a.txt", "one\ntwo\nthree\n")
    put(root, "gone.txt", "x\ny\n")
    put(root, "old/name.txt", "keep\nme\n")
    text = """\
diff --git a/a.txt b/a.txt
index 1111111..2222222 100644
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
diff --git a/docs/new.md b/docs/new.md
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/docs/new.md
@@ -0,0 +1,2 @@
+# New
+text
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 4444444..0000000
--- a/gone.txt
+++ /dev/null
@@ -1,2 +0,0 @@
-x
-y
diff --git a/old/name.txt b/new/name.txt
similarity index 80%
rename from old/name.txt
rename to new/name.txt
index 5555555..6666666 100644
--- a/old/name.txt
+++ b/new/name.txt
@@ -1,2 +1,2 @@
 keep
-me
+you
"""
    assert subjects(root, text) == ["a.txt", "docs/new.md", "gone.txt", "old/name.txt", "new/name.txt"]
    result = patch(root, text)
    assert content(root, "a.txt") == b"one\nTWO\nthree\n"
    assert content(root, "docs/new.md") == b"# New\ntext\n"
    assert not os.path.exists(os.path.join(root, "gone.txt"))
    assert not os.path.exists(os.path.join(root, "old/name.txt"))
    assert content(root, "new/name.txt") == b"keep\nyou\n"
    assert result.output.split("\n") == [
        "applied the patch to 4 files:",
        "  modified a.txt (+1 -1)",
        "  added docs/new.md (+2 -0)",
        "  deleted gone.txt (+0 -2)",
        "  renamed old/name.txt → new/name.txt (+1 -1)",
    ]
    assert result.data["files"][3] == {"path": "new/name.txt", "change": "renamed", "added": 1,
                                       "removed": 1, "from": "old/name.txt"}
    assert result.title == "patch: 4 files (+4 -4)"


def test_patch_pure_rename_keeps_content_and_mode(tmp_path):
    """A rename without hunks moves the bytes and the permission bits."""
    root = project(tmp_path)
    put(root, "bin/tool", b"#!/bin/sh\n\xff binary is fine\n", 0o755)
    text = "diff --git a/bin/tool b/scripts/tool\nsimilarity index 100%\nrename from bin/tool\nrename to scripts/tool\n"
    assert subjects(root, text) == ["bin/tool", "scripts/tool"]
    assert patch(root, text).output == "applied the patch to 1 file:\n  renamed bin/tool → scripts/tool (+0 -0)"
    assert content(root, "scripts/tool") == b"#!/bin/sh\n\xff binary is fine\n"
    assert stat.S_IMODE(os.stat(os.path.join(root, "scripts/tool")).st_mode) == 0o755
    assert not os.path.exists(os.path.join(root, "bin/tool"))


def test_patch_delete_without_hunks(tmp_path):
    """A plain diff to /dev/null without hunks deletes the file and counts its lines."""
    root = project(tmp_path)
    put(root, "junk.txt", "a\nb\nc")
    result = patch(root, "--- a/junk.txt\n+++ /dev/null\n")
    assert result.data["files"] == [{"path": "junk.txt", "change": "deleted", "added": 0, "removed": 3}]
    assert not os.path.exists(os.path.join(root, "junk.txt"))


def test_patch_delete_leaving_lines_refused(tmp_path):
    """A deletion whose hunks do not remove every line is refused."""
    root = project(tmp_path)
    put(root, "a.txt", "a\nb\n")
    text = "diff --git a/a.txt b/a.txt\ndeleted file mode 100644\n--- a/a.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"
    assert refusal(root, text) == "the patch deletes a.txt but its hunks leave 1 lines in it. Nothing was written"
    assert content(root, "a.txt") == b"a\nb\n"


def test_patch_empty_new_file(tmp_path):
    """A git section with new file mode and no hunks creates an empty file."""
    root = project(tmp_path)
    result = patch(root, "diff --git a/empty.txt b/empty.txt\nnew file mode 100644\nindex 0000000..e69de29\n")
    assert result.data["files"] == [{"path": "empty.txt", "change": "added", "added": 0, "removed": 0}]
    assert content(root, "empty.txt") == b""


def test_patch_context_moved(tmp_path):
    """A hunk whose context moved applies where the context now is, and later hunks follow."""
    root = project(tmp_path)
    put(root, "n.txt", "new a\nnew b\nnew c\n" + numbered(30))
    text = """\
--- a/n.txt
+++ b/n.txt
@@ -4,3 +4,3 @@
 line 4
-line 5
+LINE 5
 line 6
@@ -20,3 +20,3 @@
 line 20
-line 21
+LINE 21
 line 22
"""
    patch(root, text)
    lines = content(root, "n.txt").decode().split("\n")
    assert lines[7] == "LINE 5" and lines[23] == "LINE 21"


def test_patch_nearest_place_chosen(tmp_path):
    """When the context occurs twice, the place nearest to the hunk's line number wins."""
    root = project(tmp_path)
    put(root, "r.txt", "x\nsame\nx\n" + "filler\n" * 20 + "x\nsame\nx\n")
    text = "--- a/r.txt\n+++ b/r.txt\n@@ -21,3 +21,3 @@\n x\n-same\n+changed\n x\n"
    patch(root, text)
    lines = content(root, "r.txt").decode().split("\n")
    assert lines[1] == "same" and lines[24] == "changed"


def test_patch_hunk_failure_shows_context(tmp_path):
    """A hunk that does not apply names the file and hunk, the expected lines and the actual ones."""
    root = project(tmp_path)
    put(root, "app.py", "def main():\n    x = 1\n    return x\n")
    before = snapshot(tmp_path)
    text = "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n def main():\n-    x = 2\n+    x = 3\n     return x\n"
    assert refusal(root, text).split("\n") == [
        "hunk 1 of app.py does not apply: @@ -1,3 +1,3 @@",
        "the patch expects at line 1:",
        "     1\tdef main():",
        "     2\t    x = 2",
        "     3\t    return x",
        "the file has at lines 1-3:",
        "     1\tdef main():",
        "     2\t    x = 1",
        "     3\t    return x",
        "context and removed lines must match the file exactly (read it again). Nothing was written",
    ]
    assert snapshot(tmp_path) == before


def test_patch_hunk_failure_points_to_similar_place(tmp_path):
    """When the context is elsewhere and slightly different, the most similar place is named."""
    root = project(tmp_path)
    put(root, "a.py", numbered(30) + "def main():\n    x = 1\n    return x\n")
    text = "--- a/a.py\n+++ b/a.py\n@@ -1,3 +1,3 @@\n def main():\n-    x = 2\n+    x = 3\n     return x\n"
    assert "\nthe most similar place starts at line 31 (97% similar)\n" in refusal(root, text)


def test_patch_already_applied_hint(tmp_path):
    """A patch applied twice says its new lines are there already."""
    root = project(tmp_path)
    put(root, "src/app.py", "import os\nprint(1)\ndone()\n")
    patch(root, MODIFY)
    assert "the new lines of this hunk are in the file already" in refusal(root, MODIFY)


def test_patch_second_hunk_fails_nothing_written(tmp_path):
    """When the second hunk of a file fails, no file of the patch is written."""
    root = project(tmp_path)
    put(root, "first.txt", "a\nb\n")
    put(root, "n.txt", numbered(10))
    before = snapshot(tmp_path)
    text = """\
--- a/first.txt
+++ b/first.txt
@@ -1,2 +1,2 @@
-a
+A
 b
--- a/n.txt
+++ b/n.txt
@@ -1,2 +1,2 @@
-line 1
+LINE 1
 line 2
@@ -8,2 +8,2 @@
-line 8 (not like this)
+LINE 8
 line 9
"""
    message = refusal(root, text)
    assert message.startswith("hunk 2 of n.txt does not apply: @@ -8,2 +8,2 @@\nthe patch expects at line 8:")
    assert "     8\tline 8 (not like this)" in message and "     8\tline 8\n" in message
    assert snapshot(tmp_path) == before


def test_patch_write_failure_restores_files(tmp_path, monkeypatch):
    """If writing the third file fails, the first two are restored and created folders removed."""
    root = project(tmp_path)
    put(root, "a.txt", "a\n", 0o755)
    put(root, "c.txt", "c\n")
    before = snapshot(tmp_path)
    text = """\
--- a/a.txt
+++ b/a.txt
@@ -1 +1 @@
-a
+A
--- /dev/null
+++ b/new/deep/b.txt
@@ -0,0 +1 @@
+b
--- a/c.txt
+++ b/c.txt
@@ -1 +1 @@
-c
+C
"""
    real_replace = os.replace
    calls = []

    def third_fails(*args, **kwargs):
        calls.append(args)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real_replace(*args, **kwargs)

    monkeypatch.setattr(os, "replace", third_fails)
    assert refusal(root, text) == ("cannot write c.txt: No space left on device; the files already "
                                   "changed were restored (a.txt, new/deep/b.txt): nothing was changed")
    assert snapshot(tmp_path) == before
    assert temp_files(tmp_path) == []


def test_patch_add_existing_refused(tmp_path):
    """Adding a file that exists is refused."""
    root = project(tmp_path)
    put(root, "a.txt", "x\n")
    assert refusal(root, "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+y\n") == \
        "cannot add a.txt: it exists already. Nothing was written"
    assert content(root, "a.txt") == b"x\n"


def test_patch_modify_missing_refused(tmp_path):
    """Changing a file that does not exist is refused."""
    root = project(tmp_path)
    assert refusal(root, MODIFY) == "cannot change src/app.py: it does not exist. Nothing was written"
    assert os.listdir(root) == []


def test_patch_delete_missing_refused(tmp_path):
    """Deleting a file that does not exist is refused."""
    root = project(tmp_path)
    assert refusal(root, "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n") == \
        "cannot delete gone.txt: it does not exist. Nothing was written"


def test_patch_rename_onto_existing_refused(tmp_path):
    """Renaming onto a file that exists is refused."""
    root = project(tmp_path)
    put(root, "a.txt", "a\n")
    put(root, "b.txt", "b\n")
    before = snapshot(tmp_path)
    text = "diff --git a/a.txt b/b.txt\nrename from a.txt\nrename to b.txt\n"
    assert refusal(root, text) == "cannot rename to b.txt: it exists already. Nothing was written"
    assert snapshot(tmp_path) == before


def test_patch_no_newline_at_end_of_file(tmp_path):
    """'\\ No newline at end of file' removes or adds the last newline."""
    root = project(tmp_path)
    put(root, "a.txt", "one\ntwo")
    patch(root, "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,3 @@\n one\n-two\n\\ No newline at end of file\n+two\n+three\n")
    assert content(root, "a.txt") == b"one\ntwo\nthree\n"
    patch(root, "--- a/a.txt\n+++ b/a.txt\n@@ -2,2 +2,2 @@\n two\n-three\n+THREE\n\\ No newline at end of file\n")
    assert content(root, "a.txt") == b"one\ntwo\nTHREE"


def test_patch_line_after_last_without_newline(tmp_path):
    """A line added after a last line without newline gets a newline in between."""
    root = project(tmp_path)
    put(root, "a.txt", "one\ntwo")
    patch(root, "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2,2 @@\n two\n+three\n")
    assert content(root, "a.txt") == b"one\ntwo\nthree\n"


def test_patch_crlf_file_stays_crlf(tmp_path):
    """A patch written with LF applies to a CRLF file; added lines get CRLF."""
    root = project(tmp_path)
    put(root, "win.txt", b"one\r\ntwo\r\nthree\r\n")
    patch(root, "--- a/win.txt\n+++ b/win.txt\n@@ -1,3 +1,4 @@\n one\n-two\n+TWO\n+2.5\n three\n")
    assert content(root, "win.txt") == b"one\r\nTWO\r\n2.5\r\nthree\r\n"


def test_patch_crlf_patch_text(tmp_path):
    """A patch whose own lines end with CRLF applies to an LF file."""
    root = project(tmp_path)
    put(root, "a.txt", "one\ntwo\n")
    patch(root, "--- a/a.txt\r\n+++ b/a.txt\r\n@@ -1,2 +1,2 @@\r\n one\r\n-two\r\n+2\r\n")
    assert content(root, "a.txt") == b"one\n2\n"


def test_patch_keeps_permission_bits(tmp_path):
    """An executable script stays executable (0755) after a patch."""
    root = project(tmp_path)
    path = put(root, "run.sh", "#!/bin/sh\necho one\n", 0o755)
    patch(root, "--- a/run.sh\n+++ b/run.sh\n@@ -1,2 +1,2 @@\n #!/bin/sh\n-echo one\n+echo two\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o755
    assert content(root, "run.sh") == b"#!/bin/sh\necho two\n"


def test_patch_mode_lines(tmp_path):
    """new file mode 100755 makes an executable; old mode/new mode changes the execute bits."""
    root = project(tmp_path)
    previous = os.umask(0o022)
    try:
        patch(root, "diff --git a/x.sh b/x.sh\nnew file mode 100755\n--- /dev/null\n+++ b/x.sh\n@@ -0,0 +1 @@\n+echo\n")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(os.path.join(root, "x.sh")).st_mode) == 0o755
    patch(root, "diff --git a/x.sh b/x.sh\nold mode 100755\nnew mode 100644\n")
    assert stat.S_IMODE(os.stat(os.path.join(root, "x.sh")).st_mode) == 0o644
    assert content(root, "x.sh") == b"echo\n"


def test_patch_miscounted_hunks_apply(tmp_path):
    """Hunk counts that are too large or too small do not lose or swallow lines."""
    root = project(tmp_path)
    put(root, "a.txt", "one\ntwo\nthree\n")
    put(root, "b.txt", "uno\ndos\ntres\n")
    text = """\
--- a/a.txt
+++ b/a.txt
@@ -1,9 +1,9 @@
 one
-two
+2
 three
--- a/b.txt
+++ b/b.txt
@@ -1,1 +1,1 @@
 uno
-dos
+2
 tres
"""
    assert subjects(root, text) == ["a.txt", "b.txt"]
    patch(root, text)
    assert content(root, "a.txt") == b"one\n2\nthree\n"
    assert content(root, "b.txt") == b"uno\n2\ntres\n"


def test_patch_empty_line_is_blank_context(tmp_path):
    """An empty line inside a hunk is an empty context line (editors strip its space)."""
    root = project(tmp_path)
    put(root, "a.py", "def f():\n\n    return 1\n")
    patch(root, "--- a/a.py\n+++ b/a.py\n@@ -1,3 +1,3 @@\n def f():\n\n-    return 1\n+    return 2\n")
    assert content(root, "a.py") == b"def f():\n\n    return 2\n"


def test_patch_insertion_hunk(tmp_path):
    """A hunk with no old lines (-l,0) inserts after line l."""
    root = project(tmp_path)
    put(root, "a.txt", "1\n2\n3\n")
    patch(root, "--- a/a.txt\n+++ b/a.txt\n@@ -2,0 +3,2 @@\n+2.1\n+2.2\n")
    assert content(root, "a.txt") == b"1\n2\n2.1\n2.2\n3\n"
    assert "it inserts after line 9, but the file has only 5 lines" in \
        refusal(root, "--- a/a.txt\n+++ b/a.txt\n@@ -9,0 +10 @@\n+x\n")


def test_patch_bare_hunk_header(tmp_path):
    """A hunk header without line numbers ('@@') applies where its context is."""
    root = project(tmp_path)
    put(root, "a.txt", numbered(20))
    patch(root, "--- a/a.txt\n+++ b/a.txt\n@@\n line 14\n-line 15\n+fifteen\n")
    assert content(root, "a.txt").decode().split("\n")[14] == "fifteen"


def test_patch_plain_diff_without_prefixes(tmp_path):
    """A diff -u header without a/ b/ and with timestamps names the file as it is."""
    root = project(tmp_path)
    put(root, "b/x.txt", "old\n")
    text = "--- b/x.txt\t2024-01-01 10:00:00\n+++ b/x.txt\t2024-01-02 10:00:00\n@@ -1 +1 @@\n-old\n+new\n"
    assert subjects(root, text) == ["b/x.txt"]
    patch(root, text)
    assert content(root, "b/x.txt") == b"new\n"


def test_patch_quoted_git_names(tmp_path):
    """git's C-quoted names (spaces, non-ASCII as octal) are unquoted."""
    root = project(tmp_path)
    put(root, "my file é.txt", "x\n")
    text = ('diff --git "a/my file \\303\\251.txt" "b/my file \\303\\251.txt"\n'
            '--- "a/my file \\303\\251.txt"\n+++ "b/my file \\303\\251.txt"\n@@ -1 +1 @@\n-x\n+y\n')
    assert subjects(root, text) == ["my file é.txt"]
    patch(root, text)
    assert content(root, "my file é.txt") == b"y\n"


def test_patch_preamble_ignored(tmp_path):
    """Text before the first file (a commit message, a fence) is ignored."""
    root = project(tmp_path)
    put(root, "a.txt", "a\n")
    patch(root, "From 123 Mon Sep 17 00:00:00 2001\nSubject: fix\n\n- a bullet\n---\n a.txt | 2 +-\n\n"
                "```diff\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+b\n```\n")
    assert content(root, "a.txt") == b"b\n"


def test_patch_symlink_inside_patches_target(tmp_path):
    """A link inside to a file inside is patched through; its subject is the real file."""
    root = hostile(tmp_path)
    text = "--- a/alias.txt\n+++ b/alias.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n"
    assert subjects(root, text) == ["real/data.txt"]
    patch(root, text)
    assert content(root, "real/data.txt") == b"one\n2\n"
    assert os.path.islink(os.path.join(root, "alias.txt"))


def test_patch_same_file_twice_refused(tmp_path):
    """Two sections for one file (also through a link) are refused."""
    root = hostile(tmp_path)
    before = snapshot(tmp_path)
    one = "--- a/real/data.txt\n+++ b/real/data.txt\n@@ -1 +1 @@\n-one\n+1\n"
    two = "--- a/alias.txt\n+++ b/alias.txt\n@@ -2 +2 @@\n-two\n+2\n"
    assert refusal(root, one + two) == ("real/data.txt is changed by two sections of the patch; put "
                                        "all of its hunks in one section. Nothing was written")
    assert snapshot(tmp_path) == before


def test_patch_two_names_without_rename_refused(tmp_path):
    """--- and +++ naming different files without rename lines is refused."""
    root = project(tmp_path)
    put(root, "a.txt", "a\n")
    assert refusal(root, "--- a/a.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-a\n+b\n").startswith(
        "line 1 of the patch: the section names two files (a.txt and b.txt); to rename a file")


@pytest.mark.parametrize("text, error", [
    ("just some text\n", "the patch has no file"),
    ("@@ -1 +1 @@\n-a\n+b\n", "line 1 of the patch: a hunk before any file header"),
    ("--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n a\nb\n-c\n+d\n",
     "line 5 of the patch, in hunk '@@ -1,2 +1,2 @@' of a.txt, starts with neither a space"),
    ("--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+b\n\nstray text\n+lost\n",
     "line 8 of the patch is a change line outside any hunk: '+lost'"),
    ("--- a/a.txt\n+++ b/a.txt\n@@ -x +1 @@\n-a\n", "line 3 of the patch: '@@ -x +1 @@' is not a hunk header"),
    ("diff --git a/p.png b/p.png\nGIT binary patch\nliteral 5\n", "binary changes are not supported"),
    ("diff --git a/a b/b\ncopy from a\ncopy to b\n", "copies are not supported"),
    ("diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+t\n",
     "mode 120000 is not supported"),
    ("--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n", "has no lines"),
    ("--- /dev/null\n+++ /dev/null\n", "names no file"),
    ("diff --git a/a.txt b/a.txt\nrename from a.txt\n", "a rename needs both 'rename from' and 'rename to'"),
    ("diff --git a/a.txt b/c.txt\nrename from a.txt\nrename to c.txt\n--- a/a.txt\n+++ b/d.txt\n",
     "'rename from'/'rename to' (a.txt → c.txt) do not match the names of the section"),
])
def test_patch_malformed_refused(tmp_path, text, error):
    """A malformed patch is refused by subjects and run, saying which line is wrong."""
    root = project(tmp_path)
    put(root, "a.txt", "a\nb\nc\n")
    before = snapshot(tmp_path)
    with pytest.raises(ToolError) as caught:
        subjects(root, text)
    assert error in str(caught.value)
    assert error in refusal(root, text)
    assert snapshot(tmp_path) == before


def _modify(path: str, old: str = "SECRET", new: str = "PWNED") -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


def _add(path: str) -> str:
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+PWNED\n"


def _rename(source: str, dest: str) -> str:
    return f"diff --git a/{source} b/{dest}\nrename from {source}\nrename to {dest}\n"


GOOD = "--- a/good.txt\n+++ b/good.txt\n@@ -1 +1 @@\n-good\n+changed\n"


@pytest.mark.parametrize("text, error", [
    (_modify("../outside/secret.txt"), "../outside/secret.txt is outside the project"),
    (_add("../escape.txt"), "../escape.txt is outside the project"),
    (_modify("OUTSIDE/secret.txt"), "is outside the project"),
    (_add("~/x.txt"), "~ is not expanded here"),
    (_modify("ext/secret.txt"), "ext/secret.txt is outside the project"),
    (_add("ext/new.txt"), "ext/new.txt is outside the project"),
    (_modify("key.txt"), "key.txt is outside the project"),
    (_add("dangling.txt"), "dangling.txt is outside the project"),
    (_modify(".git/config", "[core]"), ".git/config is inside a .git folder"),
    (_add(".git/hooks/x"), ".git/hooks/x is inside a .git folder"),
    (_modify("gitconfig", "[core]"), "gitconfig is inside a .git folder"),
    (_modify("a\x00b"), "the path contains a NUL byte"),
    (_rename("real/data.txt", "../stolen.txt"), "../stolen.txt is outside the project"),
    (_rename("real/data.txt", "ext/stolen.txt"), "ext/stolen.txt is outside the project"),
    (_rename("real/data.txt", ".git/hooks/post-checkout"), "is inside a .git folder"),
    (_rename("../outside/secret.txt", "here.txt"), "../outside/secret.txt is outside the project"),
    (_rename("key.txt", "here.txt"), "key.txt is outside the project"),
    ("--- a/ext/secret.txt\n+++ /dev/null\n", "ext/secret.txt is outside the project"),
    (GOOD + _modify("../outside/secret.txt"), "../outside/secret.txt is outside the project"),
    (GOOD + _add(".git/hooks/pre-push"), ".git/hooks/pre-push is inside a .git folder"),
])
def test_patch_adversarial_target_refused(tmp_path, text, error):
    """A target, rename source or rename destination outside the project or in .git is refused
    by subjects and run, and nothing is written (not even the good file of the same patch)."""
    root = hostile(tmp_path)
    put(root, "good.txt", "good\n")
    text = text.replace("OUTSIDE", str(tmp_path / "outside"))
    before = snapshot(tmp_path)
    with pytest.raises(ToolError) as caught:
        subjects(root, text)
    assert error in str(caught.value)
    assert error in refusal(root, text)
    assert snapshot(tmp_path) == before


def test_patch_run_rechecks_swapped_link(tmp_path):
    """A file swapped for a link out after subjects() is refused by run."""
    root = hostile(tmp_path)
    put(root, "conf.txt", "SECRET\n")
    assert subjects(root, _modify("conf.txt")) == ["conf.txt"]
    os.unlink(os.path.join(root, "conf.txt"))
    os.symlink(tmp_path / "outside" / "secret.txt", os.path.join(root, "conf.txt"))
    before = snapshot(tmp_path)
    assert refusal(root, _modify("conf.txt")) == "conf.txt is outside the project"
    assert snapshot(tmp_path) == before


def test_patch_binary_and_non_utf8_refused(tmp_path):
    """Hunks for a binary or non-UTF-8 file are refused; nothing is written."""
    root = project(tmp_path)
    put(root, "b.bin", b"\x00\x01\x02\n")
    put(root, "latin.txt", "café\n".encode("latin-1"))
    assert refusal(root, _modify("b.bin", "x", "y")) == "binary file b.bin (4 bytes); not changed"
    assert refusal(root, _modify("latin.txt", "x", "y")).startswith("latin.txt is not UTF-8 text")


def test_patch_no_temp_files_left(tmp_path):
    """No temporary file stays after a patch that applies or one that fails."""
    root = project(tmp_path)
    put(root, "src/app.py", "import os\nprint(1)\ndone()\n")
    patch(root, MODIFY)
    refusal(root, MODIFY)
    assert temp_files(tmp_path) == []


ENVELOPE = """*** Begin Patch
*** Add File: docs/new.md
+# New
+text
*** Update File: src/app.py
@@ def main():
 import os
-print(1)
+print(2)
*** Delete File: old.txt
*** Update File: a.txt
*** Move to: b.txt
@@
 keep
-drop
+add
*** End Patch
"""


def test_begin_patch_envelope_applies_like_a_diff(tmp_path):
    """The `*** Begin Patch` envelope: an added, an updated, a deleted and a moved file."""
    root = project(tmp_path)
    put(root, "src/app.py", "import os\nprint(1)\ndone()\n")
    put(root, "old.txt", "bye\n")
    put(root, "a.txt", "keep\ndrop\n")
    assert sorted(subjects(root, ENVELOPE)) == ["a.txt", "b.txt", "docs/new.md", "old.txt", "src/app.py"]
    result = patch(root, ENVELOPE)
    assert content(root, "docs/new.md") == b"# New\ntext\n"
    assert content(root, "src/app.py") == b"import os\nprint(2)\ndone()\n"
    assert content(root, "b.txt") == b"keep\nadd\n"
    assert not os.path.exists(os.path.join(root, "old.txt"))
    assert not os.path.exists(os.path.join(root, "a.txt"))
    assert "4 files" in result.title


@pytest.mark.parametrize("text, words", [
    ("*** Begin Patch\n*** Add File: x.txt\n+x\n", "must end with"),
    ("*** Begin Patch\n*** Frobnicate: x\n*** End Patch\n", "expected '*** Add File:'"),
    ("*** Begin Patch\n*** Add File: x.txt\nno plus\n*** End Patch\n", "starts with '+'"),
    ("*** Begin Patch\n*** Update File: a.txt\n@@\n?what\n*** End Patch\n", "not a change line"),
    ("*** Begin Patch\n*** Add File: ../outside.txt\n+x\n*** End Patch\n", "outside"),
    ("*** Begin Patch\n*** Update File: a.txt\n@@\n-not there\n+x\n*** End Patch\n", "a.txt"),
])
def test_begin_patch_envelope_refusals(tmp_path, text, words):
    """A malformed envelope, a path outside the project or a hunk that does not match is refused
    with a reason, and nothing is written."""
    root = project(tmp_path)
    put(root, "a.txt", "keep\n")
    before = snapshot(root)
    assert words in refusal(root, text)
    assert snapshot(root) == before
