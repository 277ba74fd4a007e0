"""Model providers and the provider-neutral model interface."""

from .anthropic import AnthropicModel
from .base import (
    AssistantMessage,
    CallSettings,
    Model,
    ModelMessage,
    ModelRequest,
    OutputSpec,
    ReasoningBlock,
    ToolCallRequest,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from .content import FilePart, TextPart
from .gemini import GeminiModel
from .http_model import EventMapper, StreamingHTTPModel
from .openai import OpenAIChatModel
from .openai_responses import OpenAIResponsesModel
from .resolve import SharedClient, register_model_prefix, resolve_model
from .retry import RetryPolicy
from .scripted import ScriptedModel, Step, call

__all__ = [
    "AnthropicModel",
    "EventMapper",
    "GeminiModel",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "StreamingHTTPModel",
    "RetryPolicy",
    "ScriptedModel",
    "SharedClient",
    "Step",
    "call",
    "register_model_prefix",
    "resolve_model",
    "AssistantMessage",
    "CallSettings",
    "FilePart",
    "Model",
    "ModelMessage",
    "ModelRequest",
    "OutputSpec",
    "ReasoningBlock",
    "TextPart",
    "ToolCallRequest",
    "ToolMessage",
    "ToolSpec",
    "UserMessage",
]
