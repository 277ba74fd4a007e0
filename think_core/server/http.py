"""HTTP endpoints: ``POST /api/chat`` (AI SDK UI message stream over SSE), history and
submissions of a session, and a health check.

``POST /api/chat`` accepts the body of the AI SDK ``DefaultChatTransport``
(``{id, messages, trigger, messageId, ...custom}``; ``id`` is the session id) and answers with
the UI message stream protocol: ``content-type: text/event-stream``,
``x-vercel-ai-ui-message-stream: v1``, one ``data: <chunk JSON>`` event per chunk and a final
``data: [DONE]``, so ``useChat`` front ends work unchanged. The body must be
``Content-Type: application/json`` (415 otherwise) and at most ``max_body_bytes`` (413, enforced
while reading). Errors before streaming are JSON ``{"error": {"message", "type"}}`` with a
4xx/5xx status: a user's file larger than the agent's ``AttachmentLimits`` gets 413
(``payload_too_large``), a malformed one 400 (``invalid_attachment``), nothing stored.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..agent import Think
from ..errors import AttachmentTooLarge, ClientRequestRefused, InvalidAttachment, StoreUnavailable, ThinkError
from ..messages import new_id
from ..runner.streams import shows_nothing
from .frames import MAX_JSON_DEPTH, ProtocolError, check_json, dumps, error_body, split_chat_body
from .hub import SessionHub
from .relay import TurnRelay

logger = logging.getLogger("think.server")

UI_MESSAGE_STREAM_HEADERS = {
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}


class HTTPError(Exception):
    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


def error_response(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse(error_body(message, kind), status_code=status)


async def read_json(request: Request, max_bytes: int) -> Any:
    """The request's JSON body, refusing more than ``max_bytes`` (413) before reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > max_bytes:
                raise HTTPError(413, f"request body exceeds {max_bytes} bytes", "payload_too_large")
        except ValueError:
            raise HTTPError(400, "invalid content-length header", "invalid_request") from None
    data = bytearray()
    async for piece in request.stream():
        data.extend(piece)
        if len(data) > max_bytes:
            raise HTTPError(413, f"request body exceeds {max_bytes} bytes", "payload_too_large")
    try:
        value = json.loads(data)
    except RecursionError:
        raise HTTPError(400, f"request body nests deeper than {MAX_JSON_DEPTH} levels", "invalid_json") from None
    except ValueError as exc:
        raise HTTPError(400, f"request body is not valid JSON: {exc}", "invalid_json") from None
    try:
        check_json(value, "request body")
    except ProtocolError as exc:
        raise HTTPError(400, exc.message, exc.kind) from None
    return value


def sse(chunk: dict[str, Any]) -> str:
    return f"data: {dumps(chunk)}\n\n"


SSE_DONE = "data: [DONE]\n\n"


