"""The chat message as every client and the store hold it: the AI SDK ``UIMessage`` shape, checked
at the boundary so a malformed message is refused rather than stored."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

__all__ = ["ToolPartState", "UIMessage"]


ToolPartState = Literal[
    "input-streaming",
    "input-available",
    "approval-requested",
    "approval-responded",
    "output-available",
    "output-error",
    "output-denied",
]
"""The ``state`` of a ``tool-<name>`` part of a :class:`UIMessage`, as the AI SDK spells it."""


#: What a source part must hold (the AI SDK's schema): a stored one is streamed again on every
#: replay, where a client refuses a source without them.
_SOURCE_FIELDS = {"source-url": ("sourceId", "url"), "source-document": ("sourceId", "mediaType", "title")}


class UIMessage(BaseModel):
    """A persisted chat message in the AI SDK ``UIMessage`` shape.

    ``parts`` are plain dicts so they round-trip with AI SDK front ends: ``{"type": "text",
    "text": ...}``, ``{"type": "reasoning", "text": ...}``, ``{"type": "step-start"}``,
    ``{"type": "tool-<name>", "toolCallId", "state", "input", "output", "errorText"}`` with a
    ``state`` from :data:`ToolPartState`, what an answer cites (``{"type": "source-url",
    "sourceId", "url", "title"}``, ``{"type": "source-document", "sourceId", "mediaType",
    "title", "filename"}``) and files (``{"type": "file", "mediaType", "url"}``: a user's
    attachment, or an image the model made).
    """

    id: str
    role: Literal["user", "assistant", "system"]
    parts: list[dict[str, Any]] = Field(default_factory=list)
    metadata: dict[str, Any] | None = None

    @field_validator("parts")
    @classmethod
    def _check_parts(cls, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # Refused here, at the boundary, so a malformed message is a clear error for the
        # caller instead of a history that breaks every later turn of the session.
        for index, part in enumerate(parts):
            kind = part.get("type")
            if not isinstance(kind, str) or not kind:
                raise ValueError(f"part {index} needs a string 'type'")
            if kind in ("text", "reasoning") and not isinstance(part.get("text", ""), str):
                raise ValueError(f"part {index} ({kind}) needs a string 'text'")
            if (kind.startswith("tool-") or kind == "dynamic-tool") and not isinstance(part.get("toolCallId"), str):
                raise ValueError(f"part {index} ({kind}) needs a string 'toolCallId'")
            for key in _SOURCE_FIELDS.get(kind, ()):
                if not isinstance(part.get(key), str):
                    raise ValueError(f"part {index} ({kind}) needs a string {key!r}")
        return parts

    @property
    def text(self) -> str:
        """The concatenated text parts."""
        return "".join(p.get("text", "") for p in self.parts if p.get("type") == "text")
