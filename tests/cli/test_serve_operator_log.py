"""``think serve`` shows an operator the takeover of a dead server's chats without ``-v``."""

from __future__ import annotations

import logging

import pytest

from think_core.cli import serve


def test_serve_shows_submission_takeovers_without_verbose(capfd: pytest.CaptureFixture[str]) -> None:
    submissions = logging.getLogger("think.submissions")
    saved = (list(submissions.handlers), submissions.level, submissions.propagate)
    try:
        serve._operator_log()
        submissions.info("took over submission s1 of session c from vm pid 7: its process is gone")
        logging.getLogger("think.runner").info("a turn detail an operator does not need")
        err = capfd.readouterr().err
    finally:
        submissions.handlers[:], submissions.level, submissions.propagate = saved[0], saved[1], saved[2]
    assert "think: INFO think.submissions: took over submission s1" in err
    assert "turn detail" not in err
