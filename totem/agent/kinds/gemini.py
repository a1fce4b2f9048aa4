"""Google's Gemini API: POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse answered as
server-sent events (each a GenerateContentResponse), and GET {base}/v1beta/models.

Owns the native request (`contents` of user and model turns of parts, `systemInstruction`, tool
results as `functionResponse` parts named after their call, `functionDeclarations` with their
schemas reduced to the subset Gemini takes, `generationConfig` with a thinking budget per
reasoning level), the key in `x-goog-api-key`, and reading the stream's responses (text and
thought parts, whole `functionCall` parts, `usageMetadata`, finish reasons, a blocked prompt, an
error) into the chunks the accumulator merges (stream.py). A part's `thoughtSignature` is kept
in the answer's `reasoning_details` (with the id of its call, or as the text's) and sent back on
the same part, unchanged, as the API requires.

Must not: frame bytes (sse.py does) or merge chunks (stream.py does). The wire shapes are in
`tests/fixtures/providers/gemini.md`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from totem.agent.kinds.base import (
    ChatMessage,
    Fetch,
    ModelInfo,
    ProviderTarget,
    arguments_object,
    as_list,
    as_object,
    entries,
    model_info,
    text_of,
)
from totem.agent.provider_errors import KIND_FORBIDDEN
from totem.agent.sse import SseDecoder, SseEvent
from totem.agent.stream import new_call_id, parse_json

if TYPE_CHECKING:
    from totem.agent.stream import ChatAccumulator, StreamEvent

API_VERSION = "v1beta"
SSE_MEDIA_TYPE = "text/event-stream"
MODEL_PREFIX = "models/"
# Room for the answer's text and calls; `maxOutputTokens` counts the thinking too, so the
# budget is added. Every Gemini 2.5 model writes up to 65536.
ANSWER_TOKENS = 8192
# The thinking budget of each level (2.5 Flash takes up to 24576, Pro up to 32768).
THINKING_BUDGETS = {"low": 2048, "medium": 8192, "high": 24576}
# The models that think (a thinkingConfig to another is refused), and those that cannot stop
# thinking: "none" is their smallest budget.
THINKING_MODELS = ("gemini-2.5", "gemini-3", "gemini-flash-latest", "gemini-flash-lite-latest",
                   "gemini-pro-latest")
ALWAYS_THINKING_MODELS = ("gemini-2.5-pro", "gemini-3", "gemini-pro-latest")
SMALLEST_BUDGET = 128
# What Gemini 3 takes in place of the signature of a call made without one (by another model or
# kind): it refuses a functionCall of the current turn without a signature.
SIGNED_MODELS = ("gemini-3",)
NO_SIGNATURE = "skip_thought_signature_validator"
# The kind of reasoning_details entry that holds a thought signature: only this kind reads it.
SIGNATURE_DETAIL = "gemini.signature"
MODELS_PAGE_SIZE = 1000
MAX_MODELS_PAGES = 5
FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length", "MALFORMED_FUNCTION_CALL": "error",
                  "UNEXPECTED_TOOL_CALL": "error", "OTHER": "stop"}
REFUSED_REASONS = frozenset({"SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII",
                             "IMAGE_SAFETY", "LANGUAGE"})
REFUSAL_SENTENCE = ("The model declined to go on (Gemini finish reason: {reason}). Rephrase the prompt, "
                    "or start a new session if the conversation itself is refused.")
BLOCKED_SENTENCE = ("Gemini blocked the prompt ({reason}) and did not answer. Rephrase it, or start a new "
                    "session if the conversation itself is blocked.")
# The JSON Schema keywords of Gemini's OpenAPI subset (`Schema`); the rest are left out.
SCHEMA_KEYS = frozenset({"type", "format", "title", "description", "nullable", "enum", "items", "properties",
                         "required", "minItems", "maxItems", "minimum", "maximum", "minLength", "maxLength",
                         "minProperties", "maxProperties", "anyOf", "propertyOrdering"})
# The formats Gemini accepts (others are refused: "uri", "email", ...).
SCHEMA_FORMATS = frozenset({"enum", "date-time", "int32", "int64", "float", "double"})


class Gemini:
    """Google's Gemini API at its base URL (https://generativelanguage.googleapis.com)."""

    name = "gemini"
    default_context = 131072  # what the models list says wins; every Gemini model has at least this

    def __repr__(self) -> str:
        return f"<kind {self.name}>"

    def api_base(self, url: str) -> str:
        """The base with /v1beta: people paste the API root with or without a version."""
        url = url.rstrip("/")
        for version in ("/v1beta", "/v1"):
            if url.endswith(version):
                url = url[:-len(version)]
        return f"{url}/{API_VERSION}"

    def chat_url(self, url: str, model: str = "") -> str:
        """The model is in the path (a model id given with its "models/" prefix works too)."""
        return f"{self.api_base(url)}/models/{quote(_bare(model), safe='')}:streamGenerateContent?alt=sse"

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-goog-api-key": key}

    async def models(self, fetch: Fetch) -> list[ModelInfo]:
        """GET /v1beta/models page after page (`nextPageToken`) up to MAX_MODELS_PAGES: only the
        models that generate content, their window `inputTokenLimit`; every one takes tools."""
        url = self.api_base(fetch.url) + f"/models?pageSize={MODELS_PAGE_SIZE}"
        models: list[ModelInfo] = []
        token = None
        for _page in range(MAX_MODELS_PAGES):
            body = await fetch.get(url + (f"&pageToken={quote(token, safe='')}" if token else ""))
            for item in entries(body, fetch, key="models", ident="name"):
                if "generateContent" not in as_list(item.get("supportedGenerationMethods")):
                    continue
                name = item["name"]
                ident = name[len(MODEL_PREFIX):] if name.startswith(MODEL_PREFIX) else name
                thinking = item.get("thinking") if isinstance(item.get("thinking"), bool) else None
                models.append(model_info(ident, item.get("displayName"), item.get("inputTokenLimit"),
                                         True, thinking or None))
            following = as_object(body).get("nextPageToken")
            if not isinstance(following, str) or not following or following == token:
                break
            token = following
        return models

    async def context_window(self, fetch: Fetch, model: str, listed: int | None) -> int | None:
        return listed

    def request_body(self, target: ProviderTarget, messages: list[ChatMessage],
                     tools: list[dict[str, Any]], reasoning: str | None) -> dict[str, Any]:
        system, contents = native_contents(messages)
        if _bare(target.model).startswith(SIGNED_MODELS):
            sign_unsigned_calls(contents)
        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        declarations = [native_function(spec) for spec in tools]
        if declarations:
            body["tools"] = [{"functionDeclarations": declarations}]
        config: dict[str, Any] = {"maxOutputTokens": ANSWER_TOKENS}
        thinking = thinking_config(target.model, reasoning)
        if thinking is not None:
            config["thinkingConfig"] = thinking
            config["maxOutputTokens"] = ANSWER_TOKENS + int(thinking.get("thinkingBudget") or 0)
        body["generationConfig"] = config
        return body

    def set_temperature(self, body: dict[str, Any], temperature: float) -> None:
        body.setdefault("generationConfig", {})["temperature"] = temperature

    def stream_request(self, body: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
        return {"Accept": SSE_MEDIA_TYPE}, dict(body)  # alt=sse in the URL asks for the stream

    def decoder(self, accumulator: ChatAccumulator) -> GenerateAnswer:
        return GenerateAnswer(accumulator)


# --- the request -------------------------------------------------------------------------------


def sign_unsigned_calls(contents: list[ChatMessage]) -> None:
    """Give the first call of each model turn that has none the placeholder signature Gemini 3
    documents for calls it did not make (a step answered by another model); the others need
    none. The parts are copies: the signatures of the calls Gemini made stay as they came."""
    for turn in contents:
        if turn["role"] != "model":
            continue
        for index, part in enumerate(turn["parts"]):
            if "functionCall" in part:
                if "thoughtSignature" not in part:
                    turn["parts"][index] = {**part, "thoughtSignature": NO_SIGNATURE}
                break


def _bare(model: str) -> str:
    """A model id without its "models/" prefix."""
    return model[len(MODEL_PREFIX):] if model.startswith(MODEL_PREFIX) else model


def thinking_config(model: str, reasoning: str | None) -> dict[str, Any] | None:
    """The thinkingConfig of a reasoning level: a budget with the thoughts shown; "none" a budget
    of 0 (the smallest for a model that always thinks); the model's default budget without a
    level. None for a model that does not think."""
    ident = _bare(model)
    if not ident.startswith(THINKING_MODELS):
        return None
    if reasoning == "none":
        return {"thinkingBudget": SMALLEST_BUDGET if ident.startswith(ALWAYS_THINKING_MODELS) else 0}
    budget = THINKING_BUDGETS.get(reasoning or "")
    return {"thinkingBudget": budget, "includeThoughts": True} if budget else {"includeThoughts": True}


def native_contents(messages: list[ChatMessage]) -> tuple[str, list[ChatMessage]]:
    """The system instruction and the turns of OpenAI-shaped messages (context.py): user and model
    turns of parts, each tool result a `functionResponse` part of a user turn named after the
    call it answers, consecutive turns of one role merged; empty parts and turns left out.

    Two assistant messages in a row, or one at the end, are an answer that failed part way (the
    history keeps what it said): only the step that followed it is sent, and a last one is not
    (the model would read it as the start of its answer)."""
    system: list[str] = []
    turns: list[ChatMessage] = []
    names: dict[str, str] = {}  # call id -> function name, from the assistant steps before
    for message in messages:
        role = message.get("role")
        if role == "system":
            system.append(text_of(message.get("content")))
            continue
        if role == "assistant":
            parts = model_parts(message)
            for call in message.get("tool_calls") or ():
                names[str(call.get("id") or "")] = str(as_object(call.get("function")).get("name") or "")
            role = "model"
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id") or ""), "")
            parts = [{"functionResponse": {"name": name, "response": {"result": text_of(message.get("content"))}}}]
            role = "user"
        else:
            parts = user_parts(message.get("content"))
            role = "user"
        if not parts:
            continue
        if turns and turns[-1]["role"] == role == "model":
            turns[-1] = {"role": role, "parts": parts}
        elif turns and turns[-1]["role"] == role:
            turns[-1]["parts"] += parts
        else:
            turns.append({"role": role, "parts": parts})
    if turns and turns[-1]["role"] == "model":
        turns.pop()
    for turn in turns:  # the API wants a turn's function responses before its text
        if turn["role"] == "user":
            turn["parts"].sort(key=lambda part: "functionResponse" not in part)
    return "\n\n".join(text for text in system if text), turns


def user_parts(content: Any) -> list[dict[str, Any]]:
    """A user message's text and images (data URLs) as parts."""
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        if part.get("type") == "text" and part.get("text"):
            parts.append({"text": part["text"]})
        elif part.get("type") == "image_url":
            image = inline_image(as_object(part.get("image_url")).get("url"))
            if image is not None:
                parts.append(image)
    return parts


def inline_image(url: Any) -> dict[str, Any] | None:
    """`data:image/png;base64,...` as an inlineData part; None for anything else."""
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    head, _, data = url[5:].partition(",")
    mime_type, _, encoding = head.partition(";")
    if encoding != "base64" or not data:
        return None
    return {"inlineData": {"mimeType": mime_type, "data": data}}


def model_parts(message: ChatMessage) -> list[dict[str, Any]]:
    """An assistant step: its text, then its calls as functionCall parts, each with the
    thoughtSignature it came with (the text's on the text part)."""
    signatures: dict[str, str] = {}
    text_signature = None
    for detail in message.get("reasoning_details") or ():
        if isinstance(detail, dict) and detail.get("type") == SIGNATURE_DETAIL and isinstance(
                detail.get("signature"), str):
            if isinstance(detail.get("call"), str):
                signatures[detail["call"]] = detail["signature"]
            elif text_signature is None:
                text_signature = detail["signature"]
    parts: list[dict[str, Any]] = []
    text = text_of(message.get("content"))
    if text:
        parts.append({"text": text, **({"thoughtSignature": text_signature} if text_signature else {})})
    for call in message.get("tool_calls") or ():
        function = as_object(call.get("function"))
        part: dict[str, Any] = {"functionCall": {"name": function.get("name") or "",
                                                 "args": arguments_object(function.get("arguments"))}}
        signature = signatures.get(str(call.get("id") or ""))
        if signature:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def native_function(spec: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI `tools` entry as a functionDeclaration; a function without parameters has none
    (Gemini refuses an object schema without properties)."""
    function = as_object(spec.get("function"))
    declaration: dict[str, Any] = {"name": function.get("name") or ""}
    if function.get("description"):
        declaration["description"] = function["description"]
    parameters = gemini_schema(function.get("parameters"))
    if parameters.get("properties"):
        declaration["parameters"] = parameters
    return declaration


def gemini_schema(schema: Any) -> dict[str, Any]:
    """A JSON Schema reduced to the OpenAPI subset Gemini's `Schema` takes: unknown keywords
    ($schema, additionalProperties, default, examples, pattern, $ref, ...) left out, a `const`
    string an enum of one, a type list such as ["string", "null"] one type with `nullable` (or
    `anyOf` of the types), enums only of strings, formats only those Gemini knows, `required`
    only of the properties there are. The schema given is left as it was."""
    if not isinstance(schema, dict):
        return {}
    reduced: dict[str, Any] = {}
    kind = schema.get("type")
    if isinstance(kind, list):
        types = [t for t in kind if isinstance(t, str) and t != "null"]
        if "null" in kind:
            reduced["nullable"] = True
        if len(types) == 1:
            reduced["type"] = types[0]
        elif types:
            reduced["anyOf"] = [gemini_schema({**schema, "type": t}) for t in types]
            return reduced
    elif isinstance(kind, str):
        reduced["type"] = kind
    for key, value in schema.items():
        if key not in SCHEMA_KEYS or key in reduced or key == "type":
            continue
        if key == "properties" and isinstance(value, dict):
            reduced[key] = {name: gemini_schema(inner) for name, inner in value.items()}
        elif key == "items":
            reduced[key] = gemini_schema(value)
        elif key == "anyOf" and isinstance(value, list):
            reduced[key] = [gemini_schema(inner) for inner in value]
        elif key == "enum":
            if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
                reduced[key] = list(value)
        elif key == "format":
            if value in SCHEMA_FORMATS:
                reduced[key] = value
        else:
            reduced[key] = value
    if isinstance(schema.get("const"), str) and "enum" not in reduced:
        reduced["enum"] = [schema["const"]]
        reduced.setdefault("type", "string")
    if "required" in reduced:
        present = reduced.get("properties") or {}
        reduced["required"] = [name for name in as_list(reduced["required"]) if name in present]
        if not reduced["required"]:
            del reduced["required"]
    return reduced


# --- the answer --------------------------------------------------------------------------------


class GenerateAnswer:
    """A streamed answer as GenerateContentResponses, each turned into the OpenAI-shaped chunk the
    accumulator merges. Gemini sends each functionCall whole, without an id (or with one): the
    call gets its id here, so that its thoughtSignature can name it."""

    def __init__(self, accumulator: ChatAccumulator) -> None:
        self._accumulator = accumulator
        self._sse = SseDecoder()
        self._calls = 0
        self._text_signed = False
        self._response_id = ""

    def feed(self, data: bytes) -> list[StreamEvent]:
        return [e for event in self._sse.feed(data) for e in self._event(event)]

    def close(self) -> list[StreamEvent]:
        return []

    def whole(self, body: object) -> list[StreamEvent]:
        """A whole answer instead of a stream: one GenerateContentResponse, a list of them (what
        streamGenerateContent sends without alt=sse) or an error."""
        events: list[StreamEvent] = []
        for response in body if isinstance(body, list) else [body]:
            events += self._response(response)
        return events

    def _event(self, event: SseEvent) -> list[StreamEvent]:
        try:
            value = parse_json(event.data)
        except ValueError:
            return self._accumulator.feed_sse(event)  # says that the chunk is not JSON
        return self._response(value)

    def _response(self, value: object) -> list[StreamEvent]:
        if not isinstance(value, dict):
            return self._accumulator.feed(value)
        if isinstance(value.get("error"), dict):
            return self._accumulator.feed({"error": value["error"]})
        if isinstance(value.get("responseId"), str) and value["responseId"]:
            self._response_id = value["responseId"]
        chunk: dict[str, Any] = {}
        delta: dict[str, Any] = {}
        candidate = as_object(next(iter(as_list(value.get("candidates"))), None))
        for part in as_list(as_object(candidate.get("content")).get("parts")):
            self._part(as_object(part), delta)
        if delta:
            chunk["choices"] = [{"index": 0, "delta": delta}]
        usage = as_object(value.get("usageMetadata"))
        if usage:
            chunk["usage"] = usage_of(usage)
        reason = candidate.get("finishReason")
        events: list[StreamEvent] = []
        if isinstance(reason, str) and reason and reason != "FINISH_REASON_UNSPECIFIED":
            finish = "refusal" if reason in REFUSED_REASONS else FINISH_REASONS.get(reason, reason.lower())
            if finish == "stop" and self._calls:
                finish = "tool_calls"
            chunk.setdefault("choices", [{"index": 0, "delta": {}}])[0]["finish_reason"] = finish
            self._accumulator.saw_done = True  # the last response: nothing after it matters
            events = self._accumulator.feed(chunk)
            if finish == "refusal":
                events += self._accumulator.fail(REFUSAL_SENTENCE.format(reason=reason), retry=False,
                                                 kind=KIND_FORBIDDEN)
            return events
        events = self._accumulator.feed(chunk)
        blocked = as_object(value.get("promptFeedback")).get("blockReason")
        if isinstance(blocked, str) and blocked:
            self._accumulator.finish_reason = "refusal"
            events += self._accumulator.fail(BLOCKED_SENTENCE.format(reason=blocked), retry=False,
                                             kind=KIND_FORBIDDEN)
        return events

    def _call_id(self) -> str:
        """An id in OpenAI's shape for a call Gemini gave none: made from the response's id and
        the call's place in it when there is one (the same answer, the same ids), else fresh."""
        if not self._response_id:
            return new_call_id()
        digest = hashlib.sha256(f"{self._response_id}/{self._calls}".encode()).hexdigest()
        return "call_" + digest[:24]

    def _part(self, part: dict[str, Any], delta: dict[str, Any]) -> None:
        """One part into the chunk's delta: text, thought text, a whole call; its signature kept."""
        signature = part.get("thoughtSignature")
        call = part.get("functionCall")
        text = part.get("text")
        if isinstance(call, dict):
            ident = call.get("id") if isinstance(call.get("id"), str) and call["id"] else self._call_id()
            args = call.get("args") if isinstance(call.get("args"), dict) else {}
            delta.setdefault("tool_calls", []).append({
                "index": self._calls, "id": ident, "type": "function",
                "function": {"name": call.get("name") or "", "arguments": json.dumps(args, ensure_ascii=False)}})
            self._calls += 1
            if isinstance(signature, str) and signature:
                delta.setdefault("reasoning_details", []).append(
                    {"type": SIGNATURE_DETAIL, "call": ident, "signature": signature})
            return
        if isinstance(text, str) and text:
            key = "reasoning_content" if part.get("thought") is True else "content"
            delta[key] = delta.get(key, "") + text
        if isinstance(signature, str) and signature and not self._text_signed:
            self._text_signed = True  # one text signature per answer: it goes back on its text
            delta.setdefault("reasoning_details", []).append({"type": SIGNATURE_DETAIL, "signature": signature})


def usage_of(metadata: dict[str, Any]) -> dict[str, Any]:
    """usageMetadata in the names answers.tokens_of reads: the prompt is every input token
    (`promptTokenCount` counts the cached ones, `cachedContentTokenCount`, among them, and the
    tool use prompt apart), the completion the answer's and the thoughts' tokens; Gemini's
    counts stay."""
    counts = {name: count for name, count in metadata.items()
              if isinstance(count, int) and not isinstance(count, bool)}

    def count(name: str) -> int:
        return counts.get(name, 0)
    prompt = count("promptTokenCount") + count("toolUsePromptTokenCount")
    completion = count("candidatesTokenCount") + count("thoughtsTokenCount")
    return {**counts, "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
