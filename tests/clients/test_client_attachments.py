"""The pinned chat clients send files: ``useChat`` over HTTP and ``useAgentChat`` over the
WebSocket call ``sendMessage({ text, files })`` against ``think serve --model
openai-compatible:…`` (a child process), whose model is a loopback server speaking OpenAI's wire
format and answering with what it received; driven by ``attachments.mjs`` (see it for the
checks). Skips and fails as ``test_clients.py`` does."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from pathlib import Path

from tests.clients.test_clients import CLIENTS, NODE, SCRIPT_TIMEOUT, require_clients
from tests.loopback import LoopbackServer, RecordedRequest, Reply
from tests.support.files import DOT_PNG
from tests.support.serve import think_serve
from tests.support.wire import oa_text


def what_it_sees(request: RecordedRequest) -> Reply:
    """The model's answer about the last user message: its images' type and SHA-256 (of the
    bytes of their data URLs) and its words."""
    content = request.json["messages"][-1]["content"]
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    seen = []
    for block in blocks:
        if block["type"] == "image_url":
            header, _, data = block["image_url"]["url"].partition(",")
            digest = hashlib.sha256(base64.b64decode(data)).hexdigest()[:12]
            seen.append(f"an {header.removeprefix('data:').removesuffix(';base64')} image (sha256 {digest})")
    words = " ".join(b["text"] for b in blocks if b["type"] == "text")
    return Reply.sse(oa_text(f"I see {' and '.join(seen) or 'no image'} and the words \"{words}\"."))


async def test_npm_clients_send_files_and_get_answers_about_them(tmp_path: Path, loopback: LoopbackServer) -> None:
    require_clients()
    assert NODE is not None
    loopback.handler = what_it_sees
    env = {**os.environ, "THINK_HOME": str(tmp_path), "OPENAI_COMPATIBLE_API_KEY": "sk-test"}
    env.pop("THINK_API_TOKEN", None)
    args = ("--model", f"openai-compatible:gpt-4o@{loopback.url}/v1", "--db", str(tmp_path / "chats.db"), "--max-file", "2KiB")
    with (tmp_path / "serve.log").open("wb") as log:
        async with think_serve(*args, env=env, stderr=log) as (_, base):
            node = await asyncio.create_subprocess_exec(
                NODE, str(CLIENTS / "attachments.mjs"), cwd=CLIENTS, env={**os.environ, "THINK_URL": base, "THINK_PNG": base64.b64encode(DOT_PNG).decode()},
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )
            out = (await asyncio.wait_for(node.communicate(), SCRIPT_TIMEOUT))[0].decode()
    checks = [line for line in out.splitlines() if line.startswith("ok ")]
    assert node.returncode == 0 and len(checks) == 3 and "FAIL" not in out, out + (tmp_path / "serve.log").read_text()
    assert len(loopback.requests) == 2  # the refused file never reached the model
