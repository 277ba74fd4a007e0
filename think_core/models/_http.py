"""HTTP plumbing shared by the built-in providers: API keys, clients, error bodies.

Kept private: the providers' public surface is their constructor and ``stream``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..errors import ConfigurationError, ProviderError
from ._transport import new_client

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=5.0)
"""The official SDKs' default: a long read timeout (reasoning models think silently for minutes),
a short connect timeout so an unreachable host fails fast and can be retried."""

_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})


@functools.lru_cache(maxsize=1)
def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context for every client we create: building one costs ~40 ms (it loads the CA
    bundle), far more than the rest of a client, and it would otherwise be paid per call."""
    return httpx.create_ssl_context()


def is_local_url(url: str) -> bool:
    """True for loopback servers (Ollama, vLLM, llama.cpp on this machine), which need no key."""
    host = (urlsplit(url).hostname or "").lower()
    return host in _LOCAL_HOSTS or host.startswith("127.")


def resolve_api_key(explicit: str | None, env_value: str | None, env_var: str, base_url: str, provider: str) -> str:
    """The key to send, ``""`` meaning "send none".

    ``None`` means "not given": fall back to the environment. An explicit ``""`` opts out of
    authentication (a keyless OpenAI-compatible server, or auth passed through ``headers``).
    With no key at all, a loopback ``base_url`` is allowed keyless and anything else is a
    :class:`ConfigurationError` raised before any request is made.
    """
    if explicit is not None:
        return explicit
    if env_value:
        return env_value
    if is_local_url(base_url):
        return ""
    raise ConfigurationError(
        f"{provider}: no API key. Set the {env_var} environment variable or pass api_key=... "
        f"(api_key='' sends no key, for servers that need none)."
    )


class SharedClient:
    """One ``httpx.AsyncClient`` reused by every call of the models given it, so the steps of a
    turn (and later turns) reuse warm connections instead of a TCP + TLS handshake each.

    The client is created lazily inside the running event loop, because a client cannot move
    between loops; its owner (``Think``) closes it with :meth:`aclose`.
    """

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client.is_closed or self._loop is not loop:
            self._client = new_client(DEFAULT_TIMEOUT, shared_ssl_context())
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and not client.is_closed and self._loop is asyncio.get_running_loop():
            await client.aclose()


AnyClient = httpx.AsyncClient | SharedClient | None


@contextlib.asynccontextmanager
async def client_for_call(client: AnyClient, timeout: httpx.Timeout) -> AsyncIterator[httpx.AsyncClient]:
    """The caller's client when one was given (never closed here), else a client that lives
    exactly as long as one call, so no socket outlives it. Pass a shared ``client=`` (an
    ``httpx.AsyncClient`` or a :class:`SharedClient`) to a model for connection reuse."""
    if isinstance(client, SharedClient):
        yield client.get()
        return
    if client is not None:
        yield client
        return
    async with new_client(timeout, shared_ssl_context()) as own:
        yield own


#: An endpoint's ``httpx.URL``, parsed once: httpx parses a string URL on every request (twice:
#: the client's merge and the request's own), ~15 µs of each step's start. URLs are immutable.
_parsed_url = functools.lru_cache(maxsize=256)(httpx.URL)


@contextlib.asynccontextmanager
async def post_event_stream(
    client: AnyClient,
    url: str,
    *,
    body: Any,
    headers: Mapping[str, str],
    timeout: httpx.Timeout,
    provider: str,
    params: Mapping[str, str] | None = None,
) -> AsyncIterator[httpx.Response]:
    """POST ``body`` and yield the streaming response once it is known to be an event stream.

    An error status raises :class:`ProviderError` from the error body; so does a ``200`` with a
    JSON body, which some proxies send instead of a stream when the upstream failed.
    """
    async with client_for_call(client, timeout) as http:
        async with http.stream("POST", _parsed_url(url), json=body, headers=headers, params=params or None, timeout=timeout) as response:
            if response.status_code >= 400 or response.headers.get("content-type", "").startswith("application/json"):
                raise error_from_response(response, await response.aread(), provider)
            yield response


def _transport_body(response: httpx.Response) -> object | None:
    """The body stream the transport returned: httpx wraps it (``BoundAsyncStream._stream``).
    Over think's own transport it also offers ``direct_reads`` and ``complete``."""
    return getattr(response.stream, "_stream", None)


