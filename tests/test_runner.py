"""The runner: real child processes, their environment, timeouts, kills, output cap and streaming."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import time

import pytest

from tests.utils import MS, wait_until_ended
from totem.process import runner
from totem.process.runner import CommandError, kill_group, minimal_environment, run_command, run_process

ALLOWED_VARIABLES = {"PATH", "HOME", "USER", "LANG", "TERM", "SHELL", "GIT_TERMINAL_PROMPT",
                     "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0",
                     "GIT_CONFIG_KEY_1", "GIT_CONFIG_VALUE_1"}
# A command printing 50 MB may not grow the test process by more than this.
MAX_RSS_GROWTH_KB = 30 * 1024
BIG_OUTPUT_BYTES = 50_000_000
# Kept in a test `sh -c` line: prints the shell's pid (the group id), then leaves two sleepers.
TREE = "echo $$; sleep 100 & sleep 100"


def run(command, folder, **options) -> runner.CommandResult:
    options.setdefault("timeout_s", 10_000 * MS)
    options.setdefault("output_cap_bytes", 100_000)
    return asyncio.run(run_command(command, cwd=str(folder), **options))


def running_members(pgid: int) -> dict[int, str]:
    """The members of a group that still run (zombies waiting for init do not)."""
    return {pid: state for pid, state in runner.group_states(pgid).items() if state != "Z"}


def assert_group_gone(pgid: int) -> None:
    """Nothing of the group runs, the shell is reaped, and what is left of the group are
    orphans' zombies for init to reap (whenever it does)."""
    assert running_members(pgid) == {}
    with pytest.raises(ChildProcessError):  # reaped by asyncio: no zombie of ours
        os.waitpid(pgid, os.WNOHANG)
    for pid in runner.group_states(pgid):
        wait_until_ended(pid, lambda: f"process group {pgid} ({runner.group_states(pgid)})")


def test_run_command_exit_code(tmp_path):
    """The shell's exit status comes back; 0 for success."""
    assert run("exit 3", tmp_path).exit_code == 3
    result = run("true", tmp_path)
    assert (result.exit_code, result.output, result.timed_out, result.killed) == (0, "", False, False)


def test_run_command_output_merged_in_order(tmp_path):
    """stdout and stderr arrive in one stream, in the order they were written."""
    result = run("echo one; echo two >&2; echo three; echo four >&2", tmp_path)
    assert result.output == "one\ntwo\nthree\nfour\n"
    assert result.cut_bytes == 0


def test_run_command_cwd_is_folder(tmp_path):
    """The command runs in the given folder."""
    assert run("pwd -P", tmp_path).output == os.path.realpath(tmp_path) + "\n"


def test_run_command_argv_without_shell(tmp_path):
    """A list runs as argv, without a shell reading it."""
    assert run(["printf", "%s|", "a b", "$HOME"], tmp_path).output == "a b|$HOME|"


def test_run_command_env_holds_no_server_variables(tmp_path, monkeypatch):
    """`env` in the child shows only the minimal variables, none of the server's."""
    monkeypatch.setenv("TOTEM_SECRET_TEST", "x")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    monkeypatch.setenv("TERM", "xterm-256color")
    output = run("env", tmp_path).output
    variables = dict(line.split("=", 1) for line in output.splitlines())
    assert set(variables) - {"PWD", "SHLVL", "_", "OLDPWD"} <= ALLOWED_VARIABLES  # sh adds these
    assert "TOTEM_SECRET_TEST" not in variables and "OPENAI_API_KEY" not in variables
    assert "sk-test-not-a-key" not in output
    assert variables["PATH"] == os.environ["PATH"]
    assert variables["HOME"]
    assert variables["TERM"] == "dumb"
    assert variables["GIT_TERMINAL_PROMPT"] == "0"


def test_run_command_env_adds_variables(tmp_path):
    """`env` adds variables over the minimal environment."""
    assert run("echo $EXTRA:$TERM", tmp_path, env={"EXTRA": "yes"}).output == "yes:dumb\n"


def test_minimal_environment_exact_keys(monkeypatch):
    """The minimal environment is PATH, HOME, USER, LANG, TERM, SHELL and git's safety switches."""
    monkeypatch.setenv("USER", "someone")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    env = minimal_environment()
    assert set(env) == ALLOWED_VARIABLES
    assert env["GIT_CONFIG_KEY_0"] == "core.fsmonitor" and env["GIT_CONFIG_VALUE_0"] == "false"
    assert env["GIT_CONFIG_KEY_1"] == "core.hooksPath" and env["GIT_CONFIG_VALUE_1"] == "/dev/null"


