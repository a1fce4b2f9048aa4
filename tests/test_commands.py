"""Commands end to end: bash through the scripted model, timeouts, caps, abort, jobs, environment."""

import asyncio
import base64
import glob
import json
import os
import resource
import time

from tests.model_server import reply
from tests.test_loop import KEY, LoopCase
from tests.utils import MS, call, next_event
from totem.process.runner import group_running


def tool_results(request):
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


class CommandsTest(LoopCase):
    async def run_prompt(self, *calls, final="ok", status="idle", **extra):
        """Script one answer with these calls and a final text; approve every ask once."""
        self.model.script(reply(tool_calls=list(calls)), reply(final))
        await self.prompt(**extra)
        events = []
        while True:
            event = await next_event(self.ws, 20000)
            events.append(event)
            if event["type"] == "permission.ask":
                await call(self.app, "permissions_reply", {"reply": "once"}, ident=event["data"]["id"])
            if event["type"] == "session.status" and event["data"]["status"] == status:
                return events

    async def test_bash_output_streams_and_exit_code(self):
        """bash output arrives as part deltas and the exit code is in the result."""
        events = await self.run_prompt(("bash", {"command": "echo first; sleep 0.2; echo second; exit 3"}))
        tool_part = next(e["data"]["part"] for e in events if e["type"] == "part.created"
                         and e["data"]["part"]["kind"] == "tool")
        streamed = "".join(e["data"]["text"] for e in events
                           if e["type"] == "part.delta" and e["data"]["partid"] == tool_part["id"])
        self.assertEqual(streamed, "first\nsecond\n")
        result = tool_results(self.model.requests[1])[0]
        self.assertIn("first\nsecond", result)
        self.assertIn("[exit code 3]", result)
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        part = stored[1]["parts"][0]
        self.assertEqual(part["data"]["result"]["exit_code"], 3)
        self.assertEqual(part["text"], "first\nsecond\n")

    async def test_bash_timeout(self):
        """A command past its timeout is killed and the model is told."""
        started = time.monotonic()
        await self.run_prompt(("bash", {"command": "sleep 30", "timeout": 1}))
        self.assertLess(time.monotonic() - started, 10)
        self.assertIn("timed out after 1 s", tool_results(self.model.requests[1])[0])

    async def test_bash_output_cap_memory_flat(self):
        """A command printing 50 MB is cut to head and tail and the server's memory stays flat."""
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        await self.run_prompt(("bash", {"command": "head -c 50000000 /dev/zero | tr '\\0' a"}))
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        result = tool_results(self.model.requests[1])[0]
        self.assertIn("bytes of output cut", result)
        self.assertLess(len(result), 60_000)
        self.assertLess(grown_mb, 150)

    async def test_child_environment_minimal(self):
        """`env` in a command shows none of the server's variables."""
        os.environ["TOTEM_TEST_SERVER_SECRET"] = "server-only-value"
        os.environ["OPENAI_API_KEY"] = "sk-from-the-server-environment"
        self.addCleanup(os.environ.pop, "TOTEM_TEST_SERVER_SECRET", None)
        self.addCleanup(os.environ.pop, "OPENAI_API_KEY", None)
        await self.run_prompt(("bash", {"command": "env"}))
        result = tool_results(self.model.requests[1])[0]
        self.assertIn("PATH=", result)
        self.assertNotIn("server-only-value", result)
        self.assertNotIn("sk-from-the-server-environment", result)
        self.assertNotIn("TOTEM_TEST_SERVER_SECRET", result)

    async def test_key_echoed_is_scrubbed(self):
        """A key printed by a command reaches the event, the part, the model and the database scrubbed."""
        split = len(KEY) // 2
        root = self.folder("proj")
        for name, text in (("one", KEY[:split]), ("two", KEY[split:] + "\n"), ("key", KEY)):
            with open(os.path.join(root, name), "w") as handle:
                handle.write(text)
        # The key reaches the output in two writes, and base64-encoded.
        command = "cat one; sleep 0.2; cat two; base64 key"
        events = await self.run_prompt(("bash", {"command": command}))
        marker = "[secret:scripted]"
        self.assertNotIn(KEY, json.dumps(events))
        streamed = "".join(e["data"]["text"] for e in events if e["type"] == "part.delta")
        self.assertIn(marker, streamed)
        result = tool_results(self.model.requests[1])[0]
        self.assertNotIn(KEY, result)
        self.assertIn(marker, result)
        stored = (await call(self.app, "sessions_messages", ident=self.session["id"])).json()["messages"]
        self.assertNotIn(KEY, json.dumps(stored))
        encoded = base64.b64encode(KEY.encode()).decode()
        self.assertNotIn(encoded[4:-4], json.dumps(stored))
        # The database and its journal; the snapshots folder holds copies of the project's own
        # files (for Undo), which hold the key because the project does.
        for path in glob.glob(os.path.join(self.app.config.data, "*")):
            if os.path.isdir(path):
                continue
            with open(path, "rb") as handle:
                data = handle.read()
            self.assertNotIn(KEY.encode(), data, path)

    async def test_job_output_scrubbed(self):
        """A key printed by a background job is scrubbed in Sessions|jobs."""
        with open(os.path.join(self.folder("proj"), "key"), "w") as handle:
            handle.write(KEY)
        await self.run_prompt(("bash", {"command": "cat key; echo; sleep 100", "background": True}))
        for _ in range(300):
            jobs = (await call(self.app, "sessions_jobs", ident=self.session["id"])).json()
            if jobs and "secret" in jobs[0]["output"]:
                break
            await asyncio.sleep(10 * MS)
        self.assertNotIn(KEY, jobs[0]["output"])
        self.assertIn("[secret:scripted]", jobs[0]["output"])

    async def test_job_output_held_for_a_secret_shows_when_quiet(self):
        """Output that may still become a key (its first letters) is held back while more may
        come, and shows once the job has been quiet a moment; the whole key never shows."""
        with open(os.path.join(self.folder("proj"), "key"), "w") as handle:
            handle.write(KEY)
        start = KEY[:6]
        await self.run_prompt(("bash", {"command": f"cat key; echo; printf 'serving {start}'; sleep 100",
                                        "background": True}))
        jobs = []
        for _ in range(2000):
            jobs = (await call(self.app, "sessions_jobs", ident=self.session["id"])).json()
            if jobs and jobs[0]["output"].endswith(f"serving {start}"):
                break
            await asyncio.sleep(10 * MS)
        self.assertTrue(jobs[0]["output"].endswith(f"serving {start}"), jobs[0]["output"])
        self.assertEqual(jobs[0]["status"], "running")
        self.assertNotIn(KEY, jobs[0]["output"])
        self.assertIn("[secret:scripted]", jobs[0]["output"])

    async def serve_pages(self, pages: dict):
        """A small HTTP server on 127.0.0.1 answering path -> (status, headers, body)."""
        async def handle(reader, writer):
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ")[1].decode()
            status, headers, body = pages.get(path, (404, {}, b"missing"))
            lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close"]
            lines += [f"{name}: {value}" for name, value in headers.items()]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
            await writer.drain()
            writer.close()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.addAsyncCleanup(server.wait_closed)
        self.addCleanup(server.close)
        return server.sockets[0].getsockname()[1]

    async def test_fetch_html_converted_and_redirect_asks_again(self):
        """fetch converts a local page to text; a redirect to another host asks again."""
        final_port = await self.serve_pages({"/final": (
            200, {"Content-Type": "text/html; charset=utf-8"},
            b"<html><head><script>alert(1)</script></head><body><h1>Title</h1>"
            b"<p>Hello &amp; welcome</p><a href='/x'>link</a></body></html>")})
        # The second hop leads to another host name (localhost), on the second server.
        self_pages = {"/start": (302, {"Location": "/page"}, b""),
                      "/page": (302, {"Location": f"http://localhost:{final_port}/final"}, b"")}
        port = await self.serve_pages(self_pages)
        events = await self.run_prompt(("fetch", {"url": f"http://127.0.0.1:{port}/start"}))
        asks = [e["data"] for e in events if e["type"] == "permission.ask"]
        asked_hosts = [a["input"].get("url", "") for a in asks]
        self.assertTrue(any("127.0.0.1" in url for url in asked_hosts))
        self.assertTrue(any("localhost" in url for url in asked_hosts), asked_hosts)
        self.assertTrue(any("note" in a["input"] for a in asks))  # private address asked even so
        result = tool_results(self.model.requests[1])[0]
        self.assertIn("# Title", result)
        self.assertIn("Hello & welcome", result)
        self.assertNotIn("alert(1)", result)
        self.assertIn('trust="untrusted"', result)

    async def test_job_started_listed_stopped(self):
        """A background job is listed with its output and stops on request."""
        await self.run_prompt(("bash", {"command": "echo serving; sleep 100", "background": True}))
        self.assertIn("Started job", tool_results(self.model.requests[1])[0])
        jobs = []
        for _ in range(300):
            jobs = (await call(self.app, "sessions_jobs", ident=self.session["id"])).json()
            if jobs and "serving" in jobs[0]["output"]:
                break
            await asyncio.sleep(10 * MS)
        self.assertEqual((jobs[0]["status"], jobs[0]["command"]), ("running", "echo serving; sleep 100"))
        answer = await call(self.app, "sessions_jobstop", {"job": jobs[0]["id"]}, ident=self.session["id"])
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.json()["status"], "stopped")
        missing = await call(self.app, "sessions_jobstop", {"job": "nope"}, ident=self.session["id"])
        self.assertEqual(missing.status, 404)

    async def test_jobs_end_with_session(self):
        """Removing a session stops its jobs."""
        await self.run_prompt(("bash", {"command": "sleep 100", "background": True}))
        job = self.app.jobs.list(self.session["id"])[0]
        await call(self.app, "sessions_remove", ident=self.session["id"], method="POST")
        self.assertEqual(self.app.jobs.list(self.session["id"]), [])
        self.assertTrue(job["id"])

    async def test_jobstop_denied_in_plan_mode(self):
        """A session in Plan mode cannot stop a job."""
        await self.run_prompt(("bash", {"command": "sleep 100", "background": True}))
        job = self.app.jobs.list(self.session["id"])[0]
        self.model.script(reply("planning"))
        await self.prompt("plan it", mode="plan")
        await self.events_until("idle")
        answer = await call(self.app, "sessions_jobstop", {"job": job["id"]}, ident=self.session["id"])
        self.assertEqual(answer.status, 403)
        self.assertEqual(self.app.jobs.list(self.session["id"])[0]["status"], "running")


