"""What the model sees: the system prompt, the project's instructions and the history.

Owns turning stored messages and parts into the chat messages of a request (in the OpenAI
shape; each kind's adapter reshapes them for its wire) in the order they entered the
conversation; fitting them into the model's window (pruning, cutting, the compaction request);
the attachments of a run encoded once; and the envelope that marks tool results and
attachments as untrusted data: its tags carry a random marker of the session, which the data
cannot contain (every occurrence is removed), so no text can end the envelope or forge another;
the instructions (instructions.py) a tool part carries follow its result, outside the envelope.
It reads attachments (and, through instructions.py, instruction files); it never calls a model
or changes anything.
"""

from __future__ import annotations

import asyncio
import base64
import html
import json
import os
import re
import secrets
from typing import Any

from totem.agent.instructions import instructions_block, system_instructions
from totem.rows import MessageRow

PROMPTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "prompts")
MAX_INLINE_ATTACHMENT_BYTES = 256 * 1024
# An attachment this large is encoded on a thread, not on the event loop.
ENCODE_THREAD_BYTES = 1024 * 1024
IMAGE_TYPES = frozenset(("image/png", "image/jpeg", "image/gif", "image/webp"))
# 64 random bits per session, chosen at its first run and kept (store: sessions.marker), so that
# an earlier result reads the same in every later request; text that holds it loses it anyway
# (MARKER_REMOVED), so knowing it does not open the envelope.
MARKER_BYTES = 8
MARKER_PATTERN = re.compile(r"[0-9a-f]{16,}")
# What an occurrence of the marker inside the data becomes; it has no hex digits in a row, so
# no replacement can join its neighbours into the marker again.
MARKER_REMOVED = "[marker removed]"

# One part of a user message's content: {"type": "text", ...} or {"type": "image_url", ...}.
ContentItem = dict[str, Any]


def load_prompt(name: str) -> str:
    with open(os.path.join(PROMPTS_DIR, name), encoding="utf-8") as handle:
        return handle.read()


def new_marker() -> str:
    """A fresh envelope marker, for a session's first run."""
    return secrets.token_hex(MARKER_BYTES)


def envelope(source: str, text: str, marker: str) -> str:
    """Mark text as untrusted data inside tags that carry the session's `marker`.

    `<data-MARKER source="..." trust="untrusted">`, the text, `</data-MARKER>`. Only a tag
    with the marker ends the envelope, and the marker cannot occur inside: every occurrence
    of it in the text or the source, in any case, is replaced (MARKER_REMOVED holds no hex
    digit run that could rebuild it). So `</data>`, `</DATA >`, another `<data ...
    trust="trusted">` or a whole envelope with another marker stay data, and everything else of the
    text reaches the model byte for byte. The source is escaped as an attribute value.

    Raises ValueError for a marker that is not 16 or more lowercase hex characters.
    """
    if not MARKER_PATTERN.fullmatch(marker):
        raise ValueError("the envelope marker must be a hex string of 16 characters or more")
    scrub = re.compile(re.escape(marker), re.IGNORECASE)
    safe_text = scrub.sub(MARKER_REMOVED, text)
    safe_source = html.escape(scrub.sub(MARKER_REMOVED, " ".join(source.split())), quote=True)
    return (f'<data-{marker} source="{safe_source}" trust="untrusted">\n{safe_text}\n'
            f'</data-{marker}>')


async def system_message(template: str, root: str, marker: str, personal: str = "") -> tuple[dict, list[str]]:
    """The system prompt with the run's envelope marker and the instructions of the person
    (`personal`, a file: "" for none) and of the project's root (instructions.py), and the
    sources it carries."""
    text = template.replace("{marker}", marker).replace("{root}", root)
    own, project = await asyncio.to_thread(system_instructions, root, personal)
    if own is not None:
        text += f"\n\nThe person's own instructions ({own['source']}, for every project):\n{own['text']}"
    if project is not None:
        text += (f"\n\nProject instructions ({project['source']}, written by the project's developers):\n"
                 + project["text"])
    return {"role": "system", "content": text}, [item["source"] for item in (own, project) if item is not None]


