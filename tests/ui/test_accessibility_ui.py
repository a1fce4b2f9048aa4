"""Every screen passes axe-core with no serious or critical finding, at a laptop's and a phone's
width, in the light and the dark theme: in Debian's Chromium against the real server and the
scripted model.

axe-core is a test asset (tests/assets/axe-core/, pinned in scripts/test_assets.py); Totem never
serves it. It is run in the page through Playwright's evaluate (the DevTools protocol, which Totem's
Content-Security-Policy of script-src 'self' does not govern), so the page keeps the policy it has
for a person: no bypass_csp. One page per width visits the screens in turn, loaded again for
each. On each screen axe runs in the light theme, then in the dark one: the system's preference
changes while the screen stays open and the page follows it, so one load serves both. Each test
names its screen and width; a failure names the theme and lists each rule with the nodes it found.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from playwright.sync_api import expect

from tests.model_server import MODEL_ID, reply
from tests.ui.harness import CHROMIUM, ROOT, git_project, open_session
from tests.utils import TOKEN

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason=f"the browser tests need Debian's Chromium at {CHROMIUM}"),
    # One worker runs the whole module: its pages and its scene are made once.
    pytest.mark.xdist_group("accessibility"),
]

AXE = os.path.join(ROOT, "tests", "assets", "axe-core", "axe.min.js")
SIZES = {"1280": {"width": 1280, "height": 800}, "390": {"width": 390, "height": 844}}
THEMES = ("light", "dark")
BLOCKING = ("serious", "critical")
FILES = {"app.py": "import sys\n\n\ndef greet(name):\n    return f'Hello, {name}!'\n",
         "README.md": "# Greeter\n"}
ANSWER = ("`greet` builds the greeting.\n\n"
          "```python\ndef greet(name: str) -> str:\n    return f\"Hello, {name}!\"\n```\n\n"
          "- It takes **one** name\n- and returns [a string](https://docs.python.org/3/library/stdtypes.html).")


class Scene:
    """One project, shared by every screen: an answered session that changed a file and left a job
    running, then waits on a bash question; a second waits on an edit's approval (its diff)."""

    def __init__(self, live):
        self.live = live
        self.project = git_project(live, "greeter", FILES)
        live.api("permissions_save", {"projectid": self.project["id"], "tool": "bash", "pattern": "sleep *",
                                      "action": "allow"})
        self.session = live.session(self.project, "Explain app.py")
        live.model.script(
            reply(tool_calls=[("read", {"path": "app.py"})]),
            reply(tool_calls=[("edit", {"path": "app.py", "old": "Hello", "new": "Hi"})]),
            reply(tool_calls=[("bash", {"command": "sleep 600", "background": True})]),
            reply(ANSWER))
        live.api("sessions_prompt", {"text": "Explain app.py and say Hi", "model": live.modelref,
                                     "autoaccept": True}, ident=self.session["id"])
        assert live.wait_run_end(self.session) == "idle"
        # Each question waits to the module's end: no answer is scripted after it (the scripted
        # model serves its answers in turn, to whichever session asks).
        live.model.script(reply(tool_calls=[("bash", {"command": "python -m pytest -q",
                                                      "description": "Run the tests"})]))
        live.prompt(self.session, "Run the tests")
        self.wait_question(live, self.session)
        self.editing = live.session(self.project, "Rename greet")
        live.model.script(reply(tool_calls=[("edit", {"path": "app.py", "old": "def greet", "new": "def hello"})]))
        live.prompt(self.editing, "Rename greet to hello")
        self.wait_question(live, self.editing)
        live.api("schedules_save", {"projectid": self.project["id"], "name": "Nightly check", "prompt": "Run the tests",
                                    "model": live.modelref, "kind": "daily", "time": "03:00"})

    @staticmethod
    def wait_question(live, session) -> None:
        """Wait until the session's run waits on its question (so the next scripted answer is not its)."""
        async def wait():
            async with asyncio.timeout(10):
                while not live.app.runs.questions.waiting(session["id"]):
                    await asyncio.sleep(0.02)
        live.call(wait())


@pytest.fixture(scope="module")
def scene(live):
    return Scene(live)


