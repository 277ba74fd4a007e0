"""What an answer cites and the files a model made, on the built-in chat page in headless
Chromium: the providers are loopback servers speaking Claude's and Gemini's streams. The
sources are a compact list under the answer (each page once, links only for http(s) URLs,
titles as text), a generated image shows inline; both while the answer still streams (the
provider held after them) and after a reload."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.loopback import LoopbackServer, Reply
from tests.support import cited
from tests.support.agents import make_agent
from tests.support.browser import ARTIFACTS, CHROMIUM, Browser, say, wait_for_text
from tests.support.cited import LAB, NEWS, PNG_1X1, GatedModel
from tests.support.gemini import gemini_model
from tests.support.wire import anthropic_model
from think_core import DocumentSource, UrlSource
from think_core.models.scripted import ScriptedModel, Step
from think_core.server import create_app
from think_core.server.testing import running_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium executable (install the Debian 'chromium' package)"),
]

TIMEOUT = 30.0
ANSWER = '.msg[data-role="assistant"]'


async def sources_of(page: Any, answer: int = -1) -> list[tuple[str, str | None]]:
    """Each listed source of an answer: its text and its link (``None``: not a link)."""
    return [tuple(item) for item in await page.eval_on_selector_all(
        f"{ANSWER} .sources", "(lists, i) => [...lists.at(i).querySelectorAll('li')]"
        ".map((li) => [li.innerText, li.querySelector('a') ? li.querySelector('a').getAttribute('href') : null])",
        answer,
    )]


async def reload(page: Any, text: str) -> None:
    await page.reload()
    await page.wait_for_selector("#status.connected", timeout=10_000)
    await wait_for_text(page, text)


async def test_sources_show_under_the_answer_while_it_streams_and_after_a_reload(loopback: LoopbackServer) -> None:
    from playwright.async_api import async_playwright

    loopback.enqueue(Reply.sse(cited.anthropic_web_search()), Reply.sse(cited.anthropic_document_citations()))
    model = GatedModel(anthropic_model(loopback))
    agent = make_agent(model, store=":memory:")
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=cited")
        await say(page, "What is new in quantum computing?")
        await asyncio.wait_for(model.cited.wait(), TIMEOUT)
        # The provider holds after its first citation: the page lists it before the answer ends.
        await page.wait_for_selector(f"{ANSWER} .sources a", timeout=15_000)
        assert await sources_of(page) == [(f"{NEWS[1]} example.com", NEWS[0])]
        assert await page.locator("#stop").is_enabled()  # still streaming
        model.go.set()
        await wait_for_text(page, "error rates fell below threshold.")
        await page.wait_for_function("() => document.getElementById('stop').disabled")
        # Claude cites the first page twice: it is listed once.
        expected = [(f"{NEWS[1]} example.com", NEWS[0]), (f"{LAB[1]} lab.example.org", LAB[0])]
        assert await sources_of(page) == expected
        link = page.locator(f"{ANSWER} .sources a").first
        assert await link.get_attribute("target") == "_blank"
        assert await link.get_attribute("rel") == "noopener noreferrer"
        await page.screenshot(path=str(ARTIFACTS / "web-chat-sources.png"))
        await reload(page, "error rates fell below threshold.")
        assert await sources_of(page) == expected

        # Documents of the prompt a later answer cites: their titles and types, no link.
        await say(page, "What colour are the grass and the sky?")
        await wait_for_text(page, "the sky is blue.")
        await page.wait_for_function("() => document.getElementById('stop').disabled")
        documents = [("Garden notes text/plain", None), ("Document 2 application/pdf", None)]
        assert await sources_of(page) == documents
        await reload(page, "the sky is blue.")
        assert await sources_of(page, 0) == expected and await sources_of(page) == documents
        assert chromium.errors == [] and await page.evaluate("window.__csp") == []
    assert len(loopback.requests) == 2


async def test_a_generated_image_shows_inline_while_the_answer_streams_and_after_a_reload(loopback: LoopbackServer) -> None:
    from playwright.async_api import async_playwright

    loopback.enqueue(Reply.sse(cited.gemini_image()))
    model = GatedModel(gemini_model(loopback, "gemini-2.5-flash-image"), after="file")
    agent = make_agent(model, store=":memory:")
    image = f'{ANSWER} img.attachment[src="data:image/png;base64,{PNG_1X1}"]'
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=drawn")
        await say(page, "Draw me a pixel")
        await asyncio.wait_for(model.cited.wait(), TIMEOUT)
        await page.wait_for_selector(image, timeout=15_000)  # the provider holds after the image
        await wait_for_text(page, "Here is your pixel.")
        assert await page.locator("#stop").is_enabled()  # still streaming
        model.go.set()
        await page.wait_for_function("() => document.getElementById('stop').disabled")
        assert await page.locator(image).count() == 1
        await reload(page, "Here is your pixel.")
        assert await page.locator(image).count() == 1
        assert await page.locator(image).evaluate("img => img.complete && img.naturalWidth") == 1  # it decodes
        assert chromium.errors == [] and await page.evaluate("window.__csp") == []


HOSTILE_SOURCES: list[UrlSource | DocumentSource] = [
    UrlSource("s1", "javascript:window.__xss=1", '<img src=x onerror="window.__xss=2">'),
    UrlSource("s2", "data:text/html,<script>window.__xss=3</script>", "a data page"),
    UrlSource("s3", 'https://ok.example/a"onmouseover="window.__xss=4', "a quoted URL"),
    UrlSource("s4", "http://plain.example/page", None),
]


async def test_a_sources_url_is_a_link_only_when_it_is_http_and_its_title_is_text() -> None:
    from playwright.async_api import async_playwright

    agent = make_agent(ScriptedModel([Step(text="Cited.", sources=HOSTILE_SOURCES)]), store=":memory:")
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=hostile")
        await say(page, "cite something odd")
        await wait_for_text(page, "Cited.")
        await page.wait_for_function("() => document.getElementById('stop').disabled")
        assert await sources_of(page) == [
            ('<img src=x onerror="window.__xss=2">', None),
            ("a data page", None),
            ("a quoted URL ok.example", "https://ok.example/a%22onmouseover=%22window.__xss=4"),
            ("http://plain.example/page plain.example", "http://plain.example/page"),
        ]
        sources = page.locator(f"{ANSWER} .sources")
        assert await sources.locator("img, script, [onerror], [onmouseover]").count() == 0
        for item in await sources.locator("li").all():
            await item.hover()
        await page.wait_for_timeout(200)  # time for a handler to fire, if any existed
        assert await page.evaluate("typeof window.__xss") == "undefined"
        assert chromium.errors == [] and await page.evaluate("window.__csp") == []
