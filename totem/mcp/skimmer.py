"""A JSON message too long to keep whole, read as it arrives in bounded memory.

Owns `Skimmer`: fed the bytes of one JSON value in pieces (a line of a stdio MCP server, whose
tool result may be tens of megabytes: the Python SDK sends a result's text twice, as `content`
and as `structuredContent`), it builds the value with every string cut to MAX_STRING_CHARS
characters (a `CutText`, which knows the size of the whole). Strings are read with a regular
expression; the structure costs a step of Python a value, so once MAX_VALUES values (and names) or
MAX_KEPT_BYTES of strings are kept, or the nesting passes MAX_DEPTH, the rest is not parsed: only
its last TAIL_BYTES are kept, where a top-level `"id"` written last (the TypeScript SDK writes
`{"result": ..., "jsonrpc": "2.0", "id": 1}`) is found, so the answer still finds its request. A
tool result reaches the model cut to a far shorter length (agent/calls.py), so nothing the model
would read is lost.

Well-formed JSON gives what json.loads gives, cut as said; what is not well formed is refused
(ValueError), leniently: a trailing comma or a missing colon goes through.

Must not: keep the message whole, or decide what a message means (the client does).
"""

from __future__ import annotations

import json
import re

MAX_STRING_CHARS = 64 * 1024
# The most JSON that MAX_STRING_CHARS characters can take: a \uXXXX surrogate pair is 12 bytes
# for one character.
MAX_STRING_BYTES = MAX_STRING_CHARS * 12
MAX_KEPT_BYTES = 4 * 1024 * 1024
# Values and names, each a step of Python (up to 10 us): what one piece costs the loop stays short.
MAX_VALUES = 2_000
MAX_DEPTH = 64
MAX_TOKEN_BYTES = 64  # a number or literal longer than this is not JSON
TAIL_BYTES = 4096
_STRING_BODY = re.compile(rb'(?:[^"\\]++|\\.)*+')  # up to the closing quote, or a backslash that ends the piece
_SPACE = re.compile(rb"[ \t\r\n]*+")
_TOKEN = re.compile(rb'[^,:\[\]{}" \t\r\n]*+')
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][-+]?[0-9]++)?")
_LITERALS = {b"true": True, b"false": False, b"null": None}
# The top-level id written last, perhaps before "jsonrpc", at the end of the message.
_LAST_ID = re.compile(rb'"id"\s*:\s*(-?[0-9]+|"(?:[^"\\]|\\.){0,200}")\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?}\s*\Z')


class CutText(str):
    """A string of the message cut to its first MAX_STRING_CHARS characters; `size` is the
    length of the whole in the JSON, in bytes."""

    size: int

    def __new__(cls, text: str, size: int) -> CutText:
        cut = super().__new__(cls, text)
        cut.size = size
        return cut


class _Frame:
    __slots__ = ("value", "key", "expects_key")

    def __init__(self, value: dict | list):
        self.value = value
        self.key: str | None = None  # the member of an object whose value comes next
        self.expects_key = isinstance(value, dict)


