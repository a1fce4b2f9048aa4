"""Background jobs: bash commands that a session runs without waiting for them.

Owns the jobs of every session: starting one through the runner (same process group, minimal
environment, sandbox and kill as any command), keeping a bounded tail of its output and the
sandbox's notes on what it refused, stopping one, and
stopping all of a session's jobs when the session goes (or the server stops). Jobs live in
memory only: they end with their session and with the process.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from totem.clock import now_ms
from totem.process import runner
from totem.security.vault import QuietScrub

JOB_TIMEOUT_S = 3600.0
JOB_OUTPUT_CAP_BYTES = 200_000
MAX_LIVE_OUTPUT_CHARS = 100_000
MAX_RUNNING_JOBS_PER_SESSION = 10


class JobError(Exception):
    """A job that cannot start or be found; the message is for the person or the model."""


@dataclass
class Job:
    id: str
    sessionid: str
    command: str
    status: str = "running"  # running, done, failed, timedout, stopped
    exit_code: int | None = None
    started: int = field(default_factory=now_ms)
    finished: int | None = None
    live: list[str] = field(default_factory=list)
    live_chars: int = 0
    output: str | None = None  # the runner's kept output, once the job ended
    task: asyncio.Task | None = None

    def view(self) -> dict:
        return {"id": self.id, "command": self.command, "status": self.status, "output": self.current_output(),
                "exit_code": self.exit_code, "started": self.started, "finished": self.finished}

    def current_output(self) -> str:
        return self.output if self.output is not None else "".join(self.live)

    def append(self, text: str) -> None:
        # Keep the tail of the live output bounded: a chatty job must not grow memory.
        self.live.append(text)
        self.live_chars += len(text)
        while self.live_chars > MAX_LIVE_OUTPUT_CHARS and len(self.live) > 1:
            self.live_chars -= len(self.live.pop(0))


class Jobs:
    """The background jobs of every session of one Totem."""

    def __init__(self, new_id, scrubber):
        self.new_id = new_id
        self.scrubber = scrubber  # () -> the current vault.Scrubber
        self._jobs: dict[str, Job] = {}

    def start(self, sessionid: str, command: str, cwd: str, confinement=None) -> Job:
        """Start a command in the background, confined by `confinement` (sandbox.Confinement,
        None: not confined). Raises JobError when the session runs too many."""
        running = [job for job in self._jobs.values() if job.sessionid == sessionid and job.status == "running"]
        if len(running) >= MAX_RUNNING_JOBS_PER_SESSION:
            raise JobError(f"this session already runs {MAX_RUNNING_JOBS_PER_SESSION} jobs; stop one first")
        job = Job(self.new_id(), sessionid, command)
        self._jobs[job.id] = job
        job.task = asyncio.create_task(self._run(job, cwd, confinement), name=f"job {job.id}")
        return job

    async def _run(self, job: Job, cwd: str, confinement) -> None:
        scrubber = self.scrubber()
        # A key split across two chunks of output is still caught; a tail held back for that
        # shows once the job has been quiet a moment.
        stream = QuietScrub(scrubber.stream(), job.append, asyncio.get_running_loop().call_later)
        try:
            result = await runner.run_command(job.command, cwd=cwd, timeout_s=JOB_TIMEOUT_S,
                                              output_cap_bytes=JOB_OUTPUT_CAP_BYTES,
                                              on_output=lambda text: job.append(stream.feed(text)),
                                              confine=confinement.launch if confinement is not None else None)
        except asyncio.CancelledError:
            job.append(stream.flush())
            job.status = "stopped"
            raise
        except runner.CommandError as exc:
            job.status, job.output = "failed", scrubber.scrub(str(exc))
        else:
            notes = confinement.explain(result.output) if confinement is not None else []
            job.output = scrubber.scrub("\n".join([result.output.removesuffix("\n"), *notes]) if notes
                                        else result.output)
            job.exit_code = result.exit_code
            job.status = "timedout" if result.timed_out else "done" if result.exit_code == 0 else "failed"
        finally:
            stream.flush()  # the timer of a held tail, if any, is cancelled
            job.finished = now_ms()

    def list(self, sessionid: str) -> list[dict]:
        return [job.view() for job in self._jobs.values() if job.sessionid == sessionid]

    def get(self, sessionid: str, jobid: str) -> Job:
        """A job of the session. Raises JobError."""
        job = self._jobs.get(jobid)
        if job is None or job.sessionid != sessionid:
            raise JobError(f"no job {jobid} in this session")
        return job

    async def stop(self, sessionid: str, jobid: str) -> dict:
        """Stop a job (its whole process group). Raises JobError for an unknown job."""
        job = self.get(sessionid, jobid)
        if job.task is not None and not job.task.done():
            job.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job.task
        return job.view()

    async def forget_session(self, sessionid: str) -> None:
        """Stop and forget every job of a removed session."""
        for job in [job for job in self._jobs.values() if job.sessionid == sessionid]:
            await self.stop(sessionid, job.id)
            self._jobs.pop(job.id, None)

    async def stop_all(self) -> None:
        for job in list(self._jobs.values()):
            await self.stop(job.sessionid, job.id)
