"""The bash tool: subjects, the report of how a command ended, streaming, titles and refusals."""

from __future__ import annotations

import asyncio

import pytest

from tests.tools.trees import project
from totem.tools import Registry, ToolContext, ToolError, bash as bash_module
from totem.tools.bash import BashTool


def bash(root: str, emit=None, **args):
    return asyncio.run(BashTool().run(args, ToolContext(root, "s1", emit=emit)))


def test_bash_subjects_whole_line(tmp_path):
    """The permission subject is the whole command line, not split here."""
    root = project(tmp_path)
    line = "git status --short && rm -rf build; echo $(date) | tee out.txt"
    assert BashTool().subjects({"command": line}, ToolContext(root, "s1")) == [line]


def test_bash_schema_limits():
    """The registry accepts the tool; timeout is 1..600 seconds and command is required."""
    registry = Registry([BashTool()])
    tool, args = registry.parse_arguments("bash", '{"command": "ls", "timeout": 600}')
    assert tool.kind.changes and args == {"command": "ls", "timeout": 600}
    for bad in ('{"command": "ls", "timeout": 0}', '{"command": "ls", "timeout": 601}',
                '{"timeout": 5}', '{"command": ""}', '{"command": "ls", "cwd": "/"}'):
        with pytest.raises(ToolError):
            registry.parse_arguments("bash", bad)


def test_bash_nonzero_exit_is_result(tmp_path):
    """A failing command returns its output and exit code, not a ToolError."""
    result = bash(project(tmp_path), command="echo out; echo err >&2; exit 2")
    assert result.output == "out\nerr\n[exit code 2]"
    assert result.data["exit_code"] == 2
    assert result.data["timed_out"] is False and result.data["cut_bytes"] == 0
    assert isinstance(result.data["duration_ms"], int)
    assert set(result.data) == {"exit_code", "timed_out", "duration_ms", "cut_bytes"}


def test_bash_no_output_said(tmp_path):
    """A silent command says so above its exit code."""
    assert bash(project(tmp_path), command="true").output == "(no output)\n[exit code 0]"


def test_bash_runs_in_project_root(tmp_path):
    """The command runs in the project root."""
    root = project(tmp_path)
    assert bash(root, command="pwd -P").output == f"{root}\n[exit code 0]"


def test_bash_timeout_reported(tmp_path):
    """A command past its timeout is reported as timed out, with its output so far."""
    result = bash(project(tmp_path), command="echo begun; sleep 100", timeout=1)
    assert result.output == "begun\n[timed out after 1 s; the process group was killed]"
    assert result.data["timed_out"] is True
    assert 1000 <= result.data["duration_ms"] < 4000


def test_bash_signal_reported(tmp_path):
    """A shell ended by a signal is reported by the signal's name."""
    result = bash(project(tmp_path), command="kill -KILL $$")
    assert result.output == "(no output)\n[killed by signal SIGKILL]"
    assert result.data["exit_code"] == -9


def test_bash_background_leftovers_noted(tmp_path):
    """Processes left in the background are stopped, and the model is told."""
    result = bash(project(tmp_path), command="sleep 100 & echo started")
    assert result.output == ("started\n[exit code 0]\n"
                             "[processes it left running in the background were stopped]")


def test_bash_emit_streams_output(tmp_path):
    """Output goes to ctx.emit as it comes, all of it."""
    emitted: list[str] = []
    result = bash(project(tmp_path), emit=emitted.append, command="echo a; sleep 0.2; echo b")
    assert "".join(emitted) == "a\nb\n"
    assert emitted[0] == "a\n"
    assert result.output == "a\nb\n[exit code 0]"


def test_bash_emit_bounded(tmp_path, monkeypatch):
    """Live output stops at MAX_STREAM_CHARS with one note; the result still has head and tail."""
    monkeypatch.setattr(bash_module, "MAX_STREAM_CHARS", 1000)
    emitted: list[str] = []
    result = bash(project(tmp_path), emit=emitted.append,
                  command="head -c 5000 /dev/zero | tr '\\0' a; echo; echo end")
    assert emitted[-1] == bash_module.STREAM_STOPPED_NOTE
    assert "".join(emitted[:-1]) == "a" * 1000
    assert result.output.endswith("end\n[exit code 0]")


def test_bash_output_cap_reported(tmp_path):
    """Output over the cap keeps head and tail; cut_bytes says how much went."""
    size = bash_module.OUTPUT_CAP_BYTES * 3
    result = bash(project(tmp_path), command=f"head -c {size} /dev/zero | tr '\\0' a")
    cut = size - bash_module.OUTPUT_CAP_BYTES
    assert result.data["cut_bytes"] == cut
    assert f"\n[... {cut} bytes of output cut here ...]\n" in result.output
    assert result.output.endswith("a\n[exit code 0]")


def test_bash_title_from_description(tmp_path):
    """The title is the description when given, else the command on one line cut to 80 chars."""
    root = project(tmp_path)
    assert bash(root, command="true", description="Check the build").title == "Check the build"
    long = "echo " + "x" * 100 + "\n true"
    title = bash(root, command=long).title
    assert len(title) == 80 and title.startswith("echo xxx") and title.endswith("…")
    assert bash(root, command="echo a\necho b").title == "echo a echo b"


def test_bash_cannot_start_is_tool_error(tmp_path):
    """A command that cannot start (the folder is gone) is a ToolError."""
    with pytest.raises(ToolError, match="could not start"):
        bash(str(tmp_path / "gone"), command="true")
