"""Files on the built-in chat page, in headless Chromium: a user attaches them with the Attach
button, by pasting and by dropping; they go with the next message (the model's request has
them), show in the transcript (after a reload too), and a tool's image shows in its card. A file
the server refuses is a toast, and nothing is stored."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.support.browser import ARTIFACTS, CHROMIUM, Browser, say, wait_for_text
from tests.support.files import DOT_PNG, png_of_size
from think_core import AttachmentLimits, File, tool
from think_core.agent import Think
from think_core.models.base import UserMessage
from think_core.models.content import FilePart, TextPart
from think_core.models.scripted import ScriptedModel, Step, call
from think_core.server import create_app
from think_core.server.testing import running_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium executable (install the Debian 'chromium' package)"),
]

PDF = b"%PDF-1.4 one page"

#: Hands the page a file as a paste into the input box, or as a drop on the conversation.
GIVE_FILE = """async ({how, b64, name, type}) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const data = new DataTransfer();
  data.items.add(new File([bytes], name, { type }));
  if (how === "paste") {
    document.querySelector("#input").dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
  } else {
    const where = document.querySelector("#messages");
    where.dispatchEvent(new DragEvent("dragover", { dataTransfer: data, bubbles: true, cancelable: true }));
    where.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
  }
}"""


async def give(page: Any, how: str, data: bytes, name: str, media_type: str) -> None:
    await page.evaluate(GIVE_FILE, {"how": how, "b64": base64.b64encode(data).decode(), "name": name, "type": media_type})


def agent_of(model: ScriptedModel, **kwargs: Any) -> Think:
    return Think(model, store=":memory:", load_entrypoints=False, **kwargs)


async def test_files_attached_by_button_paste_and_drop_reach_the_model_and_stay_in_the_transcript() -> None:
    from playwright.async_api import async_playwright

    model = ScriptedModel([Step(text="Two dots and a page.")])
    agent = agent_of(model)
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=files")
        await page.set_input_files("#file-input", files=[{"name": "dot.png", "mimeType": "image/png", "buffer": DOT_PNG}])
        await give(page, "paste", DOT_PNG, "pasted.png", "image/png")
        await give(page, "drop", PDF, "page.pdf", "application/pdf")
        await page.wait_for_function("n => document.querySelectorAll('#attachments .pending-file').length === n", arg=3)
        await say(page, "what are these?")
        await wait_for_text(page, "Two dots and a page.")
        await page.screenshot(path=str(ARTIFACTS / "attachments.png"))
        user = page.locator('.msg[data-role="user"]')
        assert await user.locator("img.attachment").count() == 2
        assert await user.locator("img.attachment").first.evaluate("img => img.complete && img.naturalWidth") == 1
        assert "page.pdf" in await user.locator(".file-chip").inner_text()
        assert await page.locator("#attachments .pending-file").count() == 0  # sent: the tray is empty
        await page.reload()
        await page.wait_for_selector("#status.connected")
        await wait_for_text(page, "Two dots and a page.")
        after = page.locator('.msg[data-role="user"]')
        assert await after.locator("img.attachment").count() == 2 and await after.locator(".file-chip").count() == 1
        assert chromium.errors == [] and await page.evaluate("window.__csp") == []
    png = base64.b64encode(DOT_PNG).decode()
    sent = model.requests[0].messages[-1]
    assert isinstance(sent, UserMessage) and sent.content == [
        FilePart(media_type="image/png", data=png, filename="dot.png"),
        FilePart(media_type="image/png", data=png, filename="pasted.png"),
        FilePart(media_type="application/pdf", data=base64.b64encode(PDF).decode(), filename="page.pdf"),
        TextPart(text="what are these?"),
    ]


@tool
def snapshot() -> File:
    """Take a snapshot of the screen."""
    return File(DOT_PNG, "image/png", "screen.png")


async def test_an_image_a_tool_returns_shows_in_its_card() -> None:
    from playwright.async_api import async_playwright

    model = ScriptedModel([Step(tool_calls=[call("snapshot", {}, id="c_snap")]), Step(text="Here is the screen.")])
    agent = agent_of(model, tools=[snapshot])
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=tool-file")
        await say(page, "show me the screen")
        await wait_for_text(page, "Here is the screen.")
        card = page.locator('details.tool[data-call="c_snap"]')
        await card.locator("summary").click()
        image = card.locator(".files-output img.attachment")
        await image.wait_for(state="visible")
        assert await image.get_attribute("alt") == "screen.png"
        assert '"type": "file"' not in await card.inner_text()  # the image, not its JSON
        assert chromium.errors == [] and await page.evaluate("window.__csp") == []


async def test_a_file_the_server_refuses_is_a_toast_and_nothing_is_stored() -> None:
    from playwright.async_api import async_playwright

    model = ScriptedModel([Step(text="never")])
    agent = agent_of(model, attachments=AttachmentLimits(max_file_bytes=1000))
    async with running_server(create_app(agent)) as base, async_playwright() as pw, Browser(pw) as chromium:
        page = await chromium.open(f"{base}/?session=refused")
        await page.set_input_files("#file-input", files=[{"name": "big.png", "mimeType": "image/png", "buffer": png_of_size(5000)}])
        await say(page, "look")
        await page.wait_for_function("t => document.querySelector('#toast').innerText.includes(t)", arg="big.png")
        assert "1,000 bytes" in await page.locator("#toast").inner_text()
    assert model.requests == [] and await agent.session("refused").messages() == []
