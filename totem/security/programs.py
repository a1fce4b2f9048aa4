"""What common programs do with their arguments: the arguments that turn a program into a runner
of other programs, or into a writer of files, or make it read what its command line does not show.

A wildcard allow rule (`allow bash sed *`) covers a program's ordinary use; `risky_use()` names
the uses it never covers: `sed` with `e`, `w`, `r` or `-i`, `awk` with `system()`, pipes or
output redirection, `find -exec` or `-delete`, `rg --pre`, `git -c` or `--upload-pack`, `tar
--to-command`, and the like for the other programs of `PROGRAMS`. Long options count with any
prefix, since GNU getopt and git accept a unique prefix (`--upload-pa=x` is `--upload-pack=x`), and
short options count inside a cluster (`sed -ni`). It reads only the words: a script in a file
(`sed -f`, `awk -f`) is a risk of its own, since its content cannot be seen here.

Must not: read files, run anything, decide (permissions.py does, from the reason given here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

RUNS = "can run another program"
WRITES = "can write files"
READS = "reads a script or more arguments from a file"

# The shortest prefix of a long option taken as that option: `--e` stands for nothing in
# practice, and GNU getopt would refuse an ambiguous one anyway.
MIN_PREFIX_CHARS = 3


@dataclass(frozen=True)
class Program:
    """The risky arguments of one program: long options (without `--`), short option letters,
    whole words, sub-commands (git), and a check of the whole argv for what the others miss."""

    long: dict[str, str] = field(default_factory=dict)  # name -> what it does (RUNS, WRITES ...)
    short: dict[str, str] = field(default_factory=dict)  # letter -> what it does
    value_letters: str = ""  # short options whose value may be glued (`-e's/a/b/'`)
    words: dict[str, str] = field(default_factory=dict)  # a whole argument -> what it does
    check: Callable[[tuple[str, ...]], str | None] | None = None


def risky_use(argv: tuple[str, ...]) -> str | None:
    """Why a wildcard allow rule cannot cover this command (`"sed -i can write files"`), or None."""
    if not argv:
        return None
    name = argv[0].rsplit("/", 1)[-1]
    program = PROGRAMS.get(name)
    if program is None:
        return None
    for word in argv[1:]:
        reason = _word_risk(name, program, word)
        if reason:
            return reason
    return program.check(argv) if program.check else None


def _word_risk(name: str, program: Program, word: str) -> str | None:
    if word in program.words:
        return f"{name} {word} {program.words[word]}"
    if word.startswith("--") and len(word) > 2:
        option = word[2:].split("=", 1)[0]
        for long_name, what in program.long.items():
            if option == long_name or (len(option) >= MIN_PREFIX_CHARS and long_name.startswith(option)):
                return f"{name} --{long_name} {what}"
        return None
    if word.startswith("-") and len(word) > 1 and program.short:
        for letter in word[1:]:
            if letter in program.short:
                return f"{name} -{letter} {program.short[letter]}"
            if letter in program.value_letters:
                break  # the rest of the word is that option's value
    return None


# sed --------------------------------------------------------------------------------------------

SED_SIMPLE = frozenset("=dDgGhHnNpPxzF{}")
SED_LABELLED = frozenset(":btT")
SED_NUMBERED = frozenset("qQlLv")
SED_TEXT = frozenset("aic")
SED_FILES = {"r": "reads a file", "R": "reads a file", "w": WRITES, "W": WRITES, "e": RUNS}
SED_S_FLAGS = frozenset("gpiImM0123456789")


def _sed_check(argv: tuple[str, ...]) -> str | None:
    """The script's commands: `e` runs, `w` writes, `r` reads, and so do the s///e and s///w flags."""
    scripts: list[str] = []
    operands: list[str] = []
    index = 1
    while index < len(argv):
        word = argv[index]
        if word in ("-e", "--expression") or word.startswith(("--expression=", "--expr")):
            if "=" in word:
                scripts.append(word.split("=", 1)[1])
            elif index + 1 < len(argv):
                scripts.append(argv[index + 1])
                index += 1
        elif word.startswith("-e") and len(word) > 2:
            scripts.append(word[2:])
        elif word.startswith("-") and not word.startswith("--") and "e" in word[1:]:
            cluster = word[1:]
            glued = cluster[cluster.index("e") + 1:]
            if glued:
                scripts.append(glued)
            elif index + 1 < len(argv):
                scripts.append(argv[index + 1])
                index += 1
        elif word == "--sandbox":
            return None  # GNU sed refuses e, r and w then
        elif not word.startswith("-") or word == "-":
            operands.append(word)
        index += 1
    if "--sandbox" in argv:
        return None
    if not scripts and operands:
        scripts.append(operands[0])
    for script in scripts:
        reason = sed_script_risk(script)
        if reason:
            return reason
    return None


