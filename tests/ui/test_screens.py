"""The screens at any width, visible confirmations, questions at a glance, the Jobs panel,
following a run and usage: in Debian's Chromium against the real server and the scripted model."""

import os
import re

import pytest
from playwright.sync_api import expect

from tests.model_server import Stall, reply, text_chunks
from tests.ui.harness import CHROMIUM, open_session, send, shot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 800}
LONG_COMMAND = "\n".join(f"echo line {n} && true" for n in range(40))






def in_viewport(page, locator):
    """The element is laid out wholly inside the viewport (not cut, not scrolled away)."""
    box = locator.bounding_box()
    size = page.viewport_size
    assert box is not None, "not laid out"
    assert box["x"] >= 0 and box["y"] >= 0, box
    assert box["x"] + box["width"] <= size["width"] + 0.5, (box, size)
    assert box["y"] + box["height"] <= size["height"] + 0.5, (box, size)


def ask_bash(live, page, project, session, command=LONG_COMMAND, description="Print many lines"):
    live.model.script(reply(tool_calls=[("bash", {"command": command, "description": description})]),
                      reply("Done."))
    live.prompt(session, "Run it")
    card = page.locator(".ask.permission")
    expect(card).to_be_visible()
    return card


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["phone", "laptop"])
def test_question_buttons_in_view_and_panels_reachable(live, page, viewport):
    """A long permission question keeps its buttons inside the viewport and clickable; the left and
    right columns are reachable (drawers with a toggle on a phone, columns on a laptop)."""
    page.set_viewport_size(viewport)
    project = live.project(f"widths-{viewport['width']}", {"a.txt": "x\n"})
    session = live.session(project, "Widths")
    open_session(page, project, session)
    card = ask_bash(live, page, project, session)
    for name in ("Allow once", "Always allow", "Reject"):
        in_viewport(page, card.get_by_role("button", name=re.compile(name)))
    card_box = card.bounding_box()
    if viewport is PHONE:
        assert card_box["width"] >= viewport["width"] - 30, card_box  # the card takes the width
        conversation = page.locator("#conversation").bounding_box()
        assert conversation["width"] >= viewport["width"] - 2, conversation
        expect(page.locator("#side")).to_be_hidden()
        expect(page.locator("#panels")).to_be_hidden()
    shot(page, f"screens-question-{viewport['width']}.png")
    card.get_by_role("button", name=re.compile("Allow once")).click()
    expect(page.locator(".ask.permission")).to_have_count(0)
    expect(page.locator(".msg.assistant .md").last).to_have_text("Done.")

    if viewport is PHONE:
        page.click("#toggle-side")
        expect(page.locator("#side")).to_be_visible()
        in_viewport(page, page.locator(f"#sessions li[data-id='{session['id']}']"))
        page.click("#toggle-panels")  # one drawer at a time
        expect(page.locator("#side")).to_be_hidden()
        expect(page.locator("#panels")).to_be_visible()
        expect(page.locator("#toggle-panels")).to_have_attribute("aria-expanded", "true")
        in_viewport(page, page.locator("#jobs-section .section-head"))
        shot(page, "screens-panels-phone.png")
        page.keyboard.press("Escape")
        expect(page.locator("#panels")).to_be_hidden()
        page.click("#toggle-side")
        page.locator(f"#sessions li[data-id='{session['id']}'] .name").click()  # choosing closes it
        expect(page.locator("#side")).to_be_hidden()
        page.click("#toggle-side")
        page.click("#new-session")  # so does making a new session: it opens in view
        expect(page.locator("#session-title")).to_have_text("New session")
        expect(page.locator("#side")).to_be_hidden()
        expect(page.locator("#toggle-side")).to_have_attribute("aria-expanded", "false")
    else:
        expect(page.locator("#side")).to_be_visible()
        expect(page.locator("#panels")).to_be_visible()
        expect(page.locator("#toggle-side")).to_be_hidden()
        expect(page.locator("#toggle-panels")).to_be_hidden()
        page.set_viewport_size({"width": 900, "height": 800})  # under 1000px: a drawer, still reachable
        expect(page.locator("#panels")).to_be_hidden()
        expect(page.locator("#side")).to_be_visible()
        page.click("#toggle-panels")
        expect(page.locator("#panels")).to_be_visible()
        in_viewport(page, page.locator("#git-refresh"))
        page.click("#toggle-panels")
        expect(page.locator("#panels")).to_be_hidden()


