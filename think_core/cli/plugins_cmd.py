"""List the installed plugins: name, distribution, version, hooks, status and error.

Builds a plugin manager the way an agent would (entry points of group ``think``, with
``THINK_PLUGINS`` / ``THINK_DISABLE_PLUGINS`` and think.toml's ``disable`` list and plugin
settings applied), so what it shows is what ``think run/chat/serve`` started from the same
folder and environment would load. A plugin that fails to load is listed as ``failed`` (with
its error) instead of stopping the listing.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import ConfigurationError
from ..hooks.plugins import PluginInfo, build_plugin_manager
from .config import load_config

# The keys of ``--json`` objects, in display order.
FIELDS = ("name", "distribution", "version", "hooks", "status", "error")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.add_argument("--config", default=None, help="configuration file (default: $THINK_CONFIG, else ./think.toml)")


def _rows(infos: list[PluginInfo]) -> list[dict[str, object]]:
    dumped = (info.model_dump(mode="json") for info in infos)
    return [{key: row[key] for key in FIELDS} for row in dumped]


def _cell(value: object, separator: str = ", ") -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return separator.join(value) or "-"
    return str(value)


def _print_table(rows: list[dict[str, object]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for row in rows:
            print("  ".join(f"{key}={_cell(row[key])}" for key in FIELDS))
        return
    table = Table()
    # The name is what users type into THINK_PLUGINS / THINK_DISABLE_PLUGINS: keep it whole.
    table.add_column("name", no_wrap=True, min_width=max(len(str(row["name"])) for row in rows))
    for key in FIELDS[1:]:
        table.add_column(key, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row[key], separator="\n") for key in FIELDS))
    Console().print(table)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        # Listing is where a broken plugin is looked at, so it is shown rather than raised.
        pm = build_plugin_manager(disable=config.think.disable, settings=config.plugins, broken_plugins="warn")
    except ConfigurationError as exc:
        print(f"think plugins: {exc}", file=sys.stderr)
        return 1
    rows = _rows(pm.plugin_infos)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif rows:
        _print_table(rows)
    else:
        print("no plugins")
    return 0
