"""Answers only by a deliberate act, in Debian's Chromium against the real server and the scripted
model: typing in the prompt box while permission and model questions arrive answers none of them
(at a laptop's width and a phone's), "always" is never one key, a question under an open drawer
or out of view cannot be answered until it is shown, and the deliberate ways (a click, Alt+Q then
a key, Enter on a focused button) still answer, handing the keyboard back to the prompt (or the
Terminal)."""

import os
import re

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, open_session

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 800}
# Every key a card ever answered to, in words a person types: n (reject), y and Enter (once),
# a (always, before), digits (an option of the ask tool); "\n" is typed as Shift+Enter, which is
# a new line in the prompt box (a plain Enter would send the prompt).
BEFORE = "notes"
WHILE_ASKED = " yes always\nn y a A Y N\nkeep going"
WHILE_QUESTIONED = "\n1 2 3 any answer\nyes"


def type_slowly(page, text):
    """Type character by character into whatever has the focus, as a person does."""
    for char in text:
        if char == "\n":
            page.keyboard.press("Shift+Enter")
        else:
            page.keyboard.type(char)


def stored_rules(live, project):
    """The rules saved for the project and globally (not config.ini's nor the defaults)."""
    rules = live.api("permissions", query=f"projectid={project['id']}")
    return [(r["tool"], r["pattern"]) for r in rules if r["removable"]]


def waiting(live, session):
    """How many questions wait in the session, as Sessions|read counts them."""
    return live.api("sessions_read", ident=session["id"])["waiting"]


def waiting_ids(live, session):
    """The ids of the questions that wait in the session, oldest first."""
    async def read():
        return [event.id for event in live.app.runs.questions.waiting(session["id"])]
    return live.call(read())


def ask_bash(live, session, *commands, then="Done."):
    """Start a run whose model asks to run each command in turn, then answers `then`."""
    live.model.script(*[reply(tool_calls=[("bash", {"command": command})]) for command in commands], reply(then))
    live.prompt(session, "Run them")


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["laptop", "phone"])
def test_typing_in_the_prompt_answers_no_question(live, page, viewport):
    """Questions that arrive while the person types in the prompt box leave the focus there: the
    n, y, a, Enter and digits typed go into the prompt, no question is answered and no rule is
    stored; the question is announced and marked instead."""
    page.set_viewport_size(viewport)
    project = live.project(f"typing-{viewport['width']}", {"a.txt": "x\n"})
    session = live.session(project, "Typing")
    open_session(page, project, session)
    prompt = page.locator("#prompt")
    expect(prompt).to_be_focused()
    type_slowly(page, BEFORE)

    live.model.script(reply(tool_calls=[("bash", {"command": "touch notes.txt"})]),
                      reply(tool_calls=[("ask", {"question": "Which one?", "options": ["first", "second", "third"]})]),
                      reply("Done."))
    live.prompt(session, "Go")  # from elsewhere: the page's prompt box keeps what is typed
    card = page.locator(".ask.permission")
    expect(card).to_be_visible()
    expect(card.get_by_role("button", name="Allow once")).to_be_enabled()  # answerable, only not by typing
    asked = card.get_attribute("data-id")
    type_slowly(page, WHILE_ASKED)
    assert waiting(live, session) == 1
    assert waiting_ids(live, session) == [asked]
    assert stored_rules(live, project) == []
    expect(card).to_have_count(1)
    expect(prompt).to_have_value(BEFORE + WHILE_ASKED)
    expect(page.locator(".part.tool.status-pending")).to_contain_text("touch notes.txt")
    assert not os.path.exists(os.path.join(project["path"], "notes.txt"))
    expect(prompt).to_be_focused()
    # Announced and marked instead.
    expect(page.locator("#questions-live")).to_have_text("Permission question: allow bash? Alt+Q moves to it.")
    expect(card).to_have_class("ask permission unvisited")
    expect(card.locator(".keys-hint")).to_contain_text("Alt+Q moves the keyboard here")

    # Answered elsewhere (another client): the model's own question comes next, typed over too.
    live.api("permissions_reply", {"reply": "reject"}, ident=asked)
    question = page.locator(".ask.question")
    expect(question).to_contain_text("Which one?")
    expect(question.get_by_role("button", name="second")).to_be_enabled()
    questioned = question.get_attribute("data-id")
    type_slowly(page, WHILE_QUESTIONED)
    assert waiting_ids(live, session) == [questioned]
    expect(question).to_have_count(1)
    expect(prompt).to_have_value(BEFORE + WHILE_ASKED + WHILE_QUESTIONED)
    assert stored_rules(live, project) == []
    expect(prompt).to_be_focused()
    expect(page.locator("#questions-live")).to_have_text("Question: Which one? Alt+Q moves to it.")

    live.api("questions_reply", {"answer": "third"}, ident=questioned)
    expect(page.locator(".msg.assistant .md").last).to_have_text("Done.")
    assert live.wait_run_end(session) == "idle"
    expect(prompt).to_have_value(BEFORE + WHILE_ASKED + WHILE_QUESTIONED)
    assert not os.path.exists(os.path.join(project["path"], "notes.txt"))


