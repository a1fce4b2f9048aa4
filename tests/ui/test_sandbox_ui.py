"""The sandbox in the browser: a command's question says what it can reach, and the header
marks which protections hold (Account|read's `sandbox`)."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, open_session, send

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM} "
                                       "(`make test` installs it with apt-get)")


def test_a_command_question_says_what_it_can_reach(live, page):
    """The question of a command names the folder it may write and the network; the header's
    mark says whether every protection holds, with each one in its title."""
    project = live.project("reach", {"a.txt": "x\n"})
    session = live.session(project, "Reach")
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[("bash", {"command": "touch made"})]), reply("Done."))
    send(page, "Make it")
    card = page.locator(".ask.permission")
    reach = card.locator(".ask-reach")
    expect(reach).to_have_attribute("data-confined", "true")
    expect(reach).to_contain_text(os.path.realpath(project["path"]))
    expect(reach).to_contain_text("network on")
    status = live.api("account", query="wait=sandbox")["sandbox"]
    mark = page.locator("#sandbox-mark")
    expect(mark).to_have_attribute("data-state", "partial" if status["missing"] else "full")
    title = mark.get_attribute("title")
    assert all(name in title for name in status["holds"]), title
    card.get_by_role("button", name="Reject").click()
    expect(page.locator(".msg.assistant .md").last).to_have_text("Done.")
