"""The ASGI application: ``create_app(agent)``.

Routes::

    GET  /                                   the built-in chat page (static HTML + vanilla JS)
    GET  /static/{chat.js,chat.css,...}      the page's script, styles and vendored Markdown libraries
    GET  /healthz                            {"status": "ok"} (never needs the token)
    WS   /agents/think/{session_id}          cf_agent_* chat protocol (see ``ws`` / ``frames``)
    POST /api/chat                           AI SDK UI message stream (see ``http``)
    POST /api/chat/{session_id}/stop         stop the answer being written (a stop button)
    GET  /api/chat/{session_id}/stream       the running turn's stream from its start, or 204 (resume)
    GET  /agents/think/{session_id}/get-messages  [UIMessage...] (Cloudflare's useAgentChat)
    GET  /api/sessions/{session_id}/messages     {"id", "messages": [UIMessage...]}
    GET  /api/sessions/{session_id}/submissions  {"id", "submissions": [...]} (?status=&limit=)

With a token (``api_token=`` or ``THINK_API_TOKEN``) every API route and the WebSocket need
``Authorization: Bearer <token>``; the WebSocket also accepts ``?token=<token>`` or a
``bearer.<token>`` subprotocol because browsers cannot set headers on it (see ``auth``). The
page itself holds no data and is public.

Every route, the WebSocket included, sits behind the ``Origin`` / ``Host`` checks of
``security`` and answers with ``nosniff``, ``no-referrer`` and a ``frame-ancestors 'none'``
Content-Security-Policy; the page's own CSP allows only this server's script, styles and socket.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from ..agent import Think
from ..errors import StoreUnavailable
from . import http
from .auth import accepted_subprotocol, is_authorized
from .frames import timeline_frame
from .hub import SessionHub
from .remote import RemoteTurns
from .security import (
    PAGE_CSP,
    WS_POLICY_VIOLATION,
    AccessGuard,
    AccessPolicy,
    SecurityHeaders,
)
from .timeline import TimelineRecorder
from .ws import serve_socket

#: Largest accepted request body / WebSocket frame. Chat clients resend the whole transcript
#: with every request, and a user's files travel in it as base64 data URLs (a third larger than
#: the file), so this is generous: the files of one message at the default
#: ``AttachmentLimits`` (20 MiB) fit, as in the providers' own request limits (Anthropic's is
#: 32 MB). It bounds memory per request; a larger body gets 413 before it is read.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024


def ws_frame_limit(max_body_bytes: int) -> int:
    """The WebSocket layer's own frame limit (uvicorn's ``ws_max_size``) for an app taking
    ``max_body_bytes``: above it (at least uvicorn's default, 16 MiB), so that a frame a little
    too large gets the app's error frame and the connection stays; a far larger one is refused
    (close code 1009) before its bytes are read."""
    return max(max_body_bytes + 1024 * 1024, 16 * 1024 * 1024)


#: The page's assets: name -> media type. Nothing else under ``static/`` is served.
ASSETS = {
    "chat.js": "text/javascript; charset=utf-8",
    "chat.css": "text/css; charset=utf-8",
    # Markdown for the assistant's text, sanitised (vendored builds, see static/VENDORED.md).
    "marked.umd.js": "text/javascript; charset=utf-8",
    "purify.min.js": "text/javascript; charset=utf-8",
}


def _static(name: str) -> str:
    return resources.files(__package__).joinpath(f"static/{name}").read_text(encoding="utf-8")


async def page(request: Request) -> Response:
    return HTMLResponse(_static("index.html"), headers={"cache-control": "no-cache", "content-security-policy": PAGE_CSP})


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in ASSETS:
        return await not_found(request, LookupError(name))
    return Response(_static(name), media_type=ASSETS[name], headers={"cache-control": "no-cache"})


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def not_found(request: Request, exc: Exception) -> Response:
    return http.error_response(404, f"no route for {request.method} {request.url.path}", "not_found")


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    return http.error_response(405, f"{request.method} is not allowed on {request.url.path}", "method_not_allowed")


async def server_error(request: Request, exc: Exception) -> Response:
    return http.error_response(500, "internal server error", "internal_error")


Endpoint = Callable[[Request], Awaitable[Response]]


def guarded(handler: Endpoint, token: str | None, *, allow_query: bool = False) -> Endpoint:
    """``handler`` behind the bearer token, with :class:`http.HTTPError` as a JSON error."""

    async def endpoint(request: Request) -> Response:
        if not is_authorized(request, token, allow_query=allow_query):
            return http.error_response(401, "missing or invalid bearer token", "unauthorized")
        try:
            return await handler(request)
        except http.HTTPError as exc:
            return http.error_response(exc.status, exc.message, exc.kind)
        except StoreUnavailable as exc:  # a database restart or outage: try again shortly
            return http.error_response(503, f"the database is unavailable: {exc}", "unavailable")

    return endpoint


def timeline_recorder(hub: SessionHub) -> TimelineRecorder:
    def sink(session_id: str, request_id: str, event: dict[str, Any]) -> None:
        stream_id = hub.request_streams.get(request_id, request_id)
        hub.broadcast(session_id, timeline_frame(stream_id, {**event, "requestId": request_id}))

    return TimelineRecorder(sink)


def socket_endpoint(agent: Think, hub: SessionHub, token: str | None, max_frame_bytes: int) -> Callable[[WebSocket], Awaitable[None]]:
    async def socket(websocket: WebSocket) -> None:
        session_id = websocket.path_params["session_id"]
        if not is_authorized(websocket, token, allow_query=True, allow_subprotocol=True):
            await websocket.close(code=WS_POLICY_VIOLATION)  # before accept: an HTTP 403
            return
        try:
            http.check_session_id(session_id)
        except http.HTTPError:
            await websocket.close(code=WS_POLICY_VIOLATION)
            return
        await serve_socket(websocket, agent, hub, max_frame_bytes=max_frame_bytes, subprotocol=accepted_subprotocol(websocket))

    return socket


def lifespan(
    agent: Think, hub: SessionHub, recorder: TimelineRecorder | None, recover: bool
) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def run(app: Starlette) -> AsyncIterator[None]:
        if recorder is not None:
            agent.plugin_manager.register(recorder, name=f"{recorder.name}_{id(recorder):x}")
        if recover:  # the turns a crash interrupted go on, whether or not their clients come back
            await agent.recover()
        remote = RemoteTurns(agent, hub)  # turns other servers run for this server's clients
        await remote.start()
        try:
            yield
        finally:
            await remote.aclose()
            await hub.aclose()
            if recorder is not None and agent.plugin_manager.is_registered(recorder):
                agent.plugin_manager.unregister(recorder)

    return run


def middleware(policy: AccessPolicy) -> list[Middleware]:
    """Outermost first: headers on every answer (refusals too), then the access checks, then
    CORS for the allowed origins, so that their pages may read the API's answers."""
    stack = [Middleware(SecurityHeaders), Middleware(AccessGuard, policy=policy)]
    if policy.cors_origins:
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=policy.cors_origins,
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type"],
                expose_headers=["x-vercel-ai-ui-message-stream"],
            )
        )
    return stack


