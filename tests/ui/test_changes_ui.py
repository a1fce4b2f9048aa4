"""File changes in the browser: the diff before approving, the Changes panel, Undo and Redo from a
message, and Save as on a code block; against the real server and the scripted model."""

import os
import re
import subprocess
import time

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, open_session, send, shot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

ADDED_BACKGROUND = "rgb(230, 255, 236)"
REMOVED_BACKGROUND = "rgb(255, 235, 233)"






def read(project, path):
    with open(os.path.join(project["path"], path)) as handle:
        return handle.read()


def write(project, path, text):
    with open(os.path.join(project["path"], path), "w") as handle:
        handle.write(text)


def wait_for_file(project, path, text, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while read(project, path) != text:
        assert time.monotonic() < deadline, (path, read(project, path))
        time.sleep(0.05)


def prompt_autoaccept(live, session, text):
    """A prompt whose file edits need no approval, as the Auto-accept box sends it."""
    live.api("sessions_prompt", {"text": text, "model": live.modelref, "autoaccept": True}, ident=session["id"])


def test_diff_shown_before_approving_an_edit(live, page):
    """The question of an edit shows its diff, coloured, with the raw input behind Details; the
    file stays as it was until Allow."""
    project = live.project("previewed", {"a.txt": "one\ntwo\nthree\n"})
    session = live.session(project, "Preview")
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[("edit", {"path": "a.txt", "old": "two", "new": "TWO <b>2</b>"})]),
                      reply("Edited."))
    send(page, "Change line two")
    card = page.locator(".ask.permission")
    expect(card).to_be_visible()
    diff = card.locator(".ask-preview .file-diff")
    expect(diff).to_have_count(1)
    expect(diff.locator(".diff-path")).to_have_text("a.txt")
    expect(diff.locator(".diff-word")).to_have_text("modified")
    expect(diff.locator(".diff-counts")).to_have_text("+1 −1")
    expect(diff.locator(".diff-hunk")).to_have_text(["@@ -1,3 +1,3 @@"])
    expect(diff.locator(".diff-del")).to_have_text(["-two"])
    expect(diff.locator(".diff-add")).to_have_text(["+TWO <b>2</b>"])  # markup stays text
    expect(diff.locator(".diff-ctx")).to_have_text([" one", " three"])
    expect(diff.locator(".diff-add")).to_have_css("background-color", ADDED_BACKGROUND)  # retried: the diff may be painted again
    expect(diff.locator(".diff-del")).to_have_css("background-color", REMOVED_BACKGROUND)  # retried: the diff may be painted again
    assert card.locator("b").count() == 0
    raw = card.locator(".ask-input")
    expect(raw).to_be_hidden()
    card.locator(".ask-details summary").click()
    expect(raw).to_be_visible()
    expect(raw).to_contain_text('"old": "two"')
    shot(page, "permission-diff.png")
    page.wait_for_timeout(200)
    assert read(project, "a.txt") == "one\ntwo\nthree\n"  # nothing is written before the answer

    card.get_by_role("button", name="Allow once").click()
    expect(page.locator(".msg.assistant .md").last).to_have_text("Edited.")
    assert read(project, "a.txt") == "one\nTWO <b>2</b>\nthree\n"
    expect(page.locator(".part.tool .tool-changed .changed-file")).to_have_text(["a.txt"])


def git(root, *args):
    subprocess.run(["git", "-c", "user.name=Totem Tests", "-c", "user.email=tests@example.invalid", *args],
                   cwd=root, check=True, capture_output=True)


