"""The Changes panel's diff, unified or split: the split view's columns, the choice kept across
reloads, and its fall-back to unified on a phone; against the real server and the scripted model."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, git_project, open_session, shot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

BEFORE = "alpha\nbeta\ngamma\ndelta\nepsilon\n"
AFTER = "alpha\ngamma\nDELTA\nepsilon\nzeta\n"  # beta removed, delta changed, zeta added
NARROW = {"width": 390, "height": 844}

# Each row of the split view: (old number, old text, new number, new text), "" where a side is empty.
SPLIT_ROWS = [
    ("1", "alpha", "1", "alpha"),
    ("2", "beta", "", ""),
    ("3", "gamma", "2", "gamma"),
    ("4", "delta", "3", "DELTA"),
    ("5", "epsilon", "4", "epsilon"),
    ("", "", "5", "zeta"),
]

READ_ROWS = """(view) => [...view.querySelectorAll('tr.split-pair')].map((row) => [
    row.querySelector('.diff-num.split-old').textContent, row.querySelector('.diff-text.split-old').textContent,
    row.querySelector('.diff-num.split-new').textContent, row.querySelector('.diff-text.split-new').textContent])"""


def changed_session(live, page, name):
    """A session whose run rewrote a.txt (BEFORE to AFTER), shown, its Changes listing the file."""
    project = git_project(live, name, {"a.txt": BEFORE})
    session = live.session(project, name.title())
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[("write", {"path": "a.txt", "content": AFTER})]), reply("Rewritten."))
    live.api("sessions_prompt", {"text": "Rewrite a.txt", "model": live.modelref, "autoaccept": True},
             ident=session["id"])
    expect(page.locator(".msg.assistant .md").last).to_have_text("Rewritten.")
    expect(page.locator("#diff-files li[data-path='a.txt']")).to_be_visible()
    return project, session


def test_split_view_shows_old_and_new_lines_in_their_columns(live, page):
    """Split puts the old file's lines and numbers on the left and the new file's on the right, a
    changed line facing its new version, a removed or added line facing an empty side, unchanged
    lines on both; Unified draws it as before. Control: were removed and added lines not paired
    (each on its own row), "delta" and "DELTA" would be on two rows and the rows would differ."""
    changed_session(live, page, "splitting")
    page.locator("#diff-files li[data-path='a.txt']").click()
    view = page.locator("#diff-view")
    toggle = view.get_by_role("group", name="Diff view")
    unified, split = toggle.get_by_role("button", name="Unified"), toggle.get_by_role("button", name="Split")
    expect(unified).to_have_attribute("aria-pressed", "true")  # unified until split is chosen
    expect(split).to_have_attribute("aria-pressed", "false")
    expect(view.locator("pre.diff .diff-del")).to_have_text(["-beta", "-delta"])

    split.click()
    expect(view.locator(".diff-split")).to_be_visible()
    expect(split).to_have_attribute("aria-pressed", "true")
    expect(split).to_be_focused()  # drawn again, the keyboard stays on it
    expect(view.locator("pre.diff")).to_have_count(0)
    assert [tuple(row) for row in view.evaluate(READ_ROWS)] == SPLIT_ROWS
    expect(view.locator(".split-full.diff-hunk")).to_have_text(["@@ -1,5 +1,5 @@"])
    expect(view.locator(".diff-text.split-old.diff-del")).to_have_text(["beta", "delta"])
    expect(view.locator(".diff-text.split-new.diff-add")).to_have_text(["DELTA", "zeta"])
    old, new = (view.locator(f".diff-text.split-{side}").first.bounding_box() for side in ("old", "new"))
    assert old["x"] + old["width"] <= new["x"], (old, new)  # old on the left
    shot(page, "diff-split.png")

    unified.click()
    expect(view.locator(".diff-split")).to_have_count(0)
    expect(view.locator("pre.diff .diff-add")).to_have_text(["+DELTA", "+zeta"])
    expect(unified).to_have_attribute("aria-pressed", "true")


def test_the_chosen_view_outlives_a_reload(live, page):
    """Split chosen once is the view of every diff after a reload, until Unified is chosen.
    Control: without the choice kept in localStorage the reloaded page shows unified."""
    project, session = changed_session(live, page, "remembered")
    page.locator("#diff-files li[data-path='a.txt']").click()
    page.locator("#diff-view").get_by_role("button", name="Split").click()
    expect(page.locator("#diff-view .diff-split")).to_be_visible()

    page.reload()
    expect(page.locator("#session-title")).to_have_text("Remembered")
    page.locator("#diff-files li[data-path='a.txt']").click()
    view = page.locator("#diff-view")
    expect(view.locator(".diff-split")).to_be_visible()
    expect(view.get_by_role("button", name="Split")).to_have_attribute("aria-pressed", "true")
    view.get_by_role("button", name="Unified").click()
    page.reload()
    expect(page.locator("#session-title")).to_have_text("Remembered")
    page.locator("#diff-files li[data-path='a.txt']").click()
    expect(view.locator("pre.diff")).to_be_visible()
    expect(view.locator(".diff-split")).to_have_count(0)


def test_split_falls_back_to_unified_on_a_phone(live, page):
    """At 390 px a chosen split is drawn unified, Split saying why in its title and doing
    nothing; the page never scrolls sideways; back on a wide screen, split returns. Control:
    without the fall-back, the six columns of the table at 390 px would show split here."""
    changed_session(live, page, "narrow")
    page.locator("#diff-files li[data-path='a.txt']").click()
    view = page.locator("#diff-view")
    view.get_by_role("button", name="Split").click()
    expect(view.locator(".diff-split")).to_be_visible()

    page.set_viewport_size(NARROW)  # the screen turns: the open diff is drawn again
    expect(view.locator(".diff-split")).to_have_count(0)
    page.click("#toggle-panels")
    expect(view).to_be_visible()
    expect(view.locator("pre.diff .diff-add")).to_have_text(["+DELTA", "+zeta"])
    split = view.get_by_role("button", name="Split")
    expect(split).to_have_attribute("aria-disabled", "true")
    expect(split).to_have_attribute("title", "Split needs a wider screen: the diff is shown unified here")
    expect(view.get_by_role("group", name="Diff view")).to_have_attribute(
        "title", "Diff view (split needs a wider screen: shown unified)")
    expect(view.get_by_role("button", name="Unified")).to_have_attribute("aria-pressed", "true")
    split.focus()  # aria-disabled keeps it in the keyboard's reach, to read its title
    page.keyboard.press("Enter")
    expect(view.locator(".diff-split")).to_have_count(0)
    width = page.evaluate("() => [document.documentElement.scrollWidth, document.body.scrollWidth]")
    assert max(width) <= NARROW["width"], width
    toggle_box = view.get_by_role("group", name="Diff view").bounding_box()
    assert toggle_box["x"] + toggle_box["width"] <= NARROW["width"], toggle_box  # in reach, not cut
    shot(page, "diff-narrow.png")

    page.set_viewport_size({"width": 1360, "height": 820})
    expect(view.locator(".diff-split")).to_be_visible()  # the choice was kept
