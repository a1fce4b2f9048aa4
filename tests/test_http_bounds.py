"""Memory and the event loop against large answers, large bodies and slow readers (issue 11).

A client that asks for a big page of messages and never reads it is cut off after the write
timeout and its answer freed; a page of messages is bounded in bytes as well as in count; a
big prompt is decoded off the loop; the session list pages from an index; freed memory is given
back to the system. Memory is measured in bytes with tracemalloc, never by time.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import socket
import threading
import time
import tracemalloc
import unittest
from unittest import mock

from hypothesis import given, settings, strategies as st

from tests.model_server import ScriptedModel, reply
from tests.utils import MS, TotemCase, call
from totem.http import httpd
from totem.http.api import sessions as sessions_api
from totem.http.httpd import WRITE_CHUNK_BYTES, encode_json, encode_json_pieces, release_memory, write_chunks
from totem.services.sessions import DEFAULT_SESSION_PAGE, MESSAGE_PAGE_BYTES

MB = 1024 * 1024
KEY = "sk-test-bounds-0123456789"
# Figures printed at the end of the run by tests/conftest.py (measured, never asserted on time).
FIGURES: list[str] = []

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


# JSON texts with some long strings (as keys and values), in any spacing and either encoding.
LONG_TEXTS = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("\ud800\udfff\"\\"), min_size=4,
                     max_size=12)
JSON_BODIES = st.builds(
    lambda value, indent, ascii_only: json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode(
        "utf-8", "surrogatepass"),
    st.recursive(st.none() | st.integers() | st.text(max_size=3) | LONG_TEXTS,
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(LONG_TEXTS | st.text(max_size=2),
                                                                             inner, max_size=3),
                 max_leaves=8),
    st.sampled_from([None, 0, 2]), st.booleans())


SPLIT: list[bytes] = []  # bodies that the property below saw decoded in steps


def outcome(decode):
    """What a decode gives: ("value", value) or the error, as the body's reader tells them apart."""
    try:
        return "value", decode()
    except httpd.DuplicateKeyError as exc:
        return "duplicate", exc.key
    except json.JSONDecodeError as exc:
        return "malformed", exc.msg
    except UnicodeDecodeError:
        return "not UTF-8", None
    except (ValueError, RecursionError) as exc:
        return type(exc).__name__, str(exc)


async def add_message(store, sessionid: str, text: str) -> str:
    message = await store.add_message(sessionid, "assistant")
    await store.add_part(message["id"], sessionid, "text", "done", text=text, closed=True)
    return message["id"]


async def until(check, what: str, limit_ms: float = 30_000) -> None:
    """Wait until check() is true; a guard against a hang, not a measure of time."""
    for _ in range(int(limit_ms / 10)):
        if check():
            return
        await asyncio.sleep(10 * MS)
    raise AssertionError(f"still waiting for {what}")


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def post_blocking(port: int, path: str, body: bytes) -> bytes:
    """POST a JSON body with a blocking socket (from a thread); the whole answer."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1"))
        sock.sendall(body)
        answer = bytearray()
        while chunk := sock.recv(64 * 1024):
            answer += chunk
    return bytes(answer)


class SilentClient:
    """A raw socket that sends one request and never reads: a receive buffer as small as the
    system allows, so that the server, not the kernel, is left holding the answer."""

    def __init__(self, port: int):
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.setblocking(False)

    async def send(self, path: str) -> None:
        loop = asyncio.get_running_loop()
        await loop.sock_connect(self.sock, ("127.0.0.1", self.port))
        head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n\r\n"
        await loop.sock_sendall(self.sock, head.encode("latin-1"))

    def head_arrived(self) -> bool:
        """Whether the answer's head has arrived, looked at without reading it."""
        try:
            return b"\r\n\r\n" in self.sock.recv(64 * 1024, socket.MSG_PEEK)
        except BlockingIOError:
            return False

    async def read_all(self) -> tuple[bytes, bool]:
        """Everything the server sent before it closed, and whether it ended by a reset."""
        loop = asyncio.get_running_loop()
        data = bytearray()
        try:
            while chunk := await loop.sock_recv(self.sock, 1024 * 1024):
                data += chunk
        except ConnectionResetError:
            return bytes(data), True
        return bytes(data), False

    def close(self) -> None:
        self.sock.close()


