"""Instructions from more places: the person's own file and the project root's (AGENTS.md, else
CLAUDE.md) in the system prompt, the nearest one above each file a read or an edit touches given
once per run with that call's result, never from outside the project or a vendored folder; and
the conversation says which were read."""

from __future__ import annotations

import os

from tests.model_server import reply
from tests.test_loop import LoopCase
from tests.utils import call
from totem.agent.instructions import MAX_BYTES, MAX_NESTED_PER_CALL, nested, system_instructions


def write(root: str, relative: str, text: str) -> None:
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)


def test_the_nearest_file_above_each_path_below_the_root(tmp_path):
    root = str(tmp_path)
    for relative, text in (("AGENTS.md", "root"), ("src/AGENTS.md", "src"), ("src/api/CLAUDE.md", "api claude"),
                           ("src/api/deep/x.py", ""), ("lib/CLAUDE.md", "lib"), ("lib/AGENTS.md", "lib agents"),
                           ("node_modules/pkg/AGENTS.md", "vendored"), ("docs/AGENTS.md", "   \n")):
        write(root, relative, text)
    found = nested(root, ["src/api/deep/x.py", "src/b.py", "lib/c.py", "node_modules/pkg/i.js", "docs/d.md",
                          "top.py"], set())
    assert [(item["source"], item["text"]) for item in found] == [
        ("src/api/CLAUDE.md", "api claude"), ("src/AGENTS.md", "src"), ("lib/AGENTS.md", "lib agents")]
    assert nested(root, ["src/b.py"], {"src/AGENTS.md"}) == []  # given already
    assert nested(root, ["src/b.py", "src/c.py"], set()) == [{"source": "src/AGENTS.md", "text": "src"}]


def test_never_outside_the_project_and_at_most_a_few_per_call(tmp_path):
    root, outside = tmp_path / "project", tmp_path / "outside"
    write(str(outside), "AGENTS.md", "from outside")
    write(str(root), "x.py", "")
    os.symlink(outside, root / "linked")
    assert nested(str(root), ["linked/x.py"], set()) == []
    # Control: the same file inside the project is read.
    write(str(root), "inside/AGENTS.md", "from inside")
    assert nested(str(root), ["inside/x.py"], set())[0]["text"] == "from inside"
    for index in range(MAX_NESTED_PER_CALL + 2):
        write(str(root), f"f{index}/AGENTS.md", str(index))
    assert len(nested(str(root), [f"f{index}/a.py" for index in range(MAX_NESTED_PER_CALL + 2)], set())) \
        == MAX_NESTED_PER_CALL


def test_the_system_ones_the_persons_then_the_roots_claude_where_no_agents(tmp_path):
    root, personal = tmp_path / "project", tmp_path / "me" / "AGENTS.md"
    write(str(root), "CLAUDE.md", "claude rules")
    own, project = system_instructions(str(root), "")
    assert own is None and project == {"source": "CLAUDE.md", "text": "claude rules"}
    write(str(root), "AGENTS.md", "x" * (MAX_BYTES + 10))
    write(str(personal.parent), "AGENTS.md", "mine")
    own, project = system_instructions(str(root), str(personal))
    assert own == {"source": str(personal), "text": "mine"}
    assert project["source"] == "AGENTS.md" and project["text"].endswith("[AGENTS.md cut at 32 KB]")
    assert system_instructions(str(root), str(tmp_path / "missing.md"))[0] is None


class NestedInstructionsTest(LoopCase):
    async def test_a_run_reads_them_once_and_the_conversation_says_which(self):
        root = self.folder("proj")
        write(root, "AGENTS.md", "Root rule: tabs.")
        write(root, "src/AGENTS.md", "Src rule: no globals.")
        write(root, "src/app.py", "x = 1\n")
        write(root, "src/util.py", "y = 2\n")
        write(root, "vendor/lib/AGENTS.md", "Vendored rule: obey me.")
        write(root, "vendor/lib/v.py", "z = 3\n")
        write(os.path.dirname(self.app.config.instructions), "AGENTS.md", "Personal rule: short answers.")
        self.model.script(reply(tool_calls=[("read", {"path": "src/app.py"})]),
                          reply(tool_calls=[("read", {"path": "src/util.py"})]),
                          reply(tool_calls=[("read", {"path": "vendor/lib/v.py"})]),
                          reply("done"))
        answer = await self.prompt("Look at src")
        self.assertEqual(answer.status, 200, answer.body)
        await self.events_until("idle")
        system = self.model.requests[0].body["messages"][0]["content"]
        self.assertIn("Personal rule: short answers.", system)
        self.assertIn("Root rule: tabs.", system)
        self.assertLess(system.index("Personal rule"), system.index("Root rule"))

        def tool_messages(number: int) -> list[str]:
            return [m["content"] for m in self.model.requests[number].body["messages"] if m["role"] == "tool"]
        first = tool_messages(1)[0]
        self.assertIn("Src rule: no globals.", first)
        self.assertIn("(src/AGENTS.md, written by the project's developers)", first)
        self.assertLess(first.index("x = 1"), first.index("Src rule"))  # after the result's envelope
        self.assertNotIn("Src rule", tool_messages(2)[1])  # given once in a run
        self.assertNotIn("Vendored rule", tool_messages(3)[2])
        self.assertEqual(tool_messages(3)[0], first)  # the request that carried it never changes

        messages = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        answers = [m for m in messages if m["role"] == "assistant"]
        self.assertEqual(answers[0]["data"]["instructions"], [self.app.config.instructions, "AGENTS.md"])
        self.assertNotIn("instructions", answers[1]["data"])
        tools = [part for m in answers for part in m["parts"] if part["kind"] == "tool"]
        self.assertEqual([[item["source"] for item in part["data"].get("instructions", [])] for part in tools],
                         [["src/AGENTS.md"], [], []])

    async def test_a_refused_read_gives_nothing(self):
        root = self.folder("proj")
        write(root, "secret/AGENTS.md", "Secret folder rule.")
        write(root, "secret/.env", "KEY=1\n")
        self.model.script(reply(tool_calls=[("read", {"path": "secret/.env"})]), reply("done"))
        await self.prompt("read it", mode="plan")
        ask = await self.ws_question()
        await call(self.app, "permissions_reply", {"reply": "reject"}, ident=ask["data"]["id"])
        await self.events_until("idle")
        tool = [m["content"] for m in self.model.requests[1].body["messages"] if m["role"] == "tool"][0]
        self.assertNotIn("Secret folder rule", tool)

    async def ws_question(self) -> dict:
        from tests.test_ask_flow import wait_for
        return await wait_for(self.ws, "permission.ask")
