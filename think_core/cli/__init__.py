"""The ``think`` command line. Each subcommand lives in its own module and registers itself
through :func:`add_parser` / ``run``."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import sys

# module name under think_core.cli → subcommand; each module defines add_arguments(parser) and run(args)
_COMMANDS = {
    "demo": "demo",
    "run": "run",
    "chat": "chat",
    "serve": "serve",
    "plugins": "plugins_cmd",
    "analytics": "analytics_cmd",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="think", description="think: a pluggy-based agent turn engine")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command, module_name in _COMMANDS.items():
        try:
            module = importlib.import_module(f"{__name__}.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{module_name}":
                continue  # not built yet
            raise
        doc = (module.__doc__ or "").strip().splitlines()
        sp = sub.add_parser(
            command,
            help=doc[0] if doc else None,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,  # keep the examples' lines
        )
        module.add_arguments(sp)
        sp.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    result = args._run(args)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
