"""The services (`totem/services/sessions.py`, `totem/services/projects.py`, `totem/services/providers.py`) called
directly on a real app: their cascades, the jobs that end with a session, the layering, and the
surfaces that must say only what is true."""

import ast
import asyncio
import json
import os
import re
import unittest

from tests.model_server import ScriptedModel, reply
from tests.utils import MS, TotemCase, next_event, open_ws, request
from totem import events
from totem.config import KEYS
from totem.errors import BadRequest, Forbidden, NotFound
from totem.process.runner import group_running

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "totem")
KEY = "sk-test-SERVICES-0123456789abcdef"
# The layers by folder (DESIGN.md, data flows one way): the composition root may import anything;
# adapters call services; services call concerns; concerns import neither.
COMPOSITION = ("app.py", "core.py")
ADAPTERS = ("http", "cli.py")
SERVICES = ("services",)
# What an adapter reaches only through the services: the concerns that the App and the core hold
# (and the core itself), named after the attributes that hold them.
CONCERNS_ON_APP = frozenset(("store", "runs", "hub", "jobs", "snapshots", "providers", "mcp_clients", "vault",
                             "terminals", "sandbox", "core"))
TODO_ITEMS = [{"text": "look", "status": "done"}]


def package_files():
    """Every module of the package, as (path relative to totem/, parsed tree)."""
    for folder, _dirs, names in os.walk(PACKAGE):
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as handle:
                    yield os.path.relpath(path, PACKAGE), ast.parse(handle.read(), path)


def imported_modules(tree, relpath: str) -> set[str]:
    """The totem modules (and names) that a module imports, dotted, relative to the package."""
    package = relpath[:-3].split(os.sep)[:-1]  # api/sessions.py and api/__init__.py: ["api"]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("totem."):
                module = node.module[len("totem."):]
            else:
                continue
            found.update(f"{module}.{alias.name}".strip(".") for alias in node.names)
            if module:
                found.add(module)
        elif isinstance(node, ast.Import):
            found.update(alias.name[len("totem."):] for alias in node.names if alias.name.startswith("totem."))
    return found


def past_the_services(tree) -> list[str]:
    """The attribute chains of a module that reach a concern on a Context or the App:
    `ctx.app.store`, `self.app.runs`, `app.hub`, `ctx.store`..."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in CONCERNS_ON_APP:
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id in ("app", "ctx")) or \
                    (isinstance(owner, ast.Attribute) and owner.attr == "app"):
                found.append((node.lineno, node.col_offset, f"{ast.unparse(node)} (line {node.lineno})"))
    return [shown for _line, _column, shown in sorted(found)]


# A module that reaches past the services three ways, and calls one the right way.
OFFENDER = """
async def list_rules(ctx):
    rows = await ctx.app.store.list_rules(None)
    ctx.app.runs.reply_permission(ctx.id, "once", None)
    return rows + await ctx.services.permissions.list(None)

class Router:
    async def websocket(self, request):
        await serve(self.app.hub, request)

async def attachment(app, ident):
    return await app.store.get_attachment(ident)
