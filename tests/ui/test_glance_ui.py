"""The small things that add up: usage at a glance, a draft per session, keyboard reach, queued
and steered prompts, Compact, the file tree kept current and errors in plain sentences. In
Debian's Chromium against the real server and the scripted model."""

import os
import re

import pytest
from playwright.sync_api import expect

from tests.model_server import Stall, reply, text_chunks, usage_chunk
from tests.ui.harness import CHROMIUM, open_session, send, shot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"the browser tests need Debian's Chromium at {CHROMIUM}")


def counted(text, prompt_tokens, completion_tokens):
    """A reply whose usage chunk gives these counts."""
    answer = reply(text, usage=False)
    answer.events.append(usage_chunk(prompt_tokens, completion_tokens))
    return answer


def message_rows(live, session):
    return live.api("sessions_messages", ident=session["id"])["messages"]


def test_usage_per_answer_and_per_session(live, page):
    """Each answer shows its tokens in and out (an estimate marked "~"), the session its sums and
    the context its last answer used against the model's window (a guessed window marked "~"),
    and a cost wherever the stored figures have one."""
    project = live.project("usage", {"a.txt": "x\n"})
    session = live.session(project, "Usage")
    open_session(page, project, session)
    live.model.script(counted("First answer.", 1234, 56))
    send(page, "First")
    answer = page.locator(".msg.assistant").last
    expect(answer.locator(".msg-usage")).to_have_text("1.2K in · 56 out")
    usage = page.locator("#session-usage")
    expect(usage.locator(".usage-total")).to_have_text("1.2K in · 56 out")
    # The scripted model's list gives no window: the OpenAI-compatible default, said to be a guess.
    expect(usage.locator(".usage-context")).to_have_text(re.compile(r"^context 1\.2K / ~32K\s*4%$"))
    expect(usage.locator("meter")).to_have_attribute("value", "4")

    live.model.script(reply("Second answer, not counted by the provider.", usage=False))
    send(page, "Second")
    second = page.locator(".msg.assistant").last
    expect(second.locator(".md")).to_have_text("Second answer, not counted by the provider.")
    expect(second.locator(".msg-usage")).to_have_text(re.compile(r"^~\d+(\.\d)?K? in · ~\d+ out$"))
    expect(usage.locator(".usage-total")).to_have_text(re.compile(r"^~\d\.\dK in · ~\d+ out$"))
    expect(usage.locator(".usage-context")).to_have_text(re.compile(r"^context ~"))
    assert live.api("sessions_read", ident=session["id"])["tokens"]["estimated"] is True

    # A cost stored with an answer's tokens is shown with them; none is shown where there is none.
    first = next(m for m in message_rows(live, session) if m["role"] == "assistant")
    data = {**first["data"], "tokens": {**first["data"]["tokens"], "cost": 0.0123}}
    live.call(live.app.store.finish_message(first["id"], first["usage"], data))
    page.reload()
    expect(page.locator(".msg.assistant").first.locator(".msg-usage")).to_have_text("1.2K in · 56 out · $0.01")
    if "cost" not in live.api("sessions_read", ident=session["id"])["tokens"]:
        expect(page.locator(".msg.assistant").last.locator(".msg-usage")).not_to_contain_text("$")
    shot(page, "usage.png")


def test_draft_belongs_to_its_session(live, page):
    """What is typed in one session's prompt box stays with it: switching sessions shows each
    one's own draft, and a prompt sent clears only its own."""
    project = live.project("drafts", {"a.txt": "x\n"})
    first = live.session(project, "First")
    second = live.session(project, "Second")
    open_session(page, project, first)
    prompt = page.locator("#prompt")
    prompt.fill("half a thought for the first")
    page.locator(f"#sessions li[data-id='{second['id']}']").click()
    expect(page.locator("#session-title")).to_have_text("Second")
    expect(prompt).to_have_value("")
    prompt.fill("the second's own")
    page.locator(f"#sessions li[data-id='{first['id']}']").click()
    expect(page.locator("#session-title")).to_have_text("First")
    expect(prompt).to_have_value("half a thought for the first")
    live.model.script(reply("Noted."))
    prompt.press("Enter")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Noted.")
    expect(prompt).to_have_value("")
    page.locator(f"#sessions li[data-id='{second['id']}']").click()
    expect(prompt).to_have_value("the second's own")


