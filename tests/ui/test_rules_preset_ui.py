"""The Rules dialog's preset "Allow commands inside the sandbox": one click stores the ordinary
rule `allow sandboxed *` for the project, listed and removable like any other."""

import os

import pytest
from playwright.sync_api import expect

from tests.ui.harness import CHROMIUM

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")


def test_the_preset_is_stored_as_a_rule_and_removed_again(live, page):
    project = live.project("preset", {"a.txt": "x\n"})
    page.goto(f"/#/{project['id']}")
    expect(page.locator("#project-title")).to_have_text(project["path"])
    page.click("#open-rules")
    dialog = page.locator("#rules-dialog")
    dialog.get_by_role("button", name="Allow commands inside the sandbox").click()
    row = dialog.locator("#rule-list tr", has_text="sandboxed")
    expect(row).to_have_count(1)
    expect(row.locator("td").nth(1)).to_have_text("*")
    expect(row.locator(".badge")).to_have_text("allow")
    stored = [rule for rule in live.api("permissions", query=f"projectid={project['id']}")
              if rule["tool"] == "sandboxed"]
    assert [(rule["pattern"], rule["action"], rule["layer"]) for rule in stored] == [("*", "allow", "project")]
    row.get_by_role("button", name="Remove").click()
    row.get_by_role("button", name="Remove?").click()
    expect(dialog.locator("#rule-list tr", has_text="sandboxed")).to_have_count(0)
