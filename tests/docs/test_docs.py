"""The documentation a user navigates: the README stays short, the site in ``docs/`` builds with
``mkdocs build --strict`` (a broken link or reference fails), and every Python snippet of the
README and the docs runs — the ones that name a real provider against an OpenAI-compatible
server on a loopback socket, each page's snippets in order in one process, as a reader would
paste them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.loopback import LoopbackServer, RecordedRequest, Reply
from tests.support.docs import DOCUMENTS, ROOT, python_snippets
from tests.support.wire import oa_text

WITH_SNIPPETS = [path for path in DOCUMENTS if python_snippets(path)]


def test_the_readme_is_what_a_newcomer_needs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.split()) <= 2000
    # The two set-up commands, exactly.
    assert "pip install -e '.[cli]' && think demo" in readme
    assert 'pip install -e \'.[dev]\' && python -m pytest -q -m "not slow"' in readme
    for page in ("getting-started", "plugins", "hooks", "providers", "persistence", "serving", "configuration", "api"):
        assert f"(docs/{page}.md)" in readme and (ROOT / "docs" / f"{page}.md").is_file()


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    # The hook reference is generated from the hookspecs, the API reference from the exports.
    hooks = (site / "hooks" / "index.html").read_text(encoding="utf-8")
    assert "think_core.hooks.specs.before_tool_call" in hooks and "Think:" in hooks
    assert "TurnConfig" in (site / "api" / "index.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("page", WITH_SNIPPETS, ids=[str(p.relative_to(ROOT)) for p in WITH_SNIPPETS])
async def test_every_snippet_runs(page: Path, tmp_path: Path) -> None:
    code = "\n\n".join(python_snippets(page))

    def answer(request: RecordedRequest) -> Reply:
        return Reply.sse(oa_text("It is 21 °C in Lisbon."))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("THINK_", "OPENAI_"))}
    async with LoopbackServer(answer) as provider:
        env.update(THINK_HOME=str(tmp_path / "home"), OPENAI_API_KEY="sk-docs", OPENAI_BASE_URL=f"{provider.url}/v1")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, f"{page.name}:\n{err.decode()}"
    if 'Think("openai:' in code and ".chat(" in code:
        assert provider.requests, "the snippet's agent never asked its model"
