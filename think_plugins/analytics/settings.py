"""Settings of the ``analytics`` plugin."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from think_core import data_dir

__all__ = ["AnalyticsSettings", "default_db_path", "default_jsonl_path"]


def default_db_path() -> Path:
    """The ``sqlite`` sink's file when no ``path`` is set: ``analytics.db`` in think's data
    directory (``$THINK_HOME``, else e.g. ``~/.local/share/think``), never the current directory."""
    return data_dir() / "analytics.db"


def default_jsonl_path() -> Path:
    """The ``jsonl`` sink's file when no ``path`` is set, beside :func:`default_db_path`."""
    return data_dir() / "analytics.jsonl"


class AnalyticsSettings(BaseModel):
    """Settings of ``analytics``. The defaults write to ``analytics.db`` in think's data directory."""

    model_config = ConfigDict(extra="forbid")

    sink: Literal["sqlite", "jsonl", "http"] = "sqlite"
    path: str | None = None
    """File of the ``sqlite`` / ``jsonl`` sink."""
    url: str | None = None
    """Collector URL of the ``http`` sink (required for it)."""
    headers: dict[str, str] = {}
    """Extra request headers of the ``http`` sink (an authorization token, say)."""
    batch_size: int = Field(default=100, gt=0)
    max_queue: int = Field(default=10_000, gt=0)
    max_retries: int = Field(default=3, ge=0)
    backoff_seconds: float = Field(default=0.5, ge=0)
    max_backoff_seconds: float = Field(default=10.0, ge=0)
    timeout_seconds: float = Field(default=5.0, gt=0)

    @model_validator(mode="after")
    def _http_needs_url(self) -> AnalyticsSettings:
        if self.sink == "http" and not self.url:
            raise ValueError('sink "http" needs a "url"')
        return self

