"""The built-in chat page in headless Chromium (python playwright, the system's ``chromium``).

The page must stream the reply (its text grows while the turn runs), show each tool call with
its hook decision (allowed / blocked), and the turn's hook timeline — all under its strict
Content-Security-Policy, with no violation reported. A screenshot is saved to
``test-artifacts/web-chat.png`` for a human to look at.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.browser import ARTIFACTS, CHROMIUM, LAUNCH_ARGS, WATCH_CSP
from tests.support.tools import delete_file, get_weather_in_celsius, send_email
from think_core import block, hookimpl
from think_core.agent import Think
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.server import create_app
from think_core.server.testing import running_server

pytestmark = pytest.mark.browser

FINAL_TEXT = "It is sunny in Paris, 21 °C. I did not delete anything: that tool is blocked here."


class DeleteGuard:
    @hookimpl
    def before_tool_call(self, ctx: Any) -> Any:
        return block("delete_file is blocked on this server") if ctx.tool_name == "delete_file" else None


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium executable (install the Debian 'chromium' package)")
async def test_page_streams_a_reply_with_tool_decisions_and_a_hook_timeline() -> None:
    from playwright.async_api import async_playwright

    model = ScriptedModel(
        [
            Step(
                text="Let me check the weather for you.",
                tool_calls=[call("get_weather", {"city": "Paris"}, id="call_weather"), call("delete_file", {"path": "/tmp/notes.txt"}, id="call_delete")],
            ),
            Step(text=FINAL_TEXT),
        ],
        delay=0.04,
    )
    agent = Think(model, tools=[get_weather_in_celsius, delete_file], plugins=[DeleteGuard()], store=":memory:", load_entrypoints=False)
    ARTIFACTS.mkdir(exist_ok=True)

    async with running_server(create_app(agent)) as base, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            errors: list[str] = []
            console: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda msg: console.append(msg.text))
            await page.add_init_script(WATCH_CSP)
            response = await page.goto(f"{base}/?session=web1")
            assert response is not None
            csp = (await response.all_headers())["content-security-policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
            await page.wait_for_selector("#status.connected", timeout=10_000)
            # Record every length the reply's text takes, to prove it arrives in pieces.
            await page.evaluate(
                """() => {
                    window.__lengths = [];
                    new MutationObserver(() => {
                        const texts = [...document.querySelectorAll('.msg[data-role="assistant"] .text')];
                        window.__lengths.push(texts.map((t) => t.textContent).join('').length);
                    }).observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true});
                }"""
            )
            await page.fill("#input", "What's the weather in Paris? Also delete my notes.")
            await page.click("#send")

            await page.wait_for_selector('.msg[data-role="user"]', timeout=5_000)
            await page.wait_for_function(
                "text => document.querySelector('#messages').innerText.includes(text)", arg=FINAL_TEXT, timeout=15_000
            )
            await page.wait_for_selector('.turn .status-completed', timeout=10_000)
            await page.wait_for_timeout(150)  # let the last frame render before the screenshot

            weather = page.locator('.tool[data-tool="get_weather"]')
            deleter = page.locator('.tool[data-tool="delete_file"]')
            assert await weather.get_attribute("data-state") == "output-available"
            assert (await weather.locator(".decision").inner_text()) == "allowed"
            # Settled tool cards are collapsed to their head; a click opens one (and it stays open).
            assert not await weather.locator(".output").is_visible()
            await weather.locator("summary").click()
            await deleter.locator("summary").click()
            await page.wait_for_timeout(100)  # a re-render must keep them open
            assert await weather.locator(".output").is_visible() and await deleter.locator(".output").is_visible()
            assert '"sky": "sunny"' in await weather.locator(".output").inner_text()
            assert (await deleter.locator(".decision").inner_text()) == "blocked"
            assert "delete_file is blocked on this server" in await deleter.locator(".output").inner_text()

            hooks = await page.eval_on_selector_all(".timeline-event", "els => els.map(e => e.dataset.hook)")
            assert hooks[0] == "before_turn" and hooks[-1] == "on_chat_response"
            assert hooks.count("before_tool_call") == 2 and hooks.count("after_tool_call") == 2
            assert hooks.count("before_step") == 2

            lengths = await page.evaluate("window.__lengths")
            total = len("Let me check the weather for you.") + len(FINAL_TEXT)
            partial = sorted({n for n in lengths if 0 < n < total})
            assert len(partial) >= 5, f"the reply did not stream: lengths seen {sorted(set(lengths))}"
            assert errors == []
            assert await page.evaluate("window.__csp") == []
            assert not [line for line in console if "Content Security Policy" in line], console
            await page.screenshot(path=str(ARTIFACTS / "web-chat.png"), full_page=True)
        finally:
            await browser.close()
    assert (ARTIFACTS / "web-chat.png").stat().st_size > 10_000
    stored = await agent.session("web1").messages()
    assert [m.role for m in stored] == ["user", "assistant"]


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium executable (install the Debian 'chromium' package)")
async def test_page_runs_its_client_tool_and_asks_for_approvals() -> None:
    from playwright.async_api import async_playwright

    model = ScriptedModel(
        [
            Step(text="Checking your clock.", tool_calls=[call("get_browser_time", {}, id="call_time")]),
            Step(text="Got your time. Now the email.", tool_calls=[call("send_email", {"to": "ada@example.com"}, id="call_mail")]),
            Step(text="All done."),
        ]
    )
    agent = Think(model, tools=[send_email], store=":memory:", load_entrypoints=False)
    async with running_server(create_app(agent)) as base, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            await page.add_init_script(WATCH_CSP)
            await page.goto(f"{base}/?session=web2")
            await page.wait_for_selector("#status.connected", timeout=10_000)
            await page.fill("#input", "What time is it here? Then email Ada.")
            await page.press("#input", "Enter")
            # The browser answers its own tool; the continuation then asks for an approval.
            approve = page.locator('.tool[data-tool="send_email"] button[data-approve="yes"]')
            await approve.wait_for(timeout=15_000)
            await approve.click()
            await page.wait_for_function(
                "() => document.querySelector('#messages').innerText.includes('All done.')", timeout=15_000
            )
            mail = page.locator('.tool[data-tool="send_email"]')
            await page.wait_for_function(
                """() => document.querySelector('.tool[data-tool="send_email"]').dataset.state === 'output-available'""",
                timeout=5_000,
            )
            assert "sent to ada@example.com" in await mail.locator(".output").inner_text()
            assert await page.evaluate("window.__csp") == []
        finally:
            await browser.close()
    # The model received the browser's answer: an ISO timestamp and a time zone.
    [time_result] = [m for m in model.requests[1].messages if m.role == "tool"]
    assert time_result.tool_call_id == "call_time"
    assert set(time_result.output) == {"iso", "timeZone"} and time_result.output["iso"].endswith("Z")
    stored = await agent.session("web2").messages()
    # Each continuation extended the answer it continued: one assistant message holds it all.
    assert [m.role for m in stored] == ["user", "assistant"]
    parts = stored[1].parts
    assert [p["type"] for p in parts if p["type"] != "step-start"] == [
        "text", "tool-get_browser_time", "text", "tool-send_email", "text",
    ]
    assert parts[-1] == {"type": "text", "text": "All done."}


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium executable (install the Debian 'chromium' package)")
async def test_page_with_a_token_connects_through_the_websocket_subprotocol() -> None:
    from playwright.async_api import async_playwright

    agent = Think(ScriptedModel([Step(text="Token accepted.")]), store=":memory:", load_entrypoints=False)
    sockets: list[str] = []
    async with running_server(create_app(agent, api_token="tok-123_abc")) as base, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
        try:
            page = await browser.new_page()
            page.on("websocket", lambda ws: sockets.append(ws.url))
            await page.add_init_script(WATCH_CSP)
            await page.goto(f"{base}/?session=web3&token=tok-123_abc")
            await page.wait_for_selector("#status.connected", timeout=10_000)
            await page.fill("#input", "hello")
            await page.press("#input", "Enter")
            await page.wait_for_function(
                "() => document.querySelector('#messages').innerText.includes('Token accepted.')", timeout=15_000
            )
            assert await page.evaluate("window.__csp") == []
        finally:
            await browser.close()
    # The token travelled in Sec-WebSocket-Protocol, not in the URL an access log would record.
    assert sockets and all("tok-123_abc" not in url for url in sockets)
    assert [m.role for m in await agent.session("web3").messages()] == ["user", "assistant"]
