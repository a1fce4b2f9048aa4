"""Project MCP servers in the browser: the Servers panel (each server's definition and state, the
files that cannot be used), the question before a server starts (its command line, its variables
with their values, a secret-looking one masked, the variables that load code flagged, the project
files it runs and what changed since its approval), the start's line in the conversation, the
question of an MCP tool's call, and Save as of a file an approved server runs; against the real
server, the scripted model and a stdio MCP server of the standard library
(tests/mcp_servers/scripted_server.py, tools `first` and `second.page`)."""

import json
import os
import re
import shlex
import sys

import pytest
from playwright.sync_api import expect

from tests.model_server import reply
from tests.ui.harness import CHROMIUM, open_session, send, shot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")

SERVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mcp_servers",
                      "scripted_server.py")
SECRET = "value-never-shown-4242"  # a variable's value: the page never gets it
HEADER_SECRET = "Bearer header-value-never-shown"


def mcp_json(**servers) -> str:
    return json.dumps({"mcpServers": servers})


def stdio_server() -> dict:
    return {"command": sys.executable, "args": [SERVER], "env": {"VERSION": "2025-06-18", "API_TOKEN": SECRET}}


def test_servers_panel_lists_definitions_states_and_invalid_files(live, page):
    """Before any run: each server with its file, transport, command line (or URL and host), the
    names of its variables or headers and "not started"; a file that is not JSON and a bad
    definition are listed with their errors. No value of a variable or header reaches the page."""
    project = live.project("servers-listed", {
        ".mcp.json": mcp_json(
            quirky=stdio_server(),
            tracker={"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": HEADER_SECRET}},
            broken={"command": 42}),
        ".totem/mcp.json": "{not json",
    })
    session = live.session(project, "Listed")
    open_session(page, project, session)
    panel = page.locator("#servers")
    quirky = panel.locator("li.server[data-server=quirky]")
    expect(quirky.locator(".server-state")).to_have_text("not started")
    expect(quirky.locator(".server-file")).to_have_text(".mcp.json")
    expect(quirky.locator(".server-transport")).to_have_text("stdio")
    expect(quirky.locator(".server-command")).to_have_text(f"$ {sys.executable} {SERVER}")
    expect(quirky.locator(".server-names")).to_have_text("variables API_TOKEN, VERSION")
    tracker = panel.locator("li.server[data-server=tracker]")
    expect(tracker.locator(".server-state")).to_have_text("not started")
    expect(tracker.locator(".server-url")).to_have_text("https://mcp.example.com/mcp")
    expect(tracker.locator(".server-host")).to_have_text("host mcp.example.com")
    expect(tracker.locator(".server-names")).to_have_text("headers Authorization")
    invalid = panel.locator("li.server-invalid")
    expect(invalid).to_have_count(2)
    expect(invalid.filter(has_text="broken")).to_contain_text(".mcp.json")
    expect(invalid.filter(has=page.locator("code", has_text=".totem/mcp.json")).locator(".server-error")).not_to_be_empty()
    expect(page.locator("#servers-count")).to_have_text("")
    text = page.locator("#panels").inner_text()
    assert SECRET not in text and "header-value" not in text
    shot(page, "servers-panel.png")


def test_start_asked_with_the_command_line_then_running_with_its_tools(live, page):
    """The start is asked with the exact command line and the variables' values, the secret
    one masked (its value never reaches the page); once allowed the conversation says "started (2 tools)", an MCP tool's call asks
    with server/tool and its arguments, and the Servers panel shows it running with its tools."""
    project = live.project("servers-started", {".mcp.json": mcp_json(quirky=stdio_server())})
    session = live.session(project, "Started")
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[("mcp__quirky__first", {"query": "<b>x</b>", "limit": 3})]), reply("Called it."))
    send(page, "Use the quirky server")

    card = page.locator(".ask.permission.mcp-start")
    expect(card.locator("header")).to_have_text("Start the MCP server quirky?")
    expect(card.locator(".ask-command")).to_have_text(f"$ {sys.executable} {SERVER}")
    expect(card.locator(".ask-variables li")).to_have_text(["API_TOKEN = hidden: it looks like a secret",
                                                            "VERSION = 2025-06-18"])
    expect(card.locator(".ask-files")).to_have_count(0)
    expect(card.locator(".ask-left-out li")).to_have_text(
        [f"{SERVER} is outside the project: its content is not covered"])
    expect(card).to_contain_text(".mcp.json")
    assert SECRET not in page.content()
    shot(page, "servers-question.png")
    card.get_by_role("button", name="Allow once").click()

    start = page.locator(".msg.servers .part.server-start[data-server=quirky]")
    expect(start.locator(".server-line")).to_have_text("MCP server quirky started (2 tools)")
    call = page.locator(".ask.permission[data-tool=mcp]")
    expect(call.locator("header")).to_have_text("Allow the MCP tool quirky/first?")
    expect(call.locator(".ask-arguments")).to_contain_text('"query": "<b>x</b>"')
    expect(call.locator(".ask-arguments")).to_contain_text('"limit": 3')
    assert call.locator("b").count() == 0
    call.get_by_role("button", name="Allow once").click()
    expect(page.locator(".msg.assistant .md").last).to_have_text("Called it.")

    quirky = page.locator("#servers li.server[data-server=quirky]")
    expect(quirky.locator(".server-state")).to_have_text("running")
    expect(quirky.locator(".server-tool")).to_have_text(["first", "second.page"])
    expect(page.locator("#servers-count")).to_have_text("1")
    start.locator("summary").click()
    expect(start.locator(".tool-output")).to_contain_text("quirky started with 2 tools: first, second.page")
    expect(start.locator(".decision")).to_contain_text("Allowed by you (once)")


