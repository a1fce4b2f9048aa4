"""The kinds of provider that Totem speaks to, each an adapter behind `ProviderKind` (base.py).

Owns the one table from a template's `kind` (providers.json) to its adapter. Nothing else in
Totem asks which kind a provider is: it calls the adapter. Adding a kind is one module in this
package, one entry in KINDS and its template in providers.json.

Must not: hold state; the adapters are immutable, shared by every provider of their kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from totem.agent.kinds.anthropic import Anthropic
from totem.agent.kinds.base import ChatMessage, Fetch, ModelInfo, ProviderKind, ProviderTarget
from totem.agent.kinds.gemini import Gemini
from totem.agent.kinds.ollama import OllamaNative
from totem.agent.kinds.openai import LlamaCpp, LmStudio, OpenAICompatible, OpenRouter, Together
from totem.agent.stream import AnswerDecoder

KINDS: Mapping[str, ProviderKind] = MappingProxyType({kind.name: kind for kind in (
    OllamaNative(), LlamaCpp(), LmStudio(), OpenRouter(), OpenAICompatible("openai"),
    OpenAICompatible("groq"), OpenAICompatible("mistral"), OpenAICompatible("deepseek"), Together(),
    OpenAICompatible("compatible"), Anthropic(), Gemini(),
)})

__all__ = ["KINDS", "AnswerDecoder", "ChatMessage", "Fetch", "ModelInfo", "ProviderKind", "ProviderTarget",
           "kind_named"]


def kind_named(name: str) -> ProviderKind:
    """The adapter of the kind `name`. Raises KeyError for a kind that has none."""
    return KINDS[name]
