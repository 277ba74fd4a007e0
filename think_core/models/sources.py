"""What an answer cites and the files a model generates, read from each provider's wire format.

Each provider marks them differently; the mappers hand the pieces to these functions and stream
the resulting :class:`~think_core.events.UrlSource` / :class:`~think_core.events.DocumentSource`
/ :class:`~think_core.events.GeneratedFile` events beside the text:

- Anthropic: a ``citations_delta`` of a text block (``web_search_result_location``,
  ``search_result_location`` → a url; ``char_location``, ``page_location``,
  ``content_block_location`` → a document of the prompt).
- OpenAI Chat Completions (search models, and servers that speak its format): a delta's
  ``annotations`` (``url_citation``) → a url.
- OpenAI Responses: ``response.output_text.annotation.added`` (``url_citation`` → a url,
  ``file_citation`` → a document); an ``image_generation_call`` output item → a file.
- Gemini: a candidate's ``groundingMetadata.groundingChunks`` (``web``, ``retrievedContext``,
  ``maps``) → urls or documents; an ``inlineData`` part of the answer → a file.

What else the provider says of a source (the cited text, where it is) is kept as its
``provider_metadata``, keyed by provider, with the provider's field names in camelCase as the
AI SDK keeps them. Nothing here raises on a shape it does not know: it yields no source.
"""

from __future__ import annotations

import binascii
import uuid
from typing import Any

from pydantic.alias_generators import to_camel

from ..events import DocumentSource, GeneratedFile, UrlSource

__all__ = [
    "anthropic_citation_source",
    "chat_annotation_sources",
    "gemini_grounding_sources",
    "gemini_inline_file",
    "responses_annotation_source",
    "responses_image_file",
]

Source = UrlSource | DocumentSource

#: The media type of the document an Anthropic citation's location points into (a page of a
#: PDF; characters of a plain-text document; blocks of a custom-content document).
_ANTHROPIC_DOCUMENT_TYPES = {
    "page_location": "application/pdf",
    "char_location": "text/plain",
    "content_block_location": "text/plain",
}

