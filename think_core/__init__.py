"""think: a Python agent turn engine whose every stage is a pluggy hook.

Plugin authors import from here: ``from think_core import hookimpl, allow, block, substitute``.
"""

from .agent import Think
from .errors import (
    ConfigurationError,
    NestedTurnError,
    PluginError,
    ProviderError,
    ThinkError,
)
from .events import (
    Finish,
    ReasoningDelta,
    StreamError,
    TextDelta,
    ToolCall,
    ToolInputDelta,
    ToolInputStart,
    ToolResult,
    Usage,
)
from .markers import PROJECT, hookimpl, hookspec
from .messages import user_message
from .models.anthropic import AnthropicModel
from .models.openai import OpenAIChatModel
from .models.resolve import resolve_model
from .models.scripted import ScriptedModel, Step
from .plugins import PluginInfo, ThinkPluginManager, build_plugin_manager
from .session import Session
from .store import SQLiteStore, Store, Submission
from .tools import Tool, ToolAnnotations, tool
from .types import (
    ChatErrorContext,
    ChatResponseResult,
    ChunkContext,
    StepConfig,
    StepContext,
    StepResult,
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    TurnConfig,
    TurnContext,
    TurnResult,
    UIMessage,
    allow,
    block,
    substitute,
)

__all__ = [
    "PROJECT",
    "AnthropicModel",
    "OpenAIChatModel",
    "ScriptedModel",
    "Step",
    "resolve_model",
    "PluginInfo",
    "SQLiteStore",
    "Session",
    "Store",
    "Submission",
    "Think",
    "ThinkPluginManager",
    "build_plugin_manager",
    "user_message",
    "ChatErrorContext",
    "ChatResponseResult",
    "ChunkContext",
    "ConfigurationError",
    "Finish",
    "NestedTurnError",
    "PluginError",
    "ProviderError",
    "ReasoningDelta",
    "StepConfig",
    "StepContext",
    "StepResult",
    "StreamError",
    "TextDelta",
    "ThinkError",
    "Tool",
    "ToolAnnotations",
    "ToolCall",
    "ToolCallContext",
    "ToolCallDecision",
    "ToolCallResultContext",
    "ToolInputDelta",
    "ToolInputStart",
    "ToolResult",
    "TurnConfig",
    "TurnContext",
    "TurnResult",
    "UIMessage",
    "Usage",
    "allow",
    "block",
    "hookimpl",
    "hookspec",
    "substitute",
    "tool",
]
