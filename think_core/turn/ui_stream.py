"""Builds the assistant UI message of a turn and, optionally, the AI SDK UI message stream
chunks that describe it (``start``, ``start-step``, ``text-start/delta/end``,
``reasoning-*``, ``tool-input-*``, ``tool-output-*``, ``source-url``, ``source-document``,
``file``, ``finish-step``, ``finish``, ``error``).

The same chunks are sent by ``session.stream()``, the WebSocket server and ``POST /api/chat``.

``start`` and ``start-step`` are held back until the message has something in it: a turn that
fails (or is stopped) before any output sends its ``error`` (or ``abort``) alone. A client (the AI
SDK's ``useChat``) adds the message ``start`` announces to its transcript, and the server stores
no message without content, so announcing it early left the two transcripts disagreeing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..events import DocumentSource, GeneratedFile, UrlSource, Usage
from ..messages import new_id
from ..types import UIMessage

Emit = Callable[[dict[str, Any]], None] | None

CANCELLED_CALL = "The tool call was cancelled before its result was recorded; it may or may not have taken effect."


class AssistantMessageBuilder:
    """Accumulates parts of one assistant message; emits UI chunks through ``emit`` if given."""

    def __init__(self, message_id: str, emit: Emit = None, *, send_reasoning: bool = True) -> None:
        self.message_id = message_id
        self.parts: list[dict[str, Any]] = []
        #: How many of ``parts`` the message already had before this turn (a continuation
        #: extends the answer it continues; what follows them is what this turn added).
        self.continued_parts = 0
        self._sink = emit
        self._emit: Emit = self._framed if emit is not None else None
        self._held: list[dict[str, Any]] = []  # start / start-step, until there is something to show
        self._opened = False
        self.send_reasoning = send_reasoning
        self._open_kind: str | None = None  # "text" | "reasoning" | None
        self._open_part: dict[str, Any] | None = None
        self._open_id = ""
        self._pieces: list[str] = []
        self._block_counter = 0
        self._tool_parts: dict[str, dict[str, Any]] = {}
        self.persisted: UIMessage | None = None  # set by the session once stored
        #: Why the turn failed; stored as the message's ``metadata["error"]`` (see the runner
        #: for a failure before any output).
        self.error_text: str | None = None
        #: Whether the turn was stopped (cancelled); stored as ``metadata["stopped"]``.
        self.stopped = False
        #: Each call a plugin decided (blocked, substituted): stored as ``metadata["decisions"]``
        #: (tool call id → ``{"decision", "by"}``), so that every client, after a reload or on
        #: another server, tells a blocked call from one that ran.
        self.decisions: dict[str, dict[str, Any]] = {}
        #: The plugins whose stream transforms shaped the answer (``note_transforms``).
        self.transformed_by: list[str] = []
        #: The tokens each model used for this message, by model id: stored as
        #: ``metadata["usage"]`` with the answer, so a session's spend is read from its records
        #: (every process sharing the store; a step replayed after a crash counted once).
        self.usage: dict[str, Usage] = {}

    @classmethod
    def resume(cls, message: UIMessage, emit: Emit = None) -> AssistantMessageBuilder:
        """A builder over an existing message, to write tool results back into it."""
        builder = cls(message.id, emit)
        builder.parts = [dict(p) for p in message.parts]
        builder._tool_parts = {p["toolCallId"]: p for p in builder.parts if "toolCallId" in p}
        builder.decisions = stored_decisions(message.metadata)
        builder.usage = stored_usage(message.metadata)
        return builder

    def restore(self, message_id: str, parts: list[dict[str, Any]], metadata: dict[str, Any] | None = None) -> None:
        """Continue the message ``message_id`` from ``parts`` (a durable turn resumed after a
        crash, a continuation); ``metadata`` is the stored message's (its decisions are kept)."""
        self.message_id = message_id
        self.parts = [dict(p) for p in parts]
        self._tool_parts = {p["toolCallId"]: p for p in self.parts if "toolCallId" in p}
        self.decisions = {**stored_decisions(metadata), **self.decisions}
        self.usage = stored_usage(metadata)

    def note_usage(self, model_id: str | None, usage: Usage) -> None:
        """A step's usage, added to its model's (see ``usage``)."""
        if usage != Usage():
            key = model_id or "unknown"
            self.usage[key] = self.usage.get(key, Usage()) + usage

    def note_decision(self, tool_call_id: str, decision: str, by: str | None, reason: str | None = None) -> None:
        """A plugin decided the call (``block``, ``substitute``, ``ask``): kept with the message."""
        noted = {k: v for k, v in self.decisions.get(tool_call_id, {}).items() if k == "rewrittenBy"}
        self.decisions[tool_call_id] = {"decision": decision, "by": by, **({"reason": reason} if reason else {}), **noted}

    def note_rewrite(self, tool_call_id: str, plugins: list[str]) -> None:
        """``transform_tool_result`` of ``plugins`` changed the call's output: kept with the message."""
        noted = self.decisions.setdefault(tool_call_id, {"decision": "allow", "by": None})
        noted["rewrittenBy"] = [*noted.get("rewrittenBy", []), *(p for p in plugins if p not in noted.get("rewrittenBy", []))]

    def note_transforms(self, plugins: list[str]) -> None:
        """The plugins whose ``transform_stream`` shaped this answer (``metadata.transformedBy``)."""
        self.transformed_by = [*self.transformed_by, *(p for p in plugins if p not in self.transformed_by)]

    # -- stream framing -------------------------------------------------------------------
    def _framed(self, chunk: dict[str, Any]) -> None:
        """Send ``chunk``, holding ``start`` / ``start-step`` back until the first chunk that
        shows something; an ``error``, an ``abort`` or a transient ``data-*`` chunk before that
        is sent alone (the message they would open is never stored)."""
        assert self._sink is not None
        kind = chunk["type"]
        if not self._opened:
            if kind in ("start", "start-step"):
                self._held.append(chunk)
                return
            if kind in ("error", "abort") or chunk.get("transient"):
                self._sink(chunk)
                return
            self._opened = True
            held, self._held = self._held, []
            for framing in held:
                self._sink(framing)
        self._sink(chunk)

    def _renumber_held(self) -> None:
        for chunk in self._held:
            if chunk["type"] == "start":
                chunk["messageId"] = self.message_id

    def start(self, metadata: dict[str, Any] | None = None) -> None:
        if self._emit:
            chunk: dict[str, Any] = {"type": "start", "messageId": self.message_id}
            if metadata:
                chunk["messageMetadata"] = metadata
            self._emit(chunk)

    def start_step(self) -> None:
        self._close_block()
        self.parts.append({"type": "step-start"})
        if self._emit:
            self._emit({"type": "start-step"})

    def finish_step(self) -> None:
        self._close_block()
        if self._emit:
            self._emit({"type": "finish-step"})

    def finish(self, metadata: dict[str, Any] | None = None) -> None:
        self._close_block()
        if self._emit:
            chunk: dict[str, Any] = {"type": "finish"}
            if metadata:
                chunk["messageMetadata"] = metadata
            self._emit(chunk)

    def error(self, error_text: str) -> None:
        self._close_block()
        self.error_text = error_text
        if self._emit:
            self._emit({"type": "error", "errorText": error_text})

    def note_error(self, error_text: str) -> None:
        """The error the turn failed with, as it stands before ``on_chat_error`` settles it
        (stored with the partial answer; :meth:`error` streams the final one)."""
        self.error_text = error_text

    def mark_persisted(self, message: UIMessage) -> None:
        """The answer as the store now holds it."""
        self.persisted = message

    def continues(self, earlier_parts: int) -> None:
        """This turn extends an answer that already had ``earlier_parts`` parts (what follows
        them is what this turn added)."""
        self.continued_parts = earlier_parts

    def continue_message(self, message_id: str) -> None:
        """Build on as the message ``message_id`` (a continuation extends the answer it continues)."""
        self.message_id = message_id
        self._renumber_held()

    def renumber(self) -> None:
        """Build a new message from here (a continuation re-run as a turn of its own)."""
        self.message_id = new_id()
        self._renumber_held()

    def show_reasoning(self, send_reasoning: bool) -> None:
        """Whether reasoning is streamed to clients (a turn's config may decide it)."""
        self.send_reasoning = send_reasoning

    def over(self, message: UIMessage) -> AssistantMessageBuilder:
        """A builder over ``message`` that streams where this one does (to write results of
        calls of an earlier message while this turn streams)."""
        return AssistantMessageBuilder.resume(message, self._emit)

    def data(self, name: str, data: Any) -> None:
        """A transient ``data-<name>`` chunk (not part of the persisted message)."""
        if self._emit:
            self._emit({"type": f"data-{name}", "data": data, "transient": True})

    def reset(self) -> None:
        """Discard everything built so far (the turn is being re-run)."""
        self._close_block()
        self.stopped = False
        self.parts = []
        self._tool_parts = {}
        self.error_text = None
        self.decisions = {}
        self.transformed_by = []
        # The re-run starts its own steps; the message's start, if not yet sent, still opens it.
        self._held = [chunk for chunk in self._held if chunk["type"] == "start"]

    def abort(self) -> None:
        """The turn was cancelled. Its partial message is persisted, so a tool call it cut off
        (streamed, or running) gets an error result instead of looking like one still waiting;
        a call whose input was still streaming is dropped (it never was a call)."""
        self._close_block()
        self.stopped = True
        self.drop_unfinished_tool_inputs()
        for call_id, part in self._tool_parts.items():
            if part.get("state") == "input-available":
                self.tool_error(call_id, CANCELLED_CALL)
        if self._emit:
            self._emit({"type": "abort"})

    # -- text and reasoning (hot path) -----------------------------------------------------
    def text_delta(self, text: str) -> None:
        if self._open_kind != "text":
            self._open_block("text")
        self._pieces.append(text)
        if self._emit:
            self._emit({"type": "text-delta", "id": self._open_id, "delta": text})

    def reasoning_delta(self, text: str, provider_metadata: dict[str, Any] | None = None) -> None:
        """Reasoning text, and/or what the provider needs back with the reasoning block it ends
        (``providerMetadata`` on the part). That metadata closes its block (Anthropic signs a
        thinking block last), so reasoning after it starts a block of its own."""
        part = self._open_part
        if self._open_kind != "reasoning" or (part is not None and "providerMetadata" in part):
            self._open_block("reasoning")
        if provider_metadata:
            self._open_part["providerMetadata"] = provider_metadata  # type: ignore[index]
            if not text:
                return
        self._pieces.append(text)
        if self._emit and self.send_reasoning:
            self._emit({"type": "reasoning-delta", "id": self._open_id, "delta": text})

    def text_block(self, text: str) -> None:
        """A whole text block (a stored answer replayed): its start, its text, its end."""
        self.text_delta(text)
        self._close_block()

    def reasoning_block(self, text: str) -> None:
        """A whole reasoning block (a stored answer replayed)."""
        self.reasoning_delta(text)
        self._close_block()

    def _open_block(self, kind: str) -> None:
        self._close_block()
        self._block_counter += 1
        block_id = f"{kind[0]}{self._block_counter}"
        part: dict[str, Any] = {"type": kind, "text": "", "_id": block_id}
        if kind == "reasoning" and not self.send_reasoning:
            part["hidden"] = True  # stored for the model's later turns, never served to a client
        self.parts.append(part)
        self._open_kind, self._open_part, self._open_id, self._pieces = kind, part, block_id, []
        if self._emit and (kind == "text" or self.send_reasoning):
            self._emit({"type": f"{kind}-start", "id": block_id})

    def _close_block(self) -> None:
        part = self._open_part
        if part is None:
            return
        part["text"] = "".join(self._pieces)
        block_id = part.pop("_id")
        kind = self._open_kind
        self._open_kind, self._open_part, self._pieces = None, None, []
        if self._emit and (kind == "text" or self.send_reasoning):
            self._emit({"type": f"{kind}-end", "id": block_id})

    # -- tools ---------------------------------------------------------------------------------
    def _tool_part(self, tool_call_id: str, tool_name: str) -> dict[str, Any]:
        part = self._tool_parts.get(tool_call_id)
        if part is None:
            self._close_block()
            part = {"type": f"tool-{tool_name}", "toolCallId": tool_call_id, "state": "input-streaming", "input": None}
            self.parts.append(part)
            self._tool_parts[tool_call_id] = part
        return part

    def tool_input_start(self, tool_call_id: str, tool_name: str) -> None:
        self._tool_part(tool_call_id, tool_name)
        if self._emit:
            self._emit({"type": "tool-input-start", "toolCallId": tool_call_id, "toolName": tool_name})

    def tool_input_delta(self, tool_call_id: str, delta: str) -> None:
        if self._emit:
            self._emit({"type": "tool-input-delta", "toolCallId": tool_call_id, "inputTextDelta": delta})

    def tool_input_available(
        self, tool_call_id: str, tool_name: str, input: Any, provider_metadata: dict[str, Any] | None = None
    ) -> None:
        part = self._tool_part(tool_call_id, tool_name)
        part["state"] = "input-available"
        part["input"] = input
        if provider_metadata:
            part["callProviderMetadata"] = provider_metadata
        if self._emit:
            chunk = {"type": "tool-input-available", "toolCallId": tool_call_id, "toolName": tool_name, "input": input}
            if provider_metadata:
                chunk["providerMetadata"] = provider_metadata
            self._emit(chunk)

    def tool_output(self, tool_call_id: str, output: Any, *, preliminary: bool = False) -> None:
        part = self._tool_parts[tool_call_id]
        part["state"] = "output-available"
        part["output"] = output
        if preliminary:
            part["preliminary"] = True
        else:
            part.pop("preliminary", None)
        if self._emit:
            chunk: dict[str, Any] = {"type": "tool-output-available", "toolCallId": tool_call_id, "output": output}
            if preliminary:
                chunk["preliminary"] = True
            self._emit(chunk)

    def tool_error(self, tool_call_id: str, error_text: str) -> None:
        part = self._tool_parts[tool_call_id]
        part["state"] = "output-error"
        part["errorText"] = error_text
        part.pop("preliminary", None)
        if self._emit:
            self._emit({"type": "tool-output-error", "toolCallId": tool_call_id, "errorText": error_text})

    def tool_approval_requested(self, tool_call_id: str, reason: str | None = None) -> None:
        """The call waits for a human; ``reason`` (a plugin's ``ask(reason)``) is shown with the
        request (the AI SDK part's ``approval.requestReason``)."""
        part = self._tool_parts[tool_call_id]
        part["state"] = "approval-requested"
        part["approval"] = {"id": tool_call_id, **({"requestReason": reason} if reason else {})}
        if self._emit:
            chunk = {"type": "tool-approval-request", "approvalId": tool_call_id, "toolCallId": tool_call_id}
            if reason:
                chunk["reason"] = reason
            self._emit(chunk)

    def drop_unfinished_tool_inputs(self) -> None:
        """Tool parts still streaming their input when a step ended carry no call: remove them."""
        self.parts = [p for p in self.parts if p.get("state") != "input-streaming"]
        for call_id in [k for k, p in self._tool_parts.items() if p.get("state") == "input-streaming"]:
            del self._tool_parts[call_id]

    # -- sources and generated files -------------------------------------------------------------
    def source(self, source: UrlSource | DocumentSource) -> None:
        """A source the answer cites: a ``source-url`` or ``source-document`` part, and the chunk
        of the same shape (the AI SDK's)."""
        self.content_part(source_part(source))

    def file(self, file: GeneratedFile) -> None:
        """A file the model generated: a ``file`` part (``url`` a ``data:`` URL of inline bytes)."""
        part: dict[str, Any] = {"type": "file", "mediaType": file.media_type, "url": file.data_url}
        if file.provider_metadata:
            part["providerMetadata"] = file.provider_metadata
        self.content_part(part)

    def content_part(self, part: dict[str, Any]) -> None:
        # Text being streamed stays open: a citation comes in the middle of the text it backs,
        # and a client keeps appending to its text part across the source chunk, as this does.
        self.parts.append(part)
        if self._emit:
            self._emit(dict(part))

    # -- result ----------------------------------------------------------------------------------
    def step_reasoning(self) -> list[tuple[str, dict[str, Any] | None]]:
        """The current step's reasoning blocks: (text, provider metadata) each."""
        blocks: list[tuple[str, dict[str, Any] | None]] = []
        for part in reversed(self.parts):
            kind = part.get("type")
            if kind == "step-start":
                break
            if kind == "reasoning":
                text = "".join(self._pieces) if part is self._open_part else part.get("text", "")
                blocks.append((text, part.get("providerMetadata")))
        blocks.reverse()
        return blocks

    def has_content(self) -> bool:
        return any(p.get("type") != "step-start" for p in self.parts)

    def message(self, metadata: dict[str, Any] | None = None) -> UIMessage:
        """A snapshot of the message (open text is included)."""
        parts = []
        for part in self.parts:
            if part is self._open_part:
                part = {k: v for k, v in part.items() if k != "_id"}
                part["text"] = "".join(self._pieces)
            parts.append(dict(part))
        if self.error_text is not None:
            metadata = {**(metadata or {}), "error": self.error_text}
        if self.stopped:
            metadata = {**(metadata or {}), "stopped": True}
        if self.decisions:
            metadata = {**(metadata or {}), "decisions": {**stored_decisions(metadata), **self.decisions}}
        if self.usage:
            metadata = {**(metadata or {}), "usage": {k: u.model_dump() for k, u in self.usage.items()}}
        if self.transformed_by:
            shaped = (metadata or {}).get("transformedBy")
            earlier = [p for p in shaped if isinstance(p, str)] if isinstance(shaped, list) else []
            metadata = {**(metadata or {}), "transformedBy": [*earlier, *(p for p in self.transformed_by if p not in earlier)]}
        return UIMessage(id=self.message_id, role="assistant", parts=parts, metadata=metadata)


def source_part(source: UrlSource | DocumentSource) -> dict[str, Any]:
    """The ``source-url`` / ``source-document`` part (and chunk) of ``source``, as the AI SDK spells it."""
    part: dict[str, Any]
    if isinstance(source, UrlSource):
        part = {"type": "source-url", "sourceId": source.id, "url": source.url}
        if source.title is not None:
            part["title"] = source.title
    else:
        part = {"type": "source-document", "sourceId": source.id, "mediaType": source.media_type,
                "title": source.title}
        if source.filename is not None:
            part["filename"] = source.filename
    if source.provider_metadata:
        part["providerMetadata"] = source.provider_metadata
    return part


def stored_usage(metadata: dict[str, Any] | None) -> dict[str, Usage]:
    """The ``usage`` by model a stored message's metadata holds (none when it holds something else)."""
    usage = (metadata or {}).get("usage")
    if not isinstance(usage, dict):
        return {}
    return {str(k): Usage.model_validate(v) for k, v in usage.items() if isinstance(v, dict)}


def stored_decisions(metadata: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The ``decisions`` a stored message's metadata holds (none when it holds something else)."""
    decisions = (metadata or {}).get("decisions")
    return dict(decisions) if isinstance(decisions, dict) else {}
