"""A background job as a person meets it: the question says it keeps running, the call and the
job's row say it runs, and its Stop is in reach at the widths of a laptop and a phone. In
Debian's Chromium against the real server and the scripted model."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, open_session, send

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

JOB_COMMAND = "sleep 600 # a development server that never ends by itself, with a long comment after it"


def in_view(page, locator) -> None:
    """The element is on the screen: inside the viewport, with nothing to scroll sideways for it."""
    box = locator.bounding_box()
    width = page.viewport_size["width"]
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (box, width)


@pytest.mark.parametrize("width", [1280, 390])
def test_a_background_job_says_it_runs_and_stops_in_reach(live, page, width):
    page.set_viewport_size({"width": width, "height": 844 if width == 390 else 800})
    project = live.project(f"jobs{width}", {"a.txt": "x\n"})
    session = live.session(project, "Jobs")
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[("bash", {"command": JOB_COMMAND, "background": True})]),
                      reply("The server runs."))
    send(page, "Start the server")
    card = page.locator(".ask.permission")
    expect(card).to_be_visible()
    expect(card).to_contain_text("keeps running")
    # The comment makes the line opaque to the rules: nothing "always" could store is offered.
    expect(card.locator(".ask-once")).to_have_text("Answer once or reject: no rule can be stored for this.")
    expect(card.get_by_role("button", name="Always allow…")).to_have_count(0)
    expect(card.locator(".patterns")).to_have_count(0)
    card.get_by_role("button", name="Allow once").click()
    expect(page.locator(".msg.assistant .md").last).to_have_text("The server runs.")
    call = page.locator(".part.tool").first
    expect(call).to_contain_text("running in the background")
    if width == 390:
        page.locator("#toggle-panels").click()
    row = page.locator("#jobs li.job")
    expect(row).to_have_attribute("data-status", "running")
    expect(row.locator(".badge")).to_have_text("running")
    stop = row.get_by_role("button", name="Stop")
    expect(stop).to_be_visible()
    in_view(page, stop)
    stop.click()
    expect(row).not_to_have_attribute("data-status", "running")
    expect(call).not_to_contain_text("running in the background")
