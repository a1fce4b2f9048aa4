"""The prompt use case as a plan (`totem/services/prompt_plan.py`): one table row per case,
request and session state in, the plan or the refusal out; then the executor on a real app,
which refuses the same way before anything is stored."""

import os
import unittest
from dataclasses import FrozenInstanceError, replace
from types import MappingProxyType

from tests.test_services import ServicesCase
from totem.agent.loop import Prompt
from totem.errors import ApiError, BadRequest, NotFound
from totem.services.prompt_plan import (
    QUEUE,
    START,
    STEER,
    PromptPlan,
    PromptRequest,
    SessionState,
    plan_prompt,
    wants_expansion,
)
from totem.workspace.commands import Choice

MODEL = "p1/model-a"
OTHER = "p2/model-b"
FILE = ("notes.txt", "text/plain", b"hello")
REF = ("ref.md", "text/markdown", b"# ref")

IDLE = SessionState("s1", MODEL, "build", False)
FRESH = SessionState("s1", None, "build", False)  # no prompt yet: no model kept
RUNNING = replace(IDLE, running=True)


def plan(action=START, text="hi", model=MODEL, mode="build", autoaccept=False, **fields) -> PromptPlan:
    """The plan a row expects: an idle session's by default."""
    fields.setdefault("drop_reverted", action == START)
    return PromptPlan(action, text, model, mode, autoaccept, **fields)


COMMAND = Choice(text="Review src/app.py", files=[REF], model=OTHER, model_from="command", plan=True,
                 tools=("read", "grep"), instructions="Be brief.", notes={"command": "review"})
AGENT = Choice(model=OTHER, model_from="agent", tools=("read",), instructions="You review.",
               notes={"agent": "reviewer"})
AGENT_NO_MODEL = Choice(notes={"agent": "helper"})

# (what the row shows, request, state, choice, the plan)
PLANS = [
    ("an idle session starts a run with the session's choices",
     PromptRequest("hi"), IDLE, None, plan()),
    ("the request's model, mode and autoaccept win over the session's",
     PromptRequest("hi", model=OTHER, mode="plan", autoaccept=True), IDLE, None,
     plan(model=OTHER, mode="plan", autoaccept=True)),
    ("autoaccept left out takes the session's",
     PromptRequest("hi"), replace(IDLE, autoaccept=True), None, plan(autoaccept=True)),
    ("autoaccept false is kept over the session's true",
     PromptRequest("hi", autoaccept=False), replace(IDLE, autoaccept=True), None, plan()),
    ("a session with no model yet takes the request's",
     PromptRequest("hi", model=OTHER), FRESH, None, plan(model=OTHER)),
    ("the reasoning level goes with the prompt",
     PromptRequest("hi", reasoning="high"), IDLE, None, plan(reasoning="high")),
    ("files alone are a prompt",
     PromptRequest("", attachments=(FILE,)), IDLE, None, plan(text="", attachments=(FILE,))),
    ("text is kept as sent, spaces and all",
     PromptRequest("  hi\n"), IDLE, None, plan(text="  hi\n")),
    ("a schedule's prompt is marked scheduled",
     PromptRequest("hi", scheduled=True, wait=False), IDLE, None, plan(scheduled=True)),
    ("steer on an idle session starts a run",
     PromptRequest("hi", steer=True), IDLE, None, plan(steer=True)),
    ("while a run goes on, a prompt is queued and the undone messages stay",
     PromptRequest("hi"), RUNNING, None, plan(QUEUE)),
    ("while a run goes on, steer steers it",
     PromptRequest("hi", steer=True), RUNNING, None, plan(STEER, steer=True)),
    ("a command is the text, brings its files, model, Plan mode and tools; the session keeps its own",
     PromptRequest("", command="review", arguments="src/app.py", attachments=(FILE,)), IDLE, COMMAND,
     plan(text="Review src/app.py", model=OTHER, mode="plan", attachments=(FILE, REF), model_blame="command",
          tools=("read", "grep"), instructions="Be brief.", notes=MappingProxyType({"command": "review"}),
          keep=(MODEL, "build"))),
    ("the request's model wins over the command's, and a refusal of it names model",
     PromptRequest("", model=MODEL, command="review"), FRESH, COMMAND,
     plan(text="Review src/app.py", mode="plan", attachments=(REF,), tools=("read", "grep"),
          instructions="Be brief.", notes=MappingProxyType({"command": "review"}), keep=(MODEL, "build"))),
    ("an agent keeps the person's text; with no model kept, the session keeps the agent's",
     PromptRequest("look", agent="reviewer"), FRESH, AGENT,
     plan(text="look", model=OTHER, model_blame="agent", tools=("read",), instructions="You review.",
          notes=MappingProxyType({"agent": "reviewer"}), keep=(OTHER, "build"))),
    ("an agent without a model takes the session's; the request's Plan mode stays Plan",
     PromptRequest("look", agent="helper", mode="plan"), IDLE, AGENT_NO_MODEL,
     plan(text="look", mode="plan", notes=MappingProxyType({"agent": "helper"}), keep=(MODEL, "plan"))),
    ("a command's prompt waits in the queue of a run like any prompt",
     PromptRequest("", command="review"), RUNNING, COMMAND,
     plan(QUEUE, text="Review src/app.py", model=OTHER, mode="plan", attachments=(REF,), model_blame="command",
          tools=("read", "grep"), instructions="Be brief.", notes=MappingProxyType({"command": "review"}),
          keep=(MODEL, "build"))),
]