class MessagePagesTest(TotemCase):
    settings = {"writetimeout": 1}

    async def asyncSetUp(self):
        await super().asyncSetUp()
        project = await self.open_project()
        self.session = await self.create_session(project["id"])

    async def page(self, query: str):
        answer = await call(self.app, "sessions_messages", ident=self.session["id"], query=query)
        self.assertEqual(answer.status, 200, answer.body[:200])
        return answer

    async def test_messages_page_bounded_by_bytes(self):
        """Sessions|messages stops a page at about MESSAGE_PAGE_BYTES, says `more`, and the
        pages together give every message once, in order."""
        ids = [await add_message(self.app.store, self.session["id"], chr(97 + n) * MB) for n in range(10)]
        seen: list[list[str]] = []
        query = "limit=500"
        while True:
            answer = await self.page(query)
            self.assertLessEqual(len(answer.body), MESSAGE_PAGE_BYTES + 64 * 1024)
            page = answer.json()
            seen.insert(0, [message["id"] for message in page["messages"]])
            self.assertEqual([len(m["parts"][0]["text"]) for m in page["messages"]], [MB] * len(seen[0]))
            if not page["more"]:
                break
            query = f"limit=500&before={seen[0][0]}"
        self.assertGreater(len(seen), 2)
        self.assertEqual([messageid for page in seen for messageid in page], ids)

    async def test_message_larger_than_budget_comes_alone(self):
        """A message bigger than the page budget still comes, alone, and then the one before."""
        older = await add_message(self.app.store, self.session["id"], "o" * (MESSAGE_PAGE_BYTES + MB))
        newer = await add_message(self.app.store, self.session["id"], "n" * (MESSAGE_PAGE_BYTES + MB))
        page = (await self.page("limit=10")).json()
        self.assertEqual(([m["id"] for m in page["messages"]], page["more"]), ([newer], True))
        page = (await self.page(f"limit=10&before={newer}")).json()
        self.assertEqual(([m["id"] for m in page["messages"]], page["more"]), ([older], False))
        self.assertEqual(page["messages"][0]["parts"][0]["text"], "o" * (MESSAGE_PAGE_BYTES + MB))

    async def test_never_reading_clients_hold_bounded_memory_and_are_cut_off(self):
        """Clients that ask for a big page and never read it: while they hang, the server holds
        about one encoded page each (no copies, no whole answer in the transport); after the
        write timeout their connections are closed short of the answer and the memory is back."""
        message_bytes = 12 * MB  # a message alone on its page, more than the kernel buffers hold
        for letter in "xyz":
            await add_message(self.app.store, self.session["id"], letter * message_bytes)
        clients = 4
        tracemalloc.start()
        self.addCleanup(tracemalloc.stop)
        baseline = traced()
        silent = [SilentClient(self.app.port) for _ in range(clients)]
        for client in silent:
            self.addCleanup(client.close)
        with self.assertLogs("totem.httpd", "INFO") as logged:
            for client in silent:
                await client.send(f"/api/sessions_messages/{self.session['id']}?limit=500")
            await until(lambda: all(client.head_arrived() for client in silent), "the answers' heads")
            held = traced() - baseline
            peak = tracemalloc.get_traced_memory()[1] - baseline
            # The server writes until the client's window is full, then waits in drain: one page
            # each, a chunk or two in the transport; the old code held four copies of the page.
            self.assertLessEqual(held, clients * (message_bytes + 4 * WRITE_CHUNK_BYTES) + 2 * MB)
            await until(lambda: self.app.http.connections == 0, "the write timeout to close them")
        self.assertEqual(sum("was not read within 1 s" in line for line in logged.output), clients)
        after = traced() - baseline
        self.assertLessEqual(after, 2 * MB)
        for client in silent:
            data, _reset = await client.read_all()
            head, _, body = data.partition(b"\r\n\r\n")
            self.assertIn(b"200 OK", head)
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            self.assertGreater(length, message_bytes)
            self.assertLess(len(body), length)  # cut off, not finished
        FIGURES.append(f"http bounds: {clients} silent clients of a {message_bytes // MB} MB page: "
                       f"held {held / MB:.1f} MB (peak {peak / MB:.1f} MB), {after / MB:.2f} MB after the "
                       "write timeout")
        self.assertEqual((await call(self.app, "account")).status, 200)

    async def test_large_answer_reaches_a_reading_client_whole(self):
        """A page written in chunks arrives whole and parses to the stored text."""
        text = "".join(chr(0x41 + n % 26) for n in range(3 * MB)) + "é\u2603\n\"\\"
        messageid = await add_message(self.app.store, self.session["id"], text)
        answer = await self.page("")
        self.assertEqual(int(answer.header("content-length")), len(answer.body))
        page = answer.json()
        self.assertEqual([m["id"] for m in page["messages"]], [messageid])
        self.assertEqual(page["messages"][0]["parts"][0]["text"], text)