def sed_script_risk(script: str) -> str | None:
    """What a sed script does beyond editing its output (run, write, read), or None. A script
    this reader cannot follow is a risk too: better a question than a missed `w`."""
    index, size = 0, len(script)
    while index < size:
        ch = script[index]
        if ch in " \t\n;":
            index += 1
            continue
        if ch == "#":
            end = script.find("\n", index)
            index = size if end < 0 else end
            continue
        index = _skip_sed_address(script, index)
        if index < 0:
            return "sed script that Totem cannot read"
        while index < size and script[index] in " \t!":
            index += 1
        if index >= size:
            return None
        command = script[index]
        index += 1
        if command in SED_FILES:
            return f"sed {command} command {SED_FILES[command]}"
        if command in SED_SIMPLE:
            continue
        if command in SED_LABELLED or command in SED_TEXT:
            end = script.find("\n", index)
            if command in SED_LABELLED and ";" in script[index:end if end >= 0 else size]:
                end = script.index(";", index)
            index = size if end < 0 else end
            continue
        if command in SED_NUMBERED:
            while index < size and (script[index].isdigit() or script[index] in " \t"):
                index += 1
            continue
        if command in "sy":
            index, flags = _sed_substitution(script, index, parts=2)
            if index < 0:
                return "sed script that Totem cannot read"
            if command == "y":
                continue
            for flag in flags:
                if flag in "ew":
                    return f"sed s///{flag} {RUNS if flag == 'e' else WRITES}"
                if flag not in SED_S_FLAGS:
                    return "sed script that Totem cannot read"
            continue
        return "sed script that Totem cannot read"
    return None


def _skip_sed_address(script: str, index: int) -> int:
    """Past the address (`1`, `$`, `/re/`, `\\cREc`, `1,5`, `1~2`, `0,/re/`, `addr,+3`); -1 if torn."""
    for _ in range(2):
        size = len(script)
        if index < size and (script[index].isdigit() or script[index] in "$+~"):
            index += 1
            while index < size and (script[index].isdigit() or script[index] == "~"):
                index += 1
        elif index < size and script[index] in "/\\":
            delimiter = "/"
            if script[index] == "\\":
                if index + 1 >= size:
                    return -1
                delimiter = script[index + 1]
                index += 1
            index = _sed_delimited(script, index + 1, delimiter)
            if index < 0:
                return -1
            while index < size and script[index] in "IM":
                index += 1
        else:
            return index
        if index < size and script[index] == ",":
            index += 1
            continue
        return index
    return index


def _sed_substitution(script: str, index: int, parts: int) -> tuple[int, str]:
    """Past `/regex/replacement/` (the delimiter is the character at `index`); and its flags."""
    if index >= len(script) or script[index] in "\n\\":
        return -1, ""
    delimiter = script[index]
    index += 1
    for _ in range(parts):
        index = _sed_delimited(script, index, delimiter)
        if index < 0:
            return -1, ""
    end = index
    while end < len(script) and script[end] not in ";\n}":
        end += 1
    return end, script[index:end].replace(" ", "")


def _sed_delimited(script: str, index: int, delimiter: str) -> int:
    while index < len(script):
        if script[index] == "\\":
            index += 2
            continue
        if script[index] == delimiter:
            return index + 1
        if script[index] == "\n":
            return -1
        index += 1
    return -1


# awk --------------------------------------------------------------------------------------------

AWK_REGEX_AFTER = frozenset("{(,;~!&|=+-*%<>?:^\n")