def test_remove_session_and_forget_project_ask_in_a_dialog(live, page):
    """Removing a session asks in a visible dialog that names its running job and changed files;
    Cancel keeps it, Remove removes it. Forgetting a project asks the same way."""
    project = live.project("confirming", {"a.txt": "x\n"})
    keep = live.session(project, "Keep me")
    busy = live.session(project, "Busy one")
    live.api("permissions_save", {"projectid": project["id"], "tool": "bash", "pattern": "sleep *", "action": "allow"})
    live.api("permissions_save", {"projectid": project["id"], "tool": "write", "pattern": "*", "action": "allow"})
    live.model.script(reply(tool_calls=[("bash", {"command": "sleep 60", "background": True})]),
                      reply(tool_calls=[("write", {"path": "made.txt", "content": "new\n"})]),
                      reply("Started."))
    live.prompt(busy, "Start it")
    assert live.wait_run_end(busy) == "idle"
    open_session(page, project, busy)
    row = page.locator(f"#sessions li[data-id='{busy['id']}']")
    dialog = page.locator("#confirm-dialog")

    row.get_by_role("button", name="Remove this session").click()
    expect(dialog).to_be_visible()
    in_viewport(page, page.locator("#confirm-ok"))
    expect(page.locator("#confirm-question")).to_contain_text("1 background job still running")
    expect(page.locator("#confirm-question")).to_contain_text("changed 1 file")
    expect(page.locator("#confirm-details")).to_contain_text("made.txt")
    shot(page, "screens-confirm-remove.png")
    page.locator("#confirm-cancel").click()
    expect(dialog).to_be_hidden()
    expect(row).to_have_count(1)
    assert live.api("sessions_read", ident=busy["id"])["id"] == busy["id"]

    row.get_by_role("button", name="Remove this session").click()
    expect(dialog).to_be_visible()
    page.locator("#confirm-ok").click()
    expect(dialog).to_be_hidden()
    expect(row).to_have_count(0)
    expect(page.locator(f"#sessions li[data-id='{keep['id']}']")).to_have_count(1)
    assert busy["id"] not in [s["id"] for s in live.api("sessions", query=f"projectid={project['id']}")["sessions"]]

    projects = page.locator(f"#projects li[data-id='{project['id']}']")
    projects.get_by_role("button", name="Forget this project").click()
    expect(dialog).to_be_visible()
    expect(page.locator("#confirm-question")).to_contain_text("confirming")
    page.keyboard.press("Escape")  # Escape answers no
    expect(dialog).to_be_hidden()
    expect(projects).to_have_count(1)
    projects.get_by_role("button", name="Forget this project").click()
    page.locator("#confirm-ok").click()
    expect(projects).to_have_count(0)


def test_questions_answered_from_the_keyboard_and_signalled_elsewhere(live, page):
    """A bash question shows command, folder and description; Alt+Q moves the keyboard to it
    (it never takes the focus itself), then Enter allows once, Escape rejects (without stopping
    the run), a digit picks an option of the ask tool. A question waiting in another session
    shows a badge in the list and a count in the title."""
    project = live.project("keyboard", {"a.txt": "x\n"})
    other = live.session(project, "Other")
    session = live.session(project, "Keys")
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[("bash", {"command": "echo first", "description": "Say first"})]),
                      reply(tool_calls=[("bash", {"command": "echo second"})]),
                      reply(tool_calls=[("ask", {"question": "Tabs or spaces?", "options": ["tabs", "spaces"]})]),
                      reply("Spaces it is."))
    send(page, "Go")
    card = page.locator(".ask.permission")
    expect(card.locator(".ask-input")).to_contain_text("$ echo first")
    expect(card.locator(".ask-description")).to_have_text("Say first")
    expect(card.locator(".ask-folder")).to_contain_text(os.path.realpath(project["path"]))
    expect(card.get_by_role("button", name="Allow once")).to_contain_text("Enter/Y")
    expect(card.get_by_role("button", name="Always allow").locator("kbd")).to_have_count(0)  # no key
    expect(card.get_by_role("button", name="Reject")).to_contain_text("N/Esc")
    expect(page.locator("#prompt")).to_be_focused()
    expect(card.get_by_role("button", name="Allow once")).to_be_enabled()
    page.keyboard.press("Alt+q")
    expect(card).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".part.tool.status-done")).to_contain_text("echo first")

    second = page.locator(".ask.permission", has_text="echo second")
    expect(second.get_by_role("button", name="Reject")).to_be_enabled()
    expect(page.locator("#prompt")).to_be_focused()  # back where it was, not on the next question
    page.keyboard.press("Alt+q")
    expect(second).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator(".part.tool.status-denied")).to_contain_text("echo second")

    question = page.locator(".ask.question")
    expect(question).to_contain_text("Tabs or spaces?")
    expect(question.get_by_role("button", name="spaces")).to_contain_text("2")
    expect(question.get_by_role("button", name="spaces")).to_be_enabled()
    page.keyboard.press("Alt+q")
    expect(question).to_be_focused()
    page.keyboard.press("2")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Spaces it is.")
    assert live.wait_run_end(session) == "idle"  # Escape rejected; it did not abort the run

    # A question in the other session: a badge on its row, a count in the title, none on screen.
    expect(page).to_have_title(re.compile(r"^Keys · Totem$"))
    live.model.script(reply(tool_calls=[("ask", {"question": "Which one?", "options": ["this", "that"]})]),
                      reply("That."))
    live.prompt(other, "Ask me")
    row = page.locator(f"#sessions li[data-id='{other['id']}']")
    expect(row.locator(".waiting")).to_have_text("? 1")
    expect(page).to_have_title(re.compile(r"^\(1\) Keys · Totem$"))
    expect(page.locator(".ask")).to_have_count(0)
    row.click()
    card = page.locator(".ask.question")
    expect(page.locator("#prompt")).to_be_focused()  # opening the session focuses the prompt, not the question
    expect(card.get_by_role("button", name="that")).to_be_enabled()
    page.keyboard.press("Alt+q")
    expect(card).to_be_focused()
    page.keyboard.press("2")
    expect(page.locator(".msg.assistant .md").last).to_have_text("That.")
    expect(row.locator(".waiting")).to_have_count(0)
    expect(page).to_have_title(re.compile(r"^Other · Totem$"))


