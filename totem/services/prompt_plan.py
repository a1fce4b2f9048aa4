"""The prompt use case as a plan: from the fields of a request and the state of its session, what
to do, with no I/O.

`plan_prompt` takes the request (text, files, model, mode, autoaccept, reasoning, steer, a
project command or agent) and the session's state (its stored choices, whether it runs,
whether its worktree is gone, the command's or agent's expansion) and returns a frozen
`PromptPlan`: the prompt to store and run, with its options; whether it starts a run, waits
in the queue of the current one or steers it; whether the undone messages go first. Every
refusal is an ApiError raised before anything changed, with the field it is about.

Two facts need I/O, and the executor (prompts.py) gathers them around the plan: the command's
or agent's files, read only when `wants_expansion` says so (after its checks, which come
first), and whether the model names a usable provider, asked after the plan (whose
`model_blame` says which input a refusal names) and before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from totem.agent.loop import REASONING_LEVELS, Prompt
from totem.errors import BadRequest, NotFound
from totem.security.permissions import ToolKind, rule_problems

if TYPE_CHECKING:
    from totem.workspace.commands import Choice

MODES = ("build", "plan")

Attachment = tuple[str, str, bytes]  # (name, media type, content) of each file

START, QUEUE, STEER = "start", "queue", "steer"


@dataclass(frozen=True)
class PromptRequest:
    """What the caller asked: the fields of Sessions|prompt (and of a schedule's prompt).
    None leaves a choice to the session (or to the command or agent)."""

    text: str = ""
    model: str | None = None
    mode: str | None = None
    autoaccept: bool | None = None
    reasoning: str | None = None
    attachments: tuple[Attachment, ...] = ()
    scheduled: bool = False  # a run of a schedule: nobody is there to answer
    steer: bool = False  # while a run goes on, it reads this prompt at its next step
    # While a run goes on, the prompt waits for it (queued) or steers it; False: it is refused.
    wait: bool = True
    command: str | None = None  # a project command in place of the text (with its arguments)
    arguments: str | None = None
    agent: str | None = None  # a project agent for this prompt's run
    maxcost: float | None = None  # this run's spending limit (None: the settings')
    allow: tuple[tuple[str, str], ...] = ()  # (tool, pattern) allow rules of this run alone


@dataclass(frozen=True)
class SessionState:
    """What the plan reads of the session, gathered by the executor."""

    sessionid: str
    model: str | None  # the model the session keeps ("" or None before its first prompt)
    mode: str
    autoaccept: bool
    running: bool = False
    worktree_gone: bool = False  # it works in a worktree that was discarded
    has_project: bool = True


@dataclass(frozen=True)
class PromptPlan:
    """What to do with one prompt. `prompt()` is the agent's Prompt for it."""

    action: str  # START a run, QUEUE behind the current one, or STEER it
    text: str
    model: str
    mode: str
    autoaccept: bool
    reasoning: str | None = None
    attachments: tuple[Attachment, ...] = ()
    scheduled: bool = False
    steer: bool = False  # what the request asked (Runs.send decides again as it claims the run)
    drop_reverted: bool = False  # a new prompt goes on from what was not undone: the undone go first
    model_blame: str = "model"  # the input a refusal of the model names
    # What a project command or agent made of it: only narrows (agent.turns.Prompt).
    tools: tuple[str, ...] | None = None
    instructions: str = ""
    notes: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    keep: tuple[str, str] | None = None
    maxcost: float | None = None
    allow: tuple[tuple[str, str], ...] = ()

    def prompt(self) -> Prompt:
        # The message keeps what this run alone was given: the conversation shows it.
        given = ({"maxcost": self.maxcost} if self.maxcost is not None else {}) | (
            {"allow": [{"tool": tool, "pattern": pattern} for tool, pattern in self.allow]} if self.allow else {})
        return Prompt(text=self.text, model=self.model, mode=self.mode, autoaccept=self.autoaccept,
                      reasoning=self.reasoning, attachments=list(self.attachments), scheduled=self.scheduled,
                      tools=self.tools, instructions=self.instructions, notes=dict(self.notes) | given,
                      keep=self.keep, maxcost=self.maxcost, allow=self.allow)


def wants_expansion(request: PromptRequest, state: SessionState) -> bool:
    """Whether the request's command or agent must be read from the project (in the folder the
    session works in). Raises BadRequest, NotFound for what is refused before any file is read:
    a discarded worktree, arguments without a command, a command with text, a command or an
    agent that would steer, no project."""
    if state.worktree_gone:
        raise BadRequest(("session", "the session's worktree was discarded; start a new session"))
    if request.arguments is not None and request.command is None:
        raise BadRequest(("arguments", "go with a command"))
    if request.command is None and request.agent is None:
        return False
    if request.command is not None and (request.text or "").strip():
        raise BadRequest(("text", "leave it out with a command: the command is the text, and what you add "
                                  "goes in arguments"))
    if request.steer and state.running:
        raise BadRequest(("steer", "a command or an agent starts a run of its own; send it without steer, "
                                   "and it runs when the current run ends"))
    if not state.has_project:
        raise NotFound(("id", f"no project of session {state.sessionid}"))
    return True


def plan_prompt(request: PromptRequest, state: SessionState, choice: Choice | None = None) -> PromptPlan:
    """The plan of one prompt; `choice` is what the command or agent made of it (None without
    one). Raises BadRequest, NotFound, each naming its field; nothing is changed then."""
    if wants_expansion(request, state) != (choice is not None):
        raise ValueError("a choice goes with a command or an agent, and only with one")
    text, files, model, mode, autoaccept = _chosen(request, state, choice)
    model = _check(request, state, text, files, model, mode)
    action = START if not state.running else STEER if request.steer else QUEUE
    plan = PromptPlan(action, text, model, mode, autoaccept, request.reasoning, files, request.scheduled,
                      request.steer, drop_reverted=not state.running, maxcost=request.maxcost, allow=request.allow)
    return plan if choice is None else _narrowed(plan, request, state, choice)


def _chosen(request: PromptRequest, state: SessionState,
            choice: Choice | None) -> tuple[str, tuple[Attachment, ...], str | None, str, bool]:
    """The text, files, model, mode and autoaccept of the prompt: the request's, else the
    command's or agent's (text, files and model), else the session's."""
    text = request.text if choice is None or choice.text is None else choice.text
    files = (*request.attachments, *(choice.files if choice else ()))
    model: str | None = request.model
    if model is None:
        model = choice.model if choice and choice.model else state.model
    mode = state.mode if request.mode is None else request.mode
    autoaccept = state.autoaccept if request.autoaccept is None else request.autoaccept
    return text, files, model, mode, bool(autoaccept)


def _check(request: PromptRequest, state: SessionState, text: str, files: tuple[Attachment, ...],
           model: str | None, mode: str) -> str:
    """Refuse what means nothing, each with the field it is about; returns the model, which is
    there then. Raises BadRequest."""
    if mode not in MODES:
        raise BadRequest(("mode", f"must be one of {', '.join(MODES)}"))
    if request.reasoning is not None and request.reasoning not in REASONING_LEVELS:
        raise BadRequest(("reasoning", f"must be one of {', '.join(REASONING_LEVELS)}"))
    if not (text or "").strip() and not files:
        raise BadRequest(("text", "is required (or attach a file)"))
    if not model:
        raise BadRequest(("model", "choose a model; Providers|catalog lists the ones you can use"))
    if state.running and not request.wait:
        raise BadRequest(("session", "the session is running; wait for it to finish or abort it"))
    if state.running and request.steer:
        for name, given in (("maxcost", request.maxcost is not None), ("allow", bool(request.allow))):
            if given:
                raise BadRequest((name, "holds for a run of its own; a steer joins the run that goes on, "
                                        "so send it without steer (it runs when the current run ends)"))
    return model


def run_rule_problems(allow: tuple[tuple[str, str], ...],
                      kinds: Mapping[str, ToolKind]) -> list[tuple[str, str]]:
    """Why each of a prompt's allow rules cannot be, as (field, reason): `allow[i].tool`..."""
    return [(f"allow[{index}].{name}", why) for index, (tool, pattern) in enumerate(allow)
            for name, why in rule_problems(tool, pattern, "allow", kinds)]


def _narrowed(plan: PromptPlan, request: PromptRequest, state: SessionState, choice: Choice) -> PromptPlan:
    """What a command or agent adds: it only narrows (Plan over Build, never Build over Plan,
    some tools of all), and the session keeps its own model and mode, not the file's."""
    kept_model = state.model if request.model is None else request.model
    return replace(plan, mode="plan" if choice.plan else plan.mode,
                   model_blame=choice.model_from if choice.model and request.model is None else "model",
                   tools=choice.tools, instructions=choice.instructions, notes=MappingProxyType(dict(choice.notes)),
                   keep=(kept_model or plan.model, plan.mode))
