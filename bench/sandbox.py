"""Benchmark of the sandbox: the bash round trip of a confined command against an unconfined one.

Spawns two servers (bench/startup.py's `measured_on_server`), one with `sandbox = off` and one
with the default `sandbox = auto`, and runs in each, through the scripted model of
bench/agent.py, STEPS + 1 allowed `true` commands with the network on, then as many with the
setting network off (a network namespace instead of the Landlock domain). The first command
of each series is left out (it builds the network ruleset, starts the project's watch and
takes its capture for Undo). Each figure is the median of the time from the model's last byte
of an answer to its next request: the whole bash round trip, spawn included.

Target: the sandbox adds under 5 ms, and at most 25 ms where a process per command
is unavoidable (bwrap is one: it makes the namespaces and mounts, then execs the command; the
Landlock domain is made once per server). It measures and reports; it asserts nothing.
"""

from __future__ import annotations

import os
import statistics
import tempfile

from agent import MODEL_ID, STEPS, Bench, TimedModel, api, step_gaps
from startup import HOST, measured_on_server
from websockets.asyncio.client import connect as ws_connect

GOAL_MS = 5.0  # what the sandbox should add to a command
BOUND_MS = 25.0  # what it may add at most, with a process per command
API_TIMEOUT_S = 30.0


async def round_trips(port: int, project_dir: str) -> dict[str, float]:
    """{"on": median ms, "off": median ms} of allowed `true` commands, the network on then off;
    and "layers", what Account|read says confines them."""
    async with TimedModel() as model:
        provider = await api(port, "providers_save", {"name": "Bench", "kind": "openai", "url": model.url})
        project = await api(port, "projects_open", {"path": project_dir})
        await api(port, "permissions_save", {"projectid": project["id"], "tool": "bash", "pattern": "true *",
                                             "action": "allow"})
        account = await api(port, "account")
        async with ws_connect(f"ws://{HOST}:{port}/ws/", compression=None, open_timeout=API_TIMEOUT_S) as ws:
            bench = Bench(port, model, ws, project, f"{provider['id']}/{MODEL_ID}")
            figures: dict = {"layers": " + ".join(account["sandbox"]["layers"]) or "none"}
            for network in (True, False):
                await api(port, "settings_save", {"scope": "all", "key": "network", "value": network})
                calls = [("bash", {"command": f"true {index}"}) for index in range(STEPS + 1)]
                _first, *gaps = await step_gaps(bench, calls, "Done.")
                figures["on" if network else "off"] = statistics.median(gaps)
    return figures


def measure(sandbox: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="totem-bench-sandbox-") as project_dir:
        rows = measured_on_server(lambda server: _as_rows(server.port, os.path.realpath(project_dir)),
                                  config={"sandbox": sandbox})
    return rows[0][1]


async def _as_rows(port: int, project_dir: str) -> list[tuple]:
    return [("figures", await round_trips(port, project_dir))]


def main() -> list[tuple]:
    off, confined = measure("off"), measure("auto")
    rows: list[tuple] = [("sandbox: the layers that confine commands here", confined["layers"], "", "", None)]
    for network, words in (("on", "network on: Landlock refuses Totem's port"),
                           ("off", "network off: a network namespace")):
        added = confined[network] - off[network]
        rows += [(f"sandbox: bash `true` round trip, sandbox = off, {words.split(':')[0]}, median",
                  off[network], "ms", "", None),
                 (f"sandbox: the same confined ({words}), median", confined[network], "ms", "", None),
                 (f"sandbox: what the sandbox adds, {words.split(':')[0]}", added, "ms",
                  f"< {GOAL_MS:g} goal, <= {BOUND_MS:g} with a process per command", added <= BOUND_MS)]
    return rows


if __name__ == "__main__":
    for row in main():
        print(row)
