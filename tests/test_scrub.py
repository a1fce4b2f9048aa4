"""Scrubbing of output: secrets in tool, job and terminal output become `[secret:<label>]`."""

import base64
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse

import pytest

from totem.config import parse_values
from totem.security.vault import (
    MAX_ESCAPE_RUN_CHARS,
    MIN_SCRUB_CHARS,
    QUIET_FLUSH_S,
    SECRET_FILE,
    QuietScrub,
    Scrubber,
    load_secret_file,
    secrets_of,
)

KEY = "sk-proj-Zq7/Tb+4xW=9kLm_2Rv~Nq"
TOKEN = "tok3n-9f8e7d6c5b4a3210"
SECRET = "a-configured-secret-of-some-length"
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-~]")
# Widths of wrapped encodings (`base64 -w N`; PEM is 64, MIME 76) and of hex dumps (xxd: 60).
WRAP_WIDTHS = (1, 2, 3, 7, 64, 76)
HEX_WIDTHS = (1, 2, 3, 7, 60, 64, 76, 0)  # 0: one line, as `xxd -p -c 256` or `s.hex()`
NEWLINES = ("\n", "\r\n")
# The key after 0, 1, 2 bytes (the three base64 alignments, from the start of a line) and after
# 40 to 42 (it starts in the middle of a line and goes on over line breaks).
PLAIN_HEAD = b"# written by setup.sh on 2024-05-01\nOPENAI_API_KEY="
HEADS = [PLAIN_HEAD[len(PLAIN_HEAD) - n:] for n in (0, 1, 2, 40, 41, 42)]
PLAIN_TAIL = b"\nOPENAI_ORG=org-1234\n"
# The adversarial inputs are 1 MB; the target is well under a second, the bound is generous.
ADVERSARIAL_BYTES = 1 << 20
ADVERSARIAL_SECONDS = 5.0


def scrubber() -> Scrubber:
    return Scrubber({"openai": KEY, "token": TOKEN, "secret": SECRET})


def stream_all(scrub: Scrubber, chunks) -> str:
    stream = scrub.stream()
    return "".join(stream.feed(chunk) for chunk in chunks) + stream.flush()


def visible(text: str) -> str:
    return ANSI.sub("", text)


def timed(label: str, function, *args):
    began = time.perf_counter()
    result = function(*args)
    elapsed = time.perf_counter() - began
    print(f"{label}: {elapsed * 1000:.0f} ms")
    assert elapsed < ADVERSARIAL_SECONDS, f"{label} took {elapsed:.2f} s"
    return result


def wrap(text: str, width: int, newline: str = "\n") -> str:
    """`text` cut into lines of `width` characters, each ending with `newline`, as `base64 -w`."""
    if width == 0:
        return text + newline
    return "".join(text[i:i + width] + newline for i in range(0, len(text), width))


def run_tool(args: list[str], data: bytes) -> str:
    """The standard output of a real program fed `data`."""
    done = subprocess.run(args, input=data, capture_output=True, check=True, timeout=30)
    return done.stdout.decode()


def unbroken(text: str) -> str:
    return text.replace("\r", "").replace("\n", "")


def assert_replaced_once(out: str, blob: str, left_most: int, right_most: int, marker: str) -> None:
    """One marker in `out`; what is left of `blob` around it is at most the given numbers of
    encoded characters, line breaks not counted."""
    assert out.count(marker) == 1, out
    left, right = out.split(marker)
    assert blob.startswith(left) and blob.endswith(right)
    assert len(unbroken(left)) <= left_most and len(unbroken(right)) <= right_most, (left, right)


# Whole texts

def test_scrub_key_in_plain_output():
    """A key in the middle of output becomes the marker of its provider."""
    assert scrubber().scrub(f"export OPENAI_API_KEY={KEY}\nok\n") == \
        "export OPENAI_API_KEY=[secret:openai]\nok\n"


def test_scrub_key_at_start_and_end():
    """A key that is the whole text, or starts or ends it, is replaced."""
    scrub = scrubber()
    assert scrub.scrub(KEY) == "[secret:openai]"
    assert scrub.scrub(KEY + " tail") == "[secret:openai] tail"
    assert scrub.scrub("head " + KEY) == "head [secret:openai]"
    assert scrub.scrub(KEY + KEY) == "[secret:openai][secret:openai]"


