"""The Schedules dialog in the browser: create through the form, the server's errors by their
fields, the list with when and the next time, Run now (a session marked as scheduled in the
list), edit to daily, disable, and remove with its confirmation; against the real server and
the scripted model."""

import os
import re
import time

import pytest
from playwright.sync_api import expect

from tests.model_server import Stall, reply, text_chunks
from tests.ui.harness import CHROMIUM, shot, watch_csp

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

MINUTE_MS = 60_000


def open_project(page, project):
    page.goto(f"/#/{project['id']}")
    expect(page.locator("#project-title")).to_have_text(project["path"])
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")


def test_create_run_edit_disable_and_remove_a_schedule(live, page):
    errors = watch_csp(page)
    project = live.project("scheduled", {"a.txt": "x\n"})
    live.session(project, "By hand")
    open_project(page, project)
    page.click("#open-schedules")
    dialog = page.locator("#schedules-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#schedules-dialog-title")).to_have_text("Schedules · scheduled")
    expect(dialog.locator("#schedule-list")).to_contain_text("No schedule yet")

    # The form: defaults, and only the field of the kind shown.
    dialog.get_by_role("button", name="New schedule").click()
    form = dialog.locator("#schedule-form")
    expect(form).to_be_visible()
    expect(form.locator("#schedule-mode")).to_have_value("plan")
    expect(form.locator("#schedule-autoaccept")).not_to_be_checked()
    expect(form.locator("#schedule-enabled")).to_be_checked()
    expect(form.locator("#schedule-model")).to_have_value(live.modelref)  # from Providers|catalog
    expect(form.locator("#schedule-interval")).to_be_visible()
    expect(form.locator("#schedule-time")).to_be_hidden()
    form.locator("#schedule-kind").select_option("daily")
    expect(form.locator("#schedule-time")).to_be_visible()
    expect(form.locator("#schedule-interval")).to_be_hidden()
    form.locator("#schedule-kind").select_option("interval")

    # A bad field: the server's message, by the field it names; nothing is saved.
    form.locator("#schedule-name").fill("Nightly <b>check</b>")
    form.locator("#schedule-prompt").fill("Look at a.txt")
    form.locator("#schedule-interval").fill("0")
    form.get_by_role("button", name="Save").click()
    interval_error = form.locator("[data-error-for=interval]")
    expect(interval_error).to_have_text("must be from 1 to 10080")
    expect(form.locator("[data-field=interval]")).to_have_class(re.compile(r"\binvalid\b"))
    expect(form.locator("[data-error-for=name]")).to_be_hidden()
    assert live.api("schedules", query=f"projectid={project['id']}") == []
    shot(page, "schedule-error.png")

    form.locator("#schedule-interval").fill("30")
    before = time.time() * 1000
    form.get_by_role("button", name="Save").click()
    expect(form).to_be_hidden()
    card = dialog.locator("#schedule-list li.schedule")
    expect(card).to_have_count(1)
    expect(card.locator(".schedule-name")).to_have_text("Nightly <b>check</b>")  # markup stays text
    expect(card.locator(".schedule-when")).to_have_text("Every 30 minutes")
    expect(card.locator(".schedule-next")).to_contain_text(re.compile(r"Next run: .*\(in (29|30) min\)"))
    next_ms = int(card.locator(".schedule-next").get_attribute("data-next"))
    assert before + 30 * MINUTE_MS - 5000 < next_ms < time.time() * 1000 + 30 * MINUTE_MS + 5000
    expect(card.locator(".schedule-last")).to_have_text("Last run: never yet")
    expect(card.locator(".schedule-options")).to_have_text("Plan · Scripted · scripted-model")
    expect(card.locator(".schedule-options")).to_have_attribute("title", live.modelref)
    [stored] = live.api("schedules", query=f"projectid={project['id']}")
    assert (stored["kind"], stored["interval"], stored["mode"], stored["autoaccept"], stored["enabled"]) == (
        "interval", 30, "plan", False, True)
    assert stored["next"] == next_ms

    # Run now: a new session, opened, marked in the list as a scheduled run.
    live.model.script(reply("Looked at it."))
    card.get_by_role("button", name="Run now").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("#session-title")).to_have_text(re.compile(r"^Nightly <b>check</b> \d{4}-\d\d-\d\d \d\d:\d\d$"))
    expect(page.locator(".msg.assistant .md").last).to_have_text("Looked at it.")
    expect(page.locator("#mode")).to_have_value("plan")  # the prompt box says the mode the schedule ran in
    scheduled = page.locator("#sessions li.active")
    expect(scheduled.locator(".scheduled")).to_have_attribute("title", "Run by the schedule “Nightly <b>check</b>”")
    expect(page.locator("#sessions li", has_text="By hand").locator(".scheduled")).to_have_count(0)
    runid = scheduled.get_attribute("data-id")
    assert live.api("sessions_read", ident=runid)["schedule"] == stored["id"]
    shot(page, "scheduled-session.png")

    # The last run, with its session; Open session shows it.
    page.locator("#sessions li", has_text="By hand").click()
    page.click("#open-schedules")
    last = card.locator(".schedule-last")
    expect(last.locator(".badge")).to_have_text("idle")
    expect(last).to_contain_text("run now")
    last.get_by_role("button", name="Open session").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("#sessions li.active")).to_have_attribute("data-id", runid)

    # Edit: daily at a time of the server's time zone.
    page.click("#open-schedules")
    card.get_by_role("button", name="Edit").click()
    expect(form.locator("#schedule-name")).to_have_value("Nightly <b>check</b>")
    expect(form.locator("#schedule-interval")).to_have_value("30")
    form.locator("#schedule-kind").select_option("daily")
    form.locator("#schedule-time").fill("09:30")
    form.locator("#schedule-mode").select_option("build")
    form.locator("#schedule-autoaccept").check()
    form.get_by_role("button", name="Save").click()
    expect(form).to_be_hidden()
    expect(card.locator(".schedule-when")).to_have_text(f"Daily at 09:30, {stored['timezone']}")
    expect(card.locator(".schedule-options")).to_have_text("Build · auto-accept edits · Scripted · scripted-model")
    expect(card.locator(".schedule-last .badge")).to_have_text("idle")  # the last run is kept
    [changed] = live.api("schedules", query=f"projectid={project['id']}")
    assert (changed["id"], changed["kind"], changed["time"], changed["mode"], changed["autoaccept"]) == (
        stored["id"], "daily", "09:30", "build", True)

    # Disable and enable again.
    card.get_by_role("button", name="Disable").click()
    expect(card).to_have_attribute("data-enabled", "false")
    expect(card.locator(".schedule-next")).to_have_text("Next run: none (disabled)")
    assert live.api("schedules", query=f"projectid={project['id']}")[0]["enabled"] is False
    card.get_by_role("button", name="Enable").click()
    expect(card).to_have_attribute("data-enabled", "true")
    expect(card.locator(".schedule-next time")).to_be_visible()
    shot(page, "schedules.png")

    # Remove asks first: the first press only arms the button.
    remove = card.get_by_role("button", name="Remove")
    remove.click()
    expect(card.get_by_role("button", name="Remove?")).to_be_visible()
    page.wait_for_timeout(200)
    assert len(live.api("schedules", query=f"projectid={project['id']}")) == 1
    card.get_by_role("button", name="Remove?").click()
    expect(card).to_have_count(0)
    expect(dialog.locator("#schedule-list")).to_contain_text("No schedule yet")
    assert live.api("schedules", query=f"projectid={project['id']}") == []
    # Its run's session stays, marked, without the schedule's name now.
    dialog.locator(".dialog-head button").click()
    expect(page.locator(f"#sessions li[data-id='{runid}'] .scheduled")).to_have_attribute("title", "Run by a schedule")

    # The one error logged is the 400 of the bad interval.
    assert [e for e in errors() if "400" not in e] == []


