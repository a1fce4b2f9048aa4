"""Sessions|export and Sessions|import through the real server, with a token and the scripted
model: a round trip into another project and into another Totem, the Markdown, the secrets,
every bad import, and a session exported while it runs."""

import asyncio
import base64
import copy
import json
import os
import re
import unittest

from jsonschema import Draft202012Validator

from tests.model_server import HttpError, ScriptedModel, Stall, reply, text_chunks
from tests.utils import MS, TOKEN, TotemCase, call, next_event, open_ws, request, run_ended, running_totem
from totem.http.api.exports import DOCUMENT, MAX_IMPORT_MESSAGES, MAX_MESSAGE_PARTS, MAX_PART_TEXT_CHARS
from totem.http.api.sessions import SESSION
from totem.http.routes import action_table
from totem.security.vault import Scrubber
from totem.services.export_markdown import MAX_OUTPUT_CHARS, MAX_OUTPUT_LINES, render_markdown
from totem.services.exports import (
    EXPORTED_DURING_RUN,
    LEFT_OUT_SECRET,
    MAX_DATA_DEPTH,
    MAX_IMPORT_PARTS,
    OPEN_AT_EXPORT,
    scrubbed_json,
)

AUTH = {"Authorization": f"Bearer {TOKEN}"}
KEY = "sk-test-EXPORT-NEVER-0123456789abcdef"
LATER = "sk-later-SAVED-AFTER-9876543210fedcba"  # a key saved after a tool output held it
MARKER = re.compile(r"data-[0-9a-f]{16,}")


def schema_problems(schema: dict, value) -> list[str]:
    return [f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
            for error in Draft202012Validator(schema).iter_errors(value)]


def comparable(document: dict) -> dict:
    """An export without what an import renews: the ids (a reference to a message becomes its
    place), the time of the export and the session's last change."""
    document = copy.deepcopy(document)
    for key in ("exported", "updated"):
        document.pop(key, None)
    places = {message["id"]: index for index, message in enumerate(document["messages"])}
    for message in document["messages"]:
        files = {item["id"]: number for number, item in enumerate(message["attachments"])}
        message.pop("id")
        for item in message["attachments"]:
            item["id"] = files[item["id"]]
        data = message["data"]
        if "prompt" in data:
            data["prompt"] = places[data["prompt"]]
        for item in data.get("attachments", ()):
            item["id"] = files[item["id"]]
    return document


class ExportCase(TotemCase):
    """A Totem with a token, a project with a file, another project, the scripted model as a
    provider and a session."""

    settings = {"token": TOKEN}

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.model = await ScriptedModel().__aenter__()
        self.addAsyncCleanup(self.model.__aexit__, None, None, None)
        self.app.runs.steps.backoff_first_s = 0.01
        root = self.folder("proj")
        with open(os.path.join(root, "a.txt"), "w") as handle:
            handle.write("hello world\nsecond line\n")
        self.project = await self.ok("projects_open", {"path": root})
        self.other = await self.ok("projects_open", {"path": self.folder("other")})
        provider = await self.ok("providers_save", {"name": "Scripted", "kind": "openai", "url": self.model.url,
                                                     "key": KEY})
        self.modelref = f"{provider['id']}/scripted-model"
        self.session = await self.ok("sessions_create", {"projectid": self.project["id"]})

    async def api(self, name, body=None, ident=None, query="", app=None, method=None):
        return await call(app or self.app, name, body, ident=ident, query=query, headers=AUTH, method=method)

    async def ok(self, name, body=None, ident=None, query="", app=None):
        answer = await self.api(name, body, ident, query, app)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    async def run_prompt(self, sessionid: str, text: str, *replies, **extra) -> None:
        self.model.script(*replies)
        await self.ok("sessions_prompt", {"text": text, "model": self.modelref} | extra, sessionid)
        await run_ended(self.app, sessionid)

    async def export(self, sessionid: str, app=None, markdown: bool = False):
        answer = await self.ok("sessions_export", ident=sessionid, query="format=markdown" if markdown else "",
                               app=app)
        return answer["markdown"] if markdown else answer

    async def conversation(self, sessionid: str) -> None:
        """Text, reasoning, a file, a tool call with its decision, and a run that ends in error."""
        note = base64.b64encode(b"a note for the model").decode()
        await self.run_prompt(sessionid, "Look at a.txt",
                              reply("Reading it.", reasoning="The person wants the file.",
                                    tool_calls=[("read", {"path": "a.txt"})]),
                              reply("It says hello."),
                              attachments=[{"name": "note.txt", "mime": "text/plain", "data": note}], autoaccept=True)
        await self.run_prompt(sessionid, "And now?",
                              HttpError({"error": {"message": "Incorrect API key provided"}}, 401))


