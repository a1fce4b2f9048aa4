"""Paths in boxes cut at their start (the Git panel, the Changes list) read in their own order:
the browser's own layout is the judge. Each character's box, measured with a Range, must lie to
the right of the one before it, whatever punctuation starts or ends the path. In Debian's
Chromium against the real server."""

import os

import pytest
from playwright.sync_api import expect

from tests.ui.harness import CHROMIUM, git, git_project, open_session

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

# The left edge of each character of an element's text as laid out, in the order of the text.
CHARACTER_LEFTS = """(element) => {
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  const lefts = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i += 1) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      lefts.push(range.getBoundingClientRect().left);
    }
  }
  return { text: element.textContent, lefts };
}"""

# Paths whose first or last character is punctuation, which the bidi rules of a right-to-left
# box move to the other end when nothing holds them in order.
PATHS = (".totem/", "tests/__pycache__/", "(draft).md", "-notes-", "2024/", "_build/")


def read_in_order(locator) -> None:
    laid_out = locator.evaluate(CHARACTER_LEFTS)
    lefts = laid_out["lefts"]
    assert lefts == sorted(lefts) and len(set(lefts)) == len(lefts), laid_out


def test_git_panel_paths_read_left_to_right(live, page):
    files = {"kept.txt": "kept\n", "tests/test_a.py": "pass\n"}  # tests/ is tracked: its new folder is listed
    project = git_project(live, "paths", files)
    root = project["path"]
    for path in PATHS:
        target = os.path.join(root, path, "x.txt") if path.endswith("/") else os.path.join(root, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as handle:
            handle.write("new\n")
    assert git(root, "status", "--porcelain")
    session = live.session(project, "Paths")
    open_session(page, project, session)
    shown = page.locator("#git .changes li .path")
    expect(shown).to_have_count(len(PATHS))
    for index in range(len(PATHS)):
        read_in_order(shown.nth(index))
    assert sorted(shown.all_text_contents()) == sorted(PATHS)
