"""The whole task with the keyboard alone: sign in, add a provider, open a git project, approve an
edit from its diff, read it in Changes (split), undo and redo it, then a session in a worktree
and its merge. Only Tab, Shift+Tab, Enter, Space, Escape and the arrows move and press (text is
typed); no click, no mouse. Each control is found as a person finds it: by pressing Tab until it
has the focus, and a control the keyboard cannot reach fails the test with the list of the
elements passed on the way."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, GIT_AUTHOR, git, shot
from tests.utils import TOKEN

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

TAB_LIMIT = 200

# The focused element in a few words, for the list of what Tab passed.
DESCRIBE = """(el) => {
  if (!el || el === document.body) return 'body';
  let text = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '');
  if (typeof el.className === 'string' && el.className.trim()) text += '.' + el.className.trim().split(/\\s+/).join('.');
  const label = el.getAttribute('aria-label') || el.getAttribute('data-path') || (el.textContent || '').trim().slice(0, 30);
  return label ? `${text} "${label}"` : text;
}"""


def focused(page, predicate: str) -> tuple[bool, str]:
    """Whether the focused element meets `predicate` (a JavaScript function of the element), and
    the element in words."""
    return page.evaluate(f"""() => {{
        const el = document.activeElement;
        return [Boolean(el && el !== document.body && ({predicate})(el)), ({DESCRIBE})(el)];
    }}""")


def tab_to(page, predicate: str, limit: int = TAB_LIMIT, back: bool = False) -> None:
    """Press Tab (Shift+Tab when `back`) until the focused element meets `predicate`; fails with
    the elements passed when `limit` presses do not reach it."""
    passed = []
    for _ in range(limit + 1):
        found, element = focused(page, predicate)
        if found:
            return
        passed.append(element)
        page.keyboard.press("Shift+Tab" if back else "Tab")
    raise AssertionError(f"no element meets {predicate} after {limit} presses of Tab; passed: {passed}")


def by_id(ident: str) -> str:
    return f"(el) => el.id === {ident!r}"


def button(name: str, within: str = "") -> str:
    """A button whose text (its visible label, without the hint of its key) starts with `name`,
    inside the element that matches the selector `within`."""
    inside = f" && el.closest({within!r})" if within else ""
    return (f"(el) => el.tagName === 'BUTTON' && (el.getAttribute('aria-label') || el.textContent).trim()"
            f".startsWith({name!r}){inside}")


def press(page, predicate: str, key: str = "Enter") -> None:
    tab_to(page, predicate)
    page.keyboard.press(key)


def choose(page, value: str, limit: int = 30) -> None:
    """Move the focused <select> down with the arrow key until `value` is chosen."""
    for _ in range(limit):
        if page.evaluate("document.activeElement.value") == value:
            return
        page.keyboard.press("ArrowDown")
    raise AssertionError(f"{value!r} is not an option below the chosen one")


def type_over(page, text: str) -> None:
    """Replace what the focused field holds with `text`."""
    page.keyboard.press("Control+A")
    page.keyboard.type(text)


def read(*parts):
    with open(os.path.join(*parts)) as handle:
        return handle.read()


def make_repository(root: str) -> None:
    os.makedirs(root)
    with open(os.path.join(root, "a.txt"), "w") as handle:
        handle.write("one\ntwo\nthree\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", GIT_AUTHOR[0])
    git(root, "config", "user.email", GIT_AUTHOR[1])
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")


def test_the_whole_task_with_the_keyboard_alone(live, context):
    """First run to merge without a mouse; where a control is out of the keyboard's reach,
    tab_to fails naming every element it passed."""
    live.api("providers_remove", ident=live.modelref.split("/", 1)[0], method="POST")  # a first run
    root = os.path.join(live.tmp, "projects", "keys")
    make_repository(root)
    page = context.new_page()

    # Sign in: the token field has the focus.
    page.goto("/login")
    expect(page.locator("#token")).to_be_focused()
    page.keyboard.type(TOKEN)
    page.keyboard.press("Enter")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")

    # The first run: add a provider that points at the scripted model.
    expect(page.locator("#first-run")).to_be_visible()
    press(page, by_id("first-run-add"))
    dialog = page.locator("#providers-dialog")
    expect(page.locator("#provider-name")).to_be_focused()
    tab_to(page, by_id("provider-template"), back=True)
    choose(page, "compatible")  # OpenAI-compatible, with the arrows
    tab_to(page, by_id("provider-name"))
    type_over(page, "Scripted")
    tab_to(page, by_id("provider-url"))
    type_over(page, live.model.url)
    tab_to(page, by_id("provider-key"))
    page.keyboard.type("sk-test-ui-0123456789")
    page.keyboard.press("Enter")  # saves the form
    expect(dialog.locator("#provider-list li", has_text="Scripted")).to_contain_text("OpenAI-compatible")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(page.locator("#first-run")).to_be_hidden()

    # A project: the folder dialog, its path typed.
    press(page, by_id("welcome-open"))
    folders = page.locator("#folder-dialog")
    expect(folders).to_be_visible()
    tab_to(page, by_id("folder-path"))
    type_over(page, root)
    page.keyboard.press("Enter")  # Go
    expect(page.locator("#folder-chosen")).to_contain_text(root)
    press(page, by_id("folder-open"))
    expect(folders).to_be_hidden()
    expect(page.locator("#project-title")).to_have_text(root)
    shot(page, "keyboard-project.png")

    # A session, and a prompt whose answer edits a file and asks first.
    press(page, by_id("new-session"))
    expect(page.locator("#session-view")).to_be_visible()
    live.model.script(reply(tool_calls=[("edit", {"path": "a.txt", "old": "two", "new": "TWO"})]), reply("Edited."))
    tab_to(page, by_id("prompt"))
    page.keyboard.type("Change line two")
    page.keyboard.press("Enter")
    card = page.locator(".ask.permission")
    expect(card.locator(".ask-preview .diff-del")).to_have_text(["-two"])  # the diff, before the answer
    expect(card.locator(".ask-preview .diff-add")).to_have_text(["+TWO"])
    press(page, button("Allow once", ".ask.permission"))
    expect(page.locator(".msg.assistant .md").last).to_have_text("Edited.")
    assert read(root, "a.txt") == "one\nTWO\nthree\n"

    # Changes: the file's diff, split, then closed.
    press(page, "(el) => el.matches('#diff-files li[data-path=\"a.txt\"]')")
    view = page.locator("#diff-view")
    expect(view.locator(".diff-add")).to_have_text(["+TWO"])
    press(page, button("Split", "#diff-view"), "Space")
    expect(view.locator(".diff-text.split-new.diff-add")).to_have_text(["TWO"])
    expect(view.locator(".diff-text.split-old.diff-del")).to_have_text(["two"])
    press(page, button("Close the diff", "#diff-view"))
    expect(view).to_be_hidden()
    shot(page, "keyboard-changes.png")

    # Undo from the message that changed the file, then Redo.
    tab_to(page, button("Undo", ".msg.assistant.changed"), back=True)
    page.keyboard.press("Enter")
    expect(page.locator("#redo-bar")).to_be_visible()
    assert read(root, "a.txt") == "one\ntwo\nthree\n"
    press(page, by_id("redo"))
    expect(page.locator("#redo-bar")).to_be_hidden()
    assert read(root, "a.txt") == "one\nTWO\nthree\n"

    # A session in a worktree: its form, a prompt with Auto-accept (Space), and its merge.
    press(page, by_id("new-worktree"))
    form = page.locator("#worktree-form")
    expect(form).to_be_visible()
    tab_to(page, by_id("worktree-name"))
    page.keyboard.type("Add notes")
    page.keyboard.press("Enter")
    expect(form).to_be_hidden()
    expect(page.locator("#session-title")).to_have_text("Add notes")
    expect(page.locator("#session-branch")).to_have_text("⎇ totem/add-notes")
    worktree = live.api("sessions_read", ident=page.locator("#sessions li.active").get_attribute("data-id"))["worktree"]
    live.model.script(reply(tool_calls=[("write", {"path": "notes.txt", "content": "from the worktree\n"})]),
                      reply("Wrote it."))
    press(page, by_id("autoaccept"), "Space")
    expect(page.locator("#autoaccept")).to_be_checked()
    tab_to(page, by_id("prompt"), back=True)
    page.keyboard.type("Write the notes")
    page.keyboard.press("Enter")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Wrote it.")
    assert read(worktree, "notes.txt") == "from the worktree\n"
    block = page.locator("#git .worktree")
    expect(block.locator(".wt-changes li[data-path='notes.txt']")).to_be_visible()

    press(page, button("Merge", "#git .worktree"))
    confirm = page.locator("#confirm-dialog")
    expect(confirm).to_be_visible()
    expect(confirm.locator("#confirm-question")).to_have_text("Commit the 1 changed file and merge totem/add-notes into main?")
    page.keyboard.press("Escape")  # no: nothing merged, the keyboard back on Merge
    expect(confirm).to_be_hidden()
    assert focused(page, button("Merge", "#git .worktree"))[0], focused(page, "(el) => true")[1]
    page.keyboard.press("Enter")
    expect(confirm).to_be_visible()
    tab_to(page, "(el) => el.id === 'confirm-ok' && el.textContent.trim() === 'Merge'")
    page.keyboard.press("Enter")
    expect(confirm).to_be_hidden()
    expect(block.locator(".worktree-merged")).to_contain_text("Merged totem/add-notes into main: 1 file (notes.txt)")
    assert read(root, "notes.txt") == "from the worktree\n"
    assert git(root, "log", "-1", "--format=%s").strip() == "Merge totem/add-notes: Add notes"
    assert git(root, "status", "--porcelain") == " M a.txt\n"  # the first session's edit, never committed
    shot(page, "keyboard-merged.png")