def test_run_command_stdin_closed(tmp_path):
    """stdin is closed: `cat` ends at once instead of waiting for input."""
    result = run("cat; echo after", tmp_path, timeout_s=5000 * MS)
    assert (result.exit_code, result.output, result.timed_out) == (0, "after\n", False)
    assert result.duration_s < 2000 * MS


def test_run_command_missing_folder_refused(tmp_path):
    """A folder that does not exist is a CommandError naming it."""
    with pytest.raises(CommandError, match="missing"):
        run("true", tmp_path / "missing")


def test_run_command_missing_program_refused(tmp_path):
    """An argv whose program does not exist is a CommandError."""
    with pytest.raises(CommandError, match="could not start"):
        run(["/nonexistent/program"], tmp_path)


def test_run_command_timeout_kills(tmp_path):
    """`sleep 100` past its timeout ends in about the timeout, reported as timed out and killed."""
    result = run("echo started; sleep 100", tmp_path, timeout_s=500 * MS)
    assert result.timed_out and result.killed
    assert result.output == "started\n"
    assert result.exit_code == -signal.SIGTERM
    assert 500 * MS <= result.duration_s < 2500 * MS


def test_run_command_timeout_kills_tree(tmp_path):
    """On a timeout the whole group goes: the shell and both sleepers, none left as a zombie."""
    result = run(TREE, tmp_path, timeout_s=500 * MS)
    assert result.timed_out and result.killed
    assert_group_gone(int(result.output.split()[0]))


def test_run_command_cancel_kills_tree(tmp_path):
    """Cancelling the awaiting task kills the group within a second, then re-raises."""
    async def scenario():
        seen: list[str] = []
        started = asyncio.Event()

        def on_output(text):
            seen.append(text)
            started.set()

        task = asyncio.create_task(run_command(TREE, cwd=str(tmp_path), timeout_s=100,
                                               output_cap_bytes=1000, on_output=on_output))
        await asyncio.wait_for(started.wait(), 5000 * MS)
        pgid = int("".join(seen).split()[0])
        assert running_members(pgid)
        task.cancel()
        began = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pgid, time.monotonic() - began

    pgid, took = asyncio.run(scenario())
    assert took < 1000 * MS
    assert_group_gone(pgid)


def test_run_command_background_leftovers_stopped(tmp_path):
    """A command that leaves `sleep &` behind returns when the shell exits; the sleeper is stopped."""
    result = run("echo $$; sleep 100 & echo done", tmp_path)
    assert (result.exit_code, result.timed_out, result.killed) == (0, False, True)
    assert result.output.split()[1] == "done"
    assert result.duration_s < 3000 * MS
    assert_group_gone(int(result.output.split()[0]))


def test_run_command_background_redirected_stopped(tmp_path):
    """A background process that let go of the output pipe is stopped as well."""
    result = run("echo $$; sleep 100 >/dev/null 2>&1 &", tmp_path)
    assert (result.exit_code, result.killed) == (0, True)
    assert_group_gone(int(result.output.split()[0]))


def test_kill_group_term_ignored_gets_sigkill(tmp_path):
    """kill_group on a Process: a group that ignores SIGTERM gets SIGKILL after the grace."""
    async def scenario():
        process = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", "trap '' TERM; sleep 100 & sleep 100", cwd=str(tmp_path),
            stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
        await asyncio.sleep(200 * MS)
        began = time.monotonic()
        signalled = await kill_group(process, grace_s=300 * MS)
        return process, signalled, time.monotonic() - began

    process, signalled, took = asyncio.run(scenario())
    assert signalled
    assert process.returncode == -signal.SIGKILL
    assert 300 * MS <= took < 2000 * MS
    assert_group_gone(process.pid)


def test_run_command_output_cap_keeps_head_and_tail(tmp_path):
    """50 MB of output keeps its head and tail, says how much was cut, and keeps memory flat."""
    streamed = [0]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run(f"printf HEAD; head -c {BIG_OUTPUT_BYTES} /dev/zero | tr '\\0' a; printf TAIL",
                 tmp_path, timeout_s=60_000 * MS, output_cap_bytes=10_000,
                 on_output=lambda text: streamed.__setitem__(0, streamed[0] + len(text)))
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    total = BIG_OUTPUT_BYTES + 8
    assert result.exit_code == 0
    assert streamed[0] == total
    assert result.cut_bytes == total - 10_000
    head, marker, tail = result.output.split("\n")
    assert head == "HEAD" + "a" * 4996
    assert marker == f"[... {total - 10_000} bytes of output cut here ...]"
    assert tail == "a" * 4996 + "TAIL"
    assert growth < MAX_RSS_GROWTH_KB


