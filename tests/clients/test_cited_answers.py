"""The pinned AI SDK ``useChat`` (HTTP) and Cloudflare's ``useAgentChat`` (WebSocket) show what
an answer cites and the image a model made: ``think serve --model google:…`` as a child
process, its Gemini a loopback server speaking Gemini's wire format (a Google Search grounded
answer, then an image), driven by ``sources.mjs`` (see it for the checks). Skips and fails as
``test_clients.py`` does."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from tests.clients.test_clients import CLIENTS, NODE, SCRIPT_TIMEOUT, require_clients
from tests.loopback import LoopbackServer, RecordedRequest, Reply
from tests.support import cited
from tests.support.cited import LAB, PNG_1X1
from tests.support.serve import think_serve

GROUNDED_TEXT = "Logical qubits now run for hours and error rates fell."
IMAGE_TEXT = "Here is your pixel."
REDIRECT = "https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbF9"


def gemini_answer(request: RecordedRequest) -> Reply:
    """A drawing when the last message asks for one, else the grounded answer."""
    asked = json.dumps(request.json["contents"][-1])
    return Reply.sse(cited.gemini_image() if "Draw" in asked else cited.gemini_grounded())


async def test_use_chat_and_use_agent_chat_show_sources_and_a_generated_image(tmp_path: Path, loopback: LoopbackServer) -> None:
    require_clients()
    assert NODE is not None
    loopback.handler = gemini_answer
    env = {**os.environ, "THINK_HOME": str(tmp_path), "GOOGLE_BASE_URL": f"{loopback.url}/v1beta"}
    for name in ("THINK_API_TOKEN", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        env.pop(name, None)
    expected = {"groundedText": GROUNDED_TEXT, "sources": [[REDIRECT, "example.com"], [LAB[0], "lab.example.org"]],
                "imageText": IMAGE_TEXT, "png": PNG_1X1}
    with (tmp_path / "serve.log").open("wb") as log:
        async with think_serve("--model", "google:gemini-2.5-flash-image", "--db", str(tmp_path / "chats.db"),
                               env=env, stderr=log) as (_, base):
            node = await asyncio.create_subprocess_exec(
                NODE, str(CLIENTS / "sources.mjs"), cwd=CLIENTS,
                env={**os.environ, "THINK_URL": base, "THINK_EXPECTED": json.dumps(expected)},
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )
            out = (await asyncio.wait_for(node.communicate(), SCRIPT_TIMEOUT))[0].decode()
    checks = [line for line in out.splitlines() if line.startswith("ok ")]
    assert node.returncode == 0 and len(checks) == 4 and "FAIL" not in out, out + (tmp_path / "serve.log").read_text()
    assert len(loopback.requests) == 4  # one model request per answer
