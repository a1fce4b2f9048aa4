"""Totem and the scripted model on a background event loop, for a browser driven from the test thread.

Playwright's sync API owns the test thread, so the real server (`running_totem`) and the
scripted model (`tests/model_server.py`) run on an event loop of their own in a second thread;
`LiveTotem.call()` runs a coroutine there and waits for it. `restart()` stops Totem and starts it
again on the same port with the same data folder, as a person restarting the server would.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading

from tests.model_server import MODEL_ID, ScriptedModel
from tests.utils import MS, TOKEN, call, running_totem

CALL_TIMEOUT_MS = 20_000
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class LiveTotem:
    """A running Totem with a token, a scripted model and a saved provider that points at it."""

    def __init__(self, tmpdir: str):
        self.tmp = tmpdir
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="totem-ui-server", daemon=True)
        self.app = None
        self.model: ScriptedModel | None = None
        self.port = 0
        self.modelref = ""
        self._server = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()

    def call(self, coroutine, timeout_ms: float = CALL_TIMEOUT_MS):
        """Run a coroutine on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_ms * MS)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.thread.start()
        self.model = self.call(ScriptedModel().__aenter__())
        self.model.serve_json("GET", "/v1/models", {"object": "list", "data": [
            {"id": MODEL_ID, "object": "model", "created": 1786000000, "owned_by": "tests"}]})
        self.start_app()
        provider = self.api("providers_save", {"name": "Scripted", "kind": "openai", "url": self.model.url,
                                               "key": "sk-test-ui-0123456789"})
        self.modelref = f"{provider['id']}/{MODEL_ID}"

    def start_app(self) -> None:
        async def start():
            server = running_totem(self.tmp, token=TOKEN, port=self.port)
            return server, await server.__aenter__()
        self._server, self.app = self.call(start())
        self.port = self.app.port
        self.app.runs.steps.backoff_first_s = 0.01
        # "Detect local servers" finds the scripted model as a llama.cpp server, and nothing else.
        self.app.providers.detect_urls = {"llamacpp": self.model.base}

    def stop_app(self) -> None:
        self.call(self._server.__aexit__(None, None, None))
        self.app = self._server = None

    def restart(self) -> None:
        self.stop_app()
        self.start_app()

    def settle(self) -> None:
        """Leave nothing of one test to the next: the server up, no run going, no response scripted."""
        if self.app is None:  # a test stopped it and failed before starting it again
            self.start_app()
        self.call(self.app.runs.stop_all())
        self.model._script.clear()

    def close(self) -> None:
        if self.app is not None:
            self.stop_app()
        if self.model is not None:
            self.call(self.model.__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()

    # -- the API, as a script would use it ----------------------------------------------------

    def api(self, name: str, body=None, ident: str | None = None, query: str = "", method: str | None = None):
        """Call an action with the token; returns the JSON answer, raises AssertionError on an error."""
        answer = self.call(call(self.app, name, body, ident, query, headers=AUTH, method=method))
        assert 200 <= answer.status < 300, (name, answer.status, answer.body)
        return answer.json()

    def project(self, name: str, files: dict[str, str] | None = None) -> dict:
        """A folder with these files, opened as a project."""
        root = os.path.join(self.tmp, "projects", name)
        os.makedirs(root, exist_ok=True)
        for path, text in (files or {}).items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as handle:
                handle.write(text)
        return self.api("projects_open", {"path": root})

    def session(self, project: dict, name: str = "Session") -> dict:
        return self.api("sessions_create", {"projectid": project["id"], "name": name})

    def prompt(self, session: dict, text: str) -> dict:
        return self.api("sessions_prompt", {"text": text, "model": self.modelref}, ident=session["id"])

    def open_parts(self, session: dict) -> list[dict]:
        """The parts of the session's run that are still streaming (none when nothing runs)."""
        async def read():
            return self.app.runs.open_parts(session["id"])
        return self.call(read())

    def wait_run_end(self, session: dict, timeout_ms: float = 10_000) -> str:
        """Wait until the session's run has ended; returns its stored status."""
        async def wait():
            async with asyncio.timeout(timeout_ms * MS):
                while self.app.runs.is_running(session["id"]):
                    await asyncio.sleep(20 * MS)
            return (await self.app.store.get_session(session["id"]))["status"]
        return self.call(wait(), timeout_ms + 1000)


# -- the browser ------------------------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCREENSHOTS = os.path.join(ROOT, "screenshots")
# Debian's headless shell (the package chromium-headless-shell): Chromium's engine without the
# browser's own windows and services, so a page load costs about a third less CPU than in the full
# browser run headless, and the browser tests are CPU-bound on two cores.
CHROMIUM = "/usr/bin/chromium-headless-shell"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1360, "height": 820}


def open_session(page, project, session):
    """Show a session (the page keeps project and session in its address) once the socket is up."""
    from playwright.sync_api import expect
    page.goto(f"/#/{project['id']}/{session['id']}")
    expect(page.locator("#session-title")).to_have_text(session["name"])
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")


def send(page, text):
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")


def shot(page, name: str) -> None:
    """Save a screenshot of the page as screenshots/NAME (the folder is gitignored)."""
    os.makedirs(SCREENSHOTS, exist_ok=True)
    page.screenshot(path=os.path.join(SCREENSHOTS, name))


def watch_csp(page):
    """Collect the page's Content-Security-Policy violations (the `securitypolicyviolation` events
    of every document it loads, and the console's "Refused to ..." errors) and its console
    errors; returns a function that lists them."""
    found: list[str] = []
    page.add_init_script("""document.addEventListener('securitypolicyviolation', (event) => {
        console.error(`CSP violation: ${event.violatedDirective} ${event.blockedURI} ${event.sample}`);
    });""")
    page.on("console", lambda message: found.append(message.text) if message.type == "error" else None)
    return lambda: list(found)


# -- git repositories -------------------------------------------------------------------------

GIT_AUTHOR = ("Tess Ter", "tess@example.invalid")


def git(root: str, *args: str) -> str:
    """Run git in `root` (failing the test when git fails); returns its output."""
    return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, check=True).stdout


def git_project(live: LiveTotem, name: str, files: dict[str, str] | None = None, commit: bool = True) -> dict:
    """A project that is a git repository on `main`, with an author in its own config and (unless
    not `commit`) its files in a first commit."""
    project = live.project(name, files)
    root = project["path"]
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", GIT_AUTHOR[0])
    git(root, "config", "user.email", GIT_AUTHOR[1])
    if commit:
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "first")
    return project
