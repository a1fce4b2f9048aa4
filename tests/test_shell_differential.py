"""The splitter and the permission engine against the real shells: dash and bash run each line.

`shellwords.split_command()` claims to know every simple command that a line runs, and the
engine lets a rule allow a line on that claim alone. This test checks the claim where it matters,
against the shells themselves: thousands of lines, generated from a grammar of words, operators
and the constructs where shells differ, then mutated with punctuation, run by `dash -c` and
`bash -c` with a PATH that holds only logging stubs. Two checks per line and shell:

- misread: every stub that ran is one of the simple commands the split reported (same program,
  and the same argv when the reported one has no glob or `~`); a command may not run, none may
  run that the split did not see;
- bypass: under three rule sets, a line that the engine allows runs nothing but the commands it
  allowed, argv for argv, and leaves the sandbox as it was.

A line that asks is never run (it makes no claim), nor is one the safety filter refuses.

Safety (this runs as root on a shared machine). The vocabulary holds no builtin that could reach
out (kill, exec, eval, cd, source, `.`, set ...) and no absolute path but /dev/null; mutations add
punctuation only, never a letter or digit; `_unsafe()` refuses, independently of the splitter,
any line in which such a word could still form, any `/` outside a few fixed relative words and
/dev/null, `$0`, `$_`, `$PATH`, and function definitions that could recurse. Each shell runs
in its own session with an environment of PATH (the stubs), HOME (the sandbox) and LANG only,
stdin from /dev/null, a 2 s limit after which its whole group is killed, and, when the test runs
as root, as the user nobody, in a sandbox that nobody owns and stub folders it cannot write.
The test is the subreaper of what it starts, so that background commands are waited for (their
log records count) and reaped.

`TOTEM_DIFF_SEED` and `TOTEM_DIFF_LINES` explore more lines locally; the figures of the run are
printed at the end of the pytest output (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import posixpath
import pwd
import random
import re
import shutil
import signal
import stat
import tempfile
from collections import Counter
from dataclasses import dataclass

import pytest

from totem.security.permissions import Call, Rule, decide, split_command
from totem.tools import tool_kinds

BASH = tool_kinds()["bash"]

SEED = int(os.environ.get("TOTEM_DIFF_SEED", "20240601"))
LINES = int(os.environ.get("TOTEM_DIFF_LINES", "4000"))
SHELLS = ("dash", "bash")
TIMEOUT_S = 2.0  # per line and shell; then the whole process group is killed
GRACE_S = 0.5  # after a kill, how long to wait for the group to be gone
POLL_S = 0.002
CONCURRENCY = 4
MAX_FAILURES_SHOWN = 20
MAX_MUTATIONS = 3
# The figures of this run, one line each, printed by tests/conftest.py at the end of the run.
FIGURES: list[str] = []

RULE_SETS = {
    "defaults": [],
    "git status*": [Rule("bash", "git status*", "allow", "project")],
    "echo *": [Rule("bash", "echo *", "allow", "project")],
}

# --- the sandbox and the stubs ----------------------------------------------------------------

TREE = {"a.txt": b"hello\n", "b.txt": b"second\n", "x": b"keep me\n", "y": b"why\n",
        "src/app.py": b"print('app')\n"}
# Programs that are not shell built-ins: each is a stub that logs its argv.
STUBS = ("git", "ls", "rm", "cat", "touch", "sed", "grep", "find", "foo", "bar", "curl",
         "python3", "sh2", "env", "xargs", "make")
# The stub: its argument count, $0 and its arguments, each ended by NUL, into a file of its own
# (named by its pid) in the log folder, so that a pipeline's records never interleave.
STUB = """#!{shell}
printf '%s\\0' "$#" "$0" "$@" >>{log}/"$$"
exit 0
"""
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h

# --- the grammar ------------------------------------------------------------------------------

BUILTINS = ("echo", "printf", "true", "pwd")  # run by the shell itself: they leave no record
SAFE_FORMS = ("git status", "git status --short", "git status -s", "git status --porcelain",
              "ls", "ls -la", "ls -la src", "ls src", "ls -la a.txt", "pwd", "echo a")
PLAIN_ARGS = ("a", "b", "x", "y", "src", "a.txt", "b.txt", "out", "status", "log", "--short",
              "-s", "--porcelain", "-la", "-r", "-rf", "-n", "-e", "--", "-", "-c", "-exec",
              "{}", "+", "s,a,b,", "src/app.py", "-- -rf", "--help", "-l")
QUOTED_ARGS = ("'a b'", '"a b"', "'a;b'", '"a;b"', "'a&b'", '"a&&b"', "'a|b'", '"a||b"',
               "'#x'", '"#x"', "'$x'", "'a\\b'", '"a\\b"', '"a\\"b"', "'a\nb'", '"a\nb"',
               "''", '""', "'--short'", '"status"', "'rm x'", '"x;rm y"', "'\\'", "a'b'c",
               'a"b"c', "\\;", "\\&", "\\|", "\\#", "a\\ b", "\\'", '\\"', "'a\"b'", '"a\'b"',
               "'\\n'", '"a\\$x"', "'>out'", '"<a.txt"', "\\>out", "'-la'", '"-la"',
               "'a\\\nb'", '"a\\\nb"', "a\\\nb", "'a\rb'", "\\\r", '"`"', "'`rm x`'")
GLOB_ARGS = ("*", "*.txt", "?.txt", "[ab].txt", "src/*", "[!a]*", "a*", "~", "~/a.txt", "a~",
             "x~", "[", "]")
WEIRD_ARGS = ("a\rb", "status\r", "a\x01b", "\x1b[31m", "a\x7f", "a\x0bb", "a\x0cb", "café",
              "a\u200bb", "\u202erm", "a\u2066b", "a\u00a0b", "a\u3000b", "a\u2028b",
              "\ufeffx", "a\u0085b", "a\x1cb", "\x1f", "a\u2029b")
EXPANSION_ARGS = ("$x", "${x}", '"$x"', "${x:-a}", "$(foo)", "$(rm x)", "`bar`", '"$(foo)"',
                  "$'a\\tb'", "$'a b'", "$'\\x72m'", "$'a\\'b'", '$"a b"', "{a,b}", "{1..3}",
                  "a{b,c}", "{rm,x}", "$((1+2))", "<(foo)", ">(bar)", "$1", "$#", "$?", "$$",
                  "$@", "$*", "$-", "$!", "${#x}", '"${x}"', "\\$x", "'$(rm x)'", "$", "a$",
                  '"$"')
REDIRECTIONS = (">/dev/null", "2>&1", ">&2", "2>/dev/null", "<a.txt", ">out", ">>out",
                "10>out", ">|out", "<>x", "2> /dev/null", "> /dev/null", "1>&2", "3<&-",
                "<&-", "2>&-", "&>/dev/null", "&>>out", "&> out", ">&out", ">& /dev/null",
                "<<<x", "<<<'a b'", "<<< $x", "9>out", "0<a.txt", "2>>out", ">out2",
                "<a.txt>out", ">/dev/null<a.txt")
# Commands around a simple command (@ marks it).
WRAPPERS = ("( @ )", "(@)", "{ @; }", "{ @ ; }", "! @", "time @", "A=b @", "A=b B='x y' @",
            "[[ -n x ]] && @", "(( 1 )) && @", "f() { @; }; f", "function f { @; }; f",
            "ls() { @; }; ls", "git() { @; }; git status", "if true; then @; fi",
            "for i in a b; do @; done", "alias ls='rm -r'\n@", "alias foo=rm\nfoo x; @",
            "@ # comment; rm x", "@ #", "#@", "@ \\\n rm x", "@\\\n;rm x", "@;;", "@ ;; rm x",
            "-- @", "@ --", "case a in a) @;; esac", "x=$(@)", "echo $(@)", "echo `@`",
            "\\@", "'@'", '"@"', "@ \\\n", "@\\", "(@) >/dev/null", "{ @;} 2>&1", "!@",
            "A=b\n@", "@ &\n", "@ &;", "@ \r\n")
HEREDOCS = ("@ <<EOF\nrm x\nEOF", "@ <<'EOF'\n$(rm x)\nEOF", "@ <<EOF\n$(rm x)\nEOF",
            "@ <<-EOF\n\trm x\n\tEOF", "@ <<EOF\nfoo", "@ <<EOF; rm x\nbody\nEOF",
            '@ <<"E"OF\n`foo`\nEOF', "@ <<EOF\nEOF\nrm x", "@ <<EOF\na\\\nEOF\nrm x",
            "@ <<EOF <<END\na\nEOF\nrm y\nEND", "@ <<EOF\n`rm x`\nEOF\ntouch y",
            "@ << EOF\nx\n EOF\nEOF", "@ <<\\EOF\n$(rm x)\nEOF", "@<<EOF\nEOF")
SEPARATORS = ("; ", ";", " && ", "&&", " || ", " | ", "|", " & ", "&", "\n", " ;\n", "\r\n",
              " |& ", "|&", ";;", " &&\n", " |\n", " ; ", "\n\n", " &\n")
PLAIN_REDIRECTIONS = (">/dev/null", "2>&1", ">&2", "2>/dev/null", "</dev/null", "1>&2", "3<&-",
                      "2>&-", "> /dev/null", ">>/dev/null", ">|/dev/null", "<>/dev/null",
                      ">'/dev/null'", '2>"/dev/null"', ">\\/dev/null", "0</dev/null",
                      "2>& 1", ">& 2", "<&0", "1>&-", "9>/dev/null")
PLAIN_SEPARATORS = ("; ", ";", " && ", "&&", " || ", "||", " | ", "|", " & ", "&", "\n", " ;\n",
                    " &&\n", " ||\n", " |\n", " &\n", "\n\n")
# What a mutation inserts: punctuation, operators, quotes, blanks; never a letter or digit.
MUTATION_TOKENS = (";", "&", "|", "&&", "||", "|&", ">", "<", ">>", ">&", "<&", "&>", "<<",
                   "<<<", "(", ")", "{", "}", "'", '"', "\\", "\n", "\r", " ", "\t", "#", "$",
                   "`", "=", "!", "*", "?", "[", "]", ",", "-", "--", "\\\n", "\x0b", "\x0c",
                   "\u00a0", "\u200b", "\u202e", "\u2066", "$(", "${", "$'", '$"', ";;", "))",
                   "((", "[[", "]]", "\r\n")
# Lines that a mutation starts from: the known bypasses first.
SEED_LINES = (
    "ls &>/dev/null rm -r src",
    "git status&>/dev/null rm x",
    "echo a|&rm x",
    "git status --short <<<x;rm y",
    "git status --short", "ls -la src", "pwd; git status", "echo a && rm x",
    "git status 2>&1 | grep x", "ls -la >/dev/null 2>&1; touch y", "echo 'a;b' \"c|d\" ; foo",
    "cat <<EOF\nrm x\nEOF\n", "f() { rm x; }; f", "ls 10>out rm x", "git status >&2 foo",
    "echo a >&/dev/null rm x", "ls -la src &>>out rm x", "git status -s\nrm -rf src",
    "echo \"a $(rm x) b\"", "ls -la `rm x`", "ls $'\\x72m' x", "git status # ; rm x",
    "ls -la \\\nrm x", "git status; ls -la; pwd", "echo {a,b} && rm x", "echo a\rrm x",
    "ls\u00a0rm x", "git status\x0brm x", "echo a || rm x", "echo a | rm x &", "! rm x",
    "time rm x", "A=b rm x", "echo a; (rm x)", "{ rm x; }", "[[ -n x ]] && rm x",
    "alias ls=rm\nls x", "echo a\\;rm x", "echo 'a' ; \"rm\" x", "git status <>x rm y",
    "ls >|out -la", "echo a 2>&1 >/dev/null | rm x", "git status --porcelain >/dev/null",
)

# --- the safety filter (independent of the splitter) ------------------------------------------

FORBIDDEN_WORDS = frozenset({
    "kill", "exec", "ulimit", "trap", "eval", "source", ".", "..", "cd", "enable", "hash",
    "builtin", "command", "exit", "read", "wait", "set", "shopt", "fc", "history", "suspend",
    "coproc", "mapfile", "readarray", "bind", "pushd", "popd", "export", "unset", "umask",
    "let", "declare", "typeset", "local", "readonly", "logout", "return", "disown", "bg", "fg",
    "jobs", "getopts", "caller", "compgen", "complete", "times", "type", "dirs", "break",
    "continue", "shift", "sudo", "bash", "dash", "sh"})
# The only places a `/` may stand: fixed relative words, and /dev/null as a whole word.
ALLOWED_SLASHES = re.compile(r"(?<!\$)src/app\.py|(?<!\$)src/\*|~/a\.txt"
                             r"|(?:^|(?<=[ \t\n;&|()<>]))"
                             r"(?:'/dev/null'|\"/dev/null\"|\\?/dev/null)(?=[ \t\n;&|()<>]|$)")
# $0 and $_ name the shell itself, PATH the stubs, BASH* bash's own files.
SPECIAL_PARAMETERS = re.compile(r"\$\{?[#!]?(?:[0_]|PATH|BASH)")
# Expansions that may vanish from a word: `se${x}t` is `set`.
VANISHING = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\$[0-9#?@*$!-]|\$\(\)|``")
RUN = re.compile(r"[A-Za-z0-9_.-]+")
FUNCTION = re.compile(r"\(\s*\)|\bfunction\b")


def _unsafe(line: str) -> str | None:
    """Why a line must not run, or None. Conservative: a refused line is only left unchecked."""
    if "\x00" in line:
        return "NUL"
    if "/" in ALLOWED_SLASHES.sub(" ", line):
        return "a / that may make a path outside the sandbox"
    if SPECIAL_PARAMETERS.search(line):
        return "$0, $_, $PATH or $BASH"
    joined = line.replace("\\\n", "")
    words: list[str] = []
    for view in (joined, VANISHING.sub("", joined)):
        for drop in ("\"'\\`$", "\"'\\`${},", "\"'\\`$(){},"):
            words += RUN.findall(view.translate({ord(c): None for c in drop}))
    if FORBIDDEN_WORDS.intersection(words):
        return "a word that could form a built-in the test never runs"
    if FUNCTION.search(joined) and max(Counter(RUN.findall(joined)).values(), default=0) >= 3:
        return "a function that could call itself"  # its name, a call inside, a call outside
    return None


# --- generation -------------------------------------------------------------------------------

TOKEN = re.compile(r"[A-Za-z0-9_./~+:%,-]+|.", re.S)


def _arg(rng: random.Random, plain: bool) -> str:
    pools = (PLAIN_ARGS, QUOTED_ARGS, GLOB_ARGS, EXPANSION_ARGS, WEIRD_ARGS)
    weights = (50, 30, 10, 0, 0) if plain else (40, 20, 10, 15, 10)
    return rng.choice(rng.choices(pools, weights)[0])


def _simple(rng: random.Random, plain: bool) -> str:
    if rng.random() < 0.3:
        words = rng.choice(SAFE_FORMS).split(" ")
    else:
        name = rng.choice(STUBS + BUILTINS + ("git status", "ls -la"))
        words = [name, *(_arg(rng, plain) for _ in range(rng.choice((0, 1, 1, 2, 2, 3))))]
    for _ in range(rng.choice((0, 0, 0, 1, 1, 2))):
        redirection = rng.choice(PLAIN_REDIRECTIONS if plain else REDIRECTIONS)
        words.insert(rng.randint(0, len(words)), redirection)
    text = words[0]
    for word in words[1:]:
        if word[:1] in "<>&0123456789" and rng.random() < 0.3:
            text += word
        else:
            text += rng.choice((" ", " ", " ", " ", "\t", "  ", " \t ")) + word
    return text


def _command(rng: random.Random, plain: bool) -> str:
    text = _simple(rng, plain)
    if not plain and rng.random() < 0.25:
        text = rng.choice(WRAPPERS).replace("@", text)
    return text


def generate(rng: random.Random, plain: bool) -> str:
    """One line from the grammar: one to three commands joined by separators.

    Plain: only the POSIX subset on which dash and bash agree (the splitter may claim those);
    otherwise also every construct where they differ or that must stay opaque.
    """
    separators = PLAIN_SEPARATORS if plain else SEPARATORS
    commands = [_command(rng, plain) for _ in range(rng.choice((1, 1, 2, 2, 3)))]
    line = commands[0]
    for command in commands[1:]:
        line += rng.choice(separators) + command
    if not plain and rng.random() < 0.12:
        line = rng.choice(HEREDOCS).replace("@", line)
        if rng.random() < 0.5:
            line += "\n" + _command(rng, plain)
    if not plain and rng.random() < 0.1:
        line += rng.choice((" &", ";", "\n", " ;", "&", "|", "\\", " #", "\r"))
    return line


def mutate(line: str, rng: random.Random) -> str:
    """Insert, delete, duplicate or swap tokens; words stay whole unless split by an insertion."""
    tokens = TOKEN.findall(line)
    for _ in range(rng.randint(1, MAX_MUTATIONS)):
        operation = rng.randrange(4)
        index = rng.randrange(len(tokens)) if tokens else 0
        if operation == 0 or not tokens:
            new = rng.choice(MUTATION_TOKENS)
            if not tokens:
                tokens = [new]
                continue
            word = tokens[index]
            cut = rng.randint(0, len(word))
            tokens[index:index + 1] = [part for part in (word[:cut], new, word[cut:]) if part]
        elif operation == 1:
            del tokens[index]
        elif operation == 2:
            tokens.insert(index, tokens[index])
        else:
            other = rng.randrange(len(tokens))
            tokens[index], tokens[other] = tokens[other], tokens[index]
    return "".join(tokens)


def corpus(seed: int, count: int) -> list[str]:
    """`count` distinct lines: the seed lines, then generated and mutated ones (deterministic)."""
    rng = random.Random(seed)
    lines = dict.fromkeys(SEED_LINES)
    while len(lines) < count:
        roll = rng.random()
        if roll < 0.2:
            line = mutate(rng.choice(SEED_LINES), rng)
        elif roll < 0.45:
            line = generate(rng, plain=True)
        elif roll < 0.7:
            line = mutate(generate(rng, plain=True), rng)
        elif roll < 0.85:
            line = generate(rng, plain=False)
        else:
            line = mutate(generate(rng, plain=False), rng)
        if "\x00" not in line:
            lines[line] = None
    return list(lines)[:count]


# --- running a line ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    ran: tuple[tuple[str, ...], ...]  # (stub name, *arguments) per stub invocation
    changed: tuple[str, ...]  # sandbox paths created, changed or removed
    timed_out: bool


def snapshot(root: str) -> dict[str, tuple]:
    """Every path below `root`: its type and, for a file, its bytes; for a link, its target."""
    tree = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    tree[os.path.relpath(path, root)] = ("file", handle.read())
            elif stat.S_ISLNK(info.st_mode):
                tree[os.path.relpath(path, root)] = ("link", os.readlink(path))
            else:
                tree[os.path.relpath(path, root)] = (stat.S_IFMT(info.st_mode),)
    return tree


def build_sandbox(root: str, owner: tuple[int, int] | None) -> None:
    os.mkdir(root)
    for relative, data in TREE.items():
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
    if owner:
        for folder, _dirs, files in os.walk(root):
            os.chown(folder, *owner)
            for name in files:
                os.chown(os.path.join(folder, name), *owner)


def parse_log(folder: str) -> list[tuple[str, ...]]:
    """The records of the stubs: count, $0, arguments, each NUL-ended (see STUB)."""
    ran = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as handle:
            fields = handle.read().split(b"\0")
        index = 0
        while index + 1 < len(fields):
            count = int(fields[index])
            record = [field.decode("utf-8", "surrogateescape")
                      for field in fields[index + 1:index + 2 + count]]
            ran.append((posixpath.basename(record[0]), *record[1:]))
            index += count + 2
    return ran


def _reap_group(pgid: int) -> None:
    """Reap the exited members of a group whose leader is reaped (they are our orphans)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitid(os.P_PGID, pgid, os.WEXITED | os.WNOHANG) is not None:
            pass


