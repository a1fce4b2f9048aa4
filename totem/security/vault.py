"""Provider keys at rest: AES-256-GCM under a key derived from the configured secret.

Owns the secret (config `secret`, or `<data>/secret.key`, generated on first start readable by
the owner only), the key derivation and the format of an encrypted value:

    version (1 byte) | nonce (12 bytes, random per value) | ciphertext + GCM tag (16 bytes)

The version byte is also the associated data, so a value cannot be re-labelled. Must not: log,
or put a plaintext, the secret or the derived key into a message, an exception or repr().

Also owns the scrubbing of output (`Scrubber`, `secrets_of`): tool, job and terminal output is
scanned for the provider keys, the access token and the secret before it is stored or sent, and a
match becomes a marker such as `[secret:openai]`. Scrubbing is pure: no I/O except the read of
`<data>/secret.key` in `secrets_of`.
"""

from __future__ import annotations

import base64
import bisect
import itertools
import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator, Mapping
from typing import Any

VERSION = 1
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32
SECRET_FILE = "secret.key"
SECRET_FILE_MODE = 0o600
GENERATED_SECRET_BYTES = 32
MIN_SECRET_CHARS = 16
MAX_SECRET_FILE_BYTES = 4096
# A provider key is a few hundred characters at most; this bounds what decrypt accepts.
MAX_PLAINTEXT_BYTES = 64 * 1024
# Fixed, public inputs of HKDF (RFC 5869): the salt separates Totem from other users of the same
# secret, the info separates this use (provider keys) from any later one.
HKDF_SALT = b"totem.vault"
HKDF_INFO = b"totem provider keys v1"


class VaultError(RuntimeError):
    """The secret cannot be read or created, or a stored value cannot be decrypted.
    The message is one sentence for the person; it never contains key material."""


class Vault:
    """Encrypts and decrypts provider keys. Build it with `Vault.open(config)`."""

    __slots__ = ("_material", "_aead")

    def __init__(self, secret: str | bytes):
        """Derive the key from a secret (text or bytes). Raises VaultError for a short secret."""
        material = secret.encode() if isinstance(secret, str) else bytes(secret)
        if len(material) < MIN_SECRET_CHARS:
            raise VaultError(f"the secret must be at least {MIN_SECRET_CHARS} characters")
        self._material = material
        self._aead = None

    def _cipher(self):
        # cryptography costs ~25 ms and ~9 MB to import: paid on the first key, not at start-up.
        if self._aead is None:
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            from cryptography.hazmat.primitives.kdf.hkdf import HKDF
            key = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=HKDF_SALT,
                       info=HKDF_INFO).derive(self._material)
            self._aead = AESGCM(key)
        return self._aead

    @classmethod
    def open(cls, config) -> Vault:
        """The vault of a configuration: its `secret`, or else `<data>/secret.key`, created on
        first start. Raises VaultError when the file is unsafe (readable by others, not a regular
        file, another owner), damaged or cannot be read or written."""
        if config.secret:
            return cls(config.secret)
        return cls(load_secret_file(config.data))

    def encrypt(self, text: str) -> bytes:
        """The stored form of `text`: version, random nonce, ciphertext and tag."""
        nonce = os.urandom(NONCE_BYTES)
        header = bytes((VERSION,))
        return header + nonce + self._cipher().encrypt(nonce, text.encode("utf-8"), header)

    def decrypt(self, blob: bytes) -> str:
        """The text of a stored value. Raises VaultError for an unknown version, a damaged value,
        or a value encrypted under another secret."""
        blob = bytes(blob)
        if len(blob) < 1 + NONCE_BYTES + TAG_BYTES or len(blob) > 1 + NONCE_BYTES + TAG_BYTES + MAX_PLAINTEXT_BYTES:
            raise VaultError("a stored key is damaged (wrong length)")
        if blob[0] != VERSION:
            raise VaultError(f"a stored key has an unknown format (version {blob[0]})")
        nonce, sealed = blob[1:1 + NONCE_BYTES], blob[1 + NONCE_BYTES:]
        cipher = self._cipher()
        from cryptography.exceptions import InvalidTag
        try:
            plain = cipher.decrypt(nonce, sealed, blob[:1])
        except InvalidTag:
            raise VaultError("a stored key cannot be decrypted: the secret (config 'secret' or "
                             f"the data folder's {SECRET_FILE}) is not the one it was saved with; "
                             "enter the key again") from None
        try:
            return plain.decode("utf-8")
        except UnicodeDecodeError:
            raise VaultError("a stored key is damaged (not text)") from None

    def __repr__(self) -> str:
        return f"<Vault v{VERSION}>"


