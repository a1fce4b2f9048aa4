"""A person elsewhere hears of what needs them: permission for notifications asked once, at their
first prompt; a question that waits and a run that ends while the tab is hidden notify and mark
the tab's title; the mark goes when they come back; clicking a notification opens its session.
In Debian's Chromium against the real server and the scripted model, the browser's Notification
replaced by a recorder (a headless browser shows none)."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, open_session, send

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

RECORDER = """
window.__notes = []; window.__asked = 0;
class Recorded {
  constructor(title, options) { this.title = title; this.body = options?.body; window.__notes.push(this); }
  close() { this.closed = true; }
}
Recorded.permission = 'default';
Recorded.requestPermission = () => { window.__asked += 1; Recorded.permission = 'granted'; return Promise.resolve('granted'); };
window.Notification = Recorded;
"""
AWAY = """(away) => {
  Object.defineProperty(document, 'visibilityState', { get: () => (away ? 'hidden' : 'visible'), configurable: true });
  document.hasFocus = () => !away;
  if (!away) window.dispatchEvent(new Event('focus'));
}"""


def notes(page) -> list[dict]:
    return page.evaluate("window.__notes.map((n) => ({ title: n.title, body: n.body }))")


def wait_for_notes(page, count: int, timeout_ms: float = 20_000) -> list[dict]:
    """The notifications once there are `count` (the page's CSP refuses wait_for_function's eval)."""
    waited = 0.0
    while len(shown := notes(page)) < count:
        assert waited < timeout_ms, f"{len(shown)} notifications, not {count}: {shown}"
        page.wait_for_timeout(25)  # the page's own clock goes on; the condition is what is waited for
        waited += 25
    return shown


def test_a_question_and_an_ended_run_reach_a_person_elsewhere(live, page):
    page.add_init_script(RECORDER)
    project = live.project("elsewhere", {"a.txt": "x\n"})
    here = live.session(project, "Here")
    there = live.session(project, "There")
    open_session(page, project, here)
    live.model.script(reply("Hello."))
    send(page, "Hi")
    expect(page.locator(".msg.assistant").last).to_contain_text("Hello.")
    live.wait_run_end(here)
    assert page.evaluate("window.__asked") == 1
    assert notes(page) == []  # the person was here: nothing to tell

    page.evaluate(AWAY, True)
    live.model.script(reply(tool_calls=[("bash", {"command": "touch made.txt"})]), reply("Done."))
    live.prompt(there, "Make a file")
    wait_for_notes(page, 1)
    assert notes(page)[0]["title"] == "Totem asks in “There”"
    assert notes(page)[0]["body"].startswith("Allow bash?")
    [ask] = live.app.runs.questions.waiting(there["id"])
    live.api("permissions_reply", {"reply": "once"}, ident=ask.data()["id"])  # as another tab would
    wait_for_notes(page, 2)
    assert notes(page)[1]["title"] == "“There” finished"
    expect(page).to_have_title("✓ Here · Totem")

    page.evaluate("window.__notes[1].onclick()")
    expect(page.locator("#session-title")).to_have_text("There")
    page.evaluate(AWAY, False)
    expect(page).to_have_title("There · Totem")

    live.model.script(reply("Again."))
    send(page, "Once more")
    expect(page.locator(".msg.assistant").last).to_contain_text("Again.")
    live.wait_run_end(there)
    assert page.evaluate("window.__asked") == 1  # asked once, never again
    assert len(notes(page)) == 2
