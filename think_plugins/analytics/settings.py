"""Settings of the ``analytics`` plugin."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["DEFAULT_DB_PATH", "DEFAULT_JSONL_PATH", "AnalyticsSettings"]

DEFAULT_DB_PATH = "think-analytics.db"
DEFAULT_JSONL_PATH = "think-analytics.jsonl"


class AnalyticsSettings(BaseModel):
    """Settings of ``analytics``. The defaults write to ``think-analytics.db`` in the cwd."""

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

