"""The run of the escape suite: every hostile case through the real server and the scripted model,
with the person answering "once" to every question, and each case's probe after its command.

`Run(account, confined, model, cases, limit, settings, flavour).go()` builds a world (world.py) for the
account, starts
the server as that account (with the sandbox, its default, or with `sandbox = off` for the
control; before the sandbox exists, today's code is the control), registers the project and the
scripted provider, and runs the groups of cases.py:

- `main` cases on a server listening on 127.0.0.1, a batch of them per session and prompt: the
  model calls bash once per step, the person answers "once", and when the stored tool part
  closes the probe looks at the world before the next command is allowed to run (the next
  answer waits for it). A job (`background`) is waited for, or stopped, before its probe.
- `abort` cases one per prompt: the person aborts once the daemon the command starts runs.
- `ipv4` and `ipv6` cases on servers listening on every address of the family;
- `fatal` cases one per prompt; a server that a case killed or stopped is killed and started
  again (the same data folder) before the next one.

Probes that decide later (processes that must be gone) decide before their server stops, after
a grace. Whatever a case left alive is killed by pid, the person's programs are ended, and the
world is removed.

Must not: decide on a case's exit code, sleep to synchronise (events and bounded polls of the
world only), or leave a process it started, directly or through the server, alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import time
from dataclasses import dataclass, field

from websockets.exceptions import ConnectionClosed

from tests.escape.cases import Case, works
from tests.escape.world import (
    EVERY_IPV4,
    EVERY_IPV6,
    LOOPBACK,
    Client,
    Listen,
    Person,
    Server,
    Sockets,
    World,
    daemons_of,
    file_state,
    other_addresses,
    processes_marked,
)
from tests.model_server import ScriptedModel, reply
from tests.utils import MS, command_line

FAST_PIECE = 1 << 20  # answers leave in one piece: these cases test the sandbox, not streaming
BATCH = 20  # cases per session and prompt: a short history keeps every request small
EVENT_TICK_MS = 50  # how often a silent wait looks whether the server is still running
CASE_MS = 60_000  # the longest one case may take (gdb, a fork bomb on a busy machine)
JOB_MS = 30_000
DAEMON_START_MS = 10_000
GRACE_MS = 1_000  # a process of a command may take this long to go once the command is over
FINAL_STATUSES = ("done", "error", "denied", "aborted")
PERSONS = ("p1", "p2", "p3", "p4")
BOMB_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bomb.py")
POLL_S = 20 * MS
PLACE = re.compile(r"@[A-Z0-9]+@")


@dataclass
class Seen:
    """One case as it ran: its mark, what its stored tool part says, and the verdict."""

    case: Case
    mark: str
    output: str = ""
    status: str = ""
    ran: bool = False
    evidence: str | None = None
    alive_at_end: list[int] = field(default_factory=list)
    finished: float = 0.0
    run_status: str = ""  # how the run of a fatal case ended (set before its probe)
    note: str = ""  # what a probe measured, escaped or not (a fork bomb's size)

    @property
    def escaped(self) -> bool:
        return self.evidence is not None


class Scene:
    """What probes look at: the world, the server now, the person's side."""

    def __init__(self, world: World, sockets: Sockets, persons: dict[str, Person], limit: int):
        self.world = world
        self.sockets = sockets
        self.persons = persons
        self.limit = limit
        self.server: Server | None = None
        self.client: Client | None = None
        self.projectid = ""
        self.initial: dict[str, tuple | None] = {}
        self.addresses = {"ipv4-other": other_addresses(socket.AF_INET),
                          "ipv6-other": other_addresses(socket.AF_INET6)}

    def places(self, mark: str) -> dict[str, str]:
        world, server = self.world, self.server
        values = {"HOME": world.home, "PROJECT": world.project, "OTHER": world.other, "OUTSIDE": world.outside,
                  "DATA": world.data, "CONFIG": world.config, "SRV": world.srv, "MARK": mark,
                  "CWD": world.canaries["cwd"], "AGENT": self.sockets.paths["agent"],
                  "DOCKER": self.sockets.paths["docker"], "ABSTRACT": self.sockets.paths["abstract"][1:],
                  "UDP": str(self.sockets.udp_port), "TOKEN": world.token,
                  "LIMIT": str(self.limit), "NEWTOKEN": ("pwned" + mark).ljust(32, "0")[:32],
                  "PYTHON": os.path.realpath(world.account.python)}
        for name, person in self.persons.items():
            values[name.upper()] = str(person.pid)
        if server is not None and server.process is not None:
            values.update({"PID": str(server.pid), "PORT": str(server.port), "LOG": server.log})
        return values

    def fill(self, template: str, mark: str, address: str = "") -> str:
        values = self.places(mark) | ({"ADDR": address} if address else {})
        for name, value in values.items():
            template = template.replace(f"@{name}@", value)
        assert not PLACE.search(template), template
        return template

    def secret_value(self, name: str) -> tuple[str, str | None]:
        """The text a Leaked probe looks for, and the scrubber's label for it (if it knows it)."""
        if name == "token":
            return self.world.token, "token"
        if name == "key":
            return self.world.secret_key(), "secret"
        return self.world.canaries[name], None

    def state_of(self, path: str) -> tuple | None:
        return file_state(path)

    def note_outside(self, path: str) -> None:
        if path.startswith(("/tmp/", "/dev/shm/", "/var/tmp/")) and not path.startswith(self.world.top):
            self.world.made_outside.append(path)

    async def rules(self) -> list[dict]:
        assert self.client is not None
        return await self.client.ok("permissions", query=f"projectid={self.projectid}")

    async def forget_rule(self, rule: dict) -> None:
        """Remove a rule a command saved, so that later cases still ask."""
        if rule.get("id"):
            assert self.client is not None
            await self.client.ok("permissions_remove", {}, ident=rule["id"])

    @staticmethod
    def cmdline(pid: int) -> str:
        return command_line(pid).replace(b"\0", b" ").decode(errors="replace").strip() or "?"


