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


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class BodyEncoder:
    """Encodes the request bodies of one run, keeping the JSON of each message for the next
    step's request: a run's history repeats its messages at every step, so a step encodes only
    what is new (the same bytes as encoding the whole body). Only the messages of the last
    request are kept, each with the message itself, so its id stays its own."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[Any, bytes]] = {}

    def encode(self, body: Any) -> bytes:
        messages = body.get("messages") if isinstance(body, Mapping) else None
        if not isinstance(messages, list):
            return _json(body)
        kept: dict[int, tuple[Any, bytes]] = {}
        encoded = []
        for message in messages:
            entry = self._kept.get(id(message))
            if entry is None or entry[0] is not message:
                entry = (message, _json(message))
            kept[id(message)] = entry
            encoded.append(entry[1])
        self._kept = kept
        head = _json({key: (_MESSAGES_MARK if key == "messages" else value) for key, value in body.items()})
        if head.count(_MESSAGES_MARK_JSON) != 1:  # another field holds the mark's text: no shortcut
            return _json(body)
        return head.replace(_MESSAGES_MARK_JSON, b"[" + b",".join(encoded) + b"]", 1)
