"""Where a run stopped stays on its message: the error of a failed run and the mark of an aborted
one, after the next prompt and after a reload. In Debian's Chromium against the real server and
the scripted model."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import HttpError, Stall, reply, text_chunks
from tests.ui.harness import CHROMIUM, open_session, send

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")


def test_error_and_abort_marks_stay_on_their_messages(live, page):
    project = live.project("marks", {"a.txt": "x\n"})
    session = live.session(project, "Marks")
    open_session(page, project, session)
    live.model.script(HttpError({"error": {"message": "the model is not there"}}, 404))
    send(page, "First")
    note = page.locator(".msg .ended-note.error")
    expect(note).to_contain_text("The run stopped here with an error")
    expect(note).to_contain_text("the model is not there")
    expect(page.locator(".run-errors .run-error")).to_have_count(0)  # on the message, not twice
    live.wait_run_end(session)

    live.model.script(Stall(events=text_chunks("halfway")))
    send(page, "Second")
    expect(page.locator(".msg.assistant .part.text").last).to_contain_text("halfway")
    page.keyboard.press("Escape")
    expect(page.locator(".msg .ended-note.aborted")).to_have_text("Stopped here: the run was aborted")
    expect(note).to_contain_text("the model is not there")  # the first run's error is still there
    live.call(live.model.wait_disconnect(2.0))
    live.wait_run_end(session)

    live.model.script(reply("All good."))
    send(page, "Third")
    expect(page.locator(".msg.assistant").last).to_contain_text("All good.")
    live.wait_run_end(session)
    page.reload()
    expect(page.locator(".msg .ended-note.error")).to_contain_text("the model is not there")
    expect(page.locator(".msg .ended-note.aborted")).to_have_count(1)
    expect(page.locator(".run-errors .run-error")).to_have_count(0)
