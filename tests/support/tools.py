"""Tools the server tests offer the model: a weather look-up, an approval-gated email, and a
destructive tool that a guard blocks (it must never run)."""

from __future__ import annotations

from think_core import tool


@tool(read_only=True)
def get_weather(city: str) -> dict:
    """The weather in a city."""
    return {"city": city, "sky": "sunny"}


@tool(read_only=True, name="get_weather")
def get_weather_in_celsius(city: str) -> dict:
    """The weather in a city."""
    return {"city": city, "sky": "sunny", "celsius": 21}


@tool(needs_approval=True)
def send_email(to: str) -> str:
    """Send an email (needs a human's approval)."""
    return f"sent to {to}"


@tool(destructive=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    raise AssertionError("blocked tools never run")
