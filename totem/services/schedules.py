"""The schedule use cases: list, save, remove, run now, and the run of a due schedule.

Owns what a schedule means, whoever calls it (the REST API, the scheduler): the checks of its
fields (a project, a prompt, a usable model, an interval or a daily time), its `next` time and
its `last` run (`{status, time, sessionid, note}`), and a run: a new session of the project named
after the schedule and the time, marked with the schedule's id, prompted as a scheduled run
(nobody is there: permissions.py refuses every question, the ask tool is answered "nobody is
here"). An occurrence whose previous run still goes on is skipped and recorded so.

Must not: parse HTTP, or sleep (schedules.Scheduler does).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from totem.errors import ApiError, BadRequest, NotFound
from totem.events import SessionUpdated
from totem.rows import ScheduleRow
from totem.scheduler import Scheduler, next_run, zone_name
from totem.store import Store, session_view

if TYPE_CHECKING:
    from totem.agent.providers import Providers
    from totem.events import Hub
    from totem.services.sessions import Sessions

KINDS = ("interval", "daily")
MIN_INTERVAL_MINUTES, MAX_INTERVAL_MINUTES = 1, 7 * 24 * 60
DEFAULT_MODE = "plan"
TIME_PATTERN = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]")
LATE_S = 60.0  # an occurrence this late was missed (the server was stopped), and the run says so
SESSION_TIME_FORMAT = "%Y-%m-%d %H:%M"

Schedule = dict[str, Any]


class Schedules:
    """The scheduled prompts of every project."""

    def __init__(self, store: Store, hub: Hub, sessions: Sessions, providers: Providers,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.hub = hub
        self.sessions = sessions  # a run is a session and a prompt
        self.providers = providers  # to check the model
        self.clock = clock
        self.scheduler = Scheduler(self.due, self.run_due, clock)

    # -- reading ----------------------------------------------------------------------------

    async def list(self, projectid: str) -> list[Schedule]:
        """The schedules of a project with `next` and `last`. Raises NotFound."""
        if await self.store.get_project(projectid) is None:
            raise NotFound(("projectid", f"no project {projectid}"))
        return [await self.view(row) for row in await self.store.list_schedules(projectid)]

    async def view(self, row: ScheduleRow) -> Schedule:
        data = row["data"]
        last = dict(data.get("last") or {}) or None
        if last and last.get("sessionid") and last.get("status") == "started":
            session = await self.store.get_session(last["sessionid"])
            last["status"] = ("running" if self.sessions.runs.is_running(last["sessionid"])
                              else session["status"] if session else "removed")
            if last["status"] == "error":  # the run failed, or the server stopped during it
                reason = session["error"] if session is not None else None
                last.update(status="failed", note=reason or "the run failed")
        fields = {key: data.get(key) for key in ("name", "prompt", "model", "kind", "interval", "time", "mode",
                                                  "autoaccept", "maxcost", "enabled")}
        next_at = data.get("next")
        return {"id": row["id"], "projectid": row["projectid"], **fields,
                "next": round(next_at * 1000) if next_at else None, "last": last,
                "timezone": zone_name(), "created": row["created"], "updated": row["updated"]}

    async def get(self, scheduleid: str) -> ScheduleRow:
        row = await self.store.get_schedule(scheduleid)
        if row is None:
            raise NotFound(("id", f"no schedule {scheduleid}"))
        return row

    # -- changing ---------------------------------------------------------------------------

    async def save(self, fields: dict[str, Any], scheduleid: str | None = None) -> Schedule:
        """Create (no id) or change a schedule; the scheduler looks again. Raises NotFound,
        BadRequest naming each field that is wrong."""
        old = await self.get(scheduleid) if scheduleid else None
        if old is not None and old["projectid"] != fields["projectid"]:
            raise BadRequest(("projectid", "a schedule stays in its project"))
        if await self.store.get_project(fields["projectid"]) is None:
            raise NotFound(("projectid", f"no project {fields['projectid']}"))
        problems = []
        if fields["kind"] == "interval" and fields.get("interval") is None:
            problems.append(("interval", "is required for an interval schedule (minutes)"))
        if fields["kind"] == "daily" and not fields.get("time"):
            problems.append(("time", "is required for a daily schedule (HH:MM)"))
        try:
            await self.providers.target(fields["model"])
        except Exception as exc:  # agent.providers.ModelError: the message says what is wrong
            problems.append(("model", getattr(exc, "message", str(exc))))
        if problems:
            raise BadRequest(problems)
        data = {key: fields.get(key) for key in ("name", "prompt", "model", "kind", "interval", "time", "mode",
                                                  "autoaccept", "maxcost", "enabled")}
        if old is not None:
            data["last"] = old["data"].get("last")
        data["next"] = next_run(data, self.clock())
        row = await self.store.save_schedule(scheduleid, fields["projectid"], data)
        if row is None:
            raise NotFound(("id", f"no schedule {scheduleid}"))
        self.scheduler.changed()
        return await self.view(row)

    async def remove(self, scheduleid: str) -> str:
        """Remove a schedule; the sessions of its runs stay. Raises NotFound."""
        row = await self.get(scheduleid)
        await self.store.remove_schedule(row["id"])
        self.scheduler.changed()
        return row["id"]

    async def run_now(self, scheduleid: str) -> dict[str, Any]:
        """Run a schedule at once (its next time stays); `{sessionid}`. Raises NotFound,
        BadRequest (its previous run still goes on, or the prompt is refused)."""
        row = await self.get(scheduleid)
        if self._still_running(row):
            raise BadRequest(("id", "the previous run of this schedule is still going"))
        sessionid = await self._start(row, self.clock(), note="run now")
        if sessionid is None:
            raise BadRequest(("id", (await self.get(scheduleid))["data"]["last"]["note"]))
        return {"sessionid": sessionid}

    # -- the scheduler's side ---------------------------------------------------------------

    async def due(self) -> dict[str, float]:
        return {row["id"]: row["data"]["next"] for row in await self.store.list_schedules()
                if row["data"].get("enabled", True) and row["data"].get("next")}

    async def run_due(self, scheduleid: str, planned: float) -> None:
        """Run one due occurrence: its next time is stored first, then the run starts, unless
        the previous run still goes on (the occurrence is skipped and recorded)."""
        row = await self.store.get_schedule(scheduleid)
        if row is None:
            return
        now = self.clock()
        data = dict(row["data"])
        data["next"] = next_run(data, now, planned)
        if self._still_running(row):
            data["last"] = dict(data.get("last") or {}) | {
                "skipped": round(now * 1000),
                "note": f"the occurrence of {_shown(planned)} was skipped: the previous run was still going"}
            await self.store.save_schedule(row["id"], row["projectid"], data)
            return
        await self.store.save_schedule(row["id"], row["projectid"], data)
        late = now - planned > LATE_S
        await self._start(row, now, note=f"missed at {_shown(planned)} while Totem was stopped; run at start"
                          if late else "")

    def _still_running(self, row: ScheduleRow) -> bool:
        last = row["data"].get("last") or {}
        return bool(last.get("sessionid")) and self.sessions.runs.is_running(last["sessionid"])

    async def _start(self, row: ScheduleRow, now: float, note: str) -> str | None:
        data = row["data"]
        name = f"{data['name']} {time.strftime(SESSION_TIME_FORMAT, time.localtime(now))}"
        session = await self.store.create_scheduled_session(row["projectid"], name, row["id"])
        last: dict[str, Any] = {"time": round(now * 1000), "note": note}
        if session is None:
            last.update(status="failed", note="the project is gone")
        else:
            self.hub.publish(SessionUpdated(session["id"], session_view(session)))
            last["sessionid"] = session["id"]
            try:
                await self.sessions.prompt(session["id"], data["prompt"], model=data["model"],
                                           mode=data.get("mode") or DEFAULT_MODE,
                                           autoaccept=bool(data.get("autoaccept")), scheduled=True,
                                           maxcost=data.get("maxcost"))
                last["status"] = "started"
            except ApiError as exc:
                last.update(status="failed", note=str(exc))
        fresh = await self.store.get_schedule(row["id"])
        if fresh is not None:
            await self.store.save_schedule(row["id"], row["projectid"], fresh["data"] | {"last": last})
        return last.get("sessionid") if last["status"] == "started" else None


def _shown(at: float) -> str:
    return time.strftime(SESSION_TIME_FORMAT, time.localtime(at))