def test_refused_start_says_not_started_and_the_panel_says_refused(live, page):
    """A start the person rejects reads "not started: the person refused it" in the
    conversation, as the problems of the files read one line each; the Servers panel shows the
    server refused in this session."""
    project = live.project("servers-refused", {".mcp.json": mcp_json(quirky=stdio_server(), broken={"command": 42}),
                                               ".totem/mcp.json": "[]"})
    session = live.session(project, "Refused")
    open_session(page, project, session)
    live.model.script(reply("Without it, then."))
    send(page, "Go on")
    card = page.locator(".ask.permission.mcp-start")
    expect(card).to_be_visible()
    card.get_by_role("button", name="Reject").click()
    start = page.locator(".msg.servers .part.server-start[data-server=quirky]")
    expect(start.locator(".server-line")).to_have_text("MCP server quirky not started: the person refused it")
    expect(start).to_have_class("part tool server-start status-denied")
    lines = page.locator(".msg.servers .server-line")
    expect(lines).to_have_text([
        "MCP servers of .totem/mcp.json: the file must hold a JSON object with mcpServers",
        "MCP server broken cannot be used: command must be a non-empty string (.mcp.json)",
        "MCP server quirky not started: the person refused it"])
    expect(page.locator(".msg.assistant .md").last).to_have_text("Without it, then.")
    quirky = page.locator("#servers li.server[data-server=quirky]")
    expect(quirky.locator(".server-state")).to_have_text("refused")


def test_never_start_holds_in_every_session_and_rules_say_it_in_words(live, page):
    """The start question offers the exact definition in words (never its 64-digit hash);
    "Never start…", once confirmed, refuses it in this session and the next ones without a
    question, says which rule refused it, and Rules lists that rule in words."""
    project = live.project("servers-never", {".mcp.json": mcp_json(quirky=stdio_server())})
    words = f"the MCP server quirky as `{sys.executable} {SERVER}`; a change asks again"
    first = live.session(project, "First")
    open_session(page, project, first)
    live.model.script(reply("Without it."))
    send(page, "Go on")
    card = page.locator(".ask.permission.mcp-start")
    expect(card.locator(".patterns .pattern-words")).to_have_text(words)
    expect(card.locator(".pattern-custom")).to_have_count(0)  # one exact definition: nothing to write
    assert not re.search(r"[0-9a-f]{64}", card.inner_text())
    card.get_by_role("button", name="Never start…").click()
    dialog = page.locator("#confirm-dialog")
    expect(page.locator("#confirm-question")).to_contain_text("refused from now on, in every session")
    expect(page.locator("#confirm-details")).to_have_text(words)
    page.locator("#confirm-ok").click()
    expect(dialog).to_be_hidden()
    line = page.locator(".msg.servers .part.server-start[data-server=quirky] .server-line")
    expect(line).to_have_text("MCP server quirky not started: the person refused it, and a rule of this project "
                              "refuses this definition from now on (Rules: remove it to be asked again)")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Without it.")

    second = live.session(project, "Second")
    open_session(page, project, second)
    live.model.script(reply("Still without it."))
    send(page, "Again")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Still without it.")
    expect(page.locator(".ask.permission")).to_have_count(0)
    expect(page.locator(".msg.servers .server-line")).to_have_text(
        f"MCP server quirky not started: a rule for this project refuses {words} (Rules: remove it to be asked again)")

    page.click("#open-rules")
    row = page.locator("#rule-list tr.layer-project", has_text="mcp-start")
    expect(row.locator(".rule-words")).to_have_text(words)
    expect(row.locator(".badge")).to_have_text("deny")
    assert re.fullmatch(r"quirky@[0-9a-f]{64}", row.locator(".rule-words").get_attribute("title"))