def test_changes_panel_lists_the_files_and_shows_their_patch(live, page):
    """After a run the Changes panel lists each changed file with status and counts, live; a file,
    a changed file of a tool call or of the Git panel shows its patch in colour."""
    project = live.project("panel", {"a.txt": "alpha\nbeta\n", "keep.txt": "kept\n"})
    git(project["path"], "init", "-q", "-b", "main")
    git(project["path"], "add", ".")
    git(project["path"], "commit", "-q", "-m", "first")
    session = live.session(project, "Panel")
    open_session(page, project, session)
    files = page.locator("#diff-files li[data-path]")
    expect(files).to_have_count(0)
    expect(page.locator("#diff-files")).to_contain_text("No file changed")
    live.model.script(reply(tool_calls=[("edit", {"path": "a.txt", "old": "beta", "new": "gamma\ndelta"}),
                                        ("write", {"path": "src/new.py", "content": "print('new')\n"})]),
                      reply("Two files changed."))
    prompt_autoaccept(live, session, "Change two files")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Two files changed.")
    expect(files).to_have_count(2)  # refreshed by diff.updated, without reloading the page
    edited = page.locator("#diff-files li[data-path='a.txt']")
    created = page.locator("#diff-files li[data-path='src/new.py']")
    expect(edited.locator(".diff-status")).to_have_text("M")
    expect(edited.locator(".diff-counts")).to_have_text("+2 −1")
    expect(created.locator(".diff-status")).to_have_text("A")
    expect(created.locator(".diff-counts")).to_have_text("+1 −0")
    expect(page.locator("#diff-count")).to_have_text("2")
    view = page.locator("#diff-view")
    expect(view).to_be_hidden()

    edited.click()
    expect(view).to_be_visible()
    expect(edited).to_have_class("active")
    expect(view.locator(".diff-path")).to_have_text("a.txt")
    expect(view.locator(".diff-del")).to_have_text(["-beta"])
    expect(view.locator(".diff-add")).to_have_text(["+gamma", "+delta"])
    expect(view.locator(".diff-add").first).to_have_css("background-color", ADDED_BACKGROUND)  # retried: the diff may be painted again
    shot(page, "changes-panel.png")
    view.get_by_role("button", name="Close the diff").click()
    expect(view).to_be_hidden()

    # A tool call names the files it changed; each opens its diff.
    page.locator(".tool-changed .changed-file", has_text="src/new.py").click()
    expect(view.locator(".diff-path")).to_have_text("src/new.py")
    expect(view.locator(".diff-add")).to_have_text(["+print('new')"])
    expect(view.locator(".diff-word")).to_have_text("added")
    # So does a changed file of the Git panel, which follows the changes too (as does the tree).
    expect(page.locator("#git .changes li[data-path='a.txt']")).to_be_visible()
    expect(page.locator("#tree li.dir[data-path='src']")).to_be_visible()
    page.locator("#git .changes li[data-path='a.txt']").click()
    expect(view.locator(".diff-path")).to_have_text("a.txt")
    expect(view.locator(".diff-add")).to_have_text(["+gamma", "+delta"])


def rewritten(live, page, folder: str, name: str) -> tuple[dict, dict]:
    """A project whose a.txt a session's answer has rewritten (auto-accepted), shown in `page`."""
    project = live.project(folder, {"a.txt": "original\n"})
    session = live.session(project, name)
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[("write", {"path": "a.txt", "content": "rewritten\n"})]),
                      reply("Rewritten."))
    prompt_autoaccept(live, session, "Rewrite a.txt")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Rewritten.")
    return project, session


def test_the_redo_bar_gone_gives_the_keyboard_to_the_prompt(live, page):
    """The Redo bar hidden while the keyboard is on it (here by a redo from elsewhere, as when the
    session's event comes after Redo's own answer): the keyboard goes on to the prompt box."""
    project, session = rewritten(live, page, "redo-focus", "Redo focus")
    messageid = next(message["id"] for message in live.api("sessions_messages", ident=session["id"])["messages"]
                     if message["role"] == "assistant")
    live.api("sessions_undo", {"messageid": messageid}, ident=session["id"])
    redo = page.locator("#redo-bar").get_by_role("button", name="Redo")
    expect(redo).to_be_visible()
    redo.focus()
    live.api("sessions_redo", {}, ident=session["id"])
    expect(page.locator("#redo-bar")).to_be_hidden()
    expect(page.locator("#prompt")).to_be_focused()
    assert read(project, "a.txt") == "rewritten\n"


