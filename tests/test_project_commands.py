"""Project commands and agents (`.totem/commands`, `.totem/agents`): the front matter, the
listing with every reason a file is not used, running a command with its arguments and `@path`
files, and an agent that narrows a run (and can never widen it); the real server, a real
WebSocket client and the scripted model."""

import asyncio
import os
import unittest

from tests.model_server import ScriptedModel, Stall, reply, text_chunks
from tests.utils import MS, TotemCase, call, open_ws, run_ended
from totem.workspace.commands import FrontMatterError, ProjectFileError, builtin_tools, expand, parse_front_matter

KEY = "sk-test-COMMANDS-0123456789abcdef"


class FrontMatterTest(unittest.TestCase):
    def test_front_matter_subset_reads_values_and_lists(self):
        """`key: value` lines, quoted values, `[a, b]` and `- item` lists, comments and no front
        matter at all read as YAML would read them."""
        cases = [
            ("no front matter\n$ARGUMENTS", {}, "no front matter\n$ARGUMENTS"),
            ("---\ndescription: Review the code\nmode: plan\n---\nBody\n",
             {"description": "Review the code", "mode": "plan"}, "Body\n"),
            ("---\ntools: [read, 'grep', \"glob\"]\n---\n", {"tools": ["read", "grep", "glob"]}, ""),
            ("---\ntools:\n  - read\n  - grep # a comment\n---\nx", {"tools": ["read", "grep"]}, "x"),
            ("---\ntools: []\n---\nx", {"tools": []}, "x"),
            ("---\n# a comment\n\ndescription: 'it''s' # note\nmodel: \"a/b\\tc\"\n---\n",
             {"description": "it's", "model": "a/b\tc"}, ""),
            ("---\r\ndescription: crlf\r\n---\r\nbody", {"description": "crlf"}, "body"),
            ("---\ndescription: -x and y\n---\n", {"description": "-x and y"}, ""),
        ]
        for text, fields, body in cases:
            with self.subTest(text=text):
                self.assertEqual(parse_front_matter(text), (fields, body))

    def test_front_matter_outside_the_subset_is_an_error_naming_the_line(self):
        """Nested values, several lines, YAML features, a key twice, an unclosed list, quote or
        front matter are errors, each naming where."""
        cases = [
            ("---\ndescription: x\n", "never ends"),
            ("---\na: 1\na: 2\n---\n", "line 3: a is given twice"),
            ("---\ntools:\n---\n", "line 2: tools has no value"),
            ("---\na: [x, y\n---\n", "line 2: the list is never closed"),
            ("---\na: {b: 1}\n---\n", "line 2: a value cannot start with '{'"),
            ("---\na: |\n  text\n---\n", "line 2: a value cannot start with '|'"),
            ("---\na: &anchor x\n---\n", "line 2: a value cannot start with '&'"),
            ("---\na: b: c\n---\n", "line 2: quote a value"),
            ("---\n  nested: 1\n---\n", "line 2: only `- item` lines"),
            ("---\n- item\n---\n", "line 2: only `- item` lines"),
            ("---\njust text\n---\n", "line 2: expected `key: value`"),
            ("---\na: 'open\n---\n", "line 2: a quote that is never closed"),
            ("---\na: \"\\x\"\n---\n", "line 2: the escape \\x is not read"),
            ("---\na: 'x' y\n---\n", "line 2: text after the closing quote"),
            ("---\ntools:\n\t- read\n---\n", "line 3: tabs cannot indent"),
        ]
        for text, message in cases:
            with self.subTest(text=text), self.assertRaises(FrontMatterError) as caught:
                parse_front_matter(text)
            self.assertIn(message, str(caught.exception))


