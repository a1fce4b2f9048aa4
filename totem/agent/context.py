"""What the model sees: the system prompt, the project's instructions and the history.

Owns turning stored messages and parts into the chat messages of a request, and the envelope
that marks tool results and attachments as untrusted data. It reads AGENTS.md and attachments;
it never calls a model or changes anything.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os

PROMPTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "prompts")
AGENTS_FILE = "AGENTS.md"
MAX_AGENTS_BYTES = 32 * 1024
MAX_INLINE_ATTACHMENT_BYTES = 256 * 1024
IMAGE_TYPES = frozenset(("image/png", "image/jpeg", "image/gif", "image/webp"))


def load_prompt(name: str) -> str:
    with open(os.path.join(PROMPTS_DIR, name), encoding="utf-8") as handle:
        return handle.read()


def envelope(source: str, text: str) -> str:
    """Mark text as untrusted data; a closing tag inside cannot end the envelope early."""
    safe = text.replace("</data", "<\\/data")
    return f'<data source="{source}" trust="untrusted">\n{safe}\n</data>'


def _read_agents(root: str) -> str | None:
    path = os.path.join(root, AGENTS_FILE)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_AGENTS_BYTES + 1)
    except OSError:
        return None
    text = raw[:MAX_AGENTS_BYTES].decode("utf-8", "replace")
    return text + ("\n[AGENTS.md cut at 32 KB]" if len(raw) > MAX_AGENTS_BYTES else "")


async def system_message(template: str, root: str) -> dict:
    """The system prompt with the project's AGENTS.md as its instructions, when there is one."""
    text = template.replace("{root}", root)
    agents = await asyncio.to_thread(_read_agents, root)
    if agents:
        text += ("\n\nProject instructions (AGENTS.md, written by the project's developers):\n"
                 + agents)
    return {"role": "system", "content": text}


def _attachment_content(attachment: dict) -> dict | str:
    mime, data, name = attachment["mime"], attachment["data"], attachment["name"]
    if mime in IMAGE_TYPES:
        url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
        return {"type": "image_url", "image_url": {"url": url}}
    if len(data) <= MAX_INLINE_ATTACHMENT_BYTES:
        try:
            return envelope(f"attachment {name}", data.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    return f"[attached file {name} ({mime}, {len(data)} bytes) is not text and is not shown]"


def user_message(message: dict, attachments: list[dict]) -> dict:
    text = "".join(part["text"] for part in message["parts"] if part["kind"] == "text")
    if not attachments:
        return {"role": "user", "content": text}
    content: list[dict] = [{"type": "text", "text": text}] if text else []
    for attachment in attachments:
        item = _attachment_content(attachment)
        content.append(item if isinstance(item, dict) else {"type": "text", "text": item})
    return {"role": "user", "content": content}


def assistant_messages(message: dict) -> list[dict]:
    """An assistant step: its text and tool calls, then one tool message per call."""
    text = "".join(part["text"] for part in message["parts"] if part["kind"] == "text")
    tools = [part for part in message["parts"] if part["kind"] == "tool"]
    answer: dict = {"role": "assistant", "content": text}
    if tools:
        answer["tool_calls"] = [{"id": part["data"]["callid"], "type": "function",
                                 "function": {"name": part["data"]["tool"],
                                              "arguments": part["data"].get("arguments", "{}")}}
                                for part in tools]
    result = [answer]
    for part in tools:
        output = part["data"].get("output")
        if output is None:
            output = part["data"].get("error") or f"the call ended with status {part['status']}"
        result.append({"role": "tool", "tool_call_id": part["data"]["callid"],
                       "content": envelope(f"tool {part['data']['tool']}", output)})
    return result


def history_messages(history: list[dict], attachments: dict[str, list[dict]]) -> list[dict]:
    """Chat messages for the stored history (`attachments` by message id)."""
    messages = []
    for message in history:
        if message["role"] == "user":
            messages.append(user_message(message, attachments.get(message["id"], [])))
        elif message["role"] == "assistant":
            if any(part["kind"] in ("text", "tool") for part in message["parts"]):
                messages.extend(assistant_messages(message))
    return messages


def to_ollama_native(messages: list[dict]) -> list[dict]:
    """Ollama's /api/chat wants string content, images apart and arguments as objects."""
    native = []
    for message in messages:
        item = {"role": message["role"]}
        content = message.get("content")
        if isinstance(content, list):
            item["content"] = "\n".join(c["text"] for c in content if c["type"] == "text")
            images = [c["image_url"]["url"].split(",", 1)[1] for c in content if c["type"] == "image_url"]
            if images:
                item["images"] = images
        else:
            item["content"] = content or ""
        if message.get("tool_calls"):
            item["tool_calls"] = [{"function": {"name": call["function"]["name"],
                                                "arguments": _as_object(call["function"]["arguments"])}}
                                  for call in message["tool_calls"]]
        native.append(item)
    return native


def _as_object(arguments: str) -> dict:
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