class Skimmer:
    """One JSON value read piece by piece (see the module's docstring): `feed` each piece, then
    `finish`. `size` counts the bytes fed, `cut` says whether anything was cut or left out."""

    def __init__(self) -> None:
        self.size = 0
        self.cut = False
        self._stack: list[_Frame] = []
        self._root: object = None
        self._done = False
        self._broken: str | None = None
        self._tail: bytes | None = None  # past the budget: the last TAIL_BYTES, not parsed
        self._values = 0
        self._kept = 0
        self._string: bytearray | None = None  # the kept bytes of the string being read
        self._string_size = 0
        self._escaped = False  # the piece ended just after a backslash in a string
        self._token: bytearray | None = None

    @property
    def began_object(self) -> bool:
        """The value began as an object (a JSON-RPC message does)."""
        return isinstance(self._root, dict)

    def feed(self, piece: bytes | bytearray) -> None:
        self.size += len(piece)
        index, end = 0, len(piece)
        while index < end and self._broken is None:
            if self._tail is not None:
                self._tail = (self._tail + piece[max(index, end - TAIL_BYTES):])[-TAIL_BYTES:]
                return
            if self._string is not None:
                index = self._read_string(piece, index)
            elif self._token is not None:
                stop = _after(_TOKEN, piece, index)
                self._token += piece[index:stop]
                index = stop
                if len(self._token) > MAX_TOKEN_BYTES:
                    self._broken = "a number or word is too long"
                elif index < end:
                    self._end_token()
            else:
                index = self._read_structure(piece, index)

    def finish(self) -> object:
        """The value, cut as said. Raises ValueError for what is not one whole JSON value."""
        if self._token is not None and self._broken is None:
            self._end_token()
        if self._broken is not None:
            raise ValueError(self._broken)
        if self._tail is not None:
            if isinstance(self._root, dict) and "id" not in self._root:
                found = _LAST_ID.search(self._tail)
                if found is not None:
                    self._root["id"] = json.loads(found.group(1))
            return self._root
        if not self._done or self._string is not None:
            raise ValueError("the message ends before its value does")
        return self._root

    # -- structure ------------------------------------------------------------------------

    def _read_structure(self, piece: bytes | bytearray, index: int) -> int:
        byte = piece[index]
        if byte in b" \t\r\n":
            return _after(_SPACE, piece, index)
        top = self._stack[-1] if self._stack else None
        if self._done:
            self._broken = "more than one value"
        elif byte in b"}]":
            self._close(byte == 0x7D)
        elif byte == 0x3A:  # :
            if top is None or top.key is None:
                self._broken = "a colon out of place"
        elif byte == 0x2C:  # ,
            if top is None:
                self._broken = "a comma out of place"
        elif self._stack and (self._values >= MAX_VALUES or self._kept >= MAX_KEPT_BYTES
                              or (byte in b"{[" and len(self._stack) >= MAX_DEPTH)):
            self.cut = True  # a value begins past the budget: the rest is not parsed
            self._tail = b""
            return index
        elif byte == 0x22:  # "
            self._string = bytearray()
            self._string_size = 0
        elif byte in b"{[":
            container: dict | list = {} if byte == 0x7B else []
            self._attach(container)
            self._stack.append(_Frame(container))
        else:
            self._token = bytearray()
            return index
        return index + 1

    def _close(self, is_object: bool) -> None:
        if not self._stack:
            self._broken = "a bracket closes nothing"
            return
        frame = self._stack.pop()
        if is_object != isinstance(frame.value, dict):
            self._broken = "the brackets do not match"
        elif frame.key is not None:
            self._broken = "a member without a value"
        self._done = not self._stack

    def _attach(self, value) -> None:
        """A value read (or a container begun) goes into its container."""
        if not self._stack:
            self._root, self._done = value, not isinstance(value, (dict, list))
            return
        top = self._stack[-1]
        if isinstance(top.value, list):
            self._values += 1
            top.value.append(value)
        elif top.expects_key:
            self._values += 1
            if not isinstance(value, str):
                self._broken = "a member's name is not a string"
            top.key, top.expects_key = value, False
        elif top.key is None:
            self._broken = "a value without a name"
        else:
            self._values += 1
            top.value[top.key] = value
            top.key, top.expects_key = None, True

    def _end_token(self) -> None:
        assert self._token is not None
        token, self._token = bytes(self._token), None
        if token in _LITERALS:
            self._attach(_LITERALS[token])
        elif _NUMBER.fullmatch(token):
            self._attach(float(token) if any(c in token for c in b".eE") else int(token))
        else:
            self._broken = f"{token[:20]!r} is not JSON"

    # -- strings ----------------------------------------------------------------------------

    def _read_string(self, piece: bytes | bytearray, index: int) -> int:
        end = len(piece)
        if self._escaped:  # the byte after a backslash that ended the last piece
            self._escaped = False
            self._keep(piece, index, index + 1)
            index += 1
            if index == end:
                return end
        stop = _after(_STRING_BODY, piece, index)
        self._keep(piece, index, stop)
        if stop == end:
            return end
        if piece[stop] == 0x22:  # the closing quote
            self._end_string()
            return stop + 1
        self._keep(piece, stop, end)  # a backslash that ends the piece: its escaped byte comes next
        self._escaped = True
        return end

    def _keep(self, piece: bytes | bytearray, start: int, stop: int) -> None:
        assert self._string is not None
        self._string_size += stop - start
        room = MAX_STRING_BYTES - len(self._string)
        if room > 0:
            self._string += piece[start:min(stop, start + room)]

    def _end_string(self) -> None:
        assert self._string is not None
        raw, self._string = bytes(self._string), None
        self._kept += len(raw)
        text = _decode(raw)
        if len(raw) < self._string_size or len(text) > MAX_STRING_CHARS:
            self.cut = True
            text = CutText(text[:MAX_STRING_CHARS], self._string_size)
        self._attach(text)


def _after(pattern: re.Pattern[bytes], piece: bytes | bytearray, index: int) -> int:
    """Where a match of `pattern` (which may be empty, so there is one) at `index` ends."""
    match = pattern.match(piece, index)
    assert match is not None
    return match.end()


def _decode(raw: bytes) -> str:
    """The text of a string's JSON body, which may end inside an escape or a character."""
    if b"\\" not in raw:  # no escapes: the bytes are the text (but for a character cut at the end)
        for trim in range(min(len(raw), 3) + 1):
            try:
                return raw[:len(raw) - trim].decode()
            except UnicodeDecodeError:
                continue
        return raw.decode("utf-8", "replace")
    for trim in range(min(len(raw), 12) + 1):
        try:
            value = json.loads(b'"' + raw[:len(raw) - trim] + b'"')
        except ValueError:
            continue
        if isinstance(value, str):
            return value
    return raw.decode("utf-8", "replace")
