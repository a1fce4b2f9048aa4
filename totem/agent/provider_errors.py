"""What a provider's failure means: `ProviderError`, its kinds, and reading non-200 answers.

Owns: `ProviderError` (a sentence for a person, the retry decision and delay), its
`ModelError` (a model reference that names nothing usable) and the KIND_* values the agent loop
acts on; `classify_http_error`, which turns a non-200 answer (any of the
error shapes of `shared/fixtures/providers/errors.json`, JSON or not) into a ProviderError, with
the delay from Retry-After and the rate-limit headers; and the small readers of an error's
detail that the stream accumulator shares (`error_code`, `clip_detail`,
`mentions_context_overflow`).

Must not: do any I/O, sleep, retry, or know about sockets, sessions or the providers table. The
clock is read only to turn an absolute reset time into a delay, and callers may pass `now`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MAX_ERROR_DETAIL_CHARS = 400
# A reset further away than this (a daily quota) is not worth an automatic retry.
MAX_RETRY_AFTER_SECONDS = 600.0

# ProviderError.kind values: what the agent loop does next depends on them.
KIND_AUTH = "auth"
KIND_BILLING = "billing"
KIND_RATE_LIMIT = "rate_limit"
KIND_CONTEXT_LENGTH = "context_length"
KIND_REQUEST_TOO_LARGE = "request_too_large"
KIND_MODEL_NOT_FOUND = "model_not_found"
KIND_NOT_FOUND = "not_found"
KIND_TOOLS_UNSUPPORTED = "tools_unsupported"
KIND_TOOL_USE_FAILED = "tool_use_failed"
KIND_INVALID_REQUEST = "invalid_request"
KIND_FORBIDDEN = "forbidden"
KIND_UNSUPPORTED = "unsupported"
KIND_OVERLOADED = "overloaded"
KIND_TIMEOUT = "timeout"
KIND_SERVER = "server"
KIND_CONNECTION = "connection"
KIND_INVALID_RESPONSE = "invalid_response"
KIND_REDIRECT = "redirect"


class ProviderError(Exception):
    """A provider call failed. `message` is a sentence for a person; `retry` says whether trying
    again later can help, `retry_after` how long to wait first (seconds, or None for backoff)."""

    def __init__(self, message: str, *, status: int | None = None, kind: str = KIND_SERVER,
                 retry: bool = False, retry_after: float | None = None,
                 code: str | int | None = None, window: int | None = None) -> None:
        super().__init__(message)
        self.window = window  # a context-length error's stated window in tokens, when it states one
        self.message = message
        self.status = status
        self.kind = kind
        self.retry = retry
        self.retry_after = retry_after
        self.code = code

    @property
    def retryable(self) -> bool:
        """Same as `retry`, under the name the connection errors use."""
        return self.retry

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.message!r}, status={self.status}, kind={self.kind!r}, "
                f"retry={self.retry}, retry_after={self.retry_after})")


class ModelError(ProviderError):
    """A model reference that names no usable model: malformed, an unknown provider, or a key
    that cannot be decrypted. Not worth a retry; a service that checks a prompt's model answers
    it as a 400 on the field `model` (it is not an API error itself: provider errors are their
    own hierarchy, whatever door the call came through)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind=KIND_INVALID_REQUEST, retry=False)


# --- HTTP errors -----------------------------------------------------------------------------

_CONTEXT_PATTERN = re.compile(
    r"context length|context window|context size|maximum context|context_length"
    r"|tokens to keep from the initial prompt|prompt too long|prompt is too long"
    r"|`inputs` tokens \+ `max_new_tokens`|reduce the length of the messages"
    r"|exceeds the maximum number of tokens allowed", re.I)