def tab_until(page, selector, limit=40):
    """Press Tab until the focus is on `selector`; fails when it never gets there."""
    for _ in range(limit):
        if page.evaluate("(s) => document.activeElement?.matches(s) ?? false", selector):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {selector}")


def test_attach_and_question_buttons_reached_with_tab(live, page):
    """Attach is a button in the Tab order after the prompt (Enter opens the file picker); the
    buttons of a permission question and of an ask question are reached with Tab once Alt+Q has
    moved the keyboard to the question."""
    project = live.project("tabbing", {"a.txt": "x\n"})
    session = live.session(project, "Tab")
    open_session(page, project, session)
    expect(page.locator("#prompt")).to_be_focused()  # the session shown gives the prompt the focus
    page.keyboard.press("Tab")
    expect(page.locator("#attach")).to_be_focused()
    page.evaluate("document.getElementById('file-input').addEventListener('click', () => { window.picking = true; })")
    page.keyboard.press("Enter")  # opens the file picker (the input's click; a chooser needs no dialog watcher)
    page.wait_for_function("() => window.picking === true")

    live.model.script(reply(tool_calls=[("bash", {"command": "echo tabbed"})]),
                      reply(tool_calls=[("ask", {"question": "Which?", "options": ["this", "that"]})]),
                      reply("Done."))
    live.prompt(session, "Go")
    card = page.locator(".ask.permission")
    expect(card.locator("button[data-reply=once]")).to_be_enabled()
    expect(page.locator("#attach")).to_be_focused()  # the question did not take the focus
    page.keyboard.press("Alt+q")
    expect(card).to_be_focused()
    tab_until(page, ".ask.permission button[data-reply=once]")
    page.keyboard.press("Enter")
    question = page.locator(".ask.question")
    expect(question.locator("button.option").first).to_be_enabled()
    page.keyboard.press("Alt+q")
    expect(question).to_be_focused()
    tab_until(page, ".ask.question button.option")
    page.keyboard.press("Tab")
    expect(question.get_by_role("button", name="that")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Done.")


def test_queued_prompt_shown_and_removed_and_steer(live, page):
    """While a run goes on, Send queues the prompt: it is shown as queued with Remove, which takes
    it back; Steer sends one into the running step, marked as steered."""
    project = live.project("queueing", {"a.txt": "x\n"})
    session = live.session(project, "Queue")
    open_session(page, project, session)
    live.model.script(Stall(events=text_chunks("working on it")))
    send(page, "Start")
    expect(page.locator(".msg.assistant .part.text")).to_contain_text("working on it")
    expect(page.locator("#send")).to_have_text("Queue")
    expect(page.locator("#steer")).to_be_visible()

    send(page, "Then this")
    queued = page.locator(".msg.user.queued")
    expect(queued).to_contain_text("Then this")
    expect(queued.locator(".queued-note")).to_have_text("queued")
    expect(page.locator("#prompt")).to_have_value("")
    stored = [m for m in message_rows(live, session) if m["role"] == "user"]
    assert [m["data"].get("queued") for m in stored] == [None, True]
    shot(page, "queued.png")
    queued.get_by_role("button", name="Remove").click()
    expect(page.locator(".msg.user.queued")).to_have_count(0)
    assert [m["parts"][0]["text"] for m in message_rows(live, session) if m["role"] == "user"] == ["Start"]

    page.fill("#prompt", "Look at b.txt too")
    page.click("#steer")
    steered = page.locator(".msg.user", has_text="Look at b.txt too")
    expect(steered.locator(".steer-note")).to_have_text("steered")
    expect(steered).not_to_have_class(re.compile(r"\bqueued\b"))
    assert message_rows(live, session)[-1]["data"].get("steer") is True

    page.keyboard.press("Escape")
    expect(page.locator("#session-status")).to_have_text("aborted")
    expect(page.locator("#send")).to_have_text("Send")
    expect(page.locator("#steer")).to_be_hidden()
    live.call(live.model.wait_disconnect(2.0))
    live.wait_run_end(session)


def test_compact_button_summarizes_the_session(live, page):
    """Compact asks the session's model for a summary now; it is shown as the summary of the
    conversation. With nothing to compact, the refusal is a plain sentence."""
    project = live.project("compacting", {"a.txt": "x\n"})
    empty = live.session(project, "Empty")
    session = live.session(project, "Compact me")
    live.model.script(reply("We talked about a.txt."))
    live.prompt(session, "Tell me about a.txt")
    assert live.wait_run_end(session) == "idle"
    open_session(page, project, empty)
    page.click("#session-compact")
    expect(page.locator(".toast.error")).to_have_text("The session has no model yet; send a prompt first.")

    page.locator(f"#sessions li[data-id='{session['id']}']").click()
    expect(page.locator("#session-title")).to_have_text("Compact me")
    compact = page.locator("#session-compact")
    expect(compact).to_be_enabled()
    live.model.script(reply("Goal: understand a.txt. Decisions: none. Open: nothing."))
    compact.click()
    summary = page.locator(".msg.assistant.compaction")
    expect(summary.locator(".compaction-note")).to_have_text("Summary of the conversation so far")
    expect(summary.locator(".md")).to_have_text("Goal: understand a.txt. Decisions: none. Open: nothing.")
    assert live.wait_run_end(session) == "idle"
    assert live.model.requests[-1].body.get("tools") in (None, [])


def test_file_tree_follows_file_changes(live, page):
    """A file the agent writes appears in the file tree without pressing refresh; so does one
    made outside Totem, once the page has the focus again."""
    project = live.project("treeing", {"a.txt": "x\n"})
    session = live.session(project, "Tree")
    live.api("permissions_save", {"projectid": project["id"], "tool": "write", "pattern": "**", "action": "allow"})
    open_session(page, project, session)
    tree = page.locator("#tree")
    expect(tree).to_contain_text("a.txt")
    live.model.script(reply(tool_calls=[("write", {"path": "made-by-agent.txt", "content": "new\n"})]), reply("Written."))
    send(page, "Write a file")
    expect(tree.locator("li[data-path='made-by-agent.txt']")).to_have_count(1)

    with open(os.path.join(project["path"], "made-by-hand.txt"), "w") as handle:
        handle.write("mine\n")
    page.evaluate("window.dispatchEvent(new Event('focus'))")
    expect(tree.locator("li[data-path='made-by-hand.txt']")).to_have_count(1)


def test_denied_call_says_denied_once(live, page):
    """A call denied by a rule says why in one sentence, never "Denied: denied ...": its note as
    the model read it, its decision in a person's words (whose rule, what it covers)."""
    project = live.project("denying", {"a.txt": "x\n"})
    session = live.session(project, "Deny")
    live.api("permissions_save", {"projectid": project["id"], "tool": "bash", "pattern": "rm *", "action": "deny"})
    open_session(page, project, session)
    live.model.script(reply(tool_calls=[("bash", {"command": "rm a.txt"})]), reply("I will not."))
    send(page, "Remove a.txt")
    denied = page.locator(".part.tool.status-denied")
    expect(denied.locator(".tool-note")).to_contain_text("Denied by the project rule bash: rm *.")
    denied.locator("summary").click()
    expect(denied.locator(".decision")).to_have_text("Denied by your rule for this project for bash rm *")
    expect(page.locator(".conversation")).not_to_contain_text(re.compile("denied: denied", re.I))
