"""The adversarial suite (issue 4), secret files: every form of a protected secret file (the one
definition, `boundary.is_protected_env`) and hard links, end to end through the scripted model
(the harness and the fixture are in test_adversarial.py).

As there, each case asserts the decision, that nothing changed on disk and that no secret value
reached the model. On top, every test ends by looking for each secret value everywhere it could
have gone: every WebSocket frame the test received, every stored part, every request sent to
the model, and the bytes of every file in the server's data folder (the sqlite database with its
WAL). The search patterns match the secret values without containing one, so that finding a
value anywhere means a file's content leaked.
"""

from __future__ import annotations

import json
import os
import unittest

from tests.test_adversarial import (
    COUNTS,
    SECRETS,
    AdversarialCase,
    Case,
    bash,
    build_tree,
    tearDownModule,  # noqa: F401 (prints the count of cases)
)
from tests.utils import call

# Each value says where it lives; the grep cases search for S3CRET-[0-9a-f]{4}, no value itself.
NEW_SECRETS = {
    ".envrc": "envrc-S3CRET-1f9a",
    "prod.env": "prodenv-S3CRET-2b8c",
    ".ENV.LOCAL": "capitals-S3CRET-3c7d",
    ".env.example.bak": "examplebak-S3CRET-4d6e",
    ".env.production.example": "prodexample-S3CRET-5e5f",
    ".env.d/x": "envd-S3CRET-6f4a",
    "#.env#": "autosave-S3CRET-7a3b",
    ".env~": "tilde-S3CRET-8b2c",
    "deploy/.prod.env": "dotprod-S3CRET-9c1d",
    "venv/.env/lib/site.py": "envfolder-S3CRET-ad0e",
}
HARDLINK_SECRET = "hardlink-S3CRET-be9f"  # outside/hard.txt, linked into the project as notes.txt
ALL_SECRETS = (*SECRETS, *NEW_SECRETS.values(), HARDLINK_SECRET)
SECRET_PATTERN = "S3CRET-[0-9a-f]{4}"
LINKS_NOTE = "the file has 2 hard links; its other name may be outside the project or a secret file"


def read_asks(path: str) -> Case:
    return Case("read", {"path": path}, "ask", (path,), never=ALL_SECRETS)


def search(tool: str, args: dict, says: str, unlisted: tuple = ()) -> Case:
    return Case(tool, args, "allow", says=says, never=ALL_SECRETS, unlisted=unlisted)


SECRET_FORMS = [
    *(read_asks(path) for path in NEW_SECRETS),
    Case("read", {"path": ".env.example"}, "allow", says="changeme-example", never=ALL_SECRETS),
    Case("read", {"path": ".env.sample"}, "allow", says="changeme-sample", never=ALL_SECRETS),
    # search never shows a line of one, across the tree or with one as the explicit path
    search("grep", {"pattern": SECRET_PATTERN}, "No matches"),
    search("grep", {"pattern": SECRET_PATTERN}, "1 file with more than one hard link was not "
                                                "searched"),
    search("grep", {"pattern": "s3cret", "ignore_case": True}, "No matches"),
    search("grep", {"pattern": SECRET_PATTERN, "include": "*env*"}, "No matches"),
    search("grep", {"pattern": "TOKEN", "include": "*env*"}, ".env.example:1:"),
    *(search("grep", {"pattern": SECRET_PATTERN, "path": path}, "search skips secret files")
      for path in (*NEW_SECRETS, ".env.d", "venv/.env")),
    search("grep", {"pattern": SECRET_PATTERN, "path": "notes.txt"},
           "notes.txt was not searched: it has 2 hard links"),
    search("grep", {"pattern": SECRET_PATTERN, "path": "deploy"}, "No matches"),
    search("glob", {"pattern": "**/*"}, ".env.example", unlisted=tuple(NEW_SECRETS)),
    search("glob", {"pattern": "**/*env*"}, ".env.template", unlisted=tuple(NEW_SECRETS)),
    search("glob", {"pattern": "*", "path": ".env.d"}, "No files match"),
    # a command that names one asks even under `bash: cat *`
    bash("cat prod.env", patterns=("cat prod.env",), never=ALL_SECRETS),
    bash("cat .envrc", patterns=("cat .envrc",), never=ALL_SECRETS),
    bash("cat .ENV.LOCAL", patterns=("cat .ENV.LOCAL",), never=ALL_SECRETS),
    bash("cat .env.d/x", patterns=("cat .env.d/x",), never=ALL_SECRETS),
    bash("cat deploy/.prod.env", patterns=("cat deploy/.prod.env",), never=ALL_SECRETS),
    bash("cat .env.example", "allow", says="changeme-example", by="rule", never=ALL_SECRETS),
]