def test_scrub_several_keys():
    """Each secret gets the marker of its own label, token and secret included."""
    text = f"{TOKEN} and {SECRET}, then {KEY}; {TOKEN}"
    assert scrubber().scrub(text) == \
        "[secret:token] and [secret:secret], then [secret:openai]; [secret:token]"


def test_scrub_overlapping_keys_longest_wins():
    """When one key is a prefix of another, the longer one is replaced whole."""
    scrub = Scrubber({"short": "abcdefgh12", "long": "abcdefgh1234567"})
    assert scrub.scrub("x abcdefgh1234567 y") == "x [secret:long] y"
    assert scrub.scrub("x abcdefgh123456 y") == "x [secret:short]3456 y"
    assert scrub.scrub("abcdefgh12") == "[secret:short]"


def test_scrub_key_inside_another_key_leftmost_wins():
    """A key contained in the middle of another: the one that starts first is replaced."""
    scrub = Scrubber({"outer": "XYabcdefghZW", "inner": "abcdefgh"})
    assert scrub.scrub("XYabcdefghZW abcdefgh") == "[secret:outer] [secret:inner]"


def test_scrub_short_value_ignored():
    """Values under MIN_SCRUB_CHARS characters are not scrubbed; no secrets is a pass-through."""
    short = "x" * (MIN_SCRUB_CHARS - 1)
    scrub = Scrubber({"short": short, "blank": "   "})
    text = f"{short} {short}"
    assert scrub.scrub(text) is text
    assert scrub.longest == 0
    stream = scrub.stream()
    assert stream.feed(text) is text
    assert stream.flush() == ""
    assert Scrubber.empty().scrub(KEY) == KEY


def test_scrub_similar_text_no_false_positive():
    """Near misses (a changed, missing or differently cased character) are left alone."""
    scrub = scrubber()
    for text in (KEY[:-1], KEY[1:], KEY[:10] + "X" + KEY[11:], KEY.upper(), KEY.lower(),
                 KEY[:-1] + " " + KEY[-1], "sk-proj-" + "Zq7" * 10, TOKEN[:-1] + "1"):
        assert scrub.scrub(text) == text


def test_scrub_labels_sanitized():
    """Labels in markers carry only [a-z0-9-], whatever the names given."""
    scrub = Scrubber({"Open Router (EU)!": KEY, "": TOKEN})
    assert scrub.scrub(f"{KEY} {TOKEN}") == "[secret:open-router-eu] [secret:key]"


def test_scrub_unicode_secret():
    """A secret with accents and an emoji is found raw and in its encodings."""
    value = "clé-sécrète-ü🔑-42"
    scrub = Scrubber({"uni": value})
    assert scrub.scrub(f"«{value}»") == "«[secret:uni]»"
    assert scrub.scrub(json.dumps({"k": value})) == '{"k": "[secret:uni]"}'
    assert scrub.scrub(urllib.parse.quote(value, safe="")) == "[secret:uni]"
    assert scrub.scrub(base64.b64encode(value.encode()).decode()) == "[secret:uni]"


def test_scrub_repr_has_no_secret():
    """repr() of a scrubber names no value."""
    assert KEY not in repr(scrubber()) and TOKEN not in repr(scrubber())


# Encodings

def test_scrub_json_escaped():
    """The JSON string form of a key (quotes, backslashes, \\uXXXX, escaped slash) is replaced."""
    value = 'pa"ss\\word/é-0123'
    scrub = Scrubber({"db": value})
    for ascii_only in (True, False):
        text = json.dumps({"password": value, "n": 1}, ensure_ascii=ascii_only)
        out = scrub.scrub(text)
        assert json.loads(out) == {"password": "[secret:db]", "n": 1}
    assert scrub.scrub('"pa\\"ss\\\\word\\/\\u00E9-0123"') == '"[secret:db]"'


