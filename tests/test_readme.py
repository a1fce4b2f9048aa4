"""The README's tables of actions, tools and events name exactly what the registries hold: the
action table (routes.action_table), the tool registry (tools.default_registry) and
events.EVENT_TYPES. A row missing or a row too many fails. And its shell examples run: each one
passes against a real Totem, or NOT_RUN says why it cannot run here."""

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import unittest

from tests.model_server import ScriptedModel, reply
from tests.utils import TotemCase, call, request
from totem.events import EVENT_TYPES
from totem.http.routes import action_table
from totem.tools import default_registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACTION_HEADER = "| action | route | input | answer |"
SHELL_FENCES = ("sh", "bash", "shell", "console")
MCP_PATH = "$mcp"


def readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        return handle.read()


def section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n")[1].split("\n## ")[0]


def rows(text: str, header: str) -> list[list[str]]:
    """The cells of the rows of every table under `header` (its separator line skipped)."""
    found, inside = [], False
    for line in text.splitlines():
        if line.strip() == header:
            inside = True
            continue
        if inside and line.startswith("| ---"):
            continue
        if inside and line.startswith("|"):
            found.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
        else:
            inside = False
    return found


def shell_lines(text: str) -> list[str]:
    """The command lines of the README: each line of a shell block (one ending in a backslash
    joined with the next), and each inline code span that reads as a command (a lowercase word,
    then its arguments; `POST /$mcp/` is a route, not a command)."""
    found: list[str] = []
    fence, pending = None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            continue
        if fence in SHELL_FENCES:
            pending += line
            if pending.endswith("\\"):
                pending = pending[:-1]
                continue
            if pending.strip() and not pending.lstrip().startswith("#"):
                found.append(pending.strip())
            pending = ""
        elif fence is None:
            found.extend(span for span in re.findall(r"`([^`]+)`", line) if re.match(r"[a-z][\w.-]* ", span))
    return found


def unquoted(line: str, word: str) -> list[int]:
    """Where `word` stands outside single quotes in a POSIX shell line (a shell would expand a
    `$` there, in double quotes too)."""
    places, quote, index = [], None, 0
    while index < len(line):
        char = line[index]
        if quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            index += 1  # the next character is taken as it is
        elif char == "'" and quote is None:
            quote = "'"
        elif char == '"':
            quote = None if quote == '"' else '"'
        elif line.startswith(word, index):
            places.append(index)
        index += 1
    return places


def labels(cell: str) -> list[str]:
    """`Sessions\\|worktreemerge, worktreediscard` names Sessions|worktreemerge and Sessions|worktreediscard."""
    collection, _, verbs = cell.partition("\\|")
    return [f"{collection}|{verb.strip()}" for verb in verbs.split(",")]


class ReadmeTablesTest(unittest.TestCase):
    def test_action_tables_name_every_action_once(self):
        """The rows of the README's action tables whose route is under /api/ name each action of
        the table once, and no other."""
        named = [label for cells in rows(readme(), ACTION_HEADER) if "/api/" in cells[1] for label in labels(cells[0])]
        self.assertEqual(len(named), len(set(named)), "an action is in two rows")
        self.assertEqual(sorted(named), sorted(action.label for action in action_table().values()))

    def test_architecture_names_only_modules_that_exist(self):
        """Every module and folder of the Architecture's table is a file or folder of totem/,
        and every module of totem/ is named there (by itself or by its folder)."""
        table = rows(section(readme(), "Architecture"), "| module | owns |")
        named = {name for first, _owns in table for name in re.findall(r"`([\w/]+(?:\.py|/))`", first)}
        package = os.path.join(ROOT, "totem")
        missing = sorted(name for name in named if not os.path.exists(os.path.join(package, name)))
        self.assertEqual(missing, [], "named in the README's Architecture but not in totem/")
        folders = {name for name in named if name.endswith("/")}
        unnamed = sorted(
            relative for relative in (os.path.relpath(os.path.join(folder, file), package)
                                      for folder, _dirs, files in os.walk(package) for file in files
                                      if file.endswith(".py") and file != "__init__.py")
            if relative not in named and not any(relative.startswith(folder) for folder in folders))
        self.assertEqual(unnamed, [], "modules of totem/ that the README's Architecture does not name")

    def test_tool_table_names_every_tool_once(self):
        """The README's table of tools names each tool of the registry once, and no other."""
        table = rows(section(readme(), "Tools"), "| tool | what it does |")
        named = [name for cells in table for name in re.findall(r"`([a-z_]+)`", cells[0])]
        self.assertEqual(len(named), len(set(named)), "a tool is in two rows")
        self.assertEqual(sorted(named), sorted(default_registry().names()))

    def test_event_table_names_every_event_once(self):
        """The README's table of events names each event type of events.py once, and no other."""
        table = rows(section(readme(), "Events"), "| type | data |")
        named = [name for cells in table for name in re.findall(r"`([a-z.]+)`", cells[0])]
        self.assertEqual(len(named), len(set(named)), "an event is in two rows")
        self.assertEqual(sorted(named), sorted(EVENT_TYPES))