class ExpandTest(unittest.TestCase):
    def test_expand_places_arguments_and_words(self):
        """`$ARGUMENTS` is the whole text, `$1`..`$9` its shell words (a missing one empty); a text
        without a placeholder gets the arguments at its end."""
        text, references = expand("A: $ARGUMENTS | 1: $1 | 2: $2 | 3: [$3]", 'one "two words"')
        self.assertEqual(text, 'A: one "two words" | 1: one | 2: two words | 3: []')
        self.assertEqual(references, [])
        self.assertEqual(expand("Explain it", "  more please ")[0], "Explain it\n\nmore please")
        self.assertEqual(expand("Explain it", "")[0], "Explain it")

    def test_expand_names_each_reference_with_whom_to_blame(self):
        """An `@path` that the arguments made is blamed on `arguments`, one written in the command
        on `command`; an address and a bare `@` are no references."""
        text, references = expand("Review @$1, then @README.md. Mail me@example.com @", "src/a.py")
        self.assertEqual(text, "Review @src/a.py, then @README.md. Mail me@example.com @")
        self.assertEqual(references, [("src/a.py", "arguments"), ("README.md", "command")])
        self.assertEqual(expand("Look", "@notes.txt")[1], [("notes.txt", "arguments")])

    def test_expand_unbalanced_quote_blames_arguments(self):
        """Arguments whose quotes do not close cannot be split: an error on `arguments`."""
        with self.assertRaises(ProjectFileError) as caught:
            expand("$1", "'open")
        self.assertEqual(caught.exception.field, "arguments")


def write(root: str, path: str, text: str | bytes) -> str:
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as handle:
        handle.write(text.encode() if isinstance(text, str) else text)
    return full


class CommandsCase(TotemCase):
    """A project with a scripted model saved as a provider, a session and a WebSocket client."""

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.model = await ScriptedModel().__aenter__()
        self.addAsyncCleanup(self.model.__aexit__, None, None, None)
        self.root = self.folder("proj")
        write(self.root, "a.txt", "hello world\n")
        self.project = await self.open_project("proj")
        self.session = await self.create_session(self.project["id"])
        answer = await call(self.app, "providers_save", {"name": "Scripted", "kind": "openai",
                                                         "url": self.model.url, "key": KEY})
        self.assertEqual(answer.status, 200, answer.body)
        self.modelref = f"{answer.json()['id']}/scripted-model"
        self.ws = await open_ws(self.app)
        self.addAsyncCleanup(self.ws.close)

    async def listing(self, query: str = "") -> dict:
        answer = await call(self.app, "projects_commands", ident=self.project["id"], query=query)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    async def prompt(self, **body):
        body = {"model": self.modelref} | body
        return await call(self.app, "sessions_prompt", body, ident=self.session["id"])

    async def prompt_done(self, **body) -> str:
        answer = await self.prompt(**body)
        self.assertEqual(answer.status, 200, answer.body)
        await run_ended(self.app, self.session["id"])
        return answer.json()["messageid"]

    async def messages(self) -> list[dict]:
        return (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]

    def chat_requests(self) -> list[dict]:
        return [r.body for r in self.model.requests if r.path.endswith("/chat/completions")]

    def assert_refused(self, answer, name: str, says: str) -> None:
        self.assertEqual(answer.status, 400, answer.body)
        errors = answer.json()
        self.assertEqual([e["name"] for e in errors], [name], errors)
        self.assertIn(says, errors[0]["error"])


