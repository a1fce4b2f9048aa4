"""Snapshots end to end: undo, redo, diff, fork and Save as over the real server, a real
WebSocket client, the scripted model, real git and real files."""

import asyncio
import base64
import json
import os
import subprocess
import time
import zlib

from tests.model_server import reply
from tests.test_loop import LoopCase
from tests.utils import MS, call, next_event, request
from totem.workspace import snapshots

ORIGINAL = "hello world\nsecond line\n"  # a.txt, as LoopCase writes it

PATCH = """--- a/a.txt
+++ b/a.txt
@@ -1,2 +1,2 @@
 hello world
-second line
+patched line
--- /dev/null
+++ b/added.txt
@@ -0,0 +1 @@
+added
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
"""


def git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def kept_contents(app, projectid):
    """Every content kept in the snapshot store of a project, decompressed."""
    top = app.snapshots.blobs.project_folder(projectid)
    found = []
    for shard in os.listdir(top):
        if len(shard) != 2:
            continue
        for name in os.listdir(os.path.join(top, shard)):
            with open(os.path.join(top, shard, name), "rb") as handle:
                found.append(zlib.decompress(handle.read()))
    return found


class SnapshotCase(LoopCase):
    """A project folder "proj" (with a.txt) that is a git repository when `git` is set; bash is
    allowed by a rule of the configuration, so that its audit says "rule"."""

    rules = {"bash-all": "allow bash *"}
    git = False

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.root = self.folder("proj")
        if self.git:
            git(self.root, "init", "-q")
            git(self.root, "config", "user.name", "Test")
            git(self.root, "config", "user.email", "test@example.invalid")
            git(self.root, "add", "-A")
            git(self.root, "commit", "-q", "-m", "start")

    # -- files

    def path(self, name):
        return os.path.join(self.root, name)

    def put(self, name, text):
        os.makedirs(os.path.dirname(self.path(name)), exist_ok=True)
        with open(self.path(name), "w") as handle:
            handle.write(text)

    def text(self, name):
        with open(self.path(name)) as handle:
            return handle.read()

    def exists(self, name):
        return os.path.lexists(self.path(name))

    # -- runs

    async def turn(self, *steps, text="go", autoaccept=True, reply_with="once", final="done"):
        """Prompt once: the model makes each step's tool calls (a list of (name, args)) in one
        answer each, then says `final`; every permission question is answered `reply_with`.
        Returns (the user message id, the events)."""
        self.model.script(*(reply(tool_calls=list(step)) for step in steps), reply(final))
        answer = await self.prompt(text, autoaccept=autoaccept)
        self.assertEqual(answer.status, 200, answer.body)
        events = []
        while True:
            event = await next_event(self.ws, 20000)
            events.append(event)
            if event["type"] == "permission.ask":
                await call(self.app, "permissions_reply", {"reply": reply_with}, ident=event["data"]["id"])
            if event["type"] == "session.status" and event["data"]["status"] == "idle":
                return answer.json()["messageid"], events

    async def messages(self, sessionid=None):
        answer = await call(self.app, "sessions_messages", ident=sessionid or self.session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()["messages"]

    async def read_session(self, sessionid=None):
        answer = await call(self.app, "sessions_read", ident=sessionid or self.session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    async def undo(self, messageid, force=None, status=200):
        body = {"messageid": messageid} | ({} if force is None else {"force": force})
        answer = await call(self.app, "sessions_undo", body, ident=self.session["id"])
        self.assertEqual(answer.status, status, answer.body)
        return answer.json()

    async def redo(self, force=None, status=200):
        answer = await call(self.app, "sessions_redo", {} if force is None else {"force": force},
                            ident=self.session["id"])
        self.assertEqual(answer.status, status, answer.body)
        return answer.json()

    async def diff(self):
        answer = await call(self.app, "sessions_diff", ident=self.session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        return {entry["path"]: entry for entry in answer.json()}

    async def save_as(self, messageid, path, text, replace=None, status=200):
        body = {"messageid": messageid, "path": path, "text": text} | ({} if replace is None else {"replace": replace})
        answer = await call(self.app, "sessions_saveas", body, ident=self.session["id"])
        self.assertEqual(answer.status, status, answer.body)
        return answer.json()

    async def rows(self):
        return await self.app.store.session_snapshots(self.session["id"])

    def tool_parts(self, messages):
        return [part for message in messages for part in message["parts"] if part["kind"] == "tool"]


class UndoKinds:
    """Undo of each kind of change; run in a git repository and in a plain folder."""

    async def test_undo_write_created_and_replaced(self):
        """Undo of a write removes a file it created and puts back the content of a file it
        replaced."""
        messageid, _ = await self.turn([("write", {"path": "new/made.txt", "content": "made\n"}),
                                        ("write", {"path": "a.txt", "content": "replaced\n"})])
        self.assertEqual((self.text("new/made.txt"), self.text("a.txt")), ("made\n", "replaced\n"))
        done = await self.undo(messageid)
        self.assertEqual(sorted(done["restored"]), ["a.txt", "new/made.txt"])
        self.assertEqual((done["conflicts"], done["lost"]), ([], []))
        self.assertFalse(self.exists("new/made.txt"))
        self.assertEqual(self.text("a.txt"), ORIGINAL)

    async def test_undo_edit(self):
        """Undo of an edit puts back the file as it was before the edit."""
        messageid, _ = await self.turn([("edit", {"path": "a.txt", "old": "second", "new": "edited"})])
        self.assertEqual(self.text("a.txt"), "hello world\nedited line\n")
        done = await self.undo(messageid)
        self.assertEqual(done["restored"], ["a.txt"])
        self.assertEqual(self.text("a.txt"), ORIGINAL)

    async def test_undo_patch_modify_add_delete(self):
        """Undo of a patch that modifies one file, adds one and deletes one puts all three back."""
        self.put("gone.txt", "bye\n")
        if self.git:
            git(self.root, "add", "gone.txt")
            git(self.root, "commit", "-q", "-m", "gone")
        messageid, _ = await self.turn([("patch", {"patch": PATCH})])
        self.assertEqual(self.text("a.txt"), "hello world\npatched line\n")
        self.assertEqual(self.text("added.txt"), "added\n")
        self.assertFalse(self.exists("gone.txt"))
        done = await self.undo(messageid)
        self.assertEqual(sorted(done["restored"]), ["a.txt", "added.txt", "gone.txt"])
        self.assertEqual(self.text("a.txt"), ORIGINAL)
        self.assertFalse(self.exists("added.txt"))
        self.assertEqual(self.text("gone.txt"), "bye\n")

    async def test_undo_bash_create_modify_delete(self):
        """Undo of one bash command that created, modified and deleted a file each puts the tree
        back: the created file goes, the modified one has its content, the deleted one is back."""
        self.put("sub/gone.txt", "bye\n")
        messageid, _ = await self.turn([("bash", {"command": "mkdir -p out && echo made > out/made.txt"
                                                             " && echo more >> a.txt && rm sub/gone.txt"})])
        self.assertEqual(self.text("out/made.txt"), "made\n")
        self.assertEqual(self.text("a.txt"), ORIGINAL + "more\n")
        self.assertFalse(self.exists("sub/gone.txt"))
        rows = await self.rows()
        self.assertEqual(sorted(row["path"] for row in rows), ["a.txt", "out/made.txt", "sub/gone.txt"])
        self.assertEqual({row["tool"] for row in rows}, {"bash"})
        done = await self.undo(messageid)
        self.assertEqual(sorted(done["restored"]), ["a.txt", "out/made.txt", "sub/gone.txt"])
        self.assertFalse(self.exists("out/made.txt"))
        self.assertEqual(self.text("a.txt"), ORIGINAL)
        self.assertEqual(self.text("sub/gone.txt"), "bye\n")

    async def test_gitignored_files_not_recorded(self):
        """Files that .gitignore ignores, changed by a command, are not recorded (nor kept), and
        undo leaves them; the files it does not ignore are recorded."""
        self.put(".gitignore", "build/\n*.log\n")
        self.put("build/old.o", "old object\n")
        messageid, _ = await self.turn([("bash", {"command": "echo ignored-output > build/out.o && "
                                                             "echo changed > build/old.o && echo log > run.log && "
                                                             "echo kept > kept.txt"})])
        self.assertEqual([row["path"] for row in await self.rows()], ["kept.txt"])
        self.assertEqual(sorted(await self.diff()), ["kept.txt"])
        self.assertFalse(any(b"ignored-output" in data for data in kept_contents(self.app, self.project["id"])))
        await self.undo(messageid)
        self.assertFalse(self.exists("kept.txt"))
        self.assertEqual((self.text("build/out.o"), self.text("build/old.o"), self.text("run.log")),
                         ("ignored-output\n", "changed\n", "log\n"))

class UndoGitTest(UndoKinds, SnapshotCase):
    git = True

    async def test_git_folder_itself_not_recorded(self):
        """A command that changes the repository (git add, git commit) records no file under
        .git, and undo leaves the repository's history alone."""
        messageid, _ = await self.turn([("bash", {"command": "echo x > x.txt && git add x.txt"
                                                             " && git commit -q -m x"})])
        self.assertEqual([row["path"] for row in await self.rows()], ["x.txt"])
        await self.undo(messageid)
        self.assertFalse(self.exists("x.txt"))
        log = subprocess.run(["git", "log", "--format=%s"], cwd=self.root, capture_output=True, text=True)
        self.assertEqual(log.stdout.split(), ["x", "start"])


class UndoPlainTest(UndoKinds, SnapshotCase):
    git = False


class UndoRedoTest(SnapshotCase):
    async def test_undo_touches_only_the_sessions_files(self):
        """Files the person changed, between Totem's changes and after them, are not the
        session's: undo restores what the write and the two commands changed and nothing else."""
        self.put("mine.txt", "mine\n")
        self.put("d.txt", "d\n")
        first, _ = await self.turn([("write", {"path": "a.txt", "content": "by totem\n"}),
                                    ("bash", {"command": "echo c > c.txt"})])
        self.put("mine.txt", "the person's edit between commands\n")
        self.put("between.txt", "the person's new file\n")
        await self.turn([("bash", {"command": "echo changed > d.txt"})], text="again")
        self.put("after.txt", "the person's file after\n")
        self.assertEqual(sorted({row["path"] for row in await self.rows()}), ["a.txt", "c.txt", "d.txt"])
        done = await self.undo(first)
        self.assertEqual(sorted(done["restored"]), ["a.txt", "c.txt", "d.txt"])
        self.assertEqual((self.text("a.txt"), self.text("d.txt")), (ORIGINAL, "d\n"))
        self.assertFalse(self.exists("c.txt"))
        self.assertEqual(self.text("mine.txt"), "the person's edit between commands\n")
        self.assertEqual(self.text("between.txt"), "the person's new file\n")
        self.assertEqual(self.text("after.txt"), "the person's file after\n")

    async def test_conflict_left_then_forced_and_redone(self):
        """A file the person edited after Totem's change is a conflict: undo leaves the person's
        content and says so; undo with force restores it, and redo brings the person's content
        back."""
        messageid, _ = await self.turn([("write", {"path": "a.txt", "content": "by totem\n"}),
                                        ("write", {"path": "b.txt", "content": "b by totem\n"})])
        self.put("a.txt", "the person's edit\n")
        done = await self.undo(messageid)
        self.assertEqual([item["path"] for item in done["conflicts"]], ["a.txt"])
        self.assertIn("changed since Totem", done["conflicts"][0]["reason"])
        self.assertEqual(done["restored"], ["b.txt"])
        self.assertEqual(self.text("a.txt"), "the person's edit\n")
        self.assertFalse(self.exists("b.txt"))
        # Forced, on the same message: the file left in conflict is restored now.
        forced = await self.undo(messageid, force=True)
        self.assertEqual((forced["restored"], forced["conflicts"]), (["a.txt"], []))
        self.assertEqual(self.text("a.txt"), ORIGINAL)
        back = await self.redo()
        self.assertEqual(sorted(back["restored"]), ["a.txt", "b.txt"])
        self.assertEqual(self.text("a.txt"), "the person's edit\n")
        self.assertEqual(self.text("b.txt"), "b by totem\n")

    async def test_redo_conflict_left_then_forced(self):
        """A file the person edited after an undo is a conflict for redo: it is left with the
        person's content and the redo stays, so that redo with force puts Totem's content back
        (the other files were redone at the first try)."""
        messageid, _ = await self.turn([("write", {"path": "a.txt", "content": "by totem\n"}),
                                        ("write", {"path": "b.txt", "content": "b by totem\n"})])
        await self.undo(messageid)
        self.put("a.txt", "the person's edit after the undo\n")
        back = await self.redo()
        self.assertEqual(([item["path"] for item in back["conflicts"]], back["restored"]), (["a.txt"], ["b.txt"]))
        self.assertEqual(self.text("a.txt"), "the person's edit after the undo\n")
        self.assertEqual(self.text("b.txt"), "b by totem\n")
        self.assertFalse(any(message["reverted"] for message in await self.messages()))
        self.assertTrue((await self.read_session())["redo"])
        forced = await self.redo(force=True)
        self.assertEqual((forced["restored"], forced["conflicts"]), (["a.txt"], []))
        self.assertEqual(self.text("a.txt"), "by totem\n")
        self.assertFalse((await self.read_session())["redo"])
        await self.redo(status=400)
        # Undo works again from the rows of the messages.
        done = await self.undo(messageid)
        self.assertEqual(sorted(done["restored"]), ["a.txt", "b.txt"])
        self.assertEqual(self.text("a.txt"), ORIGINAL)

    async def test_redo_flags_and_new_prompt_forgets(self):
        """Redo puts back what undo took away; Sessions|read says redo true after undo and false
        after redo; messages carry reverted; a prompt after an undo drops the reverted messages
        and the redo (redo is then 400)."""
        first, _ = await self.turn([("write", {"path": "a.txt", "content": "one\n"})], text="first")
        second, _ = await self.turn([("write", {"path": "n.txt", "content": "two\n"}),
                                     ("bash", {"command": "echo three >> a.txt"})], text="second")
        self.assertFalse((await self.read_session())["redo"])
        await self.redo(status=400)
        done = await self.undo(second)
        self.assertEqual(done["messageid"], second)
        ids = [message["id"] for message in await self.messages()]
        self.assertEqual(done["reverted"], ids[ids.index(second):])
        self.assertEqual((self.text("a.txt"), self.exists("n.txt")), ("one\n", False))
        self.assertTrue((await self.read_session())["redo"])
        flags = {message["id"]: message["reverted"] for message in await self.messages()}
        self.assertEqual(flags, {mid: mid >= second for mid in ids})
        back = await self.redo()
        self.assertEqual(back["messages"], done["reverted"])
        self.assertEqual((self.text("a.txt"), self.text("n.txt")), ("one\nthree\n", "two\n"))
        self.assertFalse((await self.read_session())["redo"])
        self.assertFalse(any(message["reverted"] for message in await self.messages()))
        await self.redo(status=400)
        # Undo again, then go on with a new prompt: the undone messages and the redo go.
        await self.undo(second)
        await self.turn(text="third", final="fine")
        messages = await self.messages()
        self.assertFalse(any(message["id"] in done["reverted"] for message in messages))
        self.assertEqual([m["parts"][0]["text"] for m in messages if m["role"] == "user"], ["first", "third"])
        self.assertFalse((await self.read_session())["redo"])
        await self.redo(status=400)
        self.assertEqual((self.text("a.txt"), self.exists("n.txt")), ("one\n", False))
        # The model was not sent the messages taken back.
        sent = json.dumps(self.model.requests[-1].body["messages"])
        self.assertNotIn("second", sent)

    async def test_undo_while_running_is_409(self):
        """Undo and redo are refused (409) while the session runs: here a permission question
        waits; nothing is restored."""
        first, _ = await self.turn([("write", {"path": "a.txt", "content": "one\n"})])
        self.model.script(reply(tool_calls=[("edit", {"path": "a.txt", "old": "one", "new": "two"})]), reply("ok"))
        await self.prompt("edit it", autoaccept=False)
        while (await next_event(self.ws))["type"] != "permission.ask":
            pass
        await self.undo(first, status=409)
        self.assertEqual(self.text("a.txt"), "one\n")
        await self.redo(status=409)
        await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")
        await self.events_until("aborted")
        await self.undo(first)
        self.assertEqual(self.text("a.txt"), ORIGINAL)

    async def test_undo_unknown_message_is_404(self):
        """Undo of a message that is not in the session answers 404."""
        await self.undo("nosuchmessage", status=404)


class ForkTest(SnapshotCase):
    async def attachment(self, ident):
        return await request(self.app, "GET", f"/attachments/{ident}/")

    async def test_fork_with_and_without_messageid(self):
        """Fork copies the conversation up to the given message (all of it without one), with
        the attachments readable under the fork's own message, and starts without a redo or a
        waiting question; the messages an undo took back are not copied."""
        note = base64.b64encode(b"attached notes\n").decode()
        self.model.script(reply("first answer"))
        answer = await self.prompt("with a file", attachments=[{"name": "notes.txt", "mime": "text/plain",
                                                                 "data": note}])
        self.assertEqual(answer.status, 200, answer.body)
        await self.events_until("idle")
        await self.turn(text="second", final="second answer")
        undone, _ = await self.turn(text="third", final="third answer")
        await self.undo(undone)
        source = await self.messages()
        self.assertEqual([m["role"] for m in source], ["user", "assistant"] * 3)
        name = (await self.read_session())["name"]
        forked = await call(self.app, "sessions_fork", {"messageid": source[1]["id"]}, ident=self.session["id"])
        self.assertEqual(forked.status, 200, forked.body)
        fork = forked.json()
        self.assertEqual(fork["name"], f"{name} (fork)")
        self.assertNotEqual(fork["id"], self.session["id"])
        self.assertEqual((fork["redo"], fork["waiting"], fork["status"]), (False, 0, "idle"))
        self.assertEqual((fork["forkof"], (await self.read_session())["forkof"]), (self.session["id"], None))
        copied = await self.messages(fork["id"])
        self.assertEqual([(m["role"], m["parts"][0]["text"]) for m in copied],
                         [("user", "with a file"), ("assistant", "first answer")])
        self.assertTrue(all(m["id"] not in {s["id"] for s in source} for m in copied))
        self.assertFalse(any(m["reverted"] for m in copied))
        files = copied[0]["data"]["attachments"]
        self.assertEqual([(f["name"], f["mime"], f["size"]) for f in files], [("notes.txt", "text/plain", 15)])
        got = await self.attachment(files[0]["id"])
        self.assertEqual((got.status, got.body), (200, b"attached notes\n"))
        # Without a messageid: everything but what the undo took back.
        whole = (await call(self.app, "sessions_fork", {}, ident=self.session["id"])).json()
        texts = [m["parts"][0]["text"] for m in await self.messages(whole["id"])]
        self.assertEqual(texts, ["with a file", "first answer", "second", "second answer"])
        self.assertFalse((await self.read_session(whole["id"]))["redo"])
        # Forked while a permission question waits in the source: the fork has none.
        self.model.script(reply(tool_calls=[("edit", {"path": "a.txt", "old": "hello", "new": "bye"})]))
        await self.prompt("edit", autoaccept=False)
        while (await next_event(self.ws))["type"] != "permission.ask":
            pass
        running = (await call(self.app, "sessions_fork", {}, ident=self.session["id"])).json()
        self.assertEqual((running["waiting"], running["status"]), (0, "idle"))
        self.assertFalse(self.app.runs.is_running(running["id"]))
        self.assertEqual(self.app.runs.questions.waiting_in(running["id"]), 0)
        await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")
        await self.events_until("aborted")
        missing = await call(self.app, "sessions_fork", {"messageid": "nope"}, ident=self.session["id"])
        self.assertEqual(missing.status, 404)

    async def test_fork_attachments_outlive_the_source(self):
        """The fork's messages name the fork's own copies of the attachments, so they stay
        readable (to the person and to the model) after the source session is removed.

        Known bug, outside this file's reach: Store.fork_session copies each message's `data`
        as it is, so its `attachments` keep the source's attachment ids while the copies get
        new ones; once the source is removed, the fork's attachments answer 404."""
        note = base64.b64encode(b"kept\n").decode()
        self.model.script(reply("ok"))
        await self.prompt("file", attachments=[{"name": "n.txt", "mime": "text/plain", "data": note}])
        await self.events_until("idle")
        fork = (await call(self.app, "sessions_fork", {}, ident=self.session["id"])).json()
        await call(self.app, "sessions_remove", ident=self.session["id"], method="POST")
        files = (await self.messages(fork["id"]))[0]["data"]["attachments"]
        got = await self.attachment(files[0]["id"])
        self.assertEqual((got.status, got.body), (200, b"kept\n"))


class DiffTest(SnapshotCase):
    async def test_diff_shapes_and_audit(self):
        """Sessions|diff lists each changed file once with its status, counts and unified diff
        (a/ b/ headers, /dev/null for a created or deleted file), not a file changed back to what
        it was, and the audit of each change: message, part, tool and what allowed it (code for
        auto-accept, person for a reply, rule for a rule of the configuration)."""
        self.put("gone.txt", "bye\nbye again\n")
        self.put("back.txt", "same\n")
        await self.turn([("write", {"path": "new.txt", "content": "one\ntwo\n"}),
                         ("write", {"path": "back.txt", "content": "different\n"})],
                        [("write", {"path": "back.txt", "content": "same\n"})], text="write")
        await self.turn([("edit", {"path": "a.txt", "old": "second line", "new": "2nd line\nthird line"})],
                        text="edit", autoaccept=False)
        _, events = await self.turn([("bash", {"command": "rm gone.txt"})], text="bash")
        self.assertNotIn("permission.ask", [event["type"] for event in events])
        files = await self.diff()
        self.assertEqual(sorted(files), ["a.txt", "gone.txt", "new.txt"])
        added, modified, deleted = files["new.txt"], files["a.txt"], files["gone.txt"]
        self.assertEqual((added["status"], added["additions"], added["deletions"]), ("added", 2, 0))
        self.assertEqual(added["patch"], "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n")
        self.assertEqual((modified["status"], modified["additions"], modified["deletions"]), ("modified", 2, 1))
        self.assertEqual(modified["patch"], "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,3 @@\n hello world\n"
                                            "-second line\n+2nd line\n+third line\n")
        self.assertEqual((deleted["status"], deleted["additions"], deleted["deletions"]), ("deleted", 0, 2))
        self.assertEqual(deleted["patch"], "--- a/gone.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-bye\n-bye again\n")
        messages = await self.messages()
        parts = {part["data"]["input"].get("path", part["data"]["input"].get("command")): part
                 for part in self.tool_parts(messages) if part["data"]["input"].get("path") != "back.txt"}
        for path, tool, key, by in (("new.txt", "write", "new.txt", "code"), ("a.txt", "edit", "a.txt", "person"),
                                    ("gone.txt", "bash", "rm gone.txt", "rule")):
            [change] = files[path]["changes"]
            part = parts[key]
            self.assertEqual((change["tool"], change["partid"], change["messageid"]),
                             (tool, part["id"], part["messageid"]), path)
            self.assertEqual(change["allowed"]["by"], by, path)
            self.assertTrue(change["allowed"]["reason"], path)
            self.assertIsInstance(change["created"], int)
            self.assertTrue(change["result"], path)
        self.assertEqual(files["gone.txt"]["changes"][0]["allowed"]["rule"]["pattern"], "*")
        self.assertEqual(files["a.txt"]["changes"][0]["allowed"]["reply"], "once")
        self.assertIsNone(files["new.txt"]["changes"][0]["before"])
        self.assertEqual(files["new.txt"]["changes"][0]["after"], snapshots.content_hash(b"one\ntwo\n"))
        self.assertIsNone(files["gone.txt"]["changes"][0]["after"])
        # A later change shows from before the first change to now, with every change audited.
        await self.turn([("edit", {"path": "new.txt", "old": "two", "new": "zwei"})], text="more")
        files = await self.diff()
        self.assertEqual(files["new.txt"]["patch"], "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+one\n+zwei\n")
        self.assertEqual([c["tool"] for c in files["new.txt"]["changes"]], ["write", "edit"])
        answer = await call(self.app, "sessions_diff", ident="nosuchsession")
        self.assertEqual(answer.status, 404)


class LimitsTest(SnapshotCase):
    git = True

    async def test_big_file_recorded_not_kept_and_lost(self):
        """A file over 2 MB changed (and one created) by a command is recorded with a note that
        its content was not kept; undo reports both in `lost` and leaves them as they are."""
        big = b"x" * (snapshots.MAX_FILE_BYTES + 10)
        with open(self.path("big.bin"), "wb") as handle:
            handle.write(big)
        messageid, _ = await self.turn([("bash", {"command": "echo tail >> big.bin && "
                                                             "head -c 2100000 /dev/zero > made.bin"})])
        rows = {row["path"]: row for row in await self.rows()}
        self.assertEqual(sorted(rows), ["big.bin", "made.bin"])
        self.assertEqual((rows["big.bin"]["before"], rows["big.bin"]["after"]), ("", ""))
        self.assertEqual((rows["made.bin"]["before"], rows["made.bin"]["after"]), (None, ""))
        for row in rows.values():
            self.assertIn("not kept", row["note"])
            self.assertIn("2 MB", row["note"])
        self.assertFalse(any(len(data) > snapshots.MAX_FILE_BYTES for data in kept_contents(self.app, self.project["id"])))
        files = await self.diff()
        self.assertEqual(files["big.bin"]["status"], "modified")
        self.assertIn("not kept", files["big.bin"]["note"])
        done = await self.undo(messageid)
        self.assertEqual(sorted(item["path"] for item in done["lost"]), ["big.bin", "made.bin"])
        self.assertTrue(all("not kept" in item["reason"] or "would be lost" in item["reason"]
                            for item in done["lost"]), done["lost"])
        self.assertEqual(done["restored"], [])
        self.assertEqual(os.path.getsize(self.path("big.bin")), len(big) + 5)
        self.assertTrue(self.exists("made.bin"))

    async def test_env_changed_by_command_never_copied(self):
        """A protected secret file (.env) changed by a command is recorded with a note, but its
        content is never copied into the snapshot store (neither before nor after); undo reports
        it lost and leaves it."""
        self.put(".env", "TOKEN=first-secret-value\n")
        self.put("b.txt", "plain\n")
        messageid, _ = await self.turn([("bash", {"command": "sed -i s/first/second/ .env && echo changed > b.txt"})])
        rows = {row["path"]: row for row in await self.rows()}
        self.assertEqual(sorted(rows), [".env", "b.txt"])
        self.assertEqual((rows[".env"]["before"], rows[".env"]["after"]), ("", ""))
        self.assertIn("secret", rows[".env"]["note"])
        kept = kept_contents(self.app, self.project["id"])
        self.assertIn(b"plain\n", kept)  # the store does hold the other file's old content
        self.assertFalse(any(b"secret-value" in data for data in kept))
        files = await self.diff()
        self.assertEqual(files[".env"]["patch"], "")
        self.assertNotIn("secret-value", json.dumps(files))
        done = await self.undo(messageid)
        self.assertEqual([item["path"] for item in done["lost"]], [".env"])
        self.assertEqual(done["restored"], ["b.txt"])
        self.assertEqual(self.text(".env"), "TOKEN=second-secret-value\n")

    async def test_hard_linked_file_never_copied(self):
        """A file given a second name by a command (`ln` of a secret outside the project) is
        recorded with a note, but its content is never copied into the snapshot store, nor shown
        in the diff; undo reports it lost."""
        outside = os.path.join(self.tmp, "id_ed25519")
        with open(outside, "w") as handle:
            handle.write("PRIVATE-KEY-MATERIAL\n")
        self.put("b.txt", "plain\n")
        # Made by someone (the sandbox refuses a command a link to what it cannot see); the
        # command then changes the file through its name in the project.
        os.link(outside, self.path("notes.txt"))
        messageid, _ = await self.turn([("bash", {"command": "echo more >> notes.txt && echo x >> b.txt"})])
        rows = {row["path"]: row for row in await self.rows()}
        self.assertEqual(sorted(rows), ["b.txt", "notes.txt"])
        self.assertEqual((rows["notes.txt"]["before"], rows["notes.txt"]["after"]), ("", ""))
        self.assertIn("hard link", rows["notes.txt"]["note"])
        kept = kept_contents(self.app, self.project["id"])
        self.assertIn(b"plain\n", kept)
        self.assertFalse(any(b"PRIVATE-KEY-MATERIAL" in data for data in kept))
        files = await self.diff()
        self.assertNotIn("PRIVATE-KEY-MATERIAL", json.dumps(files))
        done = await self.undo(messageid)
        self.assertIn("notes.txt", [item["path"] for item in done["lost"]])

    async def test_cap_removes_least_recently_used(self):
        """Over the cap, enforce_limit removes the least recently used contents first; an undo
        that needs a removed content reports the file in `lost` with the reason, and restores
        the files whose contents are still kept."""
        old_one, old_two = os.urandom(3000).hex(), os.urandom(3000).hex()
        self.put("one.txt", old_one)
        self.put("two.txt", old_two)
        first, _ = await self.turn([("write", {"path": "one.txt", "content": "new one\n"})], text="one")
        await self.turn([("write", {"path": "two.txt", "content": "new two\n"})], text="two")
        blobs, projectid = self.app.snapshots.blobs, self.project["id"]
        digests = {name: snapshots.content_hash(data.encode()) for name, data in
                   (("old one", old_one), ("new one", "new one\n"), ("old two", old_two), ("new two", "new two\n"))}
        paths = {name: blobs._path(projectid, digest) for name, digest in digests.items()}
        for stamp, name in enumerate(("old one", "new one", "old two", "new two")):
            os.utime(paths[name], (1_000_000 + stamp, 1_000_000 + stamp))  # used in this order
        blobs.limit_bytes = os.path.getsize(paths["old two"]) + os.path.getsize(paths["new two"])
        blobs._sizes.pop(projectid, None)  # counted again from the disk
        await self.app.snapshots.enforce_limit(projectid)
        self.assertEqual({name: blobs.has(projectid, digest) for name, digest in digests.items()},
                         {"old one": False, "new one": False, "old two": True, "new two": True})
        self.assertLessEqual(blobs.size(projectid), blobs.limit_bytes)
        done = await self.undo(first)
        self.assertEqual([item["path"] for item in done["lost"]], ["one.txt"])
        self.assertIn("over its limit", done["lost"][0]["reason"])
        self.assertIn("limit", done["lost"][0]["reason"])
        self.assertEqual(done["restored"], ["two.txt"])
        self.assertEqual((self.text("one.txt"), self.text("two.txt")), ("new one\n", old_two))


class FirstLookCapTest(SnapshotCase):
    settings = {"snapshotmb": 16}

    async def test_the_first_look_at_a_big_project_keeps_to_the_cap_and_says_what_it_did_not(self):
        """A 24 MB project under a 16 MB cap: the first capture keeps at most the cap (and one
        file); an undo of a command that changed a kept file and one that was not restores the
        first and names the second, with the reason, as the row of its change does."""
        for index in range(24):
            with open(self.path(f"f{index:02}.bin"), "wb") as handle:
                handle.write(os.urandom(1 << 20))
        await self.turn([("bash", {"command": "true"})], text="look")
        blobs = self.app.snapshots.blobs
        self.assertLessEqual(blobs.size(self.project["id"]), blobs.limit_bytes + snapshots.MAX_FILE_BYTES)
        seen = self.app.snapshots._trees[self.root].files
        left = sorted(path for path, found in seen.items() if found.note == snapshots.OVER_LIMIT)
        self.assertGreaterEqual(len(left), 6)
        self.assertNotEqual(seen["a.txt"].note, snapshots.OVER_LIMIT)
        messageid, _ = await self.turn([("bash", {"command": f"echo x >> a.txt && echo x >> {left[0]}"})])
        done = await self.undo(messageid)
        self.assertEqual(done["restored"], ["a.txt"])
        self.assertEqual(self.text("a.txt"), ORIGINAL)
        self.assertEqual([item["path"] for item in done["lost"]], [left[0]])
        self.assertIn("limit", done["lost"][0]["reason"])
        rows = {row["path"]: row["note"] for row in await self.rows()}
        self.assertIn("snapshotmb", rows[left[0]])


class EventsAndPreviewTest(SnapshotCase):
    async def wait_event(self, kind, timeout_ms=5000):
        deadline = time.monotonic() + timeout_ms * MS
        while True:
            event = await next_event(self.ws, max(1, (deadline - time.monotonic()) / MS))
            if event["type"] == kind:
                return event

    async def test_diff_updated_after_write_and_undo(self):
        """A WebSocket subscriber of the session gets diff.updated naming the file after a write
        (`path`), and after an undo that restores several files (`paths`)."""
        messageid, events = await self.turn([("write", {"path": "w.txt", "content": "w\n"})],
                                            [("bash", {"command": "echo b > b.txt; echo c > c.txt"})])
        updates = [event for event in events if event["type"] == "diff.updated"]
        self.assertEqual([event["sessionid"] for event in updates], [self.session["id"]] * 2)
        self.assertEqual(updates[0]["data"], {"path": "w.txt"})
        self.assertEqual(sorted(updates[1]["data"]["paths"]), ["b.txt", "c.txt"])
        await self.undo(messageid)
        event = await self.wait_event("diff.updated")
        self.assertEqual(sorted(event["data"]["paths"]), ["b.txt", "c.txt", "w.txt"])
        await self.redo()
        event = await self.wait_event("diff.updated")
        self.assertEqual(sorted(event["data"]["paths"]), ["b.txt", "c.txt", "w.txt"])

    async def test_permission_ask_preview_and_reject(self):
        """The question for an edit carries a preview with the unified diff, computed without
        writing (the file is unchanged while it waits); a rejected edit leaves the file and
        records no snapshot."""
        self.model.script(reply(tool_calls=[("edit", {"path": "a.txt", "old": "second", "new": "2nd"})]),
                          reply("ok"))
        await self.prompt("edit", autoaccept=False)
        ask = await self.wait_event("permission.ask")
        self.assertEqual(ask["data"]["preview"], [{
            "path": "a.txt", "status": "modified", "additions": 1, "deletions": 1,
            "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n hello world\n-second line\n+2nd line\n"}])
        self.assertEqual(self.text("a.txt"), ORIGINAL)
        self.assertEqual(await self.rows(), [])
        await call(self.app, "permissions_reply", {"reply": "reject"}, ident=ask["data"]["id"])
        await self.events_until("idle")
        self.assertEqual(self.text("a.txt"), ORIGINAL)
        self.assertEqual(await self.app.store.count_rows("snapshots", "sessionid", self.session["id"]), 0)
        self.assertEqual(await self.diff(), {})

    async def test_preview_of_write_patch_and_secret(self):
        """A write's preview shows a created file against /dev/null, a patch's shows every file
        it touches, a protected secret file's has a note and no content, and a call that would
        fail shows its error; nothing is written before the replies."""
        self.put(".env", "KEY=old-secret\n")
        self.put("gone.txt", "bye\n")
        self.model.script(reply(tool_calls=[("write", {"path": "fresh.txt", "content": "fresh\n"}),
                                            ("patch", {"patch": PATCH}),
                                            ("write", {"path": ".env", "content": "KEY=new-secret\n"}),
                                            ("edit", {"path": "a.txt", "old": "absent", "new": "x"})]),
                          reply("ok"))
        await self.prompt("preview", autoaccept=False)
        previews = []
        for _ in range(4):
            ask = await self.wait_event("permission.ask")
            previews.append(ask["data"]["preview"])
            self.assertEqual((self.exists("fresh.txt"), self.exists("added.txt"), self.text("a.txt"),
                              self.text(".env")), (False, False, ORIGINAL, "KEY=old-secret\n"))
            await call(self.app, "permissions_reply", {"reply": "reject"}, ident=ask["data"]["id"])
        await self.events_until("idle")
        self.assertEqual(previews[0], [{"path": "fresh.txt", "status": "added", "additions": 1, "deletions": 0,
                                        "patch": "--- /dev/null\n+++ b/fresh.txt\n@@ -0,0 +1 @@\n+fresh\n"}])
        self.assertEqual([(entry["path"], entry["status"]) for entry in previews[1]],
                         [("a.txt", "modified"), ("added.txt", "added"), ("gone.txt", "deleted")])
        self.assertIn("+++ /dev/null", previews[1][2]["patch"])
        [secret] = previews[2]
        self.assertEqual((secret["path"], secret["patch"]), (".env", ""))
        self.assertIn("secret", secret["note"])
        self.assertNotIn("old-secret", json.dumps(previews[2]))
        self.assertNotIn("new-secret", json.dumps(previews[2]))
        self.assertEqual(list(previews[3][0]), ["error"])
        self.assertEqual(await self.rows(), [])


class SaveAsTest(SnapshotCase):
    async def test_save_as_create_replace_refuse_and_undo(self):
        """Save as creates a file (undo of its message removes it), refuses to replace an
        existing file without replace (409) and replaces it with replace: true (undo restores
        the old content), and refuses .git, a protected secret file and a path outside."""
        await self.turn(text="show code", final="```python\nprint('hi')\n```")
        messageid = (await self.messages())[1]["id"]
        created = await self.save_as(messageid, "src/hi.py", "print('hi')\n")
        self.assertEqual(created, {"path": "src/hi.py", "created": True, "bytes": 12})
        self.assertEqual(self.text("src/hi.py"), "print('hi')\n")
        refused = await self.save_as(messageid, "a.txt", "other\n", status=409)
        self.assertIn("replace", json.dumps(refused))
        self.assertEqual(self.text("a.txt"), ORIGINAL)
        replaced = await self.save_as(messageid, "a.txt", "other\n", replace=True)
        self.assertEqual(replaced, {"path": "a.txt", "created": False, "bytes": 6})
        self.assertEqual(self.text("a.txt"), "other\n")
        os.makedirs(self.path(".git"), exist_ok=True)
        for path in (".git/x", ".env", "sub/.env", "../outside.txt", "/etc/passwd-copy"):
            await self.save_as(messageid, path, "x\n", replace=True, status=400)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "outside.txt")))
        self.assertFalse(self.exists(".git/x") or self.exists(".env"))
        await self.save_as("nosuchmessage", "n.txt", "x", status=404)
        files = await self.diff()
        self.assertEqual(sorted(files), ["a.txt", "src/hi.py"])
        self.assertEqual([(c["tool"], c["messageid"], c["partid"], c["allowed"]["by"])
                          for c in files["a.txt"]["changes"]], [("saveas", messageid, None, "person")])
        done = await self.undo(messageid)
        self.assertEqual(sorted(done["restored"]), ["a.txt", "src/hi.py"])
        self.assertFalse(self.exists("src/hi.py"))
        self.assertEqual(self.text("a.txt"), ORIGINAL)


    async def test_save_as_refused_in_a_message_taken_back(self):
        """Save as into a message that an undo took back is refused (400) and writes nothing:
        its change could never be undone, and the next prompt would drop its record."""
        messageid, _ = await self.turn(text="show code", final="```\nx\n```")
        await self.undo(messageid)
        answer = await self.save_as(messageid, "x.txt", "x\n", status=400)
        self.assertIn("taken back", json.dumps(answer))
        self.assertFalse(self.exists("x.txt"))
        await self.redo()
        await self.save_as(messageid, "x.txt", "x\n")
        self.assertEqual(self.text("x.txt"), "x\n")

