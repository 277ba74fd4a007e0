"""The documentation's code: the README and the pages of the site in ``docs/``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The README and every page of the documentation site.
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_PYTHON = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_snippets(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order."""
    return _PYTHON.findall(path.read_text(encoding="utf-8"))


def snippet(marker: str) -> str:
    """The one Python snippet of the README or the docs that contains ``marker``."""
    [found] = [block for path in DOCUMENTS for block in python_snippets(path) if marker in block]
    return found
