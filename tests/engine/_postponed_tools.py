"""Tools defined in a module with postponed annotations (annotations are strings)."""

from __future__ import annotations

from pydantic import BaseModel

from think_core import tool


class Point(BaseModel):
    x: int
    y: int


@tool
def distance(a: Point, b: Point | None = None) -> float:
    """Distance between two points (from the origin when b is missing)."""
    b = b or Point(x=0, y=0)
    return ((a.x - b.x) ** 2 + (a.y - b.y) ** 2) ** 0.5
