"""Signing in with the address Totem prints: /login?code= in a browser that is not signed in
opens the app, drops the code from the address bar, and the same address a second time stays
on the sign-in page with the reason."""

import os

import pytest
from playwright.sync_api import expect

from tests.ui.harness import CHROMIUM

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")


def test_the_sign_in_address_opens_the_app_once(live, context):
    code = live.app.perimeter.codes.new()
    page = context.new_page()
    page.goto(f"/login?code={code}")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")
    assert "code=" not in page.url
    other = context.browser.new_context(base_url=live.url)
    try:
        again = other.new_page()
        again.goto(f"/login?code={code}")
        expect(again.locator("#error")).to_contain_text("used or expired")
        assert again.url.endswith("/login")
        again.goto("/")
        expect(again).to_have_url(f"{live.url}/login")
    finally:
        other.close()