def _awk_check(argv: tuple[str, ...]) -> str | None:
    index = 1
    while index < len(argv):
        word = argv[index]
        if word in ("-F", "-v", "--field-separator", "--assign"):
            index += 2
            continue
        if word in ("-e", "--source"):
            return _awk_program_risk(argv[index + 1] if index + 1 < len(argv) else "")
        if word.startswith("--") and "=" in word and "source".startswith(word[2:].split("=")[0]):
            return _awk_program_risk(word.split("=", 1)[1])
        if word == "--":
            index += 1
            break
        if word.startswith("-") and len(word) > 1:
            index += 1
            continue
        break
    if index < len(argv):
        return _awk_program_risk(argv[index])
    return None


def _awk_program_risk(program: str) -> str | None:
    """`system()`, a pipe to or from a command, `getline`, output redirection, `@load`."""
    code = _awk_code(program)
    if "system" in code:
        return "awk system() runs a program"
    if "|" in code.replace("||", ""):
        return "awk pipe | runs a program"
    if "getline" in code:
        return "awk getline reads a file or a program's output"
    if "@" in code:
        return "awk @load or @include loads code"
    if ">" in code and "print" in code:
        return "awk print > writes a file"
    return None


def _awk_code(program: str) -> str:
    """The program without its strings and the regular expressions that cannot be divisions."""
    out: list[str] = []
    index, size = 0, len(program)
    previous = "\n"
    while index < size:
        ch = program[index]
        if ch == '"':
            index += 1
            while index < size and program[index] != '"':
                index += 2 if program[index] == "\\" else 1
            index += 1
            out.append('""')
            previous = '"'
            continue
        if ch == "/" and previous in AWK_REGEX_AFTER:
            index += 1
            while index < size and program[index] not in "/\n":
                index += 2 if program[index] == "\\" else 1
            index += 1
            out.append("//")
            previous = "/"
            continue
        out.append(ch)
        if ch not in " \t":
            previous = ch
        index += 1
    return "".join(out)


# git --------------------------------------------------------------------------------------------

GIT_GLOBAL_VALUES = frozenset({"-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix"})
GIT_GLOBAL_RISKS = {"-c": RUNS, "--config-env": RUNS, "--exec-path": RUNS, "--list-cmds": RUNS}
# Sub-commands whose ordinary use runs programs, edits the configuration or serves the repository.
GIT_RUNNING_COMMANDS = frozenset({
    "bisect", "config", "credential", "credential-cache", "credential-store", "cvsimport",
    "cvsserver", "daemon", "difftool", "filter-branch", "filter-repo", "hook", "instaweb",
    "mergetool", "p4", "quiltimport", "receive-pack", "remote-ext", "remote-fd", "send-email",
    "shell", "submodule", "svn", "upload-archive", "upload-pack", "web--browse"})
GIT_LONG = {
    "upload-pack": RUNS, "receive-pack": RUNS, "exec": RUNS, "extcmd": RUNS, "tool": RUNS,
    "open-files-in-pager": RUNS, "config": RUNS, "template": RUNS, "output": WRITES,
    "output-directory": WRITES, "separate-git-dir": WRITES, "ext-diff": RUNS, "textconv": RUNS,
    "run": RUNS, "web": RUNS, "man": RUNS, "info": RUNS, "remote": RUNS,
}
GIT_SHORT = {  # per sub-command: the short options that run or write
    "clone": {"u": RUNS, "c": RUNS}, "ls-remote": {"u": RUNS}, "fetch": {}, "grep": {"O": RUNS},
    "rebase": {"x": RUNS}, "difftool": {"x": RUNS, "t": RUNS}, "mergetool": {"t": RUNS},
    "format-patch": {"o": WRITES}, "archive": {"o": WRITES}, "help": {"w": RUNS, "i": RUNS, "m": RUNS},
    "init": {}, "commit": {}, "log": {}, "diff": {},
}