class RunAttachments:
    """The attachments of a run's history as the model sees them, by attachment id: each is read
    from the store and encoded once for the run's life, not at every step (issue 11: a 4 MB image
    encoded again at each step cost 41-58 ms a step). A text file's envelope carries the session's
    marker, the same at every step, so what is kept stays right until the run ends."""

    def __init__(self) -> None:
        self._items: dict[str, ContentItem | None] = {}
        self.encoded = 0  # attachments encoded so far, each once

    async def by_message(self, store, history: list[MessageRow], marker: str) -> dict[str, list[ContentItem]]:
        """The content of the attachments of each user message of `history`, by message id; an
        attachment that is no longer stored is left out."""
        result = {}
        for message in history:
            files = message["data"].get("attachments") if message["role"] == "user" else None
            if files:
                items = [await self._item(store, file["id"], marker) for file in files]
                result[message["id"]] = [item for item in items if item is not None]
        return result

    async def _item(self, store, attachmentid: str, marker: str) -> ContentItem | None:
        if attachmentid not in self._items:
            info = await store.attachment_info(attachmentid)
            # A file that is only named (not an image, too big to inline) is never read back.
            row = None if info is None else info | {"data": None} if _only_named(info) else (
                await store.get_attachment(attachmentid))
            item = None
            if row is not None and row["data"] is None:
                item = attachment_content(row, marker)
                self.encoded += 1
            elif row is not None:
                if len(row["data"]) >= ENCODE_THREAD_BYTES:
                    item = await asyncio.to_thread(attachment_content, row, marker)
                else:
                    item = attachment_content(row, marker)
                self.encoded += 1
            self._items[attachmentid] = item
        return self._items[attachmentid]


def _only_named(info: dict) -> bool:
    return info["mime"] not in IMAGE_TYPES and info["size"] > MAX_INLINE_ATTACHMENT_BYTES


def attachment_content(attachment: dict, marker: str) -> ContentItem:
    """An attachment as a part of the user message: an image as a data URL, a small text file
    inline in an envelope, anything else as a line that names it (`data` None: it is only
    named, and its size is `size`)."""
    mime, data, name = attachment["mime"], attachment["data"], attachment["name"]
    if data is None:
        return _named(name, mime, attachment["size"])
    if mime in IMAGE_TYPES:
        url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
        return {"type": "image_url", "image_url": {"url": url}}
    if len(data) <= MAX_INLINE_ATTACHMENT_BYTES:
        try:
            return {"type": "text", "text": envelope(f"attachment {name}", data.decode("utf-8"), marker)}
        except UnicodeDecodeError:
            pass
    return _named(name, mime, len(data))


def _named(name: str, mime: str, size: int) -> ContentItem:
    return {"type": "text", "text": f"[attached file {name} ({mime}, {size} bytes) is not text and is not shown]"}


def user_message(message: MessageRow, attachments: list[ContentItem], marker: str | None = None) -> dict:
    """The person's message: its text, then what Totem added to it (the Forge documentation's
    `knowledge` parts, as untrusted data), then its attachments."""
    text = "".join(part["text"] for part in message["parts"] if part["kind"] == "text")
    if marker is not None:
        for part in message["parts"]:
            if part["kind"] == "knowledge" and part["text"]:
                source = f"forge documentation: {part['data'].get('source', '')}"
                text += "\n\nFrom the Total.js documentation (Forge), for reference:\n" + envelope(
                    source, part["text"], marker)
    if not attachments:
        return {"role": "user", "content": text}
    content: list[ContentItem] = [{"type": "text", "text": text}] if text else []
    return {"role": "user", "content": content + attachments}


def call_arguments(data: dict) -> str:
    """The arguments of a stored tool call as JSON text. A call's arguments are stored once
    (issue 11: a write's content was kept twice): parsed as `input`, or as the text the model
    sent when it did not parse (kept, so that the model sees its mistake). Empty arguments are
    "{}": providers refuse an empty string (fixtures/providers/openrouter.md)."""
    arguments = data.get("arguments")
    if isinstance(arguments, str) and arguments.strip():
        return arguments
    if isinstance(data.get("input"), dict) and data["input"]:
        return json.dumps(data["input"], ensure_ascii=False)
    return "{}"


