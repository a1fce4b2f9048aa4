"""The JSON of request bodies to a model, encoded once per message of a run.

A run's history repeats its messages at every step, and a long session's request is megabytes
of them: encoding it whole at each step made the step's cost grow with the session. The encoder
keeps the JSON of each message of the last request and encodes only the new ones; the bytes are
exactly those of encoding the whole body.

Must not: change a body, or keep anything past its run (each run has its own encoder).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Stands for the messages while the rest of a body is encoded (a NUL cannot be in any other
# field: JSON writes it escaped, and it ends up as this escaped text only here).
_MESSAGES_MARK = "\x00messages\x00"
_MESSAGES_MARK_JSON = b'"\\u0000messages\\u0000"'
# The same for the tools array, whose JSON (tens of KB) is kept from one encoding of a body to
# the next of the same array: a step's body is encoded where it is built (on a worker thread),
# then again as the kind's streamed request, which adds its fields to the same values.
_TOOLS_MARK = "\x00tools\x00"
_TOOLS_MARK_JSON = b'"\\u0000tools\\u0000"'


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class BodyEncoder:
    """Encodes the request bodies of one run, keeping the JSON of each message for the next
    step's request: a run's history repeats its messages at every step, so a step encodes only
    what is new (the same bytes as encoding the whole body). Only the messages of the last
    request are kept, each with the message itself, so its id stays its own; so is the JSON of
    the last tools array, with the array itself."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[Any, bytes]] = {}
        self._tools: tuple[Any, bytes] | None = None  # the tools array of the last body, and its JSON

    def encode(self, body: Any) -> bytes:
        return b"".join(self.encode_pieces(body))

    def encode_pieces(self, body: Any) -> list[bytes]:
        """The body's JSON in pieces that join into it: the kept messages' bytes as they are, so
        the only copy of a megabytes body is the one that joins it (with the request head)."""
        messages = body.get("messages") if isinstance(body, Mapping) else None
        if not isinstance(messages, list):
            return [_json(body)]
        kept: dict[int, tuple[Any, bytes]] = {}
        pieces = [b""]  # the head's start, set below
        for message in messages:
            entry = self._kept.get(id(message))
            if entry is None or entry[0] is not message:
                entry = (message, _json(message))
            kept[id(message)] = entry
            pieces += (b",", entry[1])
        self._kept = kept
        tools = body.get("tools")
        if isinstance(tools, list) and (self._tools is None or self._tools[0] is not tools):
            self._tools = (tools, _json(tools))
        head = _json({key: (_MESSAGES_MARK if key == "messages" else
                            _TOOLS_MARK if key == "tools" and isinstance(value, list) else value)
                      for key, value in body.items()})
        before, mark, after = head.partition(_MESSAGES_MARK_JSON)
        if not mark or _MESSAGES_MARK_JSON in after:  # another field holds the mark's text: no shortcut
            return [_json(body)]
        if isinstance(tools, list) and self._tools is not None:
            if (before + after).count(_TOOLS_MARK_JSON) != 1:
                return [_json(body)]
            before = before.replace(_TOOLS_MARK_JSON, self._tools[1])
            after = after.replace(_TOOLS_MARK_JSON, self._tools[1])
        pieces[0] = before + b"["
        if len(pieces) > 1:
            del pieces[1]  # no comma before the first message
        pieces.append(b"]" + after)
        return pieces
