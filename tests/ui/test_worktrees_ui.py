"""Sessions in git worktrees in the browser: created from the Sessions heading (offered only for a
git repository), the branch against the project's and the changes in the Git panel, Merge and
Discard each asked first with what they will do, a refused merge with its reason and files, and
a left-over worktree discarded; against the real server, real git and the scripted model."""

import os
import re

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, git, git_project, shot, watch_csp

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")


def open_project(page, project):
    page.goto(f"/#/{project['id']}")
    expect(page.locator("#project-title")).to_have_text(project["path"])
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")


def read(*parts):
    with open(os.path.join(*parts)) as handle:
        return handle.read()


def write(text, *parts):
    with open(os.path.join(*parts), "w") as handle:
        handle.write(text)


def folder_state(root):
    """The project's folder as git sees it: HEAD, status and its files' text."""
    return (git(root, "rev-parse", "HEAD"), git(root, "status", "--porcelain", "--untracked-files=all"),
            {name: read(root, name) for name in sorted(os.listdir(root)) if name != ".git"})


def create_in_worktree(page, name):
    """Create a session in a worktree through the form; returns its id."""
    page.click("#new-worktree")
    form = page.locator("#worktree-form")
    expect(form).to_be_visible()
    form.locator("#worktree-name").fill(name)
    form.get_by_role("button", name="Create").click()
    expect(form).to_be_hidden()
    expect(page.locator("#session-title")).to_have_text(name)
    return page.locator("#sessions li.active").get_attribute("data-id")


def test_create_in_a_worktree_then_merge_with_its_confirmation(live, page):
    """Offered only for a repository; the session's branch, ahead/behind and changes; Merge says
    what it will do, Cancel does nothing, Merge commits the file and merges it into main."""
    errors = watch_csp(page)
    plain = live.project("plain", {"a.txt": "x\n"})
    open_project(page, plain)
    expect(page.locator("#new-session")).to_be_visible()
    page.wait_for_timeout(300)  # Projects|git has answered: no repository, no worktree offered
    expect(page.locator("#new-worktree")).to_be_hidden()

    project = git_project(live, "merged", {"a.txt": "one\n"})
    root = project["path"]
    page.reload()  # the list of projects, read again
    page.locator(f"#projects li[data-id='{project['id']}']").click()
    expect(page.locator("#project-title")).to_have_text(root)
    expect(page.locator("#new-worktree")).to_be_visible()
    page.click("#new-worktree")
    expect(page.locator("#worktree-branch")).to_contain_text("totem/new-session")
    page.locator("#worktree-name").fill("Add notes!")
    expect(page.locator("#worktree-branch")).to_contain_text("on a new branch totem/add-notes,")
    page.click("#worktree-cancel")
    sessionid = create_in_worktree(page, "Add notes!")
    session = live.api("sessions_read", ident=sessionid)
    worktree = session["worktree"]
    assert worktree and os.path.isdir(worktree) and not worktree.startswith(root)
    assert git(worktree, "branch", "--show-current").strip() == "totem/add-notes"
    expect(page.locator("#sessions li.active .worktree-mark")).to_be_visible()
    expect(page.locator("#session-branch")).to_have_text("⎇ totem/add-notes")

    block = page.locator("#git .worktree")
    expect(block.locator(".wt-branch")).to_have_text("totem/add-notes")
    expect(block.locator(".wt-into")).to_have_text("main")
    expect(block.locator(".wt-ahead")).to_have_text("0 commits ahead")
    expect(block.locator(".wt-behind")).to_have_text("0 behind")
    expect(block.locator(".wt-clean")).to_have_text("No uncommitted change")
    expect(page.locator("#git .branch")).to_contain_text("main")  # the project folder's, below

    live.model.script(reply(tool_calls=[("write", {"path": "notes.txt", "content": "written in the worktree\n"})]),
                      reply("Wrote it."))
    page.check("#autoaccept")
    page.fill("#prompt", "Write the notes")
    page.press("#prompt", "Enter")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Wrote it.")
    assert read(worktree, "notes.txt") == "written in the worktree\n"
    assert not os.path.exists(os.path.join(root, "notes.txt"))
    change = block.locator(".wt-changes li[data-path='notes.txt']")
    expect(change).to_be_visible()  # read again after diff.updated
    expect(change.locator(".git-status")).to_have_text("U")
    expect(page.locator("#diff-files li[data-path='notes.txt']")).to_be_visible()
    expect(page.locator("#tree")).to_contain_text("notes.txt")  # the file tree is the worktree's
    change.click()  # its diff, in the Changes panel
    expect(page.locator("#diff-view .diff-add")).to_have_text(["+written in the worktree"])
    shot(page, "worktree-session.png")

    # Merge asks first, saying what it will do; Cancel leaves everything as it was.
    before = folder_state(root)
    dialog = page.locator("#confirm-dialog")
    block.get_by_role("button", name="Merge").click()
    expect(dialog).to_be_visible()
    expect(dialog.locator("#confirm-question")).to_have_text(
        "Commit the 1 changed file and merge totem/add-notes into main?")
    expect(dialog.locator(".confirm-files li")).to_have_text(["notes.txt"])
    shot(page, "worktree-merge-confirm.png")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    page.wait_for_timeout(200)
    assert folder_state(root) == before
    assert git(worktree, "status", "--porcelain").strip() == "?? notes.txt"

    block.get_by_role("button", name="Merge").click()
    dialog.get_by_role("button", name="Merge").click()
    expect(dialog).to_be_hidden()
    merged = block.locator(".worktree-merged")
    expect(merged).to_contain_text("Merged totem/add-notes into main: 1 file (notes.txt), commit ")
    assert read(root, "notes.txt") == "written in the worktree\n"
    assert git(root, "status", "--porcelain") == ""
    assert git(root, "log", "-1", "--format=%an|%s").strip() == "Tess Ter|Merge totem/add-notes: Add notes!"
    assert git(root, "log", "-1", "--format=%s", "HEAD^2").strip() == "Add notes!"  # the worktree's commit
    assert git(root, "show", "--name-only", "--format=", "HEAD^2").split() == ["notes.txt"]
    assert git(root, "rev-parse", "--short=10", "HEAD").strip() in merged.text_content()
    expect(block.locator(".wt-clean")).to_be_visible()  # committed: nothing uncommitted left
    expect(block.locator(".wt-ahead")).to_have_text("0 commits ahead")  # main has it all now
    merge = block.get_by_role("button", name="Merge")
    expect(merge).to_be_disabled()  # nothing is left to merge, and the button says so
    expect(merge).to_have_attribute("title", "Nothing to merge: the branch has no change that main does not have")
    expect(page.locator("#tree li[data-path='notes.txt']")).to_be_visible()
    shot(page, "worktree-merged.png")
    assert [e for e in errors() if "status of 4" not in e] == []