def test_run_command_output_cap_on_character_boundaries(tmp_path):
    """A cut never splits a UTF-8 character; the split ones count as cut."""
    result = run("i=0; while [ $i -lt 3000 ]; do printf 'é'; i=$((i+1)); done", tmp_path,
                 output_cap_bytes=1001)
    head, marker, tail = result.output.split("\n")
    assert "\ufffd" not in result.output
    assert head == "é" * 250 and tail == "é" * 250
    assert result.cut_bytes == 6000 - 1000
    assert marker == "[... 5000 bytes of output cut here ...]"


def test_run_command_on_output_streams_before_exit(tmp_path):
    """on_output gets the first line while the command still runs."""
    chunks: list[tuple[float, str]] = []
    began = time.monotonic()
    result = run("echo first; sleep 0.3; echo second", tmp_path,
                 on_output=lambda text: chunks.append((time.monotonic() - began, text)))
    assert result.output == "first\nsecond\n"
    assert "".join(text for _, text in chunks) == "first\nsecond\n"
    first_at, first_text = chunks[0]
    assert first_text == "first\n"
    assert first_at < result.duration_s - 0.2


def test_run_command_split_utf8_decoded(tmp_path):
    """A character split across two chunks reaches on_output whole; an invalid byte is U+FFFD."""
    chunks: list[str] = []
    result = run("printf '\\303'; sleep 0.2; printf '\\251\\n\\377'", tmp_path,
                 on_output=chunks.append)
    assert "".join(chunks) == "é\n\ufffd"
    assert all(chunks)
    assert result.output == "é\n\ufffd"


def test_run_command_on_output_error_stops_group(tmp_path):
    """An on_output that raises stops the command, and its error reaches the caller."""
    def on_output(text):
        raise RuntimeError("listener broke")

    with pytest.raises(RuntimeError, match="listener broke"):
        run("echo $$; sleep 100", tmp_path, on_output=on_output)


# run_process: argv children with raw bytes, stderr apart, stdin, caps, and the group's end.

# Prints the leader's pid and its background sleeper's, then waits for the sleeper.
SPAWNER = ["/bin/sh", "-c", "sleep 100 & echo $$ $!; wait"]


def process(argv, folder, **options) -> runner.ProcessResult:
    options.setdefault("env", {"PATH": os.environ["PATH"]})
    options.setdefault("timeout_s", 10_000 * MS)
    options.setdefault("stdout_cap", 100_000)
    options.setdefault("stderr_cap", 100_000)
    return asyncio.run(run_process(argv, cwd=str(folder), **options))


def assert_process_gone(pid: int) -> None:
    """`pid` is over: killed, and reaped by us or, for an orphan, left to init (see `ended`)."""
    wait_until_ended(pid, f"process {pid}")


def test_run_process_stdout_and_stderr_apart_as_bytes(tmp_path):
    """stdout and stderr come back apart, as raw bytes, with the exit status."""
    result = process(["/bin/sh", "-c", r"printf 'out\377\000'; printf err >&2; exit 3"], tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (3, b"out\xff\x00", b"err")
    assert (result.timed_out, result.killed, result.stopped) == (False, False, False)
    assert (result.stdout_cut, result.stderr_cut) == (0, 0)


def test_run_process_stdin_fed_then_closed(tmp_path):
    """`stdin_bytes` reaches the child whole and then ends; without it stdin is closed."""
    data = b"line one\n\x00" + b"x" * 1_000_000
    assert process(["cat"], tmp_path, stdin_bytes=data, stdout_cap=2_000_000).stdout == data
    began = time.monotonic()
    result = process(["/bin/sh", "-c", "cat; echo after"], tmp_path)
    assert (result.returncode, result.stdout) == (0, b"after\n")
    assert time.monotonic() - began < 2000 * MS


def test_run_process_environment_exactly_given(tmp_path, monkeypatch):
    """The child's environment is exactly `env`: nothing of the server's is inherited."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    result = process(["/usr/bin/env"], tmp_path, env={"ONLY": "this"})
    assert result.stdout == b"ONLY=this\n"
    assert process(["/usr/bin/env"], tmp_path, env={}).stdout == b""


def test_run_process_cwd_is_folder(tmp_path):
    """The child runs in the given folder."""
    assert process(["pwd", "-P"], tmp_path).stdout == os.fsencode(os.path.realpath(tmp_path)) + b"\n"


def test_run_process_missing_program_raises_oserror(tmp_path):
    """A program or a folder that does not exist raises FileNotFoundError for the caller to word."""
    with pytest.raises(FileNotFoundError):
        process(["/nonexistent/program"], tmp_path)
    with pytest.raises(FileNotFoundError):
        process(["true"], tmp_path / "missing")
    with pytest.raises(ValueError):
        process([], tmp_path)
    with pytest.raises(ValueError, match="environment must be given"):
        process(["true"], tmp_path, env=None)


def test_run_process_caps_keep_heads_and_memory_flat(tmp_path):
    """50 MB on each stream keeps the first bytes of each up to its cap, counts the rest and
    keeps memory flat."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    line = (f"printf HEAD; head -c {BIG_OUTPUT_BYTES} /dev/zero; "
            f"printf ERR >&2; head -c {BIG_OUTPUT_BYTES} /dev/zero >&2")
    result = process(["/bin/sh", "-c", line], tmp_path, timeout_s=60_000 * MS,
                     stdout_cap=1000, stderr_cap=10)
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert result.returncode == 0
    assert result.stdout == b"HEAD" + b"\0" * 996
    assert result.stderr == b"ERR" + b"\0" * 7
    assert (result.stdout_cut, result.stderr_cut) == (BIG_OUTPUT_BYTES + 4 - 1000,
                                                      BIG_OUTPUT_BYTES + 3 - 10)
    assert growth < MAX_RSS_GROWTH_KB


