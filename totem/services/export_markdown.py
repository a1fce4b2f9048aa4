"""A session's export document (services/exports.py) as Markdown for people to read: the
person's and the assistant's turns, reasoning quoted, each tool call with its input, its output
trimmed to MAX_OUTPUT_CHARS and MAX_OUTPUT_LINES, its error and its permission decision, and
where a run ended. Pure: it reads the document, which is already scrubbed.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

__all__ = ["MAX_OUTPUT_CHARS", "MAX_OUTPUT_LINES", "render_markdown"]

MAX_OUTPUT_CHARS = 2000
MAX_OUTPUT_LINES = 40
BACKTICKS = re.compile(r"`+")


def render_markdown(document: dict[str, Any]) -> str:
    lines = [f"# {_one_line(document['name'])}", ""]
    status = document["status"] + (f" ({_one_line(document['error'])})" if document.get("error") else "")
    lines += [f"- Mode: {document['mode']}", f"- Model: {document.get('model') or 'none'}",
              f"- Created: {_time(document['created'])}", f"- Exported: {_time(document.get('exported'))}",
              f"- Status: {status}"]
    for note in document.get("notes") or ():
        lines.append(f"- {note}")
    if document.get("todos"):
        lines += ["", "Tasks:", ""]
        lines += [f"- [{'x' if item.get('status') == 'done' else ' '}] {_one_line(item.get('text', ''))}"
                  for item in document["todos"]]
    for message in document["messages"]:
        lines += ["", *_message(message)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _message(message: dict[str, Any]) -> list[str]:
    who = "You" if message["role"] == "user" else "Assistant"
    if message["role"] != "user" and message.get("model"):
        who += f" ({message['model']})"
    lines = [f"## {who} · {_time(message['created'])}", ""]
    for part in message["parts"]:
        lines += [*_part(part), ""]
    for item in message.get("attachments") or ():
        lines.append(f"- File {item['name']} ({item['mime']}, {item['size']} bytes)"
                     + (f": {item['note']}" if item.get("note") else ""))
    data = message.get("data") or {}
    if data.get("ended"):
        lines.append(f"*The run ended: {data['ended']}" + (f": {_one_line(data['error'])}*" if data.get("error")
                                                           else "*"))
    return lines


def _part(part: dict[str, Any]) -> list[str]:
    kind, text = part["kind"], part["text"]
    if kind == "text":
        return [text] if part["status"] == "done" else [text, "", f"*({part['status']})*"]
    if kind == "reasoning":
        return ["> **Reasoning**", ">", *[f"> {line}" for line in text.splitlines()]]
    if kind == "tool":
        return _tool(part)
    lines = [f"**{kind}** · {part['status']}"]
    if text:
        lines += ["", text]
    if part["data"]:
        lines += ["", *_fenced(json.dumps(part["data"], indent=2, ensure_ascii=False), "json")]
    return lines


def _tool(part: dict[str, Any]) -> list[str]:
    data = part["data"]
    lines = [f"**Tool `{data.get('tool', '?')}`** · {part['status']}"]
    decision = data.get("decision")
    if isinstance(decision, dict):
        lines += ["", f"Decision: {_decision(decision)}"]
    if isinstance(data.get("input"), dict):
        shown = json.dumps(data["input"], indent=2, ensure_ascii=False)
    else:
        shown = data.get("arguments") if isinstance(data.get("arguments"), str) else ""
    if shown:
        lines += ["", "Input:", "", *_fenced(shown, "json")]
    if isinstance(data.get("output"), str):
        output, note = _trimmed(data["output"])
        lines += ["", f"Output{note}:", "", *_fenced(output)]
    if isinstance(data.get("error"), str):
        lines += ["", "Error:", "", *_fenced(data["error"])]
    return lines


def _decision(decision: dict[str, Any]) -> str:
    words = str(decision.get("action", "?"))
    if decision.get("by") == "person":
        words += f" by the person ({decision.get('reply', 'replied')})"
    rule = decision.get("rule")
    if isinstance(rule, dict):
        words += f", rule {rule.get('action')} {rule.get('tool')} `{rule.get('pattern')}` ({rule.get('layer')})"
    if decision.get("reason"):
        words += f": {_one_line(str(decision['reason']))}"
    return words


def _trimmed(output: str) -> tuple[str, str]:
    """The start of an output and the note that says how much of it that is."""
    lines = output.splitlines()
    shown = "\n".join(lines[:MAX_OUTPUT_LINES])[:MAX_OUTPUT_CHARS]
    if len(shown) >= len(output.rstrip("\n")):
        return output, ""
    return shown, f" (the first {len(shown)} of {len(output)} characters)"


def _fenced(text: str, info: str = "") -> list[str]:
    """A code block whose fence is longer than any run of backticks inside it."""
    fence = "`" * max(3, max((len(run) for run in BACKTICKS.findall(text)), default=0) + 1)
    return [fence + info, text.rstrip("\n"), fence]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _time(ms: Any) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):  # not a time this computer can show
        return "unknown"
