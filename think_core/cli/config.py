"""``think.toml``: the configuration file of the command line (``think run/chat/serve``).

::

    [think]
    model = "openai:gpt-4o-mini"
    system = "You are terse."            # none by default
    temperature = 0.2                    # also max_tokens, seed (default: the provider's)
    db = "chats.db"
    max_steps = 8
    disable = ["analytics"]              # entry-point plugins not to load
    broken_plugins = "warn"              # run without an installed plugin that fails to load
    context_overflow = { reactive = true }
    attachments = { max_file_bytes = 5242880 }   # a user's files: 10 MiB each, 20 MiB a message by default

    [plugins.tool_cache]                 # each plugin's settings, validated by its own model
    backend = "sqlite"
    path = "tool-cache.db"

    [mcp.servers.files]                  # MCP servers whose tools the agent offers (think_core.mcp.config)
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "."]

Found at ``--config PATH``, else ``$THINK_CONFIG``, else ``./think.toml`` when it exists.
Command-line flags win over the file; ``$THINK_MODEL`` wins over the file's ``model``.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigurationError
from ..hooks.names import check_plugin_names, installed_plugin_names
from ..mcp.config import MCPConfig

DEFAULT_PATH = "think.toml"


class AgentSection(BaseModel):
    """The ``[think]`` table."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    system: str | None = None
    temperature: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    db: str | None = None
    max_steps: int | None = Field(default=None, ge=1)
    disable: list[str] = Field(default_factory=list)
    broken_plugins: Literal["error", "warn"] | None = None
    context_overflow: dict[str, Any] | None = None
    retry: dict[str, Any] | None = None
    compaction: dict[str, Any] | None = None
    attachments: dict[str, Any] | None = None


class ThinkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    think: AgentSection = Field(default_factory=AgentSection)
    plugins: dict[str, dict[str, Any]] = Field(default_factory=dict)
    mcp: MCPConfig = Field(default_factory=MCPConfig)
    path: str | None = None

    def check_plugin_names(self) -> None:
        """Every ``[plugins.NAME]`` section and ``disable`` entry names an installed plugin."""
        installed = installed_plugin_names()
        check_plugin_names(self.think.disable, installed, f"{self.path}: [think] disable")
        check_plugin_names(self.plugins, installed, f"{self.path}: [plugins.NAME]")


def load_config(path: str | None = None) -> ThinkConfig:
    """Read the configuration file (see the module docstring); an empty config when there is none.

    A named file that is missing, is not TOML, or has unknown keys is a :class:`ConfigurationError`.
    """
    named = path or os.environ.get("THINK_CONFIG") or None
    candidate = Path(named) if named else Path(DEFAULT_PATH)
    if not candidate.is_file():
        if named:
            raise ConfigurationError(f"config file {named!r} does not exist")
        return ThinkConfig()
    try:
        data = tomllib.loads(candidate.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read config file {str(candidate)!r}: {exc}") from exc
    try:
        config = ThinkConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigurationError(f"invalid config file {str(candidate)!r}: {problems}") from exc
    config.path = str(candidate)
    config.check_plugin_names()
    return config