def test_run_process_zero_cap_keeps_nothing_streams_all(tmp_path):
    """With a cap of 0 nothing is kept, and `on_stdout` still sees every byte."""
    seen = bytearray()
    result = process(["/bin/sh", "-c", "head -c 300000 /dev/zero"], tmp_path, stdout_cap=0,
                     on_stdout=seen.extend)
    assert (result.stdout, result.stdout_cut, len(seen)) == (b"", 300_000, 300_000)


def test_run_process_timeout_kills_group(tmp_path):
    """On the timeout the leader and its background grandchild are both gone."""
    began = time.monotonic()
    result = process(SPAWNER, tmp_path, timeout_s=500 * MS)
    assert result.timed_out and result.killed
    assert time.monotonic() - began < 3000 * MS
    leader, grandchild = map(int, result.stdout.split())
    assert result.returncode == -signal.SIGTERM
    assert not runner.group_running(leader)
    assert_process_gone(grandchild)
    assert_group_gone(leader)


def test_run_process_cancel_kills_group(tmp_path):
    """Cancelling the awaiting task stops the leader and its grandchild within a second."""
    async def scenario():
        seen = bytearray()
        started = asyncio.Event()

        def on_stdout(data):
            seen.extend(data)
            started.set()

        task = asyncio.create_task(run_process(
            SPAWNER, cwd=str(tmp_path), env={"PATH": os.environ["PATH"]}, timeout_s=100,
            stdout_cap=1000, stderr_cap=1000, on_stdout=on_stdout))
        await asyncio.wait_for(started.wait(), 5000 * MS)
        leader, grandchild = map(int, seen.split())
        assert runner.group_running(leader)
        task.cancel()
        began = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return leader, grandchild, time.monotonic() - began

    leader, grandchild, took = asyncio.run(scenario())
    assert took < 1000 * MS
    assert not runner.group_running(leader)
    assert_process_gone(grandchild)
    assert_group_gone(leader)


def test_run_process_cancel_while_starting_kills_group(tmp_path):
    """A cancellation at any step of the start, even while asyncio still connects the pipes,
    stops the whole group at once: asyncio's own clean-up would kill the leader alone and wait
    for the pipes its grandchild holds."""
    async def scenario(steps: int, pidfile: str) -> None:
        task = asyncio.create_task(run_process(
            ["/bin/sh", "-c", f"sleep 100 & echo $$ $! > {pidfile}; wait"], cwd=str(tmp_path),
            env={"PATH": os.environ["PATH"]}, timeout_s=100, stdout_cap=100, stderr_cap=100))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        async with asyncio.timeout(5000 * MS):
            with pytest.raises(asyncio.CancelledError):
                await task

    for steps in range(12):
        pidfile = str(tmp_path / f"pids-{steps}")
        asyncio.run(scenario(steps, pidfile))
        time.sleep(50 * MS)  # a shell cancelled before its echo never wrote the file
        if os.path.exists(pidfile):
            with open(pidfile) as handle:
                pids = [int(word) for word in handle.read().split()]
            if len(pids) == 2:  # both killed (init may reap the orphan a little later)
                assert running_members(pids[0]) == {}