# The window a context-length error states, in each provider's wording (errors.json): OpenAI,
# vLLM, DeepSeek, OpenRouter "maximum context length is N tokens", Mistral "with N maximum context
# length", llama.cpp "context size (N tokens)", LM Studio "n_ctx: N", Together "must be <= N",
# Anthropic "prompt is too long: 208310 tokens > 200000 maximum", Gemini "The input token count
# (1200000) exceeds the maximum number of tokens allowed (1048576)".
_STATED_WINDOW_PATTERNS = tuple(re.compile(pattern, re.I) for pattern in (
    r"maximum context length is (\d+)", r"(\d+) maximum context length", r"context size \((\d+) tokens\)",
    r"n_ctx:\s*(\d+)", r"max_new_tokens` must be <= (\d+)", r"tokens > (\d+) maximum",
    r"maximum number of tokens allowed \((\d+)\)"))
_PER_MINUTE_PATTERN = re.compile(r"per minute|\(TPM\)|\(RPM\)", re.I)
_MODEL_NAME_PATTERN = re.compile(r"""model\s+['"`]([^'"`]+)['"`]\s+not found|models/(\S+) is not found""", re.I)
_TRY_AGAIN_PATTERN = re.compile(r"(?:try again|retry) in\s+((?:\d+(?:\.\d+)?\s*(?:ms|h|m|s)\s*)+)", re.I)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|h|m|s)")
_HTML_TITLE = re.compile(r"<title>(.*?)</title>", re.I | re.S)


def mentions_context_overflow(detail: str) -> bool:
    """True when an error's text says the prompt is longer than the model's context window,
    in any of the phrasings the recorded providers use."""
    return _CONTEXT_PATTERN.search(detail) is not None


def stated_window(detail: str) -> int | None:
    """The context window in tokens that a context-length error states, None when it states none
    (Groq's says only "reduce the length")."""
    for pattern in _STATED_WINDOW_PATTERNS:
        found = pattern.search(detail)
        if found and int(found.group(1)) > 0:
            return int(found.group(1))
    return None


@dataclass(frozen=True, slots=True)
class _ErrorBody:
    detail: str
    type: str
    code: str | int | None


def classify_http_error(status: int, headers: Mapping[str, str] | Iterable[tuple[str, str]],
                        body: bytes, *, now: float | None = None) -> ProviderError:
    """Turn a non-200 provider answer into a ProviderError (returned, not raised).

    Reads every error shape of `fixtures/providers/errors.json`: `{"error": {...}}`,
    `{"error": "text"}`, Mistral's top-level `message`, FastAPI's `detail` list and non-JSON
    (HTML from an edge proxy). The delay is the largest hint of Retry-After (seconds or HTTP
    date), retry-after-ms, Mistral's ratelimitbysize-reset, the reset header of an exhausted
    x-ratelimit bucket and a "try again in 2.5s" in the message."""
    now = time.time() if now is None else now
    lowered = {k.lower(): v for k, v in (headers.items() if isinstance(headers, Mapping) else headers)}
    parsed = _parse_error_body(body, lowered.get("content-type", ""))
    if 300 <= status < 400:
        # Redirects are not followed (a POST must not be replayed elsewhere silently).
        where = lowered.get("location", "an unknown address")
        parsed = _ErrorBody(clip_detail(f"it moved to {where}"), "", None)
    kind = _error_kind(status, parsed)
    retry_after = _retry_after(lowered, parsed.detail, now)
    retry = kind in (KIND_RATE_LIMIT, KIND_OVERLOADED, KIND_SERVER, KIND_TIMEOUT)
    sentence = _error_sentence(status, kind, parsed)
    if retry_after is not None and retry_after > MAX_RETRY_AFTER_SECONDS:
        retry = False
        sentence += f"; the limit resets in about {_human_delay(retry_after)}"
    elif kind == KIND_RATE_LIMIT and re.search(r"per[- ]day", parsed.detail, re.I):
        retry = retry_after is not None  # a daily quota with no reset time: do not hammer it
    message = f"{sentence}: {parsed.detail}" if parsed.detail else sentence
    window = stated_window(parsed.detail) if kind == KIND_CONTEXT_LENGTH else None
    return ProviderError(message, status=status, kind=kind, retry=retry,
                         retry_after=retry_after if retry else None, code=parsed.code, window=window)


