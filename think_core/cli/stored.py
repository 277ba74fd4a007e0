"""The conversation database of the commands that read it (``sessions``, ``history``)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ..errors import ConfigurationError
from ..paths import data_dir
from ..store import SQLiteStore, open_store
from ..store.aio import is_postgres_url
from ..types import UIMessage
from .config import load_config

if TYPE_CHECKING:
    from ..store.postgres import PostgresStore

DEFAULT_DB = "think.db"


def add_db_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, help=f"SQLite file (or postgresql:// URL) of the conversations (default: {DEFAULT_DB} in think's data directory)")
    parser.add_argument("--config", default=None, help="configuration file (default: $THINK_CONFIG, else ./think.toml)")


def stored_db(args: argparse.Namespace) -> Path:
    """``--db``, else think.toml's ``db``, else ``think.db`` in the data directory."""
    return Path(args.db or load_config(args.config).think.db or data_dir() / DEFAULT_DB)


def open_stored(args: argparse.Namespace) -> SQLiteStore | PostgresStore:
    """The store at :func:`stored_db`, or the PostgreSQL database ``--db`` names; a
    :class:`ConfigurationError` when there is no such file (reading must not create an empty
    database)."""
    url = args.db or load_config(args.config).think.db
    if is_postgres_url(url):
        return cast("PostgresStore", open_store(url))
    path = stored_db(args)
    if not path.is_file():
        raise ConfigurationError(f"no conversations stored yet: {path} does not exist")
    return SQLiteStore(path)


def first_user_text(messages: Iterable[UIMessage]) -> str | None:
    """The text of the first user message (what a conversation was about), if any."""
    for message in messages:
        if message.role == "user":
            return " ".join(str(p.get("text", "")) for p in message.parts if p.get("type") == "text")
    return None
