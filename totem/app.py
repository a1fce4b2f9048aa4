"""The composition root: builds Totem's objects from the configuration, starts and stops them.

Behaviour lives in the concern modules; this file only wires them together and runs the
process (`python totem.py [--config PATH]`). It builds what the first request needs (the store,
the vault, the event hub, the perimeter, the HTTP server) before it listens; the rest, the core
(`core.py`: the agent, the services), loads in a worker thread once the server listens and is
built by `ready()`, which every request that needs it awaits.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from totem.config import Config, ConfigError, default_config_path, load_config
from totem.events import Hub
from totem.http.auth import Perimeter, access_token, mcp_token_digest, signin_url
from totem.http.httpd import HttpServer
from totem.http.routes import Router, api_module_names
from totem.rows import PartRow
from totem.security.vault import Vault
from totem.services.attachments import Attachments
from totem.services.project_list import ProjectList
from totem.services.tokens import McpTokens
from totem.store import Store

if TYPE_CHECKING:
    from totem.core import Core, Services
    from totem.http.mcp_route import McpServer
    from totem.security.sandbox import Sandbox

STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")
# How long a thread holds the interpreter while another waits for it. The event loop shares it
# with worker threads (a long session's request is built on one, agent/loop.py) and waits for it
# again after each system call: at Python's default of 5 ms, a small request waited 60-90 ms
# while a prompt started in a 5,000-message session, 25-35 ms at 1 ms (bench/long_prompt.py).
SWITCH_INTERVAL_S = 0.001

log = logging.getLogger("totem")


# What a first prompt, a first page and a first project need besides the core, loaded with it
# rather than by the first that needs them.
FIRST_USE_MODULES = ("totem.agent.client", "totem.workspace.commands", "totem.workspace.totaljs",
                     "totem.http.websocket")


def load_core_modules() -> None:
    """Import the core, the API modules and FIRST_USE_MODULES (run in a worker thread, beside
    the first requests)."""
    for name in ("totem.core", *api_module_names(), *FIRST_USE_MODULES):
        importlib.import_module(name)


class App:
    """One Totem server: configuration, database, event hub, perimeter and HTTP server, and the
    core behind them once `ready()`."""

    def __init__(self, config: Config, static_dir: str = STATIC_DIR):
        self.vault = Vault.open(config)  # reads or creates <data>/secret.key; raises VaultError
        # The token that signs in, from here on in config.token ("" only for token = none):
        # config.ini's, or <data>/token made at the first start. Raises VaultError.
        config = config.replace(token=access_token(config))
        self.config = config
        self.store = Store(config.data)
        # The sandbox of the agent's processes: loaded and probed once the server listens.
        self._sandboxing: asyncio.Future | None = None
        self.hub = Hub(self)  # the App is the hub's events.Replay (below)
        self.perimeter = Perimeter(config, self.store)
        # The services the account actions, the attachments and Projects|list need, which answer
        # before the core.
        self.tokens = McpTokens(self.store, config, mcp_token_digest)
        self.attachments = Attachments(self.store)
        self.project_list = ProjectList(self.store)
        self.router = Router(self, static_dir, self.hub)
        self.http = HttpServer(self.router.handle, config.headtimeout, config.bodytimeout, config.keepalive,
                               config.writetimeout, config.sendbudgetmb * 1024 * 1024, config.maxconnections)
        self._core: Core | None = None
        self._mcp: McpServer | None = None
        self._building: asyncio.Future | None = None

    # -- the core ---------------------------------------------------------------------------

    async def ready(self) -> Core:
        """The core, built once: every caller waits for the same build. Raises what the build
        raised."""
        if self._building is None:
            self._building = asyncio.ensure_future(self._build())
        return await asyncio.shield(self._building)

    async def _build(self) -> Core:
        await asyncio.to_thread(load_core_modules)
        from totem.core import Core  # loaded by the worker thread just above
        core = Core(self.config, self.store, self.hub, self.vault, await self.sandbox_ready())
        await core.start()
        self._core = core
        return core

    # -- the sandbox --------------------------------------------------------------------------

    async def sandbox_ready(self) -> Sandbox:
        """The sandbox of the agent's processes, loaded once (its probe goes on in the
        background; `Sandbox.status()` waits for it). Raises what loading it raised."""
        if self._sandboxing is None:
            self._sandboxing = asyncio.ensure_future(self._load_sandbox())
        return await asyncio.shield(self._sandboxing)

    async def _load_sandbox(self) -> Sandbox:
        module = await asyncio.to_thread(importlib.import_module, "totem.security.sandbox")
        sandbox = module.Sandbox(self.config)
        sandbox.start(self.http.port)
        return sandbox

    async def sandbox_status(self, wait: bool) -> dict:
        """Account|read's `sandbox`: the status once the probe has ended; before that, unless
        `wait`, only `{mode, probing: true}`, so that the first answer does not wait for the
        probe's processes. Raises what loading the sandbox raised."""
        loading = self._sandboxing
        probed = loading is not None and loading.done() and loading.exception() is None \
            and loading.result().probed()
        if not wait and not probed:
            return {"mode": self.config.sandbox, "probing": True}
        return await (await self.sandbox_ready()).status()

    @property
    def sandbox(self) -> Sandbox:
        if self._sandboxing is None or not self._sandboxing.done():
            raise RuntimeError("the sandbox is not loaded yet: await App.sandbox_ready() first")
        return self._sandboxing.result()

    @property
    def core(self) -> Core:
        if self._core is None:
            raise RuntimeError("the core is not built yet: await App.ready() first")
        return self._core

    @property
    def services(self) -> Services:
        return self.core.services

    @property
    def runs(self):
        return self.core.runs

    @property
    def jobs(self):
        return self.core.jobs

    @property
    def snapshots(self):
        return self.core.snapshots

    @property
    def providers(self):
        return self.core.providers

    @property
    def mcp_clients(self):
        return self.core.mcp_clients

    @property
    def mcp(self) -> McpServer:
        """The server of POST /$mcp/ (config.ini's mcp = true), made with its first request."""
        if self._mcp is None:
            from totem.http.mcp_route import McpServer  # loaded only when the route is used
            self._mcp = McpServer(self.services)
        return self._mcp

    # -- events.Replay: what the hub asks when a connection subscribes to a session -----------

    async def session_exists(self, sessionid: str) -> bool:
        return await self.store.get_session(sessionid) is not None

    def open_parts(self, sessionid: str) -> list[PartRow]:
        # Before the core is built no run has started, so no part is open and no question waits.
        return self._core.runs.open_parts(sessionid) if self._core is not None else []

    def waiting_asks(self, sessionid: str) -> list:
        return self._core.runs.questions.waiting(sessionid) if self._core is not None else []

    async def start(self) -> None:
        """Open the database and listen, then build the core in the background (see ready()).
        Raises OSError (address in use), RuntimeError."""
        os.makedirs(self.config.data, mode=0o700, exist_ok=True)
        await self.store.open()
        try:
            await self.http.start(self.config.listen, self.config.port)
        except BaseException:
            await self.store.close()
            raise
        self._sandboxing = asyncio.ensure_future(self._load_sandbox())
        self._building = asyncio.ensure_future(self._build())

    @property
    def port(self) -> int:
        return self.http.port

    @property
    def url(self) -> str:
        """Where a browser on this computer reaches Totem: every address (0.0.0.0, ::) is
        reached at its loopback one."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.config.listen, self.config.listen)
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        if self._building is not None:
            await asyncio.wait([self._building])  # a build half done would start the scheduler after the stop
            if not self._building.cancelled() and self._building.exception() is not None:
                log.info("stopping a server whose core could not be built")
        if self._core is not None:
            await self._core.stop()
        if self._sandboxing is not None:
            await asyncio.wait([self._sandboxing])
            if not self._sandboxing.cancelled() and self._sandboxing.exception() is None:
                await self._sandboxing.result().stop()
        await self.hub.close_all()
        await self.http.stop()
        await self.store.close()


def startup_line(url: str, code: str | None) -> str:
    """What the start prints: where Totem listens and, with a token, an address that signs a
    browser in once (`code`, good for auth.SIGNIN_CODE_TTL_S); without one, what that means."""
    if code:
        return (f"Totem is listening on {url}/\n"
                f"Open this address to sign in (once, within 10 minutes): {signin_url(url, code)}\n"
                f"Later: `python totem.py token` prints a new one.")
    return (f"Totem is listening on {url}/ with no access token (token = none): "
            "any program on this computer can use it")


async def serve(config: Config) -> None:
    """Run until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    app = App(config)
    await app.start()
    # Printed once a stop signal is handled: whoever waits for this line may stop us at once.
    print(startup_line(app.url, app.perimeter.codes.new() if app.config.token else None), flush=True)
    try:
        await until_stopped(app, stop)
    finally:
        await app.stop()


