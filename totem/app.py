"""The composition root: builds Totem's objects from the configuration, starts and stops them.

Behaviour lives in the concern modules; this file only wires them together and runs the
process (`python totem.py [--config PATH]`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from dataclasses import dataclass

from .agent.loop import Runs
from .agent.providers import Providers
from .agent.recovery import recover_changes
from .auth import Perimeter
from .changes import Changes
from .config import Config, ConfigError, default_config_path, load_config
from .events import Hub
from .forge import ForgeDocs
from .httpd import HttpServer
from .jobs import Jobs
from .mcp.definitions import forge_definition
from .mcp.servers import McpServers
from .project_servers import ProjectServersService
from .projects import Projects
from .providers_service import ProvidersService
from .routes import Router
from .rows import PartRow
from .schedules_service import Schedules
from .sessions import Sessions
from .settings_service import Settings
from .snapshots import Snapshots
from .store import Store
from .terminal import Terminals
from .tools import default_registry
from .vault import Vault

STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")

log = logging.getLogger("totem")


@dataclass(frozen=True)
class Services:
    """The use cases that adapters call (the API handlers as `ctx.services`; later the MCP
    route, the scheduler and `totem run`): one service per group, built here once."""

    sessions: Sessions
    projects: Projects
    providers: ProvidersService
    changes: Changes
    schedules: Schedules
    settings: Settings
    servers: ProjectServersService


class App:
    """One Totem server: configuration, database, event hub, perimeter and HTTP server."""

    def __init__(self, config: Config, static_dir: str = STATIC_DIR):
        self.config = config
        self.store = Store(config.data)
        self.vault = Vault.open(config)  # reads or creates <data>/secret.key; raises VaultError
        self.providers = Providers(self.store, self.vault)
        # Holds the scrubber of tool, job and terminal output; built in start() from the stored keys.
        provider_service = ProvidersService(self.providers, config)
        self.hub = Hub(self)  # the App is the hub's events.Replay (below)
        self.perimeter = Perimeter(config, self.store)
        self.jobs = Jobs(self.store.ids.new, provider_service.scrubber)
        self.snapshots = Snapshots(self.store, self.hub, config.data, config.snapshotmb * 1024 * 1024)
        self.mcp_clients = McpServers()  # the project MCP servers that runs start
        forge_mcp = forge_definition(config.forgeurl) if config.forgemcp and config.forge else None
        self.runs = Runs(self.store, self.hub, self.providers, default_registry(), config.steps, config.rules,
                         self.jobs, provider_service.scrubber, snapshots=self.snapshots, mcp=self.mcp_clients,
                         forge=ForgeDocs(config.data, config.forgeurl), forge_mcp=forge_mcp)
        self.terminals = Terminals(self.hub, provider_service.scrubber, config.terminalshell)
        settings = Settings(self.store, config)
        sessions = Sessions(self.store, self.hub, self.runs, self.jobs, self.providers, self.terminals, config.data,
                            settings)
        projects = Projects(self.store, sessions, self.snapshots, config.data)
        self.services = Services(sessions=sessions, projects=projects,
                                 providers=provider_service,
                                 changes=Changes(self.store, self.hub, self.snapshots, self.runs, self.jobs),
                                 schedules=Schedules(self.store, self.hub, sessions, self.providers),
                                 settings=settings,
                                 servers=ProjectServersService(self.store, self.mcp_clients, forge_mcp))
        # POST /$mcp/, only when config.ini says mcp = true.
        self.mcp = None
        if config.mcp:
            from .mcp.server import McpServer  # loaded only when config.ini serves the route
            self.mcp = McpServer(self.services)
        self.router = Router(self, static_dir)
        self.http = HttpServer(self.router.handle, config.headtimeout, config.bodytimeout, config.keepalive,
                               config.writetimeout)

    # -- events.Replay: what the hub asks when a connection subscribes to a session -----------

    async def session_exists(self, sessionid: str) -> bool:
        return await self.store.get_session(sessionid) is not None

    def open_parts(self, sessionid: str) -> list[PartRow]:
        return self.runs.open_parts(sessionid)  # the hub is built before the runs that it relays

    def waiting_asks(self, sessionid: str) -> list:
        return self.runs.questions.waiting(sessionid)

    async def start(self) -> None:
        """Open the database and listen. Raises OSError (address in use), RuntimeError."""
        os.makedirs(self.config.data, mode=0o700, exist_ok=True)
        await self.store.open()
        await recover_changes(self.store)  # what a crash left half-done is read from the disk
        await self.services.providers.refresh_scrubber()
        try:
            await self.http.start(self.config.listen, self.config.port)
        except BaseException:
            await self.store.close()
            raise
        self.services.schedules.scheduler.start()  # after the listen: a failed start leaves no task

    @property
    def port(self) -> int:
        return self.http.port

    @property
    def url(self) -> str:
        host = self.config.listen
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        await self.services.schedules.scheduler.stop()
        await self.runs.stop_all()
        await self.jobs.stop_all()
        await self.terminals.stop_all()
        await self.snapshots.close()
        await self.hub.close_all()
        await self.http.stop()
        await self.store.close()


def startup_line(url: str, token: bool) -> str:
    """What the start prints: where Totem listens and, with a token, the page to sign in at."""
    if token:
        return f"Totem is listening on {url}/ (sign in at {url}/login with the access token)"
    return f"Totem is listening on {url}/"


async def serve(config: Config) -> None:
    """Run until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    app = App(config)
    await app.start()
    # Printed once a stop signal is handled: whoever waits for this line may stop us at once.
    print(startup_line(app.url, bool(config.token)), flush=True)
    try:
        await stop.wait()
    finally:
        await app.stop()


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"]:  # the headless client, not the server
        from .cli import main as run_client
        return run_client(argv[1:])
    parser = argparse.ArgumentParser(prog="totem.py", description="Totem, a self-hosted AI coding agent")
    parser.add_argument("--config", default=default_config_path(), help="the configuration file (config.ini)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config))
    except OSError as exc:
        print(f"totem: cannot listen on {config.listen}:{config.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"totem: {exc}", file=sys.stderr)
        return 1
    return 0