def test_always_is_never_one_key(live, page):
    """On the question itself (reached with Alt+Q) "a" stores nothing; Always allow is its own
    button, and even pressed it only opens a confirmation that shows the pattern, where Enter
    presses Cancel: the rule is stored by the confirmation's own button only."""
    project = live.project("always-key", {"a.txt": "x\n"})
    session = live.session(project, "Always")
    open_session(page, project, session)
    expect(page.locator("#prompt")).to_be_focused()
    type_slowly(page, "draft")
    ask_bash(live, session, "touch made.txt")
    card = page.locator(".ask.permission")
    always = card.get_by_role("button", name="Always allow")
    expect(always).to_be_enabled()
    expect(always.locator("kbd")).to_have_count(0)  # no key hint: it has no key
    assert always.get_attribute("aria-keyshortcuts") is None
    assert "A" not in card.get_attribute("aria-keyshortcuts").split()
    expect(card.locator(".keys-hint")).to_contain_text("Always allow has no key")

    page.keyboard.press("Alt+q")
    expect(card).to_be_focused()
    for key in ("a", "A", "Shift+A"):
        page.keyboard.press(key)
    expect(card).to_be_focused()
    expect(page.locator("#confirm-dialog")).to_be_hidden()
    assert waiting(live, session) == 1
    assert stored_rules(live, project) == []

    chosen = card.locator("input[type=radio]:checked").get_attribute("value")
    always.focus()
    page.keyboard.press("Enter")  # on the button itself: it asks, it does not store
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#confirm-question")).to_contain_text("from now on bash runs without asking")
    expect(page.locator("#confirm-details code")).to_have_text([chosen])
    expect(page.locator("#confirm-cancel")).to_be_focused()
    page.keyboard.press("Enter")  # Enter alone presses Cancel
    expect(dialog).to_be_hidden()
    assert waiting(live, session) == 1
    assert stored_rules(live, project) == []

    always.click()
    expect(dialog).to_be_visible()
    page.locator("#confirm-ok").click()
    expect(card).to_have_count(0)
    expect(page.locator(".msg.assistant .md").last).to_have_text("Done.")
    assert stored_rules(live, project) == [("bash", chosen)]
    expect(page.locator("#prompt")).to_have_value("draft")


