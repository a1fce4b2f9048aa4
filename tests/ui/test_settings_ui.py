"""The Settings dialog in the browser: a value set for all projects is seen as coming from "all
projects" at the project level, a project's own value wins and is cleared again, the server's
refusal of a value out of range is shown by its field with nothing changed, and a session's own
values are shown in Session settings (and sent to the model by the next run); against the real
server and the scripted model."""

import os
import re

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, shot, watch_csp

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")


def open_page(page, address):
    page.goto(address)
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")


def stored(live, key, **ids):
    """(value, source) of a key as Settings|read says at the level of these ids."""
    query = "&".join(f"{name}={value}" for name, value in ids.items())
    item = live.api("settings", query=query)[key]
    return item["value"], item["source"]


def row(dialog, key):
    return dialog.locator(f"#settings-list li.setting[data-key='{key}']")


def set_value(dialog, key, value):
    row(dialog, key).locator("input").fill(value)
    row(dialog, key).locator(".setting-set").click()


def test_all_projects_then_this_project_wins_then_cleared(live, page):
    errors = watch_csp(page)
    project = live.project("tuned", {"a.txt": "x\n"})
    default = stored(live, "steps")
    assert default == (50, "config")  # config.ini's
    open_page(page, f"/#/{project['id']}")
    expect(page.locator("#project-title")).to_have_text(project["path"])
    page.click("#open-settings")
    dialog = page.locator("#settings-dialog")
    expect(dialog).to_be_visible()
    project_tab = dialog.get_by_role("tab", name="This project")
    all_tab = dialog.get_by_role("tab", name="All projects")
    expect(project_tab).to_have_attribute("aria-selected", "true")  # the open project's level first
    expect(dialog.get_by_role("tab", name="Session settings")).to_be_disabled()  # no session open
    steps = row(dialog, "steps")
    expect(steps.locator(".setting-value")).to_have_text("50")
    expect(steps.locator(".setting-source")).to_have_text("from config.ini")
    expect(steps.locator(".setting-description")).to_have_text(
        "model calls in one run before it stops and waits for the person")
    expect(steps.locator(".setting-range")).to_have_text("an integer from 1 to 1000")
    # Each setting is named in words, with its key (config.ini's and the API's) beside it.
    label = row(dialog, "commandtimeout").locator(".setting-title label")
    expect(label.locator("strong")).to_have_text("Command time limit")
    expect(label.locator(".setting-key")).to_have_text("commandtimeout")
    expect(dialog.get_by_label("Command time limit")).to_be_visible()
    expect(row(dialog, "temperature").locator(".setting-range")).to_have_text(
        "a number from 0 to 2; empty: the provider's default")
    expect(row(dialog, "temperature").locator(".setting-value")).to_have_text("the provider's default")
    expect(steps.locator(".setting-clear")).to_be_hidden()  # nothing set at this level

    # All projects: set, and seen as theirs there.
    all_tab.click()
    expect(all_tab).to_have_attribute("aria-selected", "true")
    expect(dialog.locator("#settings-dialog-title")).to_have_text("Settings · all projects")
    expect(steps.locator(".setting-set")).to_have_text("Set for all projects")
    set_value(dialog, "steps", "77")
    expect(steps.locator(".setting-source")).to_have_text("from all projects")
    expect(steps.locator(".setting-value")).to_have_text("77")
    expect(steps.locator(".setting-clear")).to_be_visible()
    assert stored(live, "steps") == (77, "all")

    # This project: the value of all projects, and where it comes from.
    project_tab.click()
    expect(dialog.locator("#settings-dialog-title")).to_have_text("Settings · tuned")
    expect(steps.locator(".setting-value")).to_have_text("77")
    expect(steps.locator(".setting-source")).to_have_text("from all projects")
    expect(steps.locator("input")).to_have_value("77")
    expect(steps.locator(".setting-clear")).to_be_hidden()

    # The project's own value wins.
    set_value(dialog, "steps", "33")
    expect(steps.locator(".setting-source")).to_have_text("from this project")
    expect(steps.locator(".setting-value")).to_have_text("33")
    assert stored(live, "steps", projectid=project["id"]) == (33, "project")
    assert stored(live, "steps") == (77, "all")
    shot(page, "settings-project.png")

    # Out of range: the server's reason by the field, nothing changed.
    set_value(dialog, "steps", "5000")
    error = dialog.locator("[data-error-for=steps]")
    expect(error).to_have_text("Steps must be from 1 to 1000.")
    expect(steps).to_have_class(re.compile(r"\binvalid\b"))
    expect(steps.locator("input")).to_have_attribute("aria-invalid", "true")
    expect(dialog.locator("[data-error-for=commandtimeout]")).to_be_hidden()
    expect(steps.locator(".setting-value")).to_have_text("33")
    expect(steps.locator(".setting-source")).to_have_text("from this project")
    assert stored(live, "steps", projectid=project["id"]) == (33, "project")
    shot(page, "settings-error.png")

    # Cleared: all projects' value again; the error is gone with the next answer.
    steps.get_by_role("button", name="Clear").click()
    expect(steps.locator(".setting-source")).to_have_text("from all projects")
    expect(steps.locator(".setting-value")).to_have_text("77")
    expect(steps.locator("input")).to_have_value("77")
    expect(error).to_be_hidden()
    expect(steps).not_to_have_class(re.compile(r"\binvalid\b"))
    expect(steps.locator(".setting-clear")).to_be_hidden()
    assert stored(live, "steps", projectid=project["id"]) == (77, "all")

    # Cleared for all projects too: config.ini's again, at both levels.
    all_tab.click()
    steps.get_by_role("button", name="Clear").click()
    expect(steps.locator(".setting-source")).to_have_text("from config.ini")
    expect(steps.locator(".setting-value")).to_have_text("50")
    assert stored(live, "steps", projectid=project["id"]) == default
    dialog.locator(".dialog-head button").click()
    expect(dialog).to_be_hidden()
    assert [e for e in errors() if "status of 400" not in e] == []


