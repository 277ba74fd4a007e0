"""The ``think`` command line.

Built-in subcommands live in the modules of this package (each defines ``add_arguments(parser)``
and ``run(args)``). Plugins add theirs through the ``register_commands`` hook: the command line
asks the entry-point plugins an agent started here would load, so it never imports a plugin by
name. A command's parser carries the function to run as its ``func`` default.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.metadata
import inspect
import logging
import re
import sys
from collections.abc import Callable, Sequence

from ..errors import ConfigurationError
from ..hooks.dispatch import HookDispatcher, tracing_enabled
from ..hooks.markers import DISTRIBUTION
from ..hooks.plugins import ThinkPluginManager, build_plugin_manager
from . import event_loop
from .common import one_line
from .config import load_config

__all__ = ["add_plugin_commands", "build_parser", "main", "plugin_command", "version"]

VERBOSE_HELP = "log more on stderr: -v info, -vv debug (THINK_TRACE_PLUGINS=1 adds each hook call)"
_handler: logging.Handler | None = None  # the stderr handler configure_logging installed

# subcommand → module under think_core.cli
_COMMANDS = {
    "demo": "demo",
    "run": "run",
    "chat": "chat",
    "serve": "serve",
    "plugins": "plugins_cmd",
    "sessions": "sessions",
    "history": "history",
    "submissions": "submissions",
}


def version() -> str:
    """The installed version of the distribution (``unknown`` when run from a source tree)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_parser(*, plugin_commands: bool = True) -> argparse.ArgumentParser:
    """The ``think`` parser: the built-in commands, and the plugins' unless ``plugin_commands``
    is false (which spares importing the plugins when a built-in command is run)."""
    parser = argparse.ArgumentParser(prog="think", description="think: a pluggy-based agent turn engine")
    parser.add_argument("--version", action="version", version=f"think, version {version()} ({DISTRIBUTION})")
    parser.add_argument("-v", "--verbose", action="count", default=0, help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command, module_name in _COMMANDS.items():
        module = importlib.import_module(f"{__name__}.{module_name}")
        doc = (module.__doc__ or "").strip().splitlines()
        sp = sub.add_parser(
            command,
            help=doc[0] if doc else None,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,  # keep the examples' lines
        )
        module.add_arguments(sp)
        # Also after the command (think run -v ...); SUPPRESS keeps a `think -v run` count.
        sp.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=VERBOSE_HELP)
        sp.set_defaults(func=module.run)
    plain_help(sub)
    if plugin_commands:
        pm = _command_plugins()
        if pm is not None:
            add_plugin_commands(sub, pm)
    return parser


def _command_plugins() -> ThinkPluginManager | None:
    """The entry-point plugins an agent started here would load (environment and think.toml
    applied), whose commands the command line offers; ``None`` when the configuration is bad
    (reported on stderr: the built-in commands still work, and say what is wrong)."""
    try:
        config = load_config(None)
        # A broken plugin stops the agent that needs it, not the commands of the others.
        return build_plugin_manager(disable=config.think.disable, settings=config.plugins, broken_plugins="warn")
    except ConfigurationError as exc:
        print(f"think: plugin commands are unavailable: {exc}", file=sys.stderr)
        return None


def add_plugin_commands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], pm: ThinkPluginManager
) -> None:
    """Fire ``register_commands`` on the plugins of ``pm``."""
    HookDispatcher(pm).register_commands(subparsers)
    plain_help(subparsers)


_MARKUP = re.compile(r"(?::[a-z]+:)?`+([^`]+)`+")


def plain_text(text: str | None) -> str | None:
    """Docstring markup (````think run````, ``:func:`register```) as the plain words a terminal shows."""
    return None if text is None else _MARKUP.sub(lambda m: m.group(1).lstrip("~"), text)


def plain_help(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Help texts of ``subparsers`` (and of the commands under them) without docstring markup:
    commands, plugins' included, take their help from docstrings."""
    for action in subparsers._choices_actions:
        action.help = plain_text(action.help)
    for parser in subparsers.choices.values():
        parser.description = plain_text(parser.description)
        parser.epilog = plain_text(parser.epilog)
        for action in parser._actions:
            action.help = plain_text(action.help)
            if isinstance(action, argparse._SubParsersAction):
                plain_help(action)


def plugin_command(pm: ThinkPluginManager, argv: Sequence[str]) -> Callable[[], object] | None:
    """The plugin command ``argv`` (``["analytics", "report", ...]``) of the plugins of ``pm``,
    parsed and ready to call; ``None`` when none of them offers ``argv[0]``."""
    parser = argparse.ArgumentParser(prog="think")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_plugin_commands(sub, pm)
    if not argv or argv[0] not in sub.choices:
        return None
    args = parser.parse_args(list(argv))
    func = getattr(args, "func", None)
    return None if func is None else functools.partial(func, args)


def configure_logging(verbose: int) -> None:
    """Show think's log records on stderr: INFO with ``-v``, DEBUG with ``-vv``, and the hook
    trace when ``THINK_TRACE_PLUGINS`` is set. Without either, logging is left as it is (Python
    shows warnings on stderr by itself)."""
    global _handler
    trace = tracing_enabled()
    if not verbose and not trace:
        return
    think_logger = logging.getLogger("think")
    if _handler is not None:
        think_logger.removeHandler(_handler)
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("think: %(levelname)s %(name)s: %(message)s"))
    think_logger.addHandler(_handler)
    think_logger.setLevel(logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING)
    if trace:
        logging.getLogger("think.plugins.trace").setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    parser = build_parser(plugin_commands=command not in _COMMANDS)
    args = parser.parse_args(argv)
    configure_logging(getattr(args, "verbose", 0))
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        result = func(args)
        if inspect.iscoroutine(result):
            result = event_loop.run(result)  # uvloop's loop when installed (the fast extra)
    except ConfigurationError as exc:  # the user's to fix: what is wrong, not where in the code
        print(f"think: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C anywhere: what ran was cancelled and cleaned up
        if getattr(args, "verbose", 0):
            raise
        print("\nthink: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, not a traceback; -v shows where it came from
        if getattr(args, "verbose", 0):
            raise
        print(f"think: error: {one_line(exc)} ({type(exc).__name__}; -v shows the traceback)", file=sys.stderr)
        return 1
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