GONE = replace(IDLE, worktree_gone=True)
NO_PROJECT = replace(IDLE, has_project=False)
DISCARDED = "the session's worktree was discarded; start a new session"
WITH_COMMAND = "leave it out with a command: the command is the text, and what you add goes in arguments"
STEER_COMMAND = ("a command or an agent starts a run of its own; send it without steer, and it runs when the "
                 "current run ends")
NO_MODEL = "choose a model; Providers|catalog lists the ones you can use"
NO_TEXT = "is required (or attach a file)"
RUNNING_REFUSED = "the session is running; wait for it to finish or abort it"

# (what the row shows, request, state, choice, status, field, message)
REFUSALS = [
    ("a discarded worktree refuses every prompt, first",
     PromptRequest("hi", mode="yolo"), GONE, None, 400, "session", DISCARDED),
    ("arguments go with a command",
     PromptRequest("hi", arguments="x"), IDLE, None, 400, "arguments", "go with a command"),
    ("arguments without a command are refused before the agent is read",
     PromptRequest("hi", arguments="x", agent="reviewer"), IDLE, None, 400, "arguments", "go with a command"),
    ("a command takes no text",
     PromptRequest("hi", command="review"), IDLE, None, 400, "text", WITH_COMMAND),
    ("a command does not steer a run",
     PromptRequest("", command="review", steer=True), RUNNING, None, 400, "steer", STEER_COMMAND),
    ("an agent does not steer a run",
     PromptRequest("look", agent="reviewer", steer=True), RUNNING, None, 400, "steer", STEER_COMMAND),
    ("a command needs the session's project",
     PromptRequest("", command="review"), NO_PROJECT, None, 404, "id", "no project of session s1"),
    ("a mode that does not exist",
     PromptRequest("hi", mode="yolo"), IDLE, None, 400, "mode", "must be one of build, plan"),
    ("a session whose stored mode is unknown",
     PromptRequest("hi"), replace(IDLE, mode="yolo"), None, 400, "mode", "must be one of build, plan"),
    ("a reasoning level that does not exist",
     PromptRequest("hi", reasoning="max"), IDLE, None, 400, "reasoning", "must be one of none, low, medium, high"),
    ("no text and no file",
     PromptRequest(""), IDLE, None, 400, "text", NO_TEXT),
    ("only spaces are no text",
     PromptRequest(" \n\t"), IDLE, None, 400, "text", NO_TEXT),
    ("an agent with no text and no file",
     PromptRequest("", agent="helper"), IDLE, AGENT_NO_MODEL, 400, "text", NO_TEXT),
    ("no model in the request nor in the session",
     PromptRequest("hi"), FRESH, None, 400, "model", NO_MODEL),
    ("an empty model is no model, whatever the session keeps",
     PromptRequest("hi", model=""), IDLE, None, 400, "model", NO_MODEL),
    ("an agent without a model, in a session without one",
     PromptRequest("look", agent="helper"), FRESH, AGENT_NO_MODEL, 400, "model", NO_MODEL),
    ("a prompt that may not wait, while a run goes on",
     PromptRequest("hi", wait=False), RUNNING, None, 400, "session", RUNNING_REFUSED),
    ("a steered prompt that may not wait, while a run goes on",
     PromptRequest("hi", wait=False, steer=True), RUNNING, None, 400, "session", RUNNING_REFUSED),
]