def _parse_error_body(body: bytes, content_type: str) -> _ErrorBody:
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        title = _HTML_TITLE.search(text)
        if title or "html" in content_type.lower():
            detail = title.group(1).strip() if title else ""
        else:
            detail = text
        return _ErrorBody(clip_detail(" ".join(detail.split())), "", None)
    error = data.get("error")
    if isinstance(error, dict):
        detail = str(error.get("message") or "")
        found = error.get("metadata")
        metadata: dict = found if isinstance(found, dict) else {}
        if isinstance(metadata.get("raw"), str) and metadata["raw"]:
            # OpenRouter: "Provider returned error" says nothing; the upstream text is in raw.
            upstream = metadata.get("provider_name")
            detail = f"{upstream}: {metadata['raw']}" if upstream else metadata["raw"]
        # Google's APIs name the kind of error in `status` (RESOURCE_EXHAUSTED, ...), not `type`.
        return _ErrorBody(clip_detail(detail), str(error.get("type") or error.get("status") or ""),
                          error_code(error.get("code")))
    if isinstance(error, str):
        signin = data.get("signin_url")
        if isinstance(signin, str):
            # Ollama cloud models on a signed-out local server: the fix is a sign-in, not a key.
            return _ErrorBody(clip_detail(f"{error}; sign in at {signin}"), "signin_required", None)
        return _ErrorBody(clip_detail(error), "", None)
    if isinstance(data.get("message"), str):
        return _ErrorBody(clip_detail(data["message"]), str(data.get("type") or ""),
                          error_code(data.get("code")))
    if isinstance(data.get("detail"), list):
        parts = [f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg', '')}"
                 for d in data["detail"] if isinstance(d, dict)]
        return _ErrorBody(clip_detail("; ".join(parts)), "validation_error", None)
    return _ErrorBody(clip_detail(text), "", None)


def error_code(value: Any) -> str | int | None:
    """An error object's `code` when it is a string or an integer, else None."""
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def _error_kind(status: int, parsed: _ErrorBody) -> str:
    detail, code, etype = parsed.detail.lower(), str(parsed.code or "").lower(), parsed.type.lower()
    if 300 <= status < 400:
        return KIND_REDIRECT
    if ("insufficient_quota" in (code, etype) or status == 402 or "insufficient balance" in detail
            or "credit balance is too low" in detail):  # Anthropic says it with a 400
        return KIND_BILLING
    if (status == 401 or etype in ("authentication_error", "unauthenticated", "permission_denied")
            or code == "invalid_api_key" or "api key not valid" in detail):  # Google says it with a 400
        return KIND_AUTH
    if status == 413 or (status in (400, 429) and "request too large" in detail
                         and _PER_MINUTE_PATTERN.search(parsed.detail)):
        return KIND_REQUEST_TOO_LARGE
    if (code == "context_length_exceeded" or etype == "exceed_context_size_error"
            or (status in (400, 422) and _CONTEXT_PATTERN.search(parsed.detail))):
        return KIND_CONTEXT_LENGTH
    if "does not support tools" in detail or "support tool use" in detail:
        return KIND_TOOLS_UNSUPPORTED
    if code == "tool_use_failed":
        return KIND_TOOL_USE_FAILED
    if status == 404:
        return KIND_MODEL_NOT_FOUND if "model" in detail else KIND_NOT_FOUND
    if status in (503, 529) or "overloaded" in detail or "capacity" in detail or \
            etype in ("unavailable_error", "service_unavailable_error", "overloaded_error"):
        return KIND_OVERLOADED
    if status == 429:
        return KIND_RATE_LIMIT
    if status == 408:
        return KIND_TIMEOUT
    if status == 403:
        return KIND_FORBIDDEN
    if status == 501:
        return KIND_UNSUPPORTED
    if status >= 500:
        return KIND_SERVER
    return KIND_INVALID_REQUEST