class JobTest(SnapshotCase):
    async def test_background_job_change_recorded_when_it_ends(self):
        """A background job's changes are recorded for its part when the job ends, and undo
        takes them back."""
        self.put("edited.txt", "before\n")
        messageid, _ = await self.turn([("bash", {"command": "sleep 0.3; echo job > job.txt; "
                                                             "echo after >> edited.txt", "background": True})])
        part = self.tool_parts(await self.messages())[0]
        self.assertIn("Started job", part["data"]["output"])
        deadline = time.monotonic() + 10_000 * MS
        while len(await self.rows()) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(20 * MS)
        rows = await self.rows()
        self.assertEqual(sorted(row["path"] for row in rows), ["edited.txt", "job.txt"])
        self.assertEqual({(row["partid"], row["messageid"]) for row in rows}, {(part["id"], part["messageid"])})
        self.assertNotEqual(self.app.jobs.list(self.session["id"])[0]["status"], "running")
        self.assertEqual(sorted(await self.diff()), ["edited.txt", "job.txt"])
        done = await self.undo(messageid)
        self.assertEqual(sorted(done["restored"]), ["edited.txt", "job.txt"])
        self.assertFalse(self.exists("job.txt"))
        self.assertEqual(self.text("edited.txt"), "before\n")

    async def test_undo_refused_while_a_job_runs(self):
        """A job still running could change files after the undo: undo and redo answer 409
        until it is stopped, and nothing is restored."""
        self.put("kept.txt", "before\n")
        messageid, _ = await self.turn([("write", {"path": "kept.txt", "content": "after\n"})],
                                       [("bash", {"command": "sleep 30", "background": True})])
        refused = await self.undo(messageid, status=409)
        self.assertIn("job", json.dumps(refused))
        self.assertEqual(self.text("kept.txt"), "after\n")
        for job in self.app.jobs.list(self.session["id"]):
            await call(self.app, "sessions_jobstop", {"job": job["id"]}, ident=self.session["id"])
        await self.undo(messageid)
        self.assertEqual(self.text("kept.txt"), "before\n")
