"""The steps of one run: a model answer, then the tool calls it asked for, until an answer
calls none or the step limit is reached. A provider's passing error (a rate limit, an overload)
is retried with a growing wait; a request the server refuses for its length is compacted and
sent again once, and the window the refusal states is kept; the loop guard asks the person
before a third identical call in a row runs.

Must not: start, end or queue runs (loop.py), or write parts other than through the parts it
is given.
"""

from __future__ import annotations

import asyncio
import json

from totem.agent.assembly import AgentParts
from totem.agent.context import estimated_tokens, sent_messages
from totem.agent.instructions import nested
from totem.agent.provider_errors import KIND_CONTEXT_LENGTH, ProviderError, stated_window
from totem.agent.providers import redact
from totem.agent.recorder import OpenPart
from totem.agent.requests import ConversationTooLong
from totem.agent.run import Run
from totem.agent.stream import ToolCall
from totem.events import RunError

MAX_RETRIES = 4
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
LOOP_GUARD_REPEATS = 3


class StepLimitReached(Exception):
    """The run made as many model calls as it may; the message says what to do."""


class CostLimitReached(Exception):
    """The run spent more than its spending limit (maxcost): it stops before its next model call."""


class Steps:
    def __init__(self, parts: AgentParts, hub, limit: int, backoff_first_s: float = BACKOFF_FIRST_S,
                 providers=None):
        self.parts = parts
        self.providers = providers  # keeps the windows refusals teach, for later runs (None: not kept)
        self.hub = hub
        self.limit = limit  # model calls of a run, unless its settings say otherwise
        self.backoff_first_s = backoff_first_s

    async def take(self, run: Run, target) -> None:
        """Every step of `run`. Raises StepLimitReached, CostLimitReached (before a model call,
        once the run's answers cost more than its limit), ProviderError (not passing, or retried
        MAX_RETRIES times), and what a step raises."""
        request = run.request
        repeats: list[str] = []
        steps = request.limits.get("steps") or self.limit
        for _step in range(steps):
            if run.budget.passed():
                raise CostLimitReached(run.budget.sentence())
            calls, parts = await self.answer(run, target)
            if not calls:
                return
            for call in calls:
                signature = call.name + "\0" + _canonical(call.arguments)
                repeats = repeats + [signature] if repeats and repeats[-1] == signature else [signature]
                if len(repeats) >= LOOP_GUARD_REPEATS:
                    answer = await self.parts.gate.question(
                        request.asker, f"The model called {call.name} with the same input "
                        f"{LOOP_GUARD_REPEATS} times in a row. Go on?", ["Go on", "Stop"])
                    if answer != "Go on":
                        return
                    repeats = []
                await self.parts.calls.run(request.asker, parts[call.id], call, request.limits, run.tools)
                await self._nested_instructions(run, parts[call.id])
            await self.parts.checks.after_step(run, list(parts.values()))
        raise StepLimitReached(f"The run stopped after {steps} model calls (the step limit); "
                               "send a prompt to go on.")

    async def _nested_instructions(self, run: Run, open_part: OpenPart) -> None:
        """The instructions nearest above the files a read or an edit touched that this run has
        not given yet, kept with the call's part: they follow its result (context.py)."""
        data = open_part.data
        kind = self.parts.calls.registry.kinds().get(data.get("tool", ""))
        ran = "output" in data and "error" not in data  # closed done (a refused or failed call reads nothing)
        if not ran or kind is None or not (kind.edits or data.get("tool") == "read"):
            return
        found = await asyncio.to_thread(nested, run.request.asker.root, data.get("subjects") or [], run.history.given)
        if found:
            run.history.given.update(item["source"] for item in found)
            data["instructions"] = found
            await self.parts.recorder.update(open_part, "done")

    async def answer(self, run: Run, target) -> tuple[list[ToolCall], dict[str, OpenPart]]:
        """One model answer streamed into parts, retried on a passing provider error."""
        attempt = 0
        refused = False
        while True:
            body: dict | None = None
            try:
                body = await self.parts.requests.body(run, target, self.parts.calls.registry)
                history = run.history
                # The run's first answer names the instructions its system prompt carries.
                notes = {"instructions": history.instructions} if history.instructions and not history.announced else {}
                history.announced = True
                return await self.parts.answers.stream(run.request.sessionid, run.request.prompt.model, target,
                                                       body, prompt=run.messageid, review=run.review,
                                                       encoder=history.encoder, budget=run.budget, notes=notes)
            except ProviderError as exc:
                if isinstance(exc, ConversationTooLong):
                    raise
                if exc.kind == KIND_CONTEXT_LENGTH:
                    if refused or body is None:  # the retry, or the compaction itself, refused
                        raise _still_too_long(exc) from None
                    refused = True
                    await self._made_room(run, target, body, exc)
                    continue
                attempt += 1
                if not exc.retry or attempt > MAX_RETRIES:
                    raise
                delay = exc.retry_after if exc.retry_after is not None else self.backoff_first_s * 2 ** (attempt - 1)
                delay = min(delay, BACKOFF_MAX_S)
                message = redact(f"{exc.message} Trying again in {delay:g} s.", run.key)
                self.hub.publish(RunError(run.request.sessionid, message, True))
                await asyncio.sleep(delay)

    async def _made_room(self, run: Run, target, body: dict, exc: ProviderError) -> None:
        """The server refused `body` for its length: the run counts from now on on the window
        the error states, or, when it states none, on one no larger than what was sent (our
        estimate of a request's tokens is only an estimate: the smaller of the two), then a
        compaction makes room. Raises ProviderError when no hook could."""
        sent = estimated_tokens(sent_messages(body), body.get("tools") or [])
        stated = exc.window or stated_window(exc.message)
        window = min(stated, sent) if stated else sent
        window = min(window, run.window or target.context or window)
        run.window = window
        if self.providers is not None:
            self.providers.learn_window(run.request.prompt.model, window)
        self.hub.publish(RunError(run.request.sessionid, redact(
            f"{exc.message} Compacting the conversation to fit a {window}-token window and trying again.",
            run.key), True))
        try:
            made = await self.parts.requests.make_room(run, target)
        except ProviderError as error:
            if error.kind == KIND_CONTEXT_LENGTH:
                raise _still_too_long(error) from None
            raise
        if not made:
            raise _still_too_long(exc)


def _still_too_long(exc: ProviderError) -> ProviderError:
    """The run's end when compacting could not make the conversation fit: what happened and
    what to do."""
    return ProviderError(
        "The conversation does not fit the model's context window even after compacting it "
        f"({exc.message}). Load the model with a bigger context window or choose one that has it, "
        "or start a new session (fork this one from an earlier message to keep part of it).",
        status=exc.status, kind=KIND_CONTEXT_LENGTH, retry=False, code=exc.code, window=exc.window)


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        return arguments