def test_jobs_panel_lists_and_stops_a_background_job(live, page):
    """A job the model starts is listed running with its command and output; Stop in Plan mode
    shows the server's reason, and in Build mode stops it."""
    project = live.project("jobs", {"a.txt": "x\n"})
    session = live.session(project, "Jobs")
    for pattern in ("echo *", "sleep *"):
        live.api("permissions_save", {"projectid": project["id"], "tool": "bash", "pattern": pattern, "action": "allow"})
    open_session(page, project, session)
    expect(page.locator("#jobs")).to_contain_text("No background jobs")
    live.model.script(reply(tool_calls=[("bash", {"command": "echo serving && sleep 60", "background": True})]),
                      reply("It runs."))
    send(page, "Serve it")
    job = page.locator("#jobs li.job")
    expect(job).to_have_attribute("data-status", "running")
    expect(job.locator(".job-command")).to_have_text("echo serving && sleep 60")
    expect(job.locator(".job-output")).to_contain_text("serving")
    expect(page.locator("#jobs-count")).to_have_text("1")
    assert live.wait_run_end(session) == "idle"

    # The mode is the one of the session's latest prompt.
    live.model.script(reply("Planning."))
    live.api("sessions_prompt", {"text": "Plan only", "model": live.modelref, "mode": "plan"}, ident=session["id"])
    assert live.wait_run_end(session) == "idle"
    job.get_by_role("button", name="Stop").click()
    expect(page.locator("#jobs-error")).to_contain_text("Plan mode")
    expect(job).to_have_attribute("data-status", "running")
    live.model.script(reply("Building."))
    live.api("sessions_prompt", {"text": "Build again", "model": live.modelref, "mode": "build"}, ident=session["id"])
    assert live.wait_run_end(session) == "idle"
    shot(page, "screens-jobs.png")
    job.get_by_role("button", name="Stop").click()
    expect(job).to_have_attribute("data-status", "stopped")
    expect(job.get_by_role("button", name="Stop")).to_have_count(0)
    expect(page.locator("#jobs-error")).to_be_hidden()
    expect(page.locator("#jobs-count")).to_have_text("")
    assert [j["status"] for j in live.api("sessions_jobs", ident=session["id"])] == ["stopped"]


AT_BOTTOM = "(el) => el.scrollTop + el.clientHeight >= el.scrollHeight - 48"