class EncodingTest(unittest.TestCase):
    @settings(max_examples=200, deadline=None, database=None)
    @given(JSON_VALUES, st.integers(0, 6))
    def test_pieces_join_to_the_one_encoding(self, data, depth):
        """encode_json_pieces gives exactly the bytes of encode_json, at any depth."""
        self.assertEqual(b"".join(encode_json_pieces(data, depth)), encode_json(data))

    def test_pieces_with_lone_surrogate(self):
        """A lone surrogate is escaped in pieces as in the whole encoding."""
        data = {"name": "caf\udce9", "items": ["\udcff", {"k\udc80": 1}]}
        self.assertEqual(b"".join(encode_json_pieces(data, 3)), encode_json(data))

    @settings(max_examples=100, deadline=None, database=None)
    @given(st.lists(st.integers(0, 3 * WRITE_CHUNK_BYTES), max_size=6))
    def test_write_chunks_keep_the_bytes_and_the_bound(self, sizes):
        """write_chunks regroups pieces without changing a byte, none over WRITE_CHUNK_BYTES."""
        pieces = [bytes([n % 251]) * size for n, size in enumerate(sizes)]
        chunks = [bytes(chunk) for chunk in write_chunks(pieces)]
        self.assertEqual(b"".join(chunks), b"".join(pieces))
        self.assertTrue(all(0 < len(chunk) <= WRITE_CHUNK_BYTES for chunk in chunks))

    @settings(max_examples=400, deadline=None, database=None)
    @given(st.text(alphabet="AQw+/=\n é", max_size=40), st.sampled_from([4, 8, 12]))
    def test_base64_in_steps_is_strict_base64(self, text, step):
        """decode_base64 in steps accepts and refuses exactly what b64decode(validate=True) does."""
        try:
            expected = base64.b64decode(text, validate=True)
        except ValueError:  # binascii.Error, or a non-ASCII text
            expected = None
        self.assertEqual(sessions_api.decode_base64(text, step), expected)

    @settings(max_examples=600, deadline=None, database=None)
    @given(JSON_BODIES, st.data())
    def test_long_strings_decode_as_json_loads(self, raw, data):
        """Decoding long strings in steps gives what json.loads gives, value or error, for
        bodies with long strings and for any damage done to them."""
        if raw and data.draw(st.booleans(), label="damage"):
            at = data.draw(st.integers(0, len(raw) - 1), label="at")
            cut = data.draw(st.integers(0, 3), label="cut")
            insert = data.draw(st.sampled_from([b"", b'"', b"\\", b":", b",", b"\x01", b"\xff", b"\xed\xa0\x80",
                                                b"\xc3", b"}", b" "]), label="insert")
            raw = raw[:at] + insert + raw[at + cut:]
        as_read = bytearray(raw) if data.draw(st.booleans(), label="as read") else raw  # bodies come as bytearray

        def in_steps():
            value = httpd._decode_long_strings(as_read, 4, 3)
            if value is httpd._NOT_SPLIT:  # decode_json leaves such a body to json.loads
                return json.loads(raw, object_pairs_hook=httpd._unique_keys)
            SPLIT.append(raw)
            return value
        self.assertEqual(outcome(in_steps), outcome(lambda: json.loads(raw, object_pairs_hook=httpd._unique_keys)))

    def test_z_long_strings_were_split(self):
        """The property above met bodies that were decoded in steps, not only ones left whole."""
        if not SPLIT:
            self.test_long_strings_decode_as_json_loads()
        self.assertGreater(len(SPLIT), 10)

    def test_long_strings_of_a_prompt_split(self):
        """A prompt with a big attachment is decoded in steps, keys given twice still refused."""
        text = base64.b64encode(bytes(range(256)) * 1000).decode()
        raw = json.dumps({"text": "x", "attachments": [{"name": "a", "data": text}]}).encode()
        self.assertIsNot(httpd._decode_long_strings(raw), httpd._NOT_SPLIT)
        self.assertEqual(httpd._decode_long_strings(raw), json.loads(raw))
        twice = b'{"a": "' + text.encode() + b'", "a": 1}'
        with self.assertRaises(httpd.DuplicateKeyError):
            httpd._decode_long_strings(twice)

    def test_release_memory_is_harmless(self):
        """release_memory gives memory back on glibc (this platform) and can be called again."""
        self.assertIs(release_memory(), True)
        self.assertIs(release_memory(), True)


