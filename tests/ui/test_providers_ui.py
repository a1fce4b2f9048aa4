"""Providers made obvious: the first run asks for one and opens its form, an OpenAI-compatible
server is added without a key, kinds are shown by name, and the model picker is searchable with
each model's context size and tool support. In Debian's Chromium against the real server."""

import os
import re

import pytest
from playwright.sync_api import expect

from tests.model_server import MODEL_ID
from tests.ui.harness import CHROMIUM, open_session, shot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

MODELS = [
    {"id": "coder-large", "object": "model", "context_length": 131072, "supported_features": ["tools"]},
    {"id": "coder-small", "object": "model", "context_length": 32768, "supported_features": []},
    {"id": "chat-general", "object": "model"},
]


def test_first_run_opens_the_provider_form_and_adds_an_openai_compatible_server(live, page):
    """Without a provider the page says to add one; its button opens the form, where an
    OpenAI-compatible server is saved without a key; the kind is shown by name, and the notice
    gives way to the model picker."""
    live.api("providers_remove", ident=live.modelref.split("/", 1)[0], method="POST")
    page.goto("/")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")
    notice = page.locator("#first-run")
    expect(notice).to_be_visible()
    expect(notice.locator("h2")).to_have_text("Add a model provider to start")
    shot(page, "first-run.png")
    notice.get_by_role("button", name="Add a provider").click()
    dialog = page.locator("#providers-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#provider-form")).to_be_visible()
    expect(page.locator("#provider-name")).to_be_focused()
    expect(dialog.locator("#provider-list")).to_contain_text("No provider yet")

    expect(page.locator("#provider-template option", has_text="OpenAI-compatible")).to_have_count(1)
    page.select_option("#provider-template", "compatible")
    expect(page.locator("#provider-url")).to_have_value("http://127.0.0.1:8000/v1")
    expect(page.locator("#provider-key")).to_have_attribute("placeholder", "optional")
    page.fill("#provider-name", "Local gateway")
    page.fill("#provider-url", live.model.url)
    page.click("#provider-check")
    expect(page.locator("#provider-models")).to_contain_text(MODEL_ID)
    page.click("#provider-form button[type=submit]")
    card = dialog.locator("#provider-list li", has_text="Local gateway")
    expect(card.locator(".provider-kind")).to_have_text("OpenAI-compatible")
    expect(card).to_contain_text("no key")
    saved = next(p for p in live.api("providers") if p["name"] == "Local gateway")
    assert (saved["kind"], saved["haskey"]) == ("compatible", False)
    live.modelref = f"{saved['id']}/{MODEL_ID}"  # the model the other tests of this module use
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(notice).to_be_hidden()
    expect(page.locator("#model")).to_have_attribute("data-value", live.modelref)


def test_model_picker_is_searchable_with_context_and_tools(live, page):
    """The picker lists every model by provider with its window ("~" when the provider does not
    say) and whether it calls tools; typing narrows the list, the arrows and Enter choose, and
    Escape closes it without stopping anything."""
    live.model.serve_json("GET", "/alt/v1/models", {"object": "list", "data": MODELS})
    other = live.api("providers_save", {"name": "Catalog", "kind": "compatible", "url": f"{live.model.base}/alt/v1"})
    project = live.project("picking", {"a.txt": "x\n"})
    session = live.session(project, "Pick")
    open_session(page, project, session)
    expect(page.locator("#tree")).to_contain_text("a.txt")  # the session's panels have loaded: nothing takes the focus later
    button = page.locator("#model")
    button.click()
    popup = page.locator("#model-popup")
    expect(popup).to_be_visible()
    search = page.locator("#model-search")
    expect(search).to_be_focused()
    options = page.locator("#model-list [role=option]")
    expect(options).to_have_count(1 + len(MODELS))
    expect(page.locator("#model-list .picker-group")).to_have_text([re.compile("."), "Catalog"])
    large = options.filter(has_text="coder-large")
    expect(large.locator(".picker-detail")).to_have_text(["128K context", "tools"])
    expect(options.filter(has_text="coder-small").locator(".picker-detail")).to_have_text(["32K context", "no tools"])
    expect(options.filter(has_text="chat-general").locator(".picker-detail")).to_have_text(["~32K context"])
    shot(page, "model-picker.png")

    search.fill("coder")
    expect(options).to_have_count(2)
    expect(page.locator("#model-count")).to_have_text("2 of 4 models")
    search.fill("CODER small")
    expect(options).to_have_text([re.compile("^coder-small")])
    search.press("Enter")
    expect(popup).to_be_hidden()
    expect(button).to_have_attribute("data-value", f"{other['id']}/coder-small")
    expect(button).to_have_text("coder-small")
    assert page.evaluate("localStorage.getItem('totem.model')") == f"{other['id']}/coder-small"

    button.click()
    search.fill("nothing like this")
    expect(page.locator("#model-list")).to_contain_text("No model matches")
    search.fill("")
    search.press("ArrowDown")  # from the chosen one down to the next
    expect(options.filter(has_text="chat-general")).to_have_class(re.compile(r"\bactive\b"))
    search.press("Escape")
    expect(popup).to_be_hidden()
    expect(button).to_be_focused()
    expect(button).to_have_attribute("data-value", f"{other['id']}/coder-small")
