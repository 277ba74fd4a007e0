"""The offline demo's model and tools: a scripted model that follows what the user typed.

It is no language model, but it reads the last user message closely enough to be tried by
hand (``think chat --model demo``, ``think serve --model demo``): it asks for the weather of
the city named, saves the note dictated, emails (after a human approves) whom it was asked
to, asks the page where the user is and what time it is there (``get_location`` and
``get_browser_time``, client tools: offered by the front end, run in the browser), and otherwise
explains itself at length, so that a reply can be stopped half-way. Asked to "fail", it fails as
a provider does before any output (HTTP 400), so a front end's error handling can be tried.
"""

from __future__ import annotations

import os
import re
import uuid
import zlib
from typing import Any

from ..errors import ProviderError
from ..hooks.markers import hookimpl
from ..models.base import ModelRequest, ToolMessage
from ..models.scripted import ScriptedModel, ScriptedToolCall, Step
from ..models.scripted import call as scripted_call
from ..tools import Tool, tool
from ..types import ToolCallContext, ToolCallDecision, ask

#: Seconds between streamed words in ``chat`` and ``serve``: slow enough to read and to stop
#: (``$THINK_DEMO_DELAY`` sets another pace, e.g. for a test that needs a longer answer).
STREAM_DELAY = float(os.environ.get("THINK_DEMO_DELAY") or 0.05)

CITIES = {"lisbon": ("Lisbon", 21, "sunny"), "oslo": ("Oslo", -3, "snowing"), "tokyo": ("Tokyo", 12, "clear")}
_SKIES = ("sunny", "cloudy", "raining", "windy", "foggy", "clear")

_WEATHER_WORDS = re.compile(r"\b(weather|temperature|forecast|rain\w*|sunny|snow\w*|cold|warm|hot)\b", re.I)
# "in Porto", "for New York", "at São Paulo": a capitalised name after a preposition.
_PLACE = re.compile(r"\b(?:in|for|at)\s+([A-ZÀ-Þ][\w'’-]*(?:\s+[A-ZÀ-Þ][\w'’-]*)*)")
_NOTE = re.compile(r"\b(?:note(?:\s+that)?\s*[:\-]|note\s+that|remember(?:\s+that)?)\s*(.+)", re.I | re.S)
_EMAIL_INTENT = re.compile(r"\b(e-?mail|send)\b", re.I)
_ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_RECIPIENT = re.compile(r"\b(?:to|e-?mail)\s+([A-Z][\w-]*)")
_WHERE = re.compile(r"\bwhere\s+am\s+i\b", re.I)
_WHEN = re.compile(r"\bwhat\s+time\b", re.I)
_FAIL = re.compile(r"\bfail\b", re.I)
#: What the demo answers when asked to fail: a provider's refusal, before any output.
FAILURE = "the demo model fails on purpose when asked to fail"
#: The client tools the demo calls when the front end offers them (``clientTools`` of a
#: request); the built-in chat page offers both.
CLIENT_TOOL = "get_location"
CLOCK_TOOL = "get_browser_time"

INTRODUCTION = (
    "I am the offline demo model of think: no network, no API key, and I only pretend to "
    "understand. Ask me for the weather in a city (\"weather in Porto?\"), to save a note "
    "(\"note: buy oranges\"), to email someone (\"email ada@example.com: lunch at one?\") — "
    "that tool waits for your approval before it runs — or where you are (your page answers, when "
    "it offers a get_location tool). I stream this answer word by word, so "
    "you can press Stop (or Ctrl-C in the terminal) half-way through and keep what was said."
)


@tool(read_only=True)
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    name, temp, sky = CITIES.get(city.lower(), (city, 0, ""))
    if not sky:  # a made-up but stable forecast for any other city
        seed = zlib.crc32(city.lower().encode())
        temp, sky = seed % 30 - 5, _SKIES[seed % len(_SKIES)]
    return {"city": name, "temperature_c": temp, "sky": sky}


@tool(destructive=True)
def save_note(text: str) -> str:
    """Save a note to the user's notebook."""
    return f"saved: {text}"


@tool(needs_approval=True)
def send_email(to: str, text: str) -> str:
    """Send an email (a human approves each one first)."""
    return f"sent to {to}: {text}"


TOOLS: list[Tool[Any, Any]] = [get_weather, save_note, send_email]

PHONE = re.compile(r"\d{3}-\d{4}")


