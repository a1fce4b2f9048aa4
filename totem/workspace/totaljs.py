"""Total.js projects: recognising one, and checking the code blocks of an answer written for it.

`detect()` says whether a project folder is a Total.js application (the Node.js framework, npm
packages `total4` and `total5`; `total.js` is version 3 and older) and which version. It reads at
most two kinds of file, each with a bounded read: `package.json` (its dependency sections) and,
when that says nothing, the start script (`index.js`, `debug.js`, `release.js`) of a project whose
folders look like Total.js. Every path goes through `boundary.resolve_inside()`, so a link that
leads outside the project is never followed.

`check_answer()` checks the fenced code blocks of a Markdown answer and returns the validation
part of the protocol (`{problems: [{rule, severity, message, block?, line?}], blocking}`). It is
pure apart from reading the project's `package.json` for `require-missing`, and never raises on
any text. The JavaScript rules run over blocks tagged js, javascript, mjs, cjs, ts, typescript,
node or a file name ending in one of those extensions, over the `<script>` elements of html
blocks, and over untagged blocks with a plain JavaScript marker (`require(`, `module.exports`,
`import ... from '...'`, `console.log(`, `ROUTE(`, `NEWSCHEMA(`, `NEWACTION(`). JSX and TSX are
not checked: their text content defeats a simple lexer.

`check_files()` checks a project's own .js and .html files by the same rules (the checks after
edits, agent/checks.py), a problem naming its `file` instead of a block.

Rules (`rule` id, severity, what it catches):

| rule                | severity      | catches                                                       |
| ------------------- | ------------- | ------------------------------------------------------------- |
| `cut`               | error         | the model stopped at its output limit (`cut=True`), or the    |
|                     |               | last fence of the answer is never closed                      |
| `unbalanced`        | error         | an unmatched `(` `[` `{` `)` `]` `}` in a JS block, a string  |
|                     |               | not closed on its line, an unclosed template literal or `/*`  |
| `require-missing`   | error         | `require('x')`, `import ... from 'x'`, `import('x')` of a     |
|                     |               | package the project's package.json does not list              |
|                     | warning       | the same when the answer itself says to install it (`npm      |
|                     |               | install x`, `yarn add x`, `pnpm add x`), or when package.json |
|                     |               | exists but cannot be read                                     |
| `wrong-version-api` | error/warning | an API of another Total.js version (table below)              |
| `empty-block`       | warning       | a code block with nothing but white space                     |
| `not-checked`       | warning       | the answer, its blocks or its problems passed a limit below   |

`require-missing` runs only when `root` is given and has a package.json. Node.js built-ins
(`node:` prefix or NODE_BUILTINS), relative paths (`./`, `../`, `/`), URLs and import-map names
(`#x`) are never reported; `pkg/sub` and `@scope/pkg/sub` count as `pkg` and `@scope/pkg`;
`import type` is satisfied by `@types/pkg` as well. The framework packages count as present
when they match the detected version (a project found by its layout may not list them), and a
mismatching one is left to `wrong-version-api`. Each package is reported once, where it is first
used.

`wrong-version-api` runs only when the project's version is known to be 4 or 5. The table holds
only what the framework's own source shows (Total.js 4 `index.js` defines the globals ROUTE(),
WEBSOCKET() and FILE(), and its ROUTE() hands 'SOCKET /path' and 'FILE /path' to them; Total.js 5
`global.js` defines ROUTE() and its blog documents ROUTE('SOCKET ...') and ROUTE('FILE ...');
the `F.route()` family is the Total.js 2/3 controller API):

| in a 4 or 5 project                    | severity | instead                                   |
| -------------------------------------- | -------- | ----------------------------------------- |
| `F.route(`, `framework.route(`         | error    | `ROUTE('GET /path', action)`              |
| `F.websocket(`, `framework.websocket(` | error    | `ROUTE('SOCKET /path', action)`           |
| `F.file(`, `framework.file(`           | warning  | `ROUTE('FILE /path/*.jpg', action)`       |
| `require('total.js')`, `import` of it  | error    | the project's `total4` / `total5`         |
| `total4` in a version 5 project        | error    | `total5` (start: `require('total5').run`) |
| `total5` in a version 4 project        | error    | `total4` (start: `require('total4/debug')`) |

`F.file()` is a warning: its absence from 4 and 5 is less certain than the others'. Not in the
table on purpose: `F.resource()` (Total.js 5 still defines it), and the globals `FILE()` and
`WEBSOCKET()` in a version 5 project (the 5 globals do not define them, but the start code was
not read in full).

Must not: use the network, write files, run anything, read anything but the files named above.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from totem.security import boundary

MAX_PACKAGE_JSON_BYTES = 256 * 1024  # a larger package.json is not read at all
MAX_START_FILE_BYTES = 64 * 1024  # only the start of a larger index.js is read
MAX_ANSWER_CHARS = 256 * 1024  # only this much of an answer is checked
MAX_BLOCKS = 100  # code blocks checked in one answer
MAX_PROBLEMS = 50  # problems listed for one answer (errors are kept first)
MAX_IMPORT_LOOKAHEAD = 64  # tokens after `import`/`export` searched for `from '...'`

ERROR = "error"
WARNING = "warning"

RULE_CUT = "cut"
RULE_UNBALANCED = "unbalanced"
RULE_REQUIRE_MISSING = "require-missing"
RULE_WRONG_VERSION = "wrong-version-api"
RULE_EMPTY_BLOCK = "empty-block"
RULE_NOT_CHECKED = "not-checked"

# The npm packages of the framework and the version each one is (`total.js` is 3 and older).
FRAMEWORK_PACKAGES: dict[str, int | None] = {"total4": 4, "total5": 5, "total.js": None}
DEPENDENCY_SECTIONS = ("dependencies", "devDependencies", "peerDependencies", "optionalDependencies",
                       "bundledDependencies", "bundleDependencies")
# The framework's folders (the loader of Total.js 4 and 5 reads these), and the ones of them that
# only a Total.js application has: `public/` and `views/` alone are any web project.
LAYOUT_FOLDERS = ("controllers", "schemas", "definitions", "plugins", "public", "views", "resources")
LAYOUT_CORE_FOLDERS = ("controllers", "schemas", "plugins")
START_FILES = ("index.js", "debug.js", "release.js")

# Node.js core modules that may be required without the `node:` prefix (`node:test`, `node:sea`
# and `node:sqlite` exist only with it, which is accepted for any name).
NODE_BUILTINS = frozenset({
    "assert", "async_hooks", "buffer", "child_process", "cluster", "console", "constants",
    "crypto", "dgram", "diagnostics_channel", "dns", "domain", "events", "fs", "http", "http2",
    "https", "inspector", "module", "net", "os", "path", "perf_hooks", "process", "punycode",
    "querystring", "readline", "repl", "stream", "string_decoder", "sys", "timers", "tls",
    "trace_events", "tty", "url", "util", "v8", "vm", "wasi", "worker_threads", "zlib",
})

JS_LANGUAGES = frozenset({"js", "javascript", "mjs", "cjs", "ts", "typescript", "node", "nodejs"})
JS_EXTENSIONS = (".js", ".mjs", ".cjs", ".ts")
HTML_LANGUAGES = frozenset({"html", "htm", "xhtml"})
# `<script type=...>` values that hold JavaScript; templates (`text/html`) and JSX are skipped.
SCRIPT_TYPES = frozenset({"", "text/javascript", "application/javascript", "application/x-javascript",
                          "text/ecmascript", "module"})

# (object, method, severity, advice): calls of another version's API in a 4 or 5 project.
WRONG_VERSION_CALLS: tuple[tuple[str, str, str, str], ...] = (
    ("F", "route", ERROR, "register the route with the global ROUTE('GET /path', action)"),
    ("framework", "route", ERROR, "register the route with the global ROUTE('GET /path', action)"),
    ("F", "websocket", ERROR, "register the socket with ROUTE('SOCKET /path', action)"),
    ("framework", "websocket", ERROR, "register the socket with ROUTE('SOCKET /path', action)"),
    ("F", "file", WARNING, "register the file route with ROUTE('FILE /path/*.jpg', action)"),
    ("framework", "file", WARNING, "register the file route with ROUTE('FILE /path/*.jpg', action)"),
)

Problem = dict[str, str | int]


@dataclass(frozen=True)
class Detection:
    """Whether a project is a Total.js application, its version (4, 5, or None when unknown or
    older) and a short sentence saying why."""

    totaljs: bool
    version: int | None
    reason: str


@dataclass(frozen=True)
class Validation:
    """The validation part of an answer: every problem found, and whether any is an error."""

    problems: list[Problem]
    blocking: bool

    def view(self) -> dict[str, list[Problem] | bool]:
        """The part as the protocol sends it: `{problems, blocking}`."""
        return {"problems": [dict(problem) for problem in self.problems], "blocking": self.blocking}


def detect(root: str) -> Detection:
    """Whether the project in `root` is a Total.js application, and which version.

    It is when its package.json lists total4, total5 or total.js in a dependency section, or
    when it has at least two of LAYOUT_FOLDERS (one of them in LAYOUT_CORE_FOLDERS) and one of
    START_FILES requires or imports the framework. Raises nothing: an unreadable, broken, too
    large or outside package.json is only "not from package.json".
    """
    manifest = _read_manifest(root)
    if manifest.dependencies is not None:
        found = [name for name in FRAMEWORK_PACKAGES if name in manifest.dependencies]
        versions = sorted(version for name in found if (version := FRAMEWORK_PACKAGES[name]) is not None)
        if len(versions) == 1:
            return Detection(True, versions[0], f"package.json depends on total{versions[0]}")
        if versions:
            return Detection(True, None, "package.json depends on both total4 and total5")
        if found:
            return Detection(True, None, "package.json depends on total.js, the package of Total.js 3 "
                                         "and older (not version 4 or 5)")
        first = "package.json lists no Total.js package"
    elif manifest.present:
        first = f"package.json was not read ({manifest.failure})"
    else:
        first = "there is no package.json"
    folders = [name for name in LAYOUT_FOLDERS if _is_folder(root, name)]
    if len(folders) < 2 or not any(name in LAYOUT_CORE_FOLDERS for name in folders):
        return Detection(False, None, f"{first}, and the folders are not a Total.js layout")
    listed = ", ".join(f"{name}/" for name in folders)
    for start in START_FILES:
        data, _ = _read_bounded(root, start, MAX_START_FILE_BYTES, whole=False)
        if data is None:
            continue
        code = data.decode("utf-8", errors="replace")
        for specifier, _line, _type_only in _imports(_Scanner(code, 1).run().tokens):
            package = _package_name(specifier)
            if package in FRAMEWORK_PACKAGES:
                return Detection(True, FRAMEWORK_PACKAGES[package],
                                 f"{start} requires {package} and the project has the folders {listed}")
    return Detection(False, None, f"{first}, and although the project has the folders {listed}, no "
                                  f"{', '.join(START_FILES)} requires total4, total5 or total.js")


def check_answer(text: str, *, root: str | None, version: int | None, cut: bool) -> Validation:
    """The problems of the fenced code blocks of a Markdown answer (the rules of the module's
    docstring), for a project in `root` (None: no package.json check) of Total.js `version`
    (None: unknown), `cut` when the model stopped at its output limit.

    Raises nothing, whatever the text; reads only `root`'s package.json, and only when a block
    requires a package.
    """
    checker = _Checker(root, version)
    checked = text[:MAX_ANSWER_CHARS]
    truncated = len(text) > MAX_ANSWER_CHARS
    if truncated:
        checker.add(RULE_NOT_CHECKED, WARNING, f"the answer is longer than {MAX_ANSWER_CHARS} characters: "
                                               f"only the first {MAX_ANSWER_CHARS} were checked")
    checked = checked.replace("\r\n", "\n").replace("\r", "\n")
    blocks = list(_blocks(checked))
    last = blocks[-1] if blocks else None
    if last is not None and not last.closed and not truncated:
        checker.add(RULE_CUT, ERROR, "the answer was cut at the output limit: the last code block is incomplete",
                    block=last.index)
    elif cut:
        checker.add(RULE_CUT, ERROR, "the answer was cut at the output limit: its end is missing, and the "
                                     "last code block may be incomplete")
    if len(blocks) > MAX_BLOCKS:
        checker.add(RULE_NOT_CHECKED, WARNING, f"the answer has {len(blocks)} code blocks: only the first "
                                               f"{MAX_BLOCKS} were checked")
    checker.installs = _install_mentions(checked)
    for block in blocks[:MAX_BLOCKS]:
        checker.check_block(block)
    return checker.validation()


def check_files(files: list[tuple[str, str | None]], *, root: str | None, version: int | None) -> Validation:
    """The problems of a project's files as the step's edits left them, `files` as (path, text,
    None when the file was too large to read): the JavaScript rules over each whole
    `.js`/`.mjs`/`.cjs` file and over the `<script>` elements of each `.html`/`.htm` one. A
    problem names its `file` and `line` instead of a block; `cut` and `empty-block` are rules of
    answers and never reported here. A file longer than MAX_ANSWER_CHARS is not checked (a
    warning says so): its cut end would look unbalanced.

    Raises nothing, whatever the text; reads only `root`'s package.json, as check_answer does.
    """
    checker = _Checker(root, version)
    paths: dict[int, str] = {}
    for index, (path, text) in enumerate(files[:MAX_BLOCKS], start=1):
        paths[index] = path
        if text is None or len(text) > MAX_ANSWER_CHARS:
            checker.add(RULE_NOT_CHECKED, WARNING, f"{path} is too large to check (over {MAX_ANSWER_CHARS} "
                                                   "characters)", block=index)
            continue
        code = text.replace("\r\n", "\n").replace("\r", "\n")
        if code.strip():
            language = "html" if path.lower().endswith((".html", ".htm")) else "js"
            checker.check_block(_Block(index, language, language, code, True))
    if len(files) > MAX_BLOCKS:
        checker.add(RULE_NOT_CHECKED, WARNING, f"{len(files)} files were changed: only the first "
                                               f"{MAX_BLOCKS} were checked")
    found = checker.validation()
    problems = []
    for problem in found.problems:
        place, line = problem.pop("block", 0), problem.pop("line", 0)
        if isinstance(place, int) and place in paths:
            problem["file"] = paths[place]
            if line:
                problem["line"] = line
        problems.append(problem)
    return Validation(problems, found.blocking)


# --- Fenced code blocks ------------------------------------------------------------------------

_FENCE_OPEN = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]+")


@dataclass(frozen=True)
class _Block:
    index: int  # 1-based, among all the fenced blocks of the answer
    language: str  # the first word of the info string, in lower case ("" when untagged)
    info: str
    text: str
    closed: bool


def _blocks(text: str) -> Iterator[_Block]:
    """The fenced code blocks of a Markdown text, in order.

    Read as CommonMark reads them (a fence of 3+ backticks or tildes, closed by a fence of the
    same character at least as long, with nothing after it; a backtick fence's info string has
    no backtick), but more leniently about indentation: a fence may be indented by any amount
    (answers put blocks in lists), and that indentation is taken off the block's lines. Fences
    inside block quotes are not recognised.
    """
    lines = text.split("\n")
    index = 0
    position = 0
    while position < len(lines):
        opening = _FENCE_OPEN.fullmatch(lines[position])
        position += 1
        if opening is None:
            continue
        fence, info = opening.group(1), opening.group(2)
        if fence[0] == "`" and "`" in info:
            continue  # inline code such as ```x```, not a fence
        indent = len(lines[position - 1]) - len(lines[position - 1].lstrip(" \t"))
        closing = re.compile(r"[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*")
        body: list[str] = []
        closed = False
        while position < len(lines):
            line = lines[position]
            position += 1
            if closing.fullmatch(line):
                closed = True
                break
            body.append(_dedent(line, indent))
        index += 1
        yield _Block(index, _language(info), info.strip(), "\n".join(body), closed)


def _dedent(line: str, indent: int) -> str:
    """The line with at most `indent` leading blanks taken off."""
    taken = 0
    while taken < indent and taken < len(line) and line[taken] in " \t":
        taken += 1
    return line[taken:]


def _language(info: str) -> str:
    """The language of an info string: its first word (before any `:` or `{`) in lower case, or
    "js" for a file name with a JavaScript extension (```controllers/api.js)."""
    words = info.strip().split()
    if not words:
        return ""
    first = words[0].strip("{}").lower()
    if first.endswith(JS_EXTENSIONS):
        return "js"
    word = _LANGUAGE.match(first.lstrip("."))
    return word.group(0) if word else ""


_LOOKS_LIKE_JS = re.compile(
    r"\brequire\s*\(\s*['\"`]|\bmodule\.exports\b|^\s*import\s[^\n]*\bfrom\s*['\"]|\bconsole\.log\s*\("
    r"|\b(?:ROUTE|NEWSCHEMA|NEWACTION)\s*\(", re.MULTILINE)
_SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script\s*>", re.IGNORECASE | re.DOTALL)
_SCRIPT_TYPE = re.compile(r"""(?:^|\s)type\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", re.IGNORECASE)


def _code_regions(block: _Block) -> list[tuple[str, int]]:
    """The JavaScript of a block, as (code, line of its first character within the block)."""
    if block.language in JS_LANGUAGES or (block.language == "" and _LOOKS_LIKE_JS.search(block.text)):
        return [(block.text, 1)]
    if block.language not in HTML_LANGUAGES:
        return []
    regions = []
    for script in _SCRIPT.finditer(block.text):
        kind = _SCRIPT_TYPE.search(script.group(1))
        value = next((group for group in kind.groups() if group is not None), "") if kind else ""
        if value.strip().lower() in SCRIPT_TYPES:
            regions.append((script.group(2), block.text.count("\n", 0, script.start(2)) + 1))
    return regions


# --- A small JavaScript lexer ------------------------------------------------------------------

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {")": "(", "]": "[", "}": "{"}
_PUNCTUATORS = (">>>=", "...", "===", "!==", "**=", "<<=", ">>=", ">>>", "&&=", "||=", "??=", "=>", "==",
                "!=", "<=", ">=", "&&", "||", "??", "?.", "++", "--", "+=", "-=", "*=", "%=", "&=", "|=",
                "^=", "**", "<<", ">>")
# After these words an expression starts, so a `/` opens a regular expression, not a division.
_EXPRESSION_KEYWORDS = frozenset({"return", "typeof", "instanceof", "in", "of", "new", "delete", "void",
                                  "throw", "case", "do", "else", "yield", "await"})
_NAME = re.compile(r"[A-Za-z_$\u0080-\U0010ffff][\w$\u0080-\U0010ffff]*")
_NUMBER = re.compile(r"\.?[0-9][\w.]*")
_BLANKS = re.compile(r"[^\S\n]+")


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # name, number, string, template, template-expr, regex, open, close, punct
    text: str  # the name, the string's or template's raw content, the bracket or punctuator
    line: int


@dataclass(frozen=True, slots=True)
class _Scan:
    tokens: list[_Token]
    problem: tuple[str, int] | None  # the first imbalance: (message, line)


class _Scanner:
    """Tokens of JavaScript code and its first unbalanced bracket, skipping what is inside
    strings, template literals (with `${}` nesting), comments and regular expressions.

    A `/` starts a regular expression after a punctuator, an opening bracket or a keyword of
    _EXPRESSION_KEYWORDS, and is a division after a name, a literal or a closing bracket; a
    regular expression that does not end on its line was a division after all. Linear in the
    length of the code.
    """

    def __init__(self, code: str, first_line: int) -> None:
        self.code = code
        self.i = 0
        self.line = first_line
        self.tokens: list[_Token] = []
        self.stack: list[tuple[str, int, int]] = []  # (opener or "${", its line, its template's line)
        self.problem: tuple[str, int] | None = None

    def run(self) -> _Scan:
        code = self.code
        if code.startswith("#!"):
            end = code.find("\n")
            self.i = len(code) if end == -1 else end
        while self.i < len(code):
            c = code[self.i]
            if c == "\n":
                self.line += 1
                self.i += 1
            elif c.isspace():
                blanks = _BLANKS.match(code, self.i)
                self.i = blanks.end() if blanks else self.i + 1
            elif c == "/":
                self.slash()
            elif c in "'\"":
                self.string(c)
            elif c == "`":
                self.i += 1
                self.template(self.line, substituted=False)
            elif c in _OPENERS:
                self.stack.append((c, self.line, 0))
                self.emit("open", c, 1)
            elif c in _CLOSERS:
                self.close(c)
            elif (number := _NUMBER.match(code, self.i)) is not None:
                self.emit("number", number.group(0), len(number.group(0)))
            elif (name := _NAME.match(code, self.i)) is not None:
                self.emit("name", name.group(0), len(name.group(0)))
            else:
                self.punctuator()
        if self.stack:
            opener, line, template_line = self.stack[0]
            if opener == "${":
                self.report(f"the template literal opened on line {template_line} is never closed: "
                            "add the missing ` (or the } of its ${...})", template_line)
            else:
                self.report(f"the `{opener}` opened on line {line} is never closed: "
                            f"add the missing `{_OPENERS[opener]}`", line)
        return _Scan(self.tokens, self.problem)

    def report(self, message: str, line: int) -> None:
        if self.problem is None:
            self.problem = (message, line)

    def emit(self, kind: str, text: str, length: int) -> None:
        self.tokens.append(_Token(kind, text, self.line))
        self.i += length

    def regex_allowed(self) -> bool:
        if not self.tokens:
            return True
        last = self.tokens[-1]
        if last.kind == "open":
            return True
        if last.kind == "punct":
            return last.text not in ("++", "--")
        return last.kind == "name" and last.text in _EXPRESSION_KEYWORDS

    def slash(self) -> None:
        code = self.code
        following = code[self.i + 1:self.i + 2]
        if following == "/":
            end = code.find("\n", self.i)
            self.i = len(code) if end == -1 else end
        elif following == "*":
            end = code.find("*/", self.i + 2)
            if end == -1:
                self.report(f"the /* comment opened on line {self.line} is never closed: add the missing */",
                            self.line)
                end = len(code)
            self.line += code.count("\n", self.i, end)
            self.i = end + 2
        elif not (self.regex_allowed() and self.regex()):
            self.emit("punct", "/=" if following == "=" else "/", 2 if following == "=" else 1)

    def regex(self) -> bool:
        """Read a regular expression literal at `/`; False (nothing read) when none ends on the line."""
        code = self.code
        j = self.i + 1
        in_class = False
        while j < len(code):
            c = code[j]
            if c == "\n":
                return False
            if c == "\\":
                if code[j + 1:j + 2] in ("\n", ""):
                    return False
                j += 2
                continue
            if c == "[":
                in_class = True
            elif c == "]":
                in_class = False
            elif c == "/" and not in_class:
                break
            j += 1
        else:
            return False
        j += 1
        while j < len(code) and code[j].isalnum():
            j += 1
        self.emit("regex", code[self.i:j], j - self.i)
        return True

    def string(self, quote: str) -> None:
        code = self.code
        start_line = self.line
        j = self.i + 1
        while j < len(code):
            c = code[j]
            if c == "\\":
                if code[j + 1:j + 2] == "\n":
                    self.line += 1
                j += 2
                continue
            if c == quote:
                self.tokens.append(_Token("string", code[self.i + 1:j], start_line))
                self.i = j + 1
                return
            if c == "\n":
                break
            j += 1
        self.report(f"the string opened with {quote} on line {start_line} is not closed on that line: "
                    f"add the missing {quote}", start_line)
        self.tokens.append(_Token("string", code[self.i + 1:j], start_line))
        self.i = min(j, len(code))

    def template(self, start_line: int, *, substituted: bool) -> None:
        """Read template literal text from `self.i` (after its "`" or the "}" of a `${`) to its
        end, or to a `${`, which leaves the template on the stack and goes back to code."""
        code = self.code
        begin = self.i
        j = self.i
        while j < len(code):
            c = code[j]
            if c == "\\":
                if code[j + 1:j + 2] == "\n":
                    self.line += 1
                j += 2
                continue
            if c == "`":
                kind = "template-expr" if substituted else "template"
                self.tokens.append(_Token(kind, "" if substituted else code[begin:j], start_line))
                self.i = j + 1
                return
            if c == "$" and code[j + 1:j + 2] == "{":
                self.stack.append(("${", self.line, start_line))
                self.tokens.append(_Token("open", "${", self.line))
                self.i = j + 2
                return
            if c == "\n":
                self.line += 1
            j += 1
        self.report(f"the template literal opened on line {start_line} is never closed: add the missing `",
                    start_line)
        self.i = len(code)

    def close(self, closer: str) -> None:
        opener = _CLOSERS[closer]
        top = self.stack[-1] if self.stack else None
        if top is not None and (top[0] == opener or (closer == "}" and top[0] == "${")):
            self.pop_to(len(self.stack) - 1, closer)
            return
        if top is None:
            self.report(f"`{closer}` on line {self.line} has no `{opener}` before it: "
                        f"remove it or add the missing `{opener}`", self.line)
        else:
            self.report(f"`{closer}` on line {self.line} does not match the `{top[0]}` opened on line {top[1]}: "
                        "a bracket is missing or extra before it", self.line)
        # Carry on as if the brackets in between had been closed, so later tokens stay right.
        for depth in range(len(self.stack) - 1, -1, -1):
            if self.stack[depth][0] == opener or (closer == "}" and self.stack[depth][0] == "${"):
                self.pop_to(depth, closer)
                return
        self.emit("close", closer, 1)

    def pop_to(self, depth: int, closer: str) -> None:
        opener, _line, template_line = self.stack[depth]
        del self.stack[depth:]
        if opener == "${":
            self.i += 1
            self.template(template_line, substituted=True)
        else:
            self.emit("close", closer, 1)

    def punctuator(self) -> None:
        for punctuator in _PUNCTUATORS:
            if self.code.startswith(punctuator, self.i):
                self.emit("punct", punctuator, len(punctuator))
                return
        self.emit("punct", self.code[self.i], 1)


def _imports(tokens: list[_Token]) -> Iterator[tuple[str, int, bool]]:
    """The module specifiers that code requires or imports, as (specifier, line, type only):
    `require('x')`, `import('x')`, `import ... from 'x'`, `import 'x'`, `export ... from 'x'`.
    Only plain string and template literals count (or one that starts a concatenation after the
    package name, `require('x/' + name)`); `a.require('x')` does not."""
    for k, token in enumerate(tokens):
        if token.kind != "name" or token.text not in ("require", "import", "export"):
            continue
        if k and tokens[k - 1].kind == "punct" and tokens[k - 1].text in (".", "?."):
            continue
        following = tokens[k + 1:k + 4]
        if token.text in ("require", "import") and _is_call_of_literal(following):
            yield following[1].text, following[1].line, False
        elif token.text == "import" and following and following[0].kind == "string":
            yield following[0].text, following[0].line, False
        elif token.text in ("import", "export") and following and not (
                following[0].kind in ("open", "punct") and following[0].text in ("(", ".")):
            found = _from_clause(tokens, k + 1)
            if found is not None:
                type_only = following[0].kind == "name" and following[0].text == "type"
                yield found.text, found.line, type_only


def _is_call_of_literal(tokens: list[_Token]) -> bool:
    """Whether tokens are `('x')`, or `('x/' + ...` whose literal already holds the package name
    (the start script of Total.js 4 is `require('total4/' + type)(options)`)."""
    if len(tokens) < 3 or (tokens[0].kind, tokens[0].text) != ("open", "(") or tokens[1].kind not in (
            "string", "template"):
        return False
    if (tokens[2].kind, tokens[2].text) == ("close", ")"):
        return True
    literal = tokens[1].text
    package_end = literal.find("/", literal.find("/") + 1) if literal.startswith("@") else literal.find("/")
    return (tokens[2].kind, tokens[2].text) == ("punct", "+") and package_end > 0


def _from_clause(tokens: list[_Token], start: int) -> _Token | None:
    """The string after `from` in the import or export statement whose words start at `start`."""
    for k in range(start, min(start + MAX_IMPORT_LOOKAHEAD, len(tokens) - 1)):
        token = tokens[k]
        if token.text in (";", "(", "=") or (token.kind == "name" and token.text in ("import", "export")):
            return None
        if token.kind == "name" and token.text == "from" and tokens[k + 1].kind == "string":
            return tokens[k + 1]
    return None


_PACKAGE = re.compile(r"(@[A-Za-z0-9][\w.~-]*/)?[A-Za-z0-9][\w.~-]*")


def _package_name(specifier: str) -> str | None:
    """The npm package a module specifier names (`pkg/sub` is `pkg`, `@scope/pkg/sub` is
    `@scope/pkg`), or None for a built-in, a relative or absolute path, a URL, an import-map
    name or anything that is not a package name."""
    if specifier.startswith((".", "/", "#", "~")) or ":" in specifier:  # ":": node:fs, https://, C:\\
        return None
    parts = specifier.split("/")
    name = "/".join(parts[:2]) if specifier.startswith("@") else parts[0]
    if not _PACKAGE.fullmatch(name) or name in NODE_BUILTINS:
        return None
    return name


_INSTALL = re.compile(r"\b(?:npm\s+(?:install|i|add)|yarn\s+add|pnpm\s+(?:add|install|i)|bun\s+add)\b"
                      r"((?:[ \t]+[^\s`'\"]+)+)")


def _install_mentions(text: str) -> frozenset[str]:
    """The packages an answer says to install (`npm install x y`, `yarn add x@2`, `pnpm add @s/x`)."""
    names = set()
    for command in _INSTALL.finditer(text):
        for word in command.group(1).split():
            if word.startswith("-"):
                continue
            at = word.find("@", 1)
            package = _package_name(word[:at] if at > 0 else word)
            if package is not None:
                names.add(package)
    return frozenset(names)


# --- The project's files -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Manifest:
    present: bool  # a package.json exists (read or not)
    dependencies: frozenset[str] | None  # every name of its dependency sections; None: not read
    failure: str  # why it was not read


def _read_manifest(root: str) -> _Manifest:
    """The dependency names of the package.json in `root`; raises nothing."""
    data, failure = _read_bounded(root, "package.json", MAX_PACKAGE_JSON_BYTES, whole=True)
    if data is None:
        return _Manifest(failure != "", None, failure)
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _Manifest(True, None, "it is not valid JSON")
    if not isinstance(document, dict):
        return _Manifest(True, None, "it is not a JSON object")
    names: set[str] = set()
    for section in DEPENDENCY_SECTIONS:
        value = document.get(section)
        # Maps of name to version; only the bundled sections are lists of names.
        if isinstance(value, dict) or (isinstance(value, list) and section.startswith("bundle")):
            names.update(name for name in value if isinstance(name, str))
    return _Manifest(True, frozenset(names), "")


def _read_bounded(root: str, name: str, limit: int, *, whole: bool) -> tuple[bytes | None, str]:
    """At most `limit` bytes of the regular file `name` inside `root`, and "" ; or None and why
    not ("" when the file does not exist). With `whole`, a larger file is not read at all.

    The path is resolved by `boundary.resolve_inside()` (a link leading outside is refused) and
    opened without following links and without blocking, so a FIFO cannot hang the read.
    """
    try:
        path = boundary.resolve_inside(root, name)
    except boundary.BoundaryError:
        return None, f"{name} leads outside the project"
    except (ValueError, OSError):  # a root that realpath refuses (a NUL byte)
        return None, "the project folder cannot be opened"
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{name} could not be opened ({exc.strerror or 'error'})"
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None, f"{name} is not a regular file"
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(descriptor, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        return None, f"{name} could not be read ({exc.strerror or 'error'})"
    finally:
        os.close(descriptor)
    data = b"".join(chunks)
    if len(data) > limit:
        if whole:
            return None, f"{name} is larger than {limit // 1024} KB"
        data = data[:limit]
    return data, ""


def _is_folder(root: str, name: str) -> bool:
    """Whether `name` is a folder inside `root` (a link to a folder outside is not)."""
    try:
        return os.path.isdir(boundary.resolve_inside(root, name))
    except (ValueError, OSError):  # BoundaryError is a ValueError
        return False


# --- The checks --------------------------------------------------------------------------------


class _Checker:
    """The problems of one answer, as its blocks are checked."""

    def __init__(self, root: str | None, version: int | None) -> None:
        self.root = root
        self.version = version if version in (4, 5) else None
        self.problems: list[Problem] = []
        self.installs: frozenset[str] = frozenset()
        self.reported: set[str] = set()  # packages already reported by require-missing
        self.manifest: _Manifest | None = None

    def add(self, rule: str, severity: str, message: str, *, block: int | None = None,
            line: int | None = None) -> None:
        problem: Problem = {"rule": rule, "severity": severity, "message": message}
        if block is not None:
            problem["block"] = block
            if line is not None:
                problem["line"] = line
        self.problems.append(problem)

    def check_block(self, block: _Block) -> None:
        if not block.text.strip():
            if block.closed:
                self.add(RULE_EMPTY_BLOCK, WARNING, f"code block {block.index} is empty: write its code or "
                                                    "remove the block", block=block.index)
            return
        for code, first_line in _code_regions(block):
            scan = _Scanner(code, first_line).run()
            if scan.problem is not None and block.closed:  # a cut block is reported by `cut`
                message, line = scan.problem
                self.add(RULE_UNBALANCED, ERROR, message, block=block.index, line=line)
            imports = list(_imports(scan.tokens))
            self.check_wrong_version(block, scan.tokens, imports)
            for specifier, line, type_only in imports:
                self.check_require(block, specifier, line, type_only)

    def check_require(self, block: _Block, specifier: str, line: int, type_only: bool) -> None:
        package = _package_name(specifier)
        if package is None or package in self.reported or self.root is None:
            return
        if package in FRAMEWORK_PACKAGES and self.version is not None:
            return  # the detected version's package is present; another one is wrong-version-api
        if self.manifest is None:
            self.manifest = _read_manifest(self.root)
        manifest = self.manifest
        if not manifest.present:
            return
        if manifest.dependencies is None:
            self.reported.add(package)
            self.add(RULE_REQUIRE_MISSING, WARNING, f"could not check that `{package}` is installed: the "
                                                    f"project's package.json was not read ({manifest.failure})",
                     block=block.index, line=line)
            return
        if package in manifest.dependencies or (type_only and _types_package(package) in manifest.dependencies):
            return
        self.reported.add(package)
        if package in self.installs:
            self.add(RULE_REQUIRE_MISSING, WARNING, f"`{package}` is not in the project's package.json yet: "
                                                    f"install it as the answer says before running this code",
                     block=block.index, line=line)
        else:
            self.add(RULE_REQUIRE_MISSING, ERROR, f"`{package}` is used on line {line} but the project's "
                                                  f"package.json does not list it: add it (npm install "
                                                  f"{package}) or use a package the project has",
                     block=block.index, line=line)

    def check_wrong_version(self, block: _Block, tokens: list[_Token],
                            imports: list[tuple[str, int, bool]]) -> None:
        version = self.version
        if version is None:
            return
        seen: set[tuple[str, str]] = set()  # each call once a block
        for k in range(len(tokens) - 3):
            owner, dot, method, paren = tokens[k:k + 4]
            if (owner.kind, dot.kind, dot.text, method.kind, paren.kind, paren.text) != (
                    "name", "punct", ".", "name", "open", "("):
                continue
            if k and tokens[k - 1].kind == "punct" and tokens[k - 1].text in (".", "?."):
                continue
            for name, call, severity, advice in WRONG_VERSION_CALLS:
                if owner.text == name and method.text == call and (name, call) not in seen:
                    seen.add((name, call))
                    self.add(RULE_WRONG_VERSION, severity, f"{name}.{call}() is the Total.js 3 API, not part of "
                                                           f"Total.js {version}: {advice}",
                             block=block.index, line=owner.line)
        expected = f"total{version}"
        for specifier, line, _type_only in imports:
            package = _package_name(specifier)
            if package not in FRAMEWORK_PACKAGES or package == expected:
                continue
            start = "require('total5').run({...})" if version == 5 else "require('total4/debug')(options)"
            older = "Total.js 3 and older" if package == "total.js" else f"Total.js {FRAMEWORK_PACKAGES[package]}"
            self.add(RULE_WRONG_VERSION, ERROR, f"`{package}` is the package of {older}, but this project uses "
                                                f"Total.js {version}: use `{expected}` (its start script is "
                                                f"{start})", block=block.index, line=line)

    def validation(self) -> Validation:
        problems = self.problems
        if len(problems) > MAX_PROBLEMS:
            # Keep the errors first, so that the list still shows why the answer is blocked.
            order = sorted(range(len(problems)), key=lambda k: problems[k]["severity"] != ERROR)
            kept = sorted(order[:MAX_PROBLEMS - 1])
            left = len(problems) - len(kept)
            problems = [problems[k] for k in kept]
            problems.append({"rule": RULE_NOT_CHECKED, "severity": WARNING,
                             "message": f"{left} more problems were found but are not listed"})
        return Validation(problems, any(problem["severity"] == ERROR for problem in problems))


def _types_package(package: str) -> str:
    """The DefinitelyTyped package of `package` (`@types/x`, `@types/scope__x`)."""
    return "@types/" + (package[1:].replace("/", "__") if package.startswith("@") else package)
