"""Headless Chromium for the page tests (python playwright, the system's ``chromium``): where it
is, how it is launched, where screenshots go, and the init script that records the page's
Content-Security-Policy violations; :class:`Browser` and the helpers that drive the chat page."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: Records every CSP violation the page reports (an init script runs outside the page's CSP).
WATCH_CSP = "window.__csp = []; document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"


class Browser:
    """One Chromium for a test; pages record errors and CSP violations."""

    def __init__(self, pw: Any) -> None:
        self.pw = pw
        self.errors: list[str] = []

    async def __aenter__(self) -> Browser:
        self.browser = await self.pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
        self.context = await self.browser.new_context()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.browser.close()

    async def open(self, url: str, viewport: dict[str, int] | None = None) -> Any:
        page = await self.context.new_page()
        await page.set_viewport_size(viewport or {"width": 1280, "height": 800})
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        await page.add_init_script(WATCH_CSP)
        await page.goto(url)
        await page.wait_for_selector("#status.connected", timeout=10_000)
        return page


async def say(page: Any, text: str) -> None:
    await page.fill("#input", text)
    await page.press("#input", "Enter")


async def wait_for_text(page: Any, text: str, timeout: float = 15_000) -> None:
    await page.wait_for_function("t => document.querySelector('#messages').innerText.includes(t)", arg=text, timeout=timeout)
