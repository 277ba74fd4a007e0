"""The plugin manager: one per agent, built by :func:`build_plugin_manager`.

There is no module-global manager, so two agents in one process can run different plugin sets
and tests stay hermetic. The manager is pluggy's, with three additions the engine relies on:

* :meth:`ThinkPluginManager.register` refuses what the async dispatcher
  (:mod:`think_core.hooks.dispatch`) cannot honour — wrappers, ``async def`` ``on_chunk``
  implementations, async generators, unknown hook names — *before* anything is registered;
* a ``generation`` counter, bumped on every (un)registration, so the dispatcher can cache
  its per-hook call lists and rebuild them only when the plugin set changes;
* ``plugin_infos``: what was loaded, disabled or failed, for ``think plugins``.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import inspect
import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeVar

import pluggy
from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import ConfigurationError, PluginLoadError, PluginLoadInterrupted
from . import specs as hookspecs
from .limits import section_for_model
from .markers import ENTRY_POINT_GROUP, PROJECT
from .names import (
    BROKEN_PLUGINS_ENV,
    BrokenPlugins,
    broken_plugins_mode,
    check_plugin_names,
    env_names,
    installed_plugin_names,
)

__all__ = ["PluginInfo", "ThinkPluginManager", "build_plugin_manager"]

logger = logging.getLogger("think.plugins")

PluginStatus = Literal["loaded", "disabled", "failed"]


class PluginInfo(BaseModel):
    """One row of the plugin listing.

    ``hooks`` is empty for disabled and failed plugins: a disabled entry point is never
    imported, so its hooks are unknown. ``value`` is the entry point's target
    (``"pkg.module:Class"``) or, for an explicitly passed plugin, where its code lives.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    status: PluginStatus
    hooks: tuple[str, ...] = ()
    distribution: str | None = None
    version: str | None = None
    value: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class _Source:
    """Where a registered plugin came from (kept until it is unregistered)."""

    distribution: str | None = None
    version: str | None = None
    value: str | None = None