"""


def layer(relpath: str) -> str:
    """The layer of a module, from its path relative to totem/."""
    top = relpath.split(os.sep)[0]
    if top in COMPOSITION:
        return "composition"
    if top in ADAPTERS:
        return "adapter"
    if top in SERVICES:
        return "service"
    return "concern"


def layer_of_module(dotted: str) -> str:
    """The layer of a dotted module name relative to the package (`http.api.sessions`)."""
    top = dotted.split(".")[0]
    return layer(top + ".py" if top + ".py" in COMPOSITION + ADAPTERS else top)


class ServicesCase(TotemCase):
    """A running app with a scripted model saved as a provider, a project and a session."""

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.model = await ScriptedModel().__aenter__()
        self.addAsyncCleanup(self.model.__aexit__, None, None, None)
        self.app.runs.backoff_first_s = 0.01
        self.services = self.app.services
        self.root = self.folder("proj")
        with open(os.path.join(self.root, ".env"), "w") as handle:
            handle.write("DATABASE_PASSWORD=hunter2\n")
        self.project = await self.services.projects.open(self.root)
        self.session = await self.services.sessions.create(self.project["id"])
        provider = await self.services.providers.save(None, "Scripted", "openai", self.model.url, KEY, None)
        self.modelref = f"{provider['id']}/scripted-model"

    async def until(self, check, what: str, timeout_ms: float = 5000):
        """Wait until `check()` (sync or async) is true."""
        for _ in range(int(timeout_ms / 10)):
            value = check()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value
            await asyncio.sleep(10 * MS)
        self.fail(f"timed out waiting for {what}")

    async def run_to_idle(self, sessionid: str, *answers, **prompt):
        self.model.script(*answers)
        messageid = await self.services.sessions.prompt(sessionid, prompt.pop("text", "Look"), model=self.modelref,
                                                         **prompt)
        await self.until(lambda: not self.app.runs.is_running(sessionid), "the run to end")
        return messageid

    async def events_of(self, ws, sessionid: str, until):
        """Events of one session up to the first for which `until(event)` is true."""
        collected = []
        while True:
            event = await next_event(ws, 5000)
            if event["sessionid"] == sessionid:
                collected.append(event)
                if until(event):
                    return collected

    async def follow(self, sessionid: str):
        """A WebSocket client subscribed to a session in which a question already waits: on
        subscribe the waiting question is sent again, which proves the subscription is live."""
        ws = await open_ws(self.app)
        self.addAsyncCleanup(ws.close)
        await ws.send(json.dumps({"type": "subscribe", "sessionid": sessionid}))
        seen = await self.events_of(ws, sessionid, lambda e: e["type"] in ("permission.ask", "question.ask"))
        return ws, seen[-1]  # after the parts still open, sent first


class SessionRemovalTest(ServicesCase):
    async def test_remove_session_removes_all_it_holds(self):
        """Removing a session through the service removes its messages, parts, attachments and
        task list, and announces it removed; the project and its other sessions stay."""
        sid = self.session["id"]
        other = await self.services.sessions.create(self.project["id"], "other")
        note = ("note.txt", "text/plain", b"remember this\n")
        await self.run_to_idle(sid, reply(tool_calls=[("todo", {"items": TODO_ITEMS})]), reply("noted"),
                               attachments=[note])
        await self.run_to_idle(other["id"], reply("other answer"))
        messages = (await self.services.sessions.messages(sid, None, 100))["messages"]
        [attachment] = messages[0]["data"]["attachments"]
        self.assertEqual((await self.services.sessions.todos(sid))["items"], TODO_ITEMS)
        self.assertEqual((await request(self.app, "GET", f"/attachments/{attachment['id']}/")).body, note[2])
        self.assertGreater(await self.app.store.count_rows("parts", "sessionid", sid), 2)
        ws = await open_ws(self.app)  # session.updated goes to every connection
        self.addAsyncCleanup(ws.close)

        self.assertEqual(await self.services.sessions.remove(sid), sid)

        [removed] = await self.events_of(ws, sid, lambda e: e["type"] == "session.updated")
        self.assertEqual(removed["data"]["session"], {"id": sid, "projectid": self.project["id"], "removed": True})
        for read in (self.services.sessions.read(sid), self.services.sessions.messages(sid, None, 100),
                     self.services.sessions.todos(sid), self.services.jobs.list(sid),
                     self.services.sessions.remove(sid)):
            with self.assertRaises(NotFound):
                await read
        self.assertEqual((await request(self.app, "GET", f"/attachments/{attachment['id']}/")).status, 404)
        for table in ("messages", "parts", "attachments", "todos"):
            self.assertEqual(await self.app.store.count_rows(table, "sessionid", sid), 0, table)
        listed = await self.services.sessions.list(self.project["id"])
        self.assertEqual([s["id"] for s in listed["sessions"]], [other["id"]])
        self.assertEqual(len((await self.services.sessions.messages(other["id"], None, 100))["messages"]), 2)

    async def test_remove_running_session_aborts_and_rejects_permission(self):
        """A session removed while its run waits for a permission answer: the run ends, the
        question is rejected (permission.replied reject) and can no longer be answered."""
        sid = self.session["id"]
        self.model.script(reply(tool_calls=[("read", {"path": ".env"})]), reply("never asked for"))
        await self.services.sessions.prompt(sid, "Read .env", model=self.modelref)
        await self.until(self._waiting(sid), "the permission question")
        ws, ask = await self.follow(sid)
        self.assertEqual(ask["type"], "permission.ask")

        await self.services.sessions.remove(sid)

        self.assertFalse(self.app.runs.is_running(sid))
        seen = await self.events_of(ws, sid, lambda e: e["type"] == "session.updated")
        replied = [e["data"] for e in seen if e["type"] == "permission.replied"]
        self.assertEqual(replied, [{"id": ask["data"]["id"], "reply": "reject"}])
        self.assertIn({"status": "aborted"}, [e["data"] for e in seen if e["type"] == "session.status"])
        self.assertEqual(self.app.runs.questions.waiting_in(sid), 0)
        with self.assertRaises(NotFound):
            self.app.runs.reply_permission(ask["data"]["id"], "once", None)
        self.assertEqual(len(self.model.requests), 1)  # the rejected call never led to a next step

    async def test_remove_running_session_drops_ask_question(self):
        """A session removed while the ask tool waits: the run ends, question.replied goes out
        and the question can no longer be answered."""
        sid = self.session["id"]
        self.model.script(reply(tool_calls=[("ask", {"question": "Tabs or spaces?"})]), reply("never"))
        await self.services.sessions.prompt(sid, "Ask me", model=self.modelref)
        await self.until(self._waiting(sid), "the question")
        ws, ask = await self.follow(sid)
        self.assertEqual(ask["type"], "question.ask")

        await self.services.sessions.remove(sid)

        self.assertFalse(self.app.runs.is_running(sid))
        seen = await self.events_of(ws, sid, lambda e: e["type"] == "session.updated")
        self.assertIn({"id": ask["data"]["id"]}, [e["data"] for e in seen if e["type"] == "question.replied"])
        with self.assertRaises(NotFound):
            self.services.sessions.reply_question(ask["data"]["id"], "tabs")

    def _waiting(self, sessionid):
        async def check():
            return (await self.services.sessions.read(sessionid))["waiting"] == 1
        return check


class JobsEndWithSessionTest(ServicesCase):
    async def start_job(self, sessionid: str, name: str) -> tuple[int, int]:
        """A background job whose shell leads a process group with a grandchild; returns the
        pids of the leader and of the grandchild, once both run."""
        command = f"sh -c 'sleep 100' & echo $! > {name}.inner; echo $$ > {name}.pid; wait"
        self.app.jobs.start(sessionid, command, self.root)

        def read_pids():
            try:
                with open(os.path.join(self.root, f"{name}.pid")) as leader, \
                        open(os.path.join(self.root, f"{name}.inner")) as inner:
                    return int(leader.read()), int(inner.read())
            except (OSError, ValueError):
                return None
        return await self.until(read_pids, "the job's pids")

    async def test_removed_session_leaves_no_process(self):
        """When Sessions.remove returns, every process of the session's jobs is gone (the
        leader reaped, no member of its group running) and the jobs are forgotten."""
        sid = self.session["id"]
        leader, inner = await self.start_job(sid, "job")
        self.assertEqual(os.getpgid(inner), leader)  # the grandchild is in the leader's group
        self.assertTrue(group_running(leader))
        self.assertEqual([job["status"] for job in await self.services.jobs.list(sid)], ["running"])

        await self.services.sessions.remove(sid)

        with self.assertRaises(ProcessLookupError):
            os.kill(leader, 0)
        self.assertFalse(group_running(leader))  # the grandchild too, at most a zombie of init's
        self.assertEqual(self.app.jobs.list(sid), [])

    async def test_removed_project_leaves_no_process(self):
        """Removing a project stops the jobs of each of its sessions, whole process groups."""
        second = await self.services.sessions.create(self.project["id"], "second")
        leaders = [(await self.start_job(sid, f"job{n}"))[0]
                   for n, sid in enumerate((self.session["id"], second["id"]))]

        await self.services.projects.remove(self.project["id"])

        for leader in leaders:
            with self.assertRaises(ProcessLookupError):
                os.kill(leader, 0)
            self.assertFalse(group_running(leader))
        self.assertEqual(self.app.jobs.list(second["id"]), [])

    async def test_plan_mode_session_cannot_stop_a_job(self):
        """Jobs.stop refuses in Plan mode and leaves the job running; unknown jobs are 404."""
        sid = self.session["id"]
        await self.start_job(sid, "job")
        [job] = await self.services.jobs.list(sid)
        await self.run_to_idle(sid, reply("planned"), mode="plan")
        with self.assertRaises(Forbidden):
            await self.services.jobs.stop(sid, job["id"])
        self.assertEqual([j["status"] for j in await self.services.jobs.list(sid)], ["running"])
        await self.run_to_idle(sid, reply("building"), mode="build")
        with self.assertRaises(NotFound):
            await self.services.jobs.stop(sid, "nope")
        self.assertEqual((await self.services.jobs.stop(sid, job["id"]))["status"], "stopped")


class ProjectRemovalTest(ServicesCase):
    async def test_remove_project_removes_sessions_rules_not_folder(self):
        """Removing a project removes each session with all it holds and the project's rules,
        announces each session removed, and leaves the folder and other projects alone."""
        first = self.session["id"]
        second = (await self.services.sessions.create(self.project["id"], "second"))["id"]
        await self.run_to_idle(first, reply("one"))
        await self.run_to_idle(second, reply("two"))
        await self.app.store.add_rule(self.project["id"], "read", "src/**", "deny")
        other = await self.services.projects.open(self.folder("other"))
        kept = await self.services.sessions.create(other["id"])
        ws = await open_ws(self.app)
        self.addAsyncCleanup(ws.close)

        self.assertEqual(await self.services.projects.remove(self.project["id"]), self.project["id"])

        removed = set()
        while len(removed) < 2:
            event = await next_event(ws, 5000)
            if event["type"] == "session.updated" and event["data"]["session"].get("removed"):
                removed.add(event["sessionid"])
        self.assertEqual(removed, {first, second})
        with self.assertRaises(NotFound):
            await self.services.projects.get(self.project["id"])
        with self.assertRaises(NotFound):
            await self.services.sessions.list(self.project["id"])
        for sid in (first, second):
            with self.assertRaises(NotFound):
                await self.services.sessions.messages(sid, None, 100)
            self.assertEqual(await self.app.store.count_rows("parts", "sessionid", sid), 0)
        self.assertEqual(await self.app.store.list_rules(self.project["id"]), [])
        self.assertEqual([p["id"] for p in await self.services.projects.list()], [other["id"]])
        self.assertEqual([s["id"] for s in (await self.services.sessions.list(other["id"]))["sessions"]],
                         [kept["id"]])
        self.assertTrue(os.path.isfile(os.path.join(self.root, ".env")))
        with self.assertRaises(NotFound):
            await self.services.projects.remove(self.project["id"])

    async def test_remove_project_while_running_rejects_question(self):
        """A project removed while one of its sessions waits for a permission answer aborts the
        run and rejects the question."""
        sid = self.session["id"]
        self.model.script(reply(tool_calls=[("read", {"path": ".env"})]))
        await self.services.sessions.prompt(sid, "Read .env", model=self.modelref)
        await self.until(lambda: self.app.runs.questions.waiting_in(sid) == 1, "the permission question")
        ws, ask = await self.follow(sid)

        await self.services.projects.remove(self.project["id"])

        self.assertFalse(self.app.runs.is_running(sid))
        seen = await self.events_of(ws, sid, lambda e: e["type"] == "session.updated")
        self.assertIn({"id": ask["data"]["id"], "reply": "reject"},
                      [e["data"] for e in seen if e["type"] == "permission.replied"])


class UseCaseRulesTest(ServicesCase):
    async def test_prompt_checks_meaning(self):
        """Sessions.prompt refuses what means nothing: no text and no file, no model, a model
        that names no provider, an unknown mode; and a second prompt while one runs."""
        sid = self.session["id"]
        cases = [({"text": "  "}, "text"), ({"text": "hi"}, "model"),
                 ({"text": "hi", "model": "nope/model"}, "model"), ({"text": "hi", "model": "no-slash"}, "model"),
                 ({"text": "hi", "model": self.modelref, "mode": "yolo"}, "mode"),
                 ({"text": "hi", "model": self.modelref, "reasoning": "max"}, "reasoning")]
        for arguments, field in cases:
            with self.subTest(arguments), self.assertRaises(BadRequest) as caught:
                await self.services.sessions.prompt(sid, **arguments)
            self.assertEqual([name for name, _ in caught.exception.errors], [field])
        self.assertEqual((await self.services.sessions.messages(sid, None, 100))["messages"], [])
        self.model.script(reply(tool_calls=[("read", {"path": ".env"})]))
        await self.services.sessions.prompt(sid, "Read .env", model=self.modelref)
        with self.assertRaises(BadRequest) as caught:
            await self.services.sessions.prompt(sid, "again", model=self.modelref)
        self.assertEqual(caught.exception.errors[0][0], "session")
        self.assertEqual(await self.services.sessions.abort(sid), sid)
        with self.assertRaises(BadRequest):
            await self.services.sessions.abort(sid)  # nothing runs any more

    async def test_prompt_takes_the_session_options(self):
        """A prompt stores its model and mode on the session; the next one without them uses them."""
        sid = self.session["id"]
        await self.run_to_idle(sid, reply("planned"), mode="plan")
        self.model.script(reply("again"))
        await self.services.sessions.prompt(sid, "again")
        await self.until(lambda: not self.app.runs.is_running(sid), "the run to end")
        session = await self.services.sessions.read(sid)
        self.assertEqual((session["model"], session["mode"], session["status"]), (self.modelref, "plan", "idle"))

    async def test_create_rename_publish_after_write(self):
        """create and rename write, then publish session.updated with the stored session."""
        ws = await open_ws(self.app)
        self.addAsyncCleanup(ws.close)
        created = await self.services.sessions.create(self.project["id"], "first")
        renamed = await self.services.sessions.rename(created["id"], "second")
        seen = await self.events_of(ws, created["id"], lambda e: e["data"]["session"]["name"] == "second")
        stored = await self.services.sessions.read(created["id"])
        self.assertEqual(stored.pop("tokens"), {"input": 0, "output": 0, "estimated": False})  # read adds them
        self.assertEqual([e["data"]["session"]["name"] for e in seen], ["first", "second"])
        self.assertEqual(seen[-1]["data"]["session"] | {"waiting": 0}, stored)
        self.assertEqual(renamed, stored)
        with self.assertRaises(NotFound):
            await self.services.sessions.create("nope")
        with self.assertRaises(NotFound):
            await self.services.sessions.rename("nope", "x")

    async def test_projects_open_files_git(self):
        """open needs an absolute folder and gives the same project again; files stays inside."""
        for path in ("relative/path", os.path.join(self.root, ".env"), os.path.join(self.tmp, "missing")):
            with self.subTest(path), self.assertRaises(BadRequest):
                await self.services.projects.open(path)
        again = await self.services.projects.open(self.root + "/")
        self.assertEqual(again["id"], self.project["id"])
        tree = await self.services.projects.files(self.project["id"])
        self.assertEqual([(i["name"], i["protected"]) for i in tree["items"]], [(".env", True)])
        with self.assertRaises(BadRequest):
            await self.services.projects.files(self.project["id"], "../..")
        self.assertFalse((await self.services.projects.git(self.project["id"]))["repository"])
        with self.assertRaises(NotFound):
            await self.services.projects.files("nope")

    async def test_provider_save_and_remove_refresh_the_scrubber(self):
        """A key saved through the service is scrubbed from output at once; removed, it is not."""
        other_key = "sk-test-ANOTHER-KEY-9876543210fedcba"
        self.assertNotIn(KEY, self.services.providers.scrubber().scrub(f"echo {KEY}"))
        saved = await self.services.providers.save(None, "Other", "openai", self.model.url, other_key, None)
        self.assertNotIn(other_key, self.services.providers.scrubber().scrub(f"echo {other_key}"))
        self.assertNotIn(other_key, json.dumps(await self.services.providers.list()))
        await self.services.providers.remove(saved["id"])
        self.assertIn(other_key, self.services.providers.scrubber().scrub(f"echo {other_key}"))
        with self.assertRaises(NotFound):
            await self.services.providers.remove(saved["id"])


class LayersTest(unittest.TestCase):
    def test_services_never_import_adapters(self):
        """Services never import an adapter (the HTTP side, `totem run`) or the composition root."""
        for relpath, tree in package_files():
            if layer(relpath) == "service":
                bad = {m for m in imported_modules(tree, relpath) if layer_of_module(m) in ("adapter", "composition")}
                self.assertEqual(bad, set(), relpath)

    def test_concerns_never_import_services_or_adapters(self):
        """No concern (agent, tools, store, events, runner...) imports a service, an adapter or the root."""
        for relpath, tree in package_files():
            if layer(relpath) == "concern":
                bad = {m for m in imported_modules(tree, relpath)
                       if layer_of_module(m) in ("service", "adapter", "composition")}
                self.assertEqual(bad, set(), relpath)

    def test_adapters_reach_no_concern_past_the_services(self):
        """No adapter (the API handlers, the routes, the MCP route, `totem run`) reaches a concern
        through a Context or the App (`ctx.app.store`, `ctx.app.runs`, `self.app.hub`...): it
        calls a service, or is handed what it needs by the composition root."""
        for relpath, tree in package_files():
            if layer(relpath) == "adapter":
                self.assertEqual(past_the_services(tree), [], relpath)

    def test_the_check_of_adapters_flags_an_offender(self):
        """The check above finds each reach past the services in a sample, and not the call of
        a service."""
        self.assertEqual(past_the_services(ast.parse(OFFENDER)),
                         ["ctx.app.store (line 3)", "ctx.app.runs (line 4)", "self.app.hub (line 9)",
                          "app.store (line 12)"])

    def test_the_layers_are_known_folders(self):
        """The check above reads the folders: each named layer exists, so a rename cannot empty it."""
        seen = {layer(relpath) for relpath, _tree in package_files()}
        self.assertEqual(seen, {"composition", "adapter", "service", "concern"})


# Event types the protocol names whose feature is not built yet (the README says so). Empty: every
# declared type is produced. A type added before its feature goes here until the feature lands.
NOT_YET_PRODUCED: tuple[str, ...] = ()


class EventsProducedTest(unittest.TestCase):
    def test_every_declared_event_is_produced(self):
        """Each event type declared in events.py is constructed somewhere else in the package:
        a declared type that no code path produces is a promise the server does not keep."""
        declared = {cls.__name__: wire for wire, cls in events.EVENT_TYPES.items()}
        produced = set()
        for relpath, tree in package_files():
            if relpath == "events.py":
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    func = node.func
                    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
                    if isinstance(func, ast.Attribute) and func.attr == "of" and isinstance(func.value, ast.Name):
                        name = func.value.id  # a constructor of the class: DiffUpdated.of(...)
                    if name in declared:
                        produced.add(name)
        missing = sorted(f"{declared[name]} ({name})" for name in set(declared) - produced)
        self.assertEqual(missing, sorted(NOT_YET_PRODUCED),
                         "declared in events.py but produced by no code path (or NOT_YET_PRODUCED is stale)")


class TruthfulSurfacesTest(TotemCase):
    settings = {"mcp": "true", "forge": "true", "forgedocs": "true", "forgemcp": "true"}

    async def test_account_reports_only_what_works(self):
        """Account|read says false for every feature that is not built, whatever config.ini says."""
        answer = await request(self.app, "GET", "/api/account")
        capabilities = answer.json()["capabilities"]
        self.assertIs(capabilities["mcp"], True)  # configured on here, and built
        for name in ("jobs", "attachments", "questions", "todos", "terminal", "undo", "fork", "schedules", "worktrees",
                     "commands", "mcpservers", "subagents", "forge"):
            self.assertIs(capabilities[name], True, name)
        self.assertNotIn("forgedocs", capabilities)


class ConfigDocsTest(unittest.TestCase):
    # The keys that config.py accepts and nothing reads yet: their features are not built.
    NOT_YET: tuple[str, ...] = ()

    def test_keys_that_do_nothing_say_not_yet(self):
        """config.ini's comment and the README's row of each key that does nothing yet say so,
        nothing reads those keys, and every other key is read by some module."""
        with open(os.path.join(ROOT, "config.ini"), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
            rows = [line.split("|") for line in handle.read().splitlines() if line.startswith("| `")]
        attributes, sources = set(), []
        for relpath, tree in package_files():
            if relpath != "config.py":
                attributes |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
                sources.append(ast.unparse(tree))
        source = "\n".join(sources)
        for key in KEYS:
            index = next(i for i, line in enumerate(lines) if re.match(rf"{key.name}\s*=", line))
            comment = []
            for line in reversed(lines[:index]):
                if not line.startswith("#"):
                    break
                comment.insert(0, line)
            row = next("|".join(cells) for cells in rows if f"`{key.name}`" in cells[1])
            if key.name in self.NOT_YET:
                self.assertIn("not yet", " ".join(comment).lower(), f"config.ini, {key.name}")
                self.assertIn("not yet", row.lower(), f"README, {key.name}")
                self.assertIsNone(re.search(rf"\bconfig\.{key.name}\b", source),
                                  f"{key.name} is read now: take 'not yet' out of config.ini and the README")
            else:
                self.assertIn(key.name, attributes, f"{key.name} is read by no module: say 'not yet'")


if __name__ == "__main__":
    unittest.main()
