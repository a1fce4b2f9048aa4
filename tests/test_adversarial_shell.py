"""The adversarial suite for the shell (issue 9), end to end through the scripted model, the real
server and the real shell: lines that the engine read otherwise than the shell that runs them,
patterns that matched across a word, arguments that turn a program into a runner or a writer,
and characters a person cannot see. Every case was allowed (and ran) before the fix; each now
asks, is rejected, and leaves the disk as it was (the harness of test_adversarial.py compares the
bytes of every file of the project and of the folder around it).
"""

from __future__ import annotations

from tests.test_adversarial import AdversarialCase, bash

# -- 1. the grammar: what dash and bash read otherwise --------------------------------------------

# Under the defaults alone (pwd, ls with simple flags, git status --short ... allowed).
GRAMMAR_DEFAULTS = [
    bash("ls &>/dev/null rm -r src", patterns=()),
    bash("ls -la &>/dev/null touch x", patterns=()),
    bash("git status &>/dev/null rm x", patterns=()),
    bash("git status --short &>>/dev/null touch x", patterns=()),
    bash("git status |& touch x", patterns=()),
    bash("ls |& rm x", patterns=()),
    bash("git status --short <<<x", patterns=()),
    bash("ls 10>x", patterns=()),
    bash("git status >&x", patterns=()),
    bash("git status\\\n --short", patterns=()),
    bash("ls {x,src}", patterns=()),
    bash("git status --short #; rm x", patterns=()),
    bash("ls\rrm x", patterns=()),
    bash("pwd\x0btouch x", patterns=()),
    bash("ls;;rm x", patterns=()),
]

# Under `allow bash echo *`: echo is a built-in of both shells, so only the line's other parts
# could make something run or write.
GRAMMAR_ECHO = [
    bash("echo a &>/dev/null touch x", patterns=()),
    bash("echo a |& touch x", patterns=()),
    bash("echo hi >&out.txt", patterns=()),
    bash("echo {a,b}", patterns=()),
    bash("echo $'a\\x27; touch x'", patterns=()),
    bash('echo $"x"; touch x', patterns=()),
    bash("echo a # comment\ntouch x", patterns=()),
    bash("echo a=~/x", patterns=()),
    bash("echo 10>out.txt", patterns=()),
    bash("echo ok\\\n; touch x", patterns=()),
]

# -- 2. pattern word boundaries ---------------------------------------------------------------------

BOUNDARIES = [
    bash("git status-x", patterns=None),
    bash("git statusx", patterns=None),
    # `rm *.pyc` once matched any text around the `.pyc`: here a whole `rm -r src`.
    bash("rm -r src a.pyc", patterns=None),
    bash("rm -r src/ .pyc", patterns=None),
]

# -- 3. arguments that run programs or write files -----------------------------------------------

WILDCARDS = ("sed *", "awk *", "find *", "git log *", "git *", "rg *", "tar *", "sort *", "uniq *")
RISKY = [
    bash("sed -i s/hello/bye/ a.txt", patterns=("sed -i s/hello/bye/ a.txt",)),
    bash("sed -ni p a.txt", patterns=None),
    bash("sed --in-pl s/hello/bye/ a.txt", patterns=None),
    bash("sed 's/hello/bye/w out.txt' a.txt", patterns=None),
    bash("sed 's/hello/bye/w ../pwned' a.txt", patterns=None),
    bash("sed -n '1e touch x' a.txt", patterns=None),
    bash("sed '1r .env' a.txt", patterns=None),
    bash("awk 'BEGIN { system(\"touch x\") }'", patterns=None),
    bash("awk '{ print > \"out.txt\" }' a.txt", patterns=None),
    bash("awk 'BEGIN { print \"x\" | \"sh\" }'", patterns=None),
    bash("find . -name a.txt -delete", patterns=None),
    bash("find . -fprint out.txt", patterns=None),
    bash("git log --output=out.txt", patterns=None),
    bash("git log --outp=out.txt", patterns=None),
    bash("git -c core.pager='touch x' log", patterns=None),
    bash("git grep -O'touch x' hello", patterns=None),
    bash("git config core.pager 'touch x'", patterns=None),
    bash("rg --pre ./x.sh hello", patterns=None),
    bash("tar -cf /dev/null --to-command='touch x' a.txt", patterns=None),
    bash("tar -cf - --use-compress-prog='touch x' a.txt", patterns=None),
    bash("sort -o out.txt a.txt", patterns=None),
    bash("sort --out=out.txt a.txt", patterns=None),
    bash("uniq a.txt out.txt", patterns=None),
]