def body_reads(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body, a piece per network read: ``aiter_raw`` unless it is content-encoded (gzip,
    which ``aiter_bytes`` decodes), because each layer of ``aiter_bytes`` is paid per event —
    and over think's own transport its connection's reads themselves (httpx's response stream
    wraps the transport's, ``_stream``; ``aiter_raw`` adds two generator layers per read). The
    response is closed as usual, by the ``client.stream`` block around the read."""
    if response.headers.get("content-encoding", "identity").strip().lower() not in ("", "identity"):
        return response.aiter_bytes()
    direct = getattr(_transport_body(response), "direct_reads", None)
    if direct is not None and not response.is_stream_consumed:
        response.is_stream_consumed = True
        reads: AsyncIterator[bytes] = direct()
        return reads
    return response.aiter_raw()


def call_timeout(default: httpx.Timeout, seconds: float | None) -> httpx.Timeout:
    """``CallSettings.timeout`` (seconds) bounds each network operation of the call."""
    return default if seconds is None else httpx.Timeout(seconds)


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


def error_from_response(response: httpx.Response, content: bytes, provider: str) -> ProviderError:
    """A :class:`ProviderError` from a non-2xx response, whatever the server's error shape.

    Handles ``{"error": {"message", "type", "code"}}`` (OpenAI, Azure, Groq, DeepSeek,
    Anthropic), ``{"error": "text"}`` (Ollama), top-level ``message``/``type``/``code`` (vLLM,
    OpenRouter) and non-JSON bodies.
    """
    text = content.decode("utf-8", "replace")
    body: Any = text
    try:
        body = json.loads(text)
    except ValueError:
        pass
    message = code = etype = None
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            message, code, etype = _text(err.get("message")), _text(err.get("code")), _text(err.get("type"))
            details = err.get("details")
            if code is None and isinstance(details, dict):
                code = _text(details.get("error_code"))
            if etype is None:
                etype = _text(err.get("status"))  # Google: "INVALID_ARGUMENT"
        elif isinstance(err, str):
            message = err
        message = message or _text(body.get("message"))
        code = code or _text(body.get("code"))
        if etype is None and body.get("type") != "error":
            etype = _text(body.get("type"))
    if not message:
        message = text.strip()[:500] or response.reason_phrase or "request failed"
    if response.status_code in (401, 403):
        message = f"{message} (authentication failed: check the API key)"
    return ProviderError(
        message,
        status=response.status_code,
        code=code,
        type=etype,
        headers=response.headers,
        body=body,
        provider=provider,
    )


def stream_error(payload: Mapping[str, Any], provider: str, default: str) -> ProviderError:
    """A :class:`ProviderError` (no HTTP status) from an error event inside a 200 stream."""
    err = payload.get("error")
    if isinstance(err, dict):
        return ProviderError(
            _text(err.get("message")) or default,
            code=_text(err.get("code")),
            type=_text(err.get("type")),
            body=payload,
            provider=provider,
        )
    return ProviderError(_text(err) or _text(payload.get("message")) or default, body=payload, provider=provider)


def incomplete_stream(provider: str) -> ProviderError:
    """The connection closed cleanly before the provider's end-of-stream marker."""
    return ProviderError(
        "the stream ended before the response was complete", type="incomplete_stream", provider=provider
    )


def invalid_event(provider: str, data: str) -> ProviderError:
    """An event whose data is not the JSON the protocol promises (a truncated or garbled stream)."""
    return ProviderError(
        f"invalid JSON in stream event: {data[:200]!r}", type="invalid_stream", body=data, provider=provider
    )


async def finish_reading(events: AsyncIterator[Any], response: httpx.Response, seconds: float = 1.0) -> None:
    """Read what is left of ``response`` after its end marker (``[DONE]``, ``message_stop``).

    A response closed with bytes unread cannot go back to the connection pool: draining the
    chunked terminator lets the next step reuse the connection. Bounded, because a server may
    keep a stream open after its end marker; then the connection is simply not reused. Over
    think's own transport a response whose end has arrived (nearly always with the marker, in
    the same read) goes back as it is: no drain, no timer.
    """
    if getattr(_transport_body(response), "complete", False) is True:
        return
    try:
        async with asyncio.timeout(seconds):
            async for _ in events:
                pass
    except (TimeoutError, httpx.HTTPError, ProviderError):
        pass
