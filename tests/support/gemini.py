"""Gemini ``streamGenerateContent?alt=sse`` streams as Google sends them (``data:`` events ending
in CRLF CRLF; a recorded text stream and its answer, ``chunk`` for one candidate's parts) and a
Gemini model pointed at a loopback server."""

from __future__ import annotations

import json
from typing import Any

from tests.loopback import LoopbackServer
from tests.support.wire import FAST
from think_core.models.gemini import GeminiModel

GEMINI_TEXT_PAYLOADS = [
    r'''{"candidates": [{"content": {"parts": [{"text": "Here you go!\n\n1.  **English:** Hi\n2.  **Spanish:** Hola\n3.  **French:** Bonjour\n4.  **German:** Hallo\n5.  "}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 5,"candidatesTokenCount": 39,"totalTokenCount": 230,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 5}],"thoughtsTokenCount": 186},"modelVersion": "models/gemini-2.5-flash-preview-05-20","responseId": "AdVRaMmDCYekqtsPrb_-iAw"}''',  # noqa: E501
    r'''{"candidates": [{"content": {"parts": [{"text": "**Italian:** Ciao"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 5,"candidatesTokenCount": 44,"totalTokenCount": 235,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 5}],"thoughtsTokenCount": 186},"modelVersion": "models/gemini-2.5-flash-preview-05-20","responseId": "AdVRaMmDCYekqtsPrb_-iAw"}''',  # noqa: E501
]
GEMINI_TEXT = "".join(f"data: {p}\r\n\r\n" for p in GEMINI_TEXT_PAYLOADS)
GEMINI_TEXT_ANSWER = (
    "Here you go!\n\n1.  **English:** Hi\n2.  **Spanish:** Hola\n3.  **French:** Bonjour\n4.  **German:** Hallo\n"
    "5.  **Italian:** Ciao"
)


def crlf_stream(*payloads: str | dict[str, Any]) -> str:
    return "".join(f"data: {p if isinstance(p, str) else json.dumps(p)}\r\n\r\n" for p in payloads)


def chunk(*parts: dict[str, Any], finish: str | None = None, usage: tuple[int, int, int] | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    out: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-2.5-flash", "responseId": "r1"}
    if usage:
        prompt, candidates, thoughts = usage
        out["usageMetadata"] = {"promptTokenCount": prompt, "candidatesTokenCount": candidates,
                                "thoughtsTokenCount": thoughts, "totalTokenCount": prompt + candidates + thoughts}
    return out


def gemini_model(server: LoopbackServer, model_id: str = "gemini-2.5-flash", **kwargs: Any) -> GeminiModel:
    kwargs.setdefault("api_key", "AIza-test")
    kwargs.setdefault("retry_policy", FAST)
    return GeminiModel(model_id, base_url=server.url + "/v1beta", **kwargs)
