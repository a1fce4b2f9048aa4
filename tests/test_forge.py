"""The Forge documentation and the self-check of answers in Total.js projects, against a local
documentation server (a fixture llms.txt and pages; no internet): the index once a day, the
search choosing the page, the prompt's text in no request, offline behaviour, the switches, and
a reviewed answer arriving whole with its validation part."""

from __future__ import annotations

import json
import os
import time

from tests.model_server import reply
from tests.test_loop import LoopCase
from tests.tools.test_fetch import Server, answer, response
from tests.utils import call, run_ended
from totem.workspace.forge import ForgeDocs, parse_index, search

INDEX = """# Total.js
> The documentation of the Total.js framework.

## Pages
- [Routing](/total5/routing/): ROUTE() for HTTP, WebSocket and file routes
- [Schemas](/total5/schemas/): NEWSCHEMA() and validation of data
- [NoSQL embedded database](/total5/nosql/): NOSQL() queries, inserts and updates
- [Elsewhere](https://evil.example.com/x): a page on another host
"""
ROUTING = b"<html><body><h1>Routing</h1><p>ROUTE('GET /api/users/', action) registers a route.</p></body></html>"
NOSQL = b"<html><body><h1>NoSQL</h1><p>NOSQL('users').find() reads documents.</p></body></html>"
PROMPT = "How do I add a websocket route for chatting secretword42 in my app?"


def docs_routes() -> dict:
    return {"/llms.txt": answer(response(200, INDEX.encode(), "text/plain")),
            "/total5/routing/": answer(response(200, ROUTING, "text/html")),
            "/total5/nosql/": answer(response(200, NOSQL, "text/html"))}


def test_index_entries_stay_on_the_documentation_host():
    entries = parse_index(INDEX, "http://docs.local:8000/")
    assert [entry.title for entry in entries] == ["Routing", "Schemas", "NoSQL embedded database"]
    assert entries[0].url == "http://docs.local:8000/total5/routing/"


def test_search_chooses_the_page_by_its_words():
    entries = parse_index(INDEX, "http://docs.local/")
    assert search(entries, PROMPT)[0][1].title == "Routing"
    assert search(entries, "query documents in the nosql database")[0][1].title == "NoSQL embedded database"
    assert search(entries, "validate the data of a form with a schema")[0][1].title == "Schemas"
    assert search(entries, "hello there") == []


class ForgeDocsTest(LoopCase):
    """ForgeDocs against the local server."""

    async def asyncSetUp(self):
        self.docs = await Server(docs_routes()).__aenter__()
        self.addAsyncCleanup(self.docs.__aexit__, None, None, None)
        await super().asyncSetUp()
        await self.ws.close()

    async def test_once_a_day_the_right_page_and_never_the_prompt(self):
        docs = ForgeDocs(self.tmp, self.docs.url("/"))
        first = await docs.knowledge(PROMPT)
        second = await docs.knowledge("a websocket route again")
        self.assertEqual((first.title, first.failed), ("Routing", False))
        self.assertIn("ROUTE('GET /api/users/', action)", first.text)
        self.assertEqual(second.title, "Routing")
        targets = [request.target for request in self.docs.requests]
        self.assertEqual(targets.count("/llms.txt"), 1)
        self.assertEqual([r.method for r in self.docs.requests], ["GET"] * len(targets))
        everything = json.dumps([(r.target, r.headers) for r in self.docs.requests]).lower()
        for word in ("secretword42", "chatting", "websocket"):
            self.assertNotIn(word, everything)
        again = ForgeDocs(self.tmp, self.docs.url("/"))  # a restart reads the kept copy
        await again.knowledge(PROMPT)
        self.assertEqual([r.target for r in self.docs.requests].count("/llms.txt"), 1)

    async def test_offline_uses_the_kept_copy_and_says_so(self):
        docs = ForgeDocs(self.tmp, self.docs.url("/"))
        await docs.knowledge(PROMPT)
        meta = os.path.join(self.tmp, "forge", "llms.json")
        with open(meta) as handle:
            kept = json.load(handle)
        kept["fetched"] = time.time() - 2 * 24 * 3600  # two days old
        with open(meta, "w") as handle:
            json.dump(kept, handle)
        self.docs.routes.clear()  # every path now answers 404
        stale = ForgeDocs(self.tmp, self.docs.url("/"))
        found = await stale.knowledge(PROMPT)
        self.assertIn("Offline", found.note)
        self.assertTrue(found.failed)  # the page could not be read either
        nothing = await ForgeDocs(os.path.join(self.tmp, "other"), self.docs.url("/")).knowledge(PROMPT)
        self.assertTrue(nothing.failed)
        self.assertIn("could not be read", nothing.note)

    async def test_a_redirect_to_another_host_is_not_followed(self):
        self.docs.routes["/llms.txt"] = answer(response(302, b"", None, Location="http://example.com/llms.txt"))
        found = await ForgeDocs(self.tmp, self.docs.url("/")).knowledge(PROMPT)
        self.assertTrue(found.failed)
        self.assertIn("not 127.0.0.1", found.note)


