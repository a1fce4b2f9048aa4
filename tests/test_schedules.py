"""Scheduled prompts: validation, the next time (injected clock and time zone, never sleeping),
runs with nobody there (questions refused, the ask tool answered, only rules and auto-accept
of edits deciding), no overlap, the catch-up after a restart, and removal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import unittest

from tests.model_server import reply
from tests.test_loop import LoopCase
from tests.utils import MS, call, next_event
from totem.agent.gate import NOBODY_HERE
from totem.scheduler import next_daily, next_interval, next_run
from totem.security.permissions import SCHEDULED_REASON


@contextlib.contextmanager
def zone(name: str):
    old = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


def local(text: str) -> float:
    """Epoch seconds of a local "YYYY-MM-DD HH:MM" in the current TZ."""
    return time.mktime(time.strptime(text, "%Y-%m-%d %H:%M"))


def shown(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(at))


class NextTimeTest(unittest.TestCase):
    def test_daily_later_today_and_across_midnight(self):
        with zone("UTC"):
            self.assertEqual(shown(next_daily("09:30", local("2026-05-01 08:00"))), "2026-05-01 09:30 UTC")
            self.assertEqual(shown(next_daily("09:30", local("2026-05-01 09:30"))), "2026-05-02 09:30 UTC")
            self.assertEqual(shown(next_daily("00:15", local("2026-12-31 23:50"))), "2027-01-01 00:15 UTC")

    def test_daily_across_daylight_saving_changes(self):
        """Berlin springs forward on 2026-03-29 (02:00 → 03:00) and falls back on 2026-10-25."""
        with zone("Europe/Berlin"):
            before = next_daily("08:00", local("2026-03-28 09:00"))
            self.assertEqual(shown(before), "2026-03-29 08:00 CEST")
            self.assertEqual(before - local("2026-03-28 08:00"), 23 * 3600)  # the day is an hour short
            skipped = next_daily("02:30", local("2026-03-29 01:00"))
            self.assertEqual(shown(skipped), "2026-03-29 03:30 CEST")  # 02:30 does not exist that day
            self.assertEqual(shown(next_daily("08:00", local("2026-10-24 09:00"))), "2026-10-25 08:00 CET")

    def test_interval_keeps_its_rhythm_and_runs_once_for_many_missed(self):
        start = 1_000_000.0
        self.assertEqual(next_interval(30, None, start), start + 1800)
        self.assertEqual(next_interval(30, start + 1800, start + 60), start + 1800)
        self.assertEqual(next_interval(30, start, start + 1800 * 5 + 10), start + 1800 * 6)
        self.assertIsNone(next_run({"kind": "interval", "interval": 5, "enabled": False}, start))


class ScheduleCase(LoopCase):
    async def save(self, expect: int = 200, **fields) -> dict:
        body = {"projectid": self.project["id"], "name": "Morning", "prompt": "check", "model": self.modelref,
                "kind": "interval", "interval": 60} | fields
        answer = await call(self.app, "schedules_save", {k: v for k, v in body.items() if v is not None})
        self.assertEqual(answer.status, expect, answer.body)
        return answer.json()

    async def run_now(self, schedule: dict) -> str:
        answer = await call(self.app, "schedules_run", {}, ident=schedule["id"])
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()["sessionid"]

    async def until_idle(self, sessionid: str) -> None:
        for _ in range(1000):
            if not self.app.runs.is_running(sessionid):
                return
            await asyncio.sleep(5 * MS)
        self.fail("the scheduled run did not end")

    async def tool_parts(self, sessionid: str) -> list[dict]:
        messages = (await call(self.app, "sessions_messages", ident=sessionid)).json()["messages"]
        return [part for message in messages for part in message["parts"] if part["kind"] == "tool"]


class ScheduleApiTest(ScheduleCase):
    async def test_every_field_is_checked(self):
        """Each bad field is a 400 naming it; nothing is stored."""
        cases = {
            "projectid": {"projectid": None}, "name": {"name": ""}, "prompt": {"prompt": "   "},
            "kind": {"kind": "weekly"}, "interval": {"interval": 0}, "time": {"kind": "daily", "time": "25:00"},
            "mode": {"mode": "yolo"}, "autoaccept": {"autoaccept": "yes"}, "enabled": {"enabled": 1},
            "model": {"model": "nosuchprovider/x"}, "id": {"id": 5}, "extra": {"extra": True},
        }
        for field, change in cases.items():
            with self.subTest(field=field):
                answer = await call(self.app, "schedules_save", {
                    "projectid": self.project["id"], "name": "n", "prompt": "p", "model": self.modelref,
                    "kind": "interval", "interval": 5} | change)
                answer_fields = [item["name"] for item in answer.json()] if answer.status == 400 else []
                self.assertEqual(answer.status, 400, (field, answer.body))
                self.assertIn(field if field != "projectid" else "projectid", answer_fields)
        for body, field in (({"kind": "interval", "interval": None}, "interval"),
                            ({"kind": "daily", "interval": None}, "time"),
                            ({"interval": 7 * 24 * 60 + 1}, "interval"), ({"kind": "daily", "time": "7:00"}, "time")):
            answer = await call(self.app, "schedules_save", {k: v for k, v in ({
                "projectid": self.project["id"], "name": "n", "prompt": "p", "model": self.modelref,
                "kind": "interval", "interval": 5} | body).items() if v is not None})
            self.assertEqual(answer.status, 400, answer.body)
            self.assertIn(field, [item["name"] for item in answer.json()])
        # Without its kind no branch of the body is chosen, so no problem names the other fields:
        # the handler must still not read a field of the wrong type.
        for change in ({"id": {}}, {"projectid": []}, {"name": 5, "prompt": ["p"]}):
            with self.subTest(kindless=change):
                answer = await call(self.app, "schedules_save", {"projectid": self.project["id"], "name": "n",
                                                                  "prompt": "p", "model": self.modelref} | change)
                self.assertEqual(answer.status, 400, answer.body)
                self.assertIn("kind", [item["name"] for item in answer.json()])
        missing = await call(self.app, "schedules_save", {
            "projectid": "nosuchproject", "name": "n", "prompt": "p", "model": self.modelref,
            "kind": "interval", "interval": 5})
        self.assertEqual(missing.status, 404)
        listed = await call(self.app, "schedules", query=f"projectid={self.project['id']}")
        self.assertEqual(listed.json(), [])

    async def test_save_list_change_and_remove(self):
        """A saved schedule lists with its next time and the time zone; changing it keeps its
        id; removing it leaves the sessions of its runs."""
        saved = await self.save(kind="daily", time="07:45", interval=None)
        self.assertEqual((saved["mode"], saved["autoaccept"], saved["enabled"]), ("plan", False, True))
        self.assertIn("UTC", saved["timezone"])
        self.assertGreater(saved["next"], time.time() * 1000)
        self.assertEqual(time.strftime("%H:%M", time.localtime(saved["next"] / 1000)), "07:45")
        changed = await self.save(id=saved["id"], enabled=False)
        self.assertEqual((changed["id"], changed["next"]), (saved["id"], None))
        listed = (await call(self.app, "schedules", query=f"projectid={self.project['id']}")).json()
        self.assertEqual([item["id"] for item in listed], [saved["id"]])
        self.model.script(reply("done"))
        sessionid = await self.run_now(changed)
        await self.until_idle(sessionid)
        self.assertEqual((await call(self.app, "schedules_remove", {}, ident=saved["id"])).status, 200)
        self.assertEqual((await call(self.app, "sessions_read", ident=sessionid)).status, 200)
        self.assertEqual((await call(self.app, "schedules_remove", {}, ident=saved["id"])).status, 404)

    async def test_removed_with_the_project(self):
        await self.save()
        await call(self.app, "projects_remove", {}, ident=self.project["id"])
        self.assertEqual(await self.app.store.list_schedules(), [])


class ScheduledRunTest(ScheduleCase):
    async def test_run_now_is_a_marked_session_in_plan_mode(self):
        """Run now answers the new session: named after the schedule and the time, marked with
        its id, in Plan mode by default; the list shows the last run."""
        schedule = await self.save()
        self.model.script(reply("all fine"))
        sessionid = await self.run_now(schedule)
        session = (await call(self.app, "sessions_read", ident=sessionid)).json()
        self.assertEqual(session["schedule"], schedule["id"])
        self.assertTrue(session["name"].startswith("Morning 20"))
        self.assertEqual(session["mode"], "plan")
        # Made in the default mode, the session is announced again in the mode of its run, so
        # that a page that listed it shows its prompt box in Plan.
        modes = []
        while True:
            event = await next_event(self.ws, 5000)
            if event["type"] == "session.updated" and event["sessionid"] == sessionid:
                modes.append(event["data"]["session"]["mode"])
            if event["type"] == "session.status" and event["sessionid"] == sessionid \
                    and event["data"]["status"] == "idle":
                break
        self.assertEqual(modes[-1], "plan", modes)
        await self.until_idle(sessionid)
        listed = (await call(self.app, "schedules", query=f"projectid={self.project['id']}")).json()
        self.assertEqual((listed[0]["last"]["sessionid"], listed[0]["last"]["status"]), (sessionid, "idle"))

    async def test_a_write_and_an_asking_command_are_refused_with_nothing_changed(self):
        """Build mode, no rules: the write and the bash call end denied, nobody was asked, the
        disk is as it was, and no rule was stored."""
        schedule = await self.save(mode="build")
        self.model.script(reply(tool_calls=[("write", {"path": "new.txt", "content": "x"})]),
                          reply(tool_calls=[("bash", {"command": "touch made.txt"})]), reply("stopped"))
        sessionid = await self.run_now(schedule)
        await self.until_idle(sessionid)
        parts = await self.tool_parts(sessionid)
        self.assertEqual([part["status"] for part in parts], ["denied", "denied"])
        self.assertTrue(all(SCHEDULED_REASON in part["data"]["error"] for part in parts))
        self.assertFalse(os.path.exists(os.path.join(self.project["path"], "new.txt")))
        self.assertFalse(os.path.exists(os.path.join(self.project["path"], "made.txt")))
        self.assertEqual(self.app.runs.questions.waiting(sessionid), [])
        self.assertEqual(await self.app.store.list_rules(self.project["id"]), [])

    async def test_autoaccept_lets_an_edit_through_but_never_a_command(self):
        schedule = await self.save(mode="build", autoaccept=True)
        self.model.script(reply(tool_calls=[("edit", {"path": "a.txt", "old": "hello", "new": "howdy"})]),
                          reply(tool_calls=[("bash", {"command": "touch made.txt"})]), reply("ok"))
        sessionid = await self.run_now(schedule)
        await self.until_idle(sessionid)
        self.assertEqual([part["status"] for part in await self.tool_parts(sessionid)], ["done", "denied"])
        with open(os.path.join(self.project["path"], "a.txt")) as handle:
            self.assertTrue(handle.read().startswith("howdy"))
        self.assertFalse(os.path.exists(os.path.join(self.project["path"], "made.txt")))

    async def test_the_ask_tool_hears_nobody_is_here(self):
        schedule = await self.save()
        self.model.script(reply(tool_calls=[("ask", {"question": "Which one?", "options": ["a", "b"]})]),
                          reply("decided"))
        sessionid = await self.run_now(schedule)
        await self.until_idle(sessionid)
        parts = await self.tool_parts(sessionid)
        self.assertEqual(parts[0]["status"], "done", parts[0])
        self.assertIn(NOBODY_HERE, parts[0]["data"]["output"])


class RuledRunTest(ScheduleCase):
    rules = {"echo": "allow bash echo *"}

    async def test_a_rule_allowed_command_runs(self):
        schedule = await self.save(mode="build")
        self.model.script(reply(tool_calls=[("bash", {"command": "echo scheduled-two"})]), reply("ok"))
        sessionid = await self.run_now(schedule)
        await self.until_idle(sessionid)
        part = (await self.tool_parts(sessionid))[0]
        self.assertEqual(part["status"], "done", part["data"])
        self.assertIn("scheduled-two", part["data"]["output"])


class OverlapAndRestartTest(ScheduleCase):
    async def test_no_overlap(self):
        """While a run of the schedule goes on, run now is refused and a due occurrence is
        skipped and recorded; exactly one session exists."""
        schedule = await self.save()
        slow = reply("a long answer " * 20)
        slow.interval = 0.2  # the run streams for seconds: the previous run goes on
        self.model.script(slow)
        sessionid = await self.run_now(schedule)
        refused = await call(self.app, "schedules_run", {}, ident=schedule["id"])
        self.assertEqual(refused.status, 400)
        await self.app.services.schedules.run_due(schedule["id"], time.time())
        row = await self.app.store.get_schedule(schedule["id"])
        self.assertIn("skipped", row["data"]["last"]["note"])
        self.assertEqual(row["data"]["last"]["sessionid"], sessionid)
        sessions = (await call(self.app, "sessions", query=f"projectid={self.project['id']}")).json()["sessions"]
        self.assertEqual(len([s for s in sessions if s["schedule"] == schedule["id"]]), 1)
        await call(self.app, "sessions_abort", {}, ident=sessionid)

    async def test_an_occurrence_missed_while_stopped_runs_once_and_says_so(self):
        """A stored next time in the past (the server was down) runs once when the scheduler
        looks, with a note; the next time moves into the future."""
        schedule = await self.save(interval=60)
        row = await self.app.store.get_schedule(schedule["id"])
        past = time.time() - 3 * 3600
        await self.app.store.save_schedule(row["id"], row["projectid"], row["data"] | {"next": past})
        self.model.script(reply("caught up"))
        self.app.services.schedules.scheduler.changed()
        for _ in range(400):
            row = await self.app.store.get_schedule(schedule["id"])
            if (row["data"].get("last") or {}).get("sessionid"):
                break
            await asyncio.sleep(5 * MS)
        self.assertIn("missed at", row["data"]["last"]["note"])
        self.assertGreater(row["data"]["next"], time.time())
        await self.until_idle(row["data"]["last"]["sessionid"])
        await asyncio.sleep(50 * MS)
        sessions = (await call(self.app, "sessions", query=f"projectid={self.project['id']}")).json()["sessions"]
        self.assertEqual(len([s for s in sessions if s["schedule"] == schedule["id"]]), 1)