async def until_stopped(app: App, stop: asyncio.Event) -> None:
    """Wait for the stop signal. Raises RuntimeError when the core cannot be built: a server
    that cannot run a session does not stay up looking healthy."""
    stopping = asyncio.ensure_future(stop.wait())
    building = asyncio.ensure_future(app.ready())
    try:
        await asyncio.wait([stopping, building], return_when=asyncio.FIRST_COMPLETED)
        if building.done() and building.exception() is not None:
            log.error("the core could not be built", exc_info=building.exception())
            raise RuntimeError(f"cannot start: {building.exception()}")
        await stopping
    finally:
        stopping.cancel()
        building.cancel()


def configure_logging(level: str) -> None:
    """The console at config.ini's `loglevel`. The WebSocket library's lines of a connection
    opened and closed are shown at debug only (a page that reconnects is not news), and its own
    debug lines never: they hold each request's headers, the session cookie among them."""
    logging.basicConfig(level=getattr(logging, level.upper()), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("websockets").setLevel(logging.INFO if level == "debug" else logging.WARNING)


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"]:  # the headless client, not the server
        from totem.cli import main as run_client
        return run_client(argv[1:])
    if argv[:1] == ["token"]:  # a new sign-in address, from the token file
        from totem.cli import token_main
        return token_main(argv[1:])
    parser = argparse.ArgumentParser(prog="totem.py", description="Totem, a self-hosted AI coding agent",
                                     allow_abbrev=False)
    parser.add_argument("--config", default=default_config_path(), help="the configuration file (config.ini)")
    args = parser.parse_args(argv)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    configure_logging(config.loglevel)
    try:
        asyncio.run(serve(config))
    except OSError as exc:
        print(f"totem: cannot listen on {config.listen}:{config.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"totem: {exc}", file=sys.stderr)
        return 1
    return 0
