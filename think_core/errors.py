"""Exceptions raised by the engine and by providers."""

from __future__ import annotations

from typing import Any, Mapping


class ThinkError(Exception):
    """Base class of think's own errors."""


class ProviderError(ThinkError):
    """An error reported by a model provider: an HTTP error response or an error event
    inside the stream. ``status`` is ``None`` for in-stream errors without an HTTP status."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        type: str | None = None,
        headers: Mapping[str, str] | None = None,
        body: Any = None,
        provider: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.type = type
        self.headers = dict(headers or {})
        self.body = body
        self.provider = provider

    def __str__(self) -> str:
        prefix = f"{self.provider} " if self.provider else ""
        status = f"HTTP {self.status}: " if self.status is not None else ""
        return f"{prefix}{status}{self.message}"

    def __repr__(self) -> str:
        return (
            f"ProviderError({self.message!r}, status={self.status!r}, code={self.code!r}, "
            f"type={self.type!r}, provider={self.provider!r})"
        )


class ConfigurationError(ThinkError):
    """Bad configuration: a missing API key, an unknown model string, invalid plugin settings."""


class PluginError(ThinkError):
    """A plugin failed in a way that must stop the operation (for example ``configure_session``)."""

    def __init__(self, plugin_name: str, hook: str, error: BaseException) -> None:
        super().__init__(f"plugin {plugin_name!r} failed in {hook}: {error!r}")
        self.plugin_name = plugin_name
        self.hook = hook
        self.error = error


class NestedTurnError(ThinkError):
    """A blocking entry point (``chat``, ``save_messages``, ``continue_last_turn``) was called from
    inside an active turn of the same session, which would deadlock. Use ``submit_messages`` or
    ``add_messages`` there instead."""


class TurnAborted(ThinkError):
    """The turn was cancelled through ``session.cancel()`` / ``cancel_all()``."""
