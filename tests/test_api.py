"""The actions of the foundation through the real server: answers and errors."""

import os
import subprocess

from tests.utils import TotemCase, call, request


def git(folder, *args):
    env = {"PATH": os.environ["PATH"], "HOME": folder, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", *args], cwd=folder, env=env, check=True, capture_output=True)


class AccountTest(TotemCase):
    async def test_account_read_without_token(self):
        """Account|read names the local user and says no token is needed."""
        answer = await call(self.app, "account")
        self.assertEqual(answer.status, 200)
        data = answer.json()
        self.assertEqual(data["user"]["name"], "local")
        self.assertIs(data["token"], False)
        self.assertIn("version", data)

    async def test_unknown_action_404(self):
        """An unknown action answers 404 in the error shape."""
        answer = await call(self.app, "nothing_here")
        self.assertEqual(answer.status, 404)
        self.assertEqual(answer.json(), [{"name": "action", "error": "no action nothing_here"}])


class ProjectsTest(TotemCase):
    async def test_projects_open_lists_project(self):
        """Opening a folder creates a project that the list shows."""
        folder = self.folder("alpha")
        answer = await call(self.app, "projects_open", {"path": folder})
        self.assertEqual(answer.status, 200)
        project = answer.json()
        self.assertEqual(project["name"], "alpha")
        self.assertEqual(project["path"], folder)
        listed = (await call(self.app, "projects")).json()
        self.assertEqual([p["id"] for p in listed], [project["id"]])

    async def test_projects_open_existing_returns_same(self):
        """Opening an open folder again gives the same project, not a second one."""
        first = await self.open_project("alpha")
        again = await call(self.app, "projects_open", {"path": self.folder("alpha") + "/"})
        self.assertEqual(again.status, 200)
        self.assertEqual(again.json()["id"], first["id"])
        self.assertEqual(len((await call(self.app, "projects")).json()), 1)

    async def test_projects_open_symlink_resolved(self):
        """A folder reached through a link is the same project as the folder itself."""
        target = self.folder("real")
        os.symlink(target, os.path.join(self.tmp, "link"))
        first = await self.open_project("real")
        answer = await call(self.app, "projects_open", {"path": os.path.join(self.tmp, "link")})
        self.assertEqual(answer.json()["id"], first["id"])

    async def test_projects_open_missing_folder_400(self):
        """A folder that does not exist is refused with the reason."""
        answer = await call(self.app, "projects_open", {"path": os.path.join(self.tmp, "nope")})
        self.assertEqual(answer.status, 400)
        self.assertEqual(answer.json()[0]["name"], "path")
        self.assertIn("does not exist", answer.json()[0]["error"])

    async def test_projects_open_file_400(self):
        """A file is not a project folder."""
        path = os.path.join(self.tmp, "file.txt")
        open(path, "w").close()
        answer = await call(self.app, "projects_open", {"path": path})
        self.assertEqual(answer.status, 400)
        self.assertIn("is a file", answer.json()[0]["error"])

    async def test_projects_open_relative_400(self):
        """A relative path is refused: there is no current folder to resolve it against."""
        answer = await call(self.app, "projects_open", {"path": "some/where"})
        self.assertEqual(answer.status, 400)
        self.assertEqual(answer.json(), [{"name": "path", "error": "must be an absolute path"}])

    async def test_projects_open_bad_inputs_change_nothing(self):
        """Missing, mistyped, oversized and unknown fields all answer 400 and create nothing."""
        cases = [
            ({}, [{"name": "path", "error": "is required"}]),
            ({"path": 5}, [{"name": "path", "error": "must be text"}]),
            ({"path": ""}, [{"name": "path", "error": "must not be empty"}]),
            ({"path": "/" + "a" * 5000}, [{"name": "path", "error": "must be at most 4096 characters"}]),
            ({"path": self.folder("x"), "extra": 1}, [{"name": "extra", "error": "unknown field"}]),
            ([1, 2], [{"name": "body", "error": "a JSON object is required"}]),
        ]
        for body, expected in cases:
            answer = await call(self.app, "projects_open", body)
            self.assertEqual(answer.status, 400, body)
            self.assertEqual(answer.json(), expected)
        answer = await request(self.app, "POST", "/api/projects_open", raw_body=b'{"path": ')
        self.assertEqual(answer.status, 400)
        self.assertEqual(answer.json()[0]["name"], "body")
        self.assertIn("malformed JSON", answer.json()[0]["error"])
        self.assertEqual((await call(self.app, "projects")).json(), [])

    async def test_projects_remove_cascades(self):
        """Removing a project removes its sessions, and its folder stays."""
        project = await self.open_project("alpha")
        session = await self.create_session(project["id"])
        answer = await call(self.app, "projects_remove", ident=project["id"], method="POST")
        self.assertEqual(answer.status, 200)
        self.assertEqual(answer.json(), {"success": True, "value": project["id"]})
        self.assertEqual((await call(self.app, "projects")).json(), [])
        self.assertEqual((await call(self.app, "sessions_read", ident=session["id"])).status, 404)
        self.assertEqual(await self.app.store.count_rows("sessions", "projectid", project["id"]), 0)
        self.assertTrue(os.path.isdir(self.folder("alpha")))

    async def test_projects_remove_get_405(self):
        """A GET never removes anything."""
        project = await self.open_project()
        answer = await call(self.app, "projects_remove", ident=project["id"], method="GET")
        self.assertEqual(answer.status, 405)
        self.assertEqual(answer.header("allow"), "POST, OPTIONS")
        self.assertEqual(len((await call(self.app, "projects")).json()), 1)

    async def test_projects_remove_unknown_404(self):
        """Removing an unknown project answers 404."""
        answer = await call(self.app, "projects_remove", ident="nope", method="POST")
        self.assertEqual(answer.status, 404)
        self.assertEqual(answer.json(), [{"name": "id", "error": "no project nope"}])

    async def test_projects_remove_without_id_404(self):
        """An action that needs an id says so."""
        answer = await call(self.app, "projects_remove", method="POST")
        self.assertEqual(answer.status, 404)
        self.assertEqual(answer.json()[0]["name"], "id")


class FilesTest(TotemCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.project = await self.open_project("proj")
        root = self.folder("proj")
        os.makedirs(os.path.join(root, "src", "deep"))
        os.makedirs(os.path.join(root, ".git"))
        for name in ("README.md", "src/main.py", "src/deep/x.txt", ".env"):
            with open(os.path.join(root, name), "w") as handle:
                handle.write("hello")
        os.makedirs(os.path.join(self.tmp, "outside"))
        os.symlink(os.path.join(self.tmp, "outside"), os.path.join(root, "escape"))
        os.symlink(os.path.join(root, "src"), os.path.join(root, "srclink"))

    async def files(self, query=""):
        return await call(self.app, "projects_files", ident=self.project["id"], query=query)

    async def test_files_top_level_one_level(self):
        """The top level lists folders first, one level only, without .git."""
        answer = await self.files()
        self.assertEqual(answer.status, 200)
        data = answer.json()
        self.assertEqual(data["path"], "")
        self.assertFalse(data["more"])
        names = [(i["name"], i["type"]) for i in data["items"]]
        self.assertEqual(names, [("src", "dir"), ("srclink", "dir"), (".env", "file"),
                                 ("escape", "outside"), ("README.md", "file")])
        self.assertEqual(data["items"][-1]["size"], 5)

    async def test_files_subfolder(self):
        """A sub-folder is listed with paths relative to the project."""
        data = (await self.files("path=src")).json()
        self.assertEqual(data["path"], "src")
        self.assertEqual([i["path"] for i in data["items"]], ["src/deep", "src/main.py"])

    async def test_files_outside_refused(self):
        """Paths that leave the project are refused, links included."""
        for query in ("path=..", "path=/etc", "path=escape", "path=src/../../", "path=" + self.tmp):
            answer = await self.files(query)
            self.assertEqual(answer.status, 400, query)
            self.assertEqual(answer.json()[0]["name"], "path")
            self.assertIn("outside the project", answer.json()[0]["error"])

    async def test_files_git_folder_refused(self):
        """.git is never listed."""
        answer = await self.files("path=.git")
        self.assertEqual(answer.status, 400)

    async def test_files_not_a_folder(self):
        """A file or a missing folder is not listed."""
        self.assertEqual((await self.files("path=README.md")).status, 400)
        self.assertEqual((await self.files("path=missing")).status, 400)

    async def test_files_cap_more(self):
        """A folder with more entries than the cap says more."""
        big = os.path.join(self.folder("proj"), "big")
        os.makedirs(big)
        for index in range(1005):
            open(os.path.join(big, f"f{index:04}"), "w").close()
        data = (await self.files("path=big")).json()
        self.assertEqual(len(data["items"]), 1000)
        self.assertTrue(data["more"])

    async def test_files_unknown_project_404(self):
        """Files of an unknown project answer 404."""
        answer = await call(self.app, "projects_files", ident="nope")
        self.assertEqual(answer.status, 404)


class GitTest(TotemCase):
    async def test_git_outside_repository(self):
        """A folder that is no repository says so."""
        project = await self.open_project("plain")
        answer = await call(self.app, "projects_git", ident=project["id"])
        self.assertEqual(answer.status, 200)
        self.assertEqual(answer.json(), {"repository": False, "branch": None, "files": [], "more": False})

    async def test_git_branch_and_files(self):
        """Branch and changed files come from real git, staged and unstaged apart."""
        root = self.folder("repo")
        git(root, "init", "-q", "-b", "trunk")
        for name in ("a.txt", "b.txt"):
            with open(os.path.join(root, name), "w") as handle:
                handle.write("one\n")
        git(root, "add", ".")
        git(root, "commit", "-qm", "first")
        with open(os.path.join(root, "a.txt"), "a") as handle:
            handle.write("two\n")
        os.remove(os.path.join(root, "b.txt"))
        with open(os.path.join(root, "new.txt"), "w") as handle:
            handle.write("new\n")
        with open(os.path.join(root, "staged.txt"), "w") as handle:
            handle.write("s\n")
        git(root, "add", "staged.txt")
        project = await self.open_project("repo")
        data = (await call(self.app, "projects_git", ident=project["id"])).json()
        self.assertTrue(data["repository"])
        self.assertEqual(data["branch"], "trunk")
        files = sorted((f["path"], f["status"], f["staged"]) for f in data["files"])
        self.assertEqual(files, [("a.txt", "modified", False), ("b.txt", "deleted", False),
                                 ("new.txt", "untracked", False), ("staged.txt", "added", True)])
        self.assertFalse(data["more"])

    async def test_git_fsmonitor_not_run(self):
        """A repository's fsmonitor program is not run by git status."""
        root = self.folder("trap")
        git(root, "init", "-q")
        marker = os.path.join(self.tmp, "ran")
        script = os.path.join(self.tmp, "monitor.sh")
        with open(script, "w") as handle:
            handle.write(f"#!/bin/sh\ntouch {marker}\n")
        os.chmod(script, 0o755)
        git(root, "config", "core.fsmonitor", script)
        project = await self.open_project("trap")
        answer = await call(self.app, "projects_git", ident=project["id"])
        self.assertEqual(answer.status, 200)
        self.assertFalse(os.path.exists(marker))

    async def test_git_no_commits_branch(self):
        """A new repository without commits still names its branch."""
        root = self.folder("fresh")
        git(root, "init", "-q", "-b", "main")
        project = await self.open_project("fresh")
        data = (await call(self.app, "projects_git", ident=project["id"])).json()
        self.assertEqual(data["branch"], "main")


class FoldersTest(TotemCase):
    async def test_folders_lists_subfolders_not_hidden(self):
        """Folders|list shows folders only, hidden ones left out, sorted."""
        base = self.folder("browse")
        for name in ("Zeta", "alpha", ".hidden"):
            os.makedirs(os.path.join(base, name))
        open(os.path.join(base, "file.txt"), "w").close()
        data = (await call(self.app, "folders", query=f"path={base}")).json()
        self.assertEqual(data["path"], base)
        self.assertEqual(data["items"], [{"name": "alpha"}, {"name": "Zeta"}])
        self.assertEqual(data["sep"], "/")
        self.assertIn("home", data)

    async def test_folders_default_home_and_places(self):
        """Without a path the home folder is listed; places name home, root and recent projects."""
        project = await self.open_project("recent")
        data = (await call(self.app, "folders")).json()
        self.assertEqual(data["path"], os.path.expanduser("~"))
        places = {p["name"]: p["path"] for p in data["places"]}
        self.assertEqual(places["Home"], os.path.expanduser("~"))
        self.assertEqual(places["Root"], "/")
        self.assertEqual(places["recent"], project["path"])

    async def test_folders_bad_paths_400(self):
        """Missing, relative and file paths answer 400."""
        file_path = os.path.join(self.tmp, "f")
        open(file_path, "w").close()
        for query in (f"path={self.tmp}/missing", "path=relative", f"path={file_path}"):
            answer = await call(self.app, "folders", query=query)
            self.assertEqual(answer.status, 400, query)
            self.assertEqual(answer.json()[0]["name"], "path")

    async def test_folders_unknown_query_field_400(self):
        """An unknown query field is refused."""
        answer = await call(self.app, "folders", query="pth=/")
        self.assertEqual(answer.status, 400)
        self.assertEqual(answer.json(), [{"name": "pth", "error": "unknown field"}])


class SessionsTest(TotemCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.project = await self.open_project("proj")

    async def test_sessions_create_read_list(self):
        """A created session can be read and is listed, newest first."""
        first = await self.create_session(self.project["id"], "first")
        second = await self.create_session(self.project["id"])
        self.assertEqual(second["name"], "New session")
        self.assertEqual(first["status"], "idle")
        self.assertEqual(first["mode"], "build")
        self.assertIs(first["autoaccept"], False)
        read = (await call(self.app, "sessions_read", ident=first["id"])).json()
        self.assertEqual(read.pop("tokens"), {"input": 0, "output": 0, "estimated": False})  # read adds them
        self.assertEqual(read, first)
        listed = (await call(self.app, "sessions", query=f"projectid={self.project['id']}")).json()
        self.assertEqual([s["id"] for s in listed["sessions"]], [second["id"], first["id"]])
        self.assertIs(listed["more"], False)

    async def test_sessions_ids_sort_by_time(self):
        """Session ids sort in creation order."""
        ids = [(await self.create_session(self.project["id"]))["id"] for _ in range(20)]
        self.assertEqual(ids, sorted(ids))

    async def test_sessions_list_requires_project(self):
        """Sessions|list needs a known projectid."""
        answer = await call(self.app, "sessions")
        self.assertEqual(answer.status, 400)
        self.assertEqual(answer.json(), [{"name": "projectid", "error": "is required"}])
        answer = await call(self.app, "sessions", query="projectid=nope")
        self.assertEqual(answer.status, 404)

    async def test_sessions_create_unknown_project_404(self):
        """A session of an unknown project is not created."""
        answer = await call(self.app, "sessions_create", {"projectid": "nope"})
        self.assertEqual(answer.status, 404)
        self.assertEqual(answer.json(), [{"name": "projectid", "error": "no project nope"}])

    async def test_sessions_update_renames(self):
        """Sessions|update renames; bad names change nothing."""
        session = await self.create_session(self.project["id"], "old")
        answer = await call(self.app, "sessions_update", {"name": "  new name  "}, ident=session["id"])
        self.assertEqual(answer.status, 200)
        self.assertEqual(answer.json()["name"], "new name")
        for body in ({}, {"name": ""}, {"name": 3}, {"name": "x" * 201}, {"name": "ok", "mode": "plan"}):
            answer = await call(self.app, "sessions_update", body, ident=session["id"])
            self.assertEqual(answer.status, 400, body)
        read = (await call(self.app, "sessions_read", ident=session["id"])).json()
        self.assertEqual(read["name"], "new name")

    async def test_sessions_update_unknown_404(self):
        """Renaming an unknown session answers 404."""
        answer = await call(self.app, "sessions_update", {"name": "x"}, ident="nope")
        self.assertEqual(answer.status, 404)

    async def test_sessions_remove(self):
        """A removed session is gone; removing it again is 404."""
        session = await self.create_session(self.project["id"])
        answer = await call(self.app, "sessions_remove", ident=session["id"], method="POST")
        self.assertEqual(answer.json(), {"success": True, "value": session["id"]})
        self.assertEqual((await call(self.app, "sessions_read", ident=session["id"])).status, 404)
        answer = await call(self.app, "sessions_remove", ident=session["id"], method="POST")
        self.assertEqual(answer.status, 404)

    async def test_sessions_messages_paged(self):
        """Messages come oldest first with their parts, paged from the newest."""
        session = await self.create_session(self.project["id"])
        store = self.app.store
        ids = []
        for index in range(5):
            message = await store.add_message(session["id"], "user")
            await store.add_part(message["id"], session["id"], "text", "done", f"m{index}", closed=True)
            ids.append(message["id"])
        data = (await call(self.app, "sessions_messages", ident=session["id"], query="limit=2")).json()
        self.assertEqual([m["id"] for m in data["messages"]], ids[3:])
        self.assertTrue(data["more"])
        self.assertEqual(data["messages"][0]["parts"][0]["text"], "m3")
        older = (await call(self.app, "sessions_messages", ident=session["id"],
                            query=f"limit=10&before={ids[3]}")).json()
        self.assertEqual([m["id"] for m in older["messages"]], ids[:3])
        self.assertFalse(older["more"])

    async def test_sessions_messages_bad_limit(self):
        """A limit out of range or not a number is refused."""
        session = await self.create_session(self.project["id"])
        for query in ("limit=0", "limit=501", "limit=abc"):
            answer = await call(self.app, "sessions_messages", ident=session["id"], query=query)
            self.assertEqual(answer.status, 400, query)
            self.assertEqual(answer.json()[0]["name"], "limit")

    async def test_sessions_remove_cascades_messages(self):
        """Removing a session removes its messages and parts."""
        session = await self.create_session(self.project["id"])
        message = await self.app.store.add_message(session["id"], "user")
        await self.app.store.add_part(message["id"], session["id"], "text", "done", "x", closed=True)
        await call(self.app, "sessions_remove", ident=session["id"], method="POST")
        self.assertEqual(await self.app.store.count_rows("messages", "sessionid", session["id"]), 0)
        self.assertEqual(await self.app.store.count_rows("parts", "sessionid", session["id"]), 0)


class UnicodeInputTest(TotemCase):
    async def test_lone_surrogate_refused(self):
        """Text that is not valid Unicode is refused with 400, never a 500."""
        project = await self.open_project()
        answer = await request(self.app, "POST", "/api/sessions_create",
                               raw_body=('{"projectid": "%s", "name": "\\ud800"}' % project["id"]).encode())
        self.assertEqual(answer.status, 400)
        self.assertEqual(answer.json(), [{"name": "name", "error": "must be valid Unicode text (no lone surrogates)"}])

    async def test_non_utf8_folder_refused(self):
        """A folder whose name is not UTF-8 cannot be opened; the answer says why."""
        folder = os.path.join(os.fsencode(self.tmp), b"bad\xff")
        os.makedirs(folder)
        link = os.path.join(self.tmp, "link")
        os.symlink(folder, link)
        answer = await call(self.app, "projects_open", {"path": link})
        self.assertEqual(answer.status, 400)
        self.assertIn("not UTF-8", answer.json()[0]["error"])
