"""``think run`` names what the answer cites and the files the model made, on stderr beside the
answer, and ``think history`` in the stored answers (a real ``think`` process, its Gemini a
loopback server speaking Gemini's stream)."""

from __future__ import annotations

import asyncio
from binascii import a2b_base64
from pathlib import Path

from tests.loopback import LoopbackServer, Reply
from tests.support import cited
from tests.support.cited import LAB, PNG_1X1
from tests.support.cli import think


async def test_think_run_lists_sources_and_files(tmp_path: Path, loopback: LoopbackServer) -> None:
    loopback.enqueue(Reply.sse(cited.gemini_grounded()), Reply.sse(cited.gemini_image()))
    env = {"GOOGLE_BASE_URL": f"{loopback.url}/v1beta", "GEMINI_API_KEY": "", "GOOGLE_API_KEY": ""}
    args = ("--model", "google:gemini-2.5-flash-image", "--db", str(tmp_path / "chats.db"))
    grounded = await asyncio.to_thread(think, tmp_path, tmp_path, "run", "What is new?", *args, **env)
    drawn = await asyncio.to_thread(think, tmp_path, tmp_path, "run", "Draw a pixel", *args, **env)
    assert grounded.returncode == 0 and drawn.returncode == 0, grounded.stderr + drawn.stderr
    assert grounded.stdout == "Logical qubits now run for hours and error rates fell.\n"
    assert grounded.stderr == (
        "\n[source example.com: https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbF9]\n"
        f"\n[source lab.example.org: {LAB[0]}]\n"
    )
    assert drawn.stdout == "Here is your pixel.\n"
    assert drawn.stderr == f"\n[file image/png, {len(a2b_base64(PNG_1X1))} bytes]\n"
    history = await asyncio.to_thread(think, tmp_path, tmp_path, "history", "cli", "--db", str(tmp_path / "chats.db"))
    assert history.returncode == 0, history.stderr
    assert history.stdout.split("\n\n")[1::2] == [
        "assistant: Logical qubits now run for hours and error rates fell."
        "\n[source example.com: https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbF9]"
        f"\n[source lab.example.org: {LAB[0]}]",
        f"assistant: Here is your pixel.\n[file image/png, {len(a2b_base64(PNG_1X1))} bytes]",
    ]
