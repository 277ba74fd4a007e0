"""Exceptions raised by the engine and by providers.

The hierarchy::

    Exception
    └── ThinkError                        every error of think's own
        ├── ProviderError                 a model provider's HTTP error or in-stream error event
        ├── ConfigurationError            bad configuration (API key, model string, plugin settings)
        ├── PluginError                   a plugin failed where the operation must stop
        │   ├── PluginResultError         ... by returning a value its hook cannot use (also a TypeError)
        │   ├── PluginLoadError           ... an installed plugin could not be loaded (also a ConfigurationError)
        │   │   └── PluginLoadInterrupted ... a KeyboardInterrupt while it loaded (also a KeyboardInterrupt)
        │   └── HookTimeout               ... by running past its time limit (not a TimeoutError)
        ├── NestedTurnError               a blocking entry point called from inside its own session's turn
        ├── UnknownToolCall               no pending tool call has that id (also a KeyError)
        ├── ClientRequestRefused          a chat client asked for what only the server may do (also a ValueError)
        ├── InvalidAttachment             a file a user sent is malformed or not what it says (also a ValueError)
        │   └── AttachmentTooLarge        ... or larger than the attachment limits
        ├── UnsupportedContent            a message holds a file its model's provider cannot take (also a ValueError)
        ├── UnknownSubmission             no durable submission has that id (also a KeyError)
        └── StoreUnavailable              the database cannot be reached; nothing of the operation was committed

The ``KeyError`` / ``TypeError`` bases keep ``except KeyError`` / ``except TypeError`` written
against earlier versions working; new code catches the think class by name, so a ``KeyError``
raised by a bug is never mistaken for "not found".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
    """A plugin failed in a way that must stop the operation (for example ``configure_session``).

    ``plugin_name`` and ``hook`` say who and where; ``error`` is what went wrong.
    """

    def __init__(
        self, plugin_name: str, hook: str, error: BaseException, *, message: str | None = None
    ) -> None:
        super().__init__(message or f"plugin {plugin_name!r} failed in {hook}: {error!r}")
        self.plugin_name = plugin_name
        self.hook = hook
        self.error = error


class PluginResultError(PluginError, TypeError):
    """A decision hook returned something that is neither ``None``, its result model, nor a dict
    that validates as one. ``error`` is the ``TypeError`` or pydantic ``ValidationError``."""

    def __init__(self, plugin_name: str, hook: str, error: BaseException) -> None:
        super().__init__(
            plugin_name,
            hook,
            error,
            message=f"plugin {plugin_name!r} returned an invalid result from {hook}: {error}",
        )


class PluginLoadError(PluginError, ConfigurationError):
    """An installed entry-point plugin failed to import, construct or register, so the agent
    does not start without it (``broken_plugins="warn"`` starts it anyway).

    ``plugin_name`` is the entry point, ``distribution`` the distribution that installed it,
    ``error`` the cause (the first one when several plugins failed; ``failed`` names them all).
    ``hook`` is ``"load"``.
    """

    def __init__(
        self,
        plugin_name: str,
        error: BaseException,
        *,
        distribution: str | None = None,
        failed: tuple[str, ...] = (),
        message: str | None = None,
    ) -> None:
        where = f" (distribution {distribution})" if distribution else ""
        super().__init__(
            plugin_name,
            "load",
            error,
            message=message or f"plugin {plugin_name!r}{where} failed to load: {type(error).__name__}: {error}",
        )
        self.distribution = distribution
        self.failed = failed or (plugin_name,)


class PluginLoadInterrupted(PluginLoadError, KeyboardInterrupt):
    """A ``KeyboardInterrupt`` while an entry-point plugin was loading — a Ctrl-C, or a plugin
    raising it at import. Still an interrupt (the agent stops, even with
    ``broken_plugins="warn"``, and ``except KeyboardInterrupt`` still catches it), but one that
    names the plugin, as every load failure does."""


class HookTimeout(PluginError):
    """A hook implementation ran past its time limit (``Think(hook_timeout=...)`` or the
    plugin's own). It counts as that implementation's failure under the hook's failure policy.
    ``limit`` is the limit in seconds.

    Deliberately not a ``TimeoutError``: a caller that wraps ``chat()`` or ``open()`` in
    ``asyncio.wait_for`` catches ``TimeoutError`` for *its own* deadline, and must not mistake a
    plugin's missed limit for it (nor the other way round)."""

    def __init__(self, plugin_name: str, hook: str, limit: float) -> None:
        super().__init__(
            plugin_name,
            hook,
            TimeoutError(f"no answer within {limit:g}s"),
            message=f"plugin {plugin_name!r} timed out in {hook} after {limit:g}s (hook_timeout)",
        )
        self.limit = limit


class NestedTurnError(ThinkError):
    """A blocking entry point (``chat``, ``save_messages``, ``continue_last_turn``) was called from
    inside an active turn of the same session, which would deadlock. Use ``submit_messages`` or
    ``add_messages`` there instead."""


class UnknownToolCall(ThinkError, KeyError):
    """A client tool result or an approval named a tool call the session is not waiting for."""

    def __init__(self, tool_call_id: str, session_id: str | None = None) -> None:
        where = f" in session {session_id!r}" if session_id is not None else ""
        super().__init__(f"no tool call {tool_call_id!r}{where}")
        self.tool_call_id = tool_call_id
        self.session_id = session_id

    def __str__(self) -> str:  # KeyError's own __str__ would quote the message as a repr
        return str(self.args[0])


class ClientRequestRefused(ThinkError, ValueError):
    """A chat client's request asks for something only the server may do: write an assistant
    message, name a tool call no model step made, answer a call that is not waiting for it,
    regenerate a message that is not in the chat. Nothing of the request was stored; the server
    answers it with a 400 or an error frame carrying this message."""


class UnsupportedContent(ThinkError, ValueError):
    """A message holds a file its model's provider cannot take (a media type it does not read,
    a file by URL where it takes only bytes). Raised while the request is built, before anything
    is sent; the user message stays stored. ``media_type`` and ``provider`` name what and who."""

    def __init__(self, message: str, *, media_type: str, provider: str) -> None:
        super().__init__(message)
        self.media_type = media_type
        self.provider = provider


class InvalidAttachment(ThinkError, ValueError):
    """A file a user sent (an AI SDK ``file`` part) that think will not take: its ``url`` is a
    malformed data URL or of a scheme other than ``data:`` / ``https:``, or its bytes are not
    what its ``mediaType`` says (a PNG, JPEG, GIF, WebP or PDF signature). Nothing of the
    request was stored; the server answers it with a 400 or an error frame carrying this message."""


class AttachmentTooLarge(InvalidAttachment):
    """A file a user sent is larger than ``AttachmentLimits.max_file_bytes``, or one message's
    files together than ``max_message_bytes``. Nothing of the request was stored; the server
    answers it with a 413."""


class UnknownSubmission(ThinkError, KeyError):
    """No durable submission of the session has that id."""

    def __init__(self, submission_id: str, session_id: str | None = None) -> None:
        where = f" in session {session_id!r}" if session_id is not None else ""
        super().__init__(f"no submission {submission_id!r}{where}")
        self.submission_id = submission_id
        self.session_id = session_id

    def __str__(self) -> str:  # KeyError's own __str__ would quote the message as a repr
        return str(self.args[0])


class StoreUnavailable(ThinkError):
    """The store's database cannot be reached (a restart, a failover, an outage), and the
    operation did not commit: it may be run again. The engine retries store calls that fail so
    for a while (``AsyncStore.retry_for`` seconds) before it raises this; an accepted durable
    submission is never failed for it — it waits and is resumed once the database is back."""


class SubmissionLost(ThinkError):
    """A durable submission's turn found the submission no longer its own (finished elsewhere,
    or retaken by another process after its lease expired): it must not go on writing for it."""

    def __init__(self, submission_id: str, session_id: str) -> None:
        super().__init__(f"submission {submission_id!r} of session {session_id!r} is no longer ours")
        self.submission_id = submission_id
        self.session_id = session_id