class DemoPolicy:
    """The demo's approval policy, a plugin like any other: a note with a phone number in it
    is saved only once a human approves it (``ask`` from ``before_tool_call``)."""

    name = "demo_policy"

    @hookimpl
    def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        if ctx.tool_name == "save_note" and PHONE.search(str(ctx.input)):
            return ask("notes with a phone number need a human")
        return None


def demo_model(*, delay: float = STREAM_DELAY) -> ScriptedModel:
    """The model ``--model demo`` stands for."""
    return ScriptedModel([demo_step], repeat=True, delay=delay, record=False)


def call(name: str, input: dict[str, Any]) -> ScriptedToolCall:
    """A tool call with an id of its own: two demo servers on one database never number two
    calls alike (``call_1`` in both would make one call's record look like the other's)."""
    return scripted_call(name, input, id=f"call_{uuid.uuid4().hex[:16]}")


def demo_step(request: ModelRequest) -> Step:
    """Tool calls from the last user message; an answer from the tool results."""
    last = request.messages[-1]
    if last.role == "tool":
        return _answer([m for m in request.messages[len(request.messages) - _trailing_tool_count(request):]])
    text = last.text if last.role == "user" else ""
    if _FAIL.search(text):
        return Step(error=ProviderError(FAILURE, status=400, provider="demo"))
    if "everything" in text.lower():
        return Step(text=f"With our earlier talk summarised, here is everything: {len(request.messages)} messages fit now.")
    if _WHERE.search(text):
        if any(spec.name == CLIENT_TOOL for spec in request.tools):
            return Step(text="Let me ask your browser.", tool_calls=[call(CLIENT_TOOL, {})])
        return Step(text=f"I can't tell: this front end offers no {CLIENT_TOOL} tool.")
    if _WHEN.search(text):
        if any(spec.name == CLOCK_TOOL for spec in request.tools):
            return Step(text="Let me ask your browser's clock.", tool_calls=[call(CLOCK_TOOL, {})])
        return Step(text=f"I can't tell: this front end offers no {CLOCK_TOOL} tool.")
    if _EMAIL_INTENT.search(text) and (_ADDRESS.search(text) or _RECIPIENT.search(text)):
        to = _ADDRESS.search(text) or _RECIPIENT.search(text)
        assert to is not None
        body = text.split(":", 1)[1].strip() if ":" in text else text.strip()
        return Step(text="I'll draft that email.", tool_calls=[call("send_email", {"to": to.group(to.lastindex or 0), "text": body})])
    note = _NOTE.search(text)
    if note or "note" in text.lower():
        return Step(text="I'll save that.", tool_calls=[call("save_note", {"text": _clean(note.group(1)) if note else text.strip()})])
    cities = cities_in(text)
    if cities or _WEATHER_WORDS.search(text):
        return Step(
            reasoning="The user wants the weather; I will call the tool.",
            tool_calls=[call("get_weather", {"city": c}) for c in cities or ["lisbon"]],
        )
    return Step(text=INTRODUCTION)


def cities_in(text: str) -> list[str]:
    """The cities ``text`` names: the known ones (by key), else a capitalised place name."""
    known = [c for c in CITIES if re.search(rf"\b{c}\b", text, re.I)]
    if known:
        return known
    return [_clean(m.group(1)) for m in _PLACE.finditer(text)]


def _clean(text: str) -> str:
    return text.strip().rstrip(".!?").strip()


def _answer(results: list[Any]) -> Step:
    lines = []
    for result in results:
        out = result.output
        if isinstance(result, ToolMessage) and result.is_error and result.tool_name == "send_email":
            return Step(text="You did not approve that email, so I did not send it.")
        if isinstance(out, dict):
            lines.append(f"{out['city']}: {out['temperature_c']}°C and {out['sky']}" if "temperature_c" in out else _describe(out))
        elif isinstance(result, ToolMessage) and "blocked" in str(out):
            # Whatever blocked it said why: the explanation is that, not a guess at the cause.
            return Step(text=f" I did not run {result.tool_name}. {out}")
        else:
            lines.append(str(out))
    return Step(text="Here is what I found. " + "; ".join(lines) + ".")


def _describe(out: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in out.items())


def _trailing_tool_count(request: ModelRequest) -> int:
    count = 0
    for message in reversed(request.messages):
        if message.role != "tool":
            break
        count += 1
    return count
