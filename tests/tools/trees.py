"""Small project trees for the tool tests."""

from __future__ import annotations

import os


def project(tmp_path) -> str:
    """An empty project folder, its path resolved (as the loop passes it to tools)."""
    root = tmp_path / "project"
    root.mkdir()
    return os.path.realpath(root)


def write(root: str, relative: str, content: str | bytes) -> str:
    """Write a file of the tree (folders made as needed); returns its path."""
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(content.encode() if isinstance(content, str) else content)
    return path