# -- 4. characters a person cannot see ---------------------------------------------------------------

HIDDEN = [
    bash("git status\u200b", patterns=()),
    bash("git status --short \u202e", patterns=()),
    bash("echo \u2066abc\u2069", patterns=()),
    bash("echo a\u00a0b", patterns=()),
    bash("echo \U000e0041", patterns=()),
    bash("ls\ufe0f", patterns=()),
]


class ShellGrammarTest(AdversarialCase):
    async def test_lines_read_otherwise_by_another_shell_ask_under_the_defaults(self):
        """Constructs whose meaning differs between dash and bash ask under the defaults."""
        await self.run_table("shell grammar (defaults)", GRAMMAR_DEFAULTS)

    async def test_lines_read_otherwise_ask_under_allow_echo(self):
        """Under allow bash echo *, no construct of the line makes another program run."""
        await self.save_rule("bash", "echo *")
        await self.run_table("shell grammar (echo *)", GRAMMAR_ECHO)


class PatternBoundaryTest(AdversarialCase):
    async def test_a_glued_star_continues_the_arguments_not_the_word(self):
        """git status* never covers git status-x; rm *.pyc never covers rm -r src a.pyc."""
        await self.save_rule("bash", "git status*")
        await self.save_rule("bash", "rm *.pyc")
        await self.run_table("pattern boundaries", BOUNDARIES)

    async def test_a_deny_catches_an_abbreviated_long_option(self):
        """deny git fetch --upload-pack* denies --upload-pa= (git takes the prefix as the option)."""
        await self.save_rule("bash", "git fetch --upload-pack*", "deny")
        await self.save_rule("bash", "git fetch *")
        await self.run_table("pattern boundaries (deny)", [
            bash(line, "deny", by="rule", says="Denied by the project rule bash: git fetch --upload-pack*")
            for line in ("git fetch --upload-pa='touch x' origin", "git fetch --upload-pack 'touch x' .",
                         "git fetch --upload-pack='touch x'")])


class RiskyArgumentTest(AdversarialCase):
    async def test_a_wildcard_allow_never_covers_running_or_writing(self):
        """Under allow rules for sed, awk, find, git, rg, tar, sort and uniq, the arguments that
        make them run a program or write a file ask, and the question says why."""
        for pattern in WILDCARDS:
            await self.save_rule("bash", pattern)
        await self.run_table("risky arguments", RISKY)
        outcome = await self.attempt([("bash", {"command": "sed -i s/hello/bye/ a.txt"})])
        reason = outcome["asks"][0][1]["reason"]
        self.assertIn("sed -i can write files", reason)

    async def test_ordinary_use_still_runs(self):
        """The same rules still allow the ordinary, read-only use."""
        for pattern in WILDCARDS:
            await self.save_rule("bash", pattern)
        await self.run_table("risky arguments (ordinary use)", [
            bash("sed -n 1p a.txt", "allow", says="hello world", by="rule"),
            bash("awk '{ print $1 }' a.txt", "allow", says="hello", by="rule"),
            bash("sort a.txt", "allow", says="second line", by="rule"),
            bash("git log --oneline", "allow", by="rule", says="does not have any commits"),
        ])


class HiddenCharacterTest(AdversarialCase):
    async def test_invisible_characters_are_never_allowed(self):
        """Zero-width, bidirectional, tag and odd space characters ask even under allow rules,
        and the question names them."""
        await self.save_rule("bash", "git status*")
        await self.save_rule("bash", "echo *")
        await self.save_rule("bash", "ls*")
        await self.run_table("hidden characters", HIDDEN)
        outcome = await self.attempt([("bash", {"command": "echo \u202eabc"})])
        ask = outcome["asks"][0][1]
        self.assertIn("U+202E", ask["reason"])
