"""An MCP server's tools as think :class:`~think_core.tools.Tool` objects.

A tool listed by ``tools/list`` keeps its name (behind the server's prefix, if any), description
and JSON schema; its MCP annotations become think's, so the read-only guard and the tool cache
treat it like any annotated Python tool. MCP's defaults apply to a tool without hints: not
read-only, destructive, not idempotent.

Every call carries its idempotency key (:class:`~think_core.tools.ToolContext`) in the request's
``_meta`` under :data:`IDEMPOTENCY_KEY_META` (MCP has no standard field for one; ``_meta`` is
where a request's extra data goes, and a server that does not know the key ignores it).
"""

from __future__ import annotations

from typing import Any, Protocol

from ..files import File
from ..tools import AnyTool, ToolAnnotations, ToolContext
from .errors import MCPToolError

__all__ = ["IDEMPOTENCY_KEY_META", "MCPTool", "ToolServer", "annotations_from", "tool_output"]

#: The ``_meta`` key of a ``tools/call`` request that holds the call's idempotency key.
IDEMPOTENCY_KEY_META = "think/idempotency-key"

#: The keyword the engine passes the call's context by (not a name an MCP schema would use).
_CONTEXT = "_think_tool_context"


class ToolServer(Protocol):
    """What a tool needs of its server (an :class:`~think_core.mcp.MCPServer`)."""

    name: str
    idempotency_keys: bool

    async def call_tool(
        self, name: str, arguments: dict[str, Any], *, repeatable: bool = False, meta: dict[str, Any] | None = None
    ) -> Any: ...


class MCPTool(AnyTool):
    """A tool of an :class:`~think_core.mcp.MCPServer`; calling it calls the server.

    The arguments are checked against the server's schema (its required keys) here and validated
    in full by the server, whose complaint comes back as an error result the model can read.
    """

    def __init__(self, server: ToolServer, spec: Any, name: str) -> None:
        super().__init__(
            name,
            spec.description or spec.title or "",
            _parameters(spec.input_schema),
            None,  # the schema, not a Python signature, describes the arguments
            annotations_from(spec.annotations, idempotent_with_key=server.idempotency_keys),
        )
        self.server = server
        self.remote_name: str = spec.name
        self.function = self._call
        self.is_async = True
        self.context_parameter = _CONTEXT

    async def _call(self, **arguments: Any) -> Any:
        context: ToolContext | None = arguments.pop(_CONTEXT, None)
        meta = {IDEMPOTENCY_KEY_META: context.idempotency_key} if context is not None else None
        # A call that cannot have changed anything, or whose key the server honours, may be
        # repeated on a restarted server.
        hints = self.annotations
        repeatable = hints.read_only or hints.idempotent or hints.idempotent_with_key
        return await self.server.call_tool(self.remote_name, arguments, repeatable=repeatable, meta=meta)

    def __repr__(self) -> str:
        return f"<MCP tool {self.name!r} of {self.server.name!r}>"


def annotations_from(hints: Any, *, idempotent_with_key: bool = False) -> ToolAnnotations:
    """think's annotations from MCP's ``readOnlyHint`` / ``destructiveHint`` / ``idempotentHint``.
    ``destructiveHint`` defaults to true and means something only for a tool that is not read-only;
    ``idempotent_with_key`` is the server's (``MCPServer(idempotency_keys=True)``)."""
    read_only = getattr(hints, "read_only_hint", None) is True
    return ToolAnnotations(
        read_only=read_only,
        destructive=not read_only and getattr(hints, "destructive_hint", None) is not False,
        idempotent=getattr(hints, "idempotent_hint", None) is True,
        idempotent_with_key=idempotent_with_key,
    )


def _parameters(schema: Any) -> dict[str, Any]:
    parameters = dict(schema) if isinstance(schema, dict) else {}
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    return parameters


def tool_output(result: Any) -> Any:
    """The output of a ``CallToolResult``: with ``image`` or ``audio`` content (or an embedded
    binary resource), its blocks in order as text and :class:`~think_core.files.File` values;
    else its structured content when there is some, else its text (one string), else its
    content blocks as JSON. An ``isError`` result raises :class:`MCPToolError` with the
    server's message."""
    if result.is_error:
        raise MCPToolError(_text(result.content) or "the tool failed without saying why")
    blocks = list(result.content)
    if any(_file(block) is not None for block in blocks):
        # Structured content comes with its JSON as text blocks, kept here beside the files.
        return [_file(block) or _block_value(block) for block in blocks]
    if result.structured_content is not None:
        return result.structured_content
    if all(getattr(block, "type", None) == "text" for block in blocks):
        return _text(blocks)
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in blocks]


def _file(block: Any) -> File | None:
    """An ``image`` / ``audio`` block, or an embedded resource's blob, as a ``File``."""
    kind = getattr(block, "type", None)
    if kind in ("image", "audio"):
        return File(block.data, block.mime_type)
    resource = getattr(block, "resource", None) if kind == "resource" else None
    blob, media_type = getattr(resource, "blob", None), getattr(resource, "mime_type", None)
    if isinstance(blob, str) and isinstance(media_type, str):
        name = str(getattr(resource, "uri", "")).rstrip("/").rpartition("/")[2] or None
        return File(blob, media_type, name)
    return None


def _block_value(block: Any) -> Any:
    if getattr(block, "type", None) == "text":
        return block.text
    return block.model_dump(mode="json", by_alias=True, exclude_none=True)


def _text(blocks: Any) -> str:
    return "\n".join(block.text for block in blocks if getattr(block, "type", None) == "text")
