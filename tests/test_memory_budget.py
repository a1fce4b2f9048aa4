"""The send budget and the connection cap: what waits to be sent, for all clients together, stays
within `sendbudgetmb`, and at most `maxconnections` connections are served at once.

Against the real server: raw sockets that ask for a big page and never read hold the budget;
past it the next ones get 503 with Retry-After and the usual error body, and once they close
the budget is whole again and the page is served. A WebSocket client that falls behind while
the budget is spent is closed (1013). Connections past the cap get 503 at once and the count
goes back down when they close. The budget itself is tested without sockets too. Nothing here
measures memory or time: the accounting shows through the answers and `budget.held`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import unittest

from websockets.exceptions import InvalidStatus

from tests.test_http_bounds import SilentClient, add_message, until
from tests.utils import MS, TotemCase, call, open_ws, read_answer, read_until_closed
from totem.config import ConfigError, parse_values
from totem.events import PartDelta
from totem.http.httpd import RETRY_AFTER_S, SendBudget, decode_json

MB = 1024 * 1024
# A message alone on its page, more than the kernel buffers of a silent client take (see
# test_http_bounds): the server holds most of it while the client does not read.
MESSAGE_BYTES = 12 * MB


def parse_status(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split(" ")[1]), headers, body


class SilentReaders:
    """Raw sockets that each send one GET and never read; closed at the end."""

    def __init__(self, case: unittest.TestCase, port: int) -> None:
        self.case = case
        self.port = port
        self.clients: list[SilentClient] = []

    async def open(self, path: str, count: int) -> list[SilentClient]:
        opened = [SilentClient(self.port) for _ in range(count)]
        for client in opened:
            self.case.addCleanup(client.close)
        await asyncio.gather(*(client.send(path) for client in opened))
        self.clients += opened
        await until(lambda: all(client.head_arrived() for client in opened), "the answers' heads")
        return opened


class SendBudgetServerTest(TotemCase):
    settings = {"sendbudgetmb": 1, "writetimeout": 600}

    async def asyncSetUp(self):
        await super().asyncSetUp()
        project = await self.open_project()
        self.session = await self.create_session(project["id"])
        self.path = f"/api/sessions_messages/{self.session['id']}"
        await add_message(self.app.store, self.session["id"], "m" * MESSAGE_BYTES)

    async def test_slow_readers_past_the_budget_get_503_and_it_comes_back(self):
        """The first silent reader of a 12 MB page holds the budget (1 MB: an answer larger than
        all of it still goes, alone); the next ones wait for it, then get 503 with Retry-After
        and an error body; once the first closes, the budget is whole and the page is served."""
        budget = self.app.http.budget
        readers = SilentReaders(self, self.app.port)
        [holder] = await readers.open(self.path, 1)
        self.assertGreater(budget.held, budget.limit)  # alone: the whole answer but what the kernel took
        refused = await readers.open(self.path, 5)
        for client in refused:
            client.sock.setblocking(True)
            client.sock.settimeout(10)
            status, headers, body = parse_status(client.sock.recv(64 * 1024))
            self.assertEqual(status, 503)
            self.assertEqual(headers["retry-after"], str(RETRY_AFTER_S))
            self.assertEqual(headers["content-type"], "application/json; charset=utf-8")
            [error] = json.loads(body)
            self.assertEqual(error["name"], "")
            self.assertIn("try again", error["error"])
        self.assertEqual(self.app.http.connections, 6)  # refused answers keep their connections alive
        holder.close()
        await until(lambda: budget.held == 0, "the holder's share given back")
        answer = await call(self.app, "sessions_messages", ident=self.session["id"])
        self.assertEqual(answer.status, 200)
        self.assertEqual(len(answer.json()["messages"][0]["parts"][0]["text"]), MESSAGE_BYTES)
        self.assertEqual(budget.held, 0)

    async def test_small_answers_go_while_the_budget_is_spent(self):
        """Answers of 64 KB or less take no share: the budget spent, Account|read still answers."""
        readers = SilentReaders(self, self.app.port)
        await readers.open(self.path, 1)
        self.assertEqual((await call(self.app, "account")).status, 200)
        self.assertEqual((await call(self.app, "sessions_read", ident=self.session["id"])).status, 200)

    async def test_budget_given_back_when_an_answer_is_cut_off(self):
        """Several silent readers cut off by the client closing: each share comes back, none twice."""
        budget = self.app.http.budget
        readers = SilentReaders(self, self.app.port)
        opened = await readers.open(self.path, 3)
        for client in opened:
            client.close()
        await until(lambda: self.app.http.connections == 0, "the connections closed")
        self.assertEqual(budget.held, 0)
        self.assertEqual((await call(self.app, "sessions_messages", ident=self.session["id"])).status, 200)


class WebSocketBudgetTest(TotemCase):
    settings = {"sendbudgetmb": 1}

    async def test_websocket_behind_while_the_budget_is_spent_closed_1013(self):
        """A client that does not read is closed (1013) once its queue would take more than the
        whole send budget (1 MB, well below its own wsqueuebytes of 8 MB), and its share comes back."""
        project = await self.open_project()
        sid = (await self.create_session(project["id"]))["id"]
        budget = self.app.http.budget
        async with await open_ws(self.app, max_queue=1, close_timeout=100 * MS) as ws:
            await ws.send(json.dumps({"type": "subscribe", "sessionid": sid}))
            await until(lambda: self.app.hub.subscribed(sid), "the subscription")
            with self.assertLogs("totem.websocket", logging.INFO) as logs:
                for index in range(64 * MB // 4096):
                    self.app.hub.publish(PartDelta(sid, "p", f"{index:06d}" + "y" * 4090))
                    if logs.records:
                        break
            self.assertIn("send budget", logs.records[0].getMessage())
            self.assertEqual(budget.held, 0)
            received = await read_until_closed(ws)
        self.assertEqual(ws.close_code, 1013)
        indexes = [int(event["data"]["text"][:6]) for event in received]
        self.assertEqual(indexes, list(range(len(indexes))))
        self.assertLess(index, 8 * MB // 4096)  # the budget, not wsqueuebytes, cut it off


class ConnectionCapTest(TotemCase):
    settings = {"maxconnections": 3}

    async def keep_alive(self):
        """A connection that asked once and stays open (keep-alive): counted until it closes."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.app.port)
        writer.write(f"GET /api/account HTTP/1.1\r\nHost: 127.0.0.1:{self.app.port}\r\n\r\n".encode())
        answer = await read_answer(reader)
        self.assertEqual(answer.status, 200)
        return reader, writer

    async def test_connections_past_the_cap_get_503_and_are_counted_back(self):
        """With three connections open (two keep-alive, one WebSocket), a fourth gets 503 with
        Retry-After and an error body, and is closed; once one of the three closes, the next
        connection is served."""
        first = await self.keep_alive()
        second = await self.keep_alive()
        ws = await open_ws(self.app)
        self.addAsyncCleanup(ws.close)
        await until(lambda: self.app.http.connections == 3, "three connections")
        with self.assertLogs("totem.httpd", logging.WARNING) as logs:
            answer = await call(self.app, "account")
        self.assertEqual(answer.status, 503)
        self.assertEqual(answer.header("retry-after"), str(RETRY_AFTER_S))
        self.assertEqual(answer.header("connection"), "close")
        self.assertIn("at most 3 connections", answer.json()[0]["error"])
        self.assertIn("maxconnections", logs.records[0].getMessage())
        self.assertEqual(self.app.http.refused, 1)
        # A WebSocket is refused the same way, before its upgrade.
        with self.assertRaises(InvalidStatus) as caught:
            await open_ws(self.app)
        self.assertEqual(caught.exception.response.status_code, 503)
        self.assertEqual(self.app.http.refused, 2)
        first[1].close()
        await until(lambda: self.app.http.connections == 2, "the closed connection counted back")
        self.assertEqual((await call(self.app, "account")).status, 200)
        await ws.close()
        await until(lambda: self.app.http.connections == 1, "the WebSocket counted back")
        second[1].close()
        await until(lambda: self.app.http.connections == 0, "every connection counted back")