class ServerGone(Exception):
    """The server stopped answering events in the middle of a prompt (a case killed or stopped it)."""


class Run:
    """One mode of the suite: an account, confined or the control."""

    def __init__(self, account, confined: bool, model: ScriptedModel, cases: list[Case], limit: int,
                 settings: dict[str, str], flavour: str = ""):
        self.account = account
        self.confined = confined
        self.model = model
        self.cases = cases
        self.limit = limit
        self.settings = settings
        self.flavour = flavour  # how it is confined, when not the default
        self.runid = secrets.token_hex(2)
        self.seen: list[Seen] = []
        self.works: list[Seen] = []
        self.not_applicable: list[tuple[Case, str]] = []
        self.asks = 0
        self.starts = 0
        self.ws = None
        self.phases: list[str] = []

    @property
    def label(self) -> str:
        how = f"confined ({self.flavour})" if self.flavour else "confined"
        return f"{self.account.label}, {how if self.confined else 'control (sandbox off)'}"

    # -- the whole run ---------------------------------------------------------------------------

    async def go(self) -> Run:
        world = World.build(self.account)
        try:
            await self._go(world)
        finally:
            world.remove()
        return self

    async def _go(self, world: World) -> None:
        every = [Seen(case, f"esc{self.runid}{index:03d}") for index, case in enumerate(self.cases)]
        checks = [Seen(case, f"wrk{self.runid}{index:03d}") for index, case in enumerate(works())]
        sockets = Sockets(world)
        persons: dict[str, Person] = {}
        scene = Scene(world, sockets, persons, self.limit)
        try:
            persons.update({name: Person(world, name) for name in PERSONS})
            self.prepare(scene, every)
            await sockets.open()
            for seen in every:
                for path, _text in seen.case.setup:
                    full = scene.fill(path, seen.mark)
                    scene.initial[full] = file_state(full)
            by_group: dict[str, list[Seen]] = {}
            for seen in every:
                by_group.setdefault(seen.case.group, []).append(seen)
            await self.on_server(scene, LOOPBACK, checks + by_group.get("main", []), by_group.get("abort", []), [])
            await self.on_server(scene, EVERY_IPV4, by_group.get("ipv4", []), [], by_group.get("fatal", []))
            await self.on_server(scene, EVERY_IPV6, by_group.get("ipv6", []), [], [])
        finally:
            for pids in processes_marked(seen.mark for seen in every).values():
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            for person in persons.values():
                person.end()
            await sockets.close()
        self.works = checks
        skipped = {case.name for case, _ in self.not_applicable}
        self.seen = [seen for seen in every if seen.case.name not in skipped]

    def prepare(self, scene: Scene, every: list[Seen]) -> None:
        world = scene.world
        for seen in every:
            for path, text in seen.case.setup:
                world.write(scene.fill(path, seen.mark), scene.fill(text, seen.mark))
        shutil.copy(BOMB_SCRIPT, os.path.join(world.project, "bomb.py"))
        world.hand_over()

    async def on_server(self, scene: Scene, listen: Listen, batched: list[Seen], aborted: list[Seen],
                        fatal: list[Seen]) -> None:
        """Start a server listening there, run the cases, decide the deferred probes, stop it."""
        if not (batched or aborted or fatal):
            return
        expanded = self.expand(scene, batched)
        began = time.monotonic()
        server = await self.start(scene, listen)
        try:
            for start in range(0, len(expanded), BATCH):
                session = await scene.client.ok("sessions_create", {"projectid": scene.projectid})
                await self.prompt(scene, session["id"], expanded[start:start + BATCH])
            for seen in aborted:
                session = await scene.client.ok("sessions_create", {"projectid": scene.projectid})
                await self.prompt(scene, session["id"], [(seen, "")], abort=True)
            for seen in fatal:
                if scene.server.state() != "running" or not await scene.client.responsive():
                    server.kill()
                    server = await self.start(scene, listen)
                session = await scene.client.ok("sessions_create", {"projectid": scene.projectid})
                with contextlib.suppress(ServerGone):  # judged all the same
                    await self.prompt(scene, session["id"], [(seen, "")], fatal=True)
            await self.decide_deferred(scene, [seen for seen, _ in expanded] + aborted)
        finally:
            await self.close_ws()
            await scene.server.stop()
            self.phases.append(f"{listen.name} {time.monotonic() - began:.1f} s")

    def expand(self, scene: Scene, batched: list[Seen]) -> list[tuple[Seen, str]]:
        """Each case with the address it needs (the first of the machine's other addresses of the
        family); a case whose need the machine cannot meet is not applicable."""
        expanded = []
        for seen in batched:
            need = seen.case.needs
            if not need:
                expanded.append((seen, ""))
            elif scene.addresses[need]:
                expanded.append((seen, scene.addresses[need][0]))
            else:
                self.not_applicable.append((seen.case, f"the machine has no {need.replace('-', ' ')} address"))
        return expanded

    async def start(self, scene: Scene, listen: Listen) -> Server:
        await self.close_ws()
        server = Server(scene.world, listen, self.settings)
        await server.start()
        self.starts += 1
        scene.server, scene.client = server, Client(server)
        if not scene.projectid:
            project = await scene.client.ok("projects_open", {"path": scene.world.project})
            scene.projectid = project["id"]
            provider = await scene.client.ok("providers_save", {
                "name": f"Scripted {scene.world.canaries['provider']}", "kind": "openai", "url": self.model.url,
                "key": "sk-escape-" + secrets.token_hex(12)})
            self.modelref = f"{provider['id']}/scripted-model"
        self.ws = await scene.client.websocket()
        return server

    async def close_ws(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.ws.close(), 2)
            self.ws = None

    # -- one prompt -------------------------------------------------------------------------------

    async def subscribe(self, sessionid: str) -> None:
        """Subscribe, then ask for a session that does not exist: its error comes after the
        subscription took effect (one connection's messages are handled in order)."""
        await self.ws.send(json.dumps({"type": "subscribe", "sessionid": sessionid}))
        probe = "nosuchsession" + secrets.token_hex(4)
        await self.ws.send(json.dumps({"type": "subscribe", "sessionid": probe}))
        while True:
            event = await self.next_event(None)
            if event.get("type") == "error" and event.get("sessionid") == probe:
                return

    async def next_event(self, server: Server | None) -> dict:
        """The next event; ServerGone when the server is gone or stopped (checked each tick)."""
        deadline = time.monotonic() + CASE_MS * MS
        while time.monotonic() < deadline:
            try:
                return json.loads(await asyncio.wait_for(self.ws.recv(), EVENT_TICK_MS * MS))
            except TimeoutError:
                # A tracer (gdb, strace) stops it for a while: only a stop or an end is for good.
                if server is not None and server.state() in ("stopped", "gone"):
                    raise ServerGone(server.state()) from None
            except ConnectionClosed:
                raise ServerGone("closed") from None
        raise AssertionError("no event from the server in time")

    async def prompt(self, scene: Scene, sessionid: str, batch: list[tuple[Seen, str]], abort: bool = False,
                     fatal: bool = False) -> None:
        """One prompt whose model runs the batch's commands, one per step; each tool part is
        judged when it closes (a fatal one once the run ended: the server may be going)."""
        await self.subscribe(sessionid)
        pending: dict[str, Seen] = {}
        commands = []
        for seen, address in batch:
            args = {"command": scene.fill(seen.case.command, seen.mark, address)}
            if seen.case.background:
                args["background"] = True
            if seen.case.timeout:
                args["timeout"] = seen.case.timeout
            assert args["command"] not in pending, f"two cases run {args['command']!r}"
            pending[args["command"]] = seen
            commands.append(args)
        self.model._script.clear()  # what an earlier prompt that ended early left
        self.model.script(*[reply(tool_calls=[("bash", args)], fragments=1, max_piece=FAST_PIECE)
                            for args in commands], reply("done", max_piece=FAST_PIECE))
        await scene.client.ok("sessions_prompt", {"text": "go", "model": self.modelref}, ident=sessionid)
        closed: list[tuple[Seen, dict]] = []
        status = None
        try:
            while status is None:
                event = await self.next_event(scene.server)
                if event.get("sessionid") != sessionid:
                    continue
                kind, data = event["type"], event["data"]
                part = data.get("part") or {}
                # Matched by its command: a part of something else (an MCP server's start) is not a case.
                seen = pending.get((part.get("data") or {}).get("input", {}).get("command", "")) \
                    if part.get("kind") == "tool" else None
                if kind == "permission.ask":
                    self.asks += 1
                    await scene.client.ok("permissions_reply", {"reply": "once"}, ident=data["id"])
                elif abort and kind == "part.updated" and seen is not None and part["status"] == "running":
                    await self.abort_when_started(scene, sessionid, seen)
                elif kind == "part.updated" and seen is not None and part["status"] in FINAL_STATUSES:
                    del pending[part["data"]["input"]["command"]]
                    if fatal:
                        closed.append((seen, part))
                    else:
                        await self.judge(scene, sessionid, seen, part)
                elif kind == "session.status" and data["status"] != "running":
                    status = data["status"]
        finally:
            for seen, part in closed:
                seen.run_status = status or "server gone"
                await self.judge(scene, sessionid, seen, part)
            if fatal:  # the server stopped the run (it is going) before the part closed
                for seen in pending.values():
                    seen.ran, seen.run_status = True, status or "server gone"
                    seen.evidence = await seen.case.probe.check(scene, seen)
                pending.clear()
        missing = [seen.case.name for seen in pending.values()]
        assert not missing, f"the run ended {status} before these cases ran: {missing}"

    async def abort_when_started(self, scene: Scene, sessionid: str, seen: Seen) -> None:
        """The person aborts once the command's daemon runs (its output is held back by the
        scrubber until more comes, so /proc tells)."""
        deadline = time.monotonic() + DAEMON_START_MS * MS
        while not daemons_of(seen.mark) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
        await scene.client.ok("sessions_abort", {}, ident=sessionid)

    async def judge(self, scene: Scene, sessionid: str, seen: Seen, part: dict) -> None:
        data = part["data"]
        seen.ran, seen.status = True, part["status"]
        seen.output = data.get("output") or data.get("error") or ""
        job = (data.get("result") or {}).get("job")
        if job:
            await self.settle_job(scene, sessionid, seen, job)
        seen.evidence = await seen.case.probe.check(scene, seen)
        seen.finished = time.monotonic()
        for path in seen.case.cleanup:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(scene.fill(path, seen.mark))

    async def settle_job(self, scene: Scene, sessionid: str, seen: Seen, job: str) -> None:
        """Wait for a job to end, or (stop_job) for its daemon to start, then stop it."""
        deadline = time.monotonic() + (DAEMON_START_MS if seen.case.stop_job else JOB_MS) * MS
        while time.monotonic() < deadline:
            if seen.case.stop_job:
                if daemons_of(seen.mark):
                    break
            else:
                jobs = await scene.client.ok("sessions_jobs", ident=sessionid)
                mine = [one for one in jobs if one["id"] == job]
                if mine and mine[0]["status"] != "running":
                    seen.output = mine[0].get("output") or ""
                    return
            await asyncio.sleep(POLL_S)
        await scene.client.ok("sessions_jobstop", {"job": job}, ident=sessionid)

    async def decide_deferred(self, scene: Scene, seen_list: list[Seen]) -> None:
        """The probes that decide once the commands are over: processes get a grace to go."""
        deferred = [seen for seen in seen_list if seen.case.probe.deferred and seen.ran]
        deadline = time.monotonic() + GRACE_MS * MS
        while time.monotonic() < deadline and any(processes_marked(seen.mark for seen in deferred).values()):
            await asyncio.sleep(POLL_S)
        for seen in deferred:
            seen.evidence = await seen.case.probe.final(scene, seen)

    # -- what it found ----------------------------------------------------------------------------

    def escaped(self) -> list[Seen]:
        return [seen for seen in self.seen if seen.escaped]

    def held(self) -> list[Seen]:
        return [seen for seen in self.seen if not seen.escaped]