def test_discard_a_worktree_and_a_left_over_one_with_their_confirmations(live, page):
    """Discard names the branch with its commits and uncommitted changes; Cancel keeps it; Discard
    removes the folder and the branch. A removed session's worktree that held work is listed as
    left over, and its Discard (asked first) removes it."""
    project = git_project(live, "discarded", {"a.txt": "one\n"})
    root = project["path"]
    open_project(page, project)
    sessionid = create_in_worktree(page, "Try things")
    worktree = live.api("sessions_read", ident=sessionid)["worktree"]
    write("tried\n", worktree, "tried.txt")
    git(worktree, "add", "tried.txt")
    git(worktree, "commit", "-q", "-m", "tried")
    write("half done\n", worktree, "half.txt")
    write("changed\n", worktree, "a.txt")
    page.click("#git-refresh")
    block = page.locator("#git .worktree")
    expect(block.locator(".wt-ahead")).to_have_text("1 commit ahead")
    expect(block.locator(".wt-changes li")).to_have_count(2)

    dialog = page.locator("#confirm-dialog")
    block.get_by_role("button", name="Discard").click()
    expect(dialog.locator("#confirm-question")).to_have_text(
        "Discard the worktree and the branch totem/try-things with its 1 commit and 2 uncommitted changes?")
    expect(dialog.locator("#confirm-details")).to_contain_text(worktree)
    shot(page, "worktree-discard-confirm.png")
    page.keyboard.press("Escape")  # Escape is a no as well
    expect(dialog).to_be_hidden()
    page.wait_for_timeout(200)
    assert os.path.isdir(worktree)
    assert "totem/try-things" in git(root, "branch", "--list")

    block.get_by_role("button", name="Discard").click()
    dialog.get_by_role("button", name="Discard").click()
    expect(dialog).to_be_hidden()
    expect(block.locator(".worktree-error")).to_have_text("The worktree folder is gone.")
    expect(block.get_by_role("button", name="Merge")).to_have_count(0)
    assert not os.path.exists(worktree)
    assert git(root, "branch", "--list", "totem/*") == ""
    assert read(root, "a.txt") == "one\n"  # the project's folder is untouched
    expect(page.locator(".toast.info").last).to_have_text("Discarded the worktree and totem/try-things")

    # A removed session whose worktree held work leaves it behind, listed with a Discard.
    kept = live.api("sessions_create", {"projectid": project["id"], "name": "Kept work", "worktree": True})
    write("work\n", kept["worktree"], "work.txt")
    live.api("sessions_remove", {}, ident=kept["id"])
    assert os.path.isdir(kept["worktree"])
    page.click("#git-refresh")
    item = page.locator(f"#git .leftover li[data-path='{kept['worktree']}']")
    expect(item.locator(".wt-branch")).to_have_text("totem/kept-work")
    item.get_by_role("button", name="Discard").click()
    expect(dialog.locator("#confirm-question")).to_have_text(
        "Discard the left-over worktree and the branch totem/kept-work with the work it holds?")
    shot(page, "worktree-leftover.png")
    dialog.get_by_role("button", name="Cancel").click()
    assert os.path.isdir(kept["worktree"])
    item.get_by_role("button", name="Discard").click()
    dialog.get_by_role("button", name="Discard").click()
    expect(page.locator("#git .leftover")).to_have_count(0)
    assert not os.path.exists(kept["worktree"])
    assert live.api("projects_git", ident=project["id"])["leftover"] == []