def test_run_now_while_its_last_run_goes_on(live, page):
    """Run now while the previous run still goes on is refused with the server's reason; the
    list follows the run's status while the dialog is open."""
    project = live.project("overlap")
    live.api("schedules_save", {"projectid": project["id"], "name": "Slow", "prompt": "Take your time",
                                "model": live.modelref, "kind": "interval", "interval": 60})
    open_project(page, project)
    live.model.script(Stall(events=text_chunks("thinking slowly")))
    page.click("#open-schedules")
    card = page.locator("#schedule-list li.schedule")
    card.get_by_role("button", name="Run now").click()
    expect(page.locator(".msg.assistant .part.text")).to_contain_text("thinking slowly")
    expect(page.locator("#sessions li.active .scheduled")).to_have_attribute("title", "Run by the schedule “Slow”")
    runid = page.locator("#sessions li.active").get_attribute("data-id")

    page.click("#open-schedules")
    expect(card.locator(".schedule-last .badge")).to_have_text("running")
    card.get_by_role("button", name="Run now").click()
    expect(page.locator(".toast.error")).to_have_text("the previous run of this schedule is still going")
    expect(page.locator("#schedules-dialog")).to_be_visible()
    assert len(live.api("sessions", query=f"projectid={project['id']}")["sessions"]) == 1

    live.api("sessions_abort", {}, ident=runid)
    expect(card.locator(".schedule-last .badge")).to_have_text("aborted")  # read again, the dialog still open
