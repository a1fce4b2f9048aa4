"""The browser UI, in Debian's Chromium driven by Playwright, against the real server and the
scripted model. Screenshots of the main screens go to screenshots/ at the repository root."""

import base64
import json
import os
import re
import subprocess
import threading
import time

import pytest
from playwright.sync_api import expect

from tests.model_server import FastStream, Stall, reply, text_chunks
from tests.ui.harness import CHROMIUM, open_session, send, shot
from tests.utils import TOKEN
from totem.security.permissions import ACTIONS as RULE_ACTIONS
from totem.tools import tool_kinds

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM} "
                                       "(`make test` installs it with apt-get)")

DOT_PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")






def git(root, *args):
    subprocess.run(["git", "-c", "user.name=Totem Tests", "-c", "user.email=tests@example.invalid", *args],
                   cwd=root, check=True, capture_output=True)


def test_login_open_project_and_stream_answer(live, context):
    """Sign in, open a folder from the folder browser, and watch an answer stream in two tabs."""
    project_root = os.path.join(live.tmp, "folders", "webapp")
    os.makedirs(os.path.join(project_root, "src"))
    for path, text in {"a.txt": "hello world\n", "README.md": "# webapp\n", "src/app.py": "print('hi')\n"}.items():
        with open(os.path.join(project_root, path), "w") as handle:
            handle.write(text)
    git(project_root, "init", "-q", "-b", "main")
    git(project_root, "add", ".")
    git(project_root, "commit", "-q", "-m", "first")
    with open(os.path.join(project_root, "a.txt"), "a") as handle:
        handle.write("changed\n")

    page = context.new_page()
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login$"))
    expect(page.locator("#projects")).to_have_count(0)  # nothing of the app before signing in
    shot(page, "login.png")
    page.fill("#token", "not-the-token-at-all")
    page.click("button[type=submit]")
    expect(page.locator("#error")).to_be_visible()
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")

    page.click("#open-folder")
    expect(page.locator("#folder-dialog")).to_be_visible()
    expect(page.locator("#folder-places")).to_contain_text("Home")
    page.fill("#folder-path", os.path.dirname(project_root))
    page.press("#folder-path", "Enter")
    page.click("#folder-items li[data-name=webapp]")
    expect(page.locator("#folder-path")).to_have_value(project_root)
    expect(page.locator("#folder-items")).to_contain_text("src")
    shot(page, "folder-browser.png")
    page.click("#folder-open")
    expect(page.locator("#folder-dialog")).to_be_hidden()
    expect(page.locator("#projects li.active")).to_contain_text("webapp")

    # The file tree opens a folder on demand; git shows the branch and the changed file.
    expect(page.locator("#tree")).to_contain_text("README.md")
    expect(page.locator("#tree")).not_to_contain_text("app.py")
    page.click("#tree li.dir[data-path=src] > .name")
    expect(page.locator("#tree")).to_contain_text("app.py")
    expect(page.locator("#git .branch")).to_contain_text("main")
    expect(page.locator("#git .changes")).to_contain_text("a.txt")

    page.click("#new-session")
    expect(page.locator("#sessions li.active")).to_contain_text("New session")
    other = context.new_page()  # a second tab on the same session
    other.goto(page.url)
    expect(other.locator("#session-title")).to_have_text("New session")
    expect(other.locator("#connection")).to_have_attribute("data-state", "open")

    held = threading.Event()  # the answer waits after its first text delta until the page shows it streaming
    live.model.script(reply("## Result\n\nThe file says **hello world**.\n\n```python\nprint('hello world')\n```\n",
                            reasoning="Reading a.txt first.", interval=0.02, release=held, hold_after=6))
    send(page, "Look at a.txt")
    expect(page.locator(".part.text.streaming")).to_have_count(1)
    held.set()
    for tab in (page, other):
        expect(tab.locator(".msg.user").last).to_contain_text("Look at a.txt")
        expect(tab.locator(".msg.assistant .md").last).to_contain_text("The file says hello world.")
        expect(tab.locator(".msg.assistant .md strong").last).to_have_text("hello world")
        expect(tab.locator("#sessions li.active")).to_contain_text("Look at a.txt")  # named by the prompt
        expect(tab.locator("#session-title")).to_have_text("Look at a.txt")
        expect(tab.locator("#session-status")).to_have_text("idle")
    reasoning = page.locator("details.reasoning")
    expect(reasoning).not_to_have_attribute("open", "")
    reasoning.locator("summary").click()
    expect(reasoning).to_contain_text("Reading a.txt first.")
    expect(page.locator(".codeblock code")).to_have_text("print('hello world')")
    expect(page.locator(".codeblock button.copy")).to_be_visible()
    shot(page, "conversation.png")


