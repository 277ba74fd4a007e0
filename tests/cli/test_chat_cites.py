"""``think chat`` names what an answer cites and the files the model made, live beside the
answer and in ``/history`` — never an image's base64 (a real ``think chat`` fed through a pipe,
its Gemini a loopback server speaking Gemini's stream)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from binascii import a2b_base64
from pathlib import Path

from tests.loopback import LoopbackServer, Reply
from tests.support import cited
from tests.support.cited import LAB, PNG_1X1

REDIRECT = "https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbF9"


async def test_think_chat_lists_sources_and_files_live_and_in_history(tmp_path: Path, loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(cited.gemini_grounded()), Reply.sse(cited.gemini_image()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("THINK_") and k not in ("GEMINI_API_KEY", "GOOGLE_API_KEY")}
    env.update(THINK_HOME=str(tmp_path), COLUMNS="200", TERM="dumb", NO_COLOR="1", GOOGLE_BASE_URL=f"{loopback.url}/v1beta")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "think_core.cli", "chat", "--model", "google:gemini-2.5-flash-image",
        "--db", str(tmp_path / "chat.db"), "--no-plugins",
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    lines = "What is new?\nDraw a pixel\n/history\n/quit\n"
    out_bytes, err = await asyncio.wait_for(process.communicate(lines.encode()), 120)
    out = out_bytes.decode()
    assert process.returncode == 0 and "Traceback" not in err.decode(), err.decode()
    size = len(a2b_base64(PNG_1X1))
    grounded, drawn, history = out.split("you> ")[1:4]
    assert grounded.splitlines() == [
        "agent> Logical qubits now run for hours and error rates fell.",
        f"[source example.com: {REDIRECT}]",
        f"[source lab.example.org: {LAB[0]}]",
    ]
    assert drawn.splitlines() == ["agent> Here is your pixel.", f"[file image/png, {size} bytes]"]
    assert f"    [source example.com: {REDIRECT}]\n    [source lab.example.org: {LAB[0]}]\n" in history
    assert f"    Here is your pixel.\n    [file image/png, {size} bytes]\n" in history
    assert PNG_1X1[:12] not in out and "base64" not in out
    assert len(loopback.requests) == 2