# -- the README's shell examples, run -------------------------------------------------------

SHELL_FENCE = re.compile(r"^```(?:sh|bash|shell|console)\n(.*?)^```", re.MULTILINE | re.DOTALL)
README_PORT = "127.0.0.1:8470"
README_PROJECT = "/home/me/code/app"
EXAMPLE_TIMEOUT_S = 60.0

# By the first line of the example: why it cannot run here. Anything else is run by
# ReadmeExamplesTest and must pass.
NOT_RUN = {
    "make run    # creates .venv, installs requirements.txt, serves http://127.0.0.1:8470/":
        "installs packages and serves until stopped; `make test` is what runs this suite",
    "make docker    # builds the image \"totem\" with Podman when it is installed, else with Docker":
        "needs Docker or Podman and builds an image",
}


def shell_examples(text: str) -> list[str]:
    return [match.group(1) for match in SHELL_FENCE.finditer(text)]


def first_line(example: str) -> str:
    return example.strip().splitlines()[0].strip()


class ReadmeExamplesTest(TotemCase):
    """Every fenced shell example of the README runs here with bash against a real Totem (mcp on,
    token none, a temporary data folder) and the scripted model, and passes; those that cannot
    are in NOT_RUN with the reason. The address 127.0.0.1:8470 becomes the test server's, the
    example project folder a temporary one. `python totem.py` is a copy of totem.py beside a
    config.ini that names the test server (its `totem` package the real one), `claude` a stand-in
    that writes the arguments it was given, MODEL a reference of the scripted model."""

    settings = {"mcp": "true"}

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.model = await ScriptedModel().__aenter__()
        self.addAsyncCleanup(self.model.__aexit__, None, None, None)
        saved = await call(self.app, "providers_save", {"name": "Scripted", "kind": "openai", "url": self.model.url,
                                                        "key": "sk-test-readme-0123456789"})
        self.assertEqual(saved.status, 200, saved.body)
        self.modelref = f"{saved.json()['id']}/scripted-model"
        self.checkout = self.folder("checkout")
        shutil.copy(os.path.join(ROOT, "totem.py"), self.checkout)
        os.symlink(os.path.join(ROOT, "totem"), os.path.join(self.checkout, "totem"))
        with open(os.path.join(self.checkout, "config.ini"), "w", encoding="utf-8") as handle:
            handle.write(f"[totem]\nlisten = 127.0.0.1\nport = {self.app.port}\ntoken = none\n")
        self.bin = self.folder("bin")
        self.claude_args = os.path.join(self.tmp, "claude-args")
        stand_in = os.path.join(self.bin, "claude")
        with open(stand_in, "w", encoding="utf-8") as handle:
            handle.write(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {shlex.quote(self.claude_args)}\n")
        os.chmod(stand_in, 0o755)
        self.project = self.folder("app")

    async def run_example(self, example: str) -> tuple[int, str, str]:
        script = example.replace(README_PORT, f"127.0.0.1:{self.app.port}").replace(README_PROJECT, self.project)
        env = dict(os.environ, PATH=f"{self.bin}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}"
                                    f"{os.environ.get('PATH', '')}", MODEL=self.modelref)
        env.pop("PYTHONPATH", None)
        process = await asyncio.create_subprocess_exec(
            "bash", "-e", "-u", "-o", "pipefail", "-c", script, cwd=self.checkout, env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), EXAMPLE_TIMEOUT_S)
        except TimeoutError:
            process.kill()
            await process.communicate()
            self.fail(f"the README example did not end in {EXAMPLE_TIMEOUT_S} s:\n{example}")
        return process.returncode, stdout.decode(errors="replace"), stderr.decode(errors="replace")

    async def test_every_shell_example_runs_or_says_why_not(self):
        examples = shell_examples(readme())
        self.assertTrue(examples)
        stale = sorted(set(NOT_RUN) - {first_line(example) for example in examples})
        self.assertEqual(stale, [], "NOT_RUN names examples the README no longer has")
        for example in examples:
            if first_line(example) in NOT_RUN:
                continue
            with self.subTest(example=first_line(example)):
                self.model.script(reply("It serves the app."))
                code, stdout, stderr = await self.run_example(example)
                self.assertEqual(code, 0, f"{example}\nstdout: {stdout}\nstderr: {stderr}")
                await self.check(example, stdout)

    async def check(self, example: str, stdout: str) -> None:
        """What an example's output must show, beyond its exit status 0."""
        words = first_line(example).split()
        if words[:3] == ["claude", "mcp", "add"]:
            await self.check_claude()
        elif words[:1] == ["curl"] and "projects_open" in example:
            self.assertEqual(json.loads(stdout)["path"], self.project, stdout)
        elif words[:3] == ["python", "totem.py", "run"]:
            self.assertIn("It serves the app.", stdout)
            self.assertIn("Explain what src/app.js does", json.dumps(self.model.requests[-1].body))

    async def check_claude(self) -> None:
        """The shell passed `/$mcp/` through (the quotes), and that address is the MCP route."""
        with open(self.claude_args, encoding="utf-8") as handle:
            args = handle.read().splitlines()
        url = f"http://127.0.0.1:{self.app.port}/$mcp/"
        self.assertIn(url, args)
        self.assertIn("Authorization: Bearer YOUR-MCP-TOKEN", args)
        answer = await request(self.app, "POST", "/$mcp/", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                                            "params": {"protocolVersion": "2025-11-25"}},
                               headers={"Accept": "application/json, text/event-stream"})
        self.assertEqual(answer.json()["result"]["protocolVersion"], "2025-11-25", answer.body)


