"""The base of every streaming-HTTP provider: one attempt loop, one wire mapping per provider.

A provider that answers a POST with a server-sent event stream is a subclass that supplies:

* its defaults: ``provider``, ``default_base_url``, ``base_url_env``, ``api_key_env``, ``path``
  (or :meth:`StreamingHTTPModel.endpoint`), and :meth:`StreamingHTTPModel.default_headers` (the
  auth header's shape, an API version);
* :meth:`StreamingHTTPModel.build_body`: the JSON body of one step;
* :meth:`StreamingHTTPModel.event_mapper`: a fresh :class:`EventMapper` per response, which
  maps each event to model events (one small method per event type) and ends with a ``Finish``.

Everything else is here, once: the API key (explicit, from the environment, or none for a
loopback server), the base URL, the client (the caller's, shared, or one per call), timeouts,
extra headers and query parameters, pre-output retries, and the attempt itself: POST, check the
answer is an event stream, decode it, map it, and read it to the end so the connection goes back
to the pool.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from contextlib import aclosing
from typing import Any, ClassVar, TypedDict

import httpx

from ..errors import ProviderError
from ..events import Finish, ModelEvent, Usage
from ._http import (
    DEFAULT_TIMEOUT,
    AnyClient,
    body_reads,
    call_timeout,
    finish_reading,
    incomplete_stream,
    invalid_event,
    post_event_stream,
    resolve_api_key,
)
from ._wire import TextEventShape
from .base import ModelRequest
from .exchange import record_request, record_response
from .retry import RetryPolicy, stream_with_retry
from .sse import SSEDecoder, SSEEvent

__all__ = ["NO_EVENTS", "EventMapper", "HTTPModelOptions", "StreamingHTTPModel"]

NO_EVENTS: tuple[ModelEvent, ...] = ()
"""What :meth:`EventMapper.on_event` returns for an event that maps to nothing (shared, not rebuilt)."""

_SHAPE_ERRORS = (AttributeError, TypeError, ValueError, KeyError)
"""What mapping raises on an event whose JSON is invalid or of the wrong shape (a string where
an object belongs, ...): reported as an invalid stream, which is retryable before output."""


class HTTPModelOptions(TypedDict, total=False):
    """The constructor options every streaming-HTTP model accepts (see :class:`StreamingHTTPModel`)."""

    api_key: str | None
    base_url: str | None
    client: AnyClient
    timeout: httpx.Timeout
    max_retries: int
    retry_cap_seconds: float
    retry_policy: RetryPolicy | None
    headers: dict[str, str] | None
    query: dict[str, str] | None
    provider: str | None


class EventMapper:
    """Maps the events of one response to model events; a new one per attempt.

    :meth:`on_event` returns the model events of one SSE event (often one, often none) and sets
    ``done`` on the provider's end-of-stream marker; :meth:`finish` yields what is left once the
    stream has ended, then the one ``Finish``. Invalid JSON or a wrong shape may simply raise
    (``ValueError``, ``TypeError``, ``KeyError``, ``AttributeError``): the attempt loop reports it
    as an invalid stream. A stream that ends with neither ``done`` nor a ``stop_reason`` was cut
    off, and is reported as incomplete before :meth:`finish` is called.

    A mapper that learns its stream's text event sets ``text_shape``: the SSE decoder then maps
    runs of that event itself (text deltas in place of the events), and :meth:`on_event` sees
    only the others.
    """

    __slots__ = ("provider", "model_id", "done", "stop_reason", "response_id", "response_model", "text_shape")

    def __init__(self, provider: str, model_id: str) -> None:
        self.provider = provider
        self.model_id = model_id
        #: The stream's text-delta event, learned by the mapper: the decoder maps runs of it itself.
        self.text_shape: TextEventShape | None = None
        self.done = False
        self.stop_reason: str | None = None
        self.response_id: str | None = None
        self.response_model: str | None = None

    def on_event(self, sse: SSEEvent) -> Sequence[ModelEvent]:
        raise NotImplementedError

    def finish(self) -> Iterator[ModelEvent]:
        raise NotImplementedError

    def finish_event(self, reason: str, usage: Usage, metadata: dict[str, Any] | None) -> Finish:
        """The ``Finish`` of this response: the model id the server reported, else the requested one."""
        return Finish(
            finish_reason=reason,
            usage=usage,
            response_id=self.response_id,
            model_id=self.response_model or self.model_id,
            provider_metadata=metadata,
        )

    def invalid_usage(self, usage: Any) -> ProviderError:
        """The error for a usage object of the wrong shape."""
        return invalid_event(self.provider, json.dumps(usage))


class StreamingHTTPModel:
    """A :class:`~think_core.models.base.Model` over one streaming POST per step.

    ``api_key=None`` reads the ``api_key_env`` variable; ``api_key=""`` sends no key. With no key,
    a loopback ``base_url`` (a local server) works keyless and anything else raises
    ``ConfigurationError`` at construction, before any request.
    ``client``: a shared ``httpx.AsyncClient`` (or ``SharedClient``) gives connection reuse across
    calls and is never closed here; without one, each call uses its own short-lived client.
    ``max_retries``/``retry_cap_seconds`` (or a whole ``retry_policy``): pre-output retries.
    ``headers``/``query`` are added to every request.
    """

    provider: str = "http"
    #: Other names ``provider_options`` may key this provider's entry by (``"gemini"`` for ``"google"``).
    provider_aliases: ClassVar[tuple[str, ...]] = ()
    default_base_url: ClassVar[str] = ""
    base_url_env: ClassVar[str] = ""
    api_key_env: ClassVar[str] = ""
    path: ClassVar[str] = ""

    #: This model retries transient failures itself before any output, so the engine does not
    #: retry them again (which would multiply the attempts).
    retries_before_output = True

    def __init__(
        self,
        model_id: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: AnyClient = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        retry_cap_seconds: float = 60.0,
        retry_policy: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
        provider: str | None = None,
    ) -> None:
        self.model_id = model_id
        self.provider = provider or type(self).provider
        env_url = os.environ.get(self.base_url_env) if self.base_url_env else None
        self.base_url = (base_url or env_url or self.default_base_url).rstrip("/")
        env_key = os.environ.get(self.api_key_env) if self.api_key_env else None
        self._api_key = resolve_api_key(api_key, env_key, self.api_key_env, self.base_url, self.provider)
        self._client = client
        self._timeout = timeout
        self._retry = retry_policy or RetryPolicy(max_retries=max_retries, max_retry_after=retry_cap_seconds)
        self._headers = dict(headers or {})
        self._query = dict(query or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_id!r}, base_url={self.base_url!r})"

    # -- what a provider supplies ------------------------------------------------------------

    @property
    def option_names(self) -> tuple[str, ...]:
        """The keys of ``provider_options`` whose entry this model takes."""
        return (self.provider, type(self).provider, *self.provider_aliases)

    def endpoint(self, request: ModelRequest) -> str:
        """The URL of one step's POST."""
        return self.base_url + self.path

    def default_headers(self) -> dict[str, str]:
        """Headers every request carries before the caller's: by default a bearer token."""
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (public so tests and plugins can inspect it)."""
        raise NotImplementedError

    def event_mapper(self, request: ModelRequest) -> EventMapper:
        """A fresh mapper for the response to ``request``."""
        raise NotImplementedError

    # -- the attempt loop --------------------------------------------------------------------

    def request_headers(self, request: ModelRequest) -> dict[str, str]:
        headers = {"accept": "text/event-stream", **self.default_headers()}
        headers.update(self._headers)
        if request.settings.headers:
            headers.update(request.settings.headers)
        return headers

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one step; retried (per the retry policy) only until the first event."""
        return stream_with_retry(lambda: self._events(request), self._retry)

    def stream_batches(self, request: ModelRequest) -> AsyncIterator[list[ModelEvent]]:
        """:meth:`stream`'s events, a list per network read (never empty): the turn's hot path
        iterates them itself, one generator step per read instead of two per event."""
        return stream_with_retry(lambda: self._attempt(request), self._retry)

    async def _events(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        async with aclosing(self._attempt(request)) as batches:
            async for batch in batches:
                for event in batch:
                    yield event

    async def _attempt(self, request: ModelRequest) -> AsyncGenerator[list[ModelEvent], None]:
        mapper = self.event_mapper(request)
        provider = self.provider
        body = self.build_body(request)
        record_request(body)
        async with post_event_stream(
            self._client,
            self.endpoint(request),
            body=body,
            headers=self.request_headers(request),
            params=self._query,
            timeout=call_timeout(self._timeout, request.settings.timeout),
            provider=provider,
        ) as response:
            record_response(response.headers)
            # The reads decoded here, not through another generator (aiter_sse_batches): each
            # layer between the socket and the turn is paid twice per network read.
            decoder = SSEDecoder(mapper.text_shape)
            feed = decoder.feed
            reads = body_reads(response)
            try:
                async for chunk in reads:
                    batch = feed(chunk)
                    if not batch:
                        continue
                    events, failure = _map_batch(batch, mapper, provider)
                    if events:
                        yield events
                    if failure is not None:
                        # What came before it in this read was streamed first, as if the events
                        # had arrived one by one: the failure comes after that output.
                        raise failure
                    if mapper.done:
                        await finish_reading(reads, response)
                        break
                else:
                    tail_events, failure = _map_batch(decoder.flush(), mapper, provider)
                    if tail_events:
                        yield tail_events
                    if failure is not None:
                        raise failure
            finally:
                await _close_reads(reads)
            if not mapper.done and mapper.stop_reason is None:
                raise incomplete_stream(provider)
            tail = list(mapper.finish())
            if tail:
                yield tail


async def _close_reads(reads: AsyncIterator[bytes]) -> None:
    """A body read to its end or left early: its generators are closed now, not by the GC."""
    close = getattr(reads, "aclose", None)
    if close is not None:
        await close()


def _map_batch(batch: list[Any], mapper: EventMapper, provider: str) -> tuple[list[ModelEvent], BaseException | None]:
    """The events of one network read, and the error that cut it short (if one did)."""
    events: list[ModelEvent] = []
    on_event = mapper.on_event
    for sse in batch:
        if type(sse) is not SSEEvent:
            events.append(sse)  # a text delta the decoder took by the learned shape
            continue
        try:
            mapped = on_event(sse)
        except _SHAPE_ERRORS:
            return events, invalid_event(provider, sse.data)
        except Exception as exc:
            return events, exc
        if mapped:
            events.extend(mapped)
        if mapper.done:
            break
    return events, None