def test_undo_and_redo_from_a_message(live, page):
    """Undo on the message that changed a file restores it on disk and dims the message; Redo puts
    the change back; a file changed by hand since is a conflict, left as it is and listed, and
    Restore anyway restores it; Fork opens a new session up to a message."""
    project, session = rewritten(live, page, "undoing", "Undoing")
    assert read(project, "a.txt") == "rewritten\n"
    expect(page.locator("#diff-files li[data-path='a.txt']")).to_be_visible()
    redo_bar = page.locator("#redo-bar")
    expect(redo_bar).to_be_hidden()
    expect(page.locator(".msg.reverted")).to_have_count(0)

    changed = page.locator(".msg.assistant.changed")
    expect(changed).to_have_count(1)
    changed.hover()
    changed.locator(".msg-actions").get_by_role("button", name="Undo").click()
    wait_for_file(project, "a.txt", "original\n")
    reverted = page.locator(".msg.reverted")
    expect(reverted).to_have_count(2)  # the message and the one after it
    expect(reverted.first.locator(".undone-note")).to_have_text("undone")
    expect(reverted.first.locator(".parts")).to_have_css("opacity", "0.45")  # dimmed
    expect(page.locator(".msg.user")).not_to_have_class("reverted")
    expect(page.locator("#diff-files li[data-path]")).to_have_count(0)  # nothing differs any more
    expect(redo_bar).to_be_visible()
    shot(page, "undone.png")

    redo_bar.get_by_role("button", name="Redo").click()
    wait_for_file(project, "a.txt", "rewritten\n")
    expect(page.locator(".msg.reverted")).to_have_count(0)
    expect(redo_bar).to_be_hidden()
    expect(page.locator("#diff-files li[data-path='a.txt']")).to_be_visible()

    # Changed by hand since: Undo leaves it and says so.
    write(project, "a.txt", "by hand\n")
    changed.hover()
    changed.locator(".msg-actions").get_by_role("button", name="Undo").click()
    notice = page.locator("#change-notice")
    expect(notice).to_be_visible()
    expect(notice.locator("li.conflict")).to_contain_text("a.txt")
    expect(notice.get_by_role("button", name="Restore anyway")).to_be_visible()
    assert read(project, "a.txt") == "by hand\n"
    shot(page, "undo-conflict.png")
    notice.get_by_role("button", name="Restore anyway").click()  # Undo again, with force
    wait_for_file(project, "a.txt", "original\n")
    expect(notice).to_be_hidden()
    expect(page.locator(".msg.reverted")).to_have_count(2)

    first = page.locator(".msg.user").first
    first.hover()
    first.get_by_role("button", name="Fork").click()
    expect(page.locator("#session-title")).to_have_text("Undoing (fork)")
    expect(page.locator("#sessions li.active")).to_contain_text("Undoing (fork)")
    # The fork is marked as one, naming its original, which is not marked.
    expect(page.locator("#sessions li.active .fork-mark")).to_have_attribute("title", re.compile("A fork of “Undoing”"))
    expect(page.locator("#sessions li:not(.active) .fork-mark")).to_have_count(0)
    expect(page.locator(".msg.user .parts")).to_have_text(["Rewrite a.txt"])


