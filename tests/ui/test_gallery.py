"""Screenshots of the main screens at a phone's and a laptop's size, in the light and the dark
theme, written to screenshots/gallery-SCREEN-WIDTH-THEME.png (the README shows them). They are
taken from the real server and the scripted model, as a person would see each screen."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import MODEL_ID, reply, usage_chunk
from tests.ui.harness import CHROMIUM, SCREENSHOTS, open_session
from tests.utils import TOKEN

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

SIZES = {"390": {"width": 390, "height": 844}, "1280": {"width": 1280, "height": 800}}
THEMES = ("light", "dark")
VARIANTS = [(size, theme) for size in SIZES for theme in THEMES]
ANSWER = ("`greet` builds the greeting; `main` prints it for each name given.\n\n"
          "```python\ndef greet(name: str) -> str:\n    # one line per person\n    return f\"Hello, {name}!\"\n\n\n"
          "def main(names: list[str]) -> None:\n    for name in names:\n        print(greet(name))\n```\n\n"
          "Run it with `python app.py Ada Linus`.")
FILES = {"app.py": "import sys\n\n\ndef greet(name):\n    return f'Hello, {name}!'\n",
         "README.md": "# Greeter\n", "tests/test_app.py": "from app import greet\n"}


def gallery(page, screen: str, size: str, theme: str) -> None:
    """The README's images are written with TOTEM_GALLERY=1 (`make screenshots`); an ordinary
    run of the tests writes them to screenshots/latest/ (ignored), so it changes no tracked file."""
    folder = SCREENSHOTS if os.environ.get("TOTEM_GALLERY") == "1" else os.path.join(SCREENSHOTS, "latest")
    os.makedirs(folder, exist_ok=True)
    page.screenshot(path=os.path.join(folder, f"gallery-{screen}-{size}-{theme}.png"))


@pytest.fixture(scope="module")
def scene(live):
    """A project with one answered session (a read, highlighted code, counted tokens)."""
    project = live.project("greeter", FILES)
    session = live.session(project, "Explain app.py")
    answer = reply(ANSWER, usage=False)
    answer.events.append(usage_chunk(2480, 96))
    live.model.script(reply(tool_calls=[("read", {"path": "app.py"})]), answer)
    live.prompt(session, "Explain app.py")
    assert live.wait_run_end(session) == "idle"
    return project, session


def signed_in(browser, live, size, theme):
    context = browser.new_context(viewport=SIZES[size], color_scheme=theme, base_url=live.url)
    answer = context.request.post(f"{live.url}/api/login", data={"token": TOKEN})
    assert answer.status == 200, answer.text()
    return context


def test_gallery_first_run(browser, live):
    """The first run, before any provider is saved: the notice that opens the provider form."""
    providerid = live.modelref.split("/", 1)[0]
    saved = next(p for p in live.api("providers") if p["id"] == providerid)
    live.api("providers_remove", ident=providerid, method="POST")
    try:
        for size, theme in VARIANTS:
            context = signed_in(browser, live, size, theme)
            page = context.new_page()
            page.goto("/")
            expect(page.locator("#first-run")).to_be_visible()
            expect(page.locator("#connection")).to_have_attribute("data-state", "open")
            gallery(page, "first-run", size, theme)
            context.close()
    finally:
        again = live.api("providers_save", {"name": saved["name"], "kind": saved["kind"], "url": saved["url"],
                                            "key": "sk-test-ui-0123456789"})
        live.modelref = f"{again['id']}/{MODEL_ID}"


@pytest.mark.parametrize(("size", "theme"), VARIANTS, ids=[f"{s}-{t}" for s, t in VARIANTS])
def test_gallery_screens(browser, live, scene, size, theme):
    """The conversation, the model picker, a permission question and the provider form."""
    project, session = scene
    context = signed_in(browser, live, size, theme)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    open_session(page, project, session)
    expect(page.locator(".codeblock code.hljs")).to_have_count(1)
    expect(page.locator("#session-usage")).to_be_visible()
    expect(page.locator("html")).to_have_attribute("data-theme", theme)
    gallery(page, "conversation", size, theme)

    page.click("#model")
    expect(page.locator("#model-popup")).to_be_visible()
    gallery(page, "model-picker", size, theme)
    page.keyboard.press("Escape")

    if page.locator("#toggle-menu").is_visible():  # on a phone the header's buttons are in its menu
        page.click("#toggle-menu")
    page.click("#open-providers")
    page.click("#provider-add")
    page.select_option("#provider-template", "compatible")
    page.fill("#provider-name", "Local gateway")
    page.fill("#provider-url", live.model.url)
    page.click("#provider-check")
    expect(page.locator("#provider-models")).to_contain_text(MODEL_ID)
    gallery(page, "providers", size, theme)
    page.keyboard.press("Escape")

    asking = live.session(project, "Run the tests")
    live.model.script(reply(tool_calls=[("bash", {"command": "python -m pytest -q tests",
                                                   "description": "Run the test suite"})]), reply("All pass."))
    live.prompt(asking, "Run the tests")
    page.goto(f"/#/{project['id']}/{asking['id']}")
    page.reload()  # only the address's hash changed: load the page for that session
    expect(page.locator("#session-title")).to_have_text("Run the tests")
    expect(page.locator(".ask.permission")).to_be_visible()
    gallery(page, "question", size, theme)
    live.settle()  # the question's run is stopped, the answer scripted after it dropped
    live.api("sessions_remove", ident=asking["id"], method="POST")
    context.close()
    assert errors == []
