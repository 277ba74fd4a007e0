"""Model providers and the provider-neutral model interface."""

from .base import (
    AssistantMessage,
    CallSettings,
    Model,
    ModelMessage,
    ModelRequest,
    OutputSpec,
    ToolCallRequest,
    ToolMessage,
    ToolSpec,
    UserMessage,
)

__all__ = [
    "AssistantMessage",
    "CallSettings",
    "Model",
    "ModelMessage",
    "ModelRequest",
    "OutputSpec",
    "ToolCallRequest",
    "ToolMessage",
    "ToolSpec",
    "UserMessage",
]
