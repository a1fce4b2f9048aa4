"""Scrubbing of output: secrets in tool, job and terminal output become `[secret:<label>]`."""

import base64
import json
import os
import random
import re
import shutil
import tempfile
import time
import urllib.parse

from totem.config import parse_values
from totem.vault import (MAX_ESCAPE_RUN_CHARS, MIN_SCRUB_CHARS, SECRET_FILE, Scrubber,
                         load_secret_file, secrets_of)

KEY = "sk-proj-Zq7/Tb+4xW=9kLm_2Rv~Nq"
TOKEN = "tok3n-9f8e7d6c5b4a3210"
SECRET = "a-configured-secret-of-some-length"
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-~]")
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
        chunks = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
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
    assert stream.feed("$ ls\r\nREADME.md\r\n") == "$ ls\r\nREADME.md\r\n"
    assert stream.feed("\x1b[32m$ \x1b[0m") == "\x1b[32m$ \x1b[0m"


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