def assistant_messages(message: MessageRow, marker: str) -> list[dict]:
    """An assistant step: its text and tool calls (with the provider's `reasoning_details` when it
    sent some, to go back with them), then one tool message per call, its result in an envelope
    with the run's marker."""
    text = "".join(part["text"] for part in message["parts"] if part["kind"] == "text")
    tools = [part for part in message["parts"] if part["kind"] == "tool" and not part["data"].get("check")]
    checks = [part for part in message["parts"] if part["kind"] in ("tool", "validation") and part["data"].get("check")]
    answer: dict = {"role": "assistant", "content": text}
    if tools:
        answer["tool_calls"] = [{"id": part["data"]["callid"], "type": "function",
                                 "function": {"name": part["data"]["tool"],
                                              "arguments": call_arguments(part["data"])}}
                                for part in tools]
    details = (message.get("data") or {}).get("reasoning_details")
    if isinstance(details, list) and details:
        answer["reasoning_details"] = details
    result = [answer]
    for part in tools:
        output = part["data"].get("output")
        if output is None:
            output = part["data"].get("error") or f"the call ended with status {part['status']}"
        given = part["data"].get("instructions")
        result.append({"role": "tool", "tool_call_id": part["data"]["callid"],
                       "content": envelope(f"tool {part['data']['tool']}", output, marker)
                       + (instructions_block(given) if isinstance(given, list) and given else "")})
    if checks and tools:  # what the project's checks said of the step's edits (checks.py)
        result.append({"role": "user", "content": checks_note(checks, marker)})
    return result


def checks_note(checks: list[Any], marker: str) -> str:
    """The note after a step's results: each check of its edits, what became of it, and its
    output (a command's, or the problems the Total.js check found) as data in the envelope."""
    lines = ["[The project's checks after your edits; fix what they found, or say why not:]"]
    for part in checks:
        data = part["data"]
        result = data.get("result") if isinstance(data.get("result"), dict) else {}
        problems = data.get("problems") if part["kind"] == "validation" else None
        if isinstance(problems, list):
            state = f"found {len(problems)} problem{'s' if len(problems) != 1 else ''}" if problems else "passed"
        elif part["status"] == "denied":
            state = f"not run: {data.get('error', 'refused')}"
        elif part["status"] != "done":
            state = f"failed: {data.get('error', 'the check did not run to its end')}"
        elif result.get("timed_out"):
            state = "stopped at its time limit"
        else:
            state = "passed" if result.get("exit_code") == 0 else f"found problems (exit {result.get('exit_code')})"
        lines.append(f"- {data['check']} on {', '.join(data.get('files') or [])}: {state}")
        if problems:
            lines.append(envelope(f"check {data['check']}", "\n".join(map(problem_line, problems)), marker))
        elif part["status"] == "done" and result.get("exit_code") != 0 and data.get("output"):
            lines.append(envelope(f"check {data['check']}", str(data["output"]), marker))
    return "\n".join(lines)


def problem_line(problem: Any) -> str:
    """`file:line: severity: message (rule)` of one problem of a validation part."""
    if not isinstance(problem, dict):
        return str(problem)
    place = ":".join(str(problem[key]) for key in ("file", "line") if key in problem)
    return (f"{place}: " if place else "") + f"{problem.get('severity', 'warning')}: {problem.get('message', '')}" + (
        f" ({problem['rule']})" if problem.get("rule") else "")