def test_run_process_leftovers_stopped_after_leader_exits(tmp_path):
    """A grandchild left running when the leader exits is stopped, even one holding stdout."""
    for line in ("sleep 100 & echo $$ $!", "sleep 100 >/dev/null 2>&1 & echo $$ $!"):
        began = time.monotonic()
        result = process(["/bin/sh", "-c", line], tmp_path)
        assert (result.returncode, result.timed_out, result.killed) == (0, False, True)
        assert time.monotonic() - began < 3000 * MS
        leader, grandchild = map(int, result.stdout.split())
        assert_process_gone(grandchild)
        assert_group_gone(leader)


def test_run_process_on_stdout_enough_stops_group(tmp_path):
    """An `on_stdout` that has read enough stops the group at once; the result says so."""
    chunks = []

    def on_stdout(data):
        chunks.append(data)
        return sum(map(len, chunks)) > 100_000

    began = time.monotonic()
    result = process(["/bin/sh", "-c", "echo $$; exec yes"], tmp_path, stdout_cap=100,
                     on_stdout=on_stdout)
    assert result.stopped and result.killed and not result.timed_out
    assert time.monotonic() - began < 3000 * MS
    assert_group_gone(int(result.stdout.split()[0]))


def test_run_process_on_stdout_error_stops_group(tmp_path):
    """What `on_stdout` raises reaches the caller, after the group is stopped."""
    pids = []

    def on_stdout(data):
        pids.extend(map(int, data.split()))
        raise RuntimeError("reader broke")

    with pytest.raises(RuntimeError, match="reader broke"):
        process(SPAWNER, tmp_path, on_stdout=on_stdout)
    leader, grandchild = pids
    assert_process_gone(grandchild)
    assert_group_gone(leader)


def _hostile_repository(tmp_path):
    """A git repository whose fsmonitor and pre-commit hook each touch a marker file if run."""
    repo = tmp_path / "repo"
    repo.mkdir()
    plain_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=plain_env)
    markers = {}
    for name, place in (("fsmonitor", tmp_path / "fsmonitor.sh"),
                        ("hook", repo / ".git" / "hooks" / "pre-commit")):
        markers[name] = tmp_path / f"{name}-ran"
        place.write_text(f"#!/bin/sh\ntouch {markers[name]}\n")
        place.chmod(0o755)
    subprocess.run(["git", "-C", str(repo), "config", "core.fsmonitor", str(tmp_path / "fsmonitor.sh")],
                   check=True, env=plain_env)
    (repo / "file.txt").write_text("x\n")
    return repo, markers, plain_env


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_run_command_git_fsmonitor_not_run(tmp_path):
    """`git status` in a repository whose core.fsmonitor names a script does not run it."""
    repo, markers, plain_env = _hostile_repository(tmp_path)
    result = run("git status --short", repo)
    assert result.exit_code == 0 and "file.txt" in result.output
    assert not markers["fsmonitor"].exists()
    # Without the safety switches the same repository does run it: the test proves something.
    subprocess.run(["git", "status", "--short"], cwd=repo, capture_output=True, env=plain_env)
    assert markers["fsmonitor"].exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_run_command_git_hooks_not_run(tmp_path):
    """`git commit` does not run the repository's pre-commit hook."""
    repo, markers, plain_env = _hostile_repository(tmp_path)
    result = run("git add file.txt && git -c user.name=t -c user.email=t@example.com "
                 "commit -q -m one && git log --format=%s", repo)
    assert result.exit_code == 0, result.output
    assert result.output.endswith("one\n")
    assert not markers["hook"].exists()
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q",
                    "--allow-empty", "-m", "two"], cwd=repo, capture_output=True, env=plain_env)
    assert markers["hook"].exists()


def test_group_running_by_its_leader_then_by_its_members():
    """A group runs while its leader runs; once the leader is a zombie, while another member
    runs; a zombie leader alone is no running group, and a group with no process left neither."""
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; read line"], start_new_session=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    member = int(leader.stdout.readline())
    try:
        assert runner.group_running(leader.pid)
        leader.stdin.close()  # `read` ends: the leader exits, not reaped yet
        deadline = time.monotonic() + 10_000 * MS
        while runner.group_states(leader.pid).get(leader.pid) != "Z":
            assert time.monotonic() < deadline, runner.group_states(leader.pid)
            time.sleep(5 * MS)
        assert runner.group_running(leader.pid), "the member still runs"
        os.kill(member, signal.SIGKILL)
        wait_until_ended(member, f"member {member}")
        assert not runner.group_running(leader.pid), runner.group_states(leader.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
        leader.stdout.close()
        leader.wait()
    assert not runner.group_running(leader.pid)
