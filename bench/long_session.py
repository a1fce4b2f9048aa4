"""Benchmark of a long session (issue 20): two hundred tool steps with an 8K window.

Spawns the real server (bench/startup.py's `running_server`) and, in this process, the scripted
model of bench/agent.py (`TimedModel`: it notes when each chat request was read whole and when
the last byte of its answer was written, on this process's clock) with an OpenRouter models list
that gives the model an 8192-token window and a price. The session is the one of
tests/agent/test_long_session.py: reads of 30 lines of a large file, a `seq` command every tenth
step, one read of the whole file; the model answers each compaction request (the one Totem sends
without tools) with a short summary. It measures and reports; it asserts nothing.

Figures, at steps 1, 50 and 200 (step N: the N-th answer with a tool call):
- the request that answer was for: its body in bytes as the model received it, and its size in
  tokens by Totem's own estimate (context.estimated_tokens, JSON length / CHARS_PER_TOKEN);
- server time after it: from the last byte of that answer written by the model to the next chat
  request read whole by the model (the tool run, storage, reading the history, pruning, building
  and sending the request; a compaction request when one comes next). This is the time the
  server spends between the model's final chunk of step N and its request N+1, on loopback;
- over the whole session: the median and the largest of that time, the number of compactions,
  the largest request, and the session's token totals and cost as Sessions|read sums them;
- the prefix a provider's prompt cache could reuse: of the bytes of each step's request, the
  share that repeats the previous request's leading bytes (its tools, then its messages one by
  one: a cache matches whole leading pieces), and the breaks (a request that does not start with
  the whole previous one), for the request format of each kind of provider (the same
  conversation reshaped by each kind's `request_body`): in a 128K window (CACHED_WINDOW) within
  one run of 200 reads and across 20 prompts of 10 reads in one session, against the goal; and,
  shown without it, in the 8K run above and across 20 prompts of 6 reads in a 32K window.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import tempfile

from agent import API_TIMEOUT_S, Bench, TimedModel, api
from startup import HOST, ROOT, BenchError, measured_on_server
from websockets.asyncio.client import connect as ws_connect

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.model_server import MODEL_ID, reply
from totem.agent.context import estimated_tokens
from totem.agent.kinds import KINDS, ProviderTarget

WINDOW = 8192
STEPS = 200
SHOWN_STEPS = (1, 50, 200)
BIG_READ_AT = 120  # this step reads the whole file: far more than the window holds
FILE_LINES = 2000
WHOLE = 1 << 20  # each answer leaves in one write: the server never waits for the rest of it
SUMMARY = "Summary: the person wants big.txt and the counts walked through; parts read so far are noted."
PRICE = {"prompt": "0.000003", "completion": "0.000015"}  # USD per token, as OpenRouter says it
WIDE_WINDOW = 4_000_000  # holds every step of the wide session: nothing is pruned
WIDE_STEPS = 200
WIDE_READ_LINES = 230  # about 16 KB with the line numbers
PROMPT = "Walk through big.txt and the counts, a part at a time, and tell me what you find."
PROMPTS = 20  # of the session whose prompts are compared
PROMPT_STEPS = 10  # tool steps of each of them: 200 in all
# The prefix goal is held in the window that the hosted models which cache a prefix have at
# least (Claude, GPT-4o and later, Gemini, DeepSeek: 128K and more); in 32K, the window of a
# small local model, a step's new output is about 4 % of a request, which leaves the figure
# near 95 % at best, so it is shown without the goal.
CACHED_WINDOW = 131072
SMALL_WINDOW = 32768
SMALL_PROMPT_STEPS = 6
PREFIX_TARGET = 0.95


class LongModel(TimedModel):
    """TimedModel that answers every compaction request (no tools) with a summary, whatever the
    script holds next, as a real model would."""

    async def _respond(self, request, reader, writer) -> None:
        if is_chat(request) and not is_step(request):
            self._script.appendleft(reply(SUMMARY, max_piece=WHOLE))
        await super()._respond(request, reader, writer)


class WideModel(LongModel):
    """LongModel that forgets the bodies of the requests it answered but the last: two hundred
    parsed bodies of megabytes would make this process's garbage collector, not the server,
    the time between an answer and the next request."""

    async def _respond(self, request, reader, writer) -> None:
        await super()._respond(request, reader, writer)
        if len(self.requests) >= 2:
            self.requests[-2] = dataclasses.replace(self.requests[-2], body=None, raw_body=b"")


def is_chat(request) -> bool:
    return request.method == "POST" and request.path.endswith("/chat/completions")


def is_step(request) -> bool:
    """A request of a step (with the tools), not a compaction (Totem asks for those without)."""
    return bool((request.body or {}).get("tools"))


def unmarked(value):
    """`value` without Anthropic's `cache_control` marks: they say where to cache, they are not
    what is cached (the mark on the last turn moves on at every step)."""
    if isinstance(value, list):
        return [unmarked(item) for item in value]
    if isinstance(value, dict):
        return {key: unmarked(item) for key, item in value.items() if key != "cache_control"}
    return value


def pieces(body: dict) -> list[bytes]:
    """A request as a prompt cache reads it, in order: its tools, a top-level system prompt (the
    Anthropic and Gemini forms), then each message (Gemini's `contents`)."""
    encode = lambda value: json.dumps(unmarked(value), ensure_ascii=False, sort_keys=True).encode()  # noqa: E731
    system = body.get("system") or body.get("systemInstruction")
    turns = body.get("messages") or body.get("contents") or []
    return ([encode(body["tools"])] if body.get("tools") else []) + ([encode(system)] if system else []) + [
        encode(turn) for turn in turns]


def prefix_figures(bodies: list[dict]) -> tuple[float, int]:
    """(the share of the bytes of requests 2..N that repeat the previous request's leading
    pieces, the number of requests that do not start with the whole previous one)."""
    shared = total = breaks = 0
    previous: list[bytes] = []
    for number, body in enumerate(bodies):
        current = pieces(body)
        common = 0
        while common < min(len(previous), len(current)) and previous[common] == current[common]:
            common += 1
        if number:
            shared += sum(len(piece) for piece in current[:common])
            total += sum(len(piece) for piece in current)
            breaks += common < len(previous)
        previous = current
    return (shared / total if total else 1.0), breaks


def reshaped(bodies: list[dict]) -> dict[str, list[dict]]:
    """The same requests in the body format of each kind of provider (one per distinct format)."""
    formats: dict[str, list[dict]] = {}
    seen: set = set()
    for kind in KINDS.values():
        if type(kind).request_body in seen:  # kinds that share a format are measured once
            continue
        seen.add(type(kind).request_body)
        target = ProviderTarget("bench", kind.chat_url("http://127.0.0.1:1"), MODEL_ID, kind, None, WINDOW)
        name = type(kind).request_body.__qualname__.split(".")[0]
        formats[name] = [kind.request_body(target, body["messages"], body.get("tools") or [], None) for body in bodies]
    return formats


def prefix_rows(label: str, bodies: list[dict], target: bool = True) -> list[tuple]:
    """The prefix figures of `bodies` in each request format; with `target`, against PREFIX_TARGET."""
    rows = []
    for name, shaped in reshaped(bodies).items():
        share, breaks = prefix_figures(shaped)
        rows += [(f"{label}: request bytes that repeat the previous prefix ({name} format)", share * 100, "%",
                  f">= {PREFIX_TARGET:.0%}" if target else "", (share >= PREFIX_TARGET) if target else None),
                 (f"{label}: prefix breaks ({name} format)", breaks, f"of {len(bodies) - 1}", "", None)]
    return rows


def steps_script() -> list:
    answers = []
    for step in range(STEPS):
        if step == BIG_READ_AT:
            call = ("read", {"path": "big.txt"})
        elif step % 10 == 5:
            call = ("bash", {"command": f"seq {step * 1000} {step * 1000 + 300}"})
        else:
            call = ("read", {"path": "big.txt", "offset": (step * 30) % 1900 + 1, "limit": 30})
        answers.append(reply(f"step {step}", tool_calls=[call], max_piece=WHOLE))
    return answers + [reply("done walking", max_piece=WHOLE)]


async def provider_and_project(port: int, model: LongModel, window: int, name: str,
                               project_dir: str) -> tuple[dict, dict]:
    """A provider whose one model has a `window`-token context and a price, and the project."""
    model.serve_json("GET", "/v1/models", {"data": [
        {"id": MODEL_ID, "name": "Scripted", "context_length": window, "pricing": PRICE,
         "supported_parameters": ["tools"], "architecture": {"output_modalities": ["text"]}}]})
    provider = await api(port, "providers_save", {"name": name, "kind": "openrouter", "url": model.url,
                                                  "key": "sk-or-bench-0123456789"})
    # The catalog reads the models list, and a run's window comes from what it read.
    catalog = await api(port, "providers_catalog")
    if [m["context"] for m in catalog["models"] if m["provider"]["id"] == provider["id"]] != [window]:
        raise BenchError(f"the catalog does not give the {window}-token window: {catalog}")
    return provider, await api(port, "projects_open", {"path": project_dir})


async def measure(port: int, project_dir: str) -> list[tuple]:
    async with LongModel() as model:
        provider, project = await provider_and_project(port, model, WINDOW, "Bench", project_dir)
        await api(port, "permissions_save", {"projectid": project["id"], "tool": "bash", "pattern": "seq *",
                                             "action": "allow"})
        async with ws_connect(f"ws://{HOST}:{port}/ws/", compression=None, open_timeout=API_TIMEOUT_S) as ws:
            bench = Bench(port, model, ws, project, f"{provider['id']}/{MODEL_ID}")
            await api(port, "settings_save", {"scope": "all", "key": "steps", "value": STEPS + 1})
            sessionid = await bench.new_session()
            first = len(model.requests)
            await bench.run(sessionid, *steps_script())
            session = await api(port, "sessions_read", ident=sessionid)
    if model.errors:
        raise BenchError(f"the scripted model saw bad requests: {model.errors[:3]!r}")
    chats = [request for request in model.requests[first:] if is_chat(request)]
    ends, arrivals = model.ends[-len(chats):], model.arrivals[-len(chats):]
    steps = [index for index, request in enumerate(chats) if is_step(request)]
    if len(steps) != STEPS + 1:
        raise BenchError(f"{len(steps)} step requests, not {STEPS + 1}")
    gaps = [(arrivals[index + 1] - ends[index]) / 1e6 for index in steps[:STEPS]]
    rows = []
    for shown in SHOWN_STEPS:
        request = chats[steps[shown - 1]]
        tokens = estimated_tokens(request.body["messages"], request.body.get("tools") or [])
        rows += [(f"long session: step {shown}, request body", len(request.raw_body), "bytes", "", None),
                 (f"long session: step {shown}, request, Totem's estimate", tokens, "tokens",
                  f"<= {int(WINDOW * 0.75):,} (3/4 of {WINDOW:,})", tokens <= WINDOW * 0.75),
                 (f"long session: step {shown}, server time, answer's last byte to next request",
                  gaps[shown - 1], "ms", "", None)]
    largest = max(len(request.raw_body) for request in chats)
    totals = session["tokens"]
    rows += [(f"long session: server time per step, median of {STEPS}", statistics.median(gaps), "ms", "", None),
             (f"long session: server time per step, largest of {STEPS}", max(gaps), "ms", "", None),
             ("long session: compactions", len(chats) - len(steps), "", "", None),
             ("long session: largest request body", largest, "bytes", "", None),
             ("long session: tokens summed by Sessions|read (scripted usage)", totals["input"] + totals["output"],
              "tokens", "", None),
             ("long session: cost summed by Sessions|read", totals.get("cost", "n/a"), "USD", "", None)]
    # Informative: in an 8K window each step's output is a tenth of the room, so old ones must go
    # every few steps, and each time the prefix breaks.
    rows += prefix_rows(f"long session, {STEPS} steps in {WINDOW:,}", [chats[index].body for index in steps],
                        target=False)
    return rows


async def measure_prompts(port: int, project_dir: str, window: int = CACHED_WINDOW, prompts: int = PROMPTS,
                          steps: int = PROMPT_STEPS, target: bool = True) -> list[tuple]:
    """`prompts` prompts of `steps` reads each in one session with a `window`-token window: the
    prefix across every step of the session, and from each prompt's last request to the next
    one's first."""
    label = (f"{prompts} prompts of {steps} reads, {window // 1024}K window" if prompts > 1
             else f"one run of {steps} reads, {window // 1024}K window")
    async with LongModel() as model:
        provider, project = await provider_and_project(port, model, window, f"Prompts {window}", project_dir)
        async with ws_connect(f"ws://{HOST}:{port}/ws/", compression=None, open_timeout=API_TIMEOUT_S) as ws:
            bench = Bench(port, model, ws, project, f"{provider['id']}/{MODEL_ID}")
            await api(port, "settings_save", {"scope": "all", "key": "steps", "value": steps + 1})
            sessionid = await bench.new_session()
            first = len(model.requests)
            starts = []
            for prompt in range(prompts):
                starts.append(len([r for r in model.requests[first:] if is_chat(r) and is_step(r)]))
                script = [reply(f"p{prompt} s{step}", tool_calls=[("read", {
                    "path": "big.txt", "offset": (prompt * steps + step) * 30 % 1900 + 1, "limit": 30})],
                    max_piece=WHOLE) for step in range(steps)]
                await bench.run(sessionid, *script, reply(f"prompt {prompt} done", max_piece=WHOLE))
    if model.errors:
        raise BenchError(f"the scripted model saw bad requests: {model.errors[:3]!r}")
    bodies = [request.body for request in model.requests[first:] if is_chat(request) and is_step(request)]
    rows = prefix_rows(label, bodies, target)
    if prompts > 1:
        pairs = [prefix_figures([bodies[index - 1], bodies[index]]) for index in starts[1:]]
        share, breaks = statistics.mean(share for share, _ in pairs), sum(broken for _, broken in pairs)
        rows += [(f"{label}: next prompt's first request repeats the last one's prefix", share * 100, "%", "", None),
                 (f"{label}: breaks between prompts", breaks, f"of {prompts - 1}", "", None)]
    return rows


async def measure_wide(port: int, project_dir: str) -> list[tuple]:
    """WIDE_STEPS reads of about 16 KB each in a window that holds them all: nothing is pruned,
    so every step's history is longer than the last; the server time at the last step against
    the second says whether a step's cost grows with the session."""
    async with WideModel() as model:
        provider, project = await provider_and_project(port, model, WIDE_WINDOW, "Wide", project_dir)
        async with ws_connect(f"ws://{HOST}:{port}/ws/", compression=None, open_timeout=API_TIMEOUT_S) as ws:
            bench = Bench(port, model, ws, project, f"{provider['id']}/{MODEL_ID}")
            await api(port, "settings_save", {"scope": "all", "key": "steps", "value": WIDE_STEPS + 1})
            sessionid = await bench.new_session()
            first = len(model.requests)
            script = [reply(f"step {step}", tool_calls=[("read", {"path": "big.txt", "offset": (step * 7) % 1700 + 1,
                                                                   "limit": WIDE_READ_LINES})], max_piece=WHOLE)
                      for step in range(WIDE_STEPS)]
            await bench.run(sessionid, *script, reply("done", max_piece=WHOLE))
    chats = [request for request in model.requests[first:] if is_chat(request)]
    ends, arrivals = model.ends[-len(chats):], model.arrivals[-len(chats):]
    gaps = [(arrivals[index + 1] - ends[index]) / 1e6 for index in range(len(chats) - 1)]
    # Medians of five steps: a machine shared with other work stalls a step now and then.
    second, last = statistics.median(gaps[1:6]), statistics.median(gaps[-5:])
    return [(f"long session, no pruning: {WIDE_STEPS} reads of ~16 KB, last request body", len(chats[-1].raw_body),
             "bytes", "", None),
            ("long session, no pruning: tool outputs pruned in the last request",
             sum(1 for m in chats[-1].body["messages"] if m["role"] == "tool" and "removed to fit" in m["content"]),
             "", "", None),
            ("long session, no pruning: server time at step 2 (median of steps 2-6)", second, "ms", "", None),
            (f"long session, no pruning: server time at step {WIDE_STEPS} (median of the last 5)", last, "ms",
             "<= 2 x step 2", last <= 2 * second)]


def main() -> list[tuple]:
    with tempfile.TemporaryDirectory(prefix="totem-bench-project-") as project_dir:
        with open(os.path.join(project_dir, "big.txt"), "w", encoding="utf-8") as handle:
            handle.writelines(f"line {n} " + "z" * 60 + "\n" for n in range(1, FILE_LINES + 1))
        folder = os.path.realpath(project_dir)
        return measured_on_server(lambda server: measure(server.port, folder),
                                  lambda server: measure_wide(server.port, folder),
                                  lambda server: measure_prompts(server.port, folder, prompts=1, steps=STEPS),
                                  lambda server: measure_prompts(server.port, folder),
                                  lambda server: measure_prompts(server.port, folder, SMALL_WINDOW,
                                                                 steps=SMALL_PROMPT_STEPS, target=False))


if __name__ == "__main__":
    for row in main():
        print(json.dumps(row))
