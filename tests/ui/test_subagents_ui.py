"""Sub-agents in the browser: a task's child session listed under its parent, the task part's link
that opens it (and the child's way back), and a child's permission question shown in the parent's
session; against the real server and the scripted model."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, open_session, send, shot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

TASK = ("task", {"agent": "explore", "description": "find it", "prompt": "Find a.txt"})


def test_task_child_listed_under_its_parent_and_opened_from_the_task(live, page):
    """The child session appears right under its parent, indented with ↳ and marked sub-agent;
    the task part's link opens it (the address names it) showing the sub-agent's answer, and the
    child's head leads back to the parent."""
    project = live.project("delegating", {"a.txt": "hello\n"})
    older = live.session(project, "Older")
    session = live.session(project, "Parent")
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[TASK]), reply("found a.txt"), reply("done"))
    send(page, "Where is a.txt?")
    expect(page.locator(".msg.assistant .md").last).to_have_text("done")

    rows = page.locator("#sessions li")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_have_attribute("data-id", session["id"])
    child = rows.nth(1)
    expect(child).to_have_class("child depth-1")
    expect(child.locator(".name")).to_have_text("find it")
    expect(child.locator(".child-mark")).to_have_text("↳")
    expect(child.locator(".subagent-label")).to_have_text("sub-agent")
    expect(child).to_have_attribute("data-parent", session["id"])
    expect(rows.nth(2)).to_have_attribute("data-id", older["id"])
    childid = child.get_attribute("data-id")

    task = page.locator(".part.tool").filter(has=page.locator(".tool-name", has_text="task"))
    expect(task.locator(".tool-subject")).to_have_text("explore: find it")
    link = task.get_by_role("link", name="Open the sub-agent's session")
    expect(link).to_have_attribute("href", f"#/{project['id']}/{childid}")
    shot(page, "subagent-task.png")
    link.click()
    expect(page.locator("#session-title")).to_have_text("find it")
    expect(page.locator(".msg.user .plain")).to_have_text("Find a.txt")
    expect(page.locator(".msg.assistant .md").last).to_have_text("found a.txt")
    expect(page.locator("#sessions li.active")).to_have_attribute("data-id", childid)
    assert page.evaluate("location.hash") == f"#/{project['id']}/{childid}"

    back = page.locator("#session-parent")
    expect(back).to_have_text("↳ sub-agent of “Parent”")
    back.click()
    expect(page.locator("#session-title")).to_have_text("Parent")
    expect(page.locator("#session-parent")).to_be_hidden()
    expect(page.locator(".msg.assistant .md").last).to_have_text("done")


def test_child_question_shown_in_the_parent_session(live, page):
    """A permission question of the sub-agent (reading a protected .env) waits in the parent's
    session, where it is answered; the sub-agent then goes on."""
    project = live.project("delegating-asks", {"a.txt": "hello\n", ".env": "KEY=1\n"})
    session = live.session(project, "Asking parent")
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[TASK]), reply(tool_calls=[("read", {"path": ".env"})]),
                      reply("read it"), reply("done"))
    send(page, "Look at .env")
    card = page.locator(".ask.permission")
    expect(card.locator("header")).to_have_text("Allow read?")
    expect(card.locator(".ask-input")).to_contain_text(".env")
    expect(page.locator(f"#sessions li[data-id='{session['id']}'] .waiting")).to_have_text("? 1")
    card.get_by_role("button", name="Allow once").click()
    expect(page.locator(".msg.assistant .md").last).to_have_text("done")
    expect(page.locator(".ask.permission")).to_have_count(0)
