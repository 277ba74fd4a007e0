"""Drift guards: every hookspec is documented (in its docstring and the hook reference, docs/hooks.md) and exercised
by a real turn somewhere in the suite."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from think_core.hooks import specs as hookspecs
from think_core.hooks.markers import PROJECT

ROOT = Path(__file__).resolve().parents[2]
SPECS = {
    name: fn
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
    if hasattr(fn, f"{PROJECT}_spec")
}


def test_the_hooks_of_the_design_exist_with_their_kinds():
    assert set(SPECS) == {
        "configure_session", "before_turn", "before_step", "on_chunk", "before_tool_call",
        "after_tool_call", "on_step_finish", "on_chat_response", "on_chat_error", "classify_chat_error",
        "register_commands", "transform_stream", "transform_tool_result",
    }
    firstresult = {n for n, fn in SPECS.items() if getattr(fn, f"{PROJECT}_spec")["firstresult"]}
    assert firstresult == {
        "before_turn", "before_step", "before_tool_call", "on_chat_error", "classify_chat_error",
    }
    assert set(hookspecs.SYNC_ONLY_HOOKS) == {"on_chunk", "register_commands"}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_hook_documents_when_it_fires_its_parameters_and_returns(name):
    doc = inspect.getdoc(SPECS[name]) or ""
    assert "Fires" in doc, f"{name}: say when it fires"
    for parameter in inspect.signature(SPECS[name]).parameters:
        assert f":param {parameter}:" in doc, f"{name}: document parameter {parameter}"
    assert ":returns:" in doc, f"{name}: say what the return value means"
    assert "raises" in doc, f"{name}: give the failure policy"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_hook_is_in_the_hook_reference(name):
    reference = (ROOT / "docs" / "hooks.md").read_text()
    assert re.search(rf"^\| `{name}` \|", reference, re.M), f"{name} missing from the hook table of docs/hooks.md"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_hook_has_an_engine_test_that_implements_it(name):
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py") if p.name != "test_hookspecs.py")
    assert re.search(rf"def {name}\(", sources), f"no test implements {name}"