def test_permission_always_and_denied_tool(live, page, context):
    """A permission question shows tool, input and patterns; "always" saves the rule; a denied call shows why."""
    project = live.project("guarded", {".env": "DATABASE_PASSWORD=hunter2\n", "a.txt": "hello\n"})
    session = live.session(project, "Secrets")
    open_session(page, project, session)
    other = context.new_page()  # a second tab: it sees the question, and sees it answered
    open_session(other, project, session)
    live.model.script(reply(tool_calls=[("read", {"path": ".env"})]),
                      reply(tool_calls=[("read", {"path": "../../etc/passwd"})]),
                      reply("All done."))
    send(page, "Read the env file")
    card = page.locator(".ask.permission")
    expect(card).to_be_visible()
    expect(card.locator(".ask-tool")).to_have_text("read")
    expect(card.locator(".ask-input")).to_contain_text('"path": ".env"')
    expect(card.locator(".patterns")).to_contain_text(".env")
    expect(page.locator(".part.tool.status-pending")).to_contain_text(".env")
    shot(page, "permission.png")
    expect(other.locator(".ask.permission .ask-tool")).to_have_text("read")
    card.locator("input[type=radio][value='.env']").check()
    card.get_by_role("button", name="Always allow").click()
    expect(page.locator("#confirm-details code")).to_have_text([".env"])  # what it stores, confirmed apart
    page.locator("#confirm-ok").click()
    expect(card).to_have_count(0)
    expect(other.locator(".ask.permission")).to_have_count(0)
    other.close()
    expect(page.locator(".part.tool.status-done")).to_contain_text(".env")
    denied = page.locator(".part.tool.status-denied")
    expect(denied).to_contain_text("denied")
    expect(denied.locator(".tool-note")).to_contain_text("outside the project")
    expect(page.locator(".msg.assistant .md").last).to_have_text("All done.")

    # The rule that "always" saved, in the rules dialog; add one and remove the saved one.
    page.click("#open-rules")
    saved = page.locator("#rule-list tr.layer-project", has_text=".env")
    expect(saved).to_contain_text("allow")
    # The editor offers every name of the tool registry (task and fetch among them), then *.
    expect(page.locator("#rule-tool option")).to_have_text([*tool_kinds(), "*"])
    expect(page.locator("#rule-action option")).to_have_text(list(RULE_ACTIONS))
    page.select_option("#rule-tool", "bash")
    page.fill("#rule-pattern", "git log *")
    page.click("#rule-form button[type=submit]")
    expect(page.locator("#rule-list tr.layer-project", has_text="git log *")).to_be_visible()
    shot(page, "rules.png")
    saved.get_by_role("button", name="Remove").click()
    saved.get_by_role("button", name="Remove?").click()
    expect(saved).to_have_count(0)
    rules = live.api("permissions", query=f"projectid={project['id']}")
    assert [(r["tool"], r["pattern"]) for r in rules if r["layer"] == "project"] == [("bash", "git log *")]


