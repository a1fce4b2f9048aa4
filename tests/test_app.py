"""The composition root: the line the start prints, and the core built after the listen."""

import asyncio
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from tests.utils import call
from totem.app import App, startup_line, until_stopped
from totem.config import parse_values
from totem.core import Core


def test_startup_line_names_the_sign_in_address_with_a_token():
    """With a token the start-up line gives an address that signs in once; without one, it says
    what a tokenless server lets any local program do."""
    url = "http://127.0.0.1:8470"
    assert startup_line(url, "abc.def.012") == (
        "Totem is listening on http://127.0.0.1:8470/\n"
        "Open this address to sign in (once, within 10 minutes): http://127.0.0.1:8470/login?code=abc.def.012\n"
        "Later: `python totem.py token` prints a new one.")
    assert startup_line(url, None) == ("Totem is listening on http://127.0.0.1:8470/ with no access token "
                                       "(token = none): any program on this computer can use it")


# -- start-up: the first request does not wait for the agent --------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What the first request (Account|read, a page, the sign-in) must not load: the core and its parts.
CORE_MODULES = ("totem.core", "totem.agent.loop", "totem.agent.providers", "totem.services.sessions", "totem.workspace.snapshots",
                "totem.tools", "totem.process.runner", "totem.http.api.sessions")


def test_what_answers_the_first_request_loads_without_the_core():
    """The composition root, the routes and Account|read import none of the core's modules:
    they load in a worker thread once the server listens."""
    code = ("import sys, totem.app, totem.http.routes, totem.http.api.account, totem.http.websocket; "
            f"print(','.join(m for m in {CORE_MODULES!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "", loaded.stdout


class CoreBuildTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        raw = {"listen": "127.0.0.1", "port": "0", "data": os.path.join(self.tmp.name, "data"), "token": "none"}
        self.app = App(parse_values(raw, self.tmp.name))

    async def test_a_request_that_needs_the_core_waits_for_it(self):
        """Right after the listen, Account|read answers and Projects|list waits for the core
        (built once, whoever asks first); the runs are there afterwards."""
        await self.app.start()
        try:
            with self.assertRaises(RuntimeError):
                self.app.runs  # noqa: B018 (not built yet: nothing reaches it without ready())
            account, projects, again = await asyncio.gather(call(self.app, "account"), call(self.app, "projects"),
                                                            call(self.app, "projects"))
            self.assertEqual((account.status, projects.status, again.status), (200, 200, 200))
            self.assertEqual(projects.json(), [])
            core = await self.app.ready()
            self.assertIs(core, await self.app.ready())
            self.assertFalse(self.app.runs.is_running("nope"))
        finally:
            await self.app.stop()

    async def test_a_core_that_cannot_be_built_fails_its_requests_and_stops_the_server(self):
        """A failure of the build is every waiting request's 500 (the cause in the log), Account|read
        still answers, and the server does not stay up looking healthy: until_stopped raises."""
        with mock.patch.object(Core, "start", side_effect=OSError("the data folder went away")):
            await self.app.start()
            try:
                with self.assertLogs("totem", "ERROR"):
                    self.assertEqual((await call(self.app, "projects")).status, 500)
                self.assertEqual((await call(self.app, "account")).status, 200)
                with self.assertLogs("totem", "ERROR"), self.assertRaisesRegex(RuntimeError, "data folder went away"):
                    await until_stopped(self.app, asyncio.Event())
            finally:
                await self.app.stop()

    async def test_a_stop_during_the_build_leaves_nothing_running(self):
        """Stopped before the core is built: the stop waits for the build, then stops what it
        started (the scheduler's task included)."""
        await self.app.start()
        await self.app.stop()
        self.assertIsNotNone(self.app.core)
        self.assertEqual([task for task in asyncio.all_tasks() if task.get_name() == "scheduler"], [])