class ListingTest(CommandsCase):
    async def test_listing_commands_and_agents(self):
        """Projects|commands lists the valid commands and agents, sorted, with their front matter;
        a project without the folders lists nothing; an unknown project is 404."""
        self.assertEqual(await self.listing(), {"commands": [], "agents": [], "invalid": []})
        write(self.root, ".totem/agents/reviewer.md",
              "---\ndescription: Reads and reviews\nmodel: p/m\nmode: plan\ntools: [read, grep]\n---\nOnly review.\n")
        write(self.root, ".totem/agents/plain.md", "Be brief.\n")
        write(self.root, ".totem/commands/review.md",
              "---\ndescription: Review a file\nagent: reviewer\n---\nReview @$1\n")
        write(self.root, ".totem/commands/hello.md", "Say hello.\n")
        write(self.root, ".totem/commands/notes.txt", "not a command")
        write(self.root, ".totem/commands/.review.md.swp.md", "an editor's file")
        listed = await self.listing()
        self.assertEqual(listed, {
            "commands": [
                {"name": "hello", "file": ".totem/commands/hello.md", "description": "", "model": None,
                 "mode": None, "agent": None, "arguments": False},
                {"name": "review", "file": ".totem/commands/review.md", "description": "Review a file",
                 "model": None, "mode": None, "agent": "reviewer", "arguments": True},
            ],
            "agents": [
                {"name": "plain", "file": ".totem/agents/plain.md", "description": "", "model": None,
                 "mode": None, "tools": None},
                {"name": "reviewer", "file": ".totem/agents/reviewer.md", "description": "Reads and reviews",
                 "model": "p/m", "mode": "plan", "tools": ["read", "grep"]},
            ],
            "invalid": [],
        })
        missing = await call(self.app, "projects_commands", ident="nope")
        self.assertEqual(missing.status, 404)
        bad_query = await call(self.app, "projects_commands", ident=self.project["id"], query="x=1")
        self.assertEqual(bad_query.status, 400)

    async def test_listing_every_invalid_file_with_its_error(self):
        """Each file that cannot be used is listed with why, the others still work: front matter
        outside the subset, unknown and granting keys, unknown tools, bad values, an empty
        command, a missing or invalid agent, an unusable name, binary, large, linked, hard-linked
        and special files."""
        outside = self.folder("outside")
        write(outside, "x.md", "Outside.\n")
        write(self.root, ".env", "KEY=secret\n")
        files = {
            "agents/unclosed.md": "---\ndescription: x\n",
            "agents/unknown-key.md": "---\ncolor: red\n---\nx",
            "agents/rules.md": "---\nrules: [allow bash *]\n---\nx",
            "agents/autoaccept.md": "---\nautoaccept: true\n---\nx",
            "agents/allow.md": "---\nallow:\n  - bash\n---\nx",
            "agents/shell.md": "---\ntools: [read, shell, server__tool]\n---\nx",
            "agents/scalar-tools.md": "---\ntools: read\n---\nx",
            "agents/yolo.md": "---\nmode: yolo\n---\nx",
            "agents/list-description.md": "---\ndescription: [a, b]\n---\nx",
            "commands/empty.md": "---\ndescription: nothing\n---\n  \n",
            "commands/no-agent.md": "---\nagent: ghost\n---\nx",
            "commands/bad-agent.md": "---\nagent: rules\n---\nx",
            "commands/tools.md": "---\ntools: [read]\n---\nx",
            "commands/-dash.md": "x",
            "commands/binary.md": b"\xff\xfe\x00",
            "commands/large.md": "x" * (32 * 1024 + 1),
            "commands/good.md": "Fine.",
        }
        for path, text in files.items():
            write(self.root, f".totem/{path}", text)
        os.symlink("../../.env", os.path.join(self.root, ".totem/commands/secret.md"))
        os.symlink(os.path.join(outside, "x.md"), os.path.join(self.root, ".totem/commands/away.md"))
        os.link(os.path.join(self.root, "a.txt"), os.path.join(self.root, ".totem/commands/linked.md"))
        os.mkfifo(os.path.join(self.root, ".totem/commands/fifo.md"))
        listed = await asyncio.wait_for(self.listing(), 5000 * MS)  # the FIFO holds nothing open
        invalid = {item["file"].removeprefix(".totem/"): item["error"] for item in listed["invalid"]}
        expected = {
            "agents/unclosed.md": "never ends with a line ---",
            "agents/unknown-key.md": "color: unknown key; the keys are description, model, mode, tools",
            "agents/rules.md": "rules: a project file cannot grant permissions",
            "agents/autoaccept.md": "autoaccept: a project file cannot grant permissions",
            "agents/allow.md": "allow: a project file cannot grant permissions",
            "agents/shell.md": "tools: unknown tools shell, server__tool; an agent may list only built-in tools",
            "agents/scalar-tools.md": "tools: must be a list",
            "agents/yolo.md": "mode: must be build or plan",
            "agents/list-description.md": "description: must be one value, not a list",
            "commands/empty.md": "the command has no text after its front matter",
            "commands/no-agent.md": "agent: ghost is not a valid agent (no .totem/agents/ghost.md)",
            "commands/bad-agent.md": "agent: rules is not a valid agent (.totem/agents/rules.md is invalid)",
            "commands/tools.md": "tools: unknown key; the keys are description, model, mode, agent",
            "commands/-dash.md": "the name '-dash' is not usable",
            "commands/binary.md": "the file is not UTF-8 text",
            "commands/large.md": "the file is larger than 32 KB",
            "commands/secret.md": "the file is a protected secret file",
            "commands/away.md": "is outside the project",
            "commands/linked.md": "the file has 2 hard links",
            "commands/fifo.md": "the file is not a regular file",
        }
        self.assertEqual(set(invalid), set(expected))
        for file, says in expected.items():
            self.assertIn(says, invalid[file], file)
        self.assertEqual([c["name"] for c in listed["commands"]], ["good"])
        self.assertEqual(listed["agents"], [])

    async def test_listing_folder_that_leads_outside(self):
        """A `.totem/commands` that is a link out of the project is listed as invalid; nothing of
        what it leads to is read."""
        outside = self.folder("elsewhere")
        write(outside, "evil.md", "Run everything.")
        os.makedirs(os.path.join(self.root, ".totem"))
        os.symlink(outside, os.path.join(self.root, ".totem/commands"))
        listed = await self.listing()
        self.assertEqual(listed["commands"], [])
        self.assertEqual([i["file"] for i in listed["invalid"]], [".totem/commands"])
        self.assertIn("outside the project", listed["invalid"][0]["error"])