def test_scrub_url_encoded_upper_and_lower_hex():
    """A key percent-encoded with upper or lower hex digits, or form-encoded, is replaced."""
    scrub = scrubber()
    upper = urllib.parse.quote(KEY, safe="")
    assert upper != KEY and "%2F" in upper
    assert scrub.scrub(f"https://x.test/?key={upper}&a=1") == \
        "https://x.test/?key=[secret:openai]&a=1"
    lower = re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), upper)
    assert scrub.scrub(f"GET /?key={lower} HTTP/1.1") == "GET /?key=[secret:openai] HTTP/1.1"
    spaced = Scrubber({"pw": "two words here"})
    assert spaced.scrub("q=" + urllib.parse.quote_plus("two words here")) == "q=[secret:pw]"


def test_scrub_base64_whole():
    """A key base64-encoded on its own, padded or not, standard or URL-safe, is replaced whole."""
    scrub = scrubber()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        encoded = encode(KEY.encode()).decode()
        assert scrub.scrub(f"auth: {encoded}\n") == "auth: [secret:openai]\n"
        assert scrub.scrub(f"auth: {encoded.rstrip('=')}\n") == "auth: [secret:openai]\n"


def test_scrub_base64_offsets_in_larger_blob():
    """A key inside a larger base64 text is found at each of the three alignments."""
    scrub = scrubber()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for before in range(6):
            head, tail = bytes(range(200, 200 + before)), b"\xff\xfe-tail-bytes"
            blob = encode(head + KEY.encode() + tail).decode()
            out = scrub.scrub(blob)
            assert out.count("[secret:openai]") == 1, (encode, before)
            left, right = out.split("[secret:openai]")
            assert blob.startswith(left) and blob.endswith(right)
            # At most the characters that also carry bits of the neighbouring bytes remain.
            assert len(left) <= (8 * before + 5) // 6
            assert len(right) <= (8 * len(tail) + 5) // 6 + 3


def test_scrub_basic_auth_header():
    """The key as the password of an HTTP Basic header (user:key, base64) is replaced."""
    header = base64.b64encode(f"user:{KEY}".encode()).decode()
    out = scrubber().scrub(f"Authorization: Basic {header}")
    assert "[secret:openai]" in out


# Wrapped base64 and hex dumps

def base64_left(head: bytes) -> int:
    """How many characters of a base64 text may be left before the key: those of `head`."""
    return (8 * len(head) + 5) // 6


BASE64_RIGHT = (8 * len(PLAIN_TAIL) + 5) // 6 + 3  # the tail's characters and padding


def test_scrub_base64_wrapped_any_width():
    """A key in base64 wrapped at any width, LF or CRLF, standard or URL-safe, at each alignment
    and starting inside a line, is replaced with the line breaks inside it."""
    scrub = scrubber()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for head in HEADS:
            encoded = encode(head + KEY.encode() + PLAIN_TAIL).decode()
            for width in WRAP_WIDTHS:
                for newline in NEWLINES:
                    blob = wrap(encoded, width, newline)
                    assert_replaced_once(scrub.scrub(blob), blob, base64_left(head), BASE64_RIGHT,
                                         "[secret:openai]")


def test_scrub_base64_wrapped_whole_key():
    """A key alone in wrapped base64 (LF, CRLF or CR) or in a coloured hex dump becomes one
    marker; the final line break stays."""
    scrub = scrubber()
    for value, label in ((KEY, "openai"), (TOKEN, "token"), (SECRET, "secret")):
        encoded = base64.b64encode(value.encode()).decode()
        for width in WRAP_WIDTHS:
            for newline in NEWLINES + ("\r",):
                assert scrub.scrub(wrap(encoded, width, newline)) == f"[secret:{label}]{newline}"
        coloured_dump = coloured(wrap(value.encode().hex(), 7, "\r\n"))
        assert visible(scrub.scrub(coloured_dump)) == f"[secret:{label}]\r\n"


