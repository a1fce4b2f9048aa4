"""The question box in its place at a desk and on a phone: whole above the prompt box, over
nothing, its border in view, with a long answer above it. In Debian's Chromium against the
real server and the scripted model."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, open_session, send

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")


@pytest.mark.parametrize("width, height", [(1280, 800), (390, 844)])
def test_the_question_box_sits_whole_above_the_prompt_box(live, page, width, height):
    page.set_viewport_size({"width": width, "height": height})
    project = live.project(f"question{width}", {"a.txt": "alpha\n"})
    session = live.session(project, "Question")
    open_session(page, project, session)
    live.model.script(reply("I will run it now. " * 40, tool_calls=[("bash", {"command": "touch made.txt"})]),
                      reply("Done."))
    send(page, "go")
    card = page.locator(".ask.permission")
    expect(card).to_be_visible()
    box, composer = card.bounding_box(), page.locator("#composer").bounding_box()
    conversation = page.locator("#conversation").bounding_box()
    assert box["y"] + box["height"] <= composer["y"] + 1, (box, composer)  # its lower border not under the box
    assert box["y"] >= conversation["y"] + conversation["height"] - 1, (box, conversation)  # over no message
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, box
    assert card.evaluate("(e) => getComputedStyle(e).borderBottomWidth") != "0px"
    page.keyboard.press("Alt+q")
    page.keyboard.press("n")
    live.wait_run_end(session)