def load_secret_file(data_dir: str, name: str = SECRET_FILE,
                     lost: str = "stored provider keys must then be entered again") -> str:
    """The secret in `<data_dir>/<name>` (secret.key, or the access token's file), created
    (mode 0600) when it does not exist; `lost` says what a new one costs, for the message of a
    damaged file.

    A file that others can read is refused rather than fixed, as ssh does with a private key:
    someone may already have copied it, and the person should know. Raises VaultError.
    """
    path = os.path.join(data_dir, name)
    try:
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        try:
            return _read_secret(path, lost)
        except FileNotFoundError:
            pass
        _create_secret(path)
        return _read_secret(path, lost)
    except FileNotFoundError:
        raise VaultError(f"{path} disappeared while it was being created") from None
    except OSError as exc:
        raise VaultError(f"{path} cannot be used: {exc.strerror or type(exc).__name__}") from None


def read_secret_file(data_dir: str, name: str) -> str:
    """The secret in `<data_dir>/<name>`, or "" when the file does not exist (never made).
    Raises VaultError for an unsafe, damaged or unreadable file."""
    path = os.path.join(data_dir, name)
    try:
        return _read_secret(path, "nothing else is lost")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise VaultError(f"{path} cannot be read: {exc.strerror or type(exc).__name__}") from None