@pytest.mark.skipif(shutil.which("base64") is None, reason="no base64 program")
def test_scrub_base64_program_output():
    """The output of the real `base64 -w N`, with LF or CRLF (a terminal), has the key replaced."""
    scrub = scrubber()
    for head in HEADS[:3] + HEADS[-1:]:
        data = head + KEY.encode() + PLAIN_TAIL
        for width in WRAP_WIDTHS:
            output = run_tool(["base64", "-w", str(width)], data)
            assert output == wrap(base64.b64encode(data).decode(), width)
            for newline in NEWLINES:
                blob = output.replace("\n", newline)
                assert_replaced_once(scrub.scrub(blob), blob, base64_left(head), BASE64_RIGHT,
                                     "[secret:openai]")


def test_scrub_hex_any_case_and_width():
    """A key as hex digits, lower or upper case, on one line or wrapped at any width (a line break
    between the two digits of a byte too), LF or CRLF, is replaced: exactly its digits."""
    scrub = scrubber()
    for head in HEADS:
        digits = (head + KEY.encode() + PLAIN_TAIL).hex()
        for case in (str.lower, str.upper):
            for width in HEX_WIDTHS:
                for newline in NEWLINES:
                    blob = wrap(case(digits), width, newline)
                    assert_replaced_once(scrub.scrub(blob), blob, 2 * len(head),
                                         2 * len(PLAIN_TAIL), "[secret:openai]")
    assert scrub.scrub(f"{SECRET.encode().hex()}\n") == "[secret:secret]\n"


@pytest.mark.skipif(shutil.which("xxd") is None, reason="xxd is not installed (Debian package xxd)")
def test_scrub_xxd_plain_dump():
    """The output of the real `xxd -p` (60 digits a line), `-u` and `-c N`, LF or CRLF, has the key
    replaced."""
    scrub = scrubber()
    for head in HEADS:
        data = head + KEY.encode() + PLAIN_TAIL
        for case in ([], ["-u"]):
            for columns in (None, 1, 2, 3, 7, 32, 38, 256):
                options = ["-c", str(columns)] if columns else []
                output = run_tool(["xxd", "-p", *case, *options], data)
                digits = data.hex().upper() if case else data.hex()
                assert output == wrap(digits, 2 * (columns or 30))
                for newline in NEWLINES:
                    blob = output.replace("\n", newline)
                    assert_replaced_once(scrub.scrub(blob), blob, 2 * len(head),
                                         2 * len(PLAIN_TAIL), "[secret:openai]")


def test_scrub_wrapped_other_data_untouched():
    """base64 and hex of other data, and of a key with a byte changed, missing or in another case,
    wrapped or not, are left alone."""
    scrub = scrubber()
    rng = random.Random(3)
    others = [rng.randbytes(3000), b"just some text that is not a secret at all\n" * 20,
              KEY[:-1].encode(), KEY[1:].encode(), (KEY[:10] + "X" + KEY[11:]).encode(),
              KEY.upper().encode(), TOKEN[:-1].encode(), SECRET[1:].encode()]
    for data in others:
        encodings = (base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode(),
                     data.hex(), data.hex().upper())
        for encoded in encodings:
            for width in (0,) + WRAP_WIDTHS:
                for newline in NEWLINES:
                    blob = wrap(encoded, width, newline)
                    assert scrub.scrub(blob) == blob
                    chunks = [blob[i:i + 5] for i in range(0, len(blob), 5)]
                    assert stream_all(scrub, chunks) == blob


def test_scrub_wrapped_encoding_needs_whole_key():
    """A wrapped encoding is replaced only when it holds the whole key: its start is left."""
    scrub = scrubber()
    for encoded in (base64.b64encode(KEY.encode()).decode(), KEY.encode().hex()):
        part = wrap(encoded[:-2], 1, "\r\n")
        assert scrub.scrub(part) == part
        assert scrub.scrub(part + encoded[-2:]) == "[secret:openai]"


# Terminal escape sequences

def coloured(text: str) -> str:
    return "".join(f"\x1b[3{i % 8};1m{char}\x1b[0m" for i, char in enumerate(text))


