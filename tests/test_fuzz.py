"""Generated JSON bodies for every action that changes something, against the real server.

Each `+` action of the router (every action with changes=True) gets bodies that hypothesis
builds from the fields its body declares (so a new field is fuzzed without a change here), from values that mean something to Totem (the ids of a real
project and session, the modes, rule actions, replies, base64) and from any JSON at all,
including bodies that are not objects, not JSON or not UTF-8. Every answer must be a 2xx, or a
4xx in the one error shape `[{name, error}]`; never a 5xx, never a traceback, nothing logged as
an error; and the server still answers a health read after each action's examples. The server
runs with a token, so that Account|login reads its body too.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.utils import TOKEN, request, running_totem
from totem.http.api.contract import properties_of
from totem.http.routes import action_table

EXAMPLES_PER_ACTION = 40
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CLOSED_PORT_URL = "http://127.0.0.1:9/v1"  # refused at once: no fuzzed URL leaves this computer


def body_fields(action) -> tuple[str, ...]:
    """The field names an action's body may have, as it declares them."""
    return tuple(properties_of(action.body or {}))


CHANGE_ACTIONS = sorted((action for action in action_table().values() if action.changes),
                        key=lambda action: action.name)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8)
TEXTS = st.sampled_from(["", " ", "x", "a" * 300, "\x00", "\ud800", "é☃", "../..", "*", "**", "git *"])
CONTENT_TYPES = st.sampled_from(["application/json"] * 6 + ["application/json; charset=utf-8", None, "text/plain"])
BASE64 = st.sampled_from([base64.b64encode(b"hello").decode(), "aGk=", "!!!", "a", "", "QQ==QQ=="])


def attachments():
    return st.fixed_dictionaries({"name": TEXTS | st.just("a.txt"), "mime": st.sampled_from(
        ["text/plain", "image/png", "nope", ""]), "data": BASE64}, optional={"extra": JSON})


def meaningful(name: str, fixture: dict):
    """Values of a field that mean something to Totem (valid ones among them)."""
    return {
        "projectid": st.sampled_from([fixture["project"], "nope", ""]),
        "path": st.sampled_from([fixture["folder"], fixture["folder"] + "/missing", "relative", ""]),
        "mode": st.sampled_from(["build", "plan", "yolo"]),
        "reasoning": st.sampled_from(["none", "low", "medium", "high", "max"]),
        "autoaccept": st.booleans(),
        "model": st.sampled_from(["nope/none", "x", ""]),
        "attachments": st.lists(attachments(), max_size=3),
        "scope": st.sampled_from(["project", "global", "other"]),
        "tool": st.sampled_from(["bash", "read", "write", "edit", "fetch", "nope", ""]),
        "action": st.sampled_from(["allow", "ask", "deny", "maybe"]),
        "reply": st.sampled_from(["once", "always", "reject", "later"]),
        "patterns": st.lists(TEXTS, max_size=3),
        "pattern": TEXTS,
        "name": st.sampled_from(["fuzzed", " renamed ", ""]),
        "text": st.sampled_from(["Look", "", " "]),
        "answer": st.sampled_from(["yes", ""]),
        "kind": st.sampled_from(["openai", "ollama", "llamacpp", "nope"]),
        "url": st.sampled_from([CLOSED_PORT_URL, "ftp://127.0.0.1/", "not a url", ""]),
        "key": st.sampled_from(["sk-fuzz-0123456789", ""]),
        "models": st.lists(TEXTS, max_size=3),
        "token": st.sampled_from([TOKEN, "wrong-token-wrong-token", ""]),
        "id": st.sampled_from(["nope", fixture["session"]]),
        "job": st.sampled_from(["nope", ""]),
    }.get(name, TEXTS)


def valid(name: str, fixture: dict):
    """A value of a field that its action accepts, so that bodies reach past validation."""
    values = {
        "projectid": st.just(fixture["project"]), "path": st.just(fixture["folder"]),
        "mode": st.sampled_from(["build", "plan"]), "reasoning": st.sampled_from(["low", "high"]),
        "model": st.just("nope/none"), "attachments": st.just([{"name": "a.txt", "mime": "text/plain",
                                                                "data": "aGk="}]),
        "scope": st.just("project"), "tool": st.sampled_from(["bash", "read"]),
        "pattern": st.sampled_from(["git *", "src/**"]), "action": st.sampled_from(["allow", "ask", "deny"]),
        "reply": st.sampled_from(["once", "reject"]), "patterns": st.just(["git *"]),
        "kind": st.sampled_from(["openai", "ollama"]), "url": st.just(CLOSED_PORT_URL),
        "models": st.just(["m"]), "token": st.just(TOKEN), "name": st.just("fuzzed"), "text": st.just("Look"),
        "id": st.none(), "key": st.none() | st.just("sk-fuzz-0123456789"),  # null is as good as absent
    }
    return values[name] if name in values else meaningful(name, fixture)