def create_app(
    agent: Think,
    *,
    api_token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    timeline: bool = True,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] | None = None,
    bind_host: str | None = "127.0.0.1",
    recover: bool = True,
    cancel_on_disconnect: bool = False,
) -> Starlette:
    """An ASGI app serving ``agent``.

    :param api_token: bearer token required by the API and the WebSocket; defaults to the
        ``THINK_API_TOKEN`` environment variable; empty/``None`` means no authentication.
    :param max_body_bytes: larger HTTP bodies get 413 (counted while reading), larger WebSocket
        frames an error frame (frames far larger, past the server's ``ws_max_size``, close the
        connection with 1009 unread). The files a user sends have limits of their own, the
        agent's ``Think(attachments=...)``: 413 / an error frame too, nothing stored.
    :param timeline: register a recorder plugin that sends each turn's hook events to the
        WebSocket clients as ``think_timeline`` frames (the page shows them).
    :param allowed_origins: browser origins (``scheme://host[:port]``) allowed besides the
        server's own; ``"*"`` allows every origin, ``"null"`` the opaque ``Origin: null``.
        Requests from other origins get 403; the listed ones also get CORS headers.
    :param allowed_hosts: ``Host`` names accepted besides ``localhost``, ``127.0.0.1`` and
        ``[::1]`` (``*.example.com`` for subdomains, ``"*"`` for any). Giving the list turns the
        ``Host`` check on whatever ``bind_host`` is.
    :param bind_host: the address the server listens on. On a loopback address (the default,
        as ``think serve``'s) the ``Host`` check is on, which stops DNS rebinding; pass the real
        address (``"0.0.0.0"``) or ``None`` when serving beyond this machine.
    :param recover: at start-up, resume every session with unfinished durable submissions
        (server chats are durable submissions too): ``await agent.recover()``.
    :param cancel_on_disconnect: stop an HTTP chat's turn when its client closes the response.
        Off by default: a reload, a closed tab or a dropped connection is not a stop; the turn
        runs to its end, is stored, and a reloaded page resumes it. Stopping is explicit:
        ``POST /api/chat/{id}/stop`` (or the WebSocket's cancel frame).
    """
    token = api_token if api_token is not None else os.environ.get("THINK_API_TOKEN") or None
    hub = SessionHub()
    recorder = timeline_recorder(hub) if timeline else None

    async def chat(request: Request) -> Response:
        return await http.chat(request, agent, hub, max_body_bytes, cancel_on_disconnect=cancel_on_disconnect)

    async def stop(request: Request) -> Response:
        return await http.stop_chat(agent, request.path_params["session_id"])

    async def messages(request: Request) -> Response:
        return await http.session_messages(agent, request.path_params["session_id"])

    async def resume(request: Request) -> Response:
        return await http.resume_stream(agent, request.path_params["session_id"])

    async def agent_messages(request: Request) -> Response:
        return await http.agent_messages(agent, request.path_params["session_id"])

    async def submissions(request: Request) -> Response:
        q = request.query_params
        return await http.session_submissions(agent, request.path_params["session_id"], q.get("status"), q.get("limit"))

    app = Starlette(
        routes=[
            Route("/", page, methods=["GET"]),
            Route("/static/{name}", asset, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/api/chat", guarded(chat, token), methods=["POST"]),
            Route("/api/chat/{session_id}/stream", guarded(resume, token), methods=["GET"]),
            Route("/api/chat/{session_id}/stop", guarded(stop, token), methods=["POST"]),
            # The socket's own auth: agents clients put the token in the URL they derive this from.
            Route("/agents/think/{session_id}/get-messages", guarded(agent_messages, token, allow_query=True), methods=["GET"]),
            Route("/api/sessions/{session_id}/messages", guarded(messages, token), methods=["GET"]),
            Route("/api/sessions/{session_id}/submissions", guarded(submissions, token), methods=["GET"]),
            WebSocketRoute("/agents/think/{session_id}", socket_endpoint(agent, hub, token, max_body_bytes)),
        ],
        middleware=middleware(AccessPolicy.build(allowed_origins, allowed_hosts, bind_host)),
        exception_handlers={404: not_found, 405: method_not_allowed, 500: server_error},
        lifespan=lifespan(agent, hub, recorder, recover),
    )
    app.state.agent = agent
    app.state.hub = hub
    app.state.max_body_bytes = max_body_bytes  # the WebSocket layer's own frame limit is set above it
    return app
