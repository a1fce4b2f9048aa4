"""The request of each step: the session's history as chat messages behind the system prompt,
fitted to the model's window, with the tools the run may call; and the hooks' turn when it does
not fit (compaction)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from totem.agent.context import ContextFull, fit_window, history_messages, new_marker, system_message
from totem.agent.hooks import StepHook
from totem.agent.provider_errors import KIND_CONTEXT_LENGTH, ProviderError
from totem.agent.run import Run
from totem.store import Store
from totem.tools import Registry


class ConversationTooLong(ProviderError):
    """The conversation does not fit the window even pruned and compacted: the run ends, its
    message saying what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind=KIND_CONTEXT_LENGTH, retry=False)


class Requests:
    """Builds each step's request body from the store and the run's history cache."""

    def __init__(self, store: Store, system_template: str, hooks: Sequence[StepHook], personal: str = ""):
        self.store = store
        self.system_template = system_template
        self.personal = personal  # the person's own instructions file ("" for none)
        self.hooks = hooks

    async def body(self, run: Run, target: Any, registry: Registry) -> dict[str, Any]:
        """The request of the run's next step. Raises ProviderError when the conversation does
        not fit even after a hook made room (compaction)."""
        prompt = run.request.prompt
        tools = (run.tools or registry).specs()
        if prompt.tools is not None:  # an agent's tools: the model is offered only these
            tools = [spec for spec in tools if spec["function"]["name"] in prompt.tools]
        window = window_of(run, target)
        attachments = await self._read(run)
        # One hand-over to a worker thread for the conversion and the fitting: each costs the
        # loop a wake-up, and a step makes several more (the store's writes, the tool's run).
        messages, fitted = await asyncio.to_thread(_converted_and_fitted, run, attachments, target, tools, window,
                                                   bool(run.window or target.context))
        if not isinstance(fitted, ContextFull):
            body, run.pruned = fitted
        else:
            # Pruning was not enough: a hook (compaction) makes room once, and the request is
            # built again from what it left; still too big ends the run, never a loop.
            if not await self._made_room(run, target, messages, window):
                raise ConversationTooLong(str(fitted)) from None
            try:
                body, run.pruned = await asyncio.to_thread(fitted_body, run, target, await self.messages(run),
                                                           tools, window, True)
            except ContextFull as exc:
                raise ConversationTooLong(f"Even after compacting, {exc}") from None
        return body

    async def make_room(self, run: Run, target: Any) -> bool:
        """The server refused the last request for its length: the hooks (compaction) make room
        in the window the run now counts on. True when one did."""
        return await self._made_room(run, target, await self.messages(run), window_of(run, target))

    async def _made_room(self, run: Run, target: Any, messages: list[dict[str, Any]], window: int) -> bool:
        made = False
        for hook in self.hooks:
            made = await hook.context_full(run, target, messages, window) or made
        return made

    async def messages(self, run: Run) -> list[dict[str, Any]]:
        """The system message and the session's history as chat messages; each step reads only
        the messages stored after the last one it read."""
        attachments = await self._read(run)
        # Converting a long history takes a tenth of a second and more: never on the loop.
        return await asyncio.to_thread(_converted, run, attachments)

    async def _read(self, run: Run) -> dict[str, Any]:
        """Read what is new for the run's history from the store (the messages stored after the
        last one read, the marker and the system message at the first step): the content of
        the attachments of its user messages, by message id, for the conversion."""
        history, request = run.history, run.request
        added, history.last = await self.store.history_after(request.sessionid, history.last)
        history.messages += [message for message in added
                             if not message["data"].get("servers")]  # the starts of MCP servers: for the person
        if history.marker is None:
            history.marker = await self.store.session_marker(request.sessionid, new_marker())
        attachments = await history.attachments.by_message(self.store, history.messages, history.marker)
        if history.system is None:
            history.system, history.instructions = await system_message(
                self.system_template, request.asker.root, history.marker, self.personal)
            if request.prompt.instructions:  # the prompt's agent (project_commands.py)
                history.system = history.system | {"content": history.system["content"]
                                                   + request.prompt.instructions}
        return attachments


def window_of(run: Run, target: Any) -> int:
    """The window a run's requests are fitted to: the one a refusal taught, the target's (stated
    by the server), or its kind's guess."""
    return run.window or target.context or target.kind.default_context


def _converted(run: Run, attachments: dict[str, Any]) -> list[dict[str, Any]]:
    """The system message and the run's history as chat messages (on a worker thread)."""
    history = run.history
    assert history.system is not None and history.marker is not None  # set by Requests._read
    return [history.system, *history_messages(history.messages, attachments, history.marker, run.messageid,
                                              history.converted)]


Fitted = tuple[dict[str, Any], int]  # (body, pruned): what fitted_body returns


def _converted_and_fitted(run: Run, attachments: dict[str, Any], target: Any, tools: list[dict[str, Any]],
                          window: int, known: bool) -> tuple[list[dict[str, Any]], Fitted | ContextFull]:
    """The messages of `_converted` and what `fitted_body` makes of them, or the ContextFull it
    raised (the hooks are then handed the messages), in one call on a worker thread."""
    messages = _converted(run, attachments)
    try:
        return messages, fitted_body(run, target, messages, tools, window, known)
    except ContextFull as exc:
        return messages, exc


def fitted_body(run: Run, target: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]], window: int,
                known: bool) -> tuple[dict[str, Any], int]:
    """`(body, pruned)`: the request of a step, its messages fitted to the window, and its
    messages' JSON kept in the run's encoder for the request to send. It walks, copies and
    encodes the whole history (a tenth of a second and more in a session of thousands of
    messages), so it runs on a thread, never on the loop; it touches only what the run's
    own step owns while it waits (the history's sizes and encoder). Raises ContextFull."""
    history, limits = run.history, run.request.limits
    messages, pruned = fit_window(messages, tools, window, known=known, sizes=history.sizes)
    body: dict[str, Any] = target.kind.request_body(target, messages, tools, run.request.prompt.reasoning)
    if limits.get("temperature") is not None:
        target.kind.set_temperature(body, limits["temperature"])
    history.encoder.encode_pieces(body)  # the request then encodes only its head
    return body, pruned
