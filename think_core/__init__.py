"""think: a Python agent turn engine whose every stage is a pluggy hook.

Plugin authors import from here: ``from think_core import hookimpl, allow, ask, block, substitute``.
"""

from .agent import Think
from .chat.attachments import AttachmentLimits
from .errors import (
    AttachmentTooLarge,
    ClientRequestRefused,
    ConfigurationError,
    HookTimeout,
    InvalidAttachment,
    NestedTurnError,
    PluginError,
    PluginLoadError,
    PluginLoadInterrupted,
    PluginResultError,
    ProviderError,
    StoreUnavailable,
    ThinkError,
    UnknownSubmission,
    UnknownToolCall,
    UnsupportedContent,
)
from .events import (
    Finish,
    ModelEvent,
    ReasoningDelta,
    StreamError,
    TextDelta,
    ToolCall,
    ToolInputDelta,
    ToolInputStart,
    ToolResult,
    Usage,
)
from .files import File
from .hooks.markers import PROJECT, hookimpl, hookspec
from .hooks.plugins import PluginInfo, ThinkPluginManager, build_plugin_manager
from .messages import user_message
from .models.anthropic import AnthropicModel
from .models.gemini import GeminiModel
from .models.openai import OpenAIChatModel
from .models.openai_responses import OpenAIResponsesModel
from .models.resolve import resolve_model
from .models.scripted import ScriptedModel, Step, call
from .paths import data_dir
from .session import Session
from .store import SQLiteStore, Store, Submission
from .subagents import PARENT_CALL_KEY
from .tools import Tool, ToolAnnotations, ToolContext, tool
from .types import (
    ChatErrorContext,
    ChatResponseResult,
    ChunkContext,
    SessionUsage,
    SessionView,
    StepConfig,
    StepContext,
    StepResult,
    StepRetry,
    StepToolResult,
    StreamTransform,
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    ToolPartState,
    TurnConfig,
    TurnContext,
    TurnResult,
    UIMessage,
    UsageRecords,
    allow,
    ask,
    block,
    substitute,
)

__all__ = [
    "PARENT_CALL_KEY",
    "PluginLoadInterrupted",
    "StoreUnavailable",
    "ClientRequestRefused",
    "AttachmentLimits",
    "AttachmentTooLarge",
    "InvalidAttachment",
    "PROJECT",
    "AnthropicModel",
    "GeminiModel",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
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
    "File",
    "UnsupportedContent",
    "build_plugin_manager",
    "data_dir",
    "user_message",
    "ChatErrorContext",
    "ChatResponseResult",
    "ChunkContext",
    "ConfigurationError",
    "Finish",
    "HookTimeout",
    "NestedTurnError",
    "PluginError",
    "PluginLoadError",
    "PluginResultError",
    "ProviderError",
    "ModelEvent",
    "ReasoningDelta",
    "StepConfig",
    "StepContext",
    "StepRetry",
    "SessionUsage",
    "SessionView",
    "StepResult",
    "StepToolResult",
    "StreamTransform",
    "StreamError",
    "TextDelta",
    "ThinkError",
    "Tool",
    "ToolAnnotations",
    "ToolContext",
    "ToolCall",
    "ToolCallContext",
    "ToolCallDecision",
    "ToolCallResultContext",
    "ToolInputDelta",
    "ToolInputStart",
    "ToolPartState",
    "ToolResult",
    "TurnConfig",
    "TurnContext",
    "TurnResult",
    "UsageRecords",
    "UIMessage",
    "UnknownSubmission",
    "UnknownToolCall",
    "Usage",
    "allow",
    "ask",
    "block",
    "call",
    "hookimpl",
    "hookspec",
    "substitute",
    "tool",
]
