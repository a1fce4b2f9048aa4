"""The settings table: the values set at each layer (all projects, a project, a session)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from totem.store.engine import Engine


class SettingRows(Engine):
    async def settings_layers(self, projectid: str | None,
                              sessionid: str | None) -> dict[str, dict[str, Any]]:
        """`{all, project, session}`: the values set at each layer (decoded JSON), by key; a
        plain dict of layers, as settings.resolve takes them with the config layer before."""
        def run(c: sqlite3.Connection) -> dict[str, dict[str, Any]]:
            layers: dict[str, dict[str, Any]] = {"all": {}, "project": {}, "session": {}}
            for key, value in c.execute(
                    "SELECT key, value FROM settings WHERE projectid IS NULL AND sessionid IS NULL"):
                layers["all"][key] = json.loads(value)
            if projectid:
                for key, value in c.execute("SELECT key, value FROM settings WHERE projectid = ? AND sessionid IS NULL",
                                            (projectid,)):
                    layers["project"][key] = json.loads(value)
            if sessionid:
                for key, value in c.execute("SELECT key, value FROM settings WHERE sessionid = ?", (sessionid,)):
                    layers["session"][key] = json.loads(value)
            return layers
        return await self.read(run)

    async def set_setting(self, projectid: str | None, sessionid: str | None, key: str, value: str | None) -> None:
        """Set (JSON text) or clear (None) one value at one layer."""
        def run(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM settings WHERE ifnull(projectid, '') = ifnull(?, '') "
                      "AND ifnull(sessionid, '') = ifnull(?, '') AND key = ?", (projectid, sessionid, key))
            if value is not None:
                c.execute("INSERT INTO settings (projectid, sessionid, key, value) VALUES (?, ?, ?, ?)",
                          (projectid, sessionid, key, value))
        await self.write(run)
