"""``think chat``'s ``/attach PATH``: the next message carries the file (its media type guessed
from the name, else from its bytes) and the model's request has it; a file over the limits is
not sent, with the reason, and nothing is stored. Real processes, a loopback OpenAI endpoint."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from tests.loopback import LoopbackServer, Reply
from tests.support.files import DOT_PNG, data_url, png_of_size
from tests.support.wire import oa_text, oa_tool_call

ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("THINK_")}, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"}


async def chat(tmp_path: Path, server: LoopbackServer, lines: list[str], *args: str) -> str:
    """``think chat`` on the loopback model, fed ``lines``; what it printed."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "think_core.cli", "chat", "--model", f"openai-compatible:m@{server.url}/v1",
        "--db", str(tmp_path / "chat.db"), "--no-plugins", *args,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**ENV, "THINK_HOME": str(tmp_path), "OPENAI_COMPATIBLE_API_KEY": "sk-test", "PYTHONPATH": str(tmp_path)},
    )
    out, err = await asyncio.wait_for(process.communicate("".join(f"{line}\n" for line in lines).encode()), 120)
    assert process.returncode == 0 and "Traceback" not in err.decode(), err.decode()
    return out.decode()


async def test_an_attached_image_reaches_the_model_with_the_next_message(tmp_path: Path) -> None:
    (tmp_path / "dot.png").write_bytes(DOT_PNG)
    (tmp_path / "scan").write_bytes(b"%PDF-1.4 a scan")  # no extension: the bytes say PDF
    async with LoopbackServer() as server:
        server.enqueue(Reply.sse(oa_text("A single dot.")))
        out = await chat(tmp_path, server, [f"/attach {tmp_path / 'dot.png'}", f"/attach {tmp_path / 'scan'}", "what are these?", "/history", "/quit"])
    assert "attached dot.png (image/png, 70 bytes): sent with your next message" in out
    assert "attached scan (application/pdf, 15 bytes)" in out
    assert "A single dot." in out
    content = server.requests[0].json["messages"][-1]["content"]
    assert content == [
        {"type": "image_url", "image_url": {"url": data_url(DOT_PNG, "image/png")}},
        {"type": "file", "file": {"filename": "scan", "file_data": data_url(b"%PDF-1.4 a scan", "application/pdf")}},
        {"type": "text", "text": "what are these?"},
    ]
    history = out.split("you> ")[4]
    assert "user: what are these?\n  attached dot.png (image/png)\n  attached scan (application/pdf)" in history


async def test_a_file_over_the_limit_is_not_sent_and_nothing_is_stored(tmp_path: Path) -> None:
    (tmp_path / "huge.png").write_bytes(png_of_size(10 * 2**20 + 1))
    async with LoopbackServer() as server:
        server.enqueue(Reply.sse(oa_text("Only text.")))
        out = await chat(
            tmp_path, server,
            [f"/attach {tmp_path / 'missing.png'}", f"/attach {tmp_path / 'huge.png'}", "look", "/history", "just text", "/quit"],
        )
    assert "cannot attach" in out and "No such file or directory" in out
    assert "not sent: attachment 'huge.png' (image/png) is larger than 10,485,760 bytes" in out
    history = out.split("you> ")[4]
    assert "(no messages)" in history
    assert len(server.requests) == 1 and server.requests[0].json["messages"][-1]["content"] == "just text"


async def test_a_tools_image_is_named_not_printed_as_base64(tmp_path: Path) -> None:
    tools = tmp_path / "screen_tools.py"
    tools.write_text(
        "from think_core import File, tool\n\n"
        "@tool\ndef snapshot() -> list:\n    '''Take a snapshot of the screen.'''\n"
        f"    return ['the screen:', File({DOT_PNG!r}, 'image/png', 'screen.png')]\n"
    )
    async with LoopbackServer() as server:
        server.enqueue(Reply.sse(oa_tool_call("call_1", "snapshot", "{}")), Reply.sse(oa_text("A dot.")))
        out = await chat(tmp_path, server, ["show me", "/history", "/quit"], "--tools", "screen_tools:snapshot")
    assert "← snapshot the screen: [screen.png (image/png)]" in out
    assert "base64" not in out and "iVBOR" not in out
