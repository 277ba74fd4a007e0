"""The built-in chat page on a phone, with failing providers, Markdown and hostile model
output — in headless Chromium, as ``test_web_page`` drives it (python playwright + the
system's ``chromium``). Screenshots go to ``test-artifacts/`` for a human to look at."""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import LoopbackServer, Reply
from tests.support.browser import ARTIFACTS, CHROMIUM, Browser, say, wait_for_text
from tests.support.tools import delete_file
from think_core import ask, block, hookimpl, tool
from think_core.agent import Think
from think_core.models.openai import OpenAIChatModel
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.server import create_app
from think_core.server.testing import running_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium executable (install the Debian 'chromium' package)"),
]

STATIC = Path(__file__).resolve().parents[2] / "think_core" / "server" / "static"
PHONE = {"width": 390, "height": 844}


def page_agent(*steps: Any, **kwargs: Any) -> Think:
    return Think(ScriptedModel(list(steps)), store=":memory:", load_entrypoints=False, **kwargs)


async def test_on_a_phone_the_input_and_the_conversation_use_the_width_and_the_timeline_folds_away() -> None:
    from playwright.async_api import async_playwright

    agent = page_agent(Step(text="A reply long enough to wrap on a phone: " + "words " * 30))
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=phone", PHONE)
        box = await page.locator("#input").bounding_box()
        assert box is not None
        assert box["width"] >= 300, box
        assert box["x"] >= 0 and box["y"] >= 0
        assert box["x"] + box["width"] <= PHONE["width"] and box["y"] + box["height"] <= PHONE["height"], box
        for button in ("#send", "#stop"):
            b = await page.locator(button).bounding_box()
            assert b is not None and b["x"] + b["width"] <= PHONE["width"] and b["y"] + b["height"] <= PHONE["height"]
        # The timeline is behind a toggle, not beside a squeezed conversation.
        assert not await page.locator("#timeline").is_visible()
        messages = await page.locator("#messages").bounding_box()
        assert messages is not None and messages["width"] >= PHONE["width"] - 2

        await say(page, "hello from a phone")
        await wait_for_text(page, "A reply long enough")
        # The page draws the stored transcript again when the turn ends: measure the reply once
        # it is drawn for good (visible, its whole text in it).
        reply_element = page.locator('.msg[data-role="assistant"]', has_text="words words")
        await reply_element.wait_for(state="visible", timeout=15_000)
        reply = None
        for _ in range(300):  # at most ~15 s: a re-render may detach it for a moment
            reply = await reply_element.bounding_box()
            if reply is not None:
                break
            await asyncio.sleep(0.05)
        assert reply is not None and reply["width"] >= 0.85 * PHONE["width"]
        # No sideways scrolling.
        assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        await page.screenshot(path=str(ARTIFACTS / "web-chat-phone.png"))

        toggle = page.locator("#toggle-timeline")
        assert await toggle.is_visible() and await toggle.get_attribute("aria-expanded") == "false"
        await toggle.click()
        await page.wait_for_selector(".turn .status-completed", timeout=10_000)
        assert await page.locator("#timeline").is_visible()
        assert await toggle.get_attribute("aria-expanded") == "true"
        await page.screenshot(path=str(ARTIFACTS / "web-chat-phone-timeline.png"))
        await toggle.click()
        assert not await page.locator("#timeline").is_visible()
        assert chromium.errors == [] and await page.evaluate("window.__csp") == []


