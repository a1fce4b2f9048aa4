"""boundary.is_protected_env: the one definition of a protected secret file, as a plain table."""

from __future__ import annotations

import pytest

from totem.security import boundary

PROTECTED = [
    # .env and .env.* in any folder, compared without case
    ".env", "app/.env", "a/b/c/.env", ".ENV", ".Env", ".env.local", ".Env.Local", ".ENV.LOCAL",
    "config/.env.production", ".env.", ".env.development.local",
    # only the exact examples are not protected: anything around them may hold real values
    ".env.production.example", ".env.example.bak", ".env.example~", ".env.example.local",
    ".env.prod.sample", "app/.env.prod.template", ".env.examples", ".env.example.txt",
    # every other separator after .env: a name only a person's habit tells from .env.*
    ".env-prod", ".env_local", "app/.env-staging.json", ".ENV_PROD", ".env@prod", ".env+x", ".env-example",
    ".env-prod~", "#.env_local#",
    # direnv
    ".envrc", "app/.envrc", ".ENVRC",
    # *.env
    "prod.env", ".prod.env", "deploy/web.env", "X.ENV", "docker.Env",
    # editor backups, swap, lock and auto-save files of a protected name
    ".env~", ".env.swp", ".env.swo", ".#.env", "#.env#", ".env.bak", ".env#", "#.env",
    ".envrc~", ".envrc.swp", "#.envrc#", ".#.envrc", "prod.env.bak", "prod.env~", "#prod.env#",
    ".#prod.env", ".prod.env.swp", "prod.env.orig", "prod.env.old", "prod.env.save",
    ".env.local~", "#.env.local#", ".#.env.local", "#.env.example#", ".#.env.example",
    "PROD.ENV.BAK",
    # every file below a folder named .env or .env.d, at any depth
    ".env.d/api", ".env.d/sub/db.ini", "conf/.env.d/x", ".env/lib/site.py", "tools/.ENV/bin/activate",
    ".Env.D/keys.txt", "a/.env/b/c/d.txt",
    # a folder (ending in /) whose files are protected
    ".env/", "conf/.env.d/",
]

NOT_PROTECTED = [
    ".env.example", ".env.sample", ".env.template", "app/.env.example", ".ENV.EXAMPLE",
    "config/.Env.Sample", ".env.Template",
    "x.environment", ".environment", "environment", "env", ".envoy", ".env2x", ".envs", "dotenv", "env.py",
    ".venv/lib/site.py", ".venv", "my.env.txt", "prod.envs", "envrc", ".envrc.d/x",
    "notes.txt", "README.md", "", ".", "src/app.py", "process.environ",
    # a backup of a name that is not protected
    "notes.txt~", "#notes#", ".#notes.txt",
    # files below folders that only look like secret files
    ".env.local/notes.txt", "prod.env/readme.txt", ".envrc/x", ".env.example/x", ".env.dd/x",
    # a folder (ending in /) whose files are not protected
    ".env.local/", "prod.env/", "src/",
]


@pytest.mark.parametrize("path", PROTECTED)
def test_is_protected_env_protected(path):
    """Each secret form (in any case, any folder, with editor backups) is protected."""
    assert boundary.is_protected_env(path) is True


@pytest.mark.parametrize("path", NOT_PROTECTED)
def test_is_protected_env_not_protected(path):
    """Exactly the examples, look-alike names and ordinary files are not protected."""
    assert boundary.is_protected_env(path) is False


def test_is_protected_env_table_constants():
    """The definition is a table of named constants (the rg engine writes its rules from it)."""
    assert boundary.ENV_NAMES == (".env", ".envrc")
    assert boundary.ENV_PREFIX == ".env"
    assert boundary.ENV_SUFFIX == ".env"
    assert {".env.example", ".env.sample", ".env.template"} == boundary.ENV_EXAMPLES
    assert {".env", ".env.d"} == boundary.ENV_FOLDERS
    assert {"~", "#", ".bak", ".swp", ".swo"} <= set(boundary.ENV_BACKUP_SUFFIXES)
    assert {".#", "#"} <= set(boundary.ENV_BACKUP_PREFIXES)
    for name in (*boundary.ENV_NAMES, *boundary.ENV_EXAMPLES, *boundary.ENV_FOLDERS,
                 *boundary.ENV_BACKUP_SUFFIXES, *boundary.ENV_BACKUP_PREFIXES):
        assert name == name.lower()  # compared with the lower-cased path


def test_is_protected_env_every_backup_of_every_name():
    """Every backup prefix and suffix, alone or together, around every protected name protects it."""
    names = [*boundary.ENV_NAMES, ".env.local", "prod.env", ".env.example"]
    for name in names:
        for prefix in ("", *boundary.ENV_BACKUP_PREFIXES):
            for suffix in ("", *boundary.ENV_BACKUP_SUFFIXES):
                wrapped = prefix + name + suffix
                assert boundary.is_protected_env(wrapped) is (wrapped != ".env.example"), wrapped


def test_is_protected_env_pure_text(tmp_path):
    """Only the text decides: a missing path, an absolute path or a folder of that name alike."""
    assert boundary.is_protected_env(str(tmp_path / "missing" / ".envrc"))
    assert not boundary.is_protected_env(str(tmp_path / "missing" / "a.txt"))
