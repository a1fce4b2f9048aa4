"""Export and Import in the page: the session's Export downloads the JSON of Sessions|export,
Markdown its Markdown, and Import in the session list makes a session of the open project from
such a file and opens it. In Debian's Chromium against the real server and the scripted model."""

import json
import os

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, open_session, send

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")


def test_export_then_import_opens_the_copy(live, page, tmp_path):
    project = live.project("exporting", {"a.txt": "x\n"})
    session = live.session(project, "Exported")
    open_session(page, project, session)
    live.model.script(reply("An answer to take along."))
    send(page, "Take me along")
    expect(page.locator(".msg.assistant").last).to_contain_text("An answer to take along.")
    live.wait_run_end(session)

    page.get_by_role("button", name="Export ▾").click()
    expect(page.get_by_role("menuitem", name="JSON, to import")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("#session-export-items")).to_be_hidden()
    expect(page.get_by_role("button", name="Export ▾")).to_be_focused()
    page.get_by_role("button", name="Export ▾").click()
    with page.expect_download() as markdown:
        page.get_by_role("menuitem", name="Markdown, to read").click()
    expect(page.locator("#session-export-items")).to_be_hidden()
    text = markdown.value.path().read_text(encoding="utf-8")
    assert "An answer to take along." in text and text.startswith("# ")
    page.get_by_role("button", name="Export ▾").click()
    with page.expect_download() as exported:
        page.get_by_role("menuitem", name="JSON, to import").click()
    assert exported.value.suggested_filename.endswith(".json")
    document = json.loads(exported.value.path().read_text(encoding="utf-8"))
    assert document["version"] == 1

    saved = tmp_path / "session.json"
    saved.write_text(json.dumps(document))
    with page.expect_file_chooser() as chooser:
        page.click("#import-session")
    chooser.value.set_files(str(saved))
    expect(page.locator(".toast.info").last).to_contain_text("Imported “Exported”")
    sessions = live.api("sessions", query=f"projectid={project['id']}")["sessions"]
    assert len(sessions) == 2
    imported = next(s for s in sessions if s["id"] != session["id"])
    expect(page).to_have_url(f"{live.url}/#/{project['id']}/{imported['id']}")
    expect(page.locator(".msg.assistant").last).to_contain_text("An answer to take along.")

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document | {"version": 9}))
    with page.expect_file_chooser() as chooser:
        page.click("#import-session")
    chooser.value.set_files(str(bad))
    expect(page.locator(".toast.error").last).to_contain_text("version")
    assert len(live.api("sessions", query=f"projectid={project['id']}")["sessions"]) == 2
