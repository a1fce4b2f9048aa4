"""Splitting a shell command line into simple commands, without running a shell.

The permission engine decides each simple command of a line on its own, so the split must find
every command that the shell would run. Commands run under bash when it is installed, else under
/bin/sh (dash on Debian), both with `-c` (runner.py). The scanner therefore claims to understand
only the grammar on which POSIX shells agree, read strictly:

- words of plain characters, 'single quotes', "double quotes" without expansions, and `\\x`;
- the separators `;` `&&` `||` `|` `&` and the newline;
- the redirections `<`, `>`, `>>`, `>|`, `<>` with an io number of one digit or none, to or from
  /dev/null, and `>&N`, `<&N`, `>&-` that duplicate or close a descriptor;
- `*`, `?` and `[` as file name patterns, `~` at the start of a word.

Everything else is named in `Split.opaque`, and the permission engine never lets an allow rule
cover an opaque line: expansions (`$...`, backquotes, `$'...'`), any redirection to or from a file,
here-documents and here-strings, what bash reads otherwise than dash (`&>`, `&>>`, `|&`, `;;`,
`>&file`, io numbers above 9, brace expansion, `~` after `=` or `:`), subshells and reserved
words (`if`, `{`, `[[`, `!`, `function`, `time` ...), comments, line continuations, assignments
before a command, a pattern in a program name, control and invisible characters, unbalanced
quotes, syntax errors, and programs that run other commands or change how later ones run: shells,
eval, exec, source, xargs, env, sudo, timeout, cd, alias, set, trap, and the bash built-ins that
evaluate an array subscript (`read 'a[$(cmd)]'`, `printf -v`, `[ -v`, `let`). The commands found
inside substitutions, behind keywords and assignments, after a runner or in the script of `sh -c`
are added to `Split.commands` too, so that a deny rule still sees them; where dash and bash split
a line differently, dash's reading (the one with more commands) is reported.

`command_text()` renders a command the way patterns see it, quoting only what needs it, as
`shlex.join` does. `hidden_characters()` and `reveal()` find and show the characters a person
cannot see.

Must not: run anything, read files, decide permissions.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

# Substitutions and runners nested deeper than this are not followed (the line is opaque anyway);
# the limit keeps a hostile `$($($(...)))` from exhausting the stack.
MAX_DEPTH = 16

BLANKS = " \t"
DIGITS = "0123456789"
METACHARS = frozenset(" \t\n;&|()<>")
GLOB_CHARS = "*?["
# A word with one of these (or not printable ASCII) is single-quoted by command_text().
NEEDS_QUOTES = frozenset(" \t\n'\"\\$`;&|<>()")
# Longest first: the scanner takes the first that matches (`&>` is read by the `&` branch).
REDIRECTIONS = ("<<<", "<<-", "<<", "<>", "<&", "<", ">>", ">|", ">&", ">")
# `$` followed by one of these starts an expansion or a quoting of bash; any other `$` is a `$`.
DOLLAR_SPECIAL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                           "0123456789_@*#?$!-{('\"\\[")

ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
DURATION = re.compile(r"[0-9.]+[smhd]?")
KEYWORDS = frozenset({
    "!", "{", "}", "[[", "]]", "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for",
    "function", "if", "in", "select", "then", "time", "until", "while"})
SHELLS = frozenset({
    "ash", "bash", "busybox", "csh", "dash", "fish", "ksh", "ksh93", "mksh", "posh", "rbash", "sh",
    "tcsh", "yash", "zsh"})
# Programs and built-ins whose operands are another command (eval-like built-ins included).
RUNNERS = frozenset({
    ".", "at", "batch", "bind", "builtin", "caffeinate", "chroot", "chrt", "command", "compgen",
    "complete", "doas", "env", "eval", "exec", "fakeroot", "fc", "firejail", "flock", "gtimeout",
    "ionice", "ltrace", "nice", "nohup", "nsenter", "parallel", "pkexec", "runuser", "script",
    "setsid", "sg", "source", "stdbuf", "strace", "su", "sudo", "systemd-run", "taskset", "time",
    "timeout", "unbuffer", "unshare", "watch", "xargs"})
# Built-ins that change how the rest of the line runs (where, which program a name means ...).
SHELL_STATE = frozenset({
    "alias", "cd", "declare", "enable", "export", "hash", "let", "local", "mapfile", "popd",
    "pushd", "readarray", "readonly", "set", "shopt", "trap", "typeset", "ulimit", "umask",
    "unalias", "unset"})
# bash evaluates an array subscript in what these built-ins take as a variable name, and the
# subscript may hold a command substitution: `read 'a[$(rm -r src)]'` runs rm.
SUBSCRIPT_BUILTINS = frozenset({"[", "getopts", "printf", "read", "test", "wait"})
FIND_RUNNERS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
# git options that take a value as the next word, so the scan for -c goes on past it.
GIT_VALUE_OPTIONS = frozenset({"-C", "--git-dir", "--work-tree", "--namespace"})
# core.pager, core.fsmonitor, alias.x=!cmd ... : a config value can name a program to run.
GIT_RUNNING_OPTIONS = ("-c", "--config-env", "--exec-path")

# Characters a person does not see, or sees other than the shell reads them: format characters
# (zero-width, bidirectional controls, tag characters), separators other than the space, and
# the variation selectors.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp", "Zs"})
HIDDEN_EXTRA = frozenset(range(0xFE00, 0xFE10)) | frozenset(range(0xE0100, 0xE01F0)) | {0x115F, 0x1160, 0x3164, 0xFFA0}


@dataclass(frozen=True)
class Split:
    """A line as simple commands (argv tuples) and the reasons it is not fully understood."""

    commands: tuple[tuple[str, ...], ...]
    opaque: tuple[str, ...] = ()


def split_command(line: str) -> Split:
    """The simple commands of a command line, and why it is opaque (empty when it is not).

    Never raises for any text: what cannot be parsed is reported as opaque.
    """
    scanner = _Scanner(line, [], [])
    hidden = hidden_characters(line)
    if hidden:
        scanner.note("characters that cannot be seen or are read otherwise: " + ", ".join(hidden))
    scanner.parse_list("", 0)
    return Split(tuple(scanner.commands), tuple(scanner.reasons))


def command_text(argv: Iterable[str]) -> str:
    """The normalized text of one simple command: plain words as they are, others single-quoted.

    Glob characters stay unquoted, so that a rule `rm *.pyc` reads as the command does.
    """
    return " ".join(_word_text(word) for word in argv)


def hidden_characters(text: str) -> list[str]:
    """The distinct characters of `text` that a person cannot see (tab and newline apart), as
    `U+XXXX` in order of first appearance."""
    found: list[str] = []
    for ch in text:
        if ch in "\t\n" or ch == " " or (ch.isascii() and ch.isprintable()):
            continue
        if _is_hidden(ch):
            name = f"U+{ord(ch):04X}"
            if name not in found:
                found.append(name)
    return found


def reveal(text: str) -> str:
    """`text` with every hidden character written as `<U+XXXX>`, to show to a person."""
    return "".join(f"<U+{ord(ch):04X}>" if ch not in "\t\n" and _is_hidden(ch) else ch
                   for ch in text)


def _is_hidden(ch: str) -> bool:
    if ch == " ":
        return False
    return unicodedata.category(ch) in HIDDEN_CATEGORIES or ord(ch) in HIDDEN_EXTRA


def _word_text(word: str) -> str:
    if (word and word.isascii() and word.isprintable() and not word.startswith("#")
            and not NEEDS_QUOTES.intersection(word)):
        return word
    return shlex.quote(word)


class _Scanner:
    """One pass over a line; nested substitutions recurse and share the results."""

    def __init__(self, text: str, commands: list[tuple[str, ...]], reasons: list[str]) -> None:
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
            elif text.startswith("\\\n", self.pos):
                self.note("line continuation \\<newline>")
                self.pos += 2
            else:
                break

    def parse_list(self, close: str, depth: int) -> None:
        """Read simple commands up to `close` (")" or a backtick) or to the end of the text."""
        text = self.text
        command = _Command()
        needs_command = False  # after `&&`, `||` or `|`: a command must follow (newlines may)
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
            if ch == "\n":
                if command.empty and needs_command:
                    self.pos += 1
                    if self.heredocs:
                        self.skip_heredocs(depth)
                    continue
                self.finish(command, depth)
                command, needs_command = _Command(), False
                self.pos += 1
                if self.heredocs:
                    self.skip_heredocs(depth)
            elif ch in ";&|":
                op = self.separator()
                if command.empty:
                    self.note(f"empty command before {op} (a syntax error)")
                self.finish(command, depth)
                command = _Command()
                needs_command = op in ("&&", "||", "|", "|&")
            elif ch == "(":
                self.note("subshell ( ... )")
                self.finish(command, depth)
                command = _Command()
                self.pos += 1
                self.nested(")", depth)
            elif ch == ")":
                self.note("unbalanced )")
                self.finish(command, depth)
                command = _Command()
                self.pos += 1
            elif ch in "<>" or (ch in DIGITS and self.at_io_number()):
                self.redirect(command, close, depth)
            elif ch == "#":  # a word that starts with # starts a comment
                self.note("comment #")
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                command.words.append(self.word(close, depth))
                if len(command.words) == 1 and text.startswith("(", self.pos):
                    self.note("function definition name()")
        if needs_command and command.empty:
            self.note("the line ends with an operator (a syntax error)")
        self.finish(command, depth)

    def separator(self) -> str:
        """Step over one of `;` `&` `|` `&&` `||` (or a bash-only form, noted) and name it."""
        text, pos = self.text, self.pos
        two = text[pos:pos + 3] if text.startswith("&>>", pos) else text[pos:pos + 2]
        if two in ("&&", "||"):
            self.pos += 2
            return two
        if two == "|&":
            self.note("|& (bash pipes stderr too; dash runs the command in the background)")
            self.pos += 2
            return two
        if two in (";;", ";&"):
            self.note(f"{two} (case clause)")
            self.pos += 2
            return two
        if two.startswith("&>"):
            # bash: a redirection of stdout and stderr; dash: `&` then `>`. Read as dash does:
            # the command ends here and the redirection starts the next one.
            self.note(f"{two} (a redirection in bash, & then > in dash)")
        self.pos += 1
        return text[pos]

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

    def redirect(self, command: _Command, close: str, depth: int) -> None:
        text = self.text
        start = self.pos
        while text[self.pos] in DIGITS:
            self.pos += 1
        if self.pos - start > 1:
            self.note("file descriptor above 9 (dash reads its digits as a word)")
        op = next(op for op in REDIRECTIONS if text.startswith(op, self.pos))
        self.pos += len(op)
        command.redirected = True
        if op in ("<", ">") and text.startswith("(", self.pos):
            self.note(f"process substitution {op}(...)")
            self.pos += 1
            self.nested(")", depth)
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
        raw = text[word_start:self.pos]
        if op in (">&", "<&"):
            if raw == "-" or (len(raw) == 1 and raw in DIGITS):
                return  # duplicating or closing a file descriptor: 2>&1, >&2, 3<&-
            self.note(f"{op}{raw} (bash writes to a file, dash wants a descriptor)")
            return
        if target == "/dev/null":
            return
        self.note("redirection from a file" if op == "<" else "redirection to a file")

    def word(self, close: str, depth: int) -> str:
        """One word with its quotes removed; expansions are kept as their source text."""
        text = self.text
        value: list[str] = []
        unquoted: list[str] = []  # the word with quoted characters as "\0"
        while self.pos < len(text):
            ch = text[self.pos]
            if ch in METACHARS or (ch == "`" and close == "`"):
                break
            if ch == "\\":
                escaped = text[self.pos + 1:self.pos + 2]
                self.pos += 2
                if escaped == "\n":
                    self.note("line continuation \\<newline>")
                elif not escaped:
                    self.note("backslash at the end of the line")
                    value.append("\\")
                    unquoted.append("\0")
                else:
                    value.append(escaped)
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
        self.check_unquoted("".join(unquoted))
        return "".join(value)

    def check_unquoted(self, unquoted: str) -> None:
        """Note what bash reads otherwise than dash in the unquoted characters of a word."""
        if _has_braces(unquoted):
            self.note("braces {...} (bash may expand them into several words)")
        if "=~" in unquoted or ":~" in unquoted:
            self.note("~ after = or : (bash expands it, dash does not)")

    def skip_heredocs(self, depth: int) -> None:
        """Step over the bodies of the here-documents opened on the line that just ended.

        An unquoted delimiter lets the shell expand the body, so its substitutions are still read.
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
                if escaped == "\n":
                    self.note("line continuation \\<newline>")
                    self.pos += 2
                elif escaped and escaped in '$`"\\':
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
        after = text[self.pos:self.pos + 1]
        if not after or after not in DOLLAR_SPECIAL or (quoted and after in "'\""):
            value.append("$")  # a `$` that starts nothing is a `$` in every shell
            return
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
        elif after == "'":
            self.note("ANSI-C quoting $'...'")
            end = self.pos + 1
            while end < len(text) and text[end] != "'":
                end += 2 if text[end] == "\\" else 1
            if end >= len(text):
                self.note("unbalanced quote")
            value.append(text[start:end + 1])
            self.pos = end + 1
        elif after == '"':
            self.note('locale quoting $"..."')  # the caller reads the double-quoted text
        elif after == "\\":
            self.note("$ before a backslash")
            value.append("$")
        elif after == "[":
            self.note("arithmetic expansion $[...]")
            value.append("$")
        else:
            self.note("parameter expansion $NAME")
            value.append("$")

    def backtick(self, value: list[str], depth: int) -> None:
        start = self.pos
        self.note("command substitution `...`")
        self.pos += 1
        self.nested("`", depth)
        value.append(self.text[start:self.pos])

    def finish(self, command: _Command, depth: int) -> None:
        if command.words:
            self.add(tuple(command.words), depth)

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
        if argv[0] != "[" and any(c in argv[0] for c in GLOB_CHARS + "~"):
            self.note("a pattern or ~ in the program name")
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
        elif name in SUBSCRIPT_BUILTINS and _subscript_risk(name, argv):
            self.note(f"{name} can evaluate an array subscript (bash runs what it holds)")
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


class _Command:
    """The words of the simple command being read, and whether it had a redirection."""

    __slots__ = ("words", "redirected")

    def __init__(self) -> None:
        self.words: list[str] = []
        self.redirected = False

    @property
    def empty(self) -> bool:
        return not self.words and not self.redirected


def _has_braces(unquoted: str) -> bool:
    """Whether unquoted text may be a brace expansion of bash ({a,b}, {1..3}; dash never expands
    them): a `{`, then an unquoted `,` or `..`, then a `}`. `stash@{0}` is read alike by both."""
    start = unquoted.find("{")
    while start >= 0:
        end = unquoted.find("}", start + 1)
        if end < 0:
            return False
        inside = unquoted[start + 1:end]
        if "," in inside or ".." in inside or "{" in inside:
            return True
        start = unquoted.find("{", end + 1)
    return False


def _subscript_risk(name: str, argv: tuple[str, ...]) -> bool:
    """Whether a built-in may take one of its words as a variable name with a subscript."""
    if name in ("[", "test"):
        return "-v" in argv or "-R" in argv
    if name == "printf":
        return any(arg.startswith("-v") for arg in argv[1:])
    return any("[" in arg for arg in argv[1:])  # read, getopts, wait -p: their names


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