def test_compound_bash_question_always_per_command(live, page):
    """A compound line's question shows the folder, the description, hidden characters written
    out, and one choice per command that asks; "Always allow" stores a rule for each."""
    project = live.project("compound", {"a.txt": "hello\n"})
    session = live.session(project, "Compound")
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[("bash", {"command": "git status && touch made && echo hi",
                                                  "description": "Make a file"})]),
                      reply(tool_calls=[("bash", {"command": "echo \u202eabc"})]),
                      reply("Done."))
    send(page, "Make it")
    card = page.locator(".ask.permission")
    expect(card).to_be_visible()
    expect(card.locator(".ask-description")).to_have_text("Make a file")
    expect(card.locator(".ask-folder")).to_contain_text(os.path.realpath(project["path"]))
    groups = card.locator(".patterns")
    expect(groups).to_have_count(2)
    expect(groups.nth(0).locator(".pattern-command")).to_have_text("touch made")
    expect(groups.nth(1).locator(".pattern-command")).to_have_text("echo hi")
    groups.nth(1).locator("input[type=radio][value='echo hi *']").check()
    shot(page, "permission-compound.png")
    card.get_by_role("button", name="Always allow").click()
    expect(page.locator("#confirm-details code")).to_have_text(["touch made", "echo hi *"])
    page.locator("#confirm-ok").click()
    hidden = page.locator(".ask.permission")
    expect(hidden.locator(".ask-input")).to_contain_text("<U+202E>abc")
    expect(hidden.locator(".ask-reason")).to_contain_text("U+202E")
    hidden.get_by_role("button", name="Reject").click()
    expect(page.locator(".msg.assistant .md").last).to_have_text("Done.")
    rules = live.api("permissions", query=f"projectid={project['id']}")
    assert [(r["tool"], r["pattern"]) for r in rules if r["layer"] == "project"] == [
        ("bash", "touch made"), ("bash", "echo hi *")]


def test_question_in_another_session_and_todos(live, page):
    """A question that waits in a session off screen is marked in the list and answered there; the task list follows."""
    project = live.project("multi", {"a.txt": "x\n"})
    alpha = live.session(project, "Alpha")
    beta = live.session(project, "Beta")
    open_session(page, project, beta)
    items = [{"text": "read the code", "status": "done"}, {"text": "choose indentation", "status": "in_progress"}]
    live.model.script(reply(tool_calls=[("todo", {"items": items})]),
                      reply(tool_calls=[("ask", {"question": "Tabs or spaces?", "options": ["tabs", "spaces"]})]),
                      reply("Tabs it is."))
    live.prompt(alpha, "Plan the work")
    row = page.locator(f"#sessions li[data-id='{alpha['id']}']")
    expect(row.locator(".waiting")).to_have_text("? 1")
    expect(row).to_have_attribute("data-status", "running")
    expect(page).to_have_title(re.compile(r"^\(1\) "))
    expect(page.locator(".ask")).to_have_count(0)  # not on screen: Beta has no question
    shot(page, "question-waiting.png")

    row.click()
    card = page.locator(".ask.question")
    expect(card).to_contain_text("Tabs or spaces?")
    expect(page.locator("#todos")).to_contain_text("choose indentation")
    card.get_by_role("button", name="tabs").click()
    expect(page.locator(".msg.assistant .md").last).to_have_text("Tabs it is.")
    expect(row.locator(".waiting")).to_have_count(0)
    expect(row).to_have_attribute("data-status", "idle")
    expect(page.locator("#todos li.done")).to_contain_text("read the code")

    # Rename, /new and remove.
    row.get_by_role("button", name="Rename").click()
    page.fill("#sessions input.rename", "Alpha, renamed")
    page.press("#sessions input.rename", "Enter")
    expect(row).to_contain_text("Alpha, renamed")
    assert live.api("sessions_read", ident=alpha["id"])["name"] == "Alpha, renamed"
    send(page, "/new")
    expect(page.locator("#sessions li")).to_have_count(3)
    expect(page.locator("#session-title")).to_have_text("New session")
    fresh = page.locator("#sessions li.active")
    fresh.get_by_role("button", name="Remove this session").click()
    page.locator("#confirm-ok").click()  # asked in the page's dialog
    expect(page.locator("#sessions li")).to_have_count(2)


