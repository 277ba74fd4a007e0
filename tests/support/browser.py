"""Headless Chromium for the page tests (python playwright, the system's ``chromium``): where it
is, how it is launched, where screenshots go, and the init script that records the page's
Content-Security-Policy violations."""

from __future__ import annotations

import shutil
from pathlib import Path

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
