"""Total.js projects in the browser: a self-checked answer (arriving whole) with its validation
part beside it, Save as blocked by an error and asking first after a warning, and the Forge
documentation a prompt was given, shown under the prompt as text, and the Total.js check of a
step's edited files; against the real server, the
scripted model and a local documentation server (no internet)."""

import json
import os

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.tools.test_fetch import Server, answer, response
from tests.ui.harness import CHROMIUM, open_session, send, shot
from totem.workspace.forge import ForgeDocs

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

PACKAGE = json.dumps({"name": "app", "dependencies": {"total5": "1"}})
UNBALANCED = ("Add the route:\n\n```js\nROUTE('GET /', function($) {\n    $.plain('hi');\n\n```\n\n"
              "It answers `hi`.")
WARNED = ("First the placeholder:\n\n```js\n```\n\nThen the code:\n\n```js\nconst total = 1;\n"
          "console.log(total);\n```\n")
INDEX = """# Total.js
## Pages
- [Routing <em>guide</em>](/total5/routing/): ROUTE() for HTTP, WebSocket and file routes
- [Schemas](/total5/schemas/): NEWSCHEMA() and validation of data
"""
BAD = "rgb(207, 34, 46)"  # --bad of the light theme
ROUTING = (b"<html><body><h1>Routing</h1><p>ROUTE('GET /api/users/', action) registers a route. "
           b"Write &lt;b&gt;bold&lt;/b&gt; in a view.</p></body></html>")


def checked_session(live, name):
    """A session of a Total.js project whose answers are self-checked (no documentation)."""
    project = live.project(name, {"package.json": PACKAGE})
    session = live.session(project, name.capitalize())
    for key, value in (("selfcheck", True), ("forgedocs", False)):
        live.api("settings_save", {"scope": "session", "sessionid": session["id"], "key": key, "value": value})
    return project, session


def test_error_shows_the_problems_and_blocks_save_as(live, page):
    """An answer whose JS block is unbalanced arrives whole, rendered as Markdown with its Save
    as buttons; the validation part beside it lists the error with its block and line; Save as
    says why it is blocked and offers no path, and nothing is written."""
    project, session = checked_session(live, "checked")
    open_session(page, project, session)
    live.model.script(reply(UNBALANCED))
    send(page, "Add a route")
    answer_ = page.locator(".msg.assistant").last
    expect(answer_.locator(".md p").last).to_have_text("It answers hi.")
    expect(answer_.locator(".md p code")).to_have_text("hi")
    check = answer_.locator(".part.validation")
    expect(check).to_have_class("part validation blocking")
    expect(check.locator(".validation-head")).to_have_text("This answer's code needs review: Save as is blocked")
    problem = check.locator("li.problem").first
    expect(problem).to_have_attribute("data-rule", "unbalanced")
    expect(problem.locator(".problem-severity")).to_have_text("error")
    expect(problem.locator(".problem-place")).to_have_text("block 1, line 1")
    block = answer_.locator(".codeblock")
    expect(page.locator("#stop")).to_be_hidden()  # once the run has ended, no event renders the answer again
    block.get_by_role("button", name="Save as").click()
    refusal = block.locator(".saveas-blocked")
    expect(refusal).to_contain_text("This answer's code needs review:")
    expect(refusal).to_contain_text("(block 1, line 1)")
    expect(refusal).to_contain_text("Nothing was saved")
    expect(block.locator("input.saveas-path")).to_have_count(0)
    shot(page, "totaljs-validation.png")
    refusal.get_by_role("button", name="Close").click()
    expect(refusal).to_have_count(0)
    assert sorted(os.listdir(project["path"])) == ["package.json"]
    assert [p["kind"] for m in live.api("sessions_messages", ident=session["id"])["messages"]
            for p in m["parts"] if m["role"] == "assistant"] == ["text", "validation"]


def test_the_check_of_an_edited_file_shows_its_file_and_line(live, page):
    """A step's write of a .js file with an unbalanced route: the step shows the Total.js check
    as one of the project's checks, with the file and line of the problem; the file stays as
    written."""
    project = live.project("edited", {"package.json": PACKAGE})
    session = live.session(project, "Edited")
    live.api("settings_save", {"scope": "session", "sessionid": session["id"], "key": "forgedocs", "value": False})
    open_session(page, project, session)
    code = "ROUTE('GET /', function($) {\n\t$.plain('hi');\n);\n"
    live.model.script(reply(tool_calls=[("write", {"path": "controllers/api.js", "content": code})]), reply("Done."))
    live.api("sessions_prompt", {"text": "Add a route", "model": live.modelref, "autoaccept": True},
             ident=session["id"])
    check = page.locator(".part.validation")
    expect(check.locator(".validation-head")).to_have_text("check totaljs controllers/api.js: 1 problem")
    expect(check.locator(".validation-head .badge.tool-check")).to_have_text("check totaljs")
    problem = check.locator("li.problem")
    expect(problem).to_have_attribute("data-rule", "unbalanced")
    expect(problem.locator(".problem-place")).to_have_text("controllers/api.js, line 3")
    expect(page.locator(".msg.assistant").last).to_contain_text("Done.")
    with open(os.path.join(project["path"], "controllers", "api.js")) as handle:
        assert handle.read() == code