def test_save_code_block_as_a_file_with_replace_confirmation(live, page):
    """Save as writes a code block to a new file; saving again to that path asks "exists. Replace?"
    and replaces it only when confirmed; a path outside the project is refused with the reason."""
    project = live.project("saving", {"a.txt": "x\n"})
    session = live.session(project, "Saving")
    open_session(page, project, session)
    live.model.script(reply("Here it is:\n\n```python\nprint('hello <world>')\n```\n"))
    send(page, "Write hello")
    block = page.locator(".msg.assistant .codeblock")
    expect(block.locator("code")).to_have_text("print('hello <world>')")
    block.get_by_role("button", name="Save as").click()
    path_input = block.locator("input.saveas-path")
    expect(path_input).to_be_focused()
    path_input.fill("out/hello.py")
    path_input.press("Enter")
    expect(block.locator(".saveas-done")).to_have_text("Saved out/hello.py (23 bytes)")
    assert read(project, "out/hello.py") == "print('hello <world>')\n"

    write(project, "out/hello.py", "changed by hand\n")
    block.get_by_role("button", name="Save as").click()  # a finished save gives way to a new form
    expect(block.locator(".saveas-form")).to_have_count(1)
    block.locator("input.saveas-path").fill("out/hello.py")
    block.get_by_role("button", name="Save", exact=True).click()
    confirm = block.locator(".saveas-confirm")
    expect(confirm).to_contain_text("out/hello.py exists. Replace?")
    shot(page, "save-as-replace.png")
    assert read(project, "out/hello.py") == "changed by hand\n"
    confirm.get_by_role("button", name="Replace").click()
    expect(block.locator(".saveas-done")).to_have_text("Replaced out/hello.py (23 bytes)")
    assert read(project, "out/hello.py") == "print('hello <world>')\n"

    block.get_by_role("button", name="Save as").click()
    block.locator("input.saveas-path").fill("../outside.py")
    block.locator("input.saveas-path").press("Enter")
    expect(block.locator(".saveas-error")).to_contain_text("outside the project")
    assert not os.path.exists(os.path.join(os.path.dirname(project["path"]), "outside.py"))
    block.locator("input.saveas-path").press("Escape")
    expect(block.locator(".saveas-form")).to_have_count(0)
    expect(page.locator("#diff-files li[data-path='out/hello.py']")).to_be_visible()


def test_patch_lines_and_preview_entries(live, page):
    """A removed line that starts with "--" stays a removed line (the hunk's counts say where it
    ends); an {error} entry and a protected file's note are shown as text."""
    page.goto("/login")  # any page of the origin: the module is imported on its own
    shown = page.evaluate("""async () => {
        const { patchLines, renderFileDiff } = await import('/diff.js');
        const kinds = patchLines('--- a/x\\n+++ b/x\\n@@ -1,2 +1,2 @@\\n--- old rule\\n+++ new rule\\n ctx\\n'
                                 + '\\\\ No newline at end of file\\n').map(([kind]) => kind);
        const box = document.createElement('div');
        box.append(renderFileDiff({ error: '<b>old</b> not found' }),
                   renderFileDiff({ path: '.env', status: 'modified', note: 'a protected secret file' }));
        return { kinds, html: box.innerHTML, text: box.textContent };
    }""")
    assert shown["kinds"] == ["meta", "meta", "hunk", "del", "add", "ctx", "meta"]
    assert "<b>" not in shown["html"] and "&lt;b&gt;old&lt;/b&gt; not found" in shown["html"]
    assert 'class="diff-error"' in shown["html"]
    assert "a protected secret file" in shown["text"] and "+0" not in shown["text"]


def test_a_fork_of_a_long_name_is_marked_in_view(live, page):
    """A name long enough to be cut hides its "(fork)": the mark of a fork stays in view."""
    long_name = "Refactor the session list so that every control fits in the narrow sidebar"
    project = live.project("forks", {"a.txt": "x\n"})
    session = live.session(project, long_name)
    live.model.script(reply("Done."))
    live.prompt(session, "Start")
    live.wait_run_end(session)
    fork = live.api("sessions_fork", {}, ident=session["id"])
    open_session(page, project, fork)
    item = page.locator(f"#sessions li[data-id='{fork['id']}']")
    mark = item.locator(".fork-mark")
    expect(mark).to_be_visible()
    box, row = mark.bounding_box(), item.bounding_box()
    assert row["x"] <= box["x"] and box["x"] + box["width"] <= row["x"] + row["width"], (box, row)
    name = item.locator(".name")
    assert name.evaluate("(element) => element.scrollWidth > element.clientWidth"), "the name is not cut"
    expect(page.locator(f"#sessions li[data-id='{session['id']}'] .fork-mark")).to_have_count(0)


