"""What the approval of a project MCP server covers: the files of the project its definition runs.

A `command` server's approval is pinned to its definition and to the content of every project
file that the definition runs, found by one bounded, deterministic rule (`pin_files`):

1. **Entries.** The command, when it names a file of the project (a path with `/`, or a program
   that the runner's PATH finds inside the project). Each argument, and the value of an
   `--option=value` argument, that names an existing file of the project, relative to the project
   folder (where the server runs) or absolute. `python -m mod` gives `mod.py` or `mod/__main__.py`
   (with the `__init__.py` on the way); a folder given to `python` its `__main__.py`; a folder
   given to `node`, `bun` or `deno` (`node .`) its `package.json` and the file its `"main"` names
   (`index.js` by default), and to `npx` the files its `"bin"` names. `npm`, `pnpm` or `yarn` with
   `run X`, `start` or `test` gives `package.json` and the words of its scripts `preX`, `X` and
   `postX`, read as a shell line. `sh -c 'line'` reads the line as a shell line.
2. **What those load**, one or two levels deep (MAX_LOAD_DEPTH: an entry's loads, and theirs),
   in files of a known language (by extension, `#!` line, or the interpreter that runs them):
   Python's `import` and `from ... import` of modules found beside the script (or in the package,
   for relative imports); JavaScript and TypeScript's `require()`, `import ... from`, `import()`,
   `import '...'` and `export ... from` of specifiers that start with `./` or `../`, resolved as
   Node does (the exact name, then the usual extensions, then the folder's `package.json` main or
   `index.*`); the words of a shell script that name an existing file of the project, relative to
   the project folder or to the script's folder (`source lib.sh`, `. ./env.sh`, `exec python3
   server.py`, the value of `--config=x.json`), when they hold a `/` or a `.` and no `$`,
   backquote, brace or glob character.
3. **The boundary.** Every path goes through `boundary.resolve_inside`: symbolic links are
   followed, and what leads outside the project is never read (an argument or a load that names
   a file outside is said in `left_out`). Only regular files are read (never a FIFO or a device).
4. **Bounds.** At most MAX_PIN_FILES files and MAX_PIN_BYTES read in all: a file that does not
   fit in what is left is not covered; a file larger than MAX_SCAN_BYTES is covered but what it
   loads is not followed. Each of these is said in `left_out`, which the start question shows.

Not followed, and so not covered (the README says so too): files outside the project, installed
packages (`node_modules`, site-packages, `npx some-package`), names computed while the program
runs (`$DIR/x.sh`, `require(name)`, `importlib`), data files the program opens, and what it
downloads.

`changes()` says, in words for the question, what differs between the manifest of an approved
definition (`ServerDefinition.manifest`) and the current one.

Must not: write anything, read a path outside the project, run anything, or decide permissions.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import posixpath
import re
import shlex
import shutil
import stat
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from totem.process.runner import minimal_environment
from totem.security.boundary import BoundaryError, OutsideError, real_root, relative_path, resolve_inside

MAX_PIN_FILES = 64
MAX_PIN_BYTES = 16 * 1024 * 1024  # read and hashed, over all the files of one pin
MAX_SCAN_BYTES = 256 * 1024  # of one file, searched for what it loads
MAX_LOAD_DEPTH = 2  # an entry's loads, and what those load
MAX_LOOKUPS = 5000  # paths resolved in one pin (each import or shell word tried costs a few)
MAX_WORD_CHARS = 4096
READ_CHUNK_BYTES = 64 * 1024
UNREADABLE = "unreadable"  # the hash of a file that could not be read (a later readable one differs)

PYTHON, SCRIPT, SHELL = "python", "script", "shell"  # the languages whose loads are followed
NODE, NPX, PACKAGES = "node", "npx", "packages"  # programs whose folders or scripts are followed
PROGRAMS = {
    PYTHON: re.compile(r"^(python|pypy)(\d+(\.\d+)*)?$"),
    NODE: re.compile(r"^(node|nodejs|bun|deno)$"),
    SHELL: re.compile(r"^(sh|bash|dash|zsh|ksh|mksh|ash)$"),
    NPX: re.compile(r"^(npx|bunx)$"),
    PACKAGES: re.compile(r"^(npm|pnpm|yarn)$"),
}
SCRIPT_EXTENSIONS = (".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx")
EXTENSION_LANGUAGES = {".py": PYTHON, ".sh": SHELL, ".bash": SHELL, ".zsh": SHELL,
                       **dict.fromkeys(SCRIPT_EXTENSIONS, SCRIPT)}
# Node's resolution of `./x`: the exact file, then these extensions, then the folder.
RESOLVE_EXTENSIONS = (*SCRIPT_EXTENSIONS, ".json")
PACKAGE_SCRIPTS = {"start", "test", "stop", "restart"}  # `npm start` runs the script "start"
SHELL_WORD_SKIP = re.compile(r"[$`*?\[\]{}\x00]")
JS_SPECIFIER = re.compile(
    r"""(?:\brequire\s*\(\s*|\bimport\s*\(\s*|\bfrom\s+|\bimport\s+)(['"])(\.\.?/[^'"\n]{1,1000})\1""")


@dataclass(frozen=True)
class Pinned:
    """The files a definition runs, with their content hashes, and what the rule left out."""

    files: tuple[tuple[str, str], ...]  # (path relative to the project, sha256), sorted by path
    left_out: tuple[str, ...]  # a sentence each: outside the project, over a bound


def pin_files(root: str, command: str, args: Iterable[str]) -> Pinned:
    """The project files that `command args`, run in `root`, runs (the rule of the module's
    docstring). Blocks: stats and reads files of the project; never raises for a file it cannot
    use (that is said in `left_out`)."""
    walk = _Walk(root)
    args = list(args)
    program = program_kind(command)
    walk.command(command)
    if program == PYTHON:
        walk.python_module(args)
    elif program == PACKAGES:
        walk.package_scripts(command, args)
    walk.arguments(args, program)
    walk.follow()
    return Pinned(tuple(sorted(walk.files.items())), tuple(walk.left_out))


def program_kind(command: str) -> str | None:
    """PYTHON, NODE, SHELL, NPX or PACKAGES for a command that names one of those programs."""
    name = posixpath.basename(command)
    return next((kind for kind, pattern in PROGRAMS.items() if pattern.match(name)), None)


def changes(approved: dict, current: dict) -> list[str]:
    """What changed from an approved manifest to the current one, one sentence each: the
    definition's parts first (command line, URL, each variable and header by name), then each
    file that changed, was added or was removed. [] when nothing did."""
    said: list[str] = []
    if approved.get("transport") != current.get("transport"):
        said.append(f"the transport changed (it was {approved.get('transport') or '?'})")
    if approved.get("command") != current.get("command"):
        said.append(f"the command line changed (it was: {approved.get('command') or 'none'})")
    if approved.get("url") != current.get("url"):
        said.append(f"the URL changed (it was: {approved.get('url') or 'none'})")
    for what, key in (("variable", "env"), ("header", "headers")):
        said.extend(_named_changes(what, approved.get(key) or {}, current.get(key) or {}))
    before, after = approved.get("files") or {}, current.get("files") or {}
    for path in sorted(set(before) | set(after)):
        if path not in after:
            said.append(f"{path} was removed (it is no longer run)")
        elif path not in before:
            said.append(f"{path} was added (it is run now)")
        elif before[path] != after[path]:
            said.append(f"{path} changed")
    return said


def _named_changes(what: str, before: dict, after: dict) -> Iterator[str]:
    for name in sorted(set(before) | set(after)):
        if name not in after:
            yield f"the {what} {name} was removed"
        elif name not in before:
            yield f"the {what} {name} was added"
        elif before[name] != after[name]:
            yield f"the {what} {name} has a new value"


def value_hash(value: str) -> str:
    """How a manifest keeps a variable's or header's value: its hash, never the value."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


class _Walk:
    """One run of the rule: the files found so far, what was left out, what is still to read."""

    def __init__(self, root: str):
        self.root = real_root(root)
        self.files: dict[str, str] = {}
        self.left_out: list[str] = []
        self.seen: set[str] = set()
        self.budget = MAX_PIN_BYTES
        self.lookups = MAX_LOOKUPS
        self.full = False
        self.packages: set[str] = set()  # folders whose package.json was followed
        # (absolute, relative, head, language, depth, base): a read file whose loads are followed
        self.todo: deque[tuple[str, str, bytes, str, int, str]] = deque()

    # -- entries ---------------------------------------------------------------------------

    def command(self, command: str) -> None:
        if "/" in command:
            absolute = self.inside(command, self.root, say_outside=not os.path.isabs(command))
        else:  # found on the runner's PATH, which never holds a relative entry
            found = shutil.which(command, path=minimal_environment().get("PATH", ""))
            absolute = self.inside(found, self.root, say_outside=False) if found else None
        if absolute is not None and os.path.isfile(absolute):
            self.add(absolute, 0, None)

    def arguments(self, args: list[str], program: str | None) -> None:
        hinted = False  # the first file argument is the script the interpreter runs
        for index, arg in enumerate(args):
            if program == SHELL and index > 0 and args[index - 1] == "-c":
                self.shell_words(arg, self.root, 0)
                continue
            values = [arg]
            if arg.startswith("-") and "=" in arg:
                values = [arg.split("=", 1)[1]]
            for value in values:
                if not value or value.startswith("-") or len(value) > MAX_WORD_CHARS:
                    continue
                absolute = self.inside(value, self.root, say_outside=True)
                if absolute is None:
                    continue
                if os.path.isfile(absolute):
                    hint = None if hinted else _language_of_program(program)
                    hinted = True
                    self.add(absolute, 0, hint)
                elif os.path.isdir(absolute):  # `node .`, `python app/`
                    self.folder(absolute, program)

    def folder(self, folder: str, program: str | None) -> None:
        if program == PYTHON:
            main = self.inside(os.path.join(folder, "__main__.py"), self.root)
            if main is not None and os.path.isfile(main):
                self.add(main, 0, PYTHON)
        elif program in (NODE, NPX):
            self.package_entry(folder, "bin" if program == NPX else "main", 0)

    def python_module(self, args: list[str]) -> None:
        """`python -m pkg.mod`: the module, found in the project folder (Python's first path)."""
        for index, arg in enumerate(args[:-1]):
            if arg == "-m":
                parts = args[index + 1].split(".")
                for found in self.module_files(self.root, parts):
                    self.add(found, 0, PYTHON, self.root)
                if all(part.isidentifier() for part in parts):
                    main = self.inside(os.path.join(self.root, *parts, "__main__.py"), self.root)
                    if main is not None and os.path.isfile(main):
                        self.add(main, 0, PYTHON, self.root)
                return
            if arg == "-c" or not arg.startswith("-"):
                return

    def package_scripts(self, command: str, args: list[str]) -> None:
        """`npm run X`, `npm start`, `yarn X`: package.json and the words of its scripts."""
        words = [arg for arg in args if not arg.startswith("-")]
        if not words:
            return
        if words[0] in ("run", "run-script") and len(words) > 1:
            name = words[1]
        elif words[0] in PACKAGE_SCRIPTS or posixpath.basename(command) in ("yarn", "pnpm"):
            name = words[0]
        else:
            return
        document = self.package_json(self.root, 0)
        scripts = document.get("scripts") if isinstance(document, dict) else None
        scripts = scripts if isinstance(scripts, dict) else {}
        for key in (f"pre{name}", name, f"post{name}"):
            line = scripts.get(key)
            if isinstance(line, str):
                self.shell_words(line, self.root, 1)
        if name == "start" and "start" not in scripts:  # npm's own default: node server.js
            default = self.inside("server.js", self.root)
            if default is not None and os.path.isfile(default):
                self.add(default, 1, SCRIPT)

    def package_entry(self, folder: str, key: str, depth: int) -> None:
        """A folder's package.json and the file(s) its `main` (or `bin`) names, at `depth`."""
        if folder in self.packages:
            return
        self.packages.add(folder)
        document = self.package_json(folder, depth)
        value = document.get(key) if isinstance(document, dict) else None
        if key == "main" and not isinstance(value, str):
            value = "index"
        targets = value.values() if isinstance(value, dict) else [value]
        for target in targets:
            if isinstance(target, str) and target:
                self.load_script(folder, target if target.startswith(".") else f"./{target}", depth)

    def package_json(self, folder: str, depth: int) -> object:
        absolute = self.inside(os.path.join(folder, "package.json"), self.root)
        if absolute is None or not os.path.isfile(absolute):
            return None
        head = self.add(absolute, depth, None)
        try:
            return json.loads(head.decode("utf-8")) if head else None
        except (UnicodeDecodeError, ValueError):
            return None

    # -- reading ---------------------------------------------------------------------------

    def add(self, absolute: str, depth: int, hint: str | None, base: str | None = None) -> bytes | None:
        """Pin one file (hash all of it, keep its head) and queue what it loads; returns its head.
        `base`: where a Python file's absolute imports are found (the folder of the script that
        Python runs; by default the file's own)."""
        relative = relative_path(self.root, absolute)
        if relative in self.seen:
            return None
        self.seen.add(relative)
        if len(self.files) >= MAX_PIN_FILES:
            if not self.full:
                self.full = True
                self.left_out.append(f"more than {MAX_PIN_FILES} files: the others are not covered")
            return None
        digest, head, size = self.read(absolute, relative)
        if digest is None:
            return None
        self.files[relative] = digest
        language = _language(relative, head, hint)
        if language is not None and depth < MAX_LOAD_DEPTH:
            if size > MAX_SCAN_BYTES:
                self.left_out.append(f"{relative} is larger than {_size(MAX_SCAN_BYTES)}: "
                                     "what it loads is not followed")
            else:
                self.todo.append((absolute, relative, head, language, depth, base or os.path.dirname(absolute)))
        return head

    def read(self, absolute: str, relative: str) -> tuple[str | None, bytes, int]:
        """(sha256 or UNREADABLE, the first MAX_SCAN_BYTES, size); (None, b"", 0) for what is
        not a regular file or does not fit in the budget."""
        try:
            # Never through a link swapped in since it was resolved, never blocking on a FIFO.
            descriptor = os.open(absolute, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if not os.path.lexists(absolute):
                return None, b"", 0
            self.left_out.append(f"{relative} cannot be read ({exc.strerror or exc}): a change to it asks again")
            return UNREADABLE, b"", 0
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode):
                return None, b"", 0
            if info.st_size > self.budget:
                self.left_out.append(f"{relative} ({_size(info.st_size)}) is over what a pin reads "
                                     f"({_size(MAX_PIN_BYTES)} in all): a change to it will not ask again")
                return None, b"", 0
            digest, head = hashlib.sha256(), bytearray()
            while chunk := os.read(descriptor, READ_CHUNK_BYTES):
                self.budget -= len(chunk)
                if self.budget < 0:
                    self.left_out.append(f"{relative} grew while it was read: a change to it will not ask again")
                    return None, b"", 0
                digest.update(chunk)
                if len(head) <= MAX_SCAN_BYTES:
                    head += chunk
            return digest.hexdigest(), bytes(head), info.st_size
        except OSError as exc:
            self.left_out.append(f"{relative} cannot be read ({exc.strerror or exc}): a change to it asks again")
            return UNREADABLE, b"", 0
        finally:
            os.close(descriptor)

    def inside(self, path: str, base: str, say_outside: bool = False, shown: str | None = None) -> str | None:
        """The resolved path inside the project of `path` taken from `base`, or None (outside:
        said in left_out when `say_outside` and something is there; also once the lookups of the
        pin are spent)."""
        if self.lookups <= 0:
            return None
        self.lookups -= 1
        if self.lookups == 0:
            self.left_out.append(f"more than {MAX_LOOKUPS} paths tried: what is left is not followed")
        joined = os.path.join(base, path)
        try:
            return resolve_inside(self.root, joined)
        except OutsideError:
            if say_outside and os.path.exists(joined):
                shown = shown or path
                shown = shown if len(shown) <= 200 else shown[:200] + "…"
                self.left_out.append(f"{shown} is outside the project: its content is not covered")
            return None
        except BoundaryError:
            return None

    # -- what files load -------------------------------------------------------------------

    def follow(self) -> None:
        while self.todo:
            absolute, relative, head, language, depth, base = self.todo.popleft()
            folder = os.path.dirname(absolute)
            if language == PYTHON:
                self.python_imports(head, relative, folder, base, depth + 1)
            elif language == SCRIPT:
                for match in JS_SPECIFIER.finditer(head.decode("utf-8", "replace")):
                    self.load_script(folder, match.group(2), depth + 1, relative)
            else:
                self.shell_words(head.decode("utf-8", "replace"), folder, depth + 1)

    def python_imports(self, head: bytes, relative: str, folder: str, base: str, depth: int) -> None:
        try:
            tree = ast.parse(head, filename=relative)
        except (SyntaxError, ValueError):
            self.left_out.append(f"{relative} is not Python that parses: what it imports is not followed")
            return
        for node in ast.walk(tree):
            modules: list[tuple[str, list[str]]] = []
            if isinstance(node, ast.Import):
                modules = [(base, alias.name.split(".")) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                start = base
                if node.level:  # relative to the file's own package
                    start = folder
                    for _ in range(node.level - 1):
                        start = os.path.dirname(start)
                parts = node.module.split(".") if node.module else []
                modules = [(start, parts)] if parts else []
                modules += [(start, [*parts, alias.name]) for alias in node.names if alias.name != "*"]
            for start, parts in modules:
                for found in self.module_files(start, parts):
                    self.add(found, depth, PYTHON, base)

    def module_files(self, start: str, parts: list[str]) -> list[str]:
        """The files of project modules `a.b.c` found from `start`: each package's
        `__init__.py` on the way and `c.py` (or `c/__init__.py`)."""
        found: list[str] = []
        current = start
        for part in parts:
            if not part.isidentifier():
                break
            package = os.path.join(current, part)
            for candidate in (os.path.join(package, "__init__.py"), package + ".py"):
                absolute = self.inside(candidate, self.root)
                if absolute is not None and os.path.isfile(absolute):
                    found.append(absolute)
            if not os.path.isdir(package):
                break
            current = package
        return found

    def load_script(self, folder: str, specifier: str, depth: int, loader: str = "package.json") -> None:
        """Pin the file a relative `require`/`import` specifier names, as Node resolves it:
        the exact file, then with each extension, then the folder's package.json main or index."""
        target = os.path.join(folder, specifier)
        candidates = [target, *(target + extension for extension in RESOLVE_EXTENSIONS)]
        if target.endswith(".js"):  # TypeScript's ESM imports name the .js the .ts becomes
            candidates += [target[:-3] + ".ts", target[:-3] + ".tsx"]
        for index, candidate in enumerate(candidates):
            absolute = self.inside(candidate, self.root, say_outside=index == 0,
                                   shown=f"{specifier} (loaded by {loader})")
            if absolute is not None and os.path.isfile(absolute):
                self.add(absolute, depth, SCRIPT)
                return
        absolute = self.inside(target, self.root)
        if absolute is None or not os.path.isdir(absolute):
            return
        if os.path.isfile(os.path.join(absolute, "package.json")):
            self.package_entry(absolute, "main", depth)
            return
        for extension in RESOLVE_EXTENSIONS:
            index_file = self.inside(os.path.join(absolute, "index" + extension), self.root)
            if index_file is not None and os.path.isfile(index_file):
                self.add(index_file, depth, SCRIPT)
                return

    def shell_words(self, text: str, folder: str, depth: int) -> None:
        """The words of shell lines that name a file of the project, from the project folder or
        from the script's folder; a word after `sh`, `python`, `node` ... is read in that one's
        language."""
        for line in text.splitlines():
            try:
                lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                words = list(lexer)
            except ValueError:  # an unfinished quote: that line is not followed
                continue
            previous = ""
            for word in words:
                value = word.split("=", 1)[1] if "=" in word else word  # `--config=x`, `CONF=x`
                if word.startswith("-") and value is word:
                    continue
                # Only what looks like a file name (`lib.sh`, `bin/x`) is looked up: a word such
                # as `echo` or `exec` costs nothing.
                if (("/" in value or "." in value.strip(".")) and not SHELL_WORD_SKIP.search(value)
                        and len(value) <= MAX_WORD_CHARS):
                    hint = SHELL if previous in (".", "source") else _language_of_program(program_kind(previous))
                    for start in dict.fromkeys((self.root, folder)):
                        absolute = self.inside(value, start)
                        if absolute is not None and absolute != self.root and os.path.isfile(absolute):
                            self.add(absolute, depth, hint)
                            break
                previous = word


def _size(count: int) -> str:
    return f"{count // (1024 * 1024)} MB" if count >= 1024 * 1024 else f"{count // 1024} KB"


def _language_of_program(program: str | None) -> str | None:
    return {PYTHON: PYTHON, NODE: SCRIPT, NPX: SCRIPT, SHELL: SHELL}.get(program or "")


def _language(relative: str, head: bytes, hint: str | None) -> str | None:
    """The language whose loads are followed in a file: by its extension, its `#!` line, or the
    interpreter that runs it; None for any other file (it is pinned, not searched)."""
    if posixpath.basename(relative) == "package.json":
        return None
    extension = posixpath.splitext(relative)[1].lower()
    if extension in EXTENSION_LANGUAGES:
        return EXTENSION_LANGUAGES[extension]
    if head.startswith(b"#!"):
        words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
        if words and posixpath.basename(words[0]) == "env":
            words = [word for word in words[1:] if not word.startswith("-")]
        if words:
            return _language_of_program(program_kind(words[0])) or hint
    return hint