@pytest.fixture(scope="module")
def pages(browser, live):
    """A signed-in page for each width, made when a test first asks for it; its uncaught errors
    are kept in `page.errors`."""
    made: dict[str, object] = {}
    contexts = []

    def page_for(size: str):
        if size not in made:
            context = browser.new_context(viewport=SIZES[size], color_scheme="light", base_url=live.url)
            contexts.append(context)
            answer = context.request.post(f"{live.url}/api/login", data={"token": TOKEN})
            assert answer.status == 200, answer.text()
            page = context.new_page()
            page.errors = []
            page.on("pageerror", lambda error: page.errors.append(str(error)))
            made[size] = page
        page = made[size]
        page.emulate_media(color_scheme="light")
        return page

    yield page_for
    for context in contexts:
        context.close()


def audit(page, include: str | None = None) -> list[dict]:
    """axe-core's serious and critical findings on the page (or the part `include` selects).
    Every rule runs: a finding is fixed in static/, never silenced here."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        with open(AXE) as handle:
            page.evaluate(handle.read())
    found = page.evaluate("""async (include) => {
        const result = await axe.run(include ? { include: [include] } : document, { resultTypes: ['violations'] });
        return result.violations.map(v => ({ id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.map(n => ({ target: n.target.join(' '), summary: n.failureSummary, html: n.html })) }));
    }""", include)
    return [finding for finding in found if finding["impact"] in BLOCKING]


def report(findings: list[dict]) -> str:
    lines = []
    for finding in findings:
        lines.append(f"{finding['impact']} {finding['id']}: {finding['help']}")
        for node in finding["nodes"]:
            lines.append(f"  {node['target']}  {node['html'][:160]}")
            lines.append("    " + (node["summary"] or "").replace("\n", "\n    "))
    return "\n".join(lines)


def audit_both_themes(page, include: str | None, what: str) -> None:
    """axe on the screen in the light theme, then in the dark one: the system's preference
    changes while the screen stays open, and the page follows it (static/theme.js), so one
    load serves both. A failure names each theme that has findings."""
    failures = []
    for theme in THEMES:
        page.emulate_media(color_scheme=theme)
        expect(page.locator("html")).to_have_attribute("data-theme", theme)
        findings = audit(page, include)
        if findings:
            failures.append(f"{what}, {theme}:\n{report(findings)}")
    assert failures == [], "\n".join(failures)


# -- the screens: each opens its screen on the page and returns the part axe checks (None: the
# whole page). A dialog or a drawer is checked alone: the page under it has a screen of its own.

def on_phone(page) -> bool:
    return page.locator("#toggle-menu").is_visible()


def menu(page, button: str) -> None:
    """Choose a control of the header (on a phone, from its menu)."""
    if on_phone(page):
        page.click("#toggle-menu")
    page.click(button)


def main_view(page, scene, session=None) -> None:
    open_session(page, scene.project, session or scene.session)
    expect(page.locator("#questions .ask, #conversation .ask").first).to_be_visible()


def conversation(page, scene):
    main_view(page, scene)
    expect(page.locator(".codeblock code.hljs")).to_have_count(1)
    return None


def diff(page, scene):
    main_view(page, scene, scene.editing)
    expect(page.locator(".ask.permission .diff-add").first).to_be_visible()
    return None


def changes(page, scene):
    main_view(page, scene)
    if on_phone(page):
        page.click("#toggle-panels")
    page.locator("#diff-files li[data-path='app.py']").click()
    expect(page.locator("#diff-view .diff-add").first).to_be_visible()
    return "#panels"


def jobs(page, scene):
    main_view(page, scene)
    if on_phone(page):
        page.click("#toggle-panels")
    expect(page.locator("#jobs li.job[data-status=running]")).to_be_visible()
    return "#panels"


def dialog(name: str, ready: str):
    def screen(page, scene):
        main_view(page, scene)
        menu(page, f"#open-{name}")
        expect(page.locator(f"#{name}-dialog")).to_be_visible()
        expect(page.locator(ready).first).to_be_visible()
        return f"#{name}-dialog"
    return screen


def model_picker(page, scene):
    main_view(page, scene)
    page.click("#model")
    expect(page.locator("#model-list li").first).to_be_visible()
    return "#composer"


def provider_form(page, scene):
    main_view(page, scene)
    menu(page, "#open-providers")
    page.click("#provider-add")
    expect(page.locator("#provider-form")).to_be_visible()
    return "#providers-dialog"


def schedule_form(page, scene):
    main_view(page, scene)
    menu(page, "#open-schedules")
    page.get_by_role("button", name="New schedule").click()
    expect(page.locator("#schedule-form")).to_be_visible()
    return "#schedules-dialog"


def folder(page, scene):
    main_view(page, scene)
    if on_phone(page):
        page.click("#toggle-side")
    page.click("#open-folder")
    expect(page.locator("#folder-items li").first).to_be_visible()
    return "#folder-dialog"


def terminal(page, scene):
    # A session of its own for each page: a running shell opens its panel by itself on the next
    # page that shows its session, where the Terminal button would close it.
    session = scene.live.session(scene.project, "Shell")
    open_session(page, scene.project, session)
    page.click("#terminal-toggle")
    page.get_by_role("button", name="Open terminal").click()
    expect(page.locator("#terminal-status")).to_have_text("running")
    expect(page.locator("#terminal-screen .xterm-rows")).to_be_visible()
    return "#terminal-panel"


def sessions_drawer(page, scene):
    main_view(page, scene)
    page.click("#toggle-side")
    expect(page.locator("#side")).to_be_visible()
    return None


def header_menu(page, scene):
    main_view(page, scene)
    page.click("#toggle-menu")
    expect(page.locator("#open-settings")).to_be_visible()
    return None


SCREENS = {
    "conversation": conversation,
    "diff": diff,
    "changes": changes,
    "jobs": jobs,
    "rules": dialog("rules", "#rule-list tr"),
    "settings": dialog("settings", "#settings-list li"),
    "providers": dialog("providers", "#provider-list li"),
    "schedules": dialog("schedules", "#schedule-list li.schedule"),
    "terminal": terminal,
    "model-picker": model_picker,
    "provider-form": provider_form,
    "schedule-form": schedule_form,
    "open-folder": folder,
}
PHONE_ONLY = {"sessions-drawer": sessions_drawer, "header-menu": header_menu}
CASES = [(screen, size) for screen in SCREENS for size in SIZES] + [(screen, "390") for screen in PHONE_ONLY]


@pytest.mark.parametrize("size", SIZES)
def test_sign_in_page(browser, live, size):
    context = browser.new_context(viewport=SIZES[size], color_scheme="light", base_url=live.url)
    try:
        page = context.new_page()
        page.goto("/login")
        expect(page.locator("input").first).to_be_visible()
        audit_both_themes(page, None, f"sign-in at {size}px")
    finally:
        context.close()


@pytest.mark.parametrize("size", SIZES)
def test_first_run(pages, live, size):
    """Before any provider is saved: the notice that opens the provider form."""
    providerid = live.modelref.split("/", 1)[0]
    saved = next(p for p in live.api("providers") if p["id"] == providerid)
    live.api("providers_remove", ident=providerid, method="POST")
    try:
        page = pages(size)
        page.goto("about:blank")
        page.goto("/")
        expect(page.locator("#first-run")).to_be_visible()
        expect(page.locator("#connection")).to_have_attribute("data-state", "open")
        audit_both_themes(page, None, f"first run at {size}px")
    finally:
        again = live.api("providers_save", {"name": saved["name"], "kind": saved["kind"], "url": saved["url"],
                                            "key": "sk-test-ui-0123456789"})
        live.modelref = f"{again['id']}/{MODEL_ID}"


@pytest.mark.parametrize(("screen", "size"), CASES, ids=[f"{c}-{s}" for c, s in CASES])
def test_screen(pages, scene, screen, size):
    page = pages(size)
    page.goto("about:blank")  # a fresh load for each screen: nothing open from the one before
    include = {**SCREENS, **PHONE_ONLY}[screen](page, scene)
    audit_both_themes(page, include, f"{screen} at {size}px")
    assert page.errors == [], page.errors
