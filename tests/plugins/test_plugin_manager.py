"""The plugin manager factory with explicit plugins: validation, naming, settings, listing."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pluggy
import pytest
from pydantic import BaseModel, Field

from think_core import ChunkContext, ConfigurationError, StepResult, ToolCallContext, hookimpl
from think_core.hooks.plugins import PluginInfo, ThinkPluginManager, build_plugin_manager


def build(*plugins: object, **kwargs: Any) -> ThinkPluginManager:
    return build_plugin_manager(load_entrypoints=False, plugins=plugins, **kwargs)


class Observer:
    name = "observer"

    @hookimpl
    def on_step_finish(self, ctx: StepResult) -> None: ...

    @hookimpl
    async def after_tool_call(self, ctx: Any) -> None: ...


# -- registration checks --------------------------------------------------------------------


def test_async_on_chunk_is_refused_at_registration() -> None:
    class AsyncChunker:
        name = "async_chunker"

        @hookimpl
        async def on_chunk(self, ctx: ChunkContext) -> None: ...

    with pytest.raises(pluggy.PluginValidationError, match="async_chunker") as info:
        build(AsyncChunker())
    assert "on_chunk must be a plain def" in str(info.value)


def test_async_generator_impl_is_refused() -> None:
    class Streaming:
        name = "streaming"

        @hookimpl
        async def on_chunk(self, ctx: ChunkContext) -> Iterator[None]:
            yield None

    with pytest.raises(pluggy.PluginValidationError, match="'streaming'.*async generator"):
        build(Streaming())


@pytest.mark.parametrize("option", ["wrapper", "hookwrapper"])
def test_wrappers_are_refused(option: str) -> None:
    class Wrapping:
        name = "wrapping"

        @hookimpl(**{option: True})
        def before_tool_call(self, ctx: ToolCallContext) -> Iterator[None]:
            yield

    with pytest.raises(pluggy.PluginValidationError, match="'wrapping'.*wrapper"):
        build(Wrapping())


def test_misspelt_hook_name_is_an_error() -> None:
    class Typo:
        name = "typo"

        @hookimpl
        def on_step_finished(self, ctx: StepResult) -> None: ...

    with pytest.raises(pluggy.PluginValidationError, match="did you mean 'on_step_finish'"):
        build(Typo())


def test_failed_registration_leaves_nothing_behind() -> None:
    class BadArgs:
        name = "bad_args"

        @hookimpl  # registered first: dir() is alphabetical
        def after_tool_call(self, ctx: Any) -> None: ...

        @hookimpl
        def before_turn(self, ctx: Any, not_a_parameter: Any) -> None: ...

    pm = ThinkPluginManager()
    plugin = BadArgs()
    with pytest.raises(pluggy.PluginValidationError, match="not_a_parameter"):
        pm.register(plugin, name="bad_args")
    assert not pm.is_registered(plugin)
    assert pm.hook.after_tool_call.get_hookimpls() == []
    assert pm.plugin_infos == []


def test_generation_changes_on_register_and_unregister() -> None:
    pm = ThinkPluginManager()
    seen = {pm.generation}
    plugin = Observer()
    pm.register(plugin, name="observer")
    seen.add(pm.generation)
    pm.unregister(plugin)
    seen.add(pm.generation)
    assert len(seen) == 3


# -- names and order ------------------------------------------------------------------------


def test_explicit_plugins_are_named_by_their_name_attribute_or_pluggy_default() -> None:
    class Unnamed:
        name = 42  # not a str: pluggy's default name is used

        @hookimpl
        def on_step_finish(self) -> None: ...

    module = types.ModuleType("my_module_plugin")
    module.on_step_finish = hookimpl(lambda: None)  # type: ignore[attr-defined]
    unnamed = Unnamed()
    pm = build(Observer(), unnamed, module)
    assert pm.get_plugin("observer") is not None
    assert pm.get_name(unnamed) == pluggy.PluginManager("other").get_canonical_name(unnamed)
    assert pm.get_name(module) == "my_module_plugin"


def test_explicit_plugins_run_last_registered_first() -> None:
    calls: list[str] = []

    def make(label: str) -> object:
        class Plugin:
            name = label

            @hookimpl
            def on_step_finish(self) -> None:
                calls.append(label)

        return Plugin()

    pm = build(make("first"), make("second"))
    pm.hook.on_step_finish(ctx=None)
    assert calls == ["second", "first"]


def test_plugin_infos_describe_registered_plugins_live() -> None:
    pm = build(Observer())
    assert pm.plugin_infos == [
        PluginInfo(
            name="observer",
            status="loaded",
            hooks=("after_tool_call", "on_step_finish"),
            value=f"{__name__}:Observer",
        )
    ]
    pm.unregister(name="observer")
    assert pm.plugin_infos == []


# -- settings -------------------------------------------------------------------------------


class LimitSettings(BaseModel):
    limit: int = Field(default=10, gt=0)
    label: str = "default"


class Limited:
    name = "limited"
    settings_model = LimitSettings

    @hookimpl
    def on_step_finish(self) -> None: ...


def test_settings_are_validated_into_the_plugin() -> None:
    plugin = Limited()
    build(plugin, settings={"limited": {"limit": "5"}, "analytics": {"x": 1}})  # an installed plugin's section
    assert plugin.settings == LimitSettings(limit=5, label="default")  # type: ignore[attr-defined]


def test_a_settings_section_that_names_no_plugin_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match=r"settings: no plugin named 'limted' \(did you mean 'limited'\?\)"):
        build(Limited(), settings={"limted": {"limit": 5}})


def test_missing_section_gives_defaults() -> None:
    plugin = Limited()
    build(plugin)
    assert plugin.settings == LimitSettings()  # type: ignore[attr-defined]


def test_bad_settings_name_plugin_and_field() -> None:
    with pytest.raises(ConfigurationError) as info:
        build(Limited(), settings={"limited": {"limit": 0}})
    message = str(info.value)
    assert "'limited'" in message and "limit" in message
    assert "greater than 0" in message


def test_required_setting_missing_is_reported() -> None:
    class NeedsKey(BaseModel):
        api_key: str

    class Keyed:
        name = "keyed"
        settings_model = NeedsKey

    with pytest.raises(ConfigurationError, match="'keyed'.*api_key.*Field required"):
        build(Keyed())


def test_plugin_settings_takes_an_instance_a_dict_or_nothing() -> None:
    import pydantic

    from think_core import plugin_settings

    class Settings(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid")
        limit: int = 5

    given = Settings(limit=2)
    assert plugin_settings(Settings, given) is given
    assert plugin_settings(Settings, {"limit": 3}) == Settings(limit=3)
    assert plugin_settings(Settings, None) == Settings()
    with pytest.raises(pydantic.ValidationError, match="limt"):
        plugin_settings(Settings, {"limt": 3})
