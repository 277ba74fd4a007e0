"""Structured output: the ``output`` a turn asks for (a pydantic model class or a JSON schema)
becomes the model request's output spec, and the last step's text is parsed back into it."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from ..models.base import OutputSpec

__all__ = ["output_spec", "parse_output"]


def output_spec(output: Any) -> OutputSpec | None:
    """The request's output spec for ``TurnConfig.output``; ``TypeError`` for anything else."""
    if output is None:
        return None
    if isinstance(output, type) and issubclass(output, BaseModel):
        return OutputSpec(name=output.__name__, json_schema=output.model_json_schema())
    if isinstance(output, dict):
        return OutputSpec(name=output.get("title", "output"), json_schema=output)
    raise TypeError("TurnConfig.output must be a pydantic model class or a JSON schema dict")


def parse_output(output: Any, text: str) -> Any:
    """``text`` parsed as ``output`` (a model instance, or JSON); ``ValueError`` when it does not
    validate (pydantic's ``ValidationError`` is a ``ValueError``)."""
    if output is None:
        return None
    if isinstance(output, type) and issubclass(output, BaseModel):
        return output.model_validate_json(_strip_fences(text))
    return json.loads(_strip_fences(text))


def _strip_fences(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        if stripped.rstrip().endswith("```"):
            stripped = stripped.rstrip()[:-3]
    return stripped.strip()