class LargePromptTest(TotemCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.model = await ScriptedModel().__aenter__()
        self.addAsyncCleanup(self.model.__aexit__, None, None, None)
        project = await self.open_project()
        self.session = await self.create_session(project["id"])
        provider = await self.app.services.providers.save(None, "Scripted", "openai", self.model.url, KEY, None)
        self.modelref = f"{provider['id']}/scripted-model"

    async def test_big_prompt_is_decoded_off_the_loop(self):
        """A 20 MB prompt: its JSON and its base64 are decoded on worker threads, not on the loop,
        and the attachment is stored whole. The loop's lag is measured and reported only."""
        data = bytes(range(256)) * (14 * MB // 256)
        body = {"text": "Look at this", "model": self.modelref,
                "attachments": [{"name": "blob.bin", "mime": "application/octet-stream",
                                 "data": base64.b64encode(data).decode()}]}
        raw = json.dumps(body).encode()
        self.assertGreater(len(raw), 18 * MB)
        self.model.script(reply("seen"))
        loop_thread = threading.get_ident()
        threads: dict[str, set[int]] = {"json": set(), "base64": set()}

        def recording(name, real):
            def wrapper(*args, **kwargs):
                if len(args[0]) > MB:
                    threads[name].add(threading.get_ident())
                return real(*args, **kwargs)
            return wrapper

        lags: list[float] = []
        stop = asyncio.Event()

        async def watchdog():
            while not stop.is_set():
                start = time.perf_counter()
                await asyncio.sleep(0.001)
                lags.append(time.perf_counter() - start - 0.001)

        with mock.patch.object(httpd, "decode_json", recording("json", httpd.decode_json)), \
                mock.patch.object(sessions_api, "decode_base64", recording("base64", sessions_api.decode_base64)):
            dog = asyncio.create_task(watchdog())
            # Sent from a thread, so that the lag is the server's, not that of a client on its loop.
            answer = await asyncio.to_thread(post_blocking, self.app.port, f"/api/sessions_prompt/{self.session['id']}",
                                             raw)
            stop.set()
            await dog
        self.assertIn(b" 200 OK\r\n", answer.partition(b"\r\n\r\n")[0] + b"\r\n", answer[:300])
        self.assertEqual(len(threads["json"]), 1)
        self.assertEqual(len(threads["base64"]), 1)
        self.assertNotIn(loop_thread, threads["json"] | threads["base64"])
        attachments = await self.app.store.read(lambda c: c.execute(
            "SELECT size FROM attachments WHERE sessionid = ?", (self.session["id"],)).fetchall())
        self.assertEqual([row[0] for row in attachments], [len(data)])
        FIGURES.append(f"http bounds: {len(raw) / MB:.1f} MB prompt: the loop's longest lag while it was read, "
                       f"decoded and stored: {max(lags) * 1000:.1f} ms")

    async def test_large_body_and_answer_release_memory(self):
        """After a body or an answer of TRIM_AFTER_BYTES or more, the freed memory is released
        (malloc_trim); after a small one it is not."""
        calls = []
        real = httpd.release_memory

        def counting():
            calls.append(threading.get_ident())
            return real()

        with mock.patch.object(httpd, "release_memory", counting):
            small = await call(self.app, "sessions_read", ident=self.session["id"])
            self.assertEqual((small.status, calls), (200, []))
            big = {"text": "x" * (2 * MB), "model": "nope/none"}
            answer = await call(self.app, "sessions_prompt", big, ident=self.session["id"])
            self.assertEqual(answer.status, 400)
            await until(lambda: len(calls) == 1, "the release after a large body")
            await add_message(self.app.store, self.session["id"], "y" * (2 * MB))
            answer = await call(self.app, "sessions_messages", ident=self.session["id"])
            self.assertEqual(answer.status, 200)
            await until(lambda: len(calls) == 2, "the release after a large answer")
            self.assertEqual((await call(self.app, "account")).status, 200)
            self.assertEqual(len(calls), 2)
        self.assertNotIn(threading.get_ident(), calls)  # on a worker thread, off the loop


class SessionListTest(TotemCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.project = await self.open_project()

    async def test_sessions_list_pages_with_more(self):
        """Sessions|list answers {sessions, more} pages of `limit`, newest first; `before` (the
        last id of a page) gives the next; together they list every session once."""
        store = self.app.store
        for n in range(2 * DEFAULT_SESSION_PAGE + 30):
            await store.create_session(self.project["id"], f"s{n}")
        every = [row["id"] for row in await store.list_sessions(self.project["id"])]
        pages, query = [], f"projectid={self.project['id']}"
        while True:
            answer = await call(self.app, "sessions", query=query)
            self.assertEqual(answer.status, 200, answer.body)
            page = answer.json()
            self.assertEqual(set(page), {"sessions", "more"})
            pages.append(page)
            if not page["more"]:
                break
            query = f"projectid={self.project['id']}&before={page['sessions'][-1]['id']}"
        self.assertEqual([len(page["sessions"]) for page in pages], [DEFAULT_SESSION_PAGE] * 2 + [30])
        self.assertEqual([s["id"] for page in pages for s in page["sessions"]], every)
        self.assertTrue(all("waiting" in s for page in pages for s in page["sessions"]))
        answer = await call(self.app, "sessions", query=f"projectid={self.project['id']}&limit=7")
        self.assertEqual((len(answer.json()["sessions"]), answer.json()["more"]), (7, True))

    async def test_sessions_list_bad_paging(self):
        """A `limit` out of range or a `before` that names no session of the project is 400."""
        other = await self.open_project("other")
        foreign = await self.create_session(other["id"])
        for query, field in (("limit=0", "limit"), ("limit=501", "limit"), ("limit=x", "limit"),
                             ("before=nope", "before"), (f"before={foreign['id']}", "before")):
            with self.subTest(query=query):
                answer = await call(self.app, "sessions", query=f"projectid={self.project['id']}&{query}")
                self.assertEqual(answer.status, 400)
                self.assertEqual([problem["name"] for problem in answer.json()], [field])

    async def test_session_page_read_from_the_index(self):
        """A page of sessions is read from sessions_by_project alone: no sort of its own."""
        def plan(c, before):
            sql = ("SELECT * FROM sessions WHERE projectid = ? AND (updated, id) < (?, ?) "
                   "ORDER BY updated DESC, id DESC LIMIT ?") if before else (
                   "SELECT * FROM sessions WHERE projectid = ? ORDER BY updated DESC, id DESC LIMIT ?")
            args = ("p", 1, "a", 10) if before else ("p", 10)
            return " ".join(row[3] for row in c.execute("EXPLAIN QUERY PLAN " + sql, args))
        for before in (False, True):
            found = await self.app.store.read(plan, before)
            self.assertIn("USING INDEX sessions_by_project", found)
            self.assertNotIn("TEMP B-TREE", found)


if __name__ == "__main__":
    unittest.main()