def _error_sentence(status: int, kind: str, parsed: _ErrorBody) -> str:
    if parsed.type == "signin_required":
        return f"The Ollama server is not signed in to ollama.com ({status})"
    if kind == KIND_MODEL_NOT_FOUND:
        name = _MODEL_NAME_PATTERN.search(parsed.detail)
        return f"Unknown model '{name.group(1) or name.group(2)}' ({status})" if name else f"Unknown model ({status})"
    sentences = {
        KIND_AUTH: "The provider rejected the API key ({status})",
        KIND_BILLING: "The provider account has run out of credit or quota ({status})",
        KIND_RATE_LIMIT: "The provider's rate limit was reached ({status})",
        KIND_CONTEXT_LENGTH: "The prompt is longer than the model's context window ({status})",
        KIND_REQUEST_TOO_LARGE: "The request is larger than the provider allows per minute ({status})",
        KIND_NOT_FOUND: "The provider does not know this address ({status})",
        KIND_TOOLS_UNSUPPORTED: "The model does not support tool calls ({status})",
        KIND_TOOL_USE_FAILED: "The model wrote a malformed tool call ({status})",
        KIND_FORBIDDEN: "The provider refused the request ({status})",
        KIND_UNSUPPORTED: "The server does not support this request ({status})",
        KIND_OVERLOADED: "The provider is overloaded or still loading the model ({status})",
        KIND_TIMEOUT: "The provider timed out ({status})",
        KIND_SERVER: "The provider had a server error ({status})",
        KIND_INVALID_REQUEST: "The provider rejected the request ({status})",
        KIND_REDIRECT: "The provider's address redirects elsewhere; set the new address ({status})",
    }
    return sentences.get(kind, "The provider answered with an error ({status})").format(status=status)


def _retry_after(headers: Mapping[str, str], detail: str, now: float) -> float | None:
    hints: list[float] = []
    if (ms := _number(headers.get("retry-after-ms"))) is not None:
        hints.append(ms / 1000)
    if (value := headers.get("retry-after")) is not None:
        seconds = _number(value)
        if seconds is None:
            seconds = _http_date_delay(value, now)
        if seconds is not None:
            hints.append(seconds)
    if (seconds := _number(headers.get("ratelimitbysize-reset"))) is not None:
        hints.append(seconds)  # Mistral
    for bucket in ("requests", "tokens"):
        # Only an exhausted bucket says when we may go again; the other resets are noise.
        if (headers.get(f"x-ratelimit-remaining-{bucket}", "").strip() == "0"
                and (seconds := _duration(headers.get(f"x-ratelimit-reset-{bucket}", ""))) is not None):
            hints.append(seconds)
    if (headers.get("x-ratelimit-remaining", "").strip() == "0"
            and (reset := _number(headers.get("x-ratelimit-reset"))) is not None):
        hints.append(_reset_delay(reset, now))  # OpenRouter: epoch milliseconds
    if (match := _TRY_AGAIN_PATTERN.search(detail)) and (seconds := _duration(match.group(1))) is not None:
        hints.append(seconds)
    hints = [max(0.0, hint) for hint in hints]
    return max(hints) if hints else None


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _http_date_delay(value: str, now: float) -> float | None:
    try:
        import email.utils  # only for a Retry-After that is a date: not at start-up
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - now if when.tzinfo else None


def _duration(value: str) -> float | None:
    """Parse "120ms", "2.048s", "1m26.4s" or a bare number of seconds."""
    value = value.strip()
    if (seconds := _number(value)) is not None:
        return seconds
    parts = _DURATION_PART.findall(value)
    if not parts or _DURATION_PART.sub("", value).strip():
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(amount) * scale[unit] for amount, unit in parts)


def _reset_delay(reset: float, now: float) -> float:
    if reset > 1e11:
        return reset / 1000 - now
    if reset > 1e9:
        return reset - now
    return reset


def _human_delay(seconds: float) -> str:
    amount, unit = (round(seconds / 3600, 1), "hour") if seconds >= 3600 else (round(seconds / 60), "minute")
    return f"{amount:g} {unit}" + ("" if amount == 1 else "s")


def clip_detail(text: str) -> str:
    """The detail of an error, stripped and cut to MAX_ERROR_DETAIL_CHARS."""
    text = text.strip()
    return text if len(text) <= MAX_ERROR_DETAIL_CHARS else text[:MAX_ERROR_DETAIL_CHARS - 1] + "…"
