"""Splitting a bash command line into simple commands, without running a shell.

The permission engine decides each simple command of a line on its own, so the split must find
every command that the shell would run. The runner uses /bin/sh (dash on Debian); the scanner
reads bash's grammar, a superset, and every construct where the two differ ($'...', &>, |&,
brace expansion, process substitution, here-strings) is opaque or harmless in both. Quoting follows the POSIX rules that `shlex` applies in POSIX
mode, but a small scanner replaces `shlex.shlex`: shlex cannot tell the operator `;` from a quoted
";", and cannot report the constructs below. `command_text()` renders a command the way patterns
see it, quoting only what needs it, as `shlex.join` does.

Whatever the scanner does not fully understand is named in `Split.opaque`: command, process and
arithmetic substitution, parameter expansion, brace expansion, here-documents and here-strings,
redirections to or from a file (fd duplication and /dev/null are fine), subshells, shell keywords
(brace groups, if, for, `!`, time ...), assignments before a command, unbalanced quotes, and a
command runner as the program: a shell, eval, exec, source and `.`, xargs, env, sudo, timeout,
nohup and their kind, `find -exec`, `git -c` (a config value can name a program), and built-ins
that change how later commands run (cd, alias, set, hash ...). The permission engine never lets
an allow rule cover an opaque line. The commands found inside substitutions, behind keywords and
assignments, after a runner or in the script of `sh -c` are added to `Split.commands` too, so that
a deny rule still sees them.

Must not: run anything, read files, decide permissions.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

# Substitutions and runners nested deeper than this are not followed (the line is opaque anyway);
# the limit keeps a hostile `$($($(...)))` from exhausting the stack.
MAX_DEPTH = 16

BLANKS = " \t"
DIGITS = "0123456789"
METACHARS = frozenset(" \t\n;&|()<>")
# A word with one of these (or not printable ASCII) is single-quoted by command_text().
NEEDS_QUOTES = frozenset(" \t\n'\"\\$`;&|<>()")
# Longest first: the scanner takes the first that matches.
REDIRECTIONS = ("&>>", "<<<", "<<-", "&>", ">>", ">|", ">&", ">(", "<<", "<>", "<&", "<(", ">", "<")
# `$` followed by one of these starts a parameter expansion.
PARAMETER_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                            "0123456789_@*#?$!-")

ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
DURATION = re.compile(r"[0-9.]+[smhd]?")
KEYWORDS = frozenset({
    "!", "{", "}", "[[", "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for",
    "function", "if", "select", "then", "time", "until", "while"})
SHELLS = frozenset({
    "ash", "bash", "busybox", "csh", "dash", "fish", "ksh", "mksh", "posh", "rbash", "sh", "tcsh",
    "yash", "zsh"})
# Programs whose operands are another command (eval-like built-ins included).
RUNNERS = frozenset({
    ".", "builtin", "caffeinate", "chroot", "chrt", "command", "doas", "env", "eval", "exec",
    "fakeroot", "firejail", "flock", "gtimeout", "ionice", "ltrace", "nice", "nohup", "nsenter",
    "parallel", "pkexec", "runuser", "script", "setsid", "sg", "source", "stdbuf", "strace", "su",
    "sudo", "taskset", "time", "timeout", "unbuffer", "unshare", "watch", "xargs"})
# Built-ins that change how the rest of the line runs (where, which program a name means ...).
SHELL_STATE = frozenset({
    "alias", "cd", "declare", "enable", "export", "hash", "local", "popd", "pushd", "readonly",
    "set", "shopt", "trap", "typeset", "unalias", "unset"})
FIND_RUNNERS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
# git options that take a value as the next word, so the scan for -c goes on past it.
GIT_VALUE_OPTIONS = frozenset({"-C", "--git-dir", "--work-tree", "--namespace"})
# core.pager, core.fsmonitor, alias.x=!cmd ... : a config value can name a program to run.
GIT_RUNNING_OPTIONS = ("-c", "--config-env", "--exec-path")


@dataclass(frozen=True)
class Split:
    """A line as simple commands (argv tuples) and the reasons it is not fully understood."""

    commands: tuple[tuple[str, ...], ...]
    opaque: tuple[str, ...] = ()


def split_command(line: str) -> Split:
    """The simple commands of a bash command line, and why it is opaque (empty when it is not).

    Never raises for any text: what cannot be parsed is reported as opaque.
    """
    scanner = _Scanner(line, [], [])
    if "\x00" in line:
        scanner.note("NUL character")
    scanner.parse_list("", 0)
    return Split(tuple(scanner.commands), tuple(scanner.reasons))


def command_text(argv) -> str:
    """The normalized text of one simple command: plain words as they are, others single-quoted.

    Glob characters stay unquoted, so that a rule `rm *.pyc` reads as the command does.
    """
    return " ".join(_word_text(word) for word in argv)


def _word_text(word: str) -> str:
    if (word and word.isascii() and word.isprintable() and not word.startswith("#")
            and not NEEDS_QUOTES.intersection(word)):
        return word
    return shlex.quote(word)


class _Scanner:
    """One pass over a line; nested substitutions recurse and share the results."""

    def __init__(self, text: str, commands: list, reasons: list):
        self.text = text
        self.pos = 0
        self.commands = commands
        self.reasons = reasons
        self.heredocs: list[tuple[str, bool, bool]] = []  # (delimiter, strip tabs, quoted)

    def note(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    def skip_blanks(self) -> None:
        text = self.text
        while self.pos < len(text):
            if text[self.pos] in BLANKS:
                self.pos += 1
            elif text.startswith("\\\n", self.pos):  # a line continuation
                self.pos += 2
            else:
                break

    def parse_list(self, close: str, depth: int) -> None:
        """Read simple commands up to `close` (")" or a backtick) or to the end of the text."""
        text = self.text
        argv: list[str] = []
        while True:
            self.skip_blanks()
            if self.pos >= len(text):
                if close:
                    self.note("unbalanced (" if close == ")" else "unbalanced `")
                break
            ch = text[self.pos]
            if ch == close:
                self.pos += 1
                break
            if ch in "\n;|&" and not text.startswith("&>", self.pos):
                if text.startswith((";;", ";&"), self.pos):
                    self.note("case clause ;;")
                self.finish(argv, depth)
                argv = []
                self.pos += 2 if text.startswith(("&&", "||", "|&", ";;", ";&"), self.pos) else 1
                if ch == "\n" and self.heredocs:
                    self.skip_heredocs(depth)
            elif ch == "(":
                self.note("subshell ( ... )")
                self.finish(argv, depth)
                argv = []
                self.pos += 1
                self.nested(")", depth)
            elif ch == ")":
                self.note("unbalanced )")
                self.finish(argv, depth)
                argv = []
                self.pos += 1
            elif ch in "<>&" or (ch in DIGITS and self.at_io_number()):
                self.redirect(argv, close, depth)
            elif ch == "#":  # a word that starts with # starts a comment
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                argv.append(self.word(close, depth))
        self.finish(argv, depth)

    def nested(self, close: str, depth: int) -> None:
        if depth >= MAX_DEPTH:
            self.note(f"nesting deeper than {MAX_DEPTH} levels")
            self.pos = len(self.text)
            return
        self.parse_list(close, depth + 1)

    def at_io_number(self) -> bool:
        end = self.pos
        while end < len(self.text) and self.text[end] in DIGITS:
            end += 1
        return end < len(self.text) and self.text[end] in "<>"

    def redirect(self, argv: list[str], close: str, depth: int) -> None:
        text = self.text
        start = self.pos
        while text[self.pos] in DIGITS:
            self.pos += 1
        op = next(op for op in REDIRECTIONS if text.startswith(op, self.pos))
        self.pos += len(op)
        if op in ("<(", ">("):
            self.note(f"process substitution {op}...)")
            self.nested(")", depth)
            argv.append(text[start:self.pos])
            return
        if op.startswith("<<"):
            self.note("here-string <<<" if op == "<<<" else "here-document <<")
        self.skip_blanks()
        if self.pos >= len(text) or text[self.pos] in METACHARS:
            self.note("redirection without a target")
            return
        word_start = self.pos
        target = self.word(close, depth)
        if op in ("<<", "<<-"):
            quoted = any(c in text[word_start:self.pos] for c in "'\"\\")
            self.heredocs.append((target, op == "<<-", quoted))
            return
        if op == "<<<":
            return
        if op in (">&", "<&") and (target == "-" or (target.isascii() and target.isdigit())):
            return  # duplicating or closing a file descriptor: 2>&1, >&2, 3<&-
        if target == "/dev/null":
            return
        self.note("redirection from a file" if op == "<" else "redirection to a file")

    def word(self, close: str, depth: int) -> str:
        """One word with its quotes removed; expansions are kept as their source text."""
        text = self.text
        value: list[str] = []
        unquoted: list[str] = []  # the word with quoted parts as "\0", for brace expansion
        while self.pos < len(text):
            ch = text[self.pos]
            if ch in METACHARS or (ch == "`" and close == "`"):
                break
            if ch == "\\":
                escaped = text[self.pos + 1:self.pos + 2]
                self.pos += 2
                if escaped != "\n":
                    value.append(escaped or "\\")
                    unquoted.append("\0")
            elif ch == "'":
                end = text.find("'", self.pos + 1)
                if end < 0:
                    self.note("unbalanced quote")
                    end = len(text)
                value.append(text[self.pos + 1:end])
                unquoted.append("\0")
                self.pos = end + 1
            elif ch == '"':
                self.pos += 1
                self.double_quoted(value, depth)
                unquoted.append("\0")
            elif ch == "$":
                self.dollar(value, depth, quoted=False)
                unquoted.append("\0")
            elif ch == "`":
                self.backtick(value, depth)
                unquoted.append("\0")
            else:
                value.append(ch)
                unquoted.append(ch)
                self.pos += 1
        if _has_brace_expansion("".join(unquoted)):
            self.note("brace expansion {a,b}")
        return "".join(value)

    def skip_heredocs(self, depth: int) -> None:
        """Step over the bodies of the here-documents opened on the line that just ended.

        An unquoted delimiter lets bash expand the body, so its substitutions are still read.
        """
        text = self.text
        for delimiter, strip_tabs, quoted in self.heredocs:
            start = self.pos
            while self.pos < len(text):
                end = text.find("\n", self.pos)
                end = len(text) if end < 0 else end
                line = text[self.pos:end]
                self.pos = min(end + 1, len(text))
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    body = text[start:end - len(line)]
                    break
            else:
                body = text[start:]
            if not quoted:
                _Scanner(body, self.commands, self.reasons).double_quoted([], depth, end="")
        self.heredocs = []

    def double_quoted(self, value: list[str], depth: int, end: str = '"') -> None:
        """The text after an opening quote, up to `end` ("" reads a here-document body)."""
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch == end:
                self.pos += 1
                return
            if ch == "\\":
                escaped = text[self.pos + 1:self.pos + 2]
                if escaped and escaped in '$`"\\\n':
                    if escaped != "\n":
                        value.append(escaped)
                    self.pos += 2
                else:
                    value.append("\\")
                    self.pos += 1
            elif ch == "$":
                self.dollar(value, depth, quoted=True)
            elif ch == "`":
                self.backtick(value, depth)
            else:
                value.append(ch)
                self.pos += 1
        if end:
            self.note("unbalanced quote")

    def dollar(self, value: list[str], depth: int, quoted: bool) -> None:
        text = self.text
        start = self.pos
        self.pos += 1
        while text.startswith("\\\n", self.pos):  # bash joins `$\<newline>'x'` into $'x'
            self.pos += 2
        after = text[self.pos:self.pos + 1]
        if after == "(":
            if text.startswith("((", self.pos):
                self.note("arithmetic expansion $((...))")
                self.pos += 2
                self.nested(")", depth)
                if text.startswith(")", self.pos):
                    self.pos += 1
                else:
                    self.note("unbalanced (")
            else:
                self.note("command substitution $(...)")
                self.pos += 1
                self.nested(")", depth)
            value.append(text[start:self.pos])
        elif after == "{":
            self.note("parameter expansion ${...}")
            value.append("${")
            self.pos += 1
        elif after == "'" and not quoted:
            self.note("ANSI-C quoting $'...'")
            end = self.pos + 1
            while end < len(text) and text[end] != "'":
                end += 2 if text[end] == "\\" else 1
            if end >= len(text):
                self.note("unbalanced quote")
            value.append(text[start:end + 1])
            self.pos = end + 1
        elif after == '"' and not quoted:
            self.note('locale quoting $"..."')  # the caller reads the double-quoted text
        elif after and after in PARAMETER_START:
            self.note("parameter expansion $NAME")
            value.append("$")
        else:
            value.append("$")

    def backtick(self, value: list[str], depth: int) -> None:
        start = self.pos
        self.note("command substitution `...`")
        self.pos += 1
        self.nested("`", depth)
        value.append(self.text[start:self.pos])

    def finish(self, argv: list[str], depth: int) -> None:
        if argv:
            self.add(tuple(argv), depth)

    def add(self, argv: tuple[str, ...], depth: int) -> None:
        """Record a command, then the commands it hides (behind keywords, runners, -exec, -c)."""
        self.commands.append(argv)
        if depth >= MAX_DEPTH:
            self.note(f"nesting deeper than {MAX_DEPTH} levels")
            return
        skip = 0
        while skip < len(argv) and (argv[skip] in KEYWORDS or ASSIGNMENT.match(argv[skip])):
            self.note(f"shell keyword {argv[skip]}" if argv[skip] in KEYWORDS
                      else "variable assignment before a command")
            skip += 1
        if skip:
            if skip < len(argv):
                self.add(argv[skip:], depth + 1)
            return
        name = argv[0].rsplit("/", 1)[-1]
        if name in SHELLS:
            self.note(f"shell {name}")
            script = _shell_script(argv)
            if script is not None:
                _Scanner(script, self.commands, self.reasons).parse_list("", depth + 1)
        elif name == "eval":
            self.note("command runner eval")
            _Scanner(" ".join(argv[1:]), self.commands, self.reasons).parse_list("", depth + 1)
        elif name in RUNNERS:
            self.note(f"command runner {name}")
            operand = _runner_operand(argv)
            if operand:
                self.add(operand, depth + 1)
        elif name in SHELL_STATE:
            self.note(f"shell built-in {name} changes later commands")
        elif name == "find":
            self.find_runner(argv, depth)
        elif name == "git" and _git_runs_config(argv):
            self.note("git -c, --config-env or --exec-path can run a program")

    def find_runner(self, argv: tuple[str, ...], depth: int) -> None:
        for index, arg in enumerate(argv):
            if arg in FIND_RUNNERS:
                self.note(f"find {arg} runs a command")
                inner: list[str] = []
                for word in argv[index + 1:]:
                    if word in (";", "+"):
                        break
                    inner.append(word)
                if inner:
                    self.add(tuple(inner), depth + 1)


def _has_brace_expansion(unquoted: str) -> bool:
    """Whether unquoted text holds {a,b} or {1..3} (bash expands those into several words)."""
    open_braces: list[bool] = []  # per open brace: a comma or `..` seen inside
    previous = ""
    for ch in unquoted:
        if ch == "{":
            open_braces.append(False)
        elif ch == "}" and open_braces:
            if open_braces.pop():
                return True
        elif open_braces and (ch == "," or (ch == "." and previous == ".")):
            open_braces[-1] = True
        previous = ch
    return False


def _shell_script(argv: tuple[str, ...]) -> str | None:
    """The script of `sh -c script` (also `bash -ec script`), None without -c."""
    for index, arg in enumerate(argv[1:], start=1):
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            return argv[index + 1] if index + 1 < len(argv) else None
    return None


def _runner_operand(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The command a runner runs, past its options, assignments and durations (best effort)."""
    index = 1
    while index < len(argv) and (argv[index].startswith(("-", "+")) or ASSIGNMENT.match(argv[index])
                                 or DURATION.fullmatch(argv[index])):
        index += 1
    return argv[index:]


def _git_runs_config(argv: tuple[str, ...]) -> bool:
    index = 1
    while index < len(argv) and argv[index].startswith("-"):
        if argv[index].startswith(GIT_RUNNING_OPTIONS):
            return True
        index += 2 if argv[index] in GIT_VALUE_OPTIONS else 1
    return False
