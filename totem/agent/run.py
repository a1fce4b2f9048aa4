"""One run of a prompt: what was asked (frozen), what the run has become (small and mutable),
and the history its steps read (a cache, so each step reads and converts only what is new)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from totem.agent.bodies import BodyEncoder
from totem.agent.context import RunAttachments, Sizes
from totem.agent.gate import Asker
from totem.agent.turns import Prompt

if TYPE_CHECKING:
    from totem.agent.answers import Review
    from totem.tools import Registry


# The failures of a run that are not a provider's: the step limit, the spending limit, a full
# disk, a fault of Totem.
ERROR_STEPS, ERROR_COST, ERROR_DISK, ERROR_INTERNAL = "steps", "cost", "disk", "internal"


class RunRefused(Exception):
    """A prompt that cannot start (the session is already running)."""


@dataclass(frozen=True)
class RunRequest:
    """What a run was asked to do; nothing changes it while the run goes on."""

    session: dict[str, Any]
    project: dict[str, Any]
    prompt: Prompt
    asker: Asker
    limits: dict[str, Any] = field(default_factory=dict)  # the settings read at the start (settings.KEYS)
    compact_only: bool = False  # the person asked for a compaction: the run is that one step

    @property
    def sessionid(self) -> str:
        return str(self.session["id"])


@dataclass
class Budget:
    """What a run may spend (`limit` in US dollars; None: no limit) and has spent. A run and its
    sub-agents share one: a sub-agent's answers are paid from its parent's limit. Only a known
    cost counts (the provider's figure, or the tokens at the catalog's price): a model without
    one spends nothing here."""

    limit: float | None = None
    spent: float = 0.0

    def add(self, tokens: dict[str, Any]) -> None:
        """Count one answer's tokens (answers.tokens_of), when they have a cost."""
        cost = tokens.get("cost")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost > 0:
            self.spent += float(cost)

    def passed(self) -> bool:
        return self.limit is not None and self.spent > self.limit

    def sentence(self) -> str:
        """Why the run stopped, and what to do, for the person and the log."""
        return (f"The run stopped: it cost ${self.spent:.4f}, past its spending limit of "
                f"${self.limit:.4f} (maxcost). Raise the limit in Session settings, or send the "
                "prompt again with a higher maxcost, to go on.")


@dataclass
class History:
    """What a run's steps have read of the session's messages. A stored message does not change
    while its run goes on (undo is refused while it runs), so each step reads only the messages
    after the last one read and converts only those."""

    marker: str | None = None  # of the data envelopes: the session's, read at the first step
    messages: list[Any] = field(default_factory=list)  # the messages read so far
    last: str | None = None  # the id of the newest message read
    system: dict[str, Any] | None = None  # the system message, made at the first step
    converted: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # chat messages of each stored one
    sizes: Sizes = field(default_factory=Sizes)  # the JSON size of each chat message counted
    encoder: BodyEncoder = field(default_factory=BodyEncoder)  # the JSON of the last request's messages
    attachments: RunAttachments = field(default_factory=RunAttachments)  # encoded once per run
    instructions: list[str] = field(default_factory=list)  # the sources of the system prompt's instructions
    given: set[str] = field(default_factory=set)  # the nested instructions given with a call's result
    announced: bool = False  # the run's first answer named `instructions`


@dataclass
class Run:
    """A run as it goes: its request, its task, and what its steps and hooks leave for the next."""

    request: RunRequest
    messageid: str | None = None  # the prompt's message, named by each answer (`data.prompt`)
    task: asyncio.Task[None] | None = None
    key: str | None = None  # the provider key, kept out of every message this run publishes
    error: str | None = None  # why the run failed, when it did
    # What kind of failure: a provider error's kind (provider_errors.KIND_*), or one of ERROR_KINDS.
    error_kind: str | None = None
    pruned: int = 0  # old tool outputs left out of the last request to fit the window
    # The window a server's refusal of a request for its length taught (steps.py): it wins over
    # the target's, stated or guessed, for the rest of the run.
    window: int | None = None
    # Prompts sent while this run goes on, each run after it in turn: (message id, prompt, limits).
    queue: list[tuple[str, Prompt, dict[str, Any]]] = field(default_factory=list)
    review: Review | None = None  # a Total.js project's self-check of each answer (knowledge.py)
    tools: Registry | None = None  # the run's tools: the built-in ones and its MCP servers' (None: built-in)
    history: History = field(default_factory=History)
    budget: Budget = field(default_factory=Budget)  # shared with its sub-agents' runs
