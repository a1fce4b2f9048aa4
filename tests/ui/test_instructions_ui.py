"""The conversation says which instruction files the model was given: the system prompt's on the
run's first answer, a nested one on the call whose result carried it. In Debian's Chromium
against the real server and the scripted model."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, open_session, send

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")


def test_the_instructions_read_are_named(live, page):
    project = live.project("instructed", {"AGENTS.md": "Use tabs.\n", "src/AGENTS.md": "No globals.\n",
                                          "src/a.py": "x = 1\n"})
    session = live.session(project, "Instructed")
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[("read", {"path": "src/a.py"})]), reply("Read it."))
    send(page, "Look at src/a.py")
    expect(page.locator(".msg.assistant").last).to_contain_text("Read it.")
    live.wait_run_end(session)
    expect(page.locator(".msg.assistant .instructions-note").first).to_have_text("Instructions read: AGENTS.md")
    expect(page.locator(".part.tool .instructions-note")).to_have_text("Instructions read: src/AGENTS.md")
    page.reload()
    expect(page.locator(".part.tool .instructions-note")).to_have_text("Instructions read: src/AGENTS.md")
    expect(page.locator(".msg.assistant .instructions-note")).to_have_count(2)