def test_refused_merge_shows_the_reason_and_files_and_changes_nothing(live, page):
    """The person's uncommitted change to the file in the project folder refuses the merge: the
    panel says why and names the file; the project and the worktree stay as they were. A
    repository without a commit is offered the worktree, and the server's refusal is shown in
    the form."""
    errors = watch_csp(page)
    empty = git_project(live, "no-commit", commit=False)
    open_project(page, empty)
    page.click("#new-worktree")
    page.locator("#worktree-name").fill("Too early")
    page.locator("#worktree-create").click()
    expect(page.locator("#worktree-error")).to_have_text("The repository has no commit yet to start a branch from.")
    expect(page.locator("#worktree-form")).to_be_visible()
    assert live.api("sessions", query=f"projectid={empty['id']}")["sessions"] == []

    project = git_project(live, "refused", {"a.txt": "one\n"})
    root = project["path"]
    session = live.api("sessions_create", {"projectid": project["id"], "name": "Refused", "worktree": True})
    worktree = session["worktree"]
    write("from the agent\n", worktree, "a.txt")
    write("by hand, not committed\n", root, "a.txt")
    before = folder_state(root)
    worktree_head = git(worktree, "rev-parse", "HEAD")
    page.goto(f"/#/{project['id']}/{session['id']}")
    page.reload()  # a new address only in its hash: read it again
    expect(page.locator("#session-title")).to_have_text("Refused")
    block = page.locator("#git .worktree")
    expect(block.locator(".wt-changes li[data-path='a.txt']")).to_be_visible()
    expect(page.locator("#git > .changes li[data-path='a.txt']")).to_be_visible()  # the project's own change

    block.get_by_role("button", name="Merge").click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog.locator("#confirm-question")).to_have_text("Commit the 1 changed file and merge totem/refused into main?")
    dialog.get_by_role("button", name="Merge").click()
    refused = block.locator(".worktree-refused")
    expect(refused).to_be_visible()
    expect(refused.locator(".refused-reason")).to_have_text(re.compile(
        r"^The project's folder has uncommitted changes to files the merge would change; commit or stash them first\.$"))
    expect(refused.locator(".refused-files li")).to_have_text(["a.txt"])
    expect(refused).to_contain_text("Nothing was changed")
    shot(page, "worktree-merge-refused.png")
    assert folder_state(root) == before
    assert git(worktree, "rev-parse", "HEAD") == worktree_head
    assert git(worktree, "status", "--porcelain").strip() == "M a.txt"
    assert read(worktree, "a.txt") == "from the agent\n"
    expect(block.locator(".wt-ahead")).to_have_text("0 commits ahead")
    assert [e for e in errors() if "status of 4" not in e] == []