def test_question_under_an_open_drawer_waits_until_it_closes(live, page):
    """At a phone's width a question under the open Sessions drawer (or the panels) has its
    buttons disabled, saying why; neither its keys nor a click answer it; once the drawer closes
    it is answered. Alt+Q closes the drawer over it and moves the keyboard there."""
    page.set_viewport_size(PHONE)
    project = live.project("drawers", {"a.txt": "x\n"})
    session = live.session(project, "Drawers")
    open_session(page, project, session)
    page.click("#toggle-side")
    expect(page.locator("#side")).to_be_visible()
    ask_bash(live, session, "echo first", "echo second")
    card = page.locator(".ask.permission", has_text="echo first")
    expect(card).to_have_count(1)
    once = card.get_by_role("button", name="Allow once")
    expect(once).to_be_disabled()
    expect(once).to_have_attribute("title", "This question is under the Sessions list: close it to answer.")
    expect(once).to_have_accessible_description("This question is under the Sessions list: close it to answer.")
    for name in ("Always allow", "Reject"):
        expect(card.get_by_role("button", name=name)).to_be_disabled()

    # Neither its keys (on the card itself) nor a click on its buttons answer it.
    card.evaluate("(card) => card.focus()")
    for key in ("y", "Enter", "n"):
        page.keyboard.press(key)
    card.evaluate("(card) => card.querySelectorAll('button').forEach((button) => button.click())")
    once.click(force=True)
    expect(page.locator("#confirm-dialog")).to_be_hidden()
    assert waiting(live, session) == 1
    expect(card).to_have_count(1)

    page.click("#toggle-side")  # closed: shown, so answerable
    expect(page.locator("#side")).to_be_hidden()
    expect(once).to_be_enabled()
    expect(once).not_to_have_attribute("title", "This question is under the Sessions list: close it to answer.")
    page.click("#toggle-panels")  # the right drawer covers it the same way
    expect(once).to_have_attribute("title", "This question is under the panels: close it to answer.")
    expect(once).to_be_disabled()
    page.click("#toggle-panels")
    once.click()
    expect(card).to_have_count(0)

    second = page.locator(".ask.permission", has_text="echo second")
    expect(second).to_be_visible()
    page.click("#toggle-side")
    expect(second.get_by_role("button", name="Allow once")).to_be_disabled()
    page.keyboard.press("Alt+q")  # the deliberate way there: the drawer closes, the card has the keys
    expect(page.locator("#side")).to_be_hidden()
    expect(second).to_be_focused()
    expect(second.get_by_role("button", name="Allow once")).to_be_enabled()
    page.keyboard.press("n")
    expect(page.locator(".part.tool.status-denied")).to_contain_text("echo second")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Done.")
    assert waiting(live, session) == 0