def test_escape_aborts_run(live, page):
    """Escape stops a streaming run; the part and the session end as aborted."""
    project = live.project("aborting", {"a.txt": "x\n"})
    session = live.session(project, "Long answer")
    open_session(page, project, session)
    live.model.script(Stall(events=text_chunks("partial answer")))
    send(page, "Write a long essay")
    expect(page.locator(".msg.assistant .part.text")).to_contain_text("partial answer")
    expect(page.locator("#stop")).to_be_visible()
    expect(page.locator(".working")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#session-status")).to_have_text("aborted")
    expect(page.locator("#stop")).to_be_hidden()
    expect(page.locator("#send")).to_be_visible()
    expect(page.locator(".working")).to_be_hidden()
    live.call(live.model.wait_disconnect(2.0))
    assert live.wait_run_end(session) == "aborted"


def stored_text_parts(live, session):
    messages = live.api("sessions_messages", ident=session["id"])["messages"]
    return [part["text"] for message in messages if message["role"] == "assistant"
            for part in message["parts"] if part["kind"] == "text"]


@pytest.mark.parametrize("snapshot", ["before the run", "after the flush"])
def test_events_during_load_are_not_lost_under_the_snapshot(live, page, snapshot):
    """A run that starts while the page reads the stored state: its events are applied on top of the
    snapshot, whether it was read before the run began or after the streamed text was flushed."""
    project = live.project("loading", {"a.txt": "x\n"})
    session = live.session(project, f"Snapshot {snapshot}")
    held = {}

    def hold(route):
        name = route.request.url.split("/api/")[1].split("/")[0]
        held[name] = (route, route.fetch() if snapshot == "before the run" else None)

    for name in ("sessions_messages", "sessions_read"):
        page.route(f"**/api/{name}/**", hold)
    page.goto(f"/#/{project['id']}/{session['id']}")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")
    while len(held) < 2:
        page.wait_for_timeout(20)

    live.model.script(Stall(events=text_chunks("streamed while loading")))
    live.prompt(session, "Answer while the page loads")
    deadline = time.monotonic() + 10
    while stored_text_parts(live, session) != ["streamed while loading"]:  # flushed within a second
        assert time.monotonic() < deadline, stored_text_parts(live, session)
        page.wait_for_timeout(50)
    for route, response in held.values():
        route.fulfill(response=response or route.fetch())
    page.unroute_all()  # later reads (the one at the end of the run) go straight through

    expect(page.locator("#session-status")).to_have_text("running")
    expect(page.locator("#stop")).to_be_visible()
    expect(page.locator(".msg.user")).to_have_count(1)
    expect(page.locator(".msg.assistant .part.text")).to_have_text("streamed while loading")
    page.keyboard.press("Escape")
    expect(page.locator("#session-status")).to_have_text("aborted")
    assert live.wait_run_end(session) == "aborted"


def test_folder_browser_keeps_the_folder_last_asked_for(live, page):
    """The folder browser's first listing (the home folder), answered after the person typed a
    path and went to it, neither shows the home folder again nor writes over the path box."""
    project = live.project("folder-race", {"a.txt": "x\n"})
    session = live.session(project, "Folders")
    target = os.path.join(live.tmp, "folder-race-target")
    os.makedirs(os.path.join(target, "inner"), exist_ok=True)
    open_session(page, project, session)
    held = []
    page.route("**/api/folders*", lambda route: route.continue_() if held else held.append((route, route.fetch())))
    page.click("#open-folder")
    expect(page.locator("#folder-dialog")).to_be_visible()
    while not held:
        page.wait_for_timeout(20)
    page.fill("#folder-path", target)
    page.press("#folder-path", "Enter")
    expect(page.locator("#folder-chosen")).to_have_text(target)
    expect(page.locator("#folder-items li[data-name=inner]")).to_be_visible()
    page.fill("#folder-path", target + "/inn")  # typing goes on while the late answer comes

    route, response = held[0]
    route.fulfill(response=response)
    page.unroute_all()
    # The late answer has been read by the page (its resource entry), and handled (a task later).
    page.wait_for_function("() => performance.getEntriesByType('resource')"
                           ".filter((entry) => entry.name.includes('/api/folders')).length >= 2")
    page.evaluate("() => new Promise((done) => setTimeout(() => setTimeout(done)))")
    expect(page.locator("#folder-chosen")).to_have_text(target)
    expect(page.locator("#folder-items li[data-name=inner]")).to_be_visible()
    expect(page.locator("#folder-path")).to_have_value(target + "/inn")


def test_status_announced_while_the_session_list_loads(live, page):
    """A run that starts while the page reads the session list shows as running in the list."""
    project = live.project("listing", {"a.txt": "x\n"})
    busy = live.session(project, "Busy")
    quiet = live.session(project, "Quiet")
    held = []
    page.route(lambda url: "/api/sessions?" in url, lambda route: held.append((route, route.fetch())))
    page.goto(f"/#/{project['id']}/{quiet['id']}")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")
    while not held:
        page.wait_for_timeout(20)

    live.model.script(Stall(events=text_chunks("busy busy")))
    live.prompt(busy, "Keep busy")
    deadline = time.monotonic() + 10
    while not live.open_parts(busy):
        assert time.monotonic() < deadline
        page.wait_for_timeout(20)
    page.wait_for_timeout(300)  # the announcement reaches the page while the list is still held
    for route, response in held:
        route.fulfill(response=response)
    page.unroute_all()

    expect(page.locator(f"#sessions li[data-id='{busy['id']}']")).to_have_attribute("data-status", "running")
    expect(page.locator("#session-title")).to_have_text("Quiet")
    live.api("sessions_abort", ident=busy["id"], method="POST")
    expect(page.locator(f"#sessions li[data-id='{busy['id']}']")).to_have_attribute("data-status", "aborted")


def test_markup_from_model_and_files_is_text(live, page, watched):
    """<script>, <img onerror> and javascript: links from the model, a tool or a file name render as text."""
    evil_name = "<img src=x onerror=alert(1)>.txt"
    project = live.project("hostile", {"evil.html": "<script>window.__pwned='file'</script><img src=x onerror=alert(5)>",
                                       evil_name: "x"})
    session = live.session(project, "Hostile")
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    open_session(page, project, session)
    expect(page.locator("#tree")).to_contain_text(evil_name)
    answer = ("Look: <script>window.__pwned = 'script'</script> and <img src=x onerror=\"window.__pwned='img';alert(1)\">\n\n"
              "[click me](javascript:window.__pwned='link') and [safe docs](https://example.com/docs) and "
              "![tracker](https://example.com/pixel.png) and <a href=\"javascript:alert(2)\">raw</a>\n\n"
              "<iframe src=\"javascript:alert(3)\"></iframe>\n\n```html\n<script>alert(4)</script>\n```\n")
    live.model.script(reply(tool_calls=[("read", {"path": "evil.html"})]), reply(answer))
    send(page, "Show me <b>bold</b> <script>window.__pwned='prompt'</script>")
    md = page.locator(".msg.assistant .md").last
    expect(md).to_contain_text("<script>window.__pwned = 'script'</script>")
    expect(md).to_contain_text("<img src=x onerror=\"window.__pwned='img';alert(1)\">")
    expect(md).to_contain_text("[click me](javascript:window.__pwned='link')")
    expect(md).to_contain_text('<iframe src="javascript:alert(3)"></iframe>')
    expect(page.locator(".msg.user").last).to_contain_text("<script>window.__pwned='prompt'</script>")
    assert page.locator(".conversation script, .conversation iframe, .md img, .msg.user img").count() == 0
    assert page.locator("a[href^='javascript' i]").count() == 0
    safe = md.get_by_role("link", name="safe docs")
    expect(safe).to_have_attribute("href", "https://example.com/docs")
    expect(safe).to_have_attribute("target", "_blank")
    expect(safe).to_have_attribute("rel", re.compile(r"\bnoopener\b"))
    expect(md.locator("a.image-link")).to_contain_text("tracker")  # an image is a link, never loaded
    tool = page.locator(".part.tool").last
    tool.locator("summary").click()
    expect(tool.locator(".tool-output")).to_contain_text("<script>window.__pwned='file'</script>")
    page.locator(".codeblock button.copy").click()
    expect(page.locator(".codeblock button.copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "<script>alert(4)</script>"
    shot(page, "markup-as-text.png")
    assert page.evaluate("window.__pwned") is None
    assert watched.dialogs == []
    assert not [url for url in requests if "example.com" in url or url.rstrip("/").endswith("/x")]


def test_reconnect_after_server_restart(live, page, context):
    """After a restart the page reconnects, reloads what happened meanwhile and streams live again."""
    project = live.project("restart", {"a.txt": "x\n"})
    session = live.session(project, "Survivor")
    live.model.script(reply("Before the restart."))
    live.prompt(session, "First question")
    assert live.wait_run_end(session) == "idle"
    loads = []
    page.on("request", lambda request: loads.append(request.url) if "sessions_messages" in request.url else None)
    open_session(page, project, session)
    expect(page.locator(".conversation")).to_contain_text("Before the restart.")

    context.set_offline(True)  # the page must not come back before the session has moved on
    live.stop_app()
    expect(page.locator("#connection")).to_have_attribute("data-state", "closed")
    expect(page.locator("#connection")).to_have_text("Reconnecting…")
    shot(page, "reconnecting.png")
    live.start_app()
    live.model.script(reply("Written while the page was away."))
    live.prompt(session, "Second question")
    assert live.wait_run_end(session) == "idle"
    before = len(loads)
    context.set_offline(False)
    expect(page.locator("#connection")).to_have_attribute("data-state", "open", timeout=15_000)
    expect(page.locator(".conversation")).to_contain_text("Written while the page was away.")
    assert len(loads) > before  # the stored state was read again (Sessions|messages)

    live.model.script(reply("Live after the restart.", interval=0.02))
    send(page, "Third question")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Live after the restart.")
    expect(page.locator(".msg.user")).to_have_count(3)


def test_providers_dialog(live, page):
    """Providers: add with a template, see its models, change it without the key, detect, remove."""
    page.goto("/")
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")
    page.click("#open-providers")
    dialog = page.locator("#providers-dialog")
    expect(dialog.locator("#provider-list")).to_contain_text("Scripted")
    page.click("#provider-add")
    page.select_option("#provider-template", "openai")
    expect(page.locator("#provider-url")).to_have_value("https://api.openai.com/v1")
    page.fill("#provider-name", "Second")
    page.fill("#provider-url", live.model.url)
    page.fill("#provider-key", "sk-second-0123456789abcdef")
    page.click("#provider-check")
    expect(page.locator("#provider-models")).to_contain_text("scripted-model")
    shot(page, "providers.png")
    page.click("#provider-form button[type=submit]")
    card = dialog.locator("#provider-list li", has_text="Second")
    expect(card).to_contain_text("key saved")
    assert "sk-second-0123456789abcdef" not in page.content()

    card.get_by_role("button", name="Change").click()
    expect(page.locator("#provider-key")).to_have_value("")  # write-only: never filled
    expect(page.locator("#provider-key")).to_have_attribute("placeholder", re.compile("leave empty to keep"))
    page.fill("#provider-name", "Second, edited")
    page.click("#provider-form button[type=submit]")
    expect(dialog.locator("#provider-list")).to_contain_text("Second, edited")
    second = [p for p in live.api("providers") if p["name"] == "Second, edited"][0]
    assert second["haskey"] is True

    page.click("#provider-detect")
    expect(page.locator("#detected")).to_contain_text("llama.cpp")
    expect(page.locator("#detected")).to_contain_text("scripted-model")

    card = dialog.locator("#provider-list li", has_text="Second, edited")
    card.get_by_role("button", name="Remove").click()
    card.get_by_role("button", name="Remove?").click()
    expect(card).to_have_count(0)
    assert [p["name"] for p in live.api("providers")] == ["Scripted"]
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.click("#model")
    expect(page.locator("#model-list [role=option]", has_text="scripted-model")).to_have_count(1)
    page.keyboard.press("Escape")
    expect(page.locator("#model-popup")).to_be_hidden()


def test_attachments_and_keyboard(live, page):
    """Shift+Enter makes a new line; files picked, pasted and dropped are sent with the prompt."""
    project = live.project("attach", {"a.txt": "x\n"})
    session = live.session(project, "Files")
    open_session(page, project, session)
    asked = len(live.model.requests)
    page.fill("#prompt", "line one")
    page.press("#prompt", "Shift+Enter")
    page.keyboard.type("line two")
    expect(page.locator("#prompt")).to_have_value("line one\nline two")
    assert len(live.model.requests) == asked

    with page.expect_file_chooser() as chooser:
        page.click("#attach")
    chooser.value.set_files(files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"remember me"}])
    page.evaluate("""() => {
        const data = new DataTransfer();
        data.items.add(new File(['pasted text'], 'pasted.txt', { type: 'text/plain' }));
        document.getElementById('prompt').dispatchEvent(new ClipboardEvent('paste', { clipboardData: data, bubbles: true, cancelable: true }));
    }""")
    page.evaluate("""(b64) => {
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const data = new DataTransfer();
        data.items.add(new File([bytes], 'dot.png', { type: 'image/png' }));
        const target = document.querySelector('.conversation');
        target.dispatchEvent(new DragEvent('dragover', { dataTransfer: data, bubbles: true, cancelable: true }));
        target.dispatchEvent(new DragEvent('drop', { dataTransfer: data, bubbles: true, cancelable: true }));
    }""", base64.b64encode(DOT_PNG).decode())
    expect(page.locator("#files .chip")).to_have_count(3)
    expect(page.locator("#files .chip img")).to_have_count(1)
    shot(page, "attachments.png")
    page.select_option("#mode", "plan")
    page.select_option("#reasoning", "high")
    page.check("#autoaccept")
    live.model.script(reply("Got three files."))
    page.press("#prompt", "Enter")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Got three files.")
    user = page.locator(".msg.user").last
    expect(user).to_contain_text("line one\nline two")
    expect(user.locator(".attachments .file")).to_have_count(3)
    expect(user.locator(".attachments img")).to_have_count(1)
    expect(page.locator("#files .chip")).to_have_count(0)
    content = [m for m in live.model.requests[-1].body["messages"] if m["role"] == "user"][-1]["content"]
    texts = " ".join(c.get("text", "") for c in content)
    assert "remember me" in texts and "pasted text" in texts
    assert "image_url" in [c["type"] for c in content]
    assert live.model.requests[-1].body["reasoning_effort"] == "high"
    stored = live.api("sessions_read", ident=session["id"])
    assert (stored["mode"], stored["autoaccept"], stored["model"]) == ("plan", True, live.modelref)

    # Forget the project: gone from the list, its folder stays.
    row = page.locator("#projects li.active")
    row.get_by_role("button", name="Forget this project").click()
    page.locator("#confirm-ok").click()  # asked in the page's dialog
    expect(page.locator("#projects li", has_text="attach")).to_have_count(0)
    expect(page.locator("#welcome")).to_be_visible()
    assert project["id"] not in [p["id"] for p in live.api("projects")]
    assert os.path.isdir(project["path"])


def test_long_session_renders_and_streams_without_rerendering(live, page):
    """A session of 2,000 parts opens fast, scrolls, and a new stream leaves the old parts' nodes alone."""
    project = live.project("long", {"a.txt": "x\n"})
    session = live.session(project, "Long history")
    live.call(fill_history(live.app.store, session["id"], exchanges=50, parts_each=40))
    started = time.monotonic()
    open_session(page, project, session)
    expect(page.locator("[data-part]")).to_have_count(2000)
    opened = time.monotonic() - started
    frames = page.evaluate("""async () => {
        const box = document.querySelector('.conversation');
        const gaps = [];
        let last = performance.now();
        for (let step = 0; step <= 40; step++) {
            box.scrollTop = box.scrollHeight * (1 - step / 40);
            await new Promise(requestAnimationFrame);
            const now = performance.now();
            gaps.push(now - last);
            last = now;
        }
        return gaps;
    }""")
    print(f"\n2,000 parts: shown in {opened:.2f} s; scrolling frames: max {max(frames):.0f} ms, "
          f"median {sorted(frames)[len(frames) // 2]:.0f} ms")
    assert opened < 8, opened
    assert sorted(frames)[len(frames) // 2] < 100, frames
    page.evaluate("document.querySelector('.conversation').scrollTop = 6000")
    shot(page, "long-session.png")
    page.evaluate("document.querySelector('[data-part]').dataset.mark = 'kept'")
    page.evaluate("document.querySelector('.conversation').scrollTop = 1e9")
    live.model.script(FastStream(deltas=2000, text="word "))
    send(page, "Stream a lot")
    expect(page.locator("#session-status")).to_have_text("idle")
    expect(page.locator(".msg.assistant .md").last).to_have_text(" ".join(["word"] * 2000))
    assert page.evaluate("document.querySelector('[data-part]').dataset.mark") == "kept"


async def fill_history(store, sessionid, exchanges, parts_each):
    """Store a long conversation at once: questions, and answers of text, reasoning and tool parts."""
    rows, parts = [], []
    now = int(time.time() * 1000)
    for index in range(exchanges):
        question, answer = store.ids.new(), store.ids.new()
        rows += [(question, sessionid, "user", "{}", now), (answer, sessionid, "assistant", "{}", now)]
        parts.append((store.ids.new(), question, sessionid, "text", "done", f"Question {index}: what next?", "{}",
                      now, now, now))
        for number in range(parts_each - 1):
            kind = ("text", "reasoning", "tool", "tool")[number % 4]
            text = {"text": f"Step {index}.{number}: **bold**, `code` and a [link](https://example.com/{number}).\n\n"
                            "- one\n- two\n\n```python\nprint('x')\n```",
                    "reasoning": "Considering the options."}.get(kind, "")
            data = json.dumps({"callid": f"call_{index}_{number}", "tool": "read",
                               "arguments": json.dumps({"path": f"src/file{number}.py"}),
                               "input": {"path": f"src/file{number}.py"}, "output": "line\nline"}) if kind == "tool" else "{}"
            parts.append((store.ids.new(), answer, sessionid, kind, "done", text, data, now, now, now))

    def write(connection):
        connection.executemany("INSERT INTO messages (id, sessionid, role, data, created) VALUES (?, ?, ?, ?, ?)", rows)
        connection.executemany("INSERT INTO parts (id, messageid, sessionid, kind, status, text, data, created,"
                               " updated, closed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", parts)
    await store.write(write)


MARKDOWN_CASES = [
    ("# Title\n\nSome *em*, **strong**, `code` and ~~gone~~.",
     "<h1>Title</h1><p>Some <em>em</em>, <strong>strong</strong>, <code>code</code> and <del>gone</del>.</p>"),
    ("- a\n  - b\n- c", "<ul><li>a<ul><li>b</li></ul></li><li>c</li></ul>"),
    ("3. x\n4. y", '<ol start="3"><li>x</li><li>y</li></ol>'),
    ("- [x] done\n- [ ] open", '<ul><li class="task"><span class="check done" aria-hidden="true">☑</span> done</li>'
                               '<li class="task"><span class="check" aria-hidden="true">☐</span> open</li></ul>'),
    ("| a | b |\n|---|--:|\n| 1 | 2 |", '<div class="table"><table><thead><tr><th>a</th><th class="align-right">b</th>'
                                       '</tr></thead><tbody><tr><td>1</td><td class="align-right">2</td></tr></tbody></table></div>'),
    ("> quoted\n> more", "<blockquote><p>quoted\nmore</p></blockquote>"),  # a soft break, not <br>
    ("snake_case_name and 2 * 3 * 4", "<p>snake_case_name and 2 * 3 * 4</p>"),
    ("<b>hi</b> &amp;", "<p>&lt;b&gt;hi&lt;/b&gt; &amp;</p>"),  # HTML as text, the entity as its character
    ("[x](javascript:alert(1)) [y](data:text/html,hi) [z](/relative)",
     "<p>[x](javascript:alert(1)) [y](data:text/html,hi) [z](/relative)</p>"),
    ("see https://example.com/a.", '<p>see <a href="https://example.com/a" target="_blank" rel="noopener noreferrer" '
                                   'title="https://example.com/a">https://example.com/a</a>.</p>'),
    ("---", "<hr>"),
    ("```js\nlet a = '<b>';", '<div class="codeblock"><div class="codebar"><span>js</span><button type="button" '
                              'class="copy" title="Copy to the clipboard">Copy</button></div><pre><code>let a = \'&lt;b&gt;\';'
                              '</code></pre></div>'),
]


def test_markdown_renderer_shapes(live, page):
    """The renderer builds the expected elements, and markup in the source stays text."""
    page.goto("/login")  # any page of the origin: the module is imported on its own
    results = page.evaluate("""async (cases) => {
        const { renderMarkdown } = await import('/markdown.js');
        return cases.map((source) => {
            const box = document.createElement('div');
            box.append(renderMarkdown(source));
            return box.innerHTML;
        });
    }""", [source for source, _ in MARKDOWN_CASES])
    for (source, expected), got in zip(MARKDOWN_CASES, results, strict=True):
        assert got == expected, (source, got)