class RoundTripTest(ExportCase):
    async def test_export_import_export_is_the_same_session(self):
        """An export imported into another project and into another Totem exports again as the
        same document but for ids and times; the answers are those the actions declare."""
        await self.conversation(self.session["id"])
        document = await self.export(self.session["id"])
        self.assertEqual(schema_problems(DOCUMENT, document), [])
        self.assertEqual([m["role"] for m in document["messages"]], ["user", "assistant", "assistant", "user",
                                                                     "assistant"])
        self.assertEqual((document["version"], document["status"], document["mode"]), (1, "error", "build"))
        first = document["messages"][1]
        self.assertEqual([p["kind"] for p in first["parts"]], ["reasoning", "text", "tool"])
        tool = first["parts"][2]
        self.assertEqual((tool["status"], tool["data"]["tool"], tool["data"]["input"]), ("done", "read",
                                                                                         {"path": "a.txt"}))
        self.assertEqual(tool["data"]["decision"]["action"], "allow")
        self.assertIn("hello world", tool["data"]["output"])
        self.assertEqual(document["messages"][0]["attachments"][0]["data"],
                         base64.b64encode(b"a note for the model").decode())
        self.assertEqual(document["messages"][4]["data"]["ended"], "error")
        self.assertNotIn("autoaccept", document)

        imported = await self.ok("sessions_import", {"projectid": self.other["id"], "session": document})
        self.assertEqual(schema_problems(SESSION, imported), [])
        self.assertNotEqual(imported["id"], self.session["id"])
        self.assertEqual((imported["projectid"], imported["name"], imported["status"], imported["autoaccept"]),
                         (self.other["id"], "Look at a.txt", "error", False))
        self.assertTrue((await self.ok("sessions_read", ident=self.session["id"]))["autoaccept"])
        again = await self.export(imported["id"])
        self.assertEqual(comparable(again), comparable(document))
        self.assertEqual({m["id"] for m in again["messages"]} & {m["id"] for m in document["messages"]}, set())

        async with running_totem(self.make_tmp(), token=TOKEN) as elsewhere:
            folder = os.path.join(self.tmp, "elsewhere")
            os.makedirs(folder)
            project = await self.ok("projects_open", {"path": folder}, app=elsewhere)
            there = await self.ok("sessions_import", {"projectid": project["id"], "session": document}, app=elsewhere)
            self.assertEqual(comparable(await self.export(there["id"], app=elsewhere)), comparable(document))
            attachment = (await self.ok("sessions_messages", ident=there["id"], app=elsewhere))["messages"][0]
            fileid = attachment["data"]["attachments"][0]["id"]
            served = await self.attachment(elsewhere, fileid)  # served where it was imported
            self.assertEqual(served, b"a note for the model")

    async def attachment(self, app, fileid: str) -> bytes:
        answer = await request(app, "GET", f"/attachments/{fileid}/", headers=AUTH)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.body

    async def test_an_import_continues_like_the_original(self):
        """The next prompt of an imported session sends the model the conversation the original
        sends (but for the marker of the data envelopes): the same turns, calls and results."""
        await self.conversation(self.session["id"])
        imported = await self.ok("sessions_import", {"projectid": self.other["id"],
                                                      "session": await self.export(self.session["id"])})
        await self.run_prompt(self.session["id"], "Go on", reply("Going on."))
        await self.run_prompt(imported["id"], "Go on", reply("Going on."))
        original, copied = (self.model.requests[-2].body["messages"], self.model.requests[-1].body["messages"])
        same = [MARKER.sub("data-M", json.dumps(message)) for message in original if message["role"] != "system"]
        self.assertEqual([MARKER.sub("data-M", json.dumps(message)) for message in copied
                          if message["role"] != "system"], same)
        self.assertIn("hello world", "".join(same))
        self.assertEqual((await self.ok("sessions_read", ident=imported["id"]))["status"], "idle")


