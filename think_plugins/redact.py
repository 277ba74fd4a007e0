"""Redaction: text that matches a pattern never leaves the turn unredacted.

Registered under the entry point ``redact``; inactive until ``patterns`` is configured::

    Think(model, settings={"redact": {
        "patterns": [r"\\+?\\d[\\d -]{7,}\\d", r"\\b\\d{4}(?: ?\\d{4}){3}\\b"],
        "replacement": "[redacted]",
        "tool_results": True,
    }})

On ``transform_stream`` it rewrites the model's streamed text (and reasoning) before anyone sees
it, so the client, ``on_chunk`` observers, traces, the stored answer, a resumed stream, the
turn's result and the model's later context all hold the replacement. With ``tool_results`` it
also rewrites every string of a tool's output on ``transform_tool_result``, before the model,
the store and the client see it.

A match split across chunks (``"555-01"`` then ``"23"``) is caught: text that could still
become a match is held back (the ``regex`` library's partial matching tells which) and let out
once more text rules the match in or out, and at the end of the step or before any other event
(a tool call, the step's finish). Only held text is delayed; everything else streams as it
comes.

Not rewritten: the arguments of the model's tool calls (they are what the tool runs with) and
the user's own messages. With Anthropic extended thinking and tools, a redacted thinking block
no longer matches its signature when it is sent back: set ``reasoning: false`` there (and keep
``send_reasoning`` off if clients must not see it).

Patterns are compiled with the `regex <https://pypi.org/project/regex/>`_ library (``pip
install 'think-agent[redact]'``), a superset of ``re``'s syntax.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator

from think_core import (
    ModelEvent,
    ReasoningDelta,
    StreamTransform,
    TextDelta,
    ToolCallResultContext,
    TurnContext,
    hookimpl,
    plugin_settings,
)

__all__ = ["Redact", "RedactSettings"]


class RedactSettings(BaseModel):
    """Settings of ``redact``. Without ``patterns`` it does nothing."""

    model_config = ConfigDict(extra="forbid")

    patterns: list[str] = []
    """Regular expressions (``regex`` syntax, a superset of ``re``'s) whose matches are replaced."""
    replacement: str = "[redacted]"
    """What a match becomes."""
    tool_results: bool = False
    """Also rewrite the strings of every tool's output."""
    reasoning: bool = True
    """Also rewrite the model's streamed reasoning."""

    _compiled: Any = PrivateAttr(default=None)

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        if patterns:
            _compile(patterns)  # a bad pattern stops start-up, naming the plugin and the pattern
        return patterns

    @property
    def matcher(self) -> Any:
        """One compiled alternation of every pattern (``None`` when there are none)."""
        if self._compiled is None and self.patterns:
            self._compiled = _compile(self.patterns)
        return self._compiled


def _compile(patterns: list[str]) -> Any:
    try:
        import regex
    except ImportError as exc:  # the extra is missing: say how to get it
        raise ValueError("redact needs the 'regex' library: pip install 'think-agent[redact]'") from exc
    try:
        compiled = regex.compile("|".join(f"(?:{p})" for p in patterns))
    except regex.error as exc:
        raise ValueError(f"a pattern does not compile: {exc}") from exc
    empty = [p for p in patterns if regex.fullmatch(p, "")]
    if empty:
        raise ValueError(f"a pattern matches the empty string: {empty[0]!r}")
    return compiled


class Redactor:
    """Replaces the matches in a text that arrives in pieces.

    ``feed`` returns the text that is safe to show now; ``flush`` the rest, once no more is
    coming. Text from the first position where a match could still start (a partial match) is
    held, and so is a full match that reaches the end of what arrived (a greedy pattern may
    extend it)."""

    def __init__(self, matcher: Any, replacement: str) -> None:
        self.matcher = matcher
        self.replacement = replacement
        self.held = ""

    def feed(self, text: str) -> str:
        self.held += text
        return self._release(final=False)

    def flush(self) -> str:
        return self._release(final=True)

    def _release(self, *, final: bool) -> str:
        # No pattern matches the empty string (refused at start-up), so each match moves on.
        text, out, pos = self.held, [], 0
        safe = len(text)  # from here on text is held; at the end (final) nothing is
        while (match := self.matcher.search(text, pos, partial=not final)) is not None:
            if not final and (match.partial or match.end() == len(text)):
                safe = match.start()
                break
            out.append(text[pos:match.start()])
            out.append(self.replacement)
            pos = match.end()
        out.append(text[pos:safe])
        self.held = text[safe:]
        return "".join(out)

    def text(self, value: str) -> str:
        """``value`` with every match replaced (a whole text: nothing held)."""
        return str(self.matcher.sub(self.replacement, value))


class Redact:
    """Rewrites matches of ``patterns`` in the stream and, optionally, in tool results.

    :param settings: :class:`RedactSettings` or a dict of its fields; given here they win over
        ``Think(settings={"redact": ...})``.
    """

    name = "redact"
    settings_model: type[RedactSettings] = RedactSettings

    def __init__(self, settings: RedactSettings | Mapping[str, Any] | None = None) -> None:
        self.settings = plugin_settings(RedactSettings, settings)

    @hookimpl
    def transform_stream(self, ctx: TurnContext) -> StreamTransform | None:
        matcher = self.settings.matcher
        if matcher is None:
            return None
        replacement, reasoning = self.settings.replacement, self.settings.reasoning

        async def redacted(events: AsyncIterator[ModelEvent]) -> AsyncIterator[ModelEvent]:
            text = Redactor(matcher, replacement)
            thought = Redactor(matcher, replacement)
            async for event in events:
                if isinstance(event, TextDelta):
                    shown = text.feed(event.text)
                    if shown:
                        yield TextDelta(shown)
                    continue
                if reasoning and isinstance(event, ReasoningDelta) and event.text:
                    shown = thought.feed(event.text)
                    if shown or event.provider_metadata:
                        yield ReasoningDelta(shown, event.provider_metadata)
                    continue
                # Anything else ends a run of text: what was held goes out first, in order.
                for pending in _flushed(text, thought):
                    yield pending
                yield event
            for pending in _flushed(text, thought):
                yield pending

        return redacted

    @hookimpl
    def transform_tool_result(self, ctx: ToolCallResultContext) -> Any:
        matcher = self.settings.matcher
        if matcher is None or not self.settings.tool_results:
            return None
        redactor = Redactor(matcher, self.settings.replacement)
        rewritten = _strings_rewritten(ctx.output, redactor.text)
        return rewritten if rewritten != ctx.output else None


def _flushed(text: Redactor, thought: Redactor) -> list[ModelEvent]:
    events: list[ModelEvent] = []
    rest = thought.flush()
    if rest:
        events.append(ReasoningDelta(rest))
    rest = text.flush()
    if rest:
        events.append(TextDelta(rest))
    return events


#: The fields of a file item (``{"type": "file", "mediaType", "url", ...}``, a tool's ``File``)
#: that are bytes or their type, not text: rewriting a match inside base64 would corrupt the file.
_FILE_FIELDS = frozenset({"type", "mediaType", "url"})


def _strings_rewritten(value: Any, rewrite: Any) -> Any:
    """``value`` (JSON form) with ``rewrite`` applied to every string in it, keys included —
    except the data of a file item (its filename is text and is rewritten)."""
    if isinstance(value, str):
        return rewrite(value)
    if isinstance(value, list):
        return [_strings_rewritten(item, rewrite) for item in value]
    if isinstance(value, dict):
        if value.get("type") == "file":
            return {k: v if k in _FILE_FIELDS else _strings_rewritten(v, rewrite) for k, v in value.items()}
        return {rewrite(k): _strings_rewritten(v, rewrite) for k, v in value.items()}
    return value