def values_for(name: str, fixture: dict):
    """What a field may get: meaningful values mostly, else any text or JSON."""
    return st.one_of(meaningful(name, fixture), TEXTS, JSON)


def bodies(fields: tuple[str, ...], fixture: dict):
    """Raw request bodies: mostly objects of the action's fields, sometimes anything else."""
    accepted = st.fixed_dictionaries({name: valid(name, fixture) for name in fields})
    complete = st.fixed_dictionaries({name: st.one_of(valid(name, fixture), meaningful(name, fixture))
                                      for name in fields})
    objects = st.fixed_dictionaries({}, optional={name: values_for(name, fixture) for name in fields})
    with_unknown = st.builds(lambda known, other: {**other, **known}, objects,
                             st.dictionaries(st.text(max_size=6), JSON, max_size=2))
    encoded = st.one_of(accepted, complete, objects, with_unknown, JSON).map(lambda data: json.dumps(data).encode())
    malformed = st.sampled_from([b"", b"{", b"[1,]", b"\xff\xfe", b'{"a": 1, "a": 2}', b"nul",
                                 b"[" * 100_000 + b"]" * 100_000, b'{"n": 1' + b"0" * 5000 + b"}"])
    return st.one_of(encoded, encoded, encoded, malformed)


def idents(action, fixture: dict):
    if not action.takes_id:
        return st.none()
    own = fixture["project"] if action.name.startswith("projects_") else fixture["session"]
    return st.sampled_from([own, "nope", "x" * 64])


class ErrorLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture(scope="module")
def live():
    """A running Totem with a token on its own event loop, for the whole module."""
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-fuzz-"))
    folder = os.path.join(tmp, "project")
    os.makedirs(folder)
    errors = ErrorLog()
    logging.getLogger("totem").addHandler(errors)
    with asyncio.Runner() as runner:
        server = running_totem(tmp, token=TOKEN, failures=1000)
        app = runner.run(server.__aenter__())
        try:
            yield runner, app, folder, errors
        finally:
            runner.run(server.__aexit__(None, None, None))
            logging.getLogger("totem").removeHandler(errors)
            shutil.rmtree(tmp, ignore_errors=True)


async def fixture_ids(app, folder: str) -> dict:
    """A project and a session to aim at, made again when an example removed them."""
    project = await app.services.projects.open(folder)
    sessions = (await app.services.sessions.list(project["id"], 1))["sessions"]
    session = sessions[0] if sessions else await app.services.sessions.create(project["id"])
    return {"project": project["id"], "session": session["id"], "folder": folder}


def check_answer(answer, what: str) -> None:
    assert 200 <= answer.status < 300 or 400 <= answer.status < 500, f"{what}: {answer.status} {answer.body[:300]!r}"
    assert b"Traceback" not in answer.body, what
    data = answer.json() if answer.body else None
    if answer.status >= 400:
        assert isinstance(data, list) and data, f"{what}: {answer.body[:300]!r}"
        for problem in data:
            assert set(problem) == {"name", "error"}, f"{what}: {problem}"
            assert isinstance(problem["name"], str) and isinstance(problem["error"], str), f"{what}: {problem}"


@pytest.mark.parametrize("action", CHANGE_ACTIONS, ids=lambda action: action.name)
def test_fuzz_bodies_never_500(live, action):
    """Generated bodies for one `+` action: 2xx or 4xx in the error shape, never 500, nothing
    logged as an error, and the server answers a health read afterwards."""
    runner, app, folder, errors = live
    fields = body_fields(action)  # empty for an action that takes no body: fuzzed anyway

    @settings(max_examples=EXAMPLES_PER_ACTION, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=st.data())
    def run_examples(data):
        current = runner.run(fixture_ids(app, folder))
        raw = data.draw(bodies(fields, current), label="body")
        ident = data.draw(idents(action, current), label="id")
        content_type = data.draw(CONTENT_TYPES, label="content type")
        path = f"/api/{action.name}" + (f"/{ident}" if ident else "")
        answer = runner.run(request(app, "POST", path, raw_body=raw, headers=AUTH, content_type=content_type))
        check_answer(answer, f"{path} {content_type} {raw[:200]!r}")

    run_examples()
    assert not errors.records, [record.getMessage() for record in errors.records]
    health = runner.run(request(app, "GET", "/api/account", headers=AUTH))
    assert health.status == 200, health.body
