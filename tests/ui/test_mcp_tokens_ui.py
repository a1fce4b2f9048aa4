"""MCP tokens in the Settings dialog: made with a name, shown once (never again in the page nor in
the list), working on /$mcp/ and nowhere else, and removed; against the real server."""

import os

import pytest
from playwright.sync_api import expect

from tests.ui.harness import CHROMIUM, watch_csp

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")


def test_make_copy_once_and_remove_an_mcp_token(live, page):
    errors = watch_csp(page)
    page.goto("/")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")
    page.click("#open-settings")
    dialog = page.locator("#settings-dialog")
    section = dialog.locator("#mcp-tokens")
    expect(section).to_be_visible()  # All projects: no project is open
    expect(section.locator("#mcp-token-list")).to_contain_text("No MCP token yet.")
    section.locator("#mcp-token-name").fill("my editor")
    section.get_by_role("button", name="Make a token").click()
    shown = section.locator(".mcp-token-value")
    expect(shown).to_be_visible()
    token = shown.input_value()
    assert token.startswith("mcp-")
    expect(section.locator("li.mcp-token")).to_have_count(1)
    expect(section.locator("li.mcp-token .mcp-token-name")).to_have_text("my editor")
    listed = live.api("mcptokens_list")
    assert [row["name"] for row in listed["tokens"]] == ["my editor"] and token not in str(listed)
    # Closed and opened again: the token is not shown any more, only its name.
    dialog.get_by_role("button", name="Close").click()
    page.click("#open-settings")
    expect(section.locator("li.mcp-token")).to_have_count(1)
    expect(section.locator(".mcp-token-value")).to_have_count(0)
    assert token not in page.content()
    section.locator("li.mcp-token").get_by_role("button", name="Remove").click()
    expect(section.locator("#mcp-token-list")).to_contain_text("No MCP token yet.")
    assert live.api("mcptokens_list")["tokens"] == []
    assert errors() == []


def test_a_nameless_token_is_refused_with_its_reason(live, page):
    page.goto("/")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")
    page.click("#open-settings")
    section = page.locator("#mcp-tokens")
    section.locator("#mcp-token-name").fill("   ")
    section.get_by_role("button", name="Make a token").click()
    expect(section.locator("#mcp-token-error")).to_be_visible()
    assert live.api("mcptokens_list")["tokens"] == []