def test_scrub_ansi_between_every_character():
    """A key coloured character by character is replaced; the escapes inside are kept."""
    text = "$ cat .env\r\n" + coloured(KEY) + "\r\n$ "
    out = scrubber().scrub(text)
    assert visible(out) == "$ cat .env\r\n[secret:openai]\r\n$ "
    assert out.startswith("$ cat .env\r\n\x1b[30;1m[secret:openai]\x1b[0m\x1b[31;1m")
    assert out.endswith("\x1b[0m\r\n$ ")


def test_scrub_ansi_other_sequences():
    """Cursor moves, private modes and the charset designation of sgr0 do not hide a key."""
    middle = len(KEY) // 2
    text = KEY[:3] + "\x1b(B\x1b[m" + KEY[3:middle] + "\x1b[?25l\x1b[2K\x1b[1;1H" + KEY[middle:]
    assert visible(scrubber().scrub(text)) == "[secret:openai]"


def test_scrub_ansi_long_run_ends_match():
    """A run of escapes longer than MAX_ESCAPE_RUN_CHARS between two characters is not skipped."""
    run = "\x1b[0m" * (MAX_ESCAPE_RUN_CHARS // 4 + 1)
    text = KEY[:5] + run + KEY[5:]
    assert scrubber().scrub(text) == text
    short = "\x1b[0m" * (MAX_ESCAPE_RUN_CHARS // 4)
    assert visible(scrubber().scrub(KEY[:5] + short + KEY[5:])) == "[secret:openai]"


def test_scrub_ansi_inside_encoded_form():
    """Escapes between the characters of an encoded form do not hide it either."""
    encoded = urllib.parse.quote(KEY, safe="")
    assert visible(scrubber().scrub(coloured(encoded))) == "[secret:openai]"


# Streams

def test_stream_split_in_two_at_every_point():
    """A key split across two chunks at any point is found, with the text around it."""
    scrub = scrubber()
    text = f"before {KEY} after"
    for split in range(len(text) + 1):
        assert stream_all(scrub, [text[:split], text[split:]]) == "before [secret:openai] after"


def test_stream_one_character_chunks():
    """Output fed one character at a time is scrubbed like the whole text."""
    scrub = scrubber()
    text = f"{TOKEN}x{KEY}{KEY} {SECRET}\n" + json.dumps({"k": KEY})
    assert stream_all(scrub, text) == scrub.scrub(text)


def test_stream_ansi_split_at_every_point():
    """A coloured key split anywhere, inside an escape sequence too, is found."""
    scrub = scrubber()
    text = "> " + coloured(KEY) + " <"
    whole = scrub.scrub(text)
    assert visible(whole) == "> [secret:openai] <"
    for split in range(len(text) + 1):
        assert stream_all(scrub, [text[:split], text[split:]]) == whole
    assert stream_all(scrub, text) == whole


def test_stream_random_chunks_match_whole_text():
    """Any chunking of mixed output gives the same result as scrubbing the whole text."""
    scrub = scrubber()
    encoded = base64.b64encode(b"xy" + KEY.encode()).decode()
    text = (f"a {KEY} b {KEY[:-2]} c " + coloured(TOKEN) + f" d {encoded} e "
            + urllib.parse.quote(SECRET, safe="") + " \x1b[1")
    whole = scrub.scrub(text)
    rng = random.Random(5)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 12)))
        chunks = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)], strict=True)]
        assert stream_all(scrub, chunks) == whole


def test_stream_overlapping_keys_longest_wins():
    """In a stream, a complete shorter key is held until the longer one is ruled out."""
    scrub = Scrubber({"short": "abcdefgh12", "long": "abcdefgh1234567"})
    stream = scrub.stream()
    assert stream.feed("x abcdefgh12") == "x "
    assert stream.feed("34567 y") == "[secret:long] y"
    assert stream.feed("abcdefgh12") == ""
    assert stream.feed("99") == "[secret:short]99"


def test_stream_delay_bound():
    """Held-back text never exceeds the longest form minus one character."""
    scrub = scrubber()
    rng = random.Random(7)
    # Text rich in starts of forms: pieces of the key and its encodings.
    pieces = [KEY[:n] for n in range(1, len(KEY))] + ["sk-", "c2st", " ", "\n"]
    text = "".join(rng.choice(pieces) for _ in range(400))
    assert scrub.scrub(text) == text
    stream = scrub.stream()
    fed = emitted = 0
    for char in text:
        fed += 1
        emitted += len(stream.feed(char))
        assert fed - emitted <= scrub.longest - 1
    assert emitted + len(stream.flush()) == fed