class PromptPlanTest(unittest.TestCase):
    def test_plan_rows(self):
        """Each row: the request and the session's state give exactly the plan shown."""
        for shown, request, state, choice, expected in PLANS:
            with self.subTest(shown):
                self.assertEqual(plan_prompt(request, state, choice), expected)

    def test_refusal_rows(self):
        """Each refusal row raises one error, with its status, field and message; the request
        and the state are frozen, so a refusal changed nothing."""
        for shown, request, state, choice, status, field, message in REFUSALS:
            with self.subTest(shown), self.assertRaises(ApiError) as caught:
                before = (replace(request), replace(state))
                plan_prompt(request, state, choice)
            self.assertEqual((caught.exception.status, caught.exception.errors), (status, [(field, message)]),
                             shown)
            self.assertEqual((request, state), before, shown)

    def test_expansion_is_read_only_for_a_command_or_an_agent(self):
        """wants_expansion: True only when a command or an agent is named and nothing refuses it
        first; the refusals that come before any file is read are its own."""
        self.assertFalse(wants_expansion(PromptRequest("hi"), IDLE))
        self.assertTrue(wants_expansion(PromptRequest("", command="review"), IDLE))
        self.assertTrue(wants_expansion(PromptRequest("look", agent="reviewer"), RUNNING))
        for request, state, error in ((PromptRequest("hi"), GONE, BadRequest),
                                      (PromptRequest("", command="review"), NO_PROJECT, NotFound),
                                      (PromptRequest("hi", command="review"), IDLE, BadRequest)):
            with self.subTest(request=request, state=state), self.assertRaises(error):
                wants_expansion(request, state)

    def test_a_choice_goes_with_a_command_or_an_agent(self):
        """A choice without a command or an agent, or none with one, is a mistake of the caller."""
        with self.assertRaises(ValueError):
            plan_prompt(PromptRequest("hi"), IDLE, AGENT)
        with self.assertRaises(ValueError):
            plan_prompt(PromptRequest("", command="review"), IDLE, None)

    def test_plan_is_frozen_and_gives_a_fresh_prompt(self):
        """The plan cannot be changed; its Prompt is the agent's, with lists and dicts of its own."""
        made = plan_prompt(PromptRequest("", command="review", attachments=(FILE,)), IDLE, COMMAND)
        with self.assertRaises(FrozenInstanceError):
            made.text = "other"  # type: ignore[misc]
        with self.assertRaises(TypeError):
            made.notes["command"] = "other"  # type: ignore[index]
        prompt = made.prompt()
        self.assertEqual(prompt, Prompt(text="Review src/app.py", model=OTHER, mode="plan", autoaccept=False,
                                        attachments=[FILE, REF], tools=("read", "grep"), instructions="Be brief.",
                                        notes={"command": "review"}, keep=(MODEL, "build")))
        prompt.notes["x"] = 1
        prompt.attachments.clear()
        self.assertEqual((made.notes, made.attachments), ({"command": "review"}, (FILE, REF)))


class PromptExecutorTest(ServicesCase):
    async def test_refusals_store_nothing(self):
        """Through Sessions.send, each refusal of the plan (and the provider's) answers its
        field and message, and leaves the session as it was: no message, the same row."""
        sid = self.session["id"]
        before = await self.app.store.get_session(sid)
        cases = [
            ({"text": "hi", "model": self.modelref, "arguments": "x"}, "arguments", "go with a command"),
            ({"text": "hi", "model": self.modelref, "command": "review"}, "text", WITH_COMMAND),
            ({"text": "hi", "model": self.modelref, "mode": "yolo"}, "mode", "must be one of build, plan"),
            ({"text": "hi", "model": self.modelref, "reasoning": "max"}, "reasoning",
             "must be one of none, low, medium, high"),
            ({"text": " ", "model": self.modelref}, "text", NO_TEXT),
            ({"text": "hi"}, "model", NO_MODEL),
            ({"text": "hi", "model": ""}, "model", NO_MODEL),
            ({"text": "hi", "model": "nope/model"}, "model", "there is no provider nope; choose another model"),
        ]
        for arguments, field, message in cases:
            with self.subTest(arguments), self.assertRaises(BadRequest) as caught:
                await self.services.sessions.send(sid, **arguments)
            self.assertEqual(caught.exception.errors, [(field, message)])
        self.assertEqual((await self.services.sessions.messages(sid, None, 100))["messages"], [])
        self.assertEqual(await self.app.store.get_session(sid), before)

    async def test_a_discarded_worktree_refuses_before_anything(self):
        """A session whose worktree is gone refuses a prompt first, and stores nothing."""
        sid = self.session["id"]
        await self.app.store.set_session_worktree(sid, os.path.join(self.root, "gone"))
        with self.assertRaises(BadRequest) as caught:
            await self.services.sessions.send(sid, "hi", model=self.modelref, mode="yolo")
        self.assertEqual(caught.exception.errors, [("session", DISCARDED)])
        self.assertEqual((await self.services.sessions.messages(sid, None, 100))["messages"], [])

    async def test_a_command_that_is_not_there_names_command(self):
        """The command's files are read after the plan's first checks: a missing one is refused
        naming `command`, and nothing is stored."""
        sid = self.session["id"]
        with self.assertRaises(BadRequest) as caught:
            await self.services.sessions.send(sid, "", model=self.modelref, command="nothere")
        self.assertEqual([name for name, _ in caught.exception.errors], ["command"])
        self.assertEqual((await self.services.sessions.messages(sid, None, 100))["messages"], [])


if __name__ == "__main__":
    unittest.main()
