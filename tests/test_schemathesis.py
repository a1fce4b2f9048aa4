"""schemathesis against GET /api/openapi.json and the real server on a loopback port.

For every operation of the document, requests that fit its schemas (positive) and requests
that do not (negative) are generated from the document itself, sent to a running Totem (with a
token: the sign-in actions work) and checked: no server error, every answer within the status
codes, the media type and the schema the document gives, and no request that fits the schemas
refused (positive data acceptance: a 400 for such a request means the document says less than
the code checks). The run is deterministic (derandomized, no example database, no deadline) and
bounded by EXAMPLES per operation and mode (EXAMPLES_OF for the deepest bodies, NEGATIVE_EXAMPLES
for requests that do not fit).

What a schema cannot say is given as state, not as shape: a folder to open or list is the
test's folder (a folder that is missing is the service's 400), and a provider's URL is a closed
port of this computer (no generated URL leaves it; Providers|catalog then calls it) with a kind
of Providers|templates (kinds can be added while the server runs).

Three actions are left out of the positive acceptance check, each for a rule that its service
checks with a 400 naming the field, covered by their own tests: Settings|save (which ids go with
a scope, `value` or `clear: true`, and the value's type, which is the key's), Permissions|save
(the form of a pattern follows the tool's subject: a relative path, a host, a command line read
by the shell splitter) and Providers|available (its answer is the provider's, and a provider
that fails, as the closed port does, is a 400 on url). Every other check holds for them. An
operation without any input has no negative requests (skipped). The actions that start a run of the agent or a process (Sessions|prompt, compact,
terminal, Schedules|run) take an id in their path, which generated requests never hit: they
answer 404 and start nothing, so none needs a model here.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.utils import TOKEN, running_totem

EXAMPLES = 20
# Negative requests only have to draw no server error, and drawing data that breaks a schema is
# the slow part of the module (hypothesis filters most of what it draws, and each schema it
# mutates is compiled anew): fewer of them, the bad input of each action being the business of
# tests/test_perimeter.py and tests/test_fuzz.py. 8 of each took 40 s on a quiet machine, 4 take 23 s.
NEGATIVE_EXAMPLES = 4
# The bodies whose schemas are the deepest take a second or more to draw each (a session's whole
# document; a prompt with its attachments): fewer examples, the rest of their bad input being
# covered by their own tests (tests/test_export.py, LoopTest.test_bad_prompt_inputs).
EXAMPLES_OF = {"sessions_import": 6, "sessions_prompt": 10}
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CLOSED_PORT_URL = "http://127.0.0.1:9/v1"  # refused at once
STATEFUL = {"settings_save", "permissions_save", "providers_available"}  # see the module's docstring
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


class LiveServer:
    """A Totem on its own event loop in a thread, so that blocking clients can call it."""

    def __init__(self, tmp: str):
        self.tmp = tmp
        self.ready = threading.Event()
        self.app = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # said by __enter__, not lost in the thread
            self.failure = exc
            self.ready.set()

    async def _serve(self):
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with running_totem(self.tmp, token=TOKEN, failures=1000) as app:
            self.app = app
            self.ready.set()
            await self._stop.wait()

    def __enter__(self):
        self.thread.start()
        assert self.ready.wait(60), "the server did not start"
        if self.failure is not None:
            raise self.failure
        return self

    def __exit__(self, *exc):
        assert self.loop is not None and self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(60)


@pytest.fixture(scope="module")
def live():
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-schemathesis-"))
    folder = os.path.join(tmp, "project")
    os.makedirs(folder)
    try:
        with LiveServer(tmp) as server:
            base = f"http://127.0.0.1:{server.app.port}"
            with requests.Session() as session:
                document = session.get(f"{base}/api/openapi.json", headers=AUTH, timeout=30).json()
                kinds = [template["kind"] for template in
                         session.get(f"{base}/api/providers_templates", headers=AUTH, timeout=30).json()]
                yield base, session, schemathesis.openapi.from_dict(document), folder, kinds
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def operations():
    """The operations of the document, by path and method (read from the action table, so that
    the test ids are known before the server starts)."""
    from totem.http.routes import action_table
    for action in action_table().values():
        path = f"/api/{action.name}" + ("/{id}" if action.takes_id else "")
        for method in action.methods:
            if method != "HEAD":
                yield action.name, path, method


def with_state(case, name: str, folder: str, kinds: list[str]) -> None:
    """Put the state that no schema can say into a generated case (see the module's docstring)."""
    if name == "projects_open" and isinstance(case.body, dict):
        case.body["path"] = folder
    if name == "folders" and isinstance(case.query, dict) and "path" in case.query:
        case.query["path"] = folder
    if name in ("providers_save", "providers_available") and isinstance(case.body, dict):
        if "url" in case.body:
            case.body["url"] = CLOSED_PORT_URL
        if isinstance(case.body.get("kind"), str):
            case.body["kind"] = kinds[len(case.body["kind"]) % len(kinds)]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize("name, path, method", list(operations()), ids=lambda value: str(value))
def test_operation_keeps_its_contract(live, name, path, method, mode):
    """Generated requests of one operation: no 5xx, answers as documented, and (positive)
    every request that fits the schemas accepted."""
    base, session, schema, folder, kinds = live
    operation = schema[path][method].ok() if hasattr(schema[path][method], "ok") else schema[path][method]
    checks = CHECKS + ([positive_data_acceptance] if mode == GenerationMode.POSITIVE and name not in STATEFUL else [])
    if mode == GenerationMode.NEGATIVE:
        checks = [not_a_server_error]

    examples = EXAMPLES_OF.get(name, EXAMPLES)
    if mode == GenerationMode.NEGATIVE:
        examples = min(examples, NEGATIVE_EXAMPLES)

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data):
        case = data.draw(operation.as_strategy(generation_mode=mode))
        if mode == GenerationMode.POSITIVE:
            with_state(case, name, folder, kinds)
        response = case.call(base_url=base, session=session, headers=AUTH, timeout=60)
        case.validate_response(response, checks=checks)

    try:
        run()
    except Unsatisfiable:
        if mode != GenerationMode.NEGATIVE:
            raise
        pytest.skip("the operation takes no input that could be made invalid")