def test_stream_no_delay_for_unrelated_text():
    """Text that cannot start a secret is returned at once."""
    stream = scrubber().stream()
    assert stream.feed("$ ls\r\nREADME.md docs:\r\n") == "$ ls\r\nREADME.md docs:\r\n"
    assert stream.feed("\x1b[32m$ \x1b[0m") == "\x1b[32m$ \x1b[0m"


def test_stream_line_end_held_until_next_chunk():
    """A line that ends with a character that may begin a wrapped encoding (`base64 -w 1`) keeps
    it and its line break until the next chunk shows what follows."""
    assert base64.b64encode(TOKEN.encode()).startswith(b"d")
    stream = scrubber().stream()
    assert stream.feed("$ ls\r\nREADME.md\r\n") == "$ ls\r\nREADME.m"
    assert stream.feed("$ ") == "d\r\n$ "


def test_stream_flush_returns_held_text():
    """flush() returns the held start of a would-be secret, and the stream can go on."""
    stream = scrubber().stream()
    assert stream.feed("value: " + KEY[:6]) == "value: "
    assert stream.flush() == KEY[:6]
    assert stream.flush() == ""
    assert stream.feed(KEY) == "[secret:openai]"
    assert stream.feed("\x1b[3") == ""
    assert stream.flush() == "\x1b[3"


def test_stream_cut_escape_without_key():
    """An escape sequence cut by a chunk end is held only until the next chunk."""
    stream = scrubber().stream()
    assert stream.feed("ok \x1b[3") == "ok "
    assert stream.feed("1m: ") == "\x1b[31m: "


def wrapped_transcript() -> tuple[str, int]:
    """A terminal session printing the keys in wrapped base64 and hex, and how many there are."""
    steps = [
        ("base64 -w 1 key", wrap(base64.b64encode(KEY.encode()).decode(), 1)),
        ("base64 -w 76 env", wrap(base64.b64encode(HEADS[-1] + KEY.encode()).decode(), 76)),
        ("base64 -w 3 token", wrap(base64.urlsafe_b64encode(b"t=" + TOKEN.encode()).decode(), 3)),
        ("xxd -p -u -c 1 secret", wrap(SECRET.encode().hex().upper(), 2)),
        ("xxd -p -c 7 env", wrap((HEADS[1] + KEY.encode() + PLAIN_TAIL).hex(), 7)),
        ("python -c 'print(s.hex())'", wrap(TOKEN.encode().hex(), 0)),
    ]
    text = "".join(f"$ {command}\n{output}" for command, output in steps) + "$ "
    return text.replace("\n", "\r\n"), len(steps)


def test_stream_wrapped_split_at_every_point():
    """A wrapped key split in two anywhere (inside a CRLF, between the two digits of a byte) is
    found, with the text around it."""
    scrub = scrubber()
    for blob in (wrap(base64.b64encode(KEY.encode()).decode(), 1, "\r\n"),
                 wrap(KEY.encode().hex().upper(), 3, "\r\n"),
                 wrap(base64.b64encode(KEY.encode()).decode(), 7, "\n")):
        text = "$ dump key\r\n" + blob + "$ "
        newline = "\r\n" if blob.endswith("\r\n") else "\n"
        whole = f"$ dump key\r\n[secret:openai]{newline}$ "
        assert scrub.scrub(text) == whole
        for split in range(len(text) + 1):
            assert stream_all(scrub, [text[:split], text[split:]]) == whole


def test_stream_wrapped_random_chunks():
    """Wrapped base64 and hex dumps fed in random chunks give the whole text's result: one marker
    for each key."""
    scrub = scrubber()
    text, count = wrapped_transcript()
    whole = scrub.scrub(text)
    assert len(re.findall(r"\[secret:(?:openai|token|secret)\]", whole)) == count
    rng = random.Random(11)
    for _ in range(300):
        cuts, at = [], 0
        while at < len(text):
            at += rng.randint(1, 40)
            cuts.append(at)
        chunks = [text[a:b] for a, b in zip([0] + cuts, cuts, strict=False)]
        assert stream_all(scrub, chunks) == whole
    assert stream_all(scrub, text) == whole