def _git_check(argv: tuple[str, ...]) -> str | None:
    index = 1
    while index < len(argv) and argv[index].startswith("-"):
        word = argv[index]
        option = word.split("=", 1)[0]
        for risky, what in GIT_GLOBAL_RISKS.items():
            if option == risky or (risky.startswith("--") and len(option) >= 2 + MIN_PREFIX_CHARS
                                   and risky.startswith(option)):
                return f"git {risky} {what}"
        if word.startswith("-c") and not word.startswith("--"):
            return f"git -c {RUNS}"
        index += 2 if word in GIT_GLOBAL_VALUES else 1
    if index >= len(argv):
        return None
    command = argv[index]
    if command in GIT_RUNNING_COMMANDS:
        return f"git {command} {RUNS}"
    sub = Program(long=GIT_LONG, short=GIT_SHORT.get(command, {}))
    for word in argv[index + 1:]:
        reason = _word_risk(f"git {command}", sub, word)
        if reason:
            return reason
    return None


# the others -------------------------------------------------------------------------------------

def _tar_check(argv: tuple[str, ...]) -> str | None:
    """Old-style letters (`tar xzIf ...`) and an archive on another host (`-f host:file` runs rsh)."""
    if len(argv) > 1 and not argv[1].startswith("-"):
        for letter in argv[1]:
            if letter in "IF":
                return f"tar {letter} {RUNS}"
    for index, word in enumerate(argv[1:], start=1):
        archive = None
        if word.startswith("--file="):
            archive = word.split("=", 1)[1]
        elif word.startswith("-") and not word.startswith("--") and word.endswith("f") and index + 1 < len(argv):
            archive = argv[index + 1]
        if archive and ":" in archive and "--force-local" not in argv:
            return f"tar -f {archive} {RUNS} (an archive on another host)"
    return None


def _operands(argv: tuple[str, ...]) -> list[str]:
    return [word for word in argv[1:] if not word.startswith("-") or word == "-"]


def _second_operand_writes(argv: tuple[str, ...]) -> str | None:
    """`xxd in out`, `uniq in out`: the second operand is a file they write."""
    if len(_operands(argv)) >= 2:
        return f"{argv[0].rsplit('/', 1)[-1]} with two files {WRITES} (the second one)"
    return None


def _curl_check(argv: tuple[str, ...]) -> str | None:
    for word in argv[1:]:
        if word.lower().startswith(("file:", "scp:", "sftp:")):
            return f"curl {word.split(':', 1)[0]}: reads files"
        if word.startswith(("@", "-d@", "-F@")) or "=@" in word:
            return "curl @file sends a file"
    return None


def _sqlite_check(argv: tuple[str, ...]) -> str | None:
    for word in argv[1:]:
        if (any(line.lstrip().startswith(".") for line in word.split("\n")) and not word.startswith("./")
                and word not in (".", "..")):
            return "sqlite3 dot-command can run programs or write files"
    return None


SSH_VALUE_LETTERS = "BbcDEeIiJLlmOpPQRWw"
_EDITOR = Program(check=lambda argv: "an editor can run programs (:!, -c)")