class SendBudgetTest(unittest.IsolatedAsyncioTestCase):
    async def test_take_and_give(self):
        """Shares fit within the limit; one larger than the whole goes only when nothing is held;
        `own` counts as free for its holder."""
        budget = SendBudget(100)
        self.assertTrue(budget.take_now(60))
        self.assertFalse(budget.take_now(50))
        self.assertTrue(budget.take_now(40))
        self.assertEqual(budget.held, 100)
        budget.give(100)
        self.assertTrue(budget.take_now(500))  # alone
        self.assertTrue(budget.take_now(10, own=500))  # its holder may top it up
        self.assertFalse(budget.take_now(1))
        budget.give(510)
        self.assertEqual(budget.held, 0)
        with self.assertRaises(RuntimeError):
            budget.give(1)

    async def test_waiters_served_in_order(self):
        """A waiter gets its share when enough is given back, first come first served, and a
        later small take does not overtake a waiting one."""
        budget = SendBudget(100)
        self.assertTrue(budget.take_now(90))
        first = asyncio.ensure_future(budget.take(50, 10))
        second = asyncio.ensure_future(budget.take(5, 10))
        await asyncio.sleep(0)
        self.assertFalse(first.done() or second.done())
        self.assertFalse(budget.take_now(50))  # what take_now cannot take does not fit
        budget.give(45)
        self.assertTrue(await first)
        self.assertTrue(await second)
        self.assertEqual(budget.held, 100)

    async def test_wait_times_out_and_takes_nothing(self):
        """A share that never fits is refused after the timeout and leaves nothing held."""
        budget = SendBudget(100)
        budget.take_now(100)
        self.assertFalse(await budget.take(10, 20 * MS))
        budget.give(100)
        self.assertEqual(budget.held, 0)

    async def test_cancelled_wait_takes_nothing(self):
        """A waiter cancelled before, or just as, its share comes takes nothing."""
        budget = SendBudget(100)
        budget.take_now(100)
        waiting = asyncio.ensure_future(budget.take(10, 10))
        await asyncio.sleep(0)
        budget.give(100)  # the share is given to the waiter...
        waiting.cancel()  # ...which is cancelled before it runs
        with self.assertRaises(asyncio.CancelledError):
            await waiting
        self.assertEqual(budget.held, 0)


