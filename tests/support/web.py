"""What a browser client sends the server and reads back, for the server tests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from think_core.types import UIMessage


def user(text: str, id: str) -> dict[str, Any]:
    """A user UI message as the AI SDK client sends it."""
    return {"id": id, "role": "user", "parts": [{"type": "text", "text": text}]}


def chat_request(request_id: str, messages: list[dict[str, Any]], **body: Any) -> dict[str, Any]:
    """A ``cf_agent_use_chat_request`` WebSocket frame submitting ``messages``."""
    return {
        "type": "cf_agent_use_chat_request",
        "id": request_id,
        "init": {"method": "POST", "body": json.dumps({"messages": messages, "trigger": "submit-message", **body})},
    }


def ws_url(base: str, session_id: str = "s1", query: str = "") -> str:
    """The chat WebSocket of a session on a server listening at ``base`` (``http://…``)."""
    return f"{base.replace('http://', 'ws://')}/agents/think/{session_id}{query}"


def ui_text(chunks: list[dict[str, Any]]) -> str:
    """The text a UI message stream's ``text-delta`` chunks spell."""
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


def message_text(message: Mapping[str, Any] | UIMessage) -> str:
    """The text of a UI message's ``text`` parts (a message as JSON, or a ``UIMessage``)."""
    parts = message.parts if isinstance(message, UIMessage) else message["parts"]
    return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")


def roles(history: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(role, id)`` of each message of a history as JSON."""
    return [(m["role"], m["id"]) for m in history]

