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


# Every form of a protected secret file (boundary.is_protected_env), and look-alikes that are not:
# the search tools must skip the first and find the second, with both grep engines.
SECRET_FILES = (
    ".env", "app/.env.local", ".ENV.LOCAL", ".Env.Production", ".envrc", "app/.ENVRC", "prod.env",
    ".prod.env", "deploy/web.ENV", ".env~", ".env.swp", ".env.swo", ".#.env", "#.env#", ".env.bak",
    "prod.env.bak", ".envrc.swp", "#prod.env#", ".env.production.example", ".env.example.bak",
    ".env.example~", "app/.env.prod.template", ".env.d/api", "conf/.env.d/sub/db.ini",
    "venv/.env/lib/site.py", "tools/.ENV/bin/activate", ".env-prod", "app/.env_local", ".ENV-Staging",
)
PLAIN_FILES = (
    ".env.example", ".env.sample", ".env.template", "app/.ENV.Example", "x.environment",
    ".environment", "env", ".envoy", ".venv/lib/site.py", "cfg/.env.local/notes.txt",
    "cfg/prod.env/readme.txt", "notes.txt~", "README", ".envs", "app/.env2",
)
