"""Where a run stopped stays on its message: the error of a failed run and the mark of an aborted
one, after the next prompt and after a reload. In Debian's Chromium against the real server and
the scripted model."""

import asyncio
import os
import socket

import pytest
from playwright.sync_api import expect

from tests.model_server import HttpError, Stall, reply, text_chunks
from tests.ui.harness import CHROMIUM, open_session, send
from tests.utils import MS

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



def test_an_error_heard_while_the_conversation_is_read_shows_once(live, page):
    """A run that fails while the page reads the conversation (its answer held here): the error
    shows once, on the message as it is stored, and not again from the event heard meanwhile."""
    project = live.project("held", {"a.txt": "x\n"})
    session = live.session(project, "Held")
    held = []
    page.route("**/api/sessions_messages/**", lambda route: held.append(route))
    with page.expect_request("**/api/sessions_messages/**"):
        page.goto(f"/#/{project['id']}/{session['id']}")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")

    async def subscribed():
        async with asyncio.timeout(10_000 * MS):
            while not live.app.hub.subscribed(session["id"]):
                await asyncio.sleep(20 * MS)
    live.call(subscribed())
    live.model.script(HttpError({"error": {"message": "the model is not there"}}, 404))
    live.prompt(session, "First")
    assert live.wait_run_end(session) == "error"
    # The status is not held (the session list shows it): the error event came before it.
    expect(page.locator(f"#sessions li[data-id='{session['id']}']")).to_have_attribute("data-status", "error")
    for route in held:
        route.continue_()
    page.unroute("**/api/sessions_messages/**")
    expect(page.locator(".msg .ended-note.error")).to_contain_text("the model is not there")
    expect(page.locator(".run-errors .run-error")).to_have_count(0)

def ended_note(page):
    return page.locator(".msg .ended-note.error").last


def test_a_rejected_key_is_shown_with_what_to_do(live, page):
    """A run that fails at its first request (the provider rejects the key) leaves an answer with
    no parts: its error is shown anyway, says to fix the key in Providers, opens them, and Retry
    sends the prompt again without touching what is being written."""
    project = live.project("rejected", {"a.txt": "x\n"})
    session = live.session(project, "Rejected")
    open_session(page, project, session)
    live.model.script(HttpError({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                           "code": "invalid_api_key"}}, 401))
    send(page, "Say hello")
    note = ended_note(page)
    expect(note).to_be_visible()
    expect(note).to_contain_text("The provider rejected the API key (401)")
    expect(note.locator(".ended-advice")).to_contain_text("valid API key")
    expect(note).to_have_attribute("data-kind", "auth")  # the kind, stored with the error, read back
    live.wait_run_end(session)
    note.locator("button.fix-providers").click()
    dialog = page.locator("#providers-dialog")
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    page.fill("#prompt", "a draft of the next prompt")
    live.model.script(reply("Hello again."))
    note.locator("button.fix-retry").click()
    expect(page.locator(".msg.assistant").last).to_contain_text("Hello again.")
    live.wait_run_end(session)
    assert live.model.requests[-1].body["messages"][-1] == {"role": "user", "content": "Say hello"}
    expect(page.locator("#prompt")).to_have_value("a draft of the next prompt")
    page.reload()
    expect(page.locator(".msg .ended-note.error")).to_be_visible()  # still where it happened


def test_a_model_server_that_is_down_is_shown_after_a_reload(live, page):
    """A model server that refuses connections: after the retries the run stops, and the
    conversation says to check the server, also after a reload; Retry works once it is back."""
    project = live.project("down", {"a.txt": "x\n"})
    session = live.session(project, "Down")
    providerid = live.modelref.split("/")[0]
    scripted = live.api("providers")
    saved = next(provider for provider in scripted if provider["id"] == providerid)
    with socket.socket() as closed:  # a port that was free a moment ago, and is closed now
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    live.api("providers_save", {"id": providerid, "name": saved["name"], "kind": saved["kind"],
                                "url": f"http://127.0.0.1:{port}/v1"})
    try:
        live.prompt(session, "Are you there?")  # the picker lists no model of a server that is down
        live.wait_run_end(session)
        open_session(page, project, session)
        note = ended_note(page)
        expect(note).to_be_visible()
        expect(note).to_contain_text("Could not connect")
        expect(note.locator(".ended-advice")).to_contain_text("model server is running")
        expect(note).to_have_attribute("data-kind", "connection")
    finally:
        live.api("providers_save", {"id": providerid, "name": saved["name"], "kind": saved["kind"],
                                    "url": saved["url"]})
    page.reload()  # the server is back: its models are listed again
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")
    live.model.script(reply("Back again."))
    ended_note(page).locator("button.fix-retry").click()
    expect(page.locator(".msg.assistant").last).to_contain_text("Back again.")
