"""The composition root: the line the start prints, and the core built after the listen."""

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from tests.utils import MS, call, running_totem
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
    """The composition root, the routes, Account|read and Projects|list import none of the
    core's modules: they load in a worker thread once the server listens."""
    code = ("import sys, totem.app, totem.http.routes, totem.http.api.account, totem.http.api.projects, "
            "totem.services.project_list, totem.http.websocket; "
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
        """Right after the listen, Account|read answers and Providers|list waits for the core
        (built once, whoever asks first); the runs are there afterwards."""
        await self.app.start()
        try:
            with self.assertRaises(RuntimeError):
                self.app.runs  # noqa: B018 (not built yet: nothing reaches it without ready())
            account, providers, again = await asyncio.gather(call(self.app, "account"), call(self.app, "providers"),
                                                             call(self.app, "providers"))
            self.assertEqual((account.status, providers.status, again.status), (200, 200, 200))
            self.assertEqual(providers.json(), [])
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
                    self.assertEqual((await call(self.app, "providers")).status, 500)
                self.assertEqual((await call(self.app, "account")).status, 200)
                self.assertEqual((await call(self.app, "projects")).status, 200)
                with self.assertLogs("totem", "ERROR"), self.assertRaisesRegex(RuntimeError, "data folder went away"):
                    await until_stopped(self.app, asyncio.Event())
            finally:
                await self.app.stop()

    async def test_projects_list_answers_before_the_core_as_after_it(self):
        """Projects|list answers from the store while the core is still being built, and its
        answer is the same once the core is built, and the same as the core's Projects.list:
        the order, the Total.js detection, a folder that has gone away."""
        folders = {}
        for name, files in (("plain", {}), ("shop", {"package.json": {"dependencies": {"total4": "^0.0.90"}}}),
                            ("gone", {}), ("site", {"package.json": {"dependencies": {"total5": "*"}}})):
            folders[name] = os.path.join(self.tmp.name, name)
            os.makedirs(folders[name])
            for file, content in files.items():
                with open(os.path.join(folders[name], file), "w", encoding="utf-8") as handle:
                    json.dump(content, handle)
        async with running_totem(self.tmp.name) as first:  # the same data folder as self.app
            for name in folders:
                await first.services.projects.open(folders[name])
        os.rmdir(folders["gone"])

        held = asyncio.Event()
        start = Core.start

        async def held_start(core):
            await held.wait()
            await start(core)

        with mock.patch.object(Core, "start", held_start):
            await self.app.start()
            try:
                # Bounded only so that a regression fails instead of hanging: it answers at once.
                before = await asyncio.wait_for(call(self.app, "projects"), 10_000 * MS)
                with self.assertRaises(RuntimeError):
                    self.app.core  # noqa: B018 (still held: the answer did not wait for it)
                held.set()
                await self.app.ready()
                after = await call(self.app, "projects")
                self.assertEqual((before.status, after.status), (200, 200))
                self.assertEqual(before.json(), after.json())
                self.assertEqual(after.json(), await self.app.services.projects.list())
                self.assertEqual(sorted((p["name"], p["totaljs"], p["totaljsversion"]) for p in after.json()),
                                 [("gone", False, None), ("plain", False, None), ("shop", True, 4), ("site", True, 5)])
                opened = [p["opened"] for p in after.json()]
                self.assertEqual(opened, sorted(opened, reverse=True))
            finally:
                held.set()
                await self.app.stop()

    async def test_a_stop_during_the_build_leaves_nothing_running(self):
        """Stopped before the core is built: the stop waits for the build, then stops what it
        started (the scheduler's task included)."""
        await self.app.start()
        await self.app.stop()
        self.assertIsNotNone(self.app.core)
        self.assertEqual([task for task in asyncio.all_tasks() if task.get_name() == "scheduler"], [])