def require_json_content(request: Request) -> None:
    """Refuse bodies not declared as JSON (415). A page on another origin can send a "simple"
    ``text/plain`` POST without a CORS preflight; ``application/json`` always needs one."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":
        raise HTTPError(415, "the request body must be sent as Content-Type: application/json", "unsupported_media_type")


async def _report_unparsed(session: Any, exc: ProtocolError) -> str:
    """``on_chat_error`` with ``stage="parse"`` for a chat body of a known session that could not
    be parsed; the response carries the text it settles on."""
    try:
        text: str = await session.report_unparsed(exc, exc.request_id)
        return text
    except Exception:  # the client still gets its 400
        logger.exception("reporting an unparsed chat request failed")
        return exc.message


async def chat(
    request: Request, agent: Think, hub: SessionHub, max_body_bytes: int, *, cancel_on_disconnect: bool = False
) -> Response:
    require_json_content(request)
    payload = await read_json(request, max_body_bytes)
    if not isinstance(payload, dict):
        raise HTTPError(400, "request body must be a JSON object", "invalid_request")
    session_id = payload.get("id")
    if not isinstance(session_id, str) or not session_id:
        raise HTTPError(400, "'id' (the chat session id) must be a non-empty string", "invalid_request")
    check_session_id(session_id)
    session = agent.session(session_id)
    try:
        transcript, turn_body = split_chat_body(payload, drop=("id",))
    except ProtocolError as exc:
        raise HTTPError(400, await _report_unparsed(session, exc), exc.kind) from None
    # A closed response is a reload or a lost connection, not a stop (POST .../stop is): the
    # accepted chat runs on, and the reloaded page resumes it.
    transcript.stop_on_close = cancel_on_disconnect
    stream_id = new_id("req")
    # WebSocket clients of the session (the chat page) see HTTP turns too.
    relay = TurnRelay(hub, session_id, stream_id, transcript)
    chunks = session.stream_transcript(transcript, body=turn_body, trigger="http", request_id=stream_id)
    first = await _first_chunk(chunks)

    async def body() -> AsyncIterator[str]:
        try:
            if first is not None:
                relay.chunk(first)
                yield sse(first)
                async for chunk in chunks:
                    relay.chunk(chunk)
                    yield sse(chunk)
        except Exception as exc:  # after the 200: report in the stream, as the AI SDK does
            logger.exception("HTTP turn of session %r failed", session_id)
            error = {"type": "error", "errorText": str(exc) or type(exc).__name__}
            relay.chunk(error)
            yield sse(error)
        finally:
            await chunks.aclose()
            if hub.connections(session_id):
                await relay.finish(session)
        yield SSE_DONE

    return StreamingResponse(body(), media_type="text/event-stream", headers=UI_MESSAGE_STREAM_HEADERS)


async def _first_chunk(chunks: AsyncGenerator[dict[str, Any], None]) -> dict[str, Any] | None:
    """Start the turn before answering, so that start-up errors get a proper status; ``None``
    when nothing runs (the answers left a tool call waiting)."""
    try:
        return await chunks.__anext__()
    except StopAsyncIteration:
        return None
    except ClientRequestRefused as exc:  # nothing was stored
        await chunks.aclose()
        raise HTTPError(400, str(exc), "invalid_request") from None
    except AttachmentTooLarge as exc:  # nothing was stored
        await chunks.aclose()
        raise HTTPError(413, str(exc), "payload_too_large") from None
    except InvalidAttachment as exc:  # nothing was stored
        await chunks.aclose()
        raise HTTPError(400, str(exc), "invalid_attachment") from None
    except StoreUnavailable as exc:  # nothing was accepted: the client may send it again
        await chunks.aclose()
        raise HTTPError(503, f"the chat cannot be served now: {exc}", "unavailable") from None
    except ThinkError as exc:  # e.g. a plugin failing to configure the session
        await chunks.aclose()
        raise HTTPError(500, str(exc), "internal_error") from None


MAX_SESSION_ID = 256


def check_session_id(session_id: str) -> None:
    if len(session_id) > MAX_SESSION_ID or any(ord(c) < 32 or c in "/\\" for c in session_id):
        raise HTTPError(400, f"invalid session id (at most {MAX_SESSION_ID} printable characters, no slashes)", "invalid_request")


async def session_messages(agent: Think, session_id: str) -> Response:
    check_session_id(session_id)
    # A read does not open the session: no configure_session, no recovery of submissions.
    messages = await agent.session(session_id).messages()
    return JSONResponse({"id": session_id, "messages": [m.model_dump(mode="json") for m in messages]})


async def agent_messages(agent: Think, session_id: str) -> Response:
    """``GET /agents/think/{id}/get-messages``: the transcript as a JSON array (what Cloudflare's
    ``useAgentChat`` loads before its socket opens)."""
    check_session_id(session_id)
    messages = await agent.session(session_id).messages()
    return JSONResponse([m.model_dump(mode="json") for m in messages])


async def resume_stream(agent: Think, session_id: str) -> Response:
    """``GET /api/chat/{id}/stream`` (``useChat({ resume: true })``): 204 when no turn of the
    session streams; else its UI message stream from the first chunk, then live, to ``[DONE]``."""
    check_session_id(session_id)
    live = await agent.session(session_id).streams.find()
    if live is None or not live.streaming:
        return Response(status_code=204)
    # Decided on the turn's first chunk, not before it (``shows_nothing``): replayed, a lone
    # error would become the reloaded page's own (useChat's status "error", never "ready") while
    # the stream is still open between the failure being stored and its end (issue 33).
    chunks = live.follow()
    first = await anext(chunks, None)
    if first is None or shows_nothing(first[1]):
        await chunks.aclose()
        return Response(status_code=204)

    async def body() -> AsyncIterator[str]:
        try:
            for chunk in await live.replay_prefix():  # a continuation: the message it continues
                yield sse(chunk)
            yield sse(first[1])
            async for _, chunk in chunks:
                yield sse(chunk)
            yield SSE_DONE
        finally:
            await chunks.aclose()

    return StreamingResponse(body(), media_type="text/event-stream", headers=UI_MESSAGE_STREAM_HEADERS)


async def stop_chat(agent: Think, session_id: str) -> Response:
    """``POST /api/chat/{id}/stop``: stop the answer being written (what a ``useChat`` stop
    button calls besides ``stop()``, which only closes its own fetch). ``stopped`` lists the
    turns stopped (empty when none was running)."""
    check_session_id(session_id)
    stopped = await agent.session(session_id).stop()
    return JSONResponse({"id": session_id, "stopped": stopped})


async def session_submissions(agent: Think, session_id: str, status: str | None, limit: str | None) -> Response:
    check_session_id(session_id)
    n: int | None = None
    if limit is not None:
        try:
            n = int(limit)
        except ValueError:
            raise HTTPError(400, "'limit' must be an integer", "invalid_request") from None
        if n < 1:
            raise HTTPError(400, "'limit' must be at least 1", "invalid_request")
    rows = await agent.session(session_id).list_submissions(status=status, limit=n)
    return JSONResponse({"id": session_id, "submissions": [json.loads(r.model_dump_json()) for r in rows]})