class ReadmeShellTest(unittest.TestCase):
    def test_the_scanner_sees_what_a_shell_expands(self):
        self.assertEqual(unquoted("claude mcp add x 'http://h/$mcp/'", MCP_PATH), [])
        self.assertEqual(unquoted("claude mcp add x http://h/$mcp/", MCP_PATH), [26])
        self.assertEqual(unquoted('claude mcp add x "http://h/$mcp/"', MCP_PATH), [27])
        self.assertEqual(unquoted("a 'b'$mcp 'c'", MCP_PATH), [5])
        self.assertEqual(unquoted("a \\$mcp", MCP_PATH), [])

    def test_every_shell_line_keeps_mcp_in_single_quotes(self):
        """`$mcp` outside single quotes is expanded by the shell (to nothing: the URL becomes
        http://127.0.0.1:8470//)."""
        lines = [line for line in shell_lines(readme()) if MCP_PATH in line]
        self.assertTrue(lines, "the README shows no shell line for the MCP route")
        for line in lines:
            with self.subTest(line=line):
                self.assertEqual(unquoted(line, MCP_PATH), [], "$mcp outside single quotes")

    def test_a_shell_passes_the_mcp_url_whole(self):
        """Each such line run by sh and by bash, its command a function that prints what it was
        given: one argument is the route's URL, `$mcp` in it."""
        lines = [line for line in shell_lines(readme()) if MCP_PATH in line]
        shells = [shell for shell in ("sh", "bash") if shutil.which(shell)]
        self.assertTrue(shells, "no POSIX shell to try the README's lines with")
        for shell in shells:
            for line in lines:
                with self.subTest(shell=shell, line=line):
                    command = line.split()[0]
                    script = f"{command}() {{ printf '%s\\0' \"$@\"; }}\n{line}\n"
                    ran = subprocess.run([shell, "-c", script], capture_output=True, timeout=30, check=True)
                    given = ran.stdout.decode().split("\0")
                    self.assertTrue(any(re.fullmatch(r"https?://[^/]+/\$mcp/", arg) for arg in given), given)