def test_session_settings_show_the_session_values_and_the_run_uses_them(live, page):
    project = live.project("tuned-session", {"a.txt": "x\n"})
    session = live.session(project, "Careful")
    other = live.session(project, "Other")
    live.api("settings_save", {"scope": "session", "sessionid": session["id"], "key": "steps", "value": 12})
    live.api("settings_save", {"scope": "project", "projectid": project["id"], "key": "temperature", "value": 1.5})
    open_page(page, f"/#/{project['id']}/{session['id']}")
    expect(page.locator("#session-title")).to_have_text("Careful")
    page.click("#session-settings")
    dialog = page.locator("#settings-dialog")
    expect(dialog.get_by_role("tab", name="Session settings")).to_have_attribute("aria-selected", "true")
    expect(dialog.locator("#settings-dialog-title")).to_have_text("Session settings · Careful")
    steps = row(dialog, "steps")
    temperature = row(dialog, "temperature")
    expect(steps.locator(".setting-value")).to_have_text("12")
    expect(steps.locator(".setting-source")).to_have_text("from this session")
    expect(temperature.locator(".setting-value")).to_have_text("1.5")
    expect(temperature.locator(".setting-source")).to_have_text("from this project")

    # A number with decimals, for this session only.
    set_value(dialog, "temperature", "0.4")
    expect(temperature.locator(".setting-source")).to_have_text("from this session")
    expect(temperature.locator(".setting-value")).to_have_text("0.4")
    assert stored(live, "temperature", sessionid=session["id"]) == (0.4, "session")
    assert stored(live, "temperature", sessionid=other["id"]) == (1.5, "project")
    shot(page, "settings-session.png")

    # The project's level does not show the session's values.
    dialog.get_by_role("tab", name="This project").click()
    expect(steps.locator(".setting-source")).to_have_text("from config.ini")
    expect(temperature.locator(".setting-value")).to_have_text("1.5")
    dialog.get_by_role("tab", name="Session settings").click()
    expect(steps.locator(".setting-value")).to_have_text("12")
    dialog.locator(".dialog-head button").click()

    # The next run sends the session's temperature.
    live.model.script(reply("Carefully."))
    page.fill("#prompt", "Go")
    page.press("#prompt", "Enter")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Carefully.")
    chats = [r for r in live.model.requests if r.path.endswith("/chat/completions")]
    assert chats[-1].body["temperature"] == 0.4

    # Another session has its own Session settings: the project's temperature, no steps of its own.
    page.locator(f"#sessions li[data-id='{other['id']}']").click()
    expect(page.locator("#session-title")).to_have_text("Other")
    page.click("#session-settings")
    expect(dialog.locator("#settings-dialog-title")).to_have_text("Session settings · Other")
    expect(steps.locator(".setting-source")).to_have_text("from config.ini")
    expect(temperature.locator(".setting-source")).to_have_text("from this project")
