"""Model strings → model objects.

``Think(model="openai:gpt-4o-mini")`` should just work from the environment, and a bad string
or a missing key should fail with a message that says what to set, before any request.

Recognised forms:

* ``"openai:NAME"`` — key ``OPENAI_API_KEY``, base URL ``OPENAI_BASE_URL`` (optional);
* ``"openai-responses:NAME"`` — the OpenAI Responses API, same key and base URL as ``openai:``;
* ``"anthropic:NAME"`` — key ``ANTHROPIC_API_KEY``, base URL ``ANTHROPIC_BASE_URL`` (optional);
* ``"google:NAME"`` — Gemini, key ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``, base URL
  ``GOOGLE_BASE_URL`` (optional);
* ``"openai-compatible:NAME@URL"`` — any Chat Completions server at ``URL`` (e.g.
  ``"openai-compatible:llama3.2@http://localhost:11434/v1"``). Its key comes from
  ``OPENAI_COMPATIBLE_API_KEY`` when set and is otherwise not sent: ``OPENAI_API_KEY`` is
  deliberately never forwarded to a third-party URL.

Any object with a ``stream`` attribute (a :class:`~think_core.models.base.Model`, the scripted
model, a test double) passes through unchanged. Other prefixes can be added with
:func:`register_model_prefix` (e.g. ``"scripted:..."``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError
from ._http import AnyClient, SharedClient
from .anthropic import AnthropicModel
from .base import Model
from .gemini import GeminiModel
from .openai import OpenAIChatModel
from .openai_responses import OpenAIResponsesModel

__all__ = ["SharedClient", "register_model_prefix", "resolve_model"]

ModelFactory = Callable[[str, AnyClient], Any]
"""``factory(rest_of_the_string, client) -> Model``."""

_FACTORIES: dict[str, ModelFactory] = {}

_COMPATIBLE = re.compile(r"^(?P<name>.+?)@(?P<url>https?://\S+)$")


def register_model_prefix(prefix: str, factory: ModelFactory) -> None:
    """Make ``resolve_model("PREFIX:rest")`` return ``factory("rest", client)``."""
    _FACTORIES[prefix] = factory


def resolve_model(spec: str | Model | Any, *, client: AnyClient = None) -> Model:
    """A model object for ``spec`` (see the module docstring for the string forms).

    ``client`` is handed to the built-in providers for connection reuse.
    Raises :class:`ConfigurationError` for an unknown prefix, a malformed string or a missing key.
    """
    if not isinstance(spec, str):
        if hasattr(spec, "stream"):
            return spec
        raise ConfigurationError(f"not a model: {spec!r} (expected a 'provider:name' string or an object with .stream)")
    prefix, colon, rest = spec.partition(":")
    prefix, rest = prefix.strip(), rest.strip()
    if not colon or not rest:
        raise ConfigurationError(
            f"model string {spec!r} must look like 'provider:name', e.g. 'openai:gpt-4o-mini', "
            f"'anthropic:claude-sonnet-4-5' or 'openai-compatible:llama3.2@http://localhost:11434/v1'"
        )
    factory = _FACTORIES.get(prefix)
    if factory is None:
        known = ", ".join(sorted(_FACTORIES))
        raise ConfigurationError(f"unknown model provider {prefix!r} in {spec!r}; known: {known}")
    model: Model = factory(rest, client)
    return model


def _openai(name: str, client: AnyClient) -> Model:
    return OpenAIChatModel(name, client=client)


def _anthropic(name: str, client: AnyClient) -> Model:
    return AnthropicModel(name, client=client)


def _openai_responses(name: str, client: AnyClient) -> Model:
    return OpenAIResponsesModel(name, client=client)


def _google(name: str, client: AnyClient) -> Model:
    return GeminiModel(name, client=client)


def _openai_compatible(rest: str, client: AnyClient) -> Model:
    match = _COMPATIBLE.match(rest)
    if match is None:
        raise ConfigurationError(
            f"'openai-compatible:{rest}' must look like 'openai-compatible:NAME@URL', "
            f"e.g. 'openai-compatible:llama3.2@http://localhost:11434/v1'"
        )
    return OpenAIChatModel(
        match["name"],
        base_url=match["url"],
        api_key=os.environ.get("OPENAI_COMPATIBLE_API_KEY", ""),
        client=client,
        provider="openai-compatible",
    )


register_model_prefix("openai", _openai)
register_model_prefix("openai-responses", _openai_responses)
register_model_prefix("anthropic", _anthropic)
register_model_prefix("google", _google)
register_model_prefix("openai-compatible", _openai_compatible)
