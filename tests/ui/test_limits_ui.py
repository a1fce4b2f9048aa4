"""The spending limit in the browser: the setting says what empty means, a schedule's own limit
in its form and on its card, and a run stopped by its limit says so on its message with what to
do. In Debian's Chromium against the real server and the scripted model."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import chunk, reply
from tests.ui.harness import CHROMIUM, open_session

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")


def costing(number: int, cost: float):
    stream = reply(tool_calls=[("grep", {"pattern": f"line {number}"})], usage=False)
    stream.events.append(chunk(usage={"prompt_tokens": 100, "completion_tokens": 10, "cost": cost}, choices=False))
    return stream


def test_a_run_past_its_limit_says_so_and_what_to_do(live, page):
    project = live.project("spending", {"a.txt": "x\n"})
    session = live.session(project, "Spending")
    open_session(page, project, session)
    live.model.script(costing(1, 0.02), costing(2, 0.02), reply("never"))
    live.api("sessions_prompt", {"text": "Look around", "model": live.modelref, "maxcost": 0.03},
             ident=session["id"])
    note = page.locator(".msg .ended-note.error").last
    expect(note).to_have_attribute("data-kind", "cost")
    expect(note).to_contain_text("past its spending limit of $0.0300")
    expect(note.locator(".ended-advice")).to_contain_text("Raise the spending limit")
    assert live.wait_run_end(session) == "error"
    assert len([r for r in live.model.requests if r.path.endswith("/chat/completions")]) == 2


def test_the_setting_and_a_schedules_own_limit(live, page):
    project = live.project("limits", {"a.txt": "x\n"})
    page.goto(f"/#/{project['id']}")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")
    page.click("#open-settings")
    dialog = page.locator("#settings-dialog")
    row = dialog.locator("#settings-list li.setting[data-key='maxcost']")
    expect(row.locator(".setting-title label strong")).to_have_text("Spending limit per run")
    expect(row.locator(".setting-value")).to_have_text("no limit")
    expect(row.locator(".setting-range")).to_have_text("a number from 0 to 1000000; empty: no limit")
    expect(row.locator("input")).to_have_attribute("placeholder", "no limit")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    page.click("#open-schedules")
    schedules = page.locator("#schedules-dialog")
    schedules.get_by_role("button", name="New schedule").click()
    form = schedules.locator("#schedule-form")
    form.locator("#schedule-name").fill("Nightly")
    form.locator("#schedule-prompt").fill("Look at a.txt")
    form.locator("#schedule-maxcost").fill("-1")
    form.get_by_role("button", name="Save").click()
    expect(form.locator("[data-error-for=maxcost]")).to_be_visible()
    assert live.api("schedules", query=f"projectid={project['id']}") == []
    form.locator("#schedule-maxcost").fill("0.25")
    form.get_by_role("button", name="Save").click()
    expect(form).to_be_hidden()
    card = schedules.locator("#schedule-list li.schedule")
    expect(card.locator(".schedule-options")).to_contain_text("at most $0.25 a run")
    [stored] = live.api("schedules", query=f"projectid={project['id']}")
    assert stored["maxcost"] == 0.25
    card.get_by_role("button", name="Edit").click()
    expect(form.locator("#schedule-maxcost")).to_have_value("0.25")
    form.locator("#schedule-maxcost").fill("")
    form.get_by_role("button", name="Save").click()
    expect(form).to_be_hidden()
    [stored] = live.api("schedules", query=f"projectid={project['id']}")
    assert stored["maxcost"] is None
    expect(card.locator(".schedule-options")).not_to_contain_text("at most")


def test_an_answer_shows_the_share_of_its_input_the_cache_served(live, page):
    project = live.project("cached", {"a.txt": "x\n"})
    session = live.session(project, "Cached")
    open_session(page, project, session)
    stream = reply("From the cache.", usage=False)
    stream.events.append(chunk(usage={"prompt_tokens": 1000, "completion_tokens": 5,
                                      "prompt_tokens_details": {"cached_tokens": 800}}, choices=False))
    live.model.script(stream)
    live.api("sessions_prompt", {"text": "hi", "model": live.modelref}, ident=session["id"])
    live.wait_run_end(session)
    page.reload()
    usage = page.locator(".msg.assistant .msg-usage").last
    expect(usage).to_contain_text("1K in (80% cached)")
    assert "800 of them from the provider's prompt cache" in usage.get_attribute("title")
