"""Settings without a plugin: the layers a turn's ``TurnConfig`` is made of.

From the bottom: the agent's defaults (``Think(temperature=..., max_tokens=..., seed=...,
output=...)``), the call's config (``session.chat(input, config=TurnConfig(...))``), then what
``before_turn`` returns — so a plugin still has the last word, as it had before defaults existed.
"""

from __future__ import annotations

from typing import Any

from ..models.base import deep_merge
from ..types import TurnConfig

__all__ = ["layered"]

#: No defaults, no call config: every field ``None`` (built once; a fresh one costs every turn).
_NOTHING = TurnConfig()


def layered(*configs: TurnConfig | None) -> TurnConfig:
    """``configs`` laid over each other, later over earlier: a field a later config sets wins;
    ``tools`` add up (each layer's are extra tools) and ``provider_options`` / ``headers`` are
    merged key by key."""
    present = [c for c in configs if c is not None]
    if len(present) == 1:
        return present[0]  # nothing to lay over it (the usual case: no defaults, no call config)
    if not present:
        return _NOTHING  # (a config is never changed in place: shared like any caller's)
    fields: dict[str, Any] = {}
    for config in present:
        for name in TurnConfig.model_fields:
            value = getattr(config, name)
            if value is None:
                continue
            earlier = fields.get(name)
            if name == "tools" and earlier is not None:
                value = [*earlier, *value]
            elif name in ("provider_options", "headers") and earlier is not None:
                value = deep_merge(earlier, value)
            fields[name] = value
    return TurnConfig.model_construct(**fields)  # the values were validated in their own layer
