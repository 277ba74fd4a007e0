"""Options shared by the commands that build an agent (``run``, ``chat``, ``serve``)."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..agent import Think
from ..errors import ConfigurationError
from ..hooks.names import check_plugin_names, installed_plugin_names
from ..paths import data_dir
from ..store import Store, open_store
from ..tools import Tool
from .config import load_config
from .stored import DEFAULT_DB

DEFAULT_MODEL_ENV = "THINK_MODEL"
DEMO_MODEL = "demo"  # the offline scripted model and tools of `think demo`
DEFAULT_MAX_STEPS = 10


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=None,
        help='model string: "openai:NAME", "openai-responses:NAME", "anthropic:NAME", "google:NAME", '
        '"openai-compatible:NAME@URL", or "demo" '
        f"(offline, scripted) (default: ${DEFAULT_MODEL_ENV}, then think.toml)",
    )
    parser.add_argument(
        "--db", default=None, help=f"SQLite file (or postgresql:// URL) for conversations (default: {DEFAULT_DB} in think's data directory, $THINK_HOME)"
    )
    parser.add_argument("--system", default=None, help="system prompt (default: none, or think.toml's)")
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the provider's)")
    parser.add_argument("--max-tokens", type=int, default=None, help="output tokens per model call at most")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed, for providers that take one")
    parser.add_argument("--no-plugins", action="store_true", help="do not load entry-point plugins")
    parser.add_argument("--max-steps", type=int, default=None, help=f"model steps per turn at most (default: {DEFAULT_MAX_STEPS})")
    parser.add_argument("--config", default=None, help="configuration file (default: $THINK_CONFIG, else ./think.toml)")
    parser.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="add the tool (or list of tools) ATTR of MODULE, e.g. myapp.tools:send_invoice (repeatable)",
    )


def quiet_turn_failures(args: argparse.Namespace) -> None:
    """``run`` and ``chat`` print a failed turn's error themselves (naming the endpoint): without
    ``-v`` the WARNING line ``think serve`` shows an operator would say it a second time."""
    if not getattr(args, "verbose", 0):
        logging.getLogger("think.failures").setLevel(logging.ERROR)


def default_db() -> str:
    """Where conversations go when no ``--db`` is named: the data directory (made if need be),
    like llm's ``logs.db``, so that running a command writes nothing into the current folder."""
    return str(data_dir(create=True) / DEFAULT_DB)


def add_plugin_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugins",
        default=None,
        metavar="A,B",
        help="load only these entry-point plugins (sets THINK_PLUGINS for this process)",
    )


def agent_from_args(args: argparse.Namespace) -> Think:
    """The agent described by the shared agent options and ``--plugins``."""
    if getattr(args, "plugins", None) is not None:
        if args.no_plugins:
            raise ConfigurationError("--plugins and --no-plugins contradict each other")
        names = [name.strip() for name in args.plugins.split(",") if name.strip()]
        check_plugin_names(names, installed_plugin_names(), "--plugins")
        os.environ["THINK_PLUGINS"] = args.plugins
    return build_agent(args)


def resolve_agent_options(args: argparse.Namespace) -> tuple[str | None, dict[str, Any]]:
    """The model string and ``Think`` keyword arguments from flags, environment and think.toml
    (in that order of precedence). Also fills ``args.model`` / ``args.db`` with what was chosen."""
    config = load_config(getattr(args, "config", None))
    section = config.think
    args.model = args.model or os.environ.get(DEFAULT_MODEL_ENV) or section.model
    args.db = args.db or section.db or default_db()
    kwargs: dict[str, Any] = {
        "store": args.db,
        "load_entrypoints": not args.no_plugins,
        "max_steps": args.max_steps or section.max_steps or DEFAULT_MAX_STEPS,
        "settings": config.plugins,
        "disable": section.disable,
        "broken_plugins": section.broken_plugins,
    }
    tools = [*config.mcp.build(), *import_tools(getattr(args, "tools", None) or [])]
    if tools:
        kwargs["tools"] = tools
    system = args.system or section.system
    if system:
        kwargs["system"] = system
    for name in ("temperature", "max_tokens", "seed"):  # flags over think.toml; None: the provider's
        value = getattr(args, name, None)
        kwargs[name] = value if value is not None else getattr(section, name)
    for name in ("context_overflow", "retry", "compaction", "attachments"):
        value = getattr(section, name)
        if value is not None:
            kwargs[name] = value
    limits = {name: getattr(args, name) for name in ("max_file_bytes", "max_message_bytes") if getattr(args, name, None)}
    if limits:  # think serve's flags over think.toml
        kwargs["attachments"] = {**kwargs.get("attachments", {}), **limits}
    return args.model, kwargs


