"""Project commands and agents in the browser: `/` lists the project's commands (and the invalid
ones with their error), the keyboard chooses one, the Agent picker chooses an agent, and the
prompt that is sent is the command with its arguments, run with the agent's tools; against the
real server and the scripted model."""

import os

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, open_session, shot, watch_csp

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

FILES = {
    "src/a.py": "print('the file')\n",
    ".totem/commands/review.md": "---\ndescription: Review a file\n---\nReview @$1 carefully.\n",
    ".totem/commands/broken.md": "---\nautoaccept: true\n---\nEdit everything.\n",
    ".totem/agents/reviewer.md": "---\ndescription: Reads only\ntools: [read]\n---\nOnly review.\n",
}


def test_slash_lists_commands_and_the_agent_picker_narrows_the_prompt(live, page):
    errors = watch_csp(page)
    project = live.project("commands", FILES)
    session = live.session(project, "Commands")
    open_session(page, project, session)
    prompt = page.locator("#prompt")
    menu = page.locator("#command-menu")

    prompt.click()
    prompt.press_sequentially("/")
    expect(menu).to_be_visible()
    expect(menu.locator(".command-option[data-name]")).to_have_count(2)  # /new and /review
    expect(menu.locator("[data-name=review]")).to_contain_text("Review a file")
    expect(menu.locator(".command-invalid")).to_contain_text("/broken")
    expect(menu.locator(".command-invalid")).to_contain_text("autoaccept: a project file cannot grant permissions")
    shot(page, "commands-menu.png")

    # Escape closes the list (and stops nothing); typing filters; Tab completes the one chosen.
    prompt.press("Escape")
    expect(menu).to_be_hidden()
    prompt.fill("")
    prompt.press_sequentially("/re")
    expect(menu.locator(".command-option")).to_have_count(1)
    expect(menu.locator("[aria-selected=true]")).to_have_attribute("data-name", "review")
    prompt.press("Tab")
    expect(menu).to_be_hidden()
    expect(prompt).to_have_value("/review ")
    prompt.press_sequentially("src/a.py")

    agent = page.locator("#agent")
    expect(agent).to_be_visible()
    agent.select_option("reviewer")
    before = len(live.model.requests)
    live.model.script(reply("Reviewed."))
    prompt.press("Enter")
    expect(page.locator("#conversation")).to_contain_text("Reviewed.")
    assert live.wait_run_end(session) == "idle"
    [request] = [r.body for r in live.model.requests[before:] if r.path.endswith("/chat/completions")]
    assert [tool["function"]["name"] for tool in request["tools"]] == ["read"]
    assert request["messages"][0]["content"].endswith("Only review.")
    user = [m for m in request["messages"] if m["role"] == "user"][-1]
    texts = [item.get("text", "") for item in user["content"]] if isinstance(user["content"], list) else [user["content"]]
    assert "Review @src/a.py carefully." in texts
    assert any("print('the file')" in text for text in texts)
    expect(page.locator("#conversation")).to_contain_text("Review @src/a.py carefully.")
    expect(prompt).to_have_value("")
    assert errors() == []
