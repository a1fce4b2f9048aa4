"""A git worktree per session, with real git: creation, tools confined to the worktree, the git
state, merge (clean, refused on a dirty project or a conflict, both leaving everything as it
was), discard, removal keeping unmerged work, and two worktree sessions at once."""

from __future__ import annotations

import asyncio
import os
import subprocess

from tests.model_server import reply
from tests.test_loop import LoopCase
from tests.utils import MS, call


def git(folder: str, *args: str) -> str:
    return subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, check=True).stdout


class WorktreeCase(LoopCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.root = self.project["path"]
        git(self.root, "init", "-q", "-b", "main")
        git(self.root, "config", "user.name", "Tess Ter")
        git(self.root, "config", "user.email", "tess@example.com")
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "-m", "first")

    async def worktree_session(self, name: str = "Fix the parser", expect: int = 200) -> dict:
        answer = await call(self.app, "sessions_create", {"projectid": self.project["id"], "name": name,
                                                          "worktree": True})
        self.assertEqual(answer.status, expect, answer.body)
        return answer.json()

    async def run_in(self, session: dict, *steps, autoaccept=True) -> list[dict]:
        self.model.script(*(reply(tool_calls=list(step)) for step in steps), reply("done"))
        answer = await call(self.app, "sessions_prompt", {"text": "go", "model": self.modelref,
                                                          "autoaccept": autoaccept}, ident=session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        for _ in range(1000):
            if not self.app.runs.is_running(session["id"]):
                break
            await asyncio.sleep(5 * MS)
        messages = (await call(self.app, "sessions_messages", ident=session["id"])).json()["messages"]
        return [part for message in messages for part in message["parts"] if part["kind"] == "tool"]

    async def merge(self, session: dict, expect: int = 200):
        answer = await call(self.app, "sessions_worktreemerge", {}, ident=session["id"])
        self.assertEqual(answer.status, expect, answer.body)
        return answer.json()

    def read(self, *parts: str) -> str:
        with open(os.path.join(*parts)) as stream:
            return stream.read()

    def state(self) -> tuple:
        """The project's folder as git sees it: HEAD, status and a.txt."""
        return (git(self.root, "rev-parse", "HEAD"), git(self.root, "status", "--porcelain"),
                self.read(self.root, "a.txt"))


class WorktreeTest(WorktreeCase):
    async def test_create_outside_the_project_on_its_branch(self):
        session = await self.worktree_session()
        path = session["worktree"]
        self.assertTrue(path.startswith(os.path.realpath(self.app.config.data)))
        self.assertFalse(path.startswith(self.root))
        self.assertEqual(git(path, "branch", "--show-current").strip(), "totem/fix-the-parser")
        self.assertEqual(self.read(path, "a.txt"), self.read(self.root, "a.txt"))
        second = await self.worktree_session()
        self.assertNotEqual(second["worktree"], path)
        self.assertEqual(git(second["worktree"], "branch", "--show-current").strip(), "totem/fix-the-parser-2")

    async def test_refused_for_a_folder_that_is_not_a_repository(self):
        other = self.folder("plain")
        project = (await call(self.app, "projects_open", {"path": other})).json()
        answer = await call(self.app, "sessions_create", {"projectid": project["id"], "worktree": True})
        self.assertEqual(answer.status, 400)
        self.assertIn("not a git repository", answer.body.decode())
        sessions = (await call(self.app, "sessions", query=f"projectid={project['id']}")).json()["sessions"]
        self.assertEqual(sessions, [])

    async def test_refused_for_a_repository_that_names_programs(self):
        """git never runs in a repository whose config names a program: no worktree, no session."""
        git(self.root, "config", "filter.evil.clean", "touch /tmp/totem-worktree-pwned")
        answer = await call(self.app, "sessions_create", {"projectid": self.project["id"], "worktree": True})
        self.assertEqual(answer.status, 400)
        self.assertIn("filter", answer.body.decode())
        self.assertFalse(os.path.exists(os.path.join(self.app.config.data, "worktrees")))

    async def test_tools_work_in_the_worktree_and_never_in_the_project(self):
        """A write lands in the worktree; a path into the project's own folder is outside; a
        link from the worktree to the project is refused."""
        session = await self.worktree_session()
        path = session["worktree"]
        os.symlink(self.root, os.path.join(path, "back"))
        parts = await self.run_in(session, [("write", {"path": "new.txt", "content": "made\n"})],
                                  [("write", {"path": os.path.join(self.root, "b.txt"), "content": "x"})],
                                  [("read", {"path": "back/a.txt"})],
                                  [("bash", {"command": "pwd"})], autoaccept=True)
        self.assertEqual(parts[0]["status"], "done")
        self.assertEqual(self.read(path, "new.txt"), "made\n")
        self.assertFalse(os.path.exists(os.path.join(self.root, "new.txt")))
        self.assertEqual(parts[1]["status"], "denied")
        self.assertFalse(os.path.exists(os.path.join(self.root, "b.txt")))
        self.assertEqual(parts[2]["status"], "denied")
        self.assertIn("outside", parts[2]["data"]["error"])
        self.assertEqual(parts[3]["status"], "done")  # pwd is allowed: it runs in the worktree
        self.assertIn(path, parts[3]["data"]["output"])

    async def test_git_state_shapes(self):
        session = await self.worktree_session()
        with open(os.path.join(session["worktree"], "a.txt"), "a") as stream:
            stream.write("more\n")
        state = (await call(self.app, "sessions_git", ident=session["id"])).json()
        self.assertEqual((state["worktree"], state["branch"], state["into"], state["ahead"], state["behind"]),
                         (True, "totem/fix-the-parser", "main", 0, 0))
        self.assertEqual(state["base"], git(self.root, "rev-parse", "HEAD").strip())
        self.assertEqual(state["changes"], [{"path": "a.txt", "status": "modified", "staged": False}])
        plain = await self.create_session(self.project["id"])
        answer = (await call(self.app, "sessions_git", ident=plain["id"])).json()
        self.assertEqual((answer["repository"], answer["branch"]), (True, "main"))


class MergeTest(WorktreeCase):
    async def test_clean_merge(self):
        session = await self.worktree_session()
        await self.run_in(session, [("write", {"path": "feature.txt", "content": "feature\n"})])
        merged = await self.merge(session)
        self.assertTrue(merged["merged"])
        self.assertEqual(git(self.root, "rev-parse", "HEAD").strip(), merged["commit"])
        self.assertEqual(self.read(self.root, "feature.txt"), "feature\n")
        log = git(self.root, "log", "--format=%an|%s", "-3")
        self.assertIn("Tess Ter|Merge totem/fix-the-parser", log)
        self.assertIn("Tess Ter|Fix the parser", log)
        self.assertEqual(merged["files"], ["feature.txt"])

    async def test_refused_on_a_dirty_project_with_everything_as_it_was(self):
        session = await self.worktree_session()
        with open(os.path.join(session["worktree"], "a.txt"), "w") as stream:
            stream.write("from the agent\n")
        with open(os.path.join(self.root, "a.txt"), "w") as stream:
            stream.write("by hand, not committed\n")
        before = self.state()
        worktree_head = git(session["worktree"], "rev-parse", "HEAD")
        refused = await self.merge(session, expect=409)
        self.assertIn("a.txt", str(refused))
        self.assertIn("uncommitted", str(refused))
        self.assertEqual(self.state(), before)
        self.assertEqual(git(session["worktree"], "rev-parse", "HEAD"), worktree_head)
        self.assertEqual(self.read(session["worktree"], "a.txt"), "from the agent\n")

    async def test_refused_on_a_conflict_with_everything_as_it_was(self):
        session = await self.worktree_session()
        with open(os.path.join(session["worktree"], "a.txt"), "w") as stream:
            stream.write("agent's line\n")
        with open(os.path.join(self.root, "a.txt"), "w") as stream:
            stream.write("person's line\n")
        git(self.root, "commit", "-q", "-am", "person")
        before = self.state()
        worktree_head = git(session["worktree"], "rev-parse", "HEAD")
        refused = await self.merge(session, expect=409)
        self.assertIn("conflict", str(refused))
        self.assertIn("a.txt", str(refused))
        self.assertEqual(self.state(), before)
        self.assertEqual(git(session["worktree"], "rev-parse", "HEAD"), worktree_head)
        self.assertEqual(git(session["worktree"], "status", "--porcelain").strip(), "M a.txt")

    async def test_refused_without_an_author_in_the_repository(self):
        """Without user.email the state says so before the merge, and the merge is refused with
        a message that says how Totem can set it; nothing changes."""
        git(self.root, "config", "--unset", "user.email")
        session = await self.worktree_session()
        with open(os.path.join(session["worktree"], "x.txt"), "w") as stream:
            stream.write("x\n")
        state = (await call(self.app, "sessions_git", ident=session["id"])).json()
        self.assertEqual(state["author"], {"name": "Tess Ter", "email": None})
        before = self.state()
        answer = await self.merge(session, expect=400)
        self.assertIn("the repository has no user.email in its config: give them to the merge (username, "
                      "useremail) to set them in the repository", str(answer))
        self.assertEqual(self.state(), before)

    async def test_the_merge_sets_the_author_it_is_given_then_merges(self):
        """With username and useremail the merge sets them in the repository's own config, and
        its commit has that author; a merge with no body at all still works as before."""
        git(self.root, "config", "--unset", "user.name")
        git(self.root, "config", "--unset", "user.email")
        session = await self.worktree_session()
        with open(os.path.join(session["worktree"], "x.txt"), "w") as stream:
            stream.write("x\n")
        state = (await call(self.app, "sessions_git", ident=session["id"])).json()
        self.assertEqual(state["author"], {"name": None, "email": None})
        answer = await call(self.app, "sessions_worktreemerge", {"username": "Ada Lovelace",
                                                                 "useremail": "ada@example.com"}, ident=session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(git(self.root, "config", "--local", "user.name").strip(), "Ada Lovelace")
        self.assertEqual(git(self.root, "config", "--local", "user.email").strip(), "ada@example.com")
        self.assertEqual(git(self.root, "log", "-1", "--format=%an <%ae>").strip(), "Ada Lovelace <ada@example.com>")
        again = await self.worktree_session("Second")
        with open(os.path.join(again["worktree"], "y.txt"), "w") as stream:
            stream.write("y\n")
        answer = await call(self.app, "sessions_worktreemerge", ident=again["id"], method="POST")
        self.assertEqual(answer.status, 200, answer.body)

    async def test_a_bad_name_or_address_is_refused_and_sets_nothing(self):
        """Each bad user.name or user.email: 400 naming the field, nothing set or merged."""
        git(self.root, "config", "--unset", "user.name")
        git(self.root, "config", "--unset", "user.email")
        session = await self.worktree_session()
        with open(os.path.join(session["worktree"], "x.txt"), "w") as stream:
            stream.write("x\n")
        before = self.state()
        for body, field in (({"username": "Ada\nuser.name = Eve", "useremail": "ada@example.com"}, "username"),
                            ({"username": "Ada <ada@example.com>", "useremail": "ada@example.com"}, "username"),
                            ({"username": "   ", "useremail": "ada@example.com"}, "username"),
                            ({"username": "A" * 201, "useremail": "ada@example.com"}, "username"),
                            ({"username": "Ada", "useremail": "ada at example.com"}, "useremail"),
                            ({"username": "Ada", "useremail": "ada"}, "useremail"),
                            ({"username": "Ada", "useremail": "a\x1b@example.com"}, "useremail"),
                            ({"username": 42, "useremail": "ada@example.com"}, "username"),
                            ({"username": "Ada", "useremail": "ada@example.com", "force": True}, "force")):
            answer = await call(self.app, "sessions_worktreemerge", body, ident=session["id"])
            self.assertEqual(answer.status, 400, (body, answer.body))
            self.assertIn(field, answer.body.decode(), body)
        self.assertEqual(self.state(), before)
        for key in ("user.name", "user.email"):
            self.assertEqual(subprocess.run(["git", "-C", self.root, "config", "--local", key]).returncode, 1)


class DiscardAndRemoveTest(WorktreeCase):
    async def test_discard_removes_the_worktree_and_its_branch(self):
        session = await self.worktree_session()
        path = session["worktree"]
        answer = await call(self.app, "sessions_worktreediscard", {}, ident=session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        self.assertFalse(os.path.exists(path))
        self.assertNotIn("totem/fix-the-parser", git(self.root, "branch", "--list"))
        prompt = await call(self.app, "sessions_prompt", {"text": "go", "model": self.modelref}, ident=session["id"])
        self.assertEqual(prompt.status, 400)

    async def test_removal_keeps_unmerged_work_as_left_over(self):
        clean = await self.worktree_session("Nothing done")
        busy = await self.worktree_session("Work")
        with open(os.path.join(busy["worktree"], "w.txt"), "w") as stream:
            stream.write("work\n")
        for session in (clean, busy):
            self.assertEqual((await call(self.app, "sessions_remove", {}, ident=session["id"])).status, 200)
        self.assertFalse(os.path.exists(clean["worktree"]))
        self.assertTrue(os.path.exists(busy["worktree"]))
        state = (await call(self.app, "projects_git", ident=self.project["id"])).json()
        self.assertEqual(state["leftover"], [{"path": busy["worktree"], "branch": "totem/work"}])
        wrong = await call(self.app, "projects_worktreediscard", {"path": self.root}, ident=self.project["id"])
        self.assertEqual(wrong.status, 400)
        answer = await call(self.app, "projects_worktreediscard", {"path": busy["worktree"]},
                            ident=self.project["id"])
        self.assertEqual(answer.status, 200, answer.body)
        self.assertFalse(os.path.exists(busy["worktree"]))
        self.assertEqual((await call(self.app, "projects_git", ident=self.project["id"])).json()["leftover"], [])


class WorktreeFilesTest(WorktreeCase):
    async def test_the_file_tree_of_a_worktree_session(self):
        """Projects|files with a worktree session's id lists the worktree, not the project."""
        session = await self.worktree_session()
        with open(os.path.join(session["worktree"], "only-here.txt"), "w") as stream:
            stream.write("x\n")
        query = f"sessionid={session['id']}"
        names = [item["name"] for item in
                 (await call(self.app, "projects_files", ident=self.project["id"], query=query)).json()["items"]]
        self.assertIn("only-here.txt", names)
        plain = [item["name"] for item in (await call(self.app, "projects_files", ident=self.project["id"])).json()["items"]]
        self.assertNotIn("only-here.txt", plain)
        other = await call(self.app, "projects_files", ident=self.project["id"], query="sessionid=nosuch")
        self.assertEqual(other.status, 404)