def test_stream_wrapped_delay_bound():
    """What a stream holds of a wrapped encoding never exceeds `longest - 1`, and `longest` is the
    span of the longest encoding with a CRLF between each two of its characters."""
    value = "0123456789abcdefghijklmnopqrstuvwxyzABCD"
    scrub = Scrubber({"k": value})
    assert scrub.longest == 3 * len(value.encode().hex()) - 2
    for blob in (wrap(value.encode().hex(), 1, "\r\n"),
                 wrap(base64.b64encode(value.encode()).decode(), 1, "\r\n")):
        stream = scrub.stream()
        emitted = held = 0
        for fed, char in enumerate(blob[:-3], 1):  # all but the last character and its line break
            emitted += len(stream.feed(char))
            held = max(held, fed - emitted)
            assert fed - emitted <= scrub.longest - 1
        assert held == len(blob) - 3  # the key may still come: none of it is let out
        assert stream.feed(blob[-3:]) == "[secret:k]\r\n"


# Configuration

def test_secrets_of_config_and_providers():
    """The map holds the token, the secret and each provider key under its sanitized name."""
    config = parse_values({"token": TOKEN, "secret": SECRET}, "/nonexistent")
    found = secrets_of(config, {"OpenAI": KEY, "My Local_LLM": "local-key-123456", "none": "",
                                "Token": "another-token-value"})
    assert found == {"token": TOKEN, "secret": SECRET, "openai": KEY,
                     "my-local-llm": "local-key-123456", "token-2": "another-token-value"}
    assert Scrubber(found).scrub(f"{KEY} {SECRET}") == "[secret:openai] [secret:secret]"


def test_secrets_of_generated_secret_file():
    """Without a configured secret, the one in the data folder is scrubbed; none is created."""
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-scrub-"))
    try:
        data = os.path.join(tmp, "data")
        config = parse_values({"data": data}, tmp)
        assert secrets_of(config, {}) == {}
        assert not os.path.exists(os.path.join(data, SECRET_FILE))
        stored = load_secret_file(data)
        assert secrets_of(config, {}) == {"secret": stored}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# Adversarial inputs

