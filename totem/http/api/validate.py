"""Field-by-field validation of action inputs, listing every problem at once.

`Input` wraps a JSON body (or a query) and collects one error per bad field; `done()` raises
them all as one BadRequest in the `$.invalid` shape. It knows types and ranges, not meaning.
"""

from __future__ import annotations

import re

from totem.errors import BadRequest

MAX_TEXT_CHARS = 100_000
# What a number in a query string may be: ASCII digits (str.isdigit() also takes "²" and int()
# then fails), one optional minus.
INTEGER_TEXT = re.compile(r"-?[0-9]+")
_MISSING = object()


class Input:
    """The fields of one request; read each with its type, then call done()."""

    def __init__(self, data, allowed: tuple[str, ...] | None = None, where: str = "body"):
        self.errors: list[tuple[str, str]] = []
        if not isinstance(data, dict):
            raise BadRequest((where, "a JSON object is required"))
        self.data = data
        if allowed is not None:
            for name in data:
                if name not in allowed:
                    self.errors.append((name, "unknown field"))

    def _get(self, name: str, required: bool):
        value = self.data.get(name, _MISSING)
        if value is _MISSING or value is None:
            if required:
                self.errors.append((name, "is required"))
            return _MISSING
        return value

    def text(self, name: str, required: bool = False, max_chars: int = MAX_TEXT_CHARS,
             strip: bool = True, allow_empty: bool = False, default=None):
        value = self._get(name, required)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            self.errors.append((name, "must be text"))
            return default
        if strip:
            value = value.strip()
        if not value and not allow_empty:
            self.errors.append((name, "must not be empty"))
            return default
        if len(value) > max_chars:
            self.errors.append((name, f"must be at most {max_chars} characters"))
            return default
        if "\x00" in value:
            self.errors.append((name, "must not contain a NUL character"))
            return default
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            self.errors.append((name, "must be valid Unicode text (no lone surrogates)"))
            return default
        return value

    def boolean(self, name: str, required: bool = False, default=None):
        value = self._get(name, required)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            self.errors.append((name, "must be true or false"))
            return default
        return value

    def integer(self, name: str, low: int, high: int, required: bool = False, default=None):
        value = self._get(name, required)
        if value is _MISSING:
            return default
        if isinstance(value, str) and INTEGER_TEXT.fullmatch(value.strip()):
            value = int(value)  # query strings carry numbers as text
        if isinstance(value, bool) or not isinstance(value, int):
            self.errors.append((name, "must be a whole number"))
            return default
        if not low <= value <= high:
            self.errors.append((name, f"must be from {low} to {high}"))
            return default
        return value

    def choice(self, name: str, options: tuple[str, ...], required: bool = False, default=None):
        value = self._get(name, required)
        if value is _MISSING:
            return default
        if value not in options:
            self.errors.append((name, f"must be one of {', '.join(options)}"))
            return default
        return value

    def texts(self, name: str, max_items: int, max_chars: int = MAX_TEXT_CHARS, default=None):
        """A list of non-empty texts (each as `text()` checks it, not stripped)."""
        value = self._get(name, False)
        if value is _MISSING:
            return default
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.errors.append((name, "must be a list of texts"))
            return default
        if not value or len(value) > max_items:
            self.errors.append((name, f"must hold from 1 to {max_items} texts"))
            return default
        for item in value:
            if not item or len(item) > max_chars or "\x00" in item:
                self.errors.append((name, f"each must be 1 to {max_chars} characters, with no NUL"))
                return default
        return value

    def done(self) -> None:
        """Raises BadRequest listing every problem found, if any."""
        if self.errors:
            raise BadRequest(self.errors)
