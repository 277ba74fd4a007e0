"""Settings without a plugin (DESIGN §14): ``Think(temperature=, max_tokens=, seed=, system=,
output=)`` are defaults, ``session.chat(input, config=TurnConfig(...))`` overrides them for one
call, and a plugin's ``before_turn`` answer overrides both. No system prompt is sent that the
application did not write. Checked on the wire: an OpenAI-compatible provider on a loopback socket."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tests.loopback import LoopbackServer, Reply
from tests.support.wire import oa_text, oa_tool_call
from think_core import Think, Tool, TurnConfig, hookimpl, tool


def agent(provider: LoopbackServer, tmp_path: Path, **settings: Any) -> Think:
    return Think(f"openai-compatible:m@{provider.url}/v1", load_entrypoints=False, store=str(tmp_path / "s.db"),
                 **settings)


def sent(provider: LoopbackServer) -> dict[str, Any]:
    """The body of the latest request the provider received."""
    body: dict[str, Any] = provider.requests[-1].json
    return body


def system_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "system"]


async def test_no_system_prompt_is_sent_unless_one_is_given(tmp_path: Path) -> None:
    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_text("Hi.")))
        async with agent(provider, tmp_path) as think:
            result = await think.session("s").chat("hi")
    assert result.status == "completed", result.error
    body = sent(provider)
    assert system_messages(body) == []
    assert not {"temperature", "max_tokens", "seed"} & body.keys()


async def test_agent_defaults_a_calls_config_and_a_plugin_override_in_that_order(tmp_path: Path) -> None:
    class Cold:
        @hookimpl
        def before_turn(self, ctx: Any) -> TurnConfig | None:
            # Sees the call's system prompt, as the turn will send it unless it says otherwise.
            return TurnConfig(temperature=0.0) if ctx.system == "Per call." else None

    async with LoopbackServer() as provider:
        provider.enqueue(*(Reply.sse(oa_text("Hi.")) for _ in range(3)))
        think = agent(provider, tmp_path, temperature=0.2, max_tokens=64, seed=7, system="Be terse.")
        think.plugin_manager.register(Cold(), name="cold")
        async with think:
            session = think.session("s")
            assert (await session.chat("one")).status == "completed"
            defaults = sent(provider)
            call = TurnConfig(temperature=0.9, max_output_tokens=10)
            assert (await session.chat("two", config=call)).status == "completed"
            per_call = sent(provider)
            call = TurnConfig(temperature=0.9, system="Per call.")
            assert (await session.chat("three", config=call)).status == "completed"
            overridden = sent(provider)

    assert (defaults["temperature"], defaults["max_tokens"], defaults["seed"]) == (0.2, 64, 7)
    assert system_messages(defaults) == ["Be terse."]
    # The call's config wins over the defaults, field by field; what it leaves unset stays.
    assert (per_call["temperature"], per_call["max_tokens"], per_call["seed"]) == (0.9, 10, 7)
    assert system_messages(per_call) == ["Be terse."]
    # The plugin's answer wins over the call's config.
    assert (overridden["temperature"], overridden["max_tokens"], overridden["seed"]) == (0.0, 64, 7)
    assert system_messages(overridden) == ["Per call."]


class City(BaseModel):
    name: str
    population: int


async def test_structured_output_as_an_agent_default_and_per_call(tmp_path: Path) -> None:
    answer = json.dumps({"name": "Oslo", "population": 709000})
    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_text(answer)), Reply.sse(oa_text('{"n": 1}')))
        async with agent(provider, tmp_path, output=City) as think:
            session = think.session("s")
            result = await session.chat("Oslo?")
            default_body = sent(provider)
            per_call = await session.chat("a number", config=TurnConfig(output={
                "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}))
            call_body = sent(provider)
    assert result.status == "completed", result.error
    assert result.output == City(name="Oslo", population=709000)
    assert default_body["response_format"]["type"] == "json_schema"
    assert "population" in json.dumps(default_body["response_format"])
    assert per_call.status == "completed", per_call.error
    assert per_call.output == {"n": 1}
    assert "population" not in json.dumps(call_body["response_format"])


async def test_think_run_takes_the_settings_as_flags_and_from_think_toml(tmp_path: Path) -> None:
    (tmp_path / "think.toml").write_text('[think]\nsystem = "From the file."\ntemperature = 0.5\nseed = 3\n')
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THINK_")}
    environ["THINK_HOME"] = str(tmp_path / "home")
    async with LoopbackServer() as provider:
        provider.enqueue(Reply.sse(oa_text("Hi.")), Reply.sse(oa_text("Hi.")))
        for flags in ([], ["--temperature", "0.25", "--max-tokens", "20", "--system", "From the flag."]):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "think_core.cli", "run", "hi", "--model", f"openai-compatible:m@{provider.url}/v1",
                "--no-plugins", *flags, cwd=tmp_path, env=environ,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 120)
            assert proc.returncode == 0, err.decode()
            assert out.decode().strip() == "Hi."
        from_file, from_flags = (request.json for request in provider.requests)
    assert (from_file["temperature"], from_file["seed"], system_messages(from_file)) == (0.5, 3, ["From the file."])
    assert "max_tokens" not in from_file
    assert (from_flags["temperature"], from_flags["max_tokens"], from_flags["seed"]) == (0.25, 20, 3)
    assert system_messages(from_flags) == ["From the flag."]


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


@tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (a human approves first)."""
    return f"deleted {path}"


