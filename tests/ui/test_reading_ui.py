"""Reading code and answers: highlighted code blocks under the full CSP, images of this server
only, a copy button for a whole message, and dark mode following the system with a remembered
toggle. In Debian's Chromium against the real server and the scripted model."""

import os
import re

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, open_session, send, shot, watch_csp

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

CODE = 'def greet(name: str) -> str:\n    # say hello\n    return f"Hello, {name}!"'
ANSWER = (f"Here it is.\n\n```python\n{CODE}\n```\n\n```\nplain text, no language\n```\n\n"
          "Our icon ![the icon](/favicon.svg), a remote one ![tracker](https://example.com/pixel.png) "
          "and an inline one ![dot](data:image/png;base64,iVBORw0KGgo=).")
DARK_BG = "rgb(13, 17, 23)"
LIGHT_BG = "rgb(255, 255, 255)"


def test_code_highlighted_and_local_images_under_the_csp(live, page):
    """A fenced block in a known language is colored by highlight.js (its text unchanged), one
    without a language stays plain; an image of this server is shown, a remote or data: one is
    not; the page breaks no rule of its Content-Security-Policy."""
    violations = watch_csp(page)
    project = live.project("highlight", {"a.txt": "x\n"})
    session = live.session(project, "Code")
    open_session(page, project, session)
    live.model.script(reply(ANSWER))
    send(page, "Show me code")
    md = page.locator(".msg.assistant .md").last
    expect(md).to_contain_text("an inline one")
    code = md.locator(".codeblock code").first
    expect(code).to_have_class(re.compile(r"\bhljs\b.*\blanguage-python\b"))
    expect(code.locator("span.hljs-keyword").first).to_have_text("def")
    expect(code.locator("span.hljs-comment")).to_have_text("# say hello")
    expect(code.locator("span.hljs-string")).to_have_count(1)
    assert code.text_content() == CODE
    assert code.evaluate("(el) => getComputedStyle(el.querySelector('.hljs-keyword')).color") != \
        code.evaluate("(el) => getComputedStyle(el).color")  # colored, not only wrapped
    plain = md.locator(".codeblock code").nth(1)
    expect(plain).to_have_text("plain text, no language")
    assert plain.locator("span").count() == 0

    image = md.locator("img.md-image")
    expect(image).to_have_count(1)
    expect(image).to_have_attribute("src", f"{live.url}/favicon.svg")
    expect(image).to_have_attribute("alt", "the icon")
    page.wait_for_function("() => document.querySelector('.md img.md-image').complete")
    assert image.evaluate("(img) => img.naturalWidth") > 0  # loaded: img-src allows the page itself
    expect(md.locator("a.image-link")).to_contain_text("tracker")  # another site's: a link, never loaded
    expect(md).to_contain_text("![dot](data:image/png;base64,iVBORw0KGgo=)")
    shot(page, "reading-highlight.png")
    assert violations() == []


def test_copy_button_copies_a_whole_message(live, page):
    """Copy on an answer puts its whole text (the Markdown, every text part) on the clipboard,
    and says so; a prompt has its own Copy."""
    project = live.project("copying", {"a.txt": "x\n"})
    session = live.session(project, "Copy")
    open_session(page, project, session)
    text = "## Steps\n\n1. Read **a.txt**\n2. Change it\n\n```sh\nls -la\n```"
    live.model.script(reply(text))
    send(page, "What now?")
    answer = page.locator(".msg.assistant").last
    expect(answer.locator(".md")).to_contain_text("Change it")
    button = answer.locator(".msg-actions .copy-message")
    expect(button).to_have_text("Copy")
    button.click()
    expect(button).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == text
    mine = page.locator(".msg.user").last
    mine.hover()
    mine.locator(".msg-actions .copy-message").click()
    expect(mine.locator(".copy-message")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "What now?"


def background(page):
    return page.evaluate("getComputedStyle(document.body).backgroundColor")


def test_dark_mode_follows_the_system_and_the_toggle_is_remembered(live, page):
    """With no choice made the theme is the system's (and follows it when it changes); the toggle
    switches and is remembered across a reload; choosing what the system prefers follows it again."""
    page.emulate_media(color_scheme="dark")
    page.goto("/")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")
    html = page.locator("html")
    toggle = page.locator("#theme-toggle")
    expect(html).to_have_attribute("data-theme", "dark")
    expect(toggle).to_have_attribute("aria-pressed", "true")
    assert background(page) == DARK_BG
    page.emulate_media(color_scheme="light")  # the system changes: the page follows
    expect(html).to_have_attribute("data-theme", "light")
    assert background(page) == LIGHT_BG

    toggle.click()  # dark, against the system: remembered
    expect(html).to_have_attribute("data-theme", "dark")
    expect(toggle).to_have_attribute("aria-pressed", "true")
    assert page.evaluate("localStorage.getItem('totem.theme')") == "dark"
    page.reload()
    expect(html).to_have_attribute("data-theme", "dark")
    assert background(page) == DARK_BG
    page.goto("/login")  # the sign-in page too
    expect(html).to_have_attribute("data-theme", "dark")
    page.goto("/")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")

    toggle.click()  # light, as the system prefers: the choice is forgotten, the system followed
    expect(html).to_have_attribute("data-theme", "light")
    assert page.evaluate("localStorage.getItem('totem.theme')") is None
    page.emulate_media(color_scheme="dark")
    expect(html).to_have_attribute("data-theme", "dark")