class ThinkPluginManager(pluggy.PluginManager):
    """pluggy's manager for project ``think``, with the think hookspecs already added."""

    def __init__(self) -> None:
        super().__init__(PROJECT)
        self.add_hookspecs(hookspecs)
        #: Bumped on every register/unregister; the dispatcher keys its caches on it.
        self.generation = 0
        self._sources: dict[str, _Source] = {}
        self._unloaded: list[PluginInfo] = []

    def register(
        self, plugin: object, name: str | None = None, *, source: _Source | None = None
    ) -> str | None:
        """Validate ``plugin`` for think's dispatcher, then register it as pluggy does.

        Raises :class:`pluggy.PluginValidationError` naming the plugin when it cannot be
        dispatched correctly; in that case nothing of the plugin stays registered (pluggy
        itself may leave a half-registered plugin behind when a later impl fails its checks).
        """
        plugin_name = name or self.get_canonical_name(plugin)
        self._validate(plugin, plugin_name)
        was_registered = self.is_registered(plugin)
        try:
            registered = super().register(plugin, name)
        except Exception:
            if not was_registered and self.is_registered(plugin):
                self.unregister(plugin)
            raise
        self.generation += 1
        if registered is not None:
            self._sources[registered] = source or _describe_object(plugin)
        return registered

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any | None:
        """Unregister as pluggy does, and invalidate the dispatcher's cached call lists."""
        if name is None and plugin is not None:
            name = self.get_name(plugin)
        removed = super().unregister(plugin, name)
        self.generation += 1
        if name is not None:
            self._sources.pop(name, None)
        return removed

    def record_unloaded(self, info: PluginInfo) -> None:
        """Remember an entry point that was disabled or failed, so it is still listed."""
        self._unloaded.append(info)

    @property
    def plugin_infos(self) -> list[PluginInfo]:
        """Registered plugins (registration order), then disabled and failed entry points."""
        infos = []
        for name, plugin in self.list_name_plugin():
            if plugin is None:  # a name blocked through pluggy's set_blocked
                continue
            callers = self.get_hookcallers(plugin) or []
            infos.append(
                PluginInfo(
                    name=name,
                    status="loaded",
                    hooks=tuple(sorted(caller.name for caller in callers)),
                    **asdict(self._sources[name]),
                )
            )
        return infos + self._unloaded

    def _validate(self, plugin: object, plugin_name: str) -> None:
        for attr in dir(plugin):
            opts = self.parse_hookimpl_opts(plugin, attr)
            if opts is None:
                continue
            hook_name = opts.get("specname") or attr
            function = getattr(plugin, attr)
            where = f"plugin {plugin_name!r}: hook implementation {hook_name!r}"
            if opts.get("wrapper") or opts.get("hookwrapper"):
                raise pluggy.PluginValidationError(
                    plugin,
                    f"{where} is a wrapper; think dispatches hooks itself (awaiting async "
                    "implementations), so wrappers are not supported. Use tryfirst=True or "
                    "trylast=True to order an implementation instead.",
                )
            if inspect.isasyncgenfunction(function):
                raise pluggy.PluginValidationError(
                    plugin,
                    f"{where} is an async generator; hook implementations must be 'def' or "
                    "'async def' functions that return their result.",
                )
            why_sync = hookspecs.SYNC_ONLY_HOOKS.get(hook_name)
            if why_sync is not None and inspect.iscoroutinefunction(function):
                raise pluggy.PluginValidationError(
                    plugin, f"{where} is 'async def'; {hook_name} must be a plain def: {why_sync}"
                )
            caller = getattr(self.hook, hook_name, None)
            known = caller is not None and caller.has_spec()
            if not known and not opts.get("optionalhook"):
                close = difflib.get_close_matches(hook_name, _spec_names(), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise pluggy.PluginValidationError(
                    plugin, f"{where} does not match any think hook{hint}"
                )


def _spec_names() -> list[str]:
    return [name for name in dir(hookspecs) if hasattr(getattr(hookspecs, name), f"{PROJECT}_spec")]


def _describe_object(plugin: object) -> _Source:
    """Where an explicitly registered plugin's code lives (its module, or module:class)."""
    if inspect.ismodule(plugin):
        return _Source(value=plugin.__name__)
    cls = type(plugin)
    return _Source(value=f"{cls.__module__}:{cls.__qualname__}")


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


_S = TypeVar("_S", bound=BaseModel)


def plugin_settings(model: type[_S], given: _S | Mapping[str, Any] | None) -> _S:
    """A plugin's settings as its constructor was given them: an instance of ``model`` as it is,
    a dict of its fields validated (a ``ValidationError`` names the field), ``None`` the
    defaults. ``Think(settings={name: ...})`` then replaces them (see ``settings_model``)."""
    return given if isinstance(given, model) else model.model_validate(given or {})


def _apply_settings(plugin: object, name: str, settings: Mapping[str, Any]) -> None:
    """Validate ``settings[name]`` with the plugin's ``settings_model`` and set ``plugin.settings``.

    A plugin that already holds settings of that model (it was built with them) keeps them
    unless ``settings`` has a section for it.

    Bad settings must stop start-up with a message naming the plugin and the field, rather
    than surface later as an attribute error deep inside a turn.
    """
    model = getattr(plugin, "settings_model", None)
    if model is None:
        return
    if name not in settings and isinstance(getattr(plugin, "settings", None), model):
        return  # configured when it was constructed; no section here to override it
    try:
        section = section_for_model(settings.get(name, {}), model)
        plugin.settings = model.model_validate(section)  # type: ignore[attr-defined]
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc']) or '(section)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigurationError(f"invalid settings for plugin {name!r}: {problems}") from exc


def _load_entry_points(
    pm: ThinkPluginManager, disabled: frozenset[str], allowed: frozenset[str] | None, settings: Mapping[str, Any]
) -> list[tuple[PluginInfo, BaseException]]:
    """Register the ``think`` entry points that are allowed; return the ones that failed.

    Allow/deny lists are checked before ``ep.load()``, so a disabled plugin is never imported.
    A plugin that fails to import, instantiate or register is listed as failed — also when it
    raises ``SystemExit`` (a ``sys.exit()`` at import time must not end the host process) or
    any other ``BaseException``; a ``KeyboardInterrupt`` stops the agent (the user asked to stop,
    or the plugin says so) as a :class:`PluginLoadInterrupted` naming the plugin. Bad settings are not isolated (they are the user's configuration error).
    """
    failures: list[tuple[PluginInfo, BaseException]] = []
    seen: set[tuple[str, str]] = set()
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        # The same entry point twice (metadata left behind by an earlier name of a distribution,
        # an egg-info beside an install) is one plugin: loading it twice would be a failure.
        if (ep.name, ep.value) in seen:
            continue
        seen.add((ep.name, ep.value))
        dist = ep.dist
        source = _Source(
            distribution=dist.name if dist else None,
            version=dist.version if dist else None,
            value=ep.value,
        )
        if ep.name in disabled or (allowed is not None and ep.name not in allowed):
            pm.record_unloaded(PluginInfo(name=ep.name, status="disabled", **asdict(source)))
            continue
        try:
            target = ep.load()
            plugin = target() if inspect.isclass(target) else target
        except KeyboardInterrupt as exc:
            raise _interrupted(ep.name, source, exc) from exc
        except BaseException as exc:
            failures.append(_record_failure(pm, ep.name, source, exc))
            continue
        _apply_settings(plugin, ep.name, settings)
        try:
            pm.register(plugin, name=ep.name, source=source)
        except KeyboardInterrupt as exc:
            raise _interrupted(ep.name, source, exc) from exc
        except BaseException as exc:
            failures.append(_record_failure(pm, ep.name, source, exc))
    return failures


def _interrupted(name: str, source: _Source, exc: KeyboardInterrupt) -> PluginLoadInterrupted:
    return PluginLoadInterrupted(
        name, exc, distribution=source.distribution,
        message=f"plugin {name!r} was interrupted while loading (KeyboardInterrupt); the agent does not start",
    )


def _record_failure(
    pm: ThinkPluginManager, name: str, source: _Source, exc: BaseException
) -> tuple[PluginInfo, BaseException]:
    logger.debug("traceback of plugin %r", name, exc_info=exc)
    info = PluginInfo(name=name, status="failed", error=_error_text(exc), **asdict(source))
    pm.record_unloaded(info)
    return info, exc


def _describe_failure(info: PluginInfo) -> str:
    where = ", ".join(
        part
        for part in (
            f"entry point {info.value}" if info.value else "",
            f"distribution {info.distribution} {info.version or ''}".rstrip() if info.distribution else "",
        )
        if part
    )
    return f"plugin {info.name!r} ({where}) failed to load: {info.error}"


def _report_failures(failures: list[tuple[PluginInfo, BaseException]], mode: BrokenPlugins) -> None:
    """Log each failure (``warn``), or stop with a :class:`PluginLoadError` naming them (``error``)."""
    if not failures:
        return
    if mode == "warn":
        for info, _ in failures:
            logger.warning("%s; running without it", _describe_failure(info))
        return
    names = tuple(info.name for info, _ in failures)
    message = (
        "; ".join(_describe_failure(info) for info, _ in failures)
        + ". The agent does not start without an installed plugin: fix or uninstall it, disable it "
        f"(disable=[...] or THINK_DISABLE_PLUGINS={','.join(names)}), or start without broken plugins "
        f"(broken_plugins='warn' or {BROKEN_PLUGINS_ENV}=warn)."
    )
    first, error = failures[0]
    raise PluginLoadError(
        first.name, error, distribution=first.distribution, failed=names, message=message
    ) from error


def build_plugin_manager(
    *,
    load_entrypoints: bool = True,
    disable: Iterable[str] = (),
    plugins: Iterable[object] = (),
    settings: Mapping[str, Any] | None = None,
    broken_plugins: BrokenPlugins | None = None,
) -> ThinkPluginManager:
    """Build the plugin manager of one agent.

    Entry points of group ``think`` come first (unless ``load_entrypoints`` is false), then
    ``plugins`` in the given order — pluggy calls the last registered first, so explicit
    plugins run before installed ones. ``THINK_PLUGINS`` (allow-list, empty = none) and
    ``THINK_DISABLE_PLUGINS`` / ``disable`` (deny-lists) name entry points; a name that matches
    no installed entry point is a :class:`ConfigurationError`.

    An entry point that fails to load raises :class:`PluginLoadError` once all were tried,
    unless ``broken_plugins`` (default ``$THINK_BROKEN_PLUGINS``, else ``"error"``) is
    ``"warn"``: then it is logged, listed as failed in ``plugin_infos``, and left out.

    Each plugin that declares ``settings_model`` gets ``plugin.settings`` validated from
    ``settings[<plugin name>]``; invalid settings, and a section that names no plugin, raise
    :class:`ConfigurationError`.
    """
    settings = settings or {}
    plugins = list(plugins)
    mode = broken_plugins_mode(broken_plugins)
    installed = installed_plugin_names()
    disable = list(disable)
    check_plugin_names(disable, installed, "disable")
    pm = ThinkPluginManager()
    failures: list[tuple[PluginInfo, BaseException]] = []
    if load_entrypoints:
        allowed = env_names("THINK_PLUGINS")
        env_disabled = env_names("THINK_DISABLE_PLUGINS") or frozenset()
        check_plugin_names(allowed or (), installed, "$THINK_PLUGINS")
        check_plugin_names(env_disabled, installed, "$THINK_DISABLE_PLUGINS")
        failures = _load_entry_points(pm, frozenset(disable) | env_disabled, allowed, settings)
    named = [(_plugin_name(pm, plugin), plugin) for plugin in plugins]
    check_plugin_names(settings, installed | {name for name, _ in named}, "settings")
    _report_failures(failures, mode)
    for name, plugin in named:
        _apply_settings(plugin, name, settings)
        pm.register(plugin, name=name)
    pm.check_pending()
    return pm


def _plugin_name(pm: ThinkPluginManager, plugin: object) -> str:
    declared = getattr(plugin, "name", None)
    return declared if isinstance(declared, str) else pm.get_canonical_name(plugin)