def _signal_group(pgid: int, signum: int) -> bool:
    """Send a signal to a group; False when the group is gone."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


class Slot:
    """One of CONCURRENCY places to run a line: stubs, their log folder and a sandbox."""

    def __init__(self, base: str, shell_for_stubs: str, owner: tuple[int, int] | None):
        os.makedirs(base, mode=0o755)
        self.bin = os.path.join(base, "bin")
        self.log = os.path.join(base, "log")
        self.sandbox = os.path.join(base, "sandbox")
        self.owner = owner
        os.mkdir(self.bin, 0o755)
        os.mkdir(self.log, 0o755)
        if owner:
            os.chown(self.log, *owner)
        for name in STUBS:
            path = os.path.join(self.bin, name)
            with open(path, "w") as handle:
                handle.write(STUB.format(shell=shell_for_stubs, log=self.log))
            os.chmod(path, 0o755)
        build_sandbox(self.sandbox, owner)
        self.pristine = snapshot(self.sandbox)
        self.env = {"PATH": self.bin, "HOME": self.sandbox, "LANG": "C.UTF-8"}
        # setpriv drops to the owner after a vfork; Popen's own user= cannot vfork (slower).
        setpriv = shutil.which("setpriv")
        self.prefix: tuple[str, ...] = ()
        self.credentials: dict = {}
        if owner and setpriv:
            self.prefix = (setpriv, f"--reuid={owner[0]}", f"--regid={owner[1]}",
                           "--clear-groups", "--")
        elif owner:
            self.credentials = {"user": owner[0], "group": owner[1], "extra_groups": []}

    async def run(self, shell: str, line: str, reaping: bool) -> Outcome:
        for name in os.listdir(self.log):
            os.unlink(os.path.join(self.log, name))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT_S
        devnull = asyncio.subprocess.DEVNULL
        process = await asyncio.create_subprocess_exec(
            *self.prefix, shell, "-c", line, cwd=self.sandbox, env=self.env, stdin=devnull,
            stdout=devnull, stderr=devnull, start_new_session=True, **self.credentials)
        timed_out = False
        try:
            async with asyncio.timeout_at(deadline):
                await process.wait()
        except TimeoutError:
            timed_out = True
            _signal_group(process.pid, signal.SIGKILL)
            await process.wait()
        # Background members may still be writing their records: wait for the group to be gone.
        while True:
            if reaping:
                _reap_group(process.pid)
            if not _signal_group(process.pid, 0):
                break
            now = loop.time()
            if now > deadline + GRACE_S:
                break  # zombies that are not ours to reap
            if now > deadline and not timed_out:
                timed_out = True
                _signal_group(process.pid, signal.SIGKILL)
            await asyncio.sleep(POLL_S)
        ran = tuple(sorted(parse_log(self.log)))  # the order of a pipeline's records varies
        after = snapshot(self.sandbox)
        changed = tuple(sorted(path for path in self.pristine.keys() | after.keys()
                               if self.pristine.get(path) != after.get(path)))
        if changed:
            shutil.rmtree(self.sandbox)
            build_sandbox(self.sandbox, self.owner)
        return Outcome(ran, changed, timed_out)


CANARY = "foo a 'b c' & bar \"$x\" >out; ls -la"
CANARY_OUTCOME = Outcome((("bar", ""), ("foo", "a", "b c"), ("ls", "-la")), ("out",), False)


@contextlib.contextmanager
def subreaper():
    """Make this process the subreaper of its descendants (Linux); yields whether it is."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        active = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        active = False
    try:
        yield active
    finally:
        if active:
            libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


