"""The think server: WebSocket chat (Cloudflare agents protocol), the AI SDK UI message stream
over HTTP, and a built-in chat page. Needs the ``server`` extra (starlette, uvicorn)."""

from .app import DEFAULT_MAX_BODY_BYTES, create_app, ws_frame_limit

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app", "ws_frame_limit"]