def _read_secret(path: str, lost: str = "stored provider keys must then be entered again") -> str:
    """Raises FileNotFoundError, OSError, VaultError."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        if os.path.islink(path):
            raise VaultError(f"{path} is a symbolic link; it must be a regular file") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise VaultError(f"{path} is not a regular file")
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise VaultError(f"{path} belongs to another user; it must be yours, with mode 600")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise VaultError(f"{path} can be read by other users (mode {mode:03o}); "
                             f"run: chmod 600 {path}")
        data = os.read(fd, MAX_SECRET_FILE_BYTES + 1)
    finally:
        os.close(fd)
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        text = ""
    if len(data) > MAX_SECRET_FILE_BYTES or len(text) < MIN_SECRET_CHARS:
        raise VaultError(f"{path} is damaged: it must hold one line of at least {MIN_SECRET_CHARS} "
                         f"characters (removing it makes a new one, and {lost})")
    return text


def _create_secret(path: str) -> None:
    """Write a new secret atomically: a private temporary file, then a hard link to the final
    name, which never replaces a secret that another process created meanwhile. Raises OSError."""
    temporary = f"{path}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temporary, flags, SECRET_FILE_MODE)
    try:
        try:
            os.fchmod(fd, SECRET_FILE_MODE)  # the umask can only remove bits; be exact anyway
            os.write(fd, (secrets.token_hex(GENERATED_SECRET_BYTES) + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another start won the race: use its secret
    finally:
        os.unlink(temporary)


# Scrubbing of output -----------------------------------------------------------------------------
#
# Every form a secret may take in output (the value, its JSON, URL, base64 and hex encodings) is a
# literal; the literals of a scrubber become a regex, factored as a trie so that a position is
# examined along one path only and the longest form wins (greedy optional tails). The base64 and hex
# forms make a second trie that also accepts one line break between two characters (a dump wrapped
# at any width); line breaks are in no form's alphabet, so an optional break never opens a second
# path: giving a matched break back fails at once. The scan is therefore O(len(text) * longest
# form) at worst, in C, with no backtracking between alternatives.
# Terminal escape sequences are not part of any form: they are cut out first and matching runs on
# the visible text, which is what a person would read on the screen.

# Shorter values would match ordinary words and numbers.
MIN_SCRUB_CHARS = 8
MARKER = "[secret:{}]"
# Bounds of one escape sequence (ECMA-48 § 5.4): a longer one is not treated as an escape.
MAX_ESCAPE_PARAMS = 32
MAX_ESCAPE_INTERMEDIATES = 4
MAX_ESCAPE_CHARS = 2 + MAX_ESCAPE_PARAMS + MAX_ESCAPE_INTERMEDIATES
# A longer run of escape sequences between two characters ends a match. It bounds what a stream
# holds back while a secret may be in progress (a terminal colouring each character emits ~10).
MAX_ESCAPE_RUN_CHARS = 256
# Base64 and hex may be wrapped: `base64 -w N` (76 by default, RFC 2045 § 6.8), PEM (64, RFC 7468
# § 2), `xxd -p` (60 digits), at any width, by LF, CRLF (a terminal) or CR. One line break at most
# stands between two characters of such a form: a blank line ends it. A form of n characters then
# spans at most n + (n - 1) * MAX_BREAK_CHARS, and that bounds what a stream holds back.
MAX_BREAK_CHARS = 2
# Live output that has been quiet this long gives out what its stream held back (QuietScrub).
QUIET_FLUSH_S = 0.5
# `\r?\n?` rather than `(?:\r\n|\r|\n)?`: the same strings, but two single-character repeats,
# which sre runs about twice as fast as a repeated group.
_LINE_BREAK = r"\r?\n?"
_NO_BREAKS = str.maketrans("", "", "\r\n")
# The start of a wrapped form as far as it has come: characters with at most one line break
# between two of them, and maybe one at the end (whole, or cut after its CR) before the next.
_WRAPPED_START = re.compile(r"[^\r\n](?:\r?\n?[^\r\n])*\r?\n?\Z")
# RFC 3986 § 2.3: the characters that percent-encoding leaves as they are.
URL_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

# CSI (parameter bytes 0x30-0x3F, intermediate bytes 0x20-0x2F, final byte 0x40-0x7E) and the
# character-set designation of `tput sgr0` (ESC ( B). The three byte classes are disjoint and every
# sequence starts with ESC, which no class contains: a run is read in one pass, never re-tried.
_CSI_OPEN = rf"\[[0-?]{{0,{MAX_ESCAPE_PARAMS}}}[ -/]{{0,{MAX_ESCAPE_INTERMEDIATES}}}"
_ESCAPE_RUN = re.compile(rf"(?:\x1b(?:{_CSI_OPEN}[@-~]|[()][0-~]))+")
# The start of an escape sequence cut by the end of a chunk: held until the next chunk completes it.
_ESCAPE_START = re.compile(rf"\x1b(?:{_CSI_OPEN}|[()])?\Z")
_NOT_LABEL = re.compile(r"[^a-z0-9]+")


class Scrubber:
    """Replaces secrets in text with `[secret:<label>]`. Immutable, shareable between threads.

    `Scrubber({"openai": key, "token": token})`: values shorter than MIN_SCRUB_CHARS are ignored,
    labels are reduced to [a-z0-9-]. Each value is also found as its JSON string form, its
    percent-encoding (upper or lower hex), its base64 (standard or URL-safe, padded or not, and at
    any alignment inside a larger base64 text), its hex (lower or upper case), and with terminal
    escape sequences between its characters. The base64 and hex forms are also found wrapped at any
    width (one LF, CRLF or CR between any two of their characters), and the marker then replaces
    the line breaks inside them. An encoding is found when it holds the whole value: the characters
    that carry bits of the value alone (base64 at the edges also carries bits of the neighbouring
    bytes, which stay); a part of the value, encoded, is left as it is.
    Use `scrub(text)` for a whole text and `stream()` for output read in chunks.
    """

    __slots__ = ("_regex", "_flat", "_labels", "_forms", "_wrapped", "_firsts", "_flat_chars",
                 "_wrapped_chars", "longest")

    def __init__(self, secrets: Mapping[str, str]):
        values = [(_label(name, "key"), value.strip()) for name, value in secrets.items()
                  if isinstance(value, str)]
        values = [(label, value) for label, value in values if len(value) >= MIN_SCRUB_CHARS]
        labels: dict[str, str] = {}
        # The values first: a value of one secret that is also an encoding of another keeps its
        # own label. Among equal values, the first label wins.
        for label, value in values:
            labels.setdefault(value, label)
        flat = set(labels)
        wrapped: set[str] = set()
        for label, value in values:
            for forms, found in ((flat, _forms_of(value)), (wrapped, _wrapped_forms_of(value))):
                forms.update(found)
                for form in found:
                    labels.setdefault(form, label)
        self._labels = labels
        self._forms = sorted(flat)
        self._wrapped = sorted(wrapped)
        self._firsts = frozenset(form[0] for form in labels)
        self._flat_chars = max(map(len, flat), default=0)
        self._wrapped_chars = max(map(len, wrapped), default=0)
        # The most characters a match can span (the longest wrapped form with a CRLF between each
        # two of its characters, for a value of n bytes 3 * 2n - 2): a stream holds back at most
        # this minus one.
        wrapped_span = self._wrapped_chars + max(self._wrapped_chars - 1, 0) * MAX_BREAK_CHARS
        self.longest = max(self._flat_chars, wrapped_span)
        self._regex = self._flat = None
        if labels:  # a value gives flat forms (itself) and wrapped ones (its hex) alike
            self._regex = re.compile(_scan_pattern(self._forms, self._wrapped))
            self._flat = re.compile(_trie_pattern(self._forms))

    @classmethod
    def empty(cls) -> Scrubber:
        """A scrubber that finds nothing: `scrub` and its streams return their input."""
        return cls({})

    def scrub(self, text: str) -> str:
        """`text` with every secret replaced by its marker."""
        if self._regex is None:
            return text
        return self._scan(text, final=True)[0]

    def stream(self) -> ScrubStream:
        """A scrubbing stream for one output, fed chunk by chunk (see ScrubStream)."""
        return ScrubStream(self)

    def _scan(self, raw: str, final: bool) -> tuple[str, str]:
        """(what can be emitted now, secrets replaced; the end of `raw` held back).

        Unless `final`, the held part is the longest end of the visible text that is the start of
        a form and may become a secret with the next chunk; it is rescanned then.
        """
        escapes = _Escapes(raw) if "\x1b" in raw else None
        visible = escapes.visible if escapes else raw
        size = len(visible)
        hold = size if final else self._hold_start(visible, 0)
        out = []
        done = 0
        for start, end, label in self._matches(visible):
            if start >= hold:
                break
            # A match that starts before `hold` cannot grow: visible[start:] is not the start of
            # a longer form (or `hold` would be at or before `start`).
            if escapes:
                out.append(raw[escapes.after(done):escapes.at(start)])
                out.append(MARKER.format(label))
                # Keep the escapes inside the match, so colours end as the program set them.
                out.append(escapes.between(start, end))
            else:
                out.append(raw[done:start])
                out.append(MARKER.format(label))
            done = end
            if end > hold:
                hold = self._hold_start(visible, end)
        cut = escapes.at(hold) if escapes else hold
        out.append(raw[escapes.after(done) if escapes else done:cut])
        return "".join(out), raw[cut:]

    def _matches(self, visible: str) -> Iterator[tuple[int, int, str]]:
        """(start, end, label) of each secret in `visible`, left to right and not overlapping:
        at the leftmost place where a form starts, the longest form found there."""
        if self._regex is None or self._flat is None:
            return  # no secrets (the callers do not scan then)
        search, flat = self._regex.search, self._flat.match
        labels = self._labels
        at = 0
        while (match := search(visible, at)) is not None:
            start, end = match.span()
            form = match.group()
            if match.lastindex is not None:  # the empty group of a wrapped form
                form = form.translate(_NO_BREAKS)
                # The flat forms were not tried here: one of them may be longer.
                other = flat(visible, start)
                if other is not None and other.end() > end:
                    end, form = other.end(), other.group()
            yield start, end, labels[form]
            at = end

    def _hold_start(self, visible: str, floor: int) -> int:
        """The first index from `floor` at which the rest of `visible` may grow into a match (a
        proper prefix of a flat form, or of a wrapped form with its line breaks), or
        len(visible)."""
        size = len(visible)
        low = max(floor, size - self.longest + 1)
        window = visible[low:]
        broken = "\n" in window or "\r" in window
        joined = window.translate(_NO_BREAKS) if broken else window
        joined_at = 0  # the index in `joined` of visible[index]
        for index in range(low, size):
            char = visible[index]
            if char == "\n" or char == "\r":
                continue  # no form starts with a line break
            if char in self._firsts:
                # A tail as long as the longest form cannot be a proper prefix of it.
                if size - index < self._flat_chars and _begins_longer(self._forms, visible[index:]):
                    return index
                if (len(joined) - joined_at < self._wrapped_chars
                        and _begins_longer(self._wrapped, joined[joined_at:])
                        and (not broken or _WRAPPED_START.match(visible, index))):
                    return index
            joined_at += 1
        return size

    def __repr__(self) -> str:
        forms = len(self._forms) + len(self._wrapped)
        return f"<Scrubber {len(set(self._labels.values()))} labels, {forms} forms>"


class ScrubStream:
    """Scrubs one output read in chunks: `feed(chunk)` returns what is safe to emit now and
    `flush()` the rest at the end.

    A secret split across any number of chunks is found. What is held back is the end of the
    output that could still become a secret: at most `Scrubber.longest - 1` visible characters
    (line breaks inside a wrapped encoding included), plus the escape sequences among them and an
    escape sequence cut by the end of the chunk.
    Text that cannot start a secret is returned at once. Not thread-safe: one stream per output.
    """

    __slots__ = ("_scrubber", "_held")

    def __init__(self, scrubber: Scrubber):
        self._scrubber = scrubber
        self._held = ""

    def feed(self, text: str) -> str:
        """The scrubbed output that can be emitted after `text`; the rest is held back."""
        scrubber = self._scrubber
        if scrubber._regex is None:
            return text
        raw = self._held + text if self._held else text
        pending = ""
        escape = raw.rfind("\x1b", max(0, len(raw) - MAX_ESCAPE_CHARS))
        if escape >= 0 and _ESCAPE_START.match(raw, escape):
            raw, pending = raw[:escape], raw[escape:]
        out, held = scrubber._scan(raw, final=False)
        self._held = held + pending
        return out

    @property
    def holding(self) -> bool:
        """Whether an end of the output is held back (flush gives it out)."""
        return bool(self._held)

    def flush(self) -> str:
        """The held-back end of the output, scrubbed. The stream may then be fed again, but a
        secret that straddles a flush is not found."""
        held, self._held = self._held, ""
        if not held:
            return ""
        return self._scrubber._scan(held, final=True)[0]


class QuietScrub:
    """A ScrubStream for live output that someone watches (a running command, a background
    job): what the stream holds back, the end of the output that may still grow into a secret,
    is given out scrubbed to `emit` once the output has been quiet for `quiet_s`, so the last
    letters of "serving" show while the command sleeps. `feed` and `flush` are ScrubStream's.

    The price: a secret printed in pieces more than `quiet_s` apart is not found. Scrubbing
    guards against a disclosure by accident; a command that means to show a secret can encode
    it in ways no scrubber finds (the sandbox is what keeps secrets out of reach).
    `call_later(delay, callback)` is the event loop's; not thread-safe.
    """

    __slots__ = ("_stream", "_emit", "_call_later", "_quiet_s", "_timer")

    def __init__(self, stream: ScrubStream, emit: Callable[[str], None],
                 call_later: Callable[[float, Callable[[], None]], Any], quiet_s: float = QUIET_FLUSH_S):
        self._stream = stream
        self._emit = emit
        self._call_later = call_later
        self._quiet_s = quiet_s
        self._timer: Any = None

    def feed(self, text: str) -> str:
        out = self._stream.feed(text)
        self._cancel()
        if self._stream.holding:
            self._timer = self._call_later(self._quiet_s, self._quiet)
        return out

    def flush(self) -> str:
        self._cancel()
        return self._stream.flush()

    def _quiet(self) -> None:
        self._timer = None
        tail = self._stream.flush()
        if tail:
            self._emit(tail)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _Escapes:
    """A text without its escape sequences (`visible`), and the map back to the text."""

    __slots__ = ("visible", "_raw", "_spans", "_positions", "_removed")

    def __init__(self, raw: str):
        spans = [match.span() for match in _ESCAPE_RUN.finditer(raw)
                 if match.end() - match.start() <= MAX_ESCAPE_RUN_CHARS]
        parts = []
        positions = []  # the visible index before which each run stands
        removed = [0]  # removed[k]: characters of the runs before run k
        last = 0
        for start, end in spans:
            parts.append(raw[last:start])
            positions.append(start - removed[-1])
            removed.append(removed[-1] + end - start)
            last = end
        parts.append(raw[last:])
        self.visible = "".join(parts)
        self._raw = raw
        self._spans = spans
        self._positions = positions
        self._removed = removed

    def at(self, index: int) -> int:
        """The index in the text of visible character `index` (after the escapes before it)."""
        return index + self._removed[bisect.bisect_right(self._positions, index)]

    def after(self, index: int) -> int:
        """The index in the text just after visible character `index - 1`."""
        return index + self._removed[bisect.bisect_left(self._positions, index)]

    def between(self, start: int, end: int) -> str:
        """The escape sequences between visible characters `start` and `end - 1`."""
        first = bisect.bisect_right(self._positions, start)
        last = bisect.bisect_left(self._positions, end)
        return "".join(self._raw[a:b] for a, b in self._spans[first:last])


def secrets_of(config, provider_keys: Mapping[str, str]) -> dict[str, str]:
    """The label → value map of a Scrubber: the access token (`token`), the secret (`secret`:
    the config's, or else the one in `<data>/secret.key` when that file exists) and each provider
    key, labelled with the provider's name reduced to [a-z0-9-] (`-2`, `-3`, ... on a clash).
    Empty values are left out. Reads a file: call it when the keys change, not for each output.
    Raises nothing."""
    found: dict[str, str] = {}

    def add(label: str, value: str) -> None:
        if not value:
            return
        unique, number = label, 2
        while unique in found:
            unique, number = f"{label}-{number}", number + 1
        found[unique] = value

    add("token", config.token)
    add("secret", config.secret or _stored_secret(config.data))
    for name, key in provider_keys.items():
        add(_label(name, "provider"), key)
    return found


def _stored_secret(data_dir: str) -> str:
    """The secret of `<data_dir>/secret.key`, or "" when it is missing or unusable (never made)."""
    try:
        return _read_secret(os.path.join(data_dir, SECRET_FILE))
    except (OSError, VaultError):
        return ""


def _label(name: str, default: str) -> str:
    """`name` reduced to [a-z0-9-]: it goes into output, so it carries no other character."""
    return _NOT_LABEL.sub("-", str(name).lower()).strip("-") or default


def _begins_longer(forms: list[str], tail: str) -> bool:
    """Whether one of `forms` (sorted) starts with `tail` and is longer."""
    # The forms that start with `tail` follow it in sorted order.
    found = bisect.bisect_left(forms, tail)
    if found < len(forms) and forms[found] == tail:
        found += 1
    return found < len(forms) and forms[found].startswith(tail)


def _forms_of(value: str) -> set[str]:
    """The ways `value` may be written in output on one line, besides itself: JSON and URL."""
    forms: set[str] = set()
    for ascii_only in (True, False):
        escaped = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
        upper_hex = re.sub(r"\\u[0-9a-f]{4}", lambda m: "\\u" + m.group()[2:].upper(), escaped)
        for form in (escaped, upper_hex):
            forms.update((form, form.replace("/", "\\/")))  # PHP and others escape the slash
    data = value.encode("utf-8")
    # Percent-encoding of every byte but the unreserved ones (RFC 3986 § 2.1: either case).
    upper = "".join(chr(byte) if byte in URL_UNRESERVED else f"%{byte:02X}" for byte in data)
    lower = "".join(chr(byte) if byte in URL_UNRESERVED else f"%{byte:02x}" for byte in data)
    forms.update((upper, lower, upper.replace("%20", "+"), lower.replace("%20", "+")))
    forms.discard(value)
    forms.discard("")
    return forms


def _wrapped_forms_of(value: str) -> set[str]:
    """The encodings of `value` that dumps wrap into lines: base64 and hex."""
    forms: set[str] = set()
    data = value.encode("utf-8")
    # Base64 (RFC 4648 § 4 and § 5). Inside a larger encoded text the value starts at byte 0, 1 or
    # 2 of a 3-byte group; character j of the encoding carries bits [6j, 6j + 6), so the characters
    # made of the value's bits alone are the same whatever surrounds it.
    for shift in range(3):
        encoded = base64.b64encode(bytes(shift) + data).decode("ascii")
        inner = encoded[(8 * shift + 5) // 6:(8 * shift + 8 * len(data)) // 6]
        whole = (encoded, encoded.rstrip("=")) if shift == 0 else ()
        for form in (inner, *whole):
            forms.update((form, form.translate(_URLSAFE)))
    # Hex (`xxd -p`, `bytes.hex()`): byte-aligned, so the value's digits are the same whatever
    # surrounds it. Either case (`xxd -p -u`), not mixed.
    forms.update((data.hex(), data.hex().upper()))
    forms.discard("")
    return forms


_URLSAFE = str.maketrans("+/", "-_")


def _scan_pattern(flat: list[str], wrapped: list[str]) -> str:
    """The regex of a scrubber: `flat` forms as they are and `wrapped` forms with a line break
    allowed between two characters (both sorted, distinct, non-empty).

    It branches on the first character at the top, where sre then skips in C the positions at
    which no form starts (its charset prefix, lost when a branch opens with a group). Under a first
    character the wrapped forms come first, marked by an empty group: `match.lastindex` is set
    when a wrapped form matched, and the flat forms at that place must then be tried apart.
    """
    branches = []
    for first in sorted({word[0] for word in flat} | {word[0] for word in wrapped}):
        tails = []
        for marker, between, words in (("()", _LINE_BREAK, wrapped), ("", "", flat)):
            rests = [word[1:] for word in words if word[0] == first]
            longer = [rest for rest in rests if rest]
            if not rests:
                continue
            tail = between + _trie_pattern(longer, between) if longer else ""
            if longer and len(longer) < len(rests):  # the first character alone is a form too
                tail = f"(?:{tail})?"
            tails.append(marker + tail)
        body = tails[0] if len(tails) == 1 else f"(?:{'|'.join(tails)})"
        branches.append(re.escape(first) + body)
    return "|".join(branches)


def _trie_pattern(words: list[str], between: str = "") -> str:
    """A regex matching any of `words` (sorted, distinct, non-empty), the longest at a position,
    with the regex `between` allowed between any two characters of a word.

    The words are factored by common prefixes: `ab(?:c(?:de)?|x)` for ab, abc, abcde, abx. The
    greedy `?` tries the longer words first; branches differ in their first character, so at most
    one is followed. Nesting grows with the branch points of a word, not with its length. `between`
    must match no character of a word, or the branches would no longer exclude each other; it goes
    inside an optional tail, so that a match never ends with it.
    """
    prefix = os.path.commonprefix([words[0], words[-1]])
    rest = [word[len(prefix):] for word in words]
    optional = rest[0] == ""
    if optional:
        rest = rest[1:]
    head = between.join(map(re.escape, prefix))
    if not rest:
        return head
    groups = itertools.groupby(rest, key=lambda word: word[0])
    branches = [_trie_pattern(list(group), between) for _, group in groups]
    body = "|".join(branches)
    if len(branches) > 1:
        body = f"(?:{body})"
    if prefix:  # `between` may stand between the prefix and the branches
        body = between + body
    if optional:
        body = f"(?:{body})?"
    return head + body