def test_an_undone_prompt_comes_back_to_the_box_and_drafts_outlive_a_reload(live, page):
    """Undo on a prompt puts its words back in the prompt box (unless something is being
    written there); what is typed and not sent is still there after a reload."""
    project = live.project("drafts", {"a.txt": "original\n"})
    session = live.session(project, "Drafts")
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[("write", {"path": "a.txt", "content": "rewritten\n"})]),
                      reply("Rewritten."))
    prompt_autoaccept(live, session, "Rewrite a.txt, please")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Rewritten.")
    prompt = page.locator(".msg.user").first
    prompt.hover()
    prompt.locator(".msg-actions").get_by_role("button", name="Undo").click()
    wait_for_file(project, "a.txt", "original\n")
    expect(page.locator("#prompt")).to_have_value("Rewrite a.txt, please")

    page.fill("#prompt", "a second thought, not sent")
    page.reload()
    expect(page.locator("#session-title")).to_have_text("Drafts")
    expect(page.locator("#prompt")).to_have_value("a second thought, not sent")
    page.locator("#redo-bar").get_by_role("button", name="Redo").click()
    wait_for_file(project, "a.txt", "rewritten\n")
    prompt = page.locator(".msg.user").first
    prompt.hover()
    prompt.locator(".msg-actions").get_by_role("button", name="Undo").click()
    wait_for_file(project, "a.txt", "original\n")
    expect(page.locator("#prompt")).to_have_value("a second thought, not sent")  # what is written stays
    live.model.script(reply("Thought about it."))
    page.press("#prompt", "Enter")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Thought about it.")
    expect(page.locator("#prompt")).to_have_value("")
    page.reload()
    expect(page.locator("#session-title")).to_have_text("Drafts")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Thought about it.")
    expect(page.locator("#prompt")).to_have_value("")  # a sent prompt is no draft


@pytest.mark.parametrize("width", [1100, 1280, 1600])
def test_a_diff_widens_the_changes_column_but_never_wraps_the_conversations_head(live, page, width):
    """Opening a diff gives the Changes column room (up to 520 px) while the conversation's head
    (title, status, its buttons) keeps one line, and every button of the session list stays
    inside it."""
    page.set_viewport_size({"width": width, "height": 800})
    project = live.project(f"wide{width}", {"a.txt": "alpha\n"})
    git(project["path"], "init", "-q", "-b", "main")
    git(project["path"], "add", ".")
    git(project["path"], "commit", "-q", "-m", "first")
    session = live.session(project, "Wide")
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[("write", {"path": "src/f.py", "content": "x = '" + "y" * 400 + "'\n"})]),
                      reply("Done."))
    prompt_autoaccept(live, session, "go")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Done.")
    before = page.locator("#panels").bounding_box()["width"]
    page.locator("#diff-files li[data-path]").first.click()
    expect(page.locator("#diff-view")).to_be_visible()
    after = page.locator("#panels").bounding_box()["width"]
    assert after >= before and (after > before or width < 1200), (before, after)
    title, last = page.locator("#session-title").bounding_box(), page.locator("#terminal-toggle").bounding_box()
    assert abs((title["y"] + title["height"] / 2) - (last["y"] + last["height"] / 2)) < 8, (title, last)
    side = page.locator("#side").bounding_box()
    for button in ("#new-session", "#import-session"):
        box = page.locator(button).bounding_box()
        assert side["x"] <= box["x"] and box["x"] + box["width"] <= side["x"] + side["width"], (button, box, side)