def settings_of(body: dict[str, Any]) -> tuple[Any, Any, Any, list[str]]:
    return body.get("temperature"), body.get("max_tokens"), body.get("seed"), system_messages(body)


async def test_a_calls_config_holds_in_the_continuations_of_its_answer(tmp_path: Path) -> None:
    """The answer a ``chat(config=...)`` starts is continued with that config: its next step
    after a server tool, the continuation an approval starts, the one a client tool's result
    starts, ``continue_last_turn``. A new answer replaces it (with nothing, if it has none); a
    plugin's ``before_turn`` is still laid over it in a continuation."""

    class SeedOnContinuations:
        @hookimpl
        def before_turn(self, ctx: Any) -> TurnConfig | None:
            return TurnConfig(seed=5) if ctx.continuation else None

    async with LoopbackServer() as provider:
        provider.enqueue(
            Reply.sse(oa_tool_call("call_a", "lookup", '{"q": "x"}')),
            Reply.sse(oa_tool_call("call_b", "delete_file", '{"path": "/tmp/x"}')),
            Reply.sse(oa_text("Deleted.")),
            Reply.sse(oa_tool_call("call_c", "pick", "{}")),
            Reply.sse(oa_text("Seven it is.")),
            Reply.sse(oa_text(" And more.")),
            Reply.sse(oa_text("Plain.")),
            Reply.sse(oa_text(" Continued plainly.")),
        )
        think = agent(provider, tmp_path, tools=[lookup, delete_file, Tool.client("pick", "Pick a number.")])
        think.plugin_manager.register(SeedOnContinuations(), name="seed")
        async with think:
            session = think.session("s")
            careful = TurnConfig(temperature=0.1, max_output_tokens=33, system="Careful.")
            asked = await session.chat("delete it", config=careful)
            assert asked.status == "completed", asked.error
            approved = await session.approve_tool_call("call_b", True)
            assert approved is not None and approved.text == "Deleted.", approved
            picking = await session.chat("pick one", config=TurnConfig(temperature=0.7))
            assert picking.status == "completed", picking.error
            picked = await session.add_tool_result("call_c", {"n": 7})
            assert picked is not None and picked.text == "Seven it is.", picked
            more = await session.continue_last_turn()
            assert more.status == "completed" and more.continuation, more
            plain = await session.chat("plain")
            assert plain.status == "completed", plain.error
            plainly = await session.continue_last_turn()
            assert plainly.status == "completed" and plainly.continuation, plainly

    bodies = [request.json for request in provider.requests]
    assert len(bodies) == 8
    lookup_step, approval_step, approved_step, pick_step, picked_step, more_step, plain_step, plainly_step = bodies
    # The first answer: both steps of the call, then the continuation the approval started.
    assert settings_of(lookup_step) == settings_of(approval_step) == (0.1, 33, None, ["Careful."])
    assert settings_of(approved_step) == (0.1, 33, 5, ["Careful."])
    # The second answer has a config of its own, which replaced the first's, in both continuations.
    assert settings_of(pick_step) == (0.7, None, None, [])
    assert settings_of(picked_step) == settings_of(more_step) == (0.7, None, 5, [])
    # A call without a config starts an answer with none: its continuation has none either.
    assert settings_of(plain_step) == (None, None, None, [])
    assert settings_of(plainly_step) == (None, None, 5, [])
