"""Options shared by the commands that build an agent (``run``, ``chat``, ``serve``)."""

from __future__ import annotations

import argparse
import os

from ..agent import Think
from ..errors import ConfigurationError

DEFAULT_MODEL_ENV = "THINK_MODEL"


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=os.environ.get(DEFAULT_MODEL_ENV),
        help='model string: "openai:NAME", "anthropic:NAME" or "openai-compatible:NAME@URL" '
        f"(default: ${DEFAULT_MODEL_ENV})",
    )
    parser.add_argument("--db", default="think.db", help="SQLite file for conversations (default: think.db)")
    parser.add_argument("--system", default=None, help="system prompt")
    parser.add_argument("--no-plugins", action="store_true", help="do not load entry-point plugins")
    parser.add_argument("--max-steps", type=int, default=10, help="model steps per turn at most")


def build_agent(args: argparse.Namespace, **extra: object) -> Think:
    if not args.model:
        raise ConfigurationError(
            f"no model: pass --model (e.g. openai:gpt-4o-mini) or set ${DEFAULT_MODEL_ENV}"
        )
    kwargs: dict = {"store": args.db, "load_entrypoints": not args.no_plugins, "max_steps": args.max_steps}
    if args.system:
        kwargs["system"] = args.system
    kwargs.update(extra)
    return Think(args.model, **kwargs)
