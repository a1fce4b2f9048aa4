"""The clock and the ids of every row: milliseconds since the epoch, and short ids that sort by
creation time."""

from __future__ import annotations

import secrets
import threading
import time

ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def now_ms() -> int:
    """Milliseconds since the epoch: the one time format of the API and the database."""
    return time.time_ns() // 1_000_000


def _base36(value: int, width: int) -> str:
    digits: list[str] = []
    for _ in range(width):
        value, rest = divmod(value, 36)
        digits.append(ID_ALPHABET[rest])
    return "".join(reversed(digits))


class IdMaker:
    """Short ids that sort by creation time, also within one millisecond."""

    def __init__(self) -> None:
        self._last = 0
        self._sequence = 0
        self._lock = threading.Lock()

    def new(self) -> str:
        with self._lock:
            ms = now_ms()
            if ms <= self._last:
                self._sequence += 1
                ms = self._last
            else:
                self._last, self._sequence = ms, 0
            sequence = self._sequence
        random_part = "".join(secrets.choice(ID_ALPHABET) for _ in range(4))
        return _base36(ms, 9) + _base36(sequence, 3) + random_part
