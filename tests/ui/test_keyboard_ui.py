"""The whole task with the keyboard alone: sign in, add a provider, open a git project, approve an
edit from its diff, read it in Changes (split), undo and redo it, then a session in a worktree
and its merge. Only Tab, Shift+Tab, Enter, Space, Escape and the arrows move and press (text is
typed); no click, no mouse. Each control is found as a person finds it: by pressing Tab until it
has the focus, and a control the keyboard cannot reach fails the test with the list of the
elements passed on the way.

What the keyboard needed: the Changes list and its diff are drawn again at every read of the
files, which dropped the focus to the page's start; the row chosen (and the button pressed in
the diff) keep it now, and closing the diff gives it back to the file's row (without that,
the checks of the focus after Enter on a row and after Close fail)."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, GIT_AUTHOR, git, shot
from tests.utils import TOKEN

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

TAB_LIMIT = 200
WIDE = {"width": 1360, "height": 820}
NARROW = {"width": 390, "height": 844}  # the drawers and the header's menu

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


def open_drawer(page, name: str, narrow: bool) -> None:
    """On a narrow screen, open the drawer (side: the sessions; panels: Changes, Git...) with its
    toggle in the header; on a wide one its column is always shown."""
    if not narrow:
        return
    toggle = f"toggle-{name}"
    if page.locator(f"#{toggle}").get_attribute("aria-expanded") == "true":
        return
    press(page, by_id(toggle))
    expect(page.locator(f"#{toggle}")).to_have_attribute("aria-expanded", "true")


def close_drawer(page, name: str, narrow: bool) -> None:
    """Escape closes an open drawer (and gives the keyboard back to its toggle)."""
    if not narrow:
        return
    page.keyboard.press("Escape")
    expect(page.locator(f"#toggle-{name}")).to_have_attribute("aria-expanded", "false")
    expect(page.locator(f"#toggle-{name}")).to_be_focused()


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


@pytest.mark.parametrize("viewport", [WIDE, NARROW], ids=["wide", "narrow"])
def test_the_whole_task_with_the_keyboard_alone(live, context, viewport):
    """First run to merge without a mouse, on a wide screen and at 390 px (where the sessions,
    the panels and the header's buttons are in drawers opened from the header); where a control
    is out of the keyboard's reach, tab_to fails naming every element it passed."""
    narrow = viewport is NARROW
    for provider in live.api("providers"):  # a first run: no provider, no project
        live.api("providers_remove", ident=provider["id"], method="POST")
    for project in live.api("projects"):
        live.api("projects_remove", ident=project["id"], method="POST")
    root = os.path.join(live.tmp, "projects", f"keys{viewport['width']}")
    make_repository(root)
    page = context.new_page()
    page.set_viewport_size(viewport)

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
    # Its button gone with it, the keyboard is on the page's next step, not at its start.
    expect(page.locator("#welcome-open")).to_be_focused()

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
    shot(page, f"keyboard-project-{viewport['width']}.png")

    # A session, and a prompt whose answer edits a file and asks first.
    open_drawer(page, "side", narrow)
    press(page, by_id("new-session"))  # which closes the drawer
    expect(page.locator("#toggle-side")).to_have_attribute("aria-expanded", "false")
    expect(page.locator("#session-view")).to_be_visible()
    expect(page.locator("#prompt")).to_be_focused()
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

    # Changes: the file's diff, split (unified on a phone, which Split says), then closed.
    open_drawer(page, "panels", narrow)
    press(page, "(el) => el.matches('#diff-files li[data-path=\"a.txt\"]')")
    view = page.locator("#diff-view")
    expect(view.locator(".diff-add")).to_have_text(["+TWO"])
    row = page.locator("#diff-files li[data-path='a.txt']")
    expect(row).to_be_focused()  # the list drawn again, the keyboard still on the file
    press(page, button("Split", "#diff-view"), "Space")
    if narrow:
        expect(view.get_by_role("button", name="Split")).to_have_attribute("aria-disabled", "true")
        expect(view.locator("pre.diff .diff-add")).to_have_text(["+TWO"])
    else:
        expect(view.locator(".diff-text.split-new.diff-add")).to_have_text(["TWO"])
        expect(view.locator(".diff-text.split-old.diff-del")).to_have_text(["two"])
    shot(page, f"keyboard-changes-{viewport['width']}.png")
    press(page, button("Close the diff", "#diff-view"))
    expect(view).to_be_hidden()
    expect(row).to_be_focused()  # back on the file whose diff it was
    close_drawer(page, "panels", narrow)

    # Undo from the message that changed the file, then Redo.
    tab_to(page, button("Undo", ".msg.assistant.changed"), back=True)
    page.keyboard.press("Enter")
    expect(page.locator("#redo-bar")).to_be_visible()
    assert read(root, "a.txt") == "one\ntwo\nthree\n"
    press(page, by_id("redo"))
    expect(page.locator("#redo-bar")).to_be_hidden()
    expect(page.locator("#prompt")).to_be_focused()  # not the page's start: the bar is gone
    assert read(root, "a.txt") == "one\nTWO\nthree\n"

    # A session in a worktree: its form, a prompt with Auto-accept (Space), and its merge.
    open_drawer(page, "side", narrow)
    press(page, by_id("new-worktree"))
    form = page.locator("#worktree-form")
    expect(form).to_be_visible()
    tab_to(page, by_id("worktree-name"))
    page.keyboard.type("Add notes")
    page.keyboard.press("Enter")
    expect(form).to_be_hidden()
    expect(page.locator("#session-title")).to_have_text("Add notes")
    expect(page.locator("#toggle-side")).to_have_attribute("aria-expanded", "false")  # done with the list
    expect(page.locator("#prompt")).to_be_focused()
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
    open_drawer(page, "panels", narrow)
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
    expect(block.locator(".worktree-merged")).to_be_focused()  # Merge is disabled now: the keyboard is on the outcome
    assert read(root, "notes.txt") == "from the worktree\n"
    assert git(root, "log", "-1", "--format=%s").strip() == "Merge totem/add-notes: Add notes"
    assert git(root, "status", "--porcelain") == " M a.txt\n"  # the first session's edit, never committed
    shot(page, f"keyboard-merged-{viewport['width']}.png")


def test_tab_to_fails_naming_what_it_passed(live, context):
    """The control of tab_to: a control the keyboard cannot reach (here Sign in taken out of the
    Tab order, as a row without tabindex would be) fails, listing the elements it passed."""
    page = context.new_page()
    page.goto("/login")
    expect(page.locator("#token")).to_be_focused()
    page.evaluate("document.querySelector('#login button').tabIndex = -1")
    with pytest.raises(AssertionError) as failure:
        tab_to(page, button("Sign in"), limit=6)
    assert 'input#token' in str(failure.value) and "after 6 presses of Tab" in str(failure.value)