def test_question_of_a_remote_server_shows_url_host_and_header_names(live, page):
    """The question before a remote server starts names its URL, the host it connects to and
    its headers' names; its text stays text."""
    page.goto("/login")  # any page of the origin: the module is imported on its own
    shown = page.evaluate("""async () => {
        const { Questions } = await import('/questions.js');
        const questions = new Questions(document.createElement('div'), { onChange() {} });
        const card = questions.permissionCard({ id: 'q1', tool: 'mcp-start', patterns: ['tracker@abc'], input: {
            server: 'tracker', file: '.mcp.json', transport: 'http', url: 'https://mcp.example.com/mcp?<b>x</b>',
            host: 'mcp.example.com', headers: ['Authorization', 'X-Team'] } });
        const text = (selector) => [...card.querySelectorAll(selector)].map((e) => e.textContent);
        return { header: text('header'), url: text('.ask-url'), host: text('.ask-host'), names: text('.ask-names li'),
                 bold: card.querySelectorAll('b').length, label: card.getAttribute('aria-label') };
    }""")
    assert shown["header"] == ["Start the MCP server tracker?"]
    assert shown["url"] == ["https://mcp.example.com/mcp?<b>x</b>"]
    assert shown["host"] == ["It connects to the host mcp.example.com"]
    assert shown["names"] == ["Authorization", "X-Team"]
    assert shown["bold"] == 0
    assert shown["label"] == "Permission question: start the MCP server tracker?"


def test_question_of_a_changed_server_shows_what_changed_values_flags_and_files(live, page):
    """The question before a start says what changed since the approval, shows each variable's
    value or that it is hidden, marks a variable that makes programs load code with a warning and
    its reason, and lists the files the approval covers and what it leaves out; all as text."""
    page.goto("/login")  # any page of the origin: the module is imported on its own
    shown = page.evaluate("""async () => {
        const { Questions } = await import('/questions.js');
        const questions = new Questions(document.createElement('div'), { onChange() {} });
        const card = questions.permissionCard({ id: 'q2', tool: 'mcp-start', patterns: ['db@abc'], input: {
            server: 'db', file: '.mcp.json', transport: 'stdio', command: 'sh srv.sh', env: ['API_KEY', 'MODE', 'NODE_OPTIONS'],
            variables: [{ name: 'API_KEY', masked: true }, { name: 'MODE', value: '<b>fast</b>' },
                        { name: 'NODE_OPTIONS', value: '--require ./hook.js', loads: 'Node takes --require from it' }],
            files: ['lib.sh', 'srv.sh'], left_out: ['/opt/x.sh is outside the project: its content is not covered'],
            changed: ['srv.sh changed', 'the variable MODE has a new value'] } });
        const text = (selector) => [...card.querySelectorAll(selector)].map((e) => e.textContent);
        return { changed: text('.ask-changed li'), variables: text('.ask-variables li'), flagged: text('li.ask-loads .ask-name'),
                 flag: text('.ask-flag'), masked: text('.ask-masked'), files: text('.ask-files li'),
                 left: text('.ask-left-out li'), bold: card.querySelectorAll('b').length };
    }""")
    assert shown["changed"] == ["srv.sh changed", "the variable MODE has a new value"]
    assert shown["variables"] == ["API_KEY = hidden: it looks like a secret", "MODE = <b>fast</b>",
                                  "NODE_OPTIONS = --require ./hook.js⚠ loads code: Node takes --require from it"]
    assert shown["flagged"] == ["NODE_OPTIONS"]
    assert shown["flag"] == ["⚠ loads code: Node takes --require from it"]
    assert shown["masked"] == ["hidden: it looks like a secret"]
    assert shown["files"] == ["lib.sh", "srv.sh"]
    assert shown["left"] == ["/opt/x.sh is outside the project: its content is not covered"]
    assert shown["bold"] == 0


def test_save_as_of_a_file_an_approved_server_runs_says_why_before_replacing(live, page):
    """Save as of srv.sh, which an approved server runs, asks to replace it with the server's
    reason on the confirmation; confirmed, the file is written."""
    script = f"exec {shlex.quote(sys.executable)} {shlex.quote(SERVER)}\n"
    project = live.project("servers-saveas", {"srv.sh": script,
                                              ".mcp.json": mcp_json(quirky={"command": "sh", "args": ["srv.sh"]})})
    digest = live.api("projects_mcp", ident=project["id"])["servers"][0]["digest"]
    live.api("permissions_save", {"projectid": project["id"], "tool": "mcp-start", "pattern": f"quirky@{digest}",
                                  "action": "allow"})
    session = live.session(project, "Saving")
    open_session(page, project, session)
    live.model.script(reply("Here:\n\n```sh\necho replaced\n```\n"))
    send(page, "Write a script")
    block = page.locator(".msg.assistant .codeblock")
    expect(block.locator("code")).to_have_text("echo replaced")
    # The answer is drawn once more when its part closes, which would take an open form with it.
    assert live.wait_run_end(session) == "idle"
    expect(page.locator(".working")).to_be_hidden()
    block.get_by_role("button", name="Save as").click()
    block.locator("input.saveas-path").fill("srv.sh")
    block.get_by_role("button", name="Save", exact=True).click()
    confirm = block.locator(".saveas-confirm")
    expect(confirm.locator(".saveas-pinned")).to_have_text(
        "srv.sh is run by the MCP server quirky, approved to start without asking; a change would run without a question.")
    expect(confirm).to_contain_text("srv.sh exists. Replace?")
    with open(os.path.join(project["path"], "srv.sh")) as handle:
        assert handle.read() == script
    confirm.get_by_role("button", name="Replace").click()
    expect(block.locator(".saveas-done")).to_have_text("Replaced srv.sh (14 bytes)")
