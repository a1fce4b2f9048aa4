"""The README's tables of actions, tools and events name exactly what the registries hold: the
action table (routes.action_table), the tool registry (tools.default_registry) and
events.EVENT_TYPES. A row missing or a row too many fails."""

import os
import re
import unittest

from totem.events import EVENT_TYPES
from totem.http.routes import action_table
from totem.tools import default_registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACTION_HEADER = "| action | route | input | answer |"


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