def conversation_order(history: list[MessageRow], current: str | None = None) -> list[MessageRow]:
    """The messages in the order they entered the conversation. A prompt queued while a run
    went on was stored then, among that run's steps, but it entered when its own run began: it
    moves to just after the last answer stored before the first answer that names it
    (`data.prompt`), or before the end when it is the `current` run's prompt and nothing answers
    it yet (issue 20); so the model never reads it before the steps that came ahead of it, and
    messages sent after those steps stay after it."""
    first_answer: dict[str, int] = {}
    for index, message in enumerate(history):
        named = (message.get("data") or {}).get("prompt") if message["role"] == "assistant" else None
        if isinstance(named, str):
            first_answer.setdefault(named, index)
    after: dict[int, list[MessageRow]] = {}  # index of an answer -> the prompts that move behind it
    moving = set()
    for index, message in enumerate(history):
        if message["role"] != "user" or (message["id"] not in first_answer and message["id"] != current):
            continue
        limit = first_answer.get(message["id"], len(history))
        anchor = next((i for i in range(limit - 1, index, -1) if history[i]["role"] == "assistant"), None)
        if anchor is not None:
            after.setdefault(anchor, []).append(message)
            moving.add(message["id"])
    if not moving:
        return history
    ordered = []
    for index, message in enumerate(history):
        if message["id"] not in moving:
            ordered.append(message)
        ordered.extend(after.get(index, ()))
    return ordered


def history_messages(history: list[MessageRow], attachments: dict[str, list[ContentItem]], marker: str,
                     current: str | None = None, converted: dict[str, list[dict]] | None = None) -> list[dict]:
    """Chat messages for the stored history, in the OpenAI shape that every kind's adapter starts
    from (`attachments`: the content of each user message's files, by message id, as
    `RunAttachments.by_message` gives them; `current`: the id of the running prompt's message),
    in the order of conversation_order().

    Every envelope carries the same `marker`, that of the session, in every request of every
    run: a result reads the same bytes each time it is sent, so a provider's cache of the
    request's beginning stays good from one run to the next.
    `converted` keeps the chat messages of each stored message for the next steps of the run
    (a stored message does not change while its run goes on), so a step converts only what
    the last one added.
    """
    messages = []
    # A compaction that did not end (aborted, failed, or the server stopped) is dropped: its
    # half summary is neither applied nor sent as an answer.
    history = [message for message in conversation_order(history, current)
               if not (message.get("data") or {}).get("compacting")]
    compacted = max((index for index, message in enumerate(history)
                     if message["role"] == "assistant" and (message.get("data") or {}).get("compaction")), default=None)
    if compacted is not None:
        # Older messages are replaced by the summary; the person's last words before it stay whole.
        summary = "".join(part["text"] for part in history[compacted]["parts"] if part["kind"] == "text")
        messages.append({"role": "user", "content": COMPACTED_INTRO + summary})
        later = history[compacted + 1:]
        if not any(message["role"] == "user" for message in later):
            last_user = next((m for m in reversed(history[:compacted]) if m["role"] == "user"), None)
            if last_user is not None:
                later = [last_user, *later]
        history = later
    for message in history:
        done = converted.get(message["id"]) if converted is not None else None
        if done is None:
            done = _chat_messages(message, attachments, marker)
            if converted is not None:
                converted[message["id"]] = done
        messages.extend(done)
    return messages


def _chat_messages(message: MessageRow, attachments: dict[str, list[ContentItem]], marker: str) -> list[dict]:
    if message["role"] == "user":
        return [user_message(message, attachments.get(message["id"], []), marker)]
    if message["role"] == "assistant" and any(part["kind"] in ("text", "tool") for part in message["parts"]):
        return assistant_messages(message, marker)
    return []


# -- fitting the window ---------------------------------------------------------------------------

