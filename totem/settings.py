"""Settings that change at run time, in layers: config.ini < all projects < project < session.

Owns the declared list of keys a person may change while Totem runs, each with its type, range
and default (the default comes from config.ini or from the tool that uses it), the check of a
value, and the resolution of the layers into the values a run reads, with where each comes from.
What is not declared here never changes at run time: the token, the secret, the listen address,
`terminalshell`, `mcp`, `forgemcp` and `forgeurl` stay in config.ini.

Pure: the values of the layers are given (the store keeps them); nothing here reads a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from totem.config import MAX_COST_USD, path_list_problem

LAYERS = ("config", "all", "project", "session")


@dataclass(frozen=True)
class Key:
    name: str
    kind: type  # int, float, bool, or list (of absolute paths)
    low: float
    high: float
    description: str
    title: str = ""  # its name in words, for the person (the key is config.ini's and the API's)
    nullable: bool = False  # None is a value, meaning `none`
    none: str = "the provider's default"  # what None means, in words
    # Every layer adds to it (a union, in layer order), none takes away: the secret places.
    merged: bool = False

    def check(self, value: Any) -> str | None:
        """Why `value` is not a value of this key, or None."""
        if self.kind is list:
            return path_list_problem(value)
        if self.kind is bool:
            return None if isinstance(value, bool) else "must be true or false"
        if value is None:
            return None if self.nullable else "must be a number"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be {'an integer' if self.kind is int else 'a number'}"
        if self.kind is int and not float(value).is_integer():
            return "must be an integer"
        if not self.low <= value <= self.high:
            return f"must be from {_shown(self.low)} to {_shown(self.high)}"
        return None


KEYS = (
    Key("steps", int, 1, 1000, "model calls in one run before it stops and waits for the person",
        title="Steps per run"),
    Key("maxcost", float, 0, MAX_COST_USD, "US dollars one run may spend, its sub-agents with it, before it "
        "stops (none: no limit)", title="Spending limit per run", nullable=True, none="no limit"),
    Key("commandtimeout", int, 1, 600, "seconds a command may run when the model does not say",
        title="Command time limit"),
    Key("outputcap", int, 1000, 50_000, "bytes of a command's output that the model gets (head and tail)",
        title="Command output kept for the model"),
    Key("temperature", float, 0, 2, "the sampling temperature sent to the model (none: the provider's default)",
        title="Temperature", nullable=True),
    # The knowledge of Total.js (in Total.js projects only): all of it, the Forge documentation,
    # and the review of an answer's code before it is shown.
    Key("forge", bool, 0, 1, "the knowledge of Total.js in Total.js projects (off: none of it)",
        title="Total.js knowledge"),
    Key("forgedocs", bool, 0, 1, "search the Forge documentation for each prompt (llms.txt, once a day)",
        title="Forge documentation search"),
    Key("selfcheck", bool, 0, 1, "hold an answer's text until its code is checked, and mark what needs review",
        title="Check answers' code"),
    # The sandbox of commands (sandbox.py): the network of interactive runs and of the runs
    # nobody watches (scheduled runs, sub-agents), more writable folders, more secret places.
    Key("network", bool, 0, 1, "commands reach the network (never Totem's own port)",
        title="Network for commands"),
    Key("unattendednetwork", bool, 0, 1, "commands of scheduled runs and sub-agents reach the network",
        title="Network for unwatched runs"),
    Key("writable", list, 0, 32, "more folders commands may write (absolute paths)",
        title="More writable folders"),
    Key("secrets", list, 0, 32, "more secret places commands cannot read (absolute paths; every layer adds)",
        title="More secret places", merged=True),
)
BY_NAME = {key.name: key for key in KEYS}


def defaults(config, command_timeout: float, output_cap: int) -> dict[str, Any]:
    """The config layer: what config.ini says, or the built-in default of each key."""
    return {"steps": config.steps, "maxcost": config.maxcost, "commandtimeout": int(command_timeout),
            "outputcap": output_cap, "temperature": None, "forge": config.forge, "forgedocs": config.forgedocs,
            "selfcheck": config.selfcheck, "network": config.network,
            "unattendednetwork": config.unattendednetwork, "writable": list(config.writable),
            "secrets": list(config.secrets)}


def resolve(layers: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`{key: {value, source}}` from the layers (`config` holds every key; the others what was
    set there), the later layer winning."""
    effective = {}
    for key in KEYS:
        value, source = layers["config"].get(key.name), "config"
        for layer in LAYERS[1:]:
            if key.name in layers.get(layer, {}):
                given = layers[layer][key.name]
                if key.merged:
                    given = list(dict.fromkeys([*(value or []), *(given or [])]))
                value, source = given, layer
        effective[key.name] = {"value": value, "source": source}
    return effective


def _shown(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)
