"""The permission engine's reasons, as the screens word them (static/words.js), in the browser:
whose rule decided and what it covers, never "the default rule bash: *"."""

import os

import pytest

from tests.ui.harness import CHROMIUM, open_session

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

CASES = {
    "approval required by the default rule bash: *": "approval required by Totem’s built-in rule for every bash call",
    "allowed by the project rule bash: git status*": "allowed by your rule for this project for bash git status*",
    "denied by the global rule read: **/.ssh/**": "denied by your rule for all projects for read **/.ssh/**",
    "approval required: the command line is not fully understood (comment #), so no rule can allow it":
        "approval required: the command line is not fully understood (comment #), so no rule can allow it",
    "": "",
}


def test_rule_reasons_in_words(live, page):
    project = live.project("words", {"a.txt": "x\n"})
    open_session(page, project, live.session(project, "Words"))
    worded = page.evaluate("async (cases) => { const { plainReason } = await import('/words.js');"
                           " return cases.map(plainReason); }", list(CASES))
    assert worded == list(CASES.values())