def test_sending_follows_the_run_and_jump_to_latest(live, page):
    """Sending while scrolled up brings your message into view; scrolled away from the bottom while
    an answer streams, "Jump to latest" appears and takes you back."""
    project = live.project("follow", {"a.txt": "x\n"})
    session = live.session(project, "Follow")
    long_text = "\n\n".join(f"Paragraph {n} of a long answer." for n in range(60))
    for n in range(3):
        live.model.script(reply(long_text))
        live.prompt(session, f"Earlier question {n}")
        assert live.wait_run_end(session) == "idle"
    open_session(page, project, session)
    conversation = page.locator("#conversation")
    expect(page.locator(".msg.user")).to_have_count(3)
    conversation.evaluate("(el) => { el.scrollTop = 0; }")
    page.wait_for_timeout(100)
    assert not conversation.evaluate(AT_BOTTOM)
    expect(page.locator("#jump-latest")).to_be_hidden()  # nothing runs

    live.model.script(Stall(events=text_chunks("Streaming now. " * 40)))
    send(page, "Follow me")
    mine = page.locator(".msg.user", has_text="Follow me")
    expect(mine).to_be_visible()
    expect(page.locator(".msg.assistant .part.text").last).to_contain_text("Streaming now.")
    page.wait_for_function(f"() => ({AT_BOTTOM})(document.getElementById('conversation'))")
    in_viewport(page, mine.locator(".who"))

    conversation.evaluate("(el) => { el.scrollTop = 0; }")
    jump = page.locator("#jump-latest")
    expect(jump).to_be_visible()
    in_viewport(page, jump)
    shot(page, "screens-jump-latest.png")
    jump.click()
    expect(jump).to_be_hidden()
    assert conversation.evaluate(AT_BOTTOM)
    page.keyboard.press("Escape")
    expect(page.locator("#session-status")).to_have_text("aborted")
    expect(jump).to_be_hidden()
    live.wait_run_end(session)


HEADER_CONTROLS = ("#open-schedules", "#open-rules", "#open-settings", "#open-providers", "#theme-toggle", "#sign-out")


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["phone", "laptop"])
def test_every_header_control_is_in_reach(live, page, viewport):
    """Each control of the header is on the screen, in the bar or (on a phone) in its menu, and
    the header never scrolls sideways; the menu closes once a control is chosen or with Escape."""
    page.set_viewport_size(viewport)
    project = live.project("header", {"a.txt": "x\n"})
    open_session(page, project, live.session(project, "Header"))
    header = page.locator("header.top")
    assert header.evaluate("(element) => element.scrollWidth <= element.clientWidth"), "the header scrolls sideways"
    toggle = page.locator("#toggle-menu")
    if viewport is PHONE:
        for selector in HEADER_CONTROLS:
            expect(page.locator(selector)).to_be_hidden()
        toggle.click()
        expect(toggle).to_have_attribute("aria-expanded", "true")
    else:
        expect(toggle).to_be_hidden()
    for selector in HEADER_CONTROLS:
        control = page.locator(selector)
        expect(control).to_be_visible()
        in_viewport(page, control)
    if viewport is PHONE:
        page.keyboard.press("Escape")
        expect(page.locator("#open-settings")).to_be_hidden()
        expect(toggle).to_be_focused()
        toggle.click()
    page.click("#open-settings")
    expect(page.locator("#settings-dialog")).to_be_visible()
    if viewport is PHONE:
        expect(toggle).to_have_attribute("aria-expanded", "false")  # chosen: the menu closed


def test_the_keyboard_focus_is_plain_to_see(live, page):
    """Moving with Tab, every control that takes the focus shows a full ring around it."""
    project = live.project("focus", {"a.txt": "x\n"})
    open_session(page, project, live.session(project, "Focus"))
    seen = set()
    for _ in range(25):
        page.keyboard.press("Tab")
        focused = page.evaluate("""() => { const e = document.activeElement; const style = getComputedStyle(e);
          return { tag: e.tagName, id: e.id, outline: style.outlineStyle, width: parseFloat(style.outlineWidth),
                   composer: !!e.closest('#composer') }; }""")
        if focused["tag"] in ("BODY", "HTML") or focused["composer"]:
            continue  # the prompt box shows its focus with its whole border
        seen.add(focused["tag"])
        assert focused["outline"] == "solid" and focused["width"] >= 2, focused
    assert "BUTTON" in seen, seen


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["phone", "laptop"])
def test_a_toast_leaves_send_in_reach(live, page, viewport):
    """A message in the corner never lies over the prompt box's Send."""
    page.set_viewport_size(viewport)
    project = live.project("toasts", {"a.txt": "x\n"})
    open_session(page, project, live.session(project, "Toasts"))
    page.evaluate("async () => { const { toast } = await import('/dom.js');"
                  " toast('A long message of the kind an error says, long enough to take two lines or more here'); }")
    shown = page.locator("#toasts .toast")
    expect(shown).to_be_visible()
    send_button = page.get_by_role("button", name="Send", exact=True)
    a, b = shown.bounding_box(), send_button.bounding_box()
    apart = a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"] \
        or a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
    assert apart, (a, b)
    in_viewport(page, shown)