def import_tools(specs: list[str]) -> list[Any]:
    """The tools ``--tools MODULE:ATTR`` names: each attribute is a tool or a list of tools."""
    tools: list[Any] = []
    # Modules in the current folder load as they do for uvicorn or flask (`think` is a console
    # script, so unlike `python -m` nothing put the folder on the path).
    if specs and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    for spec in specs:
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise ConfigurationError(f"--tools {spec!r}: expected MODULE:ATTR, e.g. myapp.tools:send_invoice")
        try:
            value = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(f"--tools {spec!r}: {exc}") from None
        found = list(value) if isinstance(value, (list, tuple)) else [value]
        bad = [t for t in found if not isinstance(t, Tool)]
        if bad:
            raise ConfigurationError(f"--tools {spec!r}: {bad[0]!r} is not a tool (decorate it with @think_core.tool)")
        tools.extend(found)
    return tools


def endpoint_note(agent: Think) -> str:
    """`` (model endpoint URL)``, the URL each model step posts to, for error messages (empty
    for a model without one, like the demo's)."""
    base = getattr(agent.model, "base_url", None)
    return f" (model endpoint {base}{getattr(agent.model, 'path', '')})" if isinstance(base, str) else ""


def one_line(error: BaseException) -> str:
    """An exception's message on one line (psycopg's, for one, span several)."""
    return " ".join(str(error).split()) or type(error).__name__


def without_password(url: str) -> str:
    """``url`` with its password, if any, shown as ``***`` (for error messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + parts.netloc.rpartition("@")[2]))


def open_database(spec: str) -> Store:
    """The store ``--db`` names, or a :class:`ConfigurationError` saying in one line why not: a
    missing ``postgres`` extra, an unreachable server, wrong credentials, an unwritable file."""
    shown = without_password(spec)
    try:
        return open_store(spec)
    except ImportError as exc:
        raise ConfigurationError(f"--db {shown}: {one_line(exc)}") from exc
    except Exception as exc:  # the driver's own errors (psycopg, sqlite3): the user's to fix
        raise ConfigurationError(f"cannot open the database {shown}: {one_line(exc)}") from exc


def build_agent(args: argparse.Namespace, **extra: Any) -> Think:
    model, kwargs = resolve_agent_options(args)
    if not model:
        raise ConfigurationError(
            f"no model: pass --model (e.g. openai:gpt-4o-mini), set ${DEFAULT_MODEL_ENV}, or set model in think.toml"
        )
    kwargs.update(extra)
    chosen: Any = model
    if model == DEMO_MODEL:
        from .demo_model import TOOLS, DemoPolicy, demo_model

        kwargs["tools"] = [*TOOLS, *kwargs.get("tools", ())]
        kwargs["plugins"] = [*kwargs.get("plugins", ()), DemoPolicy()]  # its notes with a phone number ask a human
        chosen = demo_model()
    if isinstance(kwargs.get("store"), str):
        kwargs["store"] = open_database(kwargs["store"])
    try:
        return Think(chosen, **kwargs)
    except BaseException:
        if isinstance(kwargs.get("store"), Store):
            kwargs["store"].close()  # the agent that would have closed it was never made
        raise
