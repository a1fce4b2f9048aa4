"""The Terminal panel in the browser: the person's shell of a session, typed into with the page's
keyboard, reattached with its scrollback after a reload, sized with the panel, and drawn by
xterm.js under the page's Content-Security-Policy without a violation."""

import os
import re

import pytest
from playwright.sync_api import expect

from tests.model_server import Stall, reply, text_chunks
from tests.ui.harness import CHROMIUM, open_session, send, shot, watch_csp

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

FOREGROUND = "rgb(230, 237, 243)"  # THEME.foreground of static/terminal.js, set by xterm's theme sheet


def type_line(page, text):
    """Type into the focused xterm with the page's keyboard, then Enter."""
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def test_terminal_types_runs_reattaches_and_resizes(live, page):
    """Open terminal starts the shell; what the keyboard types runs (hi-42 is the shell's answer,
    not the echo of the line); the shell's size is the panel's, and follows it; a reload shows
    the scrollback again and typing goes on; `exit 3` shows its status and Start again a new
    shell; Stop ends it. No CSP violation, no console error."""
    violations = watch_csp(page)
    project = live.project("shell", {"marker.txt": "here\n"})
    session = live.session(project, "Shell")
    open_session(page, project, session)
    panel = page.locator("#terminal-panel")
    expect(panel).to_be_hidden()  # no shell runs: the panel waits for the Terminal button
    page.click("#terminal-toggle")
    expect(panel).to_be_visible()
    expect(page.locator("#terminal-note")).to_be_visible()
    expect(page.locator("#terminal-status")).to_have_text("no shell")
    page.get_by_role("button", name="Open terminal").click()
    expect(page.locator("#terminal-status")).to_have_text("running")
    rows = page.locator("#terminal-screen .xterm-rows")
    expect(rows).to_be_visible()
    page.locator("#terminal-screen .xterm").click()

    type_line(page, "echo hi-$((40+2)); ls")
    expect(rows).to_contain_text("hi-42")
    expect(rows).to_contain_text("marker.txt")  # the shell runs in the session's folder
    # xterm's theme and cell sizes apply (its style sheets are not refused by the CSP).
    assert rows.evaluate("e => getComputedStyle(e).color") == FOREGROUND
    assert rows.locator("span").first.evaluate("e => getComputedStyle(e).display") == "inline-block"

    # UTF-8 goes as its bytes: the shell sees é and € as they are (od shows the bytes, which the
    # echoed command line does not contain).
    type_line(page, "printf %s 'é€' | od -An -tx1 | tr -d ' '")
    expect(rows).to_contain_text("c3a9e282ac")

    # A 24-bit colour: xterm sets it per cell, through the CSSOM here (a style attribute is refused).
    type_line(page, r"printf '\033[38;2;255;0;0mtrue%s\033[0m\n' color")
    coloured = rows.locator("span", has_text="truecolor")
    expect(coloured).to_have_count(1)
    assert coloured.evaluate("e => getComputedStyle(e).color") == "rgb(255, 0, 0)"

    # Paste is xterm's own (sent as typed input); Ctrl+Shift+C copies the selection.
    page.evaluate("navigator.clipboard.writeText('echo pasted-$((3*3))')")
    page.keyboard.press("Control+Shift+V")  # Ctrl+V is the shell's (quoted insert)
    page.keyboard.press("Enter")
    expect(rows).to_contain_text("pasted-9")
    first_row = rows.locator("> div").first
    box = first_row.bounding_box()
    page.mouse.move(box["x"] + 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()
    page.keyboard.press("Control+Shift+C")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert "echo hi-$((40+2)); ls" in copied, copied

    # The shell's size is the panel's, and follows it.
    screen = page.locator("#terminal-screen")
    expect(screen).to_have_attribute("data-columns", re.compile(r"^\d+$"))
    columns, lines = int(screen.get_attribute("data-columns")), int(screen.get_attribute("data-rows"))
    assert columns > 80 and lines >= 8, (columns, lines)
    type_line(page, "echo size-$(stty size | tr ' ' x)")
    expect(rows).to_contain_text(f"size-{lines}x{columns}")
    resizes = []
    page.on("request", lambda request: resizes.append(request.post_data_json)
            if "/api/sessions_terminalresize/" in request.url else None)
    with page.expect_response(lambda response: "/api/sessions_terminalresize/" in response.url) as answer:
        for width in (1300, 1200, 1100):  # the panel moves on: one resize once it stopped
            page.set_viewport_size({"width": width, "height": 820})
            page.wait_for_timeout(30)
    assert answer.value.ok
    narrower = int(screen.get_attribute("data-columns"))
    assert narrower < columns
    # One resize once the panel stopped; a machine that stalls between the steps longer than the
    # pause may send one on the way too, but the last is the panel's final size.
    for _ in range(400):
        if resizes and resizes[-1] == {"columns": narrower, "rows": lines}:
            break
        page.wait_for_timeout(25)
    assert resizes[-1] == {"columns": narrower, "rows": lines} and len(resizes) <= 3, resizes
    type_line(page, "clear; echo size-$(stty size | tr ' ' x)")
    expect(rows).to_contain_text(f"size-{lines}x{narrower}")
    shot(page, "terminal.png")

    page.reload()
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")
    expect(panel).to_be_visible()  # reattached: its shell runs
    expect(page.locator("#terminal-status")).to_have_text("running")
    expect(rows).to_contain_text(f"size-{lines}x{narrower}")  # the scrollback, written again
    page.locator("#terminal-screen .xterm").click()
    type_line(page, "echo again-$((1+1))")
    expect(rows).to_contain_text("again-2")

    type_line(page, "exit 3")
    expect(page.locator("#terminal-status")).to_have_text("exited (status 3)")
    page.get_by_role("button", name="Start again").click()
    expect(page.locator("#terminal-status")).to_have_text("running")
    page.locator("#terminal-screen .xterm").click()
    type_line(page, "echo fresh-$((2+3))")
    expect(rows).to_contain_text("fresh-5")
    expect(rows).not_to_contain_text("again-2")  # a new shell, with a scrollback of its own
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#terminal-status")).to_have_text(re.compile(r"^exited"))
    expect(page.get_by_role("button", name="Start again")).to_be_visible()
    assert live.api("sessions_terminal", {}, ident=session["id"])["status"] == "exited"

    assert violations() == []


def test_terminal_follows_the_session_and_escape_stays_in_it(live, page):
    """Each session has its own shell: switching shows the other one's (or none), a panel hidden
    by the person stays hidden for that session; Escape typed into the terminal goes to the shell
    and does not stop the session's run."""
    violations = watch_csp(page)
    project = live.project("two-shells")
    first = live.session(project, "First")
    second = live.session(project, "Second")
    live.api("sessions_terminal", {"start": True}, ident=first["id"])
    open_session(page, project, first)
    rows = page.locator("#terminal-screen .xterm-rows")
    expect(page.locator("#terminal-panel")).to_be_visible()
    expect(page.locator("#terminal-panel")).to_have_attribute("data-status", "running")  # attached: keys go through
    page.locator("#terminal-screen .xterm").click()
    type_line(page, "echo first-$((6*7))")
    expect(rows).to_contain_text("first-42")

    page.locator("#sessions li", has_text="Second").click()
    expect(page.locator("#session-title")).to_have_text("Second")
    expect(page.locator("#terminal-panel")).to_be_hidden()
    live.api("sessions_terminal", {"start": True}, ident=second["id"])
    live.api("sessions_terminalinput", {"data": "ZWNobyBzZWNvbmQtJCgoNSs1KSkK"}, ident=second["id"])  # echo second-$((5+5))
    page.locator("#sessions li", has_text="First").click()
    expect(rows).to_contain_text("first-42")
    expect(rows).not_to_contain_text("second-10")  # the other shell's output stays in its own
    page.locator("#sessions li", has_text="Second").click()
    expect(page.locator("#terminal-panel")).to_be_visible()
    expect(rows).to_contain_text("second-10")
    expect(rows).not_to_contain_text("first-42")

    # The panel hidden by the person stays hidden for that session; the shell keeps running.
    page.click("#terminal-hide")
    expect(page.locator("#terminal-panel")).to_be_hidden()
    page.locator("#sessions li", has_text="First").click()
    expect(page.locator("#terminal-panel")).to_be_visible()
    page.locator("#sessions li", has_text="Second").click()
    expect(page.locator("#terminal-panel")).to_be_hidden()
    page.click("#terminal-toggle")
    expect(rows).to_contain_text("second-10")

    # A run goes on in this session: Escape in the terminal is the shell's (in the page it stops the run).
    live.model.script(Stall(events=text_chunks("still working")))
    live.prompt(second, "Think for a long time")
    expect(page.locator(".msg.assistant .part.text")).to_contain_text("still working")
    page.locator("#terminal-screen .xterm").click()
    type_line(page, "cat -v")  # shows the bytes it reads: ESC as ^[
    page.keyboard.press("Escape")
    page.keyboard.press("Enter")
    expect(rows).to_contain_text("^[")
    page.keyboard.press("Control+D")
    expect(page.locator("#session-status")).to_have_text("running")
    # Tab stays in the shell; Shift+Escape is the keyboard's way out, to the prompt box.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('#terminal-screen') !== null")
    page.keyboard.press("Shift+Escape")
    expect(page.locator("#prompt")).to_be_focused()
    shown = page.locator("#composer").evaluate(  # and the focus shows where it went: the box's accent border
        "(box) => { const probe = document.createElement('i'); probe.style.color = 'var(--accent)';"
        " document.body.append(probe); const accent = getComputedStyle(probe).color; probe.remove();"
        " return [getComputedStyle(box).borderTopColor, accent]; }")
    assert shown[0] == shown[1], shown
    assert live.api("sessions_read", ident=second["id"])["status"] == "running"
    assert violations() == []


def test_a_page_that_ends_loading_leaves_the_focus_where_the_person_put_it(live, page):
    """The conversation is read after the shell's state: the person may click into the terminal
    and type before it is there. The page then does not move the focus to the composer (the keys
    would go to the prompt instead of the shell)."""
    project = live.project("focus")
    session = live.session(project, "Focus")
    live.model.script(reply("an answer to show"))
    live.prompt(session, "Say something")
    assert live.wait_run_end(session) == "idle"
    live.api("sessions_terminal", {"start": True}, ident=session["id"])
    held = []
    page.route("**/api/sessions_messages/**", lambda route: held.append(route))
    page.goto(f"/#/{project['id']}/{session['id']}")
    expect(page.locator("#terminal-panel")).to_have_attribute("data-status", "running")
    page.wait_for_function("document.querySelector('#terminal-screen .xterm')")
    page.locator("#terminal-screen .xterm").click()
    assert held, "the conversation is still being read"
    for route in held:
        route.continue_()
    page.unroute("**/api/sessions_messages/**")
    expect(page.locator(".msg.assistant .part.text")).to_contain_text("an answer to show")
    page.wait_for_timeout(100)  # the end of the reading, and what it would focus
    type_line(page, "echo kept-$((20+1))")
    expect(page.locator("#terminal-screen .xterm-rows")).to_contain_text("kept-21")
    assert page.locator("#prompt").input_value() == ""


LIBRARIES = """() => ({ xterm: typeof window.Terminal, hljs: typeof window.hljs,
    scripts: [...document.scripts].map((s) => new URL(s.src, location.href).pathname).filter((p) => p.startsWith('/vendor/')) })"""


def test_the_libraries_load_when_first_needed(live, page):
    """A page that shows no terminal and no code loads neither xterm.js nor highlight.js; the
    first Open terminal loads xterm.js (and its fit addon), the first final code block with a
    language loads highlight.js and is colored once it came; a shell's output printed while the
    page loaded xterm.js is on the screen. No CSP violation."""
    violations = watch_csp(page)
    project = live.project("libraries", {"a.txt": "x\n"})
    session = live.session(project, "Libraries")
    open_session(page, project, session)
    live.model.script(reply("no code here, only *words*"))
    send(page, "Say something")
    expect(page.locator(".msg.assistant .md").last).to_contain_text("only words")
    assert page.evaluate(LIBRARIES) == {"xterm": "undefined", "hljs": "undefined", "scripts": []}

    page.click("#terminal-toggle")
    page.get_by_role("button", name="Open terminal").click()
    expect(page.locator("#terminal-status")).to_have_text("running")
    page.locator("#terminal-screen .xterm").click()
    type_line(page, "echo typed-$((6*7))")
    expect(page.locator("#terminal-screen .xterm-rows")).to_contain_text("typed-42")
    loaded = page.evaluate(LIBRARIES)
    assert loaded["xterm"] == "function" and loaded["hljs"] == "undefined", loaded
    assert loaded["scripts"] == ["/vendor/xterm/xterm.js", "/vendor/xterm-addon-fit/addon-fit.js"], loaded

    live.model.script(reply("Here:\n\n```python\ndef f():\n    return 1\n```\n"))
    send(page, "Show code")
    code = page.locator(".msg.assistant .md").last.locator(".codeblock code")
    expect(code).to_have_class(re.compile(r"\bhljs\b.*\blanguage-python\b"))
    expect(code.locator("span.hljs-keyword").first).to_have_text("def")
    assert code.text_content() == "def f():\n    return 1"
    assert page.evaluate(LIBRARIES)["scripts"].count("/vendor/highlight/highlight.min.js") == 1

    # A reload with the shell running: its output comes while xterm.js loads, and is shown.
    page.route("**/vendor/xterm/xterm.js", lambda route: (
        live.api("sessions_terminalinput", {"data": "ZWNobyB3aGlsZS0kKCgxMCsxKSkK"}, ident=session["id"]),
        route.continue_()))
    page.reload()
    expect(page.locator("#terminal-screen .xterm-rows")).to_contain_text("while-11")
    assert violations() == []


def test_a_library_that_does_not_load_is_said(live, page):
    """xterm.js answered 404: the panel says the library did not load and Open terminal is off;
    highlight.js answered 404: the code block stays plain, its text whole."""
    for library in ("**/vendor/xterm/xterm.js", "**/vendor/highlight/highlight.min.js"):
        page.route(library, lambda route: route.fulfill(status=404, body="gone"))
    project = live.project("nolibrary", {"a.txt": "x\n"})
    session = live.session(project, "No library")
    open_session(page, project, session)
    live.model.script(reply("Here:\n\n```python\ndef f():\n    return 1\n```\n\nand that is all"))
    send(page, "Show code")
    md = page.locator(".msg.assistant .md").last
    expect(md).to_contain_text("and that is all")
    page.click("#terminal-toggle")
    page.get_by_role("button", name="Open terminal").click()
    expect(page.locator("#terminal-status")).to_have_text("the terminal library did not load")
    expect(page.get_by_role("button", name="Open terminal")).to_be_disabled()
    code = md.locator(".codeblock code")
    expect(code).to_have_text("def f():\n    return 1")
    assert code.get_attribute("class") is None and code.locator("span").count() == 0