async def run_all(jobs, slots, shells, reaping) -> dict[tuple[int, str], Outcome]:
    """Run (index, shell name, shell path, line) jobs in the slots; {(index, name): Outcome}.

    Each slot first runs CANARY under each shell: a harness that logs nothing would pass.
    """
    queue: asyncio.Queue = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    outcomes: dict[tuple[int, str], Outcome] = {}

    async def work(slot: Slot) -> None:
        for name, path in shells.items():
            outcome = await slot.run(path, CANARY, reaping)
            assert outcome == CANARY_OUTCOME, f"the harness is broken: {name} {outcome}"
        while not queue.empty():
            index, shell, path, line = queue.get_nowait()
            outcomes[index, shell] = await slot.run(path, line, reaping)

    async with asyncio.TaskGroup() as group:
        for slot in slots:
            group.create_task(work(slot))
    return outcomes


# --- the checks -------------------------------------------------------------------------------

def unmatched(ran, commands, strict: bool) -> list[tuple[str, ...]]:
    """The invocations that no reported command accounts for (each command at most once).

    Not strict: a reported command with a glob character or `~` accounts for any invocation of
    its program (the shell expands it).
    """
    exact: Counter = Counter()
    by_name: Counter = Counter()
    for argv in commands:
        name = posixpath.basename(argv[0])
        if not strict and any(c in word for word in argv for c in "*?[~"):
            by_name[name] += 1
        else:
            exact[(name, *argv[1:])] += 1
    left = []
    for invocation in ran:
        if exact[invocation] > 0:
            exact[invocation] -= 1
        elif by_name[invocation[0]] > 0:
            by_name[invocation[0]] -= 1
        else:
            left.append(invocation)
    return left