def test_merge_in_a_repository_without_an_author_offers_to_set_it_first(live, page):
    """Without user.name and user.email the merge's question says so, offers both fields and
    shows the exact git config commands as they are typed; left empty, nothing is merged;
    filled, the repository gets them (its own config) and the merge's commit has that author."""
    errors = watch_csp(page)
    project = git_project(live, "no-author", {"a.txt": "one\n"})
    root = project["path"]
    git(root, "config", "--unset", "user.name")
    git(root, "config", "--unset", "user.email")
    session = live.api("sessions_create", {"projectid": project["id"], "name": "Authorless", "worktree": True})
    write("from the agent\n", session["worktree"], "a.txt")
    head = git(root, "rev-parse", "HEAD")
    page.goto(f"/#/{project['id']}/{session['id']}")
    page.reload()
    block = page.locator("#git .worktree")
    expect(block.locator(".wt-changes li[data-path='a.txt']")).to_be_visible()

    block.get_by_role("button", name="Merge").click()
    dialog = page.locator("#confirm-dialog")
    form = dialog.locator(".author-form")
    expect(form).to_contain_text("This repository has no user.name and no user.email")
    expect(form.locator(".author-commands")).to_have_text("git config user.name ''\ngit config user.email ''")
    dialog.get_by_role("button", name="Merge").click()
    expect(block.locator(".worktree-error")).to_have_text(
        "Not merged: the commit needs an author. Give a name and an email address, then Merge again.")
    assert git(root, "rev-parse", "HEAD") == head

    block.get_by_role("button", name="Merge").click()
    form.get_by_label("Your name (user.name)").fill("Ada O'Lovelace")
    form.get_by_label("Your email (user.email)").fill("ada@example.com")
    expect(form.locator(".author-commands")).to_have_text(
        "git config user.name 'Ada O'\\''Lovelace'\ngit config user.email 'ada@example.com'")
    dialog.get_by_role("button", name="Merge").click()
    expect(block.locator(".worktree-merged")).to_contain_text("Merged totem/authorless into main")
    assert git(root, "config", "--local", "user.name").strip() == "Ada O'Lovelace"
    assert git(root, "log", "-2", "--format=%an <%ae>").split("\n")[:2] == [
        "Ada O'Lovelace <ada@example.com>", "Ada O'Lovelace <ada@example.com>"]
    assert read(root, "a.txt") == "from the agent\n"
    assert errors() == []


def test_no_to_a_question_gives_the_keyboard_back_to_a_button_drawn_again(live, page):
    """Discard keeps the keyboard when the git state is read again and its button drawn anew, and
    answered No goes back to it, also when it was drawn anew while the question was open (the
    browser alone loses it both times)."""
    project = git_project(live, "redrawn", {"a.txt": "one\n"})
    open_project(page, project)
    sessionid = create_in_worktree(page, "Keep it")
    discard = page.locator("#git .worktree button.worktree-discard")
    expect(discard).to_be_enabled()
    discard.evaluate("(button) => { button.dataset.before = 'yes'; button.focus(); }")
    live.api("sessions_update", {"name": "Keep it"}, ident=sessionid)  # its git state is read again
    expect(page.locator("#git .worktree button.worktree-discard[data-before]")).to_have_count(0)
    expect(discard).to_be_focused()  # the new button has the keyboard: Enter reaches it
    discard.evaluate("(button) => { button.dataset.before = 'yes'; }")
    page.keyboard.press("Enter")
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    live.api("sessions_update", {"name": "Keep it, renamed"}, ident=sessionid)
    expect(page.locator("#git .worktree button.worktree-discard[data-before]")).to_have_count(0)
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(discard).to_be_focused()
    assert os.path.isdir(live.api("sessions_read", ident=sessionid)["worktree"])  # nothing discarded