class TotalJsRunTest(LoopCase):
    """A run in a Total.js project with the documentation server as forgeurl."""

    async def asyncSetUp(self):
        self.docs = await Server(docs_routes()).__aenter__()
        self.addAsyncCleanup(self.docs.__aexit__, None, None, None)
        self.settings = {"forgeurl": self.docs.url("/")}
        await super().asyncSetUp()
        with open(os.path.join(self.folder("proj"), "package.json"), "w") as handle:
            json.dump({"name": "app", "dependencies": {"total5": "^0.0.9"}}, handle)

    async def setting(self, key: str, value) -> None:
        answer = await call(self.app, "settings_save", {"scope": "session", "sessionid": self.session["id"],
                                                        "key": key, "value": value})
        self.assertEqual(answer.status, 200, answer.body)

    async def test_the_page_reaches_the_model_as_data_and_the_person_sees_the_part(self):
        self.model.script(reply("Use ROUTE."))
        await self.prompt(PROMPT)
        await self.events_until("idle")
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        knowledge = [p for p in stored[0]["parts"] if p["kind"] == "knowledge"]
        self.assertEqual(len(knowledge), 1)
        self.assertEqual((knowledge[0]["data"]["title"], knowledge[0]["status"]), ("Routing", "done"))
        user = [m for m in self.model.requests[0].body["messages"] if m["role"] == "user"][0]["content"]
        self.assertIn("registers a route", user)
        self.assertIn('trust="untrusted"', user)
        self.assertIn("forge documentation: " + self.docs.url("/total5/routing/"), user)
        projects = (await call(self.app, "projects")).json()
        self.assertTrue(projects[0]["totaljs"])

    async def test_the_switches_turn_it_off(self):
        for key in ("forgedocs", "forge"):
            await self.setting(key, False)
            self.model.script(reply("ok"))
            await self.prompt(PROMPT)
            await self.events_until("idle")
            if key == "forgedocs":
                await self.setting(key, True)
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        self.assertEqual([p for m in stored for p in m["parts"] if p["kind"] == "knowledge"], [])
        self.assertEqual(self.docs.requests, [])

    async def test_a_failing_documentation_server_is_said_and_the_run_goes_on(self):
        self.docs.routes.clear()
        self.model.script(reply("fine"))
        await self.prompt(PROMPT)
        await self.events_until("idle")
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        knowledge = [p for p in stored[0]["parts"] if p["kind"] == "knowledge"][0]
        self.assertEqual(knowledge["status"], "error")
        self.assertIn("could not be read", knowledge["data"]["note"])
        self.assertEqual(stored[-1]["parts"][-1]["text"], "fine")

    async def test_a_self_checked_answer_arrives_whole_with_its_validation(self):
        """With selfcheck, no text delta is published: the text comes as one part.created with
        all of it, then part.closed, then the validation part, before the run ends."""
        await self.setting("forgedocs", False)
        await self.setting("selfcheck", True)
        text = "Here:\n\n```js\nROUTE('GET /', function() {\n    this.json({ ok: true };\n});\n```\n"
        self.model.script(reply(text))
        await self.prompt("add a route")
        events = await self.events_until("idle")
        text_events = [e for e in events if e["type"] in ("part.created", "part.delta", "part.closed")]
        created = [e for e in text_events if e["type"] == "part.created"]
        self.assertEqual([e["data"]["part"]["kind"] for e in created], ["text", "validation"])
        self.assertEqual(created[0]["data"]["part"]["text"], text)
        self.assertEqual([e for e in text_events if e["type"] == "part.delta"], [])
        order = [(e["type"], e["data"].get("part", {}).get("kind") or e["data"].get("partid")) for e in text_events]
        self.assertEqual(order[1], ("part.closed", created[0]["data"]["part"]["id"]))
        validation = created[1]["data"]["part"]["data"]
        self.assertTrue(validation["blocking"])
        self.assertIn("unbalanced", [problem["rule"] for problem in validation["problems"]])
        await run_ended(self.app, self.session["id"])
        self.model.script(reply("Clean:\n\n```js\nROUTE('GET /', function() { this.json({}); });\n```\n"))
        await self.prompt("again")
        events = await self.events_until("idle")
        kinds = [e["data"]["part"]["kind"] for e in events if e["type"] == "part.created"]
        self.assertEqual(kinds, ["text"])
        self.assertNotIn("part.delta", [e["type"] for e in events])