PROGRAMS: dict[str, Program] = {
    "sed": Program(long={"in-place": WRITES, "file": READS}, short={"i": WRITES, "f": READS},
                   value_letters="efl", check=_sed_check),
    "awk": Program(long={"file": READS, "include": READS, "load": RUNS, "exec": READS,
                         "dump-variables": WRITES, "debug": RUNS, "profile": WRITES,
                         "pretty-print": WRITES},
                   short={"f": READS, "i": READS, "l": RUNS, "E": READS, "d": WRITES, "D": RUNS,
                          "p": WRITES, "o": WRITES},
                   value_letters="Fv", check=_awk_check),
    "find": Program(words={"-exec": RUNS, "-execdir": RUNS, "-ok": RUNS, "-okdir": RUNS,
                           "-delete": WRITES, "-fprint": WRITES, "-fprint0": WRITES,
                           "-fprintf": WRITES, "-fls": WRITES}),
    "rg": Program(long={"pre": RUNS, "search-zip": RUNS, "hostname-bin": RUNS},
                  short={"z": RUNS}, value_letters="ABCEefgMmrTtj"),
    "man": Program(long={"html": RUNS, "pager": RUNS, "gxditview": RUNS, "config-file": READS,
                         "preprocessor": RUNS, "troff": RUNS, "troff-device": RUNS, "ditroff": RUNS,
                         "browser": RUNS},
                   short={"H": RUNS, "P": RUNS, "X": RUNS, "C": READS, "p": RUNS, "t": RUNS,
                          "T": RUNS, "Z": RUNS},
                   value_letters="LmMSes"),
    "git": Program(check=_git_check),
    "tar": Program(long={"to-command": RUNS, "use-compress-program": RUNS, "checkpoint-action": RUNS,
                         "info-script": RUNS, "new-volume-script": RUNS, "rsh-command": RUNS,
                         "rmt-command": RUNS, "index-file": WRITES, "files-from": READS},
                   short={"I": RUNS, "F": RUNS, "T": READS}, value_letters="fbCgHKLNV",
                   check=_tar_check),
    "sort": Program(long={"output": WRITES, "compress-program": RUNS, "files0-from": READS},
                    short={"o": WRITES}, value_letters="kStT"),
    "xxd": Program(check=_second_operand_writes),
    "uniq": Program(check=_second_operand_writes),
    "less": Program(long={"log-file": WRITES, "LOG-FILE": WRITES, "lesskey-file": READS},
                    short={"o": WRITES, "O": WRITES, "k": READS},
                    check=lambda argv: ("less +command runs less commands"
                                        if any(w.startswith("+") for w in argv[1:]) else None)),
    "curl": Program(long={"output": WRITES, "remote-name": WRITES, "remote-name-all": WRITES,
                          "dump-header": WRITES, "cookie-jar": WRITES, "trace": WRITES,
                          "trace-ascii": WRITES, "stderr": WRITES, "config": READS, "libcurl": WRITES,
                          "etag-save": WRITES, "hsts": WRITES, "alt-svc": WRITES,
                          "upload-file": "sends a file", "output-dir": WRITES},
                    short={"o": WRITES, "O": WRITES, "D": WRITES, "c": WRITES, "K": READS,
                           "T": "sends a file"},
                    value_letters="AbdeEFHmrtuUwxXyYz", check=_curl_check),
    "wget": Program(long={"use-askpass": RUNS, "execute": RUNS, "output-document": WRITES,
                          "output-file": WRITES, "append-output": WRITES, "post-file": "sends a file",
                          "body-file": "sends a file", "directory-prefix": WRITES, "config": READS,
                          "input-file": READS},
                    short={"e": RUNS, "O": WRITES, "o": WRITES, "a": WRITES, "P": WRITES, "i": READS}),
    "rsync": Program(long={"rsh": RUNS, "rsync-path": RUNS, "files-from": READS},
                     short={"e": RUNS}),
    "ssh": Program(short={"o": RUNS, "F": READS}, value_letters=SSH_VALUE_LETTERS),
    "scp": Program(short={"o": RUNS, "F": READS, "S": RUNS}, value_letters=SSH_VALUE_LETTERS),
    "sftp": Program(short={"o": RUNS, "F": READS, "S": RUNS, "D": RUNS},
                    value_letters=SSH_VALUE_LETTERS),
    "zip": Program(long={"unzip-command": RUNS}, short={"T": RUNS}),
    "date": Program(long={"set": "changes the system clock", "file": READS},
                    short={"s": "changes the system clock", "f": READS}),
    "sqlite3": Program(words={"-init": READS, "-cmd": RUNS}, check=_sqlite_check),
    "prettier": Program(long={"write": WRITES}, short={"w": WRITES}),
    "eslint": Program(long={"fix": WRITES, "output-file": WRITES}, short={"o": WRITES}),
    "gofmt": Program(short={"w": WRITES}),
    "ruff": Program(long={"fix": WRITES, "unsafe-fixes": WRITES}),
    "yq": Program(long={"inplace": WRITES}, short={"i": WRITES}),
    "crontab": Program(check=lambda argv: "crontab schedules programs"),
    **dict.fromkeys(("vi", "vim", "nvim", "view", "ex", "emacs", "nano"), _EDITOR),
}
PROGRAMS.update(dict.fromkeys(("gawk", "mawk", "nawk"), PROGRAMS["awk"]))
PROGRAMS["gsed"] = PROGRAMS["sed"]
PROGRAMS["ripgrep"] = PROGRAMS["rg"]