def test_question_out_of_view_waits_until_shown(live, page):
    """A question whose buttons are scrolled out of sight cannot be answered (disabled, saying
    why) until it is in view again."""
    page.set_viewport_size(LAPTOP)
    project = live.project("scrolled", {"a.txt": "x\n"})
    session = live.session(project, "Scrolled")
    open_session(page, project, session)
    ask_bash(live, session, "echo far")
    card = page.locator(".ask.permission")
    once = card.get_by_role("button", name="Allow once")
    expect(once).to_be_enabled()
    # The questions' area pushed below the bottom of the window, as a tall page would.
    page.evaluate("document.getElementById('questions').style.transform = 'translateY(2000px)'")
    expect(once).to_be_disabled()
    expect(once).to_have_attribute("title", "This question is not wholly in view: scroll to it to answer.")
    card.evaluate("(card) => card.focus({ preventScroll: true })")
    page.keyboard.press("y")
    assert waiting(live, session) == 1
    page.evaluate("document.getElementById('questions').style.transform = ''")
    expect(once).to_be_enabled()
    once.click()
    expect(page.locator(".msg.assistant .md").last).to_have_text("Done.")


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["laptop", "phone"])
def test_deliberate_answers_still_work(live, page, viewport):
    """A click on a button answers and the keyboard goes back to the prompt; Alt+Q from the
    prompt moves the keyboard to the question, whose keys then answer it (y once, n reject, a
    digit an option); the text typed before stays in the prompt."""
    page.set_viewport_size(viewport)
    project = live.project(f"deliberate-{viewport['width']}", {"a.txt": "x\n"})
    session = live.session(project, "Deliberate")
    open_session(page, project, session)
    prompt = page.locator("#prompt")
    expect(prompt).to_be_focused()
    type_slowly(page, "half a thought")
    live.model.script(reply(tool_calls=[("bash", {"command": "echo clicked"})]),
                      reply(tool_calls=[("bash", {"command": "echo keyed"})]),
                      reply(tool_calls=[("bash", {"command": "echo refused"})]),
                      reply(tool_calls=[("ask", {"question": "Which one?", "options": ["this", "that"]})]),
                      reply("That."))
    live.prompt(session, "Go")

    page.locator(".ask.permission", has_text="echo clicked").get_by_role("button", name="Allow once").click()
    expect(page.locator(".part.tool.status-done")).to_contain_text("echo clicked")
    expect(prompt).to_be_focused()

    keyed = page.locator(".ask.permission", has_text="echo keyed")
    expect(keyed.get_by_role("button", name="Allow once")).to_be_enabled()
    expect(prompt).to_be_focused()  # the next question did not take it
    page.keyboard.press("Alt+q")
    expect(keyed).to_be_focused()
    expect(keyed).not_to_have_class("ask permission unvisited")
    page.keyboard.press("y")
    expect(page.locator(".part.tool.status-done", has_text="echo keyed")).to_have_count(1)
    expect(prompt).to_be_focused()

    refused = page.locator(".ask.permission", has_text="echo refused")
    expect(refused.get_by_role("button", name="Reject")).to_be_enabled()
    page.keyboard.press("Alt+q")
    expect(refused).to_be_focused()
    page.keyboard.press("n")
    expect(page.locator(".part.tool.status-denied")).to_contain_text("echo refused")

    question = page.locator(".ask.question")
    expect(question.get_by_role("button", name="that")).to_be_enabled()
    page.keyboard.press("Alt+q")
    expect(question).to_be_focused()
    page.keyboard.press("2")
    expect(page.locator(".msg.assistant .md").last).to_have_text("That.")
    expect(prompt).to_be_focused()
    expect(prompt).to_have_value("half a thought")
    assert stored_rules(live, project) == []


def test_typing_in_the_terminal_answers_no_question(live, page):
    """A question that arrives while the person types in the Terminal leaves the keyboard to the
    shell: the y, n and Enter typed run there, the question waits; Alt+Q then takes the keyboard
    from the terminal to the question."""
    page.set_viewport_size(LAPTOP)
    project = live.project("terminal-typing", {"a.txt": "x\n"})
    session = live.session(project, "Shell")
    open_session(page, project, session)
    page.click("#terminal-toggle")
    page.get_by_role("button", name="Open terminal").click()
    expect(page.locator("#terminal-status")).to_have_text("running")
    rows = page.locator("#terminal-screen .xterm-rows")
    page.locator("#terminal-screen .xterm").click()
    shell = page.locator("#terminal-screen textarea")
    expect(shell).to_be_focused()
    type_slowly(page, "echo ")

    ask_bash(live, session, "touch asked.txt")
    card = page.locator(".ask.permission")
    expect(card.get_by_role("button", name="Allow once")).to_be_enabled()
    asked = card.get_attribute("data-id")
    type_slowly(page, "yes-$((6*7)) n a y")
    page.keyboard.press("Enter")
    expect(rows).to_contain_text("yes-42 n a y")
    assert waiting_ids(live, session) == [asked]
    expect(shell).to_be_focused()

    page.keyboard.press("Alt+q")
    expect(card).to_be_focused()
    page.keyboard.press("n")
    expect(page.locator(".part.tool.status-denied")).to_contain_text("touch asked.txt")
    expect(shell).to_be_focused()  # back to the shell
    expect(page.locator(".msg.assistant .md").last).to_have_text("Done.")
    assert not os.path.exists(os.path.join(project["path"], "asked.txt"))
    page.click("#terminal-stop")
    expect(page.locator("#terminal-status")).to_have_text(re.compile(r"^exited"))