class MarkdownTest(ExportCase):
    async def test_markdown_reads_as_the_conversation(self):
        """The Markdown has the turns, the reasoning, the call with its input, its output, its
        decision and where the run ended; a long output is trimmed and says so."""
        with open(os.path.join(self.tmp, "proj", "long.txt"), "w") as handle:
            handle.write("".join(f"line number {index}\n" for index in range(400)))
        await self.conversation(self.session["id"])
        await self.run_prompt(self.session["id"], "Read long.txt", reply(tool_calls=[("read", {"path": "long.txt"})]),
                              reply("Long."))
        markdown = await self.export(self.session["id"], markdown=True)
        self.assertEqual(schema_problems(action_table()["sessions_export"].answer, {"markdown": markdown}), [])
        for expected in ("# Look at a.txt", "## You ·", "Look at a.txt", "## Assistant (", "> **Reasoning**",
                         "> The person wants the file.", "It says hello.", "**Tool `read`** · done",
                         "Decision: allow", '"path": "a.txt"', "Output:", "hello world",
                         "- File note.txt (text/plain, 20 bytes)", "*The run ended: error: ", "Incorrect API key",
                         "- Status: idle", "- Mode: build"):
            self.assertIn(expected, markdown)
        self.assertRegex(markdown, r"Output \(the first \d+ of \d+ characters\):")
        self.assertNotIn("line number 399", markdown)
        self.assertIn("line number 399", json.dumps(await self.export(self.session["id"])))
        self.assertLess(max(len(block) for block in markdown.split("```")), MAX_OUTPUT_CHARS + 200)


class SecretTest(ExportCase):
    async def test_no_secret_leaves_in_an_export(self):
        """The provider keys (one saved after a tool output held it) and the access token, in a
        prompt, a tool output and a file, are in neither export: they read [secret:...], and the
        file that holds one is left out with a note."""
        with open(os.path.join(self.tmp, "proj", "secret.txt"), "w") as handle:
            handle.write(f"the key is {LATER}\n")
        held = base64.b64encode(f"key={LATER}".encode()).decode()
        await self.run_prompt(self.session["id"], f"My key {KEY} and token {TOKEN}",
                              reply(tool_calls=[("read", {"path": "secret.txt"})]), reply(f"It holds {LATER}."),
                              attachments=[{"name": "k.txt", "mime": "text/plain", "data": held}])
        stored = json.dumps(await self.ok("sessions_messages", ident=self.session["id"]))
        self.assertIn(LATER, stored)  # not a secret of this Totem when it was stored
        self.assertIn(KEY, stored)
        await self.ok("providers_save", {"name": "Later", "kind": "openai", "url": self.model.url, "key": LATER})
        document = await self.export(self.session["id"])
        markdown = await self.export(self.session["id"], markdown=True)
        for text in (json.dumps(document), json.dumps(document, ensure_ascii=False), markdown):
            for secret in (KEY, LATER, TOKEN, held):
                self.assertNotIn(secret, text)
            self.assertIn("[secret:", text)
        self.assertEqual(document["messages"][0]["attachments"][0]["note"], LEFT_OUT_SECRET)
        self.assertNotIn("data", document["messages"][0]["attachments"][0])
        # The import of that export takes what it holds (the file left out, named no more).
        imported = await self.ok("sessions_import", {"projectid": self.other["id"], "session": document})
        first = (await self.ok("sessions_messages", ident=imported["id"]))["messages"][0]
        self.assertNotIn("attachments", first["data"])


def part(kind="text", text="x", data=None):
    return {"kind": kind, "status": "done", "text": text, "data": data or {}, "created": 1, "updated": 1, "closed": 1}


def message(ident, parts=(), **extra):
    return {"id": ident, "role": "user", "data": {}, "created": 1, "parts": list(parts)} | extra