# A request is kept under this share of the model's window: the rest is for the answer.
WINDOW_SHARE = 0.75
# Characters per token when a request's size is estimated from its JSON (a cautious average:
# code and JSON run shorter than prose).
CHARS_PER_TOKEN = 3.5
# What an image of a prompt counts for, in tokens (providers count about this for a large one).
IMAGE_TOKENS = 1600
# The tool results of this many latest assistant steps are never pruned: the model is using them.
KEPT_STEPS = 2
PRUNED_NOTE = "[{tool} output ({size} chars) removed to fit the context window; call {tool} again if needed]"
# Old outputs are pruned in batches: when a request passes its budget, the oldest outputs go
# until it is this share of the budget under it (or every prunable one goes, when what cannot be
# pruned leaves less room than that), and the same ones stay pruned until the conversation has
# outgrown that room again. A provider's prompt cache reuses a request's prefix only while it
# stays the same bytes: each batch breaks it once, where the first newly pruned output was.
# The boundary is replayed from the conversation's own steps (_pruned_batch), so every step and
# every run of the session draws it in the same place. A deeper batch breaks less often but
# leaves the model less; 0.6 is the shallowest past which a deeper one gains nothing in
# bench/long_session.py's 20 prompts of a session in a 32K window (95.1 % of request bytes
# repeating the previous prefix; 94.6 % at 0.45, 89.8 % at 0.15), where a batch of 0.6 already
# prunes every output it may.
PRUNE_BATCH_SHARE = 0.6
# A latest output that alone takes more than this share of the request's budget is cut to fit
# (its middle; at least MIN_CUT_KEEP_CHARS kept, with the envelope's tags) before the conversation
# is compacted; smaller ones stay whole, and compaction makes the room.
OVERSIZED_SHARE = 0.5
MIN_CUT_KEEP_CHARS = 2000
CUT_MARGIN_CHARS = 64
CUT_NOTE = ("[{removed} of the {size} chars of this {tool} output were cut from its middle to fit the context "
            "window; ask for a smaller part (read with offset and limit, filter a command's output) to see them]")


class ContextFull(Exception):
    """The request passes the window even with every old tool output removed."""



def sent_messages(body: dict) -> list:
    """The conversation of a request body of any kind: `messages` (OpenAI, Ollama, Anthropic)
    or `contents` (Gemini), for an estimate of its size."""
    return body.get("messages") or body.get("contents") or []


def estimated_tokens(messages: list[dict], tools: list[dict], sizes: Sizes | None = None) -> int:
    """The size of a request in tokens, from the length of its JSON (counted, not built: a
    request may carry megabytes of attachments, and this runs at every step). With `sizes`, the
    size of a message already counted is not counted again."""
    if sizes is None:
        return int((_json_size(messages) + _json_size(tools)) / CHARS_PER_TOKEN) + 1
    counted = 2 + sum(sizes.of(message) + 1 for message in messages)
    # The tools are new objects at every step, and a few KB: their JSON is quicker than a walk.
    return int((counted + len(json.dumps(tools, ensure_ascii=False))) / CHARS_PER_TOKEN) + 1


class Sizes:
    """The JSON size of each chat message of a run, counted once: a run's history repeats its
    messages at every step. Each entry holds its message, so its id stays its own."""

    def __init__(self) -> None:
        self._sizes: dict[int, tuple[dict, int]] = {}

    def of(self, message: dict) -> int:
        entry = self._sizes.get(id(message))
        if entry is not None and entry[0] is message:
            return entry[1]
        size = _json_size(message)
        self._sizes[id(message)] = (message, size)
        return size