def inside_of(root: str):
    def inside(path: str) -> bool:
        full = os.path.realpath(os.path.join(root, path))
        return full == root or full.startswith(root + os.sep)
    return inside


def _allowing(line: str, inside) -> list[str]:
    return [name for name, rules in RULE_SETS.items()
            if decide(Call("bash", (line,), BASH, inside=inside), rules).action == "allow"]


@pytest.mark.parametrize("shell", SHELLS)
def test_shell_differential_no_misread_or_bypass(shell):
    """Under dash, and under bash, an understood line runs only what the split saw; an allowed
    line runs only the allowed commands and changes nothing. One part per shell, so that two
    workers can take them side by side."""
    path = shutil.which(shell)
    assert path, f"{shell} is not installed (make system-packages installs dash and bash)"
    # Not pytest's tmp_path: its parents are private to root, and nobody must reach its slot.
    with tempfile.TemporaryDirectory(prefix="totem-differential-") as base:
        os.chmod(base, 0o755)
        _differential({shell: path}, os.path.realpath(base))


def _differential(shells: dict[str, str], base: str) -> None:
    owner = None
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        owner = (nobody.pw_uid, nobody.pw_gid)
    stub_shell = os.path.realpath(shutil.which("dash") or "/bin/sh")
    slots = [Slot(os.path.join(base, f"slot{n}"), stub_shell, owner) for n in range(CONCURRENCY)]
    template = os.path.join(base, "template")
    build_sandbox(template, None)
    inside = inside_of(template)

    lines = corpus(SEED, LINES)
    plans = []  # (index, split, rule sets that allow the line)
    unsafe = 0
    for index, line in enumerate(lines):
        split = split_command(line)
        allowing = _allowing(line, inside)
        if split.opaque and not allowing:
            continue  # it asks (or is denied): no claim to check
        if _unsafe(line):
            unsafe += 1
            continue
        plans.append((index, split, allowing))
    jobs = [(index, name, path, lines[index])
            for index, _, _ in plans for name, path in shells.items()]
    with subreaper() as reaping:
        outcomes = asyncio.run(run_all(jobs, slots, shells, reaping))

    failures = []
    counts = {name: Counter() for name in shells}
    for index, split, allowing in plans:
        line = lines[index]
        for name in shells:
            outcome = outcomes[index, name]
            counts[name]["executed"] += 1
            counts[name]["timeouts"] += outcome.timed_out
            left = unmatched(outcome.ran, split.commands, strict=False)
            if left:
                counts[name]["misreads"] += 1
                failures.append((name, "misread", repr(line),
                                 f"ran {left}; split saw {list(split.commands)}"))
            if allowing:
                left = unmatched(outcome.ran, split.commands, strict=True)
                if left or outcome.changed:
                    counts[name]["bypasses"] += 1
                    failures.append((name, "bypass", repr(line),
                                     f"allowed under {allowing}: ran {left}, "
                                     f"changed {list(outcome.changed)}"))
    for name, count in counts.items():
        FIGURES.append(f"shell differential: {name}: {len(lines)} lines, {count['executed']} "
                       f"executed, {count['bypasses']} bypasses, {count['misreads']} misreads "
                       f"(seed {SEED}; {unsafe} refused as unsafe; {count['timeouts']} timeouts)")
    assert not failures, f"{len(failures)} failures, the first {MAX_FAILURES_SHOWN}:\n" + "\n".join(
        f"{shell} {kind}: {line}\n    {what}" for shell, kind, line, what in
        failures[:MAX_FAILURES_SHOWN])


