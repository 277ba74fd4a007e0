"""A process answering one durable submission with Claude (a loopback server) that searches the
web, then calls ``lookup`` — or, with ``--gemini``, Gemini drawing an image and then calling it;
with ``--crash`` it kills itself (SIGKILL) once that first step is journaled. Every
``before_step`` appends the sources and files of the steps before it to a file.

``python -m tests.engine._cited_worker BASE_URL DB LOG [--crash] [--gemini]``
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from think_core import Think, hookimpl, tool
from think_core.models.anthropic import AnthropicModel
from think_core.models.gemini import GeminiModel


@tool(read_only=True)
def lookup(query: str) -> str:
    """Look a query up."""
    return f"found {query}"


class Probe:
    def __init__(self, log: str, crash: bool) -> None:
        self.log = log
        self.crash = crash

    @hookimpl
    def before_step(self, ctx: Any) -> None:
        seen = [[s.source_type, s.url, s.title] for step in ctx.steps for s in step.sources]
        files = [[f.media_type, f.base64] for step in ctx.steps for f in step.files]
        with open(self.log, "a") as out:
            out.write(json.dumps({"pid": os.getpid(), "step": ctx.step_number, "sources": seen, "files": files}) + "\n")

    @hookimpl
    def on_step_finish(self, ctx: Any) -> None:
        if self.crash and ctx.step_number == 0:
            os.kill(os.getpid(), signal.SIGKILL)  # the step is journaled; its answer is not stored


async def main(base_url: str, db: str, log: str, crash: bool, gemini: bool) -> None:
    model: Any = (GeminiModel("gemini-2.5-flash-image", base_url=f"{base_url}/v1beta", api_key="") if gemini
                  else AnthropicModel("claude-sonnet-4-5", base_url=base_url, api_key=""))
    agent = Think(model, tools=[lookup], plugins=[Probe(log, crash)], store=db, submission_lease=2,
                  load_entrypoints=False)
    session = agent.session("s")
    row = await session.submit_messages("What is new in quantum computing?", idempotency_key="m0")
    await session.wait_for_submission(row.submission_id, timeout=120)
    await agent.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], "--crash" in sys.argv[4:], "--gemini" in sys.argv[4:]))