def _json_size(value) -> int:
    """About the length of `value` as JSON: its texts, keys and punctuation."""
    if isinstance(value, str):
        if value.startswith("data:image/"):  # a model counts an image by its size, not its base64
            return int(IMAGE_TOKENS * CHARS_PER_TOKEN)
        return len(value) + 2
    if isinstance(value, dict):
        return 2 + sum(len(key) + 4 + _json_size(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return 2 + sum(_json_size(item) + 1 for item in value)
    return len(str(value))


def fit_window(messages: list[dict], tools: list[dict], window: int, known: bool = True,
               sizes: Sizes | None = None, batch_share: float = PRUNE_BATCH_SHARE) -> tuple[list[dict], int]:
    """`(messages, pruned)`: the request under WINDOW_SHARE of `window`. Old tool outputs (never
    the user's messages, never the latest KEPT_STEPS steps) are replaced by a note that says what
    was removed and how to get it again, oldest first; when that is not enough and the window is
    `known`, the latest outputs that alone take more than OVERSIZED_SHARE of the budget, largest
    first, lose their middle (cut_output), down to MIN_CUT_KEEP_CHARS each: one output larger
    than the window (a whole file, a long log) must not cost a compaction of the whole
    conversation, which would lose it anyway, nor a compaction at every step (issue 20).
    `pruned` counts the outputs removed or cut. Raises ContextFull when all that is not enough
    and the window is `known` (a guessed window prunes, but leaves the verdict to the model)."""
    budget = int(window * WINDOW_SHARE)
    total = estimated_tokens(messages, tools, sizes)
    if total <= budget:
        return messages, 0
    steps = [index for index, message in enumerate(messages) if message.get("role") == "assistant"]
    protected_from = steps[-KEPT_STEPS] if len(steps) >= KEPT_STEPS else 0
    names = tool_names(messages)
    fitted = list(messages)
    pruned = 0
    for index, note in _pruned_batch(fitted, tools, protected_from, names, budget, budget * batch_share, sizes):
        total -= int((len(fitted[index]["content"]) - len(note)) / CHARS_PER_TOKEN)
        fitted[index] = dict(fitted[index]) | {"content": note}
        pruned += 1
    if pruned and total <= budget:
        return fitted, pruned
    total = estimated_tokens(fitted, tools)
    if total > budget and known:
        oversized = budget * OVERSIZED_SHARE * CHARS_PER_TOKEN
        latest = sorted((index for index in range(protected_from, len(fitted))
                         if fitted[index].get("role") == "tool" and isinstance(fitted[index].get("content"), str)
                         and len(fitted[index]["content"]) > oversized),
                        key=lambda index: -len(fitted[index]["content"]))
        for index in latest:
            content = fitted[index]["content"]
            keep = len(content)
            while total > budget and keep > MIN_CUT_KEEP_CHARS:
                # What is over, and room for the note: the rounding of the estimate may ask for a second cut.
                keep = max(MIN_CUT_KEEP_CHARS, min(keep, len(content) - len(CUT_NOTE) - CUT_MARGIN_CHARS)
                           - int((total - budget) * CHARS_PER_TOKEN) - CUT_MARGIN_CHARS)
                cut = cut_output(content, keep, names.get(index, "tool"))
                if len(cut) >= len(fitted[index]["content"]):
                    break  # too short to gain from a cut
                fitted[index] = dict(fitted[index]) | {"content": cut}
                total = estimated_tokens(fitted, tools)
            if fitted[index]["content"] is not content:
                pruned += 1
            if total <= budget:
                return fitted, pruned
    if total <= budget or not known:
        return fitted, pruned
    raise ContextFull(f"the conversation needs about {total} tokens, more than {budget} of the model's "
                      f"{window}-token window, even with {pruned} tool outputs removed or cut; load the "
                      "model with a bigger context window or choose one that has it, fork the session "
                      "from an earlier message, or start a new one")


def tool_names(messages: list[dict]) -> dict[int, str]:
    """The tool of each tool message, by its index: the call of the assistant message before it
    with its id (ids are only unique within one answer: some servers number calls from 0 in
    each, so a table of the whole conversation would name one call by another's tool)."""
    names: dict[int, str] = {}
    calls: dict[str, str] = {}
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            calls = {call["id"]: call["function"]["name"] for call in message.get("tool_calls") or ()}
        elif message.get("role") == "tool":
            names[index] = calls.get(str(message.get("tool_call_id")), "tool")
    return names


def _pruned_batch(messages: list[dict], tools: list[dict], before: int, names: dict[int, str], budget: int,
                  batch: float, sizes: Sizes | None) -> list[tuple[int, str]]:
    """(index, note) of the old tool outputs to prune, oldest first, as the conversation's own
    steps decided them: replayed from its start, each request point (before each answer, and
    now) that passed the `budget` moved the boundary on to free `batch` tokens more than it
    needed (PRUNE_BATCH_SHARE), or to every output it could prune when the room left was
    smaller than that (prune_boundary). So the same history prunes the same outputs at every
    step and in every run, and a boundary moves only when the conversation has outgrown it:
    never one output per step, however little room what cannot be pruned leaves."""
    candidates: list[tuple[int, str, float]] = []
    for index in range(before):
        message = messages[index]
        content = message.get("content") if message.get("role") == "tool" else None
        if not isinstance(content, str):
            continue
        note = PRUNED_NOTE.format(tool=names.get(index, "tool"), size=len(content))
        if len(note) < len(content):
            candidates.append((index, note, (len(content) - len(note)) / CHARS_PER_TOKEN))
    freed = [0.0]  # freed[k]: the tokens the oldest k candidates free
    for _index, _note, saving in candidates:
        freed.append(freed[-1] + saving)
    size = sizes.of if sizes is not None else _json_size
    counted = 2 + len(json.dumps(tools, ensure_ascii=False))
    answers = 0
    taken = reachable = 0  # the boundary (candidates pruned), and the candidates a point may prune
    steps = [index for index, message in enumerate(messages) if message.get("role") == "assistant"]
    for point in range(len(messages) + 1):
        if point == len(messages) or messages[point].get("role") == "assistant":
            # The request made here held messages[:point]; it could prune up to its own protected steps.
            protect = steps[answers - KEPT_STEPS] if answers >= KEPT_STEPS else 0
            while reachable < len(candidates) and candidates[reachable][0] < protect:
                reachable += 1
            taken = prune_boundary(freed, taken, counted / CHARS_PER_TOKEN - budget, batch, reachable)
            answers += point < len(messages)
        if point < len(messages):
            counted += size(messages[point]) + 1
    return [(index, note) for index, note, _saving in candidates[:taken]]


def prune_boundary(freed: list[float], taken: int, needed: float, batch: float, reachable: int | None = None) -> int:
    """How many of the oldest prunable outputs a request prunes: `taken`, the boundary of the
    requests before it, while that frees the `needed` tokens; else the fewest that free
    `needed` plus `batch` more, or all it may prune (the first `reachable`; `freed[k]` is what
    the oldest k free) when the room left is smaller. Pruning all then, not one more at every
    step, is what keeps the prefix once what cannot be pruned fills most of the window."""
    last = len(freed) - 1 if reachable is None else reachable
    if needed <= freed[taken]:
        return taken
    return next((count for count in range(taken, last + 1) if freed[count] >= needed + batch), last)


def cut_output(content: str, keep: int, tool: str) -> str:
    """A tool message's content with about `keep` characters left: its head (two thirds, with
    the envelope's opening tag) and its tail (a third, with the closing tag), the middle replaced
    by a mark, and CUT_NOTE after the envelope, outside the data: what was cut and how to see it."""
    head, tail = content[:keep * 2 // 3], content[len(content) - keep // 3:]
    note = CUT_NOTE.format(tool=tool, removed=len(content) - len(head) - len(tail), size=len(content))
    return f"{head}\n[…]\n{tail}\n{note}"


COMPACTED_INTRO = ("[The older part of this conversation was compacted to fit the context window. Its summary "
                   "follows; the messages after it are whole.]\n\n")
COMPACTION_INSTRUCTIONS = (
    "Summarize the conversation below so that the work can go on from the summary alone. Keep: the person's "
    "goal and requests, the decisions made, the files read or changed (with paths), what was found, what is "
    "done and what is still open. Be concise; no preamble.")
TRANSCRIPT_OUTPUT_CHARS = 600  # of each tool output, in the transcript to summarize


def compaction_messages(messages: list[dict], window: int) -> list[dict]:
    """The request that asks the model for a summary of `messages` (the system message left
    out), as a transcript cut to fit half the window (its newest part kept)."""
    lines = []
    for message in messages[1:]:
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(item.get("text", "[image]") for item in content if isinstance(item, dict))
        content = content or ""
        if role == "tool":
            content = content[:TRANSCRIPT_OUTPUT_CHARS] + ("…" if len(content) > TRANSCRIPT_OUTPUT_CHARS else "")
        for call in message.get("tool_calls") or ():
            content += f"\n[calls {call['function']['name']} {call['function']['arguments'][:300]}]"
        lines.append(f"{role}: {content}")
    transcript = "\n\n".join(lines)
    room = int(window * WINDOW_SHARE * CHARS_PER_TOKEN / 2)
    if len(transcript) > room:
        transcript = "[…the oldest part is left out…]\n" + transcript[-room:]
    return [{"role": "system", "content": COMPACTION_INSTRUCTIONS}, {"role": "user", "content": transcript}]