def test_warning_asks_before_saving_and_saves_once_confirmed(live, page):
    """An answer with only a warning (an empty block): Save first lists the warning and writes
    nothing; "Not now" keeps the form; "Save anyway" writes the block."""
    project, session = checked_session(live, "warned")
    open_session(page, project, session)
    live.model.script(reply(WARNED))
    send(page, "Count")
    answer_ = page.locator(".msg.assistant").last
    check = answer_.locator(".part.validation")
    expect(check).to_have_class("part validation")
    expect(check.locator(".validation-head")).to_have_text("This answer's code has 1 warning: Save as asks first")
    expect(check.locator(".problem-severity")).to_have_text(["warning"])
    block = answer_.locator(".codeblock").nth(1)
    expect(block.locator("code")).to_have_text("const total = 1;\nconsole.log(total);")
    expect(page.locator("#stop")).to_be_hidden()  # once the run has ended, no event renders the answer again
    block.get_by_role("button", name="Save as").click()
    block.locator("input.saveas-path").fill("count.js")
    block.get_by_role("button", name="Save", exact=True).click()
    warning = block.locator(".saveas-warnings")
    expect(warning).to_contain_text("This answer's code has a warning:")
    expect(warning.locator("li")).to_have_text(["code block 1 is empty: write its code or remove the block (block 1)"])
    assert not os.path.exists(os.path.join(project["path"], "count.js"))
    warning.get_by_role("button", name="Not now").click()
    expect(block.locator(".saveas-warnings")).to_have_count(0)
    assert not os.path.exists(os.path.join(project["path"], "count.js"))
    block.locator("input.saveas-path").press("Enter")
    block.get_by_role("button", name="Save anyway").click()
    expect(block.locator(".saveas-done")).to_have_text("Saved count.js (37 bytes)")
    with open(os.path.join(project["path"], "count.js")) as handle:
        assert handle.read() == "const total = 1;\nconsole.log(total);\n"


@pytest.fixture
def docs(live):
    """A local Forge documentation server, as the runs' documentation (forgeurl) while the test runs."""
    server = live.call(Server({"/llms.txt": answer(response(200, INDEX.encode(), "text/plain")),
                               "/total5/routing/": answer(response(200, ROUTING, "text/html"))}).__aenter__())
    knowledge = live.app.runs.parts.knowledge
    kept = knowledge.docs
    try:
        yield server, knowledge
    finally:
        knowledge.docs = kept
        live.call(server.__aexit__(None, None, None))


def test_forge_documentation_shown_under_the_prompt_as_text(live, page, docs):
    """The page the prompt was given is a collapsed "Forge documentation: <title>" under it, with
    its source link; opened, its text is text (markup in it and in its title stays text)."""
    server, knowledge = docs
    knowledge.docs = ForgeDocs(os.path.join(live.tmp, "forge-found"), server.url("/"))
    project = live.project("documented", {"package.json": PACKAGE})
    session = live.session(project, "Documented")
    open_session(page, project, session)
    live.model.script(reply("Use ROUTE."))
    send(page, "How do I add a websocket route?")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Use ROUTE.")
    part = page.locator(".msg.user .part.knowledge")
    expect(part.locator("summary .knowledge-title")).to_have_text("Forge documentation: Routing <em>guide</em>")
    expect(part).not_to_have_class("part knowledge failed")
    text = part.locator(".knowledge-text")
    expect(text).to_be_hidden()
    part.locator("summary").click()
    link = part.locator(".knowledge-source a")
    expect(link).to_have_attribute("href", server.url("/total5/routing/"))
    expect(link).to_have_attribute("target", "_blank")
    expect(text).to_contain_text("ROUTE('GET /api/users/', action) registers a route.")
    expect(text).to_contain_text("Write <b>bold</b> in a view.")
    assert part.locator("b, em").count() == 0
    shot(page, "totaljs-knowledge.png")
    expect(page.locator(".msg.user .part.text")).to_have_text("How do I add a websocket route?")


def test_forge_documentation_that_could_not_be_read_says_so(live, page, docs):
    """Documentation that could not be read: the part says so in sight, in the error style, and
    the run goes on."""
    server, knowledge = docs
    knowledge.docs = ForgeDocs(os.path.join(live.tmp, "forge-missing"), server.url("/missing/"))
    project = live.project("undocumented", {"package.json": PACKAGE})
    session = live.session(project, "Undocumented")
    open_session(page, project, session)
    live.model.script(reply("Without the documentation."))
    send(page, "How do I add a websocket route?")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Without the documentation.")
    part = page.locator(".msg.user .part.knowledge")
    expect(part).to_have_class("part knowledge failed")
    expect(part.locator(".knowledge-title")).to_have_text("Forge documentation: not read")
    note = part.locator(".knowledge-note")
    expect(note).to_be_visible()
    expect(note).to_contain_text("The Forge documentation could not be read")
    expect(note).to_contain_text("404")
    expect(note).to_have_css("color", BAD)
