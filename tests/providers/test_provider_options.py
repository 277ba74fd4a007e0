"""``TurnConfig.provider_options`` / ``StepConfig.provider_options`` reach the provider's request
body, deep-merged under the provider's name as AI SDK ``providerOptions`` are; another
provider's entry is never sent."""

from __future__ import annotations

from typing import Any

import pytest

from tests.loopback import LoopbackServer, Reply, sse_body  # noqa: F401
from tests.support.gemini import GEMINI_TEXT, gemini_model
from tests.support.responses import responses_model, text_stream
from tests.support.wire import an_stream, anthropic_model, oa_text, openai_model
from think_core import StepConfig, hookimpl
from think_core.agent import Think

OPTIONS = {
    "openai": {"reasoning_effort": "low", "metadata": {"team": "a"}},
    "anthropic": {"top_k": 5, "metadata": {"user_id": "u1"}},
    "google": {"generationConfig": {"topK": 7}},
}


class Options:
    """A Think ``beforeTurn`` returning camelCase ``providerOptions``, and a ``before_step`` adding to them."""

    @hookimpl
    def before_turn(self, ctx: Any) -> dict[str, Any]:
        return {"providerOptions": OPTIONS, "temperature": 0.5}

    @hookimpl
    def before_step(self, ctx: Any) -> StepConfig:
        return StepConfig(provider_options={"openai": {"metadata": {"step": str(ctx.step_number)}},
                                            "anthropic": {"metadata": {"step": "0"}},
                                            "gemini": {"generationConfig": {"candidateCount": 1}}})


CASES = {
    "openai": (openai_model, lambda: oa_text("ok")),
    "responses": (responses_model, lambda: text_stream("ok")),
    "anthropic": (anthropic_model, lambda: an_stream({"type": "text", "text": "ok"}, stop="end_turn",
                                                     input_tokens=3, output_tokens=1)),
    "gemini": (gemini_model, lambda: GEMINI_TEXT),
}


@pytest.mark.parametrize("provider", list(CASES))
async def test_provider_options_are_merged_into_the_body_under_the_provider_name(
    loopback: LoopbackServer, provider: str
) -> None:
    make, stream = CASES[provider]
    loopback.enqueue(Reply.sse(stream()))
    agent = Think(model=make(loopback), store=":memory:", load_entrypoints=False, plugins=[Options()])
    try:
        result = await agent.session("s").chat("hi")
    finally:
        await agent.aclose()
    assert result.status == "completed", result.error
    body = loopback.requests[0].json
    for foreign in ("openai", "anthropic", "google", "gemini"):
        assert foreign not in body  # keys naming a provider are never sent as body keys
    if provider in ("openai", "responses"):
        assert body["reasoning_effort"] == "low"
        assert body["metadata"] == {"team": "a", "step": "0"}  # the step's options deep-merged over the turn's
        assert "top_k" not in body
    elif provider == "anthropic":
        assert body["top_k"] == 5 and body["metadata"] == {"user_id": "u1", "step": "0"}
        assert "reasoning_effort" not in body
    else:
        # merged into what the provider built itself (temperature) as well as each other
        assert body["generationConfig"] == {"temperature": 0.5, "topK": 7, "candidateCount": 1}
        assert "metadata" not in body
