"""A store seen through the :class:`~think_core.store.Store` protocol alone, as the store
contract suite hands it out (``tests/store/conftest.py``): a test that reaches for a backend
extra fails on every backend instead of passing on SQLite and breaking on the next one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from think_core.store import Store

#: The public methods of the protocol: everything a contract test may call on a store.
PROTOCOL_METHODS = frozenset(
    name for name, value in vars(Store).items() if callable(value) and not name.startswith("_")
)


class ProtocolOnly:
    """A backend with only the :class:`Store` protocol's methods reachable; a context manager
    that closes it."""

    def __init__(self, backend: Store) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        if name not in PROTOCOL_METHODS:
            raise AttributeError(f"{name!r} is not part of the Store protocol")
        return getattr(self._backend, name)

    def __enter__(self) -> ProtocolOnly:
        return self

    def __exit__(self, *exc: object) -> None:
        self._backend.close()

    def __repr__(self) -> str:
        return f"ProtocolOnly({self._backend!r})"


StoreFactory = Callable[[], ProtocolOnly]
