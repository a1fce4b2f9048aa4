"""The shape of the package: no import circle, and the store's modules small enough to read."""

import ast
import os
import unittest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "totem")
MAX_STORE_LINES = 400


def modules() -> dict[str, str]:
    """Every module of the package by dotted name (`totem.store.engine`), with its path."""
    found = {}
    for folder, _dirs, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts.pop()
                found[".".join(parts)] = path
    return found


def imports(source: str, known: set[str]) -> set[str]:
    """The package's modules that a source imports anywhere (at the top, in a function, or only
    for type checking: a circle of types is still a circle to read)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & known


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


class StructureTest(unittest.TestCase):
    def test_no_import_circle(self):
        """No module reaches itself through the imports of others."""
        found = modules()
        known = set(found)
        graph = {}
        for name, path in found.items():
            with open(path, encoding="utf-8") as handle:
                graph[name] = imports(handle.read(), known) - {name}
        self.assertEqual(circles(graph), [])

    def test_the_circle_check_finds_one(self):
        """The check flags a circle, also one through a third module, and not a chain."""
        self.assertEqual(circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}), [["a", "b", "c"]])
        self.assertEqual(circles({"a": {"b"}, "b": {"c"}, "c": set()}), [])

    def test_store_modules_are_small(self):
        """Each module of the store package stays under MAX_STORE_LINES lines."""
        for name, path in modules().items():
            if name.startswith("totem.store"):
                with open(path, encoding="utf-8") as handle:
                    self.assertLessEqual(len(handle.readlines()), MAX_STORE_LINES, name)
