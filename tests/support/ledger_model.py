"""The model behind the ledger crash tests, as a loopback handler: step one calls ``record``
(:mod:`tests.support.ledger_tools`) for the latest user message; step two answers it by name."""

from __future__ import annotations

import json
import uuid

from tests.loopback import RecordedRequest, Reply
from tests.support.wire import oa_text, oa_tool_call


def record_then_answer(request: RecordedRequest, *, call_delay: float, answer_delay: float) -> Reply:
    """The reply to ``request`` (an OpenAI Chat Completions request), streamed with a pause of
    ``call_delay`` (the tool call) or ``answer_delay`` (the answer) seconds between chunks."""
    messages = request.json["messages"]
    users = [m for m in messages if m["role"] == "user"]
    content = users[-1]["content"]
    key = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    if messages[-1]["role"] == "tool":
        return Reply.sse(oa_text("Answer ", "to ", key, "."), chunk_delay=answer_delay)
    arguments = json.dumps({"key": key, "nonce": uuid.uuid4().hex})
    return Reply.sse(oa_tool_call(f"call_{uuid.uuid4().hex[:12]}", "record", arguments), chunk_delay=call_delay)