AUTOACCEPT = [
    Case("write", {"path": path, "content": "X=1\n"}, "ask", (path,), never=ALL_SECRETS)
    for path in ("prod.env", ".envrc", ".env.d/new", "#.env#", ".Env.Local")
] + [
    Case("edit", {"path": ".envrc", "old": "export", "new": "unset"}, "ask", (".envrc",),
         never=ALL_SECRETS),
]


class RecordingSocket:
    """The test's WebSocket, keeping every frame it receives (the harness reads through it)."""

    def __init__(self, ws):
        self._ws = ws
        self.frames: list[str] = []

    async def recv(self, *args, **kwargs):
        frame = await self._ws.recv(*args, **kwargs)
        self.frames.append(frame if isinstance(frame, str) else frame.decode("utf-8", "replace"))
        return frame

    def __getattr__(self, name):
        return getattr(self._ws, name)


class SecretFilesCase(AdversarialCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        build_tree(self.root, {path: f"TOKEN={value}\n" for path, value in NEW_SECRETS.items()})
        build_tree(self.outside, {"hard.txt": f"TOKEN={HARDLINK_SECRET}\n"})
        os.link(os.path.join(self.outside, "hard.txt"), os.path.join(self.root, "notes.txt"))
        self.ws = RecordingSocket(self.ws)
        self.sessions: list[str] = []

    async def attempt(self, calls, **options):
        outcome = await super().attempt(calls, **options)
        self.sessions.append(outcome["session"])
        return outcome

    async def assert_secrets_nowhere(self) -> None:
        """No secret value in any frame, stored part, model request or file of the data folder."""
        places = {"WebSocket frames": "\n".join(self.ws.frames),
                  "model requests": "\n".join(request.raw_body.decode("utf-8", "replace")
                                              for request in self.model.requests)}
        for sessionid in self.sessions:
            answer = await call(self.app, "sessions_messages", ident=sessionid)
            self.assertEqual(answer.status, 200, answer.body)
            places[f"stored session {sessionid}"] = json.dumps(answer.json(), ensure_ascii=False)
        data = os.path.join(self.tmp, "data")
        stored = b""
        for folder, _, names in os.walk(data):
            for name in names:
                with open(os.path.join(folder, name), "rb") as handle:
                    stored += handle.read()
        # the database was read, and it holds this test's sessions
        self.assertTrue(stored.startswith(b"SQLite format 3") or b"SQLite format 3" in stored,
                        "no sqlite file in the data folder")
        missing = [sessionid for sessionid in self.sessions if sessionid.encode() not in stored]
        self.assertEqual(missing, [], "sessions not in the data folder")
        leaks = [f"{value} in {place}" for value in ALL_SECRETS
                 for place, text in places.items() if value in text]
        leaks += [f"{value} in the data folder" for value in ALL_SECRETS if value.encode() in stored]
        self.assertEqual(leaks, [])
        self.assertTrue(self.ws.frames and self.sessions)


class SecretFormsTest(SecretFilesCase):
    async def test_secret_forms_ask_search_skips_them_and_nothing_leaks(self):
        """Reading any secret form asks (examples are fine), search never shows or lists one, a
        command naming one asks under `bash: cat *`; no value reaches any event, part or the db."""
        await self.save_rule("bash", "cat *")
        await self.run_table("3. secret forms", SECRET_FORMS)
        await self.assert_secrets_nowhere()

    async def test_secret_forms_autoaccept_still_asks(self):
        """Auto-accept never writes or edits a secret form without a question."""
        await self.run_table("5. auto-accept (secret forms)", AUTOACCEPT, autoaccept=True)
        await self.assert_secrets_nowhere()

    async def test_file_tree_marks_secret_files_protected(self):
        """The file tree shows secret files (they exist) with protected: true, never their content."""
        answer = await call(self.app, "projects_files", ident=self.project["id"])
        self.assertEqual(answer.status, 200, answer.body)
        marks = {item["name"]: item["protected"] for item in answer.json()["items"]}
        for name in (".envrc", "prod.env", ".ENV.LOCAL", ".env.example.bak", "#.env#", ".env~", ".env",
                     ".env.local", ".env.d", "notsecret"):  # notsecret: a link to .env
            self.assertIs(marks[name], True, name)
        for name in (".env.example", ".env.sample", ".env.template", "a.txt", "notes.txt", "src",
                     "deploy", "venv", "link_out"):
            self.assertIs(marks[name], False, name)
        inner = await call(self.app, "projects_files", ident=self.project["id"], query="path=.env.d")
        self.assertEqual([(i["name"], i["protected"]) for i in inner.json()["items"]], [("x", True)])
        venv = await call(self.app, "projects_files", ident=self.project["id"], query="path=venv")
        self.assertEqual([(i["name"], i["protected"]) for i in venv.json()["items"]], [(".env", True)])
        for value in ALL_SECRETS:
            self.assertNotIn(value, answer.body.decode() + inner.body.decode())


class HardLinkTest(SecretFilesCase):
    async def read_hard_link(self, path: str, secret: str) -> list[str]:
        """Read `path` (a file with two links): the tool asks even under the allow rule, the
        reject is stored on the part, and the file's content goes nowhere."""
        outcome = await self.attempt([("read", {"path": path})])
        COUNTS["8. hard links"] = COUNTS.get("8. hard links", 0) + 1
        problems = []
        asks = [data for _, data in outcome["asks"]]
        parts = outcome["parts"]
        if [(a["tool"], a["input"], a["patterns"]) for a in asks] != [
                ("read", {"path": path, "note": LINKS_NOTE}, [])]:
            problems.append(f"the asks were {asks}")
        if len(parts) != 1:
            return problems + [f"{len(parts)} tool parts"]
        data = parts[0]["data"]
        if parts[0]["status"] != "error" or data["decision"]["action"] != "allow":
            problems.append(f"status {parts[0]['status']}, decision {data['decision']}")
        decisions = [(d["action"], d["by"], d.get("reply")) for d in data.get("decisions", [])]
        if decisions != [("deny", "person", "reject")]:
            problems.append(f"the audit holds {data.get('decisions')}")
        elif LINKS_NOTE not in data["decisions"][0]["reason"]:
            problems.append(f"the stored reason is {data['decisions'][0]['reason']!r}")
        result = outcome["results"][0] if outcome["results"] else ""
        if f"Denied: the person rejected read of {path}" not in result:
            problems.append(f"the model got {result[:300]!r}")
        problems += [f"{value!r} reached the model" for value in (*ALL_SECRETS, secret) if value in result]
        return [f"read {path}: {problem}" for problem in problems + self.disk_problems(outcome, {})]

    async def test_hard_link_read_asks_even_under_allow_rules(self):
        """A hard link to a secret outside the project, or to a secret form inside it, is read
        only with the person's yes, also under an exact allow rule; nothing leaks anywhere."""
        os.link(os.path.join(self.root, ".envrc"), os.path.join(self.root, "copy.txt"))
        os.symlink("copy.txt", os.path.join(self.root, "alias.txt"))
        problems = await self.read_hard_link("notes.txt", HARDLINK_SECRET)
        problems += await self.read_hard_link("copy.txt", NEW_SECRETS[".envrc"])
        await self.save_rule("read", "notes.txt")
        problems += await self.read_hard_link("notes.txt", HARDLINK_SECRET)
        self.assertEqual(problems, [])
        # a symbolic link to a hard-linked file asks for the file it leads to
        outcome = await self.attempt([("read", {"path": "alias.txt"})])
        self.assertEqual([(d["input"], d["patterns"]) for _, d in outcome["asks"]],
                         [({"path": "copy.txt", "note": LINKS_NOTE}, [])])
        await self.assert_secrets_nowhere()

    async def test_hard_link_rides_no_command_or_skill(self):
        """A hard-linked file is no ordinary argument of a wildcard bash rule, and a skill file
        with a second name is not read."""
        await self.save_rule("bash", "cat *")
        os.makedirs(os.path.join(self.root, ".totem/skills/linked"))
        os.link(os.path.join(self.outside, "hard.txt"),
                os.path.join(self.root, ".totem/skills/linked/SKILL.md"))
        await self.run_table("8. hard links (commands, skills)", [
            bash("cat notes.txt", patterns=("cat notes.txt",), never=ALL_SECRETS),
            Case("skill", {"name": "linked"}, "fail", says="hard links", never=ALL_SECRETS),
        ])
        await self.assert_secrets_nowhere()


if __name__ == "__main__":
    unittest.main()
