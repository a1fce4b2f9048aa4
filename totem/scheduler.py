"""Scheduled prompts: when each runs next, and the one task that runs them.

`next_run` is pure: an interval schedule runs every `interval` minutes counted from the time it
was planned for (so its rhythm does not drift by how long a run took); a daily one at `time`
("HH:MM") in the server's local time zone, read through `time.localtime`/`mktime`, so a
daylight-saving change moves it with the clock (a time that does not exist that day, in the hour
skipped in spring, runs at the same wall time as the clock shows it after the jump).

`Scheduler` is one asyncio task that sleeps until the earliest due schedule (or until a schedule
changes), then asks its `run_due` callback to run each one due. It never polls. At start, a
schedule whose stored `next` passed while the server was stopped runs once, and says so.

Must not: know what a run is (the schedules service does), or run two occurrences at once (the
service skips an occurrence while the previous run goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

MAX_SLEEP_S = 3600.0  # wake at least hourly: a clock that jumps (suspend, NTP) is caught up
MINUTE_S = 60

log = logging.getLogger("totem.schedules")


def next_daily(hhmm: str, after: float) -> float:
    """The first time after `after` (epoch seconds) at which the local clock shows HH:MM."""
    hours, minutes = (int(part) for part in hhmm.split(":"))
    day = time.localtime(after)
    for offset in range(3):
        # mktime normalises the day past the month's end, and takes is_dst=-1 to mean "as the
        # zone says that day".
        candidate = time.mktime((day.tm_year, day.tm_mon, day.tm_mday + offset, hours, minutes, 0, 0, 0, -1))
        if candidate > after:
            return candidate
    raise ValueError(f"no {hhmm} within three days of {after}")  # pragma: no cover: never


def next_interval(minutes: int, planned: float | None, after: float) -> float:
    """The next time of an every-`minutes` schedule last planned for `planned`: that time plus
    whole intervals, the first one after `after` (one run for all those missed)."""
    step = minutes * MINUTE_S
    if planned is None:
        return after + step
    if planned > after:
        return planned
    missed = int((after - planned) // step) + 1
    return planned + missed * step


def next_run(data: dict, after: float, planned: float | None = None) -> float | None:
    """When an enabled schedule runs next after `after`; None when it is disabled."""
    if not data.get("enabled", True):
        return None
    if data["kind"] == "daily":
        return next_daily(data["time"], after)
    return next_interval(int(data["interval"]), planned, after)


def zone_name(at: float | None = None) -> str:
    """The server's time zone as people read it: its abbreviation and UTC offset."""
    local = time.localtime(at)
    offset = local.tm_gmtoff or 0
    sign = "+" if offset >= 0 else "-"
    hours, rest = divmod(abs(offset), 3600)
    return f"{local.tm_zone} (UTC{sign}{hours:02d}:{rest // 60:02d})"


class Scheduler:
    """Sleeps until the next due schedule and hands it to `run_due(scheduleid, planned, late)`."""

    def __init__(self, due: Callable[[], Awaitable[dict[str, float]]],
                 run_due: Callable[[str, float], Awaitable[None]], clock: Callable[[], float] = time.time):
        self.due = due  # () -> {scheduleid: next time} of every enabled schedule
        self.run_due = run_due
        self.clock = clock
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="scheduler")

    def changed(self) -> None:
        """A schedule was created, changed or removed: look again."""
        self._changed.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        tried: set[tuple[str, float]] = set()  # never the same occurrence twice, even if it stays due
        while True:
            self._changed.clear()
            try:
                planned = await self.due()
            except Exception:  # the store failing must not end the scheduler
                log.exception("the schedules could not be read")
                planned = {}
            now = self.clock()
            due_now = sorted(((at, sid) for sid, at in planned.items() if at <= now and (sid, at) not in tried))
            for at, scheduleid in due_now:
                tried.add((scheduleid, at))
                try:
                    await self.run_due(scheduleid, at)
                except Exception:
                    log.exception("the run of schedule %s failed to start", scheduleid)
            if due_now:
                continue  # their next times moved on: read them again
            upcoming = [at - now for at in planned.values() if at > now]
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min([*upcoming, MAX_SLEEP_S]))
