"""Fixtures of the browser tests: one Totem per module, one Chromium for the modules a worker runs in
turn, a fresh context per test.

Playwright launches Debian's Chromium (never a browser of its own) with a new temporary profile.
"""

import os
import shutil
import tempfile

import pytest

from tests.ui.harness import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, LiveTotem
from tests.utils import TOKEN


@pytest.fixture(scope="module")
def live():
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-ui-"))
    server = LiveTotem(tmp)
    server.start()
    try:
        yield server
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)


# One Chromium (and one Playwright driver) for the browser modules that a worker runs one after
# the other, not one per module: a launch is about a CPU-second. The package scope ends it before
# any test outside tests/ui/ runs, whose event loops must not meet Playwright's.
@pytest.fixture(scope="package")
def browser():
    from playwright.sync_api import expect, sync_playwright
    expect.set_options(timeout=10_000)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class Watched:
    """What a page did that it should not: uncaught errors and dialogs (alert, confirm...)."""

    def __init__(self):
        self.errors: list[str] = []
        self.dialogs: list[str] = []

    def watch(self, page):
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        return page


@pytest.fixture
def watched():
    return Watched()


@pytest.fixture
def context(browser, live, watched):
    """A browser context that is not signed in; its pages are watched."""
    context = browser.new_context(viewport=VIEWPORT, base_url=live.url,
                                  permissions=["clipboard-read", "clipboard-write"])
    context.on("page", watched.watch)
    live.settle()  # nothing left over from an earlier test, even a failed one
    try:
        yield context
    finally:
        context.close()
        live.settle()
    assert watched.errors == [], watched.errors
    assert watched.dialogs == [], watched.dialogs


@pytest.fixture
def page(context, live):
    """A signed-in page (the cookie comes from Account|login, as the login page gets it)."""
    answer = context.request.post(f"{live.url}/api/login", data={"token": TOKEN})
    assert answer.status == 200, answer.text()
    return context.new_page()
