"""What a browser client sends the server and reads back, for the server tests."""

from __future__ import annotations

import json
from typing import Any


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


def text_of(chunks: list[dict[str, Any]]) -> str:
    """The text a UI message stream's ``text-delta`` chunks spell."""
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")