def test_scrub_adversarial_prefix_repeated_fast():
    """1 MB of a key's prefixes, repeated, is scanned quickly, whole or streamed."""
    scrub = scrubber()
    for prefix in (KEY[:-1], urllib.parse.quote(KEY, safe="")[:-1],
                   base64.b64encode(KEY.encode()).decode()[:-2], KEY[:1]):
        text = (prefix * (ADVERSARIAL_BYTES // len(prefix) + 1))[:ADVERSARIAL_BYTES]
        assert timed(f"scrub {prefix[:6]!r}…", scrub.scrub, text) == text
        chunks = [text[i:i + 4096] for i in range(0, len(text), 4096)]
        assert timed(f"stream {prefix[:6]!r}…", stream_all, scrub, chunks) == text


def test_scrub_adversarial_self_overlapping_secret_fast():
    """A periodic secret against its almost-matching repetition stays fast."""
    value = "ab" * 20
    scrub = Scrubber({"p": value})
    text = (("ab" * 19 + "a") * (ADVERSARIAL_BYTES // 39 + 1))[:ADVERSARIAL_BYTES]
    assert timed("periodic", scrub.scrub, text) == text
    text = "a" * ADVERSARIAL_BYTES
    out = timed("one letter", Scrubber({"a": "a" * 64}).scrub, text[:-1] + "b")
    assert out.count("[secret:a]") == (ADVERSARIAL_BYTES - 1) // 64


def test_scrub_adversarial_escapes_fast():
    """1 MB of escape sequences, cut and broken ones included, is scanned quickly."""
    scrub = scrubber()
    cases = {
        "coloured prefix": coloured(KEY[:-1]),
        "open CSI": "\x1b[",
        "lone ESC": "\x1b",
        "long parameters": "\x1b[" + "1;" * 200,
        "escape then prefix": "\x1b[0m" * 60 + KEY[:-1],
    }
    for label, unit in cases.items():
        text = (unit * (ADVERSARIAL_BYTES // len(unit) + 1))[:ADVERSARIAL_BYTES]
        out = timed(f"scrub {label}", scrub.scrub, text)
        assert "[secret:" not in out and visible(out) == visible(text)
        chunks = [text[i:i + 4096] for i in range(0, len(text), 4096)]
        assert timed(f"stream {label}", stream_all, scrub, chunks) == out


def test_scrub_adversarial_many_matches_fast():
    """1 MB made of coloured keys is replaced quickly."""
    scrub = scrubber()
    unit = coloured(KEY) + " "
    text = unit * (ADVERSARIAL_BYTES // len(unit))
    out = timed("many coloured keys", scrub.scrub, text)
    assert visible(out) == "[secret:openai] " * (ADVERSARIAL_BYTES // len(unit))


def test_scrub_adversarial_wrapped_noise_one_pass():
    """1 MB of base64 and hex noise, wrapped or not, and of a wrapped key's prefix repeated, is
    scanned whole or streamed without backtracking (which would not end in minutes)."""
    scrub = scrubber()
    noise = random.Random(13).randbytes(ADVERSARIAL_BYTES // 2)
    key_base64 = base64.b64encode(KEY.encode()).decode()
    cases = {
        "base64 noise": base64.b64encode(noise).decode(),
        "base64 -w 76 noise": wrap(base64.b64encode(noise).decode(), 76),
        "base64 -w 1 noise": wrap(base64.b64encode(noise).decode(), 1, "\r\n"),
        "hex noise": noise.hex(),
        "xxd -p noise": wrap(noise.hex().upper(), 60),
        "hex -w 1 noise": wrap(noise.hex(), 1, "\r\n"),
        "base64 -w 1 prefix": wrap(key_base64[:-1], 1, "\r\n"),
        "hex -w 1 prefix": wrap(KEY.encode().hex()[:-1], 1, "\r\n"),
        "hex -w 3 prefix": wrap(KEY.encode().hex()[:-1], 3),
    }
    for label, unit in cases.items():
        text = (unit * (ADVERSARIAL_BYTES // len(unit) + 1))[:ADVERSARIAL_BYTES]
        assert scrub.scrub(text) == text, label
        chunks = [text[i:i + 4096] for i in range(0, len(text), 4096)]
        assert stream_all(scrub, chunks) == text, label


class FakeTimers:
    """call_later for QuietScrub, fired by the test."""

    def __init__(self):
        self.pending = []

    def call_later(self, delay, callback):
        timer = FakeTimer(delay, callback)
        self.pending.append(timer)
        return timer

    def fire(self):
        due, self.pending = [t for t in self.pending if not t.cancelled], []
        for timer in due:
            timer.callback()


class FakeTimer:
    def __init__(self, delay, callback):
        self.delay, self.callback, self.cancelled = delay, callback, False

    def cancel(self):
        self.cancelled = True


def test_quiet_scrub_gives_out_held_tail_when_quiet():
    """The start of a key at the end of a chunk is held; quiet, it is given out; a key split
    across chunks that come before the quiet is still replaced."""
    timers, emitted = FakeTimers(), []
    quiet = QuietScrub(scrubber().stream(), emitted.append, timers.call_later)
    assert quiet.feed("serving " + KEY[:5]) == "serving "
    assert [t.delay for t in timers.pending if not t.cancelled] == [QUIET_FLUSH_S]
    timers.fire()
    assert emitted == [KEY[:5]]
    assert quiet.feed("x " + KEY[:7]) == "x "
    assert quiet.feed(KEY[7:] + " done") == "[secret:openai] done"
    assert not [t for t in timers.pending if not t.cancelled]  # nothing held: no timer
    assert quiet.feed("y " + KEY[:3]) == "y "
    assert quiet.flush() == KEY[:3]
    timers.fire()
    assert emitted == [KEY[:5]]  # the flush cancelled the timer