#: The first bytes of the image formats a model generates, to name a file the provider did not.
_MAGIC = ((b"\x89PNG", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"), (b"RIFF", "image/webp"))


def _source_id() -> str:
    return f"src_{uuid.uuid4().hex[:16]}"


def _metadata(provider: str, fields: dict[str, Any], *skip: str) -> dict[str, Any] | None:
    kept = {to_camel(k): v for k, v in fields.items() if k not in skip and k != "type" and v is not None}
    return {provider: kept} if kept else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def anthropic_citation_source(citation: Any) -> Source | None:
    """The source an Anthropic citation (of a text block) points to."""
    if not isinstance(citation, dict):
        return None
    kind = citation.get("type")
    if kind == "web_search_result_location" and _text(citation.get("url")):
        return UrlSource(_source_id(), citation["url"], _text(citation.get("title")),
                         _metadata("anthropic", citation, "url", "title"))
    if kind == "search_result_location" and _text(citation.get("source")):
        return UrlSource(_source_id(), citation["source"], _text(citation.get("title")),
                         _metadata("anthropic", citation, "source", "title"))
    media_type = _ANTHROPIC_DOCUMENT_TYPES.get(str(kind))
    if media_type is None:
        return None
    index = citation.get("document_index")
    title = _text(citation.get("document_title")) or (
        f"Document {index + 1}" if isinstance(index, int) else "Document"
    )
    return DocumentSource(_source_id(), media_type, title, None, _metadata("anthropic", citation, "document_title"))


def responses_annotation_source(annotation: Any) -> Source | None:
    """The source an OpenAI Responses text annotation points to (``file_path`` annotations,
    links to files a tool wrote, are not sources)."""
    if not isinstance(annotation, dict):
        return None
    kind = annotation.get("type")
    if kind == "url_citation" and _text(annotation.get("url")):
        return UrlSource(_source_id(), annotation["url"], _text(annotation.get("title")),
                         _metadata("openai", annotation, "url", "title"))
    if kind == "file_citation" and (_text(annotation.get("filename")) or _text(annotation.get("file_id"))):
        filename = _text(annotation.get("filename"))
        title = filename or annotation["file_id"]
        return DocumentSource(_source_id(), "text/plain", title, filename,
                              _metadata("openai", annotation, "filename"))
    return None


def chat_annotation_sources(annotations: Any) -> list[Source]:
    """The sources of a Chat Completions delta's ``annotations``: each ``url_citation`` holds
    the same fields as a Responses annotation, one level down."""
    sources: list[Source] = []
    for annotation in annotations if isinstance(annotations, list) else ():
        if not isinstance(annotation, dict) or annotation.get("type") != "url_citation":
            continue
        cited = annotation.get("url_citation")
        source = responses_annotation_source({**cited, "type": "url_citation"}) if isinstance(cited, dict) else None
        if source is not None:
            sources.append(source)
    return sources


def responses_image_file(item: Any) -> GeneratedFile | None:
    """The image of a finished ``image_generation_call`` output item (``result``: base64)."""
    if not isinstance(item, dict) or item.get("type") != "image_generation_call":
        return None
    data = _text(item.get("result"))
    if data is None:
        return None
    fmt = _text(item.get("output_format"))
    media_type = f"image/{'jpeg' if fmt == 'jpg' else fmt}" if fmt else _sniffed(data)
    metadata = {"openai": {"itemId": item["id"]}} if _text(item.get("id")) else None
    return GeneratedFile(media_type, base64=data, provider_metadata=metadata)


def _sniffed(data: str) -> str:
    """The media type of base64 image bytes by their first bytes (PNG when unknown, what the
    image generation tool makes by default)."""
    try:
        head = binascii.a2b_base64(data[:16])
    except binascii.Error:
        return "image/png"
    return next((media_type for magic, media_type in _MAGIC if head.startswith(magic)), "image/png")


def gemini_grounding_sources(metadata: Any) -> list[Source]:
    """The sources of a Gemini candidate's ``groundingMetadata`` (its ``groundingChunks``)."""
    chunks = metadata.get("groundingChunks") if isinstance(metadata, dict) else None
    sources: list[Source] = []
    for chunk in chunks if isinstance(chunks, list) else ():
        if not isinstance(chunk, dict):
            continue
        for kind in ("web", "maps", "retrievedContext"):
            source = _grounding_source(kind, chunk.get(kind))
            if source is not None:
                sources.append(source)
    return sources


def _grounding_source(kind: str, found: Any) -> Source | None:
    if not isinstance(found, dict):
        return None
    uri, title = _text(found.get("uri")), _text(found.get("title"))
    if uri is not None and (kind != "retrievedContext" or uri.startswith(("http://", "https://"))):
        return UrlSource(_source_id(), uri, title, _metadata("google", found, "uri", "title", "text"))
    if kind != "retrievedContext" or (uri is None and title is None):
        return None
    # A retrieved document (a file search store, a RAG corpus): not a web page.
    filename = uri.rsplit("/", 1)[-1] if uri else None
    media_type = "application/pdf" if filename and filename.lower().endswith(".pdf") else "text/plain"
    return DocumentSource(_source_id(), media_type, title or filename or "Document", filename,
                          _metadata("google", found, "title", "text"))


def gemini_inline_file(part: dict[str, Any]) -> GeneratedFile | None:
    """The file of an answer part with ``inlineData`` (an image a Gemini image model made)."""
    inline = part.get("inlineData")
    if not isinstance(inline, dict):
        return None
    data, media_type = _text(inline.get("data")), _text(inline.get("mimeType"))
    if data is None:
        return None
    signature = _text(part.get("thoughtSignature"))  # Gemini 3 wants it back with the image
    metadata = {"google": {"thoughtSignature": signature}} if signature else None
    return GeneratedFile(media_type or _sniffed(data), base64=data, provider_metadata=metadata)
