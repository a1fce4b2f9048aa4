"""The sentence a denied tool call leaves on its part and in the model's context: one "Denied",
never "Denied: denied: ...", whatever decided it."""

import pytest

from totem.agent.calls import denial
from totem.security.permissions import Call, Rule, decide


@pytest.mark.parametrize(("reason", "sentence"), [
    ("the path is outside the project", "Denied: the path is outside the project"),
    ("denied by the project rule bash: rm *", "Denied by the project rule bash: rm *"),
    ("Denied by you", "Denied by you"),
    ("no one is here to approve (a scheduled run)", "Denied: no one is here to approve (a scheduled run)"),
])
def test_denial_says_denied_once(reason, sentence):
    """A reason that already says "denied" is the sentence; any other gets the word once."""
    assert denial(reason) == sentence


def test_denial_reasons_of_code_do_not_start_with_denied():
    """The decisions made in code (outside the project, Plan mode) give the reason alone."""
    outside = decide(Call("read", ("../x",), outside=True), [])
    plan = decide(Call("write", ("a.txt",), mode="plan"), [])
    assert (outside.action, outside.reason) == ("deny", "the path is outside the project")
    assert plan.action == "deny" and plan.reason.startswith("plan mode does not allow write")
    rule = decide(Call("bash", ("rm x",)), [Rule("bash", "rm *", "deny", "project")])
    for decision in (outside, plan, rule):
        assert "denied: denied" not in denial(decision.reason).lower()
        assert denial(decision.reason).lower().count("denied") == 1
