"""Settings in layers: config < all < project < session, each value with its source; every
validation error; removal with the project or session; a value taking effect at the next run."""

from __future__ import annotations

from tests.model_server import reply
from tests.test_loop import LoopCase
from tests.utils import call, next_event


class SettingsCase(LoopCase):
    rules = {"sleep": "allow bash sleep *", "seq": "allow bash seq *"}

    async def read(self, **ids) -> dict:
        query = "&".join(f"{key}={value}" for key, value in ids.items())
        answer = await call(self.app, "settings", query=query)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    async def save(self, expect: int = 200, **body):
        answer = await call(self.app, "settings_save", body)
        self.assertEqual(answer.status, expect, answer.body)
        return answer.json()


class LayersTest(SettingsCase):
    async def test_every_layer_with_its_source(self):
        sid, pid = self.session["id"], self.project["id"]
        fresh = await self.read(sessionid=sid)
        self.assertEqual({k: (v["value"], v["source"]) for k, v in fresh.items()},
                         {"steps": (50, "config"), "maxcost": (None, "config"), "commandtimeout": (120, "config"), "outputcap": (30000, "config"),
                          "temperature": (None, "config"), "forge": (True, "config"),
                          "forgedocs": (True, "config"), "selfcheck": (False, "config"),
                          "network": (True, "config"), "unattendednetwork": (False, "config"),
                          "writable": ([], "config"), "secrets": ([], "config")})
        await self.save(scope="all", key="steps", value=40)
        self.assertEqual((await self.read(sessionid=sid))["steps"], fresh["steps"] | {"value": 40, "source": "all"})
        await self.save(scope="project", projectid=pid, key="steps", value=30)
        self.assertEqual((await self.read(projectid=pid))["steps"]["source"], "project")
        await self.save(scope="session", sessionid=sid, key="steps", value=20)
        self.assertEqual(((await self.read(sessionid=sid))["steps"]["value"]), 20)
        other = await self.create_session(pid)
        self.assertEqual((await self.read(sessionid=other["id"]))["steps"]["value"], 30)  # the project's
        await self.save(scope="session", sessionid=sid, key="steps", clear=True)
        self.assertEqual((await self.read(sessionid=sid))["steps"]["source"], "project")
        self.assertEqual((await self.read())["steps"]["source"], "all")

    async def test_every_bad_input_is_refused_and_changes_nothing(self):
        sid, pid = self.session["id"], self.project["id"]
        for body, field in (({"scope": "all", "key": "token", "value": "x"}, "key"),
                            ({"scope": "all", "key": "listen", "value": "0.0.0.0"}, "key"),
                            ({"scope": "all", "key": "terminalshell", "value": "/bin/bash"}, "key"),
                            ({"scope": "everywhere", "key": "steps", "value": 5}, "scope"),
                            ({"scope": "all", "key": "steps", "value": "5"}, "value"),
                            ({"scope": "all", "key": "steps", "value": True}, "value"),
                            ({"scope": "all", "key": "steps", "value": 1.5}, "value"),
                            ({"scope": "all", "key": "steps", "value": 0}, "value"),
                            ({"scope": "all", "key": "steps", "value": 1001}, "value"),
                            ({"scope": "all", "key": "temperature", "value": 2.5}, "value"),
                            ({"scope": "all", "key": "maxcost", "value": -0.01}, "value"),
                            ({"scope": "all", "key": "maxcost", "value": "1"}, "value"),
                            ({"scope": "all", "key": "maxcost", "value": 2_000_000}, "value"),
                            ({"scope": "all", "key": "selfcheck", "value": "yes"}, "value"),
                            ({"scope": "all", "key": "forgedocs", "value": 1}, "value"),
                            ({"scope": "all", "key": "forge", "value": None}, "value"),
                            ({"scope": "all", "key": "forgeurl", "value": "http://x"}, "key"),
                            ({"scope": "all", "key": "forgemcp", "value": True}, "key"),
                            ({"scope": "all", "key": "steps", "value": None}, "value"),
                            ({"scope": "all", "key": "steps"}, "value"),
                            ({"scope": "all", "key": "steps", "value": 5, "projectid": pid}, "scope"),
                            ({"scope": "project", "key": "steps", "value": 5}, "projectid"),
                            ({"scope": "session", "key": "steps", "value": 5}, "sessionid"),
                            ({"scope": "all", "key": "steps", "value": 5, "extra": 1}, "extra")):
            with self.subTest(body=body):
                answer = await call(self.app, "settings_save", body)
                self.assertEqual(answer.status, 400, answer.body)
                self.assertIn(field, [item["name"] for item in answer.json()])
        gone = await call(self.app, "settings_save", {"scope": "session", "sessionid": "nosuch", "key": "steps",
                                                      "value": 5})
        self.assertEqual(gone.status, 404)
        self.assertEqual({v["source"] for v in (await self.read(sessionid=sid)).values()}, {"config"})
        await self.save(scope="all", key="temperature", value=None)  # none: the provider's default
        self.assertEqual((await self.read())["temperature"]["source"], "all")

    async def test_values_go_with_their_session_and_project(self):
        sid, pid = self.session["id"], self.project["id"]
        await self.save(scope="session", sessionid=sid, key="steps", value=3)
        await self.save(scope="project", projectid=pid, key="steps", value=4)
        await call(self.app, "sessions_remove", {}, ident=sid)
        self.assertEqual(await self.app.store.count_rows("settings", "sessionid", sid), 0)
        self.assertEqual(await self.app.store.count_rows("settings", "projectid", pid), 1)
        await call(self.app, "projects_remove", {}, ident=pid)
        self.assertEqual(await self.app.store.count_rows("settings", "projectid", pid), 0)


class RunLimitsTest(SettingsCase):
    async def run_once(self):
        """Prompt and read the events to the end of the run (a client that reads nothing would
        hold the server's frames, and its own close, behind them)."""
        answer = await self.prompt()
        self.assertEqual(answer.status, 200, answer.body)
        while True:
            event = await next_event(self.ws, 20_000)
            if event["type"] == "session.status" and event["data"]["status"] != "running":
                return

    async def test_steps_and_temperature_at_the_next_run(self):
        await self.save(scope="session", sessionid=self.session["id"], key="steps", value=1)
        await self.save(scope="project", projectid=self.project["id"], key="temperature", value=0.2)
        self.model.script(reply(tool_calls=[("read", {"path": "a.txt"})]), reply("never reached"))
        await self.run_once()
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertIn("after 1 model calls", session["error"])
        self.assertEqual(self.model.requests[0].body["temperature"], 0.2)
        self.assertEqual(len(self.model.requests), 1)

    async def test_command_timeout_and_output_cap(self):
        sid = self.session["id"]
        await self.save(scope="session", sessionid=sid, key="commandtimeout", value=1)
        await self.save(scope="session", sessionid=sid, key="outputcap", value=1000)
        self.model.script(reply(tool_calls=[("bash", {"command": "sleep 5"})]),
                          reply(tool_calls=[("bash", {"command": "seq 1 5000"})]), reply("done"))
        await self.run_once()
        messages = (await call(self.app, "sessions_messages", ident=sid)).json()["messages"]
        parts = [p for m in messages for p in m["parts"] if p["kind"] == "tool"]
        self.assertTrue(parts[0]["data"]["result"]["timed_out"], parts[0]["data"])
        self.assertLess(len(parts[1]["data"]["output"]), 3000)