INVALID_KEY = {
    "error": {
        "message": "Incorrect API key provided: sk-bad. You can find your API key at https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}


async def test_a_401_before_any_output_is_the_assistants_error_and_survives_a_reload() -> None:
    from playwright.async_api import async_playwright

    async with LoopbackServer() as provider:
        provider.enqueue(Reply.json(INVALID_KEY, status=401))
        model = OpenAIChatModel("gpt-4o-mini", base_url=provider.url + "/v1", api_key="sk-bad")
        agent = Think(model, store=":memory:", load_entrypoints=False)
        async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
            page = await chromium.open(f"{base}/?session=badkey")
            await say(page, "hello?")
            error = page.locator('.msg[data-role="assistant"] .error')
            await error.wait_for(timeout=15_000)
            shown = await error.inner_text()
            assert "401" in shown and "Incorrect API key provided" in shown, shown
            await page.screenshot(path=str(ARTIFACTS / "web-chat-401.png"))

            await page.reload()
            await page.wait_for_selector("#status.connected", timeout=10_000)
            await page.wait_for_selector('.msg[data-role="user"]', timeout=10_000)
            error = page.locator('.msg[data-role="assistant"] .error')
            await error.wait_for(timeout=10_000)
            assert "Incorrect API key provided" in await error.inner_text()
            # It answers the message that failed, right below it.
            roles = await page.eval_on_selector_all("#messages .msg", "els => els.map(e => e.dataset.role)")
            assert roles == ["user", "assistant"]
            assert chromium.errors == []
        await agent.aclose()
    assert len(provider.requests) == 1  # a 401 is not retried


MARKDOWN = """Here is **bold** and `code`:

- one
- two

| city | °C |
|---|---|
| Oslo | -3 |

```python
print("hi")
```

See [the docs](https://example.com/docs)."""


async def test_assistant_markdown_is_rendered() -> None:
    from playwright.async_api import async_playwright

    agent = page_agent(Step(text=MARKDOWN))
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=md")
        await say(page, "show me **markdown**")
        await wait_for_text(page, "See the docs")
        reply = page.locator('.msg[data-role="assistant"] .text')
        assert await reply.locator("strong").inner_text() == "bold"
        assert await reply.locator("code").first.inner_text() == "code"
        assert await reply.locator("li").all_inner_texts() == ["one", "two"]
        assert await reply.locator("table td").all_inner_texts() == ["Oslo", "-3"]
        assert 'print("hi")' in await reply.locator("pre code").inner_text()
        link = reply.locator("a")
        assert await link.get_attribute("href") == "https://example.com/docs"
        assert await link.get_attribute("rel") == "noopener noreferrer"
        # The user's own text is shown as typed, not interpreted.
        user = page.locator('.msg[data-role="user"] .text')
        assert await user.inner_text() == "show me **markdown**" and await user.locator("strong").count() == 0
        assert chromium.errors == [] and await page.evaluate("window.__csp") == []


HOSTILE = (
    'Look: <img src=x onerror="window.__xss = 1"> and <script>window.__xss = 2</script> '
    '<a href="javascript:window.__xss = 3" id="js-link">click</a> [md link](javascript:window.__xss=4) '
    '<svg onload="window.__xss = 5"></svg><iframe src="javascript:parent.__xss = 6"></iframe> '
    '<div onmouseover="window.__xss = 7" id="hover">hover me</div> **still rendered**'
)


async def test_model_output_never_runs_script() -> None:
    from playwright.async_api import async_playwright

    agent = page_agent(Step(text=HOSTILE))
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=xss")
        await say(page, "say something nasty")
        await wait_for_text(page, "still rendered")
        await page.wait_for_timeout(300)  # time for an error handler or a frame to fire, if any existed
        reply = page.locator('.msg[data-role="assistant"] .text')
        assert await reply.locator("strong").inner_text() == "still rendered"
        for selector in ("img", "script", "svg", "iframe", "[onerror]", "[onload]", "[onmouseover]", 'a[href^="javascript"]'):
            assert await reply.locator(selector).count() == 0, selector
        hover = reply.locator("#hover")
        if await hover.count():
            await hover.hover()
        links = reply.locator("a")
        for i in range(await links.count()):
            await links.nth(i).click()
        await page.wait_for_timeout(200)
        assert await page.evaluate("typeof window.__xss") == "undefined"
        assert chromium.errors == []


class NamedGuard:
    name = "delete_guard"

    @hookimpl
    def before_tool_call(self, ctx: Any) -> Any:
        return block("deleting is not allowed here") if ctx.tool_name == "delete_file" else None


@tool(read_only=True)
def get_weather(city: str) -> dict:
    """The weather in a city."""
    return {"city": city, "celsius": 21}


async def test_decisions_name_their_plugin_and_the_timeline_survives_a_reload() -> None:
    from playwright.async_api import async_playwright

    agent = page_agent(
        Step(tool_calls=[call("get_weather", {"city": "Oslo"}, id="c_weather"), call("delete_file", {"path": "/x"}, id="c_delete")]),
        Step(text="Done."),
        tools=[get_weather, delete_file],
        plugins=[NamedGuard()],
    )
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=decide")
        await say(page, "weather, then delete")
        await wait_for_text(page, "Done.")
        await page.wait_for_selector(".turn .status-completed", timeout=10_000)

        async def check() -> None:
            deleter = page.locator('.tool[data-tool="delete_file"]')
            assert await deleter.locator(".decision").inner_text() == "blocked"
            assert await deleter.locator(".plugin").inner_text() == "delete_guard"
            weather = page.locator('.tool[data-tool="get_weather"]')
            assert await weather.locator(".decision").inner_text() == "allowed"
            assert await weather.locator(".plugin").count() == 0  # nobody decided: allowed by default
            events = await page.eval_on_selector_all(".timeline-event", "els => els.map(e => e.dataset.hook)")
            assert events[0] == "before_turn" and events[-1] == "on_chat_response"
            assert events.count("after_tool_call") == 2
            detail = await page.locator('.timeline-event[data-hook="after_tool_call"]').all_inner_texts()
            assert any(re.search(r"blocked by delete_guard", d) for d in detail), detail

        await check()
        await page.reload()
        await page.wait_for_selector("#status.connected", timeout=10_000)
        await wait_for_text(page, "Done.")
        await check()
        # Clearing the conversation (once confirmed) clears the timeline too, also after another reload.
        page.once("dialog", lambda dialog: dialog.accept())
        await page.click("#clear")
        await page.wait_for_selector("#timeline .empty", timeout=10_000)
        await page.reload()
        await page.wait_for_selector("#status.connected", timeout=10_000)
        assert await page.locator(".timeline-event").count() == 0
        assert chromium.errors == [] and await page.evaluate("window.__csp") == []


def test_the_vendored_libraries_are_the_recorded_builds() -> None:
    table = (STATIC / "VENDORED.md").read_text(encoding="utf-8")
    for name in ("marked.umd.js", "purify.min.js"):
        digest = hashlib.sha256((STATIC / name).read_bytes()).hexdigest()
        assert re.search(rf"`{re.escape(name)}`.*`{digest}`", table), f"{name}: sha256 {digest} is not in VENDORED.md"
    assert "marked v18.3.0" in (STATIC / "marked.umd.js").read_text(encoding="utf-8")[:200]
    assert "DOMPurify 3.5.0" in (STATIC / "purify.min.js").read_text(encoding="utf-8")[:200]


# -- the page never misstates or loses anything (issue 32) ---------------------------------------


async def test_decisions_come_from_the_stored_answer_in_every_browser() -> None:
    from playwright.async_api import async_playwright

    # Both turns number their calls alike (as two demo servers on one database did): the first
    # turn's c1 is blocked, the second turn's c1 runs.
    agent = page_agent(
        Step(tool_calls=[call("get_weather", {"city": "Oslo"}, id="c0"), call("delete_file", {"path": "/x"}, id="c1")]),
        Step(text="First done."),
        Step(tool_calls=[call("get_weather", {"city": "Rome"}, id="c1")]),
        Step(text="Second done."),
        tools=[get_weather, delete_file],
        plugins=[NamedGuard()],
    )
    async with (
        running_server(create_app(agent)) as base,
        async_playwright() as pw,
        Browser(pw) as chromium,
        Browser(pw) as elsewhere,  # another browser: nothing local, only what the server stored
    ):
        first = await chromium.open(f"{base}/?session=record")
        await say(first, "weather, then delete")
        await wait_for_text(first, "First done.")
        await say(first, "weather in Rome")
        await wait_for_text(first, "Second done.")
        await first.wait_for_function("() => document.querySelectorAll('.turn .status-completed').length === 2")
        # The hook timeline: before_tool_call carries the decision taken in it, and by whom.
        before = await first.locator('.timeline-event[data-hook="before_tool_call"]').all_inner_texts()
        assert any("delete_file" in line and "blocked by delete_guard" in line for line in before), before

        other = await elsewhere.open(f"{base}/?session=record")
        await wait_for_text(other, "Second done.")
        assert await other.locator(".timeline-event").count() == 0  # no timeline of its own there
        for page in (first, other):
            deleter = page.locator('.tool[data-tool="delete_file"]')
            assert await deleter.locator(".decision").inner_text() == "blocked"
            assert await deleter.locator(".plugin").inner_text() == "delete_guard"
            weather = page.locator('.tool[data-tool="get_weather"]')
            assert await weather.locator(".decision").all_inner_texts() == ["allowed", "allowed"]
            assert await weather.nth(1).get_attribute("data-call") == "c1"  # the id the blocked call had
            # States in words; the AI SDK name stays as data for scripts and styles.
            assert await weather.first.locator(".state").inner_text() == "done"
            assert await weather.first.get_attribute("data-state") == "output-available"
        assert chromium.errors == elsewhere.errors == []
    stored = await agent.session("record").messages()
    # Beside the tokens each model used (issue 28's budget reads them), the decisions.
    assert set(stored[1].metadata) == {"decisions", "usage"}
    assert stored[1].metadata["decisions"] == {"c1": {"decision": "block", "by": "delete_guard"}}
    assert "decisions" not in (stored[3].metadata or {})  # no decision taken in that answer
    assert set(stored[3].metadata or {}) == {"usage"}


async def test_stopped_survives_a_reload_and_clear_asks_first_and_can_be_undone() -> None:
    from playwright.async_api import async_playwright

    agent = Think(ScriptedModel([Step(text="This reply streams slowly so that it can be stopped. " * 20)], delay=0.05),
                  store=":memory:", load_entrypoints=False)
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=stop")
        await say(page, "talk")
        await wait_for_text(page, "streams slowly")
        await page.click("#stop")
        await page.wait_for_selector(".msg .aborted", timeout=15_000)
        await page.wait_for_function("() => document.getElementById('stop').disabled")
        await page.reload()
        await page.wait_for_selector("#status.connected", timeout=10_000)
        await wait_for_text(page, "streams slowly")
        assert await page.locator(".msg .aborted").inner_text() == "stopped"

        # Clear asks first; dismissed, nothing is deleted.
        asked: list[str] = []

        async def dismiss(dialog: Any) -> None:
            asked.append(dialog.message)
            await dialog.dismiss()

        page.once("dialog", dismiss)
        await page.click("#clear")  # returns once the dialog is answered
        assert asked and "undo it for 8 seconds" in asked[0]
        assert len(await agent.session("stop").messages()) == 2
        assert await page.locator('.msg[data-role="user"]').count() == 1

        # Confirmed, the conversation leaves the screen, and Undo brings it back: nothing was deleted.
        page.once("dialog", lambda dialog: dialog.accept())
        await page.click("#clear")
        await page.wait_for_selector("#messages .empty", timeout=10_000)
        await page.click("#undo-button")
        await page.wait_for_selector('.msg[data-role="user"]', timeout=10_000)
        await asyncio.sleep(10)  # past the undo window: an undone clear is never sent
        assert len(await agent.session("stop").messages()) == 2

        # Not undone, it is sent once the window has passed.
        page.once("dialog", lambda dialog: dialog.accept())
        await page.click("#clear")
        for _ in range(600):
            if not await agent.session("stop").messages():
                break
            await asyncio.sleep(0.1)
        assert await agent.session("stop").messages() == []
        await page.wait_for_selector("#messages .empty", timeout=10_000)
        assert chromium.errors == []


async def test_a_message_typed_while_disconnected_stays_in_the_box() -> None:
    from playwright.async_api import async_playwright

    agent = page_agent(Step(text="Hello."))
    async with async_playwright() as pw, Browser(pw) as chromium:
        async with running_server(create_app(agent)) as base:
            page = await chromium.open(f"{base}/?session=offline")
        await page.wait_for_selector("#status.closed", timeout=15_000)  # the server is gone
        await say(page, "are you there?")
        await page.wait_for_function("() => document.getElementById('toast').style.display === 'block'")
        assert await page.input_value("#input") == "are you there?"
        assert "kept in the box" in await page.locator("#toast").inner_text()
        assert await page.locator('.msg[data-role="user"]').count() == 0  # not shown as sent
        assert chromium.errors == []
    assert await agent.session("offline").messages() == []


async def test_a_sub_agents_progress_shows_in_the_parents_tool_card() -> None:
    """``agent.as_tool``: while the sub-agent works, the parent's tool card is open and shows
    its text and its tool calls (not raw JSON); at the end, its answer."""
    from playwright.async_api import async_playwright

    may_finish = asyncio.Event()

    @tool
    async def fetch_report(name: str) -> str:
        """Fetch a report (once the page has shown that it is running)."""
        await asyncio.wait_for(may_finish.wait(), 30)
        return f"report {name}"

    helper = page_agent(
        Step(text="Fetching the report.", tool_calls=[call("fetch_report", {"name": "q3"}, id="f1")]),
        Step(text="The **Q3** report is ready."),
    )
    helper.tools["fetch_report"] = fetch_report
    agent = page_agent(
        Step(tool_calls=[call("researcher", {"task": "get the Q3 report"}, id="r1")]), Step(text="Here it is."),
        tools=[helper.as_tool("researcher", "Finds reports.")],
    )
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=sub")
        await say(page, "the Q3 report please")
        card = page.locator('details.tool[data-tool="researcher"]')
        await page.wait_for_function(
            "() => { const c = document.querySelector('details.tool[data-tool=\"researcher\"]');"
            " return c && c.open && c.innerText.includes('fetch_report · running'); }", timeout=15_000,
        )
        assert "Fetching the report." in await card.inner_text()
        assert await card.locator(".badge.state").inner_text() == "working"
        may_finish.set()
        await wait_for_text(page, "Here it is.")
        if not await card.evaluate("c => c.open"):  # closed once the sub-agent is done
            await card.locator("summary").click()
        text = await card.inner_text()
        assert "sub-agent sub:researcher:r1 · completed" in text.lower() and "fetch_report · done" in text
        assert await card.locator(".subagent strong").inner_text() == "Q3"  # its answer, as Markdown
        assert '"session_id"' not in text  # not the raw JSON
        await page.screenshot(path=str(ARTIFACTS / "sub-agent-card.png"))
        assert chromium.errors == [] and await page.evaluate("window.__csp") == []


class AskOverTen:
    name = "wire_policy"

    @hookimpl
    def before_tool_call(self, ctx: Any) -> Any:
        return ask(f"wires over 10 need a human ({ctx.input['amount']})") if ctx.tool_name == "wire" and ctx.input["amount"] > 10 else None


@tool
def wire(to: str, amount: int) -> str:
    """Wire money."""
    return f"wired {amount} to {to}"


async def test_a_plugins_ask_shows_its_reason_and_who_asked_and_a_redacted_answer_who_shaped_it() -> None:
    from playwright.async_api import async_playwright

    from think_plugins.redact import Redact

    agent = page_agent(
        Step(tool_calls=[call("wire", {"to": "bob", "amount": 50}, id="c_wire")]),
        Step(text="Sent. Call 555-0123 if it fails."),
        tools=[wire],
        plugins=[AskOverTen(), Redact({"patterns": [r"\d{3}-\d{4}"]})],
    )
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=asked")
        await say(page, "wire bob 50")
        card = page.locator('.tool[data-tool="wire"]')
        await card.locator('[data-approve="yes"]').wait_for(timeout=15_000)
        assert await card.locator(".reason").inner_text() == "wires over 10 need a human (50)"
        await page.reload()  # the request, its reason and who asked survive a reload
        await page.wait_for_selector("#status.connected", timeout=10_000)
        await card.locator('[data-approve="yes"]').wait_for(timeout=15_000)
        assert await card.locator(".reason").inner_text() == "wires over 10 need a human (50)"
        assert await card.locator(".decision").inner_text() == "asked"
        assert await card.locator(".plugin").inner_text() == "wire_policy"
        await card.locator('[data-approve="yes"]').click()
        await wait_for_text(page, "Sent. Call [redacted] if it fails.")
        await page.reload()
        await page.wait_for_selector("#status.connected", timeout=10_000)
        await wait_for_text(page, "Sent. Call [redacted] if it fails.")
        assert await page.locator('.msg[data-role="assistant"] .shaped').last.inner_text() == "shaped by redact"
        assert "555-0123" not in await page.locator("#messages").inner_text()
        assert chromium.errors == [] and await page.evaluate("window.__csp") == []