class UnconfinedCommandsTest(LoopCase):
    """What only the host's view of a command shows: its pids, outside any sandbox's PID namespace
    (tests/test_sandbox.py shows the abort of a confined one)."""

    settings = {"sandbox": "off"}

    async def test_abort_kills_process_tree(self):
        """Abort during `sh -c 'sleep 100 & sleep 100'` kills the whole tree."""
        self.model.script(reply(tool_calls=[("bash", {"command": "sh -c 'sleep 100 & sleep 100' & echo $! > pid; wait"})]))
        await self.prompt()
        while True:
            event = await next_event(self.ws)
            if event["type"] == "permission.ask":
                await call(self.app, "permissions_reply", {"reply": "once"}, ident=event["data"]["id"])
            if event["type"] == "part.updated" and event["data"]["part"]["status"] == "running":
                break
        pid_file = os.path.join(self.folder("proj"), "pid")
        pid = ""
        for _ in range(200):
            if os.path.exists(pid_file):
                with open(pid_file) as handle:
                    pid = handle.read().strip()
                if pid:
                    break
            await asyncio.sleep(10 * MS)
        pgid = os.getpgid(int(pid))
        started = time.monotonic()
        await call(self.app, "sessions_abort", ident=self.session["id"], method="POST")
        await self.events_until("aborted")
        self.assertLess(time.monotonic() - started, 1.5)
        for _ in range(300):
            if not group_running(pgid):
                break
            await asyncio.sleep(10 * MS)
        self.assertFalse(group_running(pgid))