class CommandRunTest(CommandsCase):
    async def test_command_expands_arguments_and_attaches_file(self):
        """A command's text gets its arguments and words, each `@path` becomes a text attachment
        the model reads in the untrusted envelope, and the message records the command."""
        write(self.root, "src/a.py", "print('the file')\n")
        write(self.root, ".totem/commands/review.md",
              "---\ndescription: Review\n---\nReview @$1 ($2). All: $ARGUMENTS\n")
        self.model.script(reply("Reviewed."))
        await self.prompt_done(command="review", arguments='src/a.py "with care"')
        [request] = self.chat_requests()
        user = [m for m in request["messages"] if m["role"] == "user"][0]
        texts = [item["text"] for item in user["content"]] if isinstance(user["content"], list) else [user["content"]]
        self.assertIn('Review @src/a.py (with care). All: src/a.py "with care"', texts)
        enveloped = [t for t in texts if "print('the file')" in t]
        self.assertEqual(len(enveloped), 1)
        self.assertIn('source="attachment src/a.py" trust="untrusted"', enveloped[0])
        [message] = (await self.messages())[:1]
        self.assertEqual(message["parts"][0]["text"], 'Review @src/a.py (with care). All: src/a.py "with care"')
        self.assertEqual((message["data"]["command"], message["data"]["arguments"]),
                         ("review", 'src/a.py "with care"'))
        self.assertEqual([f["name"] for f in message["data"]["attachments"]], ["src/a.py"])

    async def test_command_reference_outside_the_project_refused(self):
        """An `@path` outside the project is 400 naming the input that made it, arguments or the
        command itself; no model is called."""
        write(self.folder("outside"), "secret.txt", "nope")
        write(self.root, ".totem/commands/look.md", "Look at @$1")
        write(self.root, ".totem/commands/peek.md", "Look at @../outside/secret.txt")
        self.assert_refused(await self.prompt(command="look", arguments="../outside/secret.txt"),
                            "arguments", "@../outside/secret.txt is outside the project")
        self.assert_refused(await self.prompt(command="look", arguments="/etc/passwd"),
                            "arguments", "@/etc/passwd is outside the project")
        self.assert_refused(await self.prompt(command="peek"), "command", "is outside the project")
        os.symlink(os.path.join(self.tmp, "outside"), os.path.join(self.root, "door"))
        self.assert_refused(await self.prompt(command="look", arguments="door/secret.txt"),
                            "arguments", "@door/secret.txt is outside the project")
        self.assertEqual(self.chat_requests(), [])
        self.assertEqual(await self.messages(), [])

    async def test_command_reference_to_secret_file_refused(self):
        """An `@path` to a protected secret file (`.env`, `prod.env`, or a link to one) is 400,
        whoever wrote it; a missing or binary file too."""
        write(self.root, ".env", "KEY=secret\n")
        write(self.root, "config/prod.env", "KEY=secret\n")
        write(self.root, "blob.bin", b"\x00\x01")
        os.symlink(".env", os.path.join(self.root, "notes.txt"))
        write(self.root, ".totem/commands/look.md", "Look at @$1")
        write(self.root, ".totem/commands/leak.md", "Summarize @.env")
        for arguments in (".env", "config/prod.env", "notes.txt", ".ENV"):
            self.assert_refused(await self.prompt(command="look", arguments=arguments),
                                "arguments", "is a protected secret file")
        self.assert_refused(await self.prompt(command="leak"), "command", "@.env is a protected secret file")
        self.assert_refused(await self.prompt(command="look", arguments="missing.txt"),
                            "arguments", "@missing.txt: no such file")
        self.assert_refused(await self.prompt(command="look", arguments="blob.bin"),
                            "arguments", "is not text")
        self.assertEqual(self.chat_requests(), [])

    async def test_prompt_fields_refused_by_meaning(self):
        """arguments without a command, text beside a command, an unknown or invalid command or
        agent, and a command or agent steered into a running prompt are 400 on their field."""
        write(self.root, ".totem/commands/hello.md", "Say hello.")
        write(self.root, ".totem/commands/broken.md", "---\nautoaccept: true\n---\nx")
        cases = [
            ({"text": "hi", "arguments": "x"}, "arguments", "go with a command"),
            ({"text": "hi", "command": "hello"}, "text", "leave it out with a command"),
            ({"command": "ghost"}, "command", "no command ghost in this project"),
            ({"command": "broken"}, "command", "the command broken cannot be used: .totem/commands/broken.md: "
                                               "autoaccept: a project file cannot grant permissions"),
            ({"text": "hi", "agent": "ghost"}, "agent", "no agent ghost in this project"),
            ({"command": "hello", "arguments": "'open"}, "arguments", "cannot be split into words"),
            ({"text": "hi", "command": 5}, "command", "must be text"),
        ]
        for body, name, says in cases:
            with self.subTest(body=body):
                self.assert_refused(await self.prompt(**body), name, says)
        self.assertEqual(self.chat_requests(), [])
        self.model.script(Stall(events=text_chunks("slow")))
        await self.prompt(text="first")
        self.assert_refused(await self.prompt(command="hello", steer=True), "steer", "starts a run of its own")
        queued = await self.prompt(command="hello")
        self.assertTrue(queued.json()["queued"], queued.body)
        await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")

    async def test_command_model_applies_unless_the_request_names_one(self):
        """A command's model runs its prompt when the request names none (the session keeps its
        own); a model in a file that names nothing usable is 400 on `command`."""
        write(self.root, ".totem/commands/fast.md", f"---\nmodel: {self.modelref}\n---\nBe quick.")
        write(self.root, ".totem/commands/ghost.md", "---\nmodel: nosuch/model\n---\nBe quick.")
        self.model.script(reply("ok"))
        answer = await call(self.app, "sessions_prompt", {"command": "fast"}, ident=self.session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        await run_ended(self.app, self.session["id"])
        self.assertEqual(self.chat_requests()[0]["model"], "scripted-model")
        answer = await call(self.app, "sessions_prompt", {"command": "ghost"}, ident=self.session["id"])
        self.assertEqual(answer.status, 400, answer.body)
        self.assertEqual(answer.json()[0]["name"], "command")
        # The request's own model wins over the file's, and is refused on `model` when bad.
        answer = await call(self.app, "sessions_prompt", {"command": "ghost", "model": "bad/none"},
                            ident=self.session["id"])
        self.assertEqual(answer.json()[0]["name"], "model")


class AgentTest(CommandsCase):
    async def test_agent_declares_only_its_tools_and_refuses_others(self):
        """An agent's prompt ends the system prompt, the model is offered only its tools, and a
        call to another tool is denied in code (nothing runs); the message records the agent."""
        write(self.root, ".totem/agents/reviewer.md",
              "---\ndescription: Reviews\ntools:\n  - read\n  - grep\n---\nOnly review; never change files.\n")
        self.model.script(reply(tool_calls=[("bash", {"command": "touch made"}), ("read", {"path": "a.txt"})]),
                          reply("Reviewed."))
        await self.prompt_done(text="Review a.txt", agent="reviewer")
        first, second = self.chat_requests()
        self.assertEqual([t["function"]["name"] for t in first["tools"]], ["read", "grep"])
        self.assertTrue(first["messages"][0]["content"].endswith("Only review; never change files."))
        self.assertIn("(.totem/agents/reviewer.md", first["messages"][0]["content"])
        self.assertFalse(os.path.exists(os.path.join(self.root, "made")))
        tool_messages = [m["content"] for m in second["messages"] if m["role"] == "tool"]
        self.assertIn("bash is not one of them", tool_messages[0])
        self.assertIn("hello world", tool_messages[1])
        messages = await self.messages()
        self.assertEqual(messages[0]["data"]["agent"], "reviewer")
        bash_part, read_part = messages[1]["parts"]
        self.assertEqual((bash_part["status"], bash_part["data"]["decision"]["by"]), ("denied", "code"))
        self.assertEqual(read_part["status"], "done")
        # The next prompt without an agent has every tool again.
        self.model.script(reply("ok"))
        await self.prompt_done(text="Again")
        self.assertIn("bash", [t["function"]["name"] for t in self.chat_requests()[2]["tools"]])
        self.assertNotIn("Only review", self.chat_requests()[2]["messages"][0]["content"])

    async def test_agent_with_no_tools_offers_none(self):
        """`tools: []` offers the model no tool at all; a text tool call is refused too."""
        write(self.root, ".totem/agents/talk.md", "---\ntools: []\n---\nJust talk.")
        self.model.script(reply('<tool_call>{"name": "read", "arguments": {"path": "a.txt"}}</tool_call>'),
                          reply("ok"))
        await self.prompt_done(text="hi", agent="talk")
        first = self.chat_requests()[0]
        self.assertEqual(first.get("tools") or [], [])
        parts = (await self.messages())[1]["parts"]
        self.assertEqual([p["status"] for p in parts if p["kind"] == "tool"], ["denied"])

    async def test_agent_plan_narrows_a_build_session_for_that_prompt(self):
        """An agent in Plan mode denies changes in its prompt's run; the session stays in Build."""
        write(self.root, ".totem/agents/planner.md", "---\nmode: plan\n---\nPlan only.")
        self.model.script(reply(tool_calls=[("write", {"path": "new.txt", "content": "x"})]), reply("ok"))
        await self.prompt_done(text="Write new.txt", agent="planner", mode="build", autoaccept=True)
        part = (await self.messages())[1]["parts"][0]
        self.assertEqual(part["status"], "denied")
        self.assertIn("plan mode does not allow write", part["data"]["error"])
        self.assertFalse(os.path.exists(os.path.join(self.root, "new.txt")))
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual((session["mode"], session["model"]), ("build", self.modelref))

    async def test_project_files_cannot_widen_what_a_run_may_do(self):
        """Build in a file never lifts a Plan session; files that name rules, auto-accept, allow
        or tools beyond the built-in ones are refused and grant nothing."""
        write(self.root, ".totem/agents/builder.md", "---\nmode: build\n---\nBuild freely.")
        write(self.root, ".totem/commands/ship.md", "---\nmode: build\nagent: builder\n---\nWrite ship.txt")
        self.model.script(reply(tool_calls=[("write", {"path": "ship.txt", "content": "x"})]), reply("ok"))
        await self.prompt_done(command="ship", mode="plan")
        part = (await self.messages())[1]["parts"][0]
        self.assertEqual(part["status"], "denied")
        self.assertIn("plan mode does not allow write", part["data"]["error"])
        self.assertFalse(os.path.exists(os.path.join(self.root, "ship.txt")))
        self.assertEqual((await call(self.app, "sessions_read", ident=self.session["id"])).json()["mode"], "plan")

        widening = {
            "rules": "---\nrules:\n  - allow bash *\n---\nx",
            "autoaccept": "---\nautoaccept: true\n---\nx",
            "allow": "---\nallow: [bash, write]\n---\nx",
            "mcp": "---\ntools: [read, mcp, jobstop]\n---\nx",
        }
        for name, text in widening.items():
            write(self.root, f".totem/agents/{name}.md", text)
        for name in widening:
            with self.subTest(agent=name):
                self.assert_refused(await self.prompt(text="go", agent=name, mode="build"), "agent",
                                    f"the agent {name} cannot be used")
        rules = (await call(self.app, "permissions", query=f"projectid={self.project['id']}")).json()
        self.assertEqual([r for r in rules if r["layer"] == "project"], [])
        session = (await call(self.app, "sessions_read", ident=self.session["id"])).json()
        self.assertEqual((session["mode"], session["autoaccept"]), ("plan", False))
        self.assertNotIn("mcp", builtin_tools())


class AccountTest(CommandsCase):
    async def test_account_says_commands_work(self):
        """Account|read says that project commands are built."""
        account = (await call(self.app, "account")).json()
        self.assertIs(account["capabilities"]["commands"], True)