# --- fixed regressions ------------------------------------------------------------------------

# The adversarial review's bypasses, then lines that this test found the splitter of 994ece0
# reading otherwise than a shell: `&>` is `&` then `>` in dash, which also reads the digits of
# an io number above 9 as a word; `\<newline>` joins a digit to a redirection (`0</dev/null`);
# bash drops a backslash that ends a line of several lines.
KNOWN_BYPASSES = ("ls &>/dev/null rm -r src", "git status&>/dev/null rm x", "echo a|&rm x",
                  "git status --short <<<x;rm y", "echo a&> /dev/null rm x",
                  "ls 11>&- -la src", "git status -s 33<&-;ls", "ls -la 0\\\n</dev/null",
                  "git status\nls -la src\\")


@pytest.mark.parametrize("rules", RULE_SETS.values(), ids=RULE_SETS.keys())
@pytest.mark.parametrize("line", KNOWN_BYPASSES)
def test_shell_differential_known_bypass_not_allowed(line, rules, tmp_path):
    """A line that the shells, or a shell and the splitter, read differently is never allowed."""
    inside = inside_of(os.path.realpath(tmp_path))
    assert decide(Call("bash", (line,), BASH, inside=inside), rules).action != "allow"


def test_shell_differential_safety_filter():
    """The filter refuses what the grammar must never run, and lets the plain lines through."""
    for line in ("cd ..; rm x", "e'x'ec foo", "se${x}t -e", "echo >/dev/nul", "echo >$0",
                 "ls /etc", "echo x >../y", ". a.txt", "f() { f|f& }; f", "echo $_",
                 "ec\\\nho x; s\\\net", 'ls >"/dev/null\nx"', "ls >''/dev/null",
                 "ls >$x/dev/null", "ls >/dev/null'x'", "echo >$PATH", "echo 'a;b' \"cd\"",
                 "ls >/dev/null/x"):
        assert _unsafe(line), line
    for line in SEED_LINES:
        assert _unsafe(line) is None, line