class BadImportTest(ExportCase):
    async def test_every_bad_import_is_400_and_writes_nothing(self):
        """Each bad document is 400 naming its field, an unknown project 404, and no session,
        message or file is written by any of them."""
        await self.run_prompt(self.session["id"], "Look at a.txt", reply(tool_calls=[("read", {"path": "a.txt"})]),
                              reply("Done."))
        good = await self.export(self.session["id"])
        tool_at = next(i for i, p in enumerate(good["messages"][1]["parts"]) if p["kind"] == "tool")

        def changed(change):
            document = copy.deepcopy(good)
            change(document)
            return document

        deep: dict = {}
        for _ in range(MAX_DATA_DEPTH + 1):
            deep = {"a": deep}
        many_parts = [message(f"m{index}", [part()] * MAX_MESSAGE_PARTS)
                      for index in range(MAX_IMPORT_PARTS // MAX_MESSAGE_PARTS + 1)]
        cases = [
            (changed(lambda d: d.update(version=2)), "session.version"),
            (changed(lambda d: d.update(messages="none")), "session.messages"),
            (changed(lambda d: d["messages"][0]["parts"][0].update(kind=5)), "session.messages[0].parts[0].kind"),
            (changed(lambda d: d["messages"][0].update(role="system")), "session.messages[0].role"),
            (changed(lambda d: d.update(autoaccept=True)), "session.autoaccept"),
            (changed(lambda d: d.update(rules=[{"tool": "bash", "pattern": "*", "action": "allow"}])), "session.rules"),
            (changed(lambda d: d["messages"][0]["parts"][0].update(text="x" * (MAX_PART_TEXT_CHARS + 1))),
             "session.messages[0].parts[0].text"),
            (changed(lambda d: d.update(messages=[message(f"m{i}") for i in range(MAX_IMPORT_MESSAGES + 1)])),
             "session.messages"),
            (changed(lambda d: d.update(messages=many_parts)), "session.messages"),
            (changed(lambda d: d["messages"][1].update(id=d["messages"][0]["id"])), "session.messages[1].id"),
            (changed(lambda d: d["messages"][1]["parts"][tool_at]["data"].pop("callid")),
             f"session.messages[1].parts[{tool_at}].data.callid"),
            (changed(lambda d: d["messages"][1]["parts"][tool_at]["data"].update(output=7)),
             f"session.messages[1].parts[{tool_at}].data.output"),
            (changed(lambda d: d["messages"][0].update(data=deep)), "session.messages[0].data"),
            (changed(lambda d: d["messages"][0]["data"].update(prompt=3)), "session.messages[0].data.prompt"),
            (changed(lambda d: d["messages"][0].update(attachments=[{"id": "f", "name": "n", "mime": "text/plain",
                                                                     "size": 1, "data": "abc"}])),
             "session.messages[0].attachments[0].data"),
            (changed(lambda d: d["messages"][0]["parts"][0].update(text="\ud800")), "session.messages[0].parts[0].text"),
            (changed(lambda d: d.update(created=-1)), "session.created"),
            (changed(lambda d: d.pop("name")), "session.name"),
            ("not an export", "session"),
        ]
        before = await self.everything()
        for document, field in cases:
            with self.subTest(field=field):
                answer = await self.api("sessions_import", {"projectid": self.other["id"], "session": document})
                self.assertEqual(answer.status, 400, answer.body[:300])
                self.assertIn(field, [problem["name"] for problem in answer.json()], answer.body[:300])
        answer = await self.api("sessions_import", {"session": good})
        self.assertEqual((answer.status, answer.json()[0]["name"]), (400, "projectid"))
        answer = await self.api("sessions_import", {"projectid": "nosuch", "session": good})
        self.assertEqual(answer.status, 404, answer.body)
        answer = await self.api("sessions_import", {"projectid": self.other["id"], "session": good}, method="GET")
        self.assertEqual(answer.status, 405)
        self.assertEqual(await self.everything(), before)
        answer = await self.api("sessions_export", ident="nosuch")
        self.assertEqual(answer.status, 404)
        answer = await self.api("sessions_export", ident=self.session["id"], query="format=pdf")
        self.assertEqual((answer.status, answer.json()[0]["name"]), (400, "format"))

    async def everything(self) -> list:
        """What an import would add to: the sessions of both projects (every message, part and
        file belongs to one)."""
        lists = [await self.ok("sessions", query=f"projectid={p['id']}") for p in (self.project, self.other)]
        return [[s["id"] for s in page["sessions"]] for page in lists]


class RunningExportTest(ExportCase):
    async def test_a_running_session_is_exported_as_stored_and_imported_closed(self):
        """A session exported while its answer streams says so (running, its part open); its
        import has the part closed as error and the session ended, saying why."""
        ws = await open_ws(self.app, additional_headers=AUTH)
        self.addAsyncCleanup(ws.close)
        await ws.send(json.dumps({"type": "subscribe", "sessionid": self.session["id"]}))
        for _ in range(200):  # as LoopCase: the hub takes the subscription when the server reads it
            if self.app.hub.subscribed(self.session["id"]):
                break
            await asyncio.sleep(5 * MS)
        self.model.script(Stall(events=text_chunks("partial answer")))
        await self.ok("sessions_prompt", {"text": "Write", "model": self.modelref}, self.session["id"])
        while (await next_event(ws))["type"] != "part.delta":
            pass
        document = await self.export(self.session["id"])
        self.assertEqual(document["status"], "running")
        streaming = document["messages"][-1]["parts"][0]
        self.assertEqual((streaming["status"], streaming["closed"]), ("streaming", None))
        imported = await self.ok("sessions_import", {"projectid": self.other["id"], "session": document})
        self.assertEqual((imported["status"], imported["error"]), ("error", EXPORTED_DURING_RUN))
        closed = (await self.ok("sessions_messages", ident=imported["id"]))["messages"][-1]["parts"][0]
        self.assertEqual(closed["status"], "error")
        self.assertIsNotNone(closed["closed"])
        answer = await self.api("sessions_abort", ident=self.session["id"], method="POST")
        self.assertEqual(answer.status, 200)
        await run_ended(self.app, self.session["id"])

    async def test_an_open_tool_part_is_imported_closed_with_a_reason(self):
        """A tool part that was running (no output yet) is imported as error, saying it was open."""
        await self.run_prompt(self.session["id"], "Look", reply(tool_calls=[("read", {"path": "a.txt"})]),
                              reply("Done."))
        document = await self.export(self.session["id"])
        tool = next(p for p in document["messages"][1]["parts"] if p["kind"] == "tool")
        tool.update(status="running", closed=None)
        tool["data"].pop("output")
        imported = await self.ok("sessions_import", {"projectid": self.other["id"], "session": document})
        parts = (await self.ok("sessions_messages", ident=imported["id"]))["messages"][1]["parts"]
        tool = next(p for p in parts if p["kind"] == "tool")
        self.assertEqual((tool["status"], tool["data"]["error"]), ("error", OPEN_AT_EXPORT))


class PureTest(unittest.TestCase):
    def test_markdown_fences_outlast_backticks_inside(self):
        """A tool output holding a fence is shown in a longer one, a short output whole, a long
        one trimmed with what it shows of it."""
        document = {"name": "N", "mode": "build", "status": "idle", "created": 0, "messages": [message("m", [
            part("tool", "", {"tool": "bash", "callid": "c", "input": {"command": "cat"}, "output": "```\nx\n```"}),
            part("tool", "", {"tool": "bash", "callid": "d", "output": "y\n" * (MAX_OUTPUT_LINES + 5)}),
            part("validation", "", {"problems": ["p"]})])]}
        markdown = render_markdown(document)
        self.assertIn("````\n```\nx\n```\n````", markdown)
        self.assertIn(f"Output (the first {2 * MAX_OUTPUT_LINES - 1} of {2 * (MAX_OUTPUT_LINES + 5)} characters):",
                      markdown)
        self.assertIn("**validation** · done", markdown)
        self.assertIn("- Created: 1970-01-01 00:00:00 UTC", markdown)
        self.assertIn("- Exported: unknown", markdown)

    def test_scrubbing_reaches_keys_and_nested_texts(self):
        """Every text of a document is scrubbed, an object's keys too; other values stay."""
        scrubber = Scrubber({"openai": KEY})
        scrubbed = scrubbed_json({KEY: [1, {"a": f"x{KEY}"}], "n": None, "b": True}, scrubber)
        self.assertNotIn(KEY, json.dumps(scrubbed))
        self.assertEqual((scrubbed["n"], scrubbed["b"]), (None, True))
