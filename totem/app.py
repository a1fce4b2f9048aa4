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

from .agent.loop import Runs
from .agent.providers import Providers
from .auth import Perimeter
from .config import Config, ConfigError, default_config_path, load_config
from .events import Hub
from .httpd import HttpServer
from .jobs import Jobs
from .routes import Router
from .store import Store
from .tools import default_registry
from .vault import Scrubber, Vault, VaultError, secrets_of

STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")

log = logging.getLogger("totem")


class App:
    """One Totem server: configuration, database, event hub, perimeter and HTTP server."""

    def __init__(self, config: Config, static_dir: str = STATIC_DIR):
        self.config = config
        self.store = Store(config.data)
        self.vault = Vault.open(config)  # reads or creates <data>/secret.key; raises VaultError
        self.providers = Providers(self.store, self.vault)
        self.hub = Hub(config.wsqueue, config.wsping, self._session_exists, lambda sid: self.runs.open_parts(sid))
        self.perimeter = Perimeter(config, self.store)
        self.scrubber = Scrubber.empty()  # the real one is built in start(), from the stored keys
        self.jobs = Jobs(self.store.ids.new, lambda: self.scrubber)
        self.runs = Runs(self.store, self.hub, self.providers, default_registry(), config.steps, config.rules,
                         self.jobs, lambda: self.scrubber)
        self.router = Router(self, static_dir)
        self.http = HttpServer(self.router.handle, config.headtimeout, config.bodytimeout, config.keepalive)

    async def _session_exists(self, sessionid: str) -> bool:
        return await self.store.get_session(sessionid) is not None

    async def start(self) -> None:
        """Open the database and listen. Raises OSError (address in use), RuntimeError."""
        os.makedirs(self.config.data, mode=0o700, exist_ok=True)
        await self.store.open()
        await self.refresh_scrubber()
        try:
            await self.http.start(self.config.listen, self.config.port)
        except BaseException:
            await self.store.close()
            raise

    async def refresh_scrubber(self) -> None:
        """Rebuild the scrubber of tool, job and terminal output from the current secrets.

        Called at start and whenever a provider key is saved or removed.
        """
        keys = {}
        for provider in await self.providers.list():
            try:
                found = await self.providers.stored_key(provider["id"])
            except VaultError:
                continue  # a key that cannot be decrypted cannot leak either
            if found is not None and found[1]:
                keys[provider["name"]] = found[1]
        self.scrubber = Scrubber(await asyncio.to_thread(secrets_of, self.config, keys))

    @property
    def port(self) -> int:
        return self.http.port

    @property
    def url(self) -> str:
        host = self.config.listen
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        await self.runs.stop_all()
        await self.jobs.stop_all()
        await self.hub.close_all()
        await self.http.stop()
        await self.store.close()


async def serve(config: Config) -> None:
    """Run until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    app = App(config)
    await app.start()
    # Printed once a stop signal is handled: whoever waits for this line may stop us at once.
    print(f"Totem is listening on {app.url}/", flush=True)
    try:
        await stop.wait()
    finally:
        await app.stop()


def main(argv: list[str]) -> int:
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
