"""The knowledge of Total.js that a run brings to a Total.js project: the Forge documentation
page that matches the prompt, and the review of the answer's code before it is shown.

Only in a Total.js project (totaljs.detect), each as the run's settings say: `forge` for all of
it, `forgedocs` for the documentation, `selfcheck` for the review. The documentation becomes a
`knowledge` part of the person's message: the person sees what was added (its source, title and
any note, such as "offline"), and its text reaches the model inside the untrusted-data envelope
with the prompt (context.user_message); a failure is a note in the part and the run goes on.
The review (answers.py holds the text until it has run) makes a `validation` part of what needs
review: it is the Total.js check of checks.py (TotalJsCheck, totaljs.check_answer), the one that
also looks at the files a step's edits changed.

Must not: send the prompt anywhere (forge.py downloads only the index and the page), or add
anything to a project that is not a Total.js one.
"""

from __future__ import annotations

import asyncio

from totem.agent.answers import Review
from totem.agent.checks import TotalJsCheck
from totem.agent.recorder import Recorder
from totem.workspace.forge import ForgeDocs


class TotalJsKnowledge:
    def __init__(self, docs: ForgeDocs, recorder: Recorder):
        self.docs = docs
        self.recorder = recorder

    async def begin(self, sessionid: str, messageid: str | None, root: str, text: str, limits: dict,
                    ) -> Review | None:
        """At the start of a run: add the documentation for the prompt `text` to its message
        `messageid` when wanted; returns the review of its answers, or None."""
        if not limits.get("forge", True):
            return None
        docs = bool(limits.get("forgedocs", True) and messageid and text.strip())
        check = bool(limits.get("selfcheck", False))
        if not docs and not check:
            return None
        from totem.workspace import totaljs  # its patterns take a while to compile: not at start-up
        detection = await asyncio.to_thread(totaljs.detect, root)
        if not detection.totaljs:
            return None
        if docs and messageid:
            found = await self.docs.knowledge(text)
            part = await self.recorder.open(sessionid, messageid, "knowledge", data=found.view())
            self.recorder.append(part, found.text)
            await self.recorder.close(part, "error" if found.failed else "done")
        if not check:
            return None

        validator = TotalJsCheck(detection.version)  # the same check as after the edits of a step

        async def review(answer: str, cut: bool) -> dict | None:
            return await validator.review(root, answer, cut)
        return review