class BudgetConfigTest(unittest.TestCase):
    def test_bad_values_name_the_key(self):
        """A bad sendbudgetmb or maxconnections stops the start with one line naming the key."""
        cases = {
            ("sendbudgetmb", "0"): "'sendbudgetmb' must be a whole number from 1 to 65536, not '0'",
            ("sendbudgetmb", "-5"): "'sendbudgetmb' must be a whole number from 1 to 65536",
            ("sendbudgetmb", "64MB"): "'sendbudgetmb' must be a whole number from 1 to 65536",
            ("sendbudgetmb", "65537"): "'sendbudgetmb' must be a whole number from 1 to 65536",
            ("maxconnections", "0"): "'maxconnections' must be a whole number from 1 to 100000, not '0'",
            ("maxconnections", "many"): "'maxconnections' must be a whole number from 1 to 100000",
            ("maxconnections", "100001"): "'maxconnections' must be a whole number from 1 to 100000",
        }
        for (key, value), message in cases.items():
            with self.subTest(key=key, value=value), self.assertRaises(ConfigError) as caught:
                parse_values({key: value}, "/tmp")
            self.assertIn(message, str(caught.exception))

    def test_defaults(self):
        """Without the keys: 64 MB and 512 connections."""
        config = parse_values({}, "/tmp")
        self.assertEqual((config.sendbudgetmb, config.maxconnections), (64, 512))


class ConsumedBodyTest(unittest.TestCase):
    """decode_json(consume=True), as Request.json uses it: the pages of the long strings are
    given back as they are decoded, with the same value and the same refusals as json.loads."""

    def body(self, tail: bytes = b"") -> bytes:
        text = base64.b64encode(bytes(range(256)) * (3 * MB // 256)).decode()
        return json.dumps({"text": "x", "attachments": [{"name": "a", "data": text}]}).encode()[:-4] + tail + b'"}]}'

    def outcome(self, decode):
        try:
            return "value", decode()
        except json.JSONDecodeError as exc:
            return "malformed", exc.msg
        except UnicodeDecodeError:
            return "not UTF-8", None

    def test_consumed_body_decodes_as_json_loads(self):
        """A 4 MB prompt body decoded in place gives json.loads's value; the string was released."""
        raw = self.body()
        body = bytearray(raw)
        self.assertEqual(decode_json(body, consume=True), json.loads(raw))
        self.assertIn(b"\x00" * 4096, body)  # its pages read as zeros now: given back

    def test_consumed_body_refused_as_json_loads(self):
        """A control character or bytes that are not UTF-8 late in a long string: the same
        refusal as json.loads of the body as it came."""
        for tail in (b"\x01", b"\xff", b"\xed\xa0"):
            with self.subTest(tail=tail):
                raw = self.body(tail)
                self.assertEqual(self.outcome(lambda raw=raw: decode_json(bytearray(raw), consume=True)),
                                 self.outcome(lambda raw=raw: json.loads(raw)))
