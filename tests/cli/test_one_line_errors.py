"""The second hour at the terminal: every mistake a user can make is one line (exit 2), never a
traceback — database URLs, a missing extra, Ctrl-C while a reply streams — ``--tools`` loads a
module from the current folder, ``think chat`` names the endpoint that failed, and ``think
history`` shows failed and stopped turns. Each runs the real command."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pexpect
import pytest

from tests.support.cli import think
from tests.support.net import closed_port
from tests.support.postgres import postgres_url


def only_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_an_unreachable_postgresql_server_is_one_line_without_the_password(tmp_path: Path, home: Path) -> None:
    url = f"postgresql://think:s3cret@127.0.0.1:{closed_port()}/think"
    done = think(tmp_path, home, "run", "hi", "--model", "demo", "--no-plugins", "--db", url)
    assert done.returncode == 2
    line = only_line(done.stderr)
    assert line.startswith(f"think: cannot open the database postgresql://think:***@127.0.0.1:{url.split(':')[3]}")
    assert "Connection refused" in line and "s3cret" not in done.stderr


def test_a_database_that_does_not_exist_is_one_line(tmp_path: Path, home: Path) -> None:
    parts = urlsplit(postgres_url())
    url = parts._replace(path="/think_no_such_database").geturl()
    done = think(tmp_path, home, "run", "hi", "--model", "demo", "--no-plugins", "--db", url)
    assert done.returncode == 2
    line = only_line(done.stderr)
    assert line.startswith("think: cannot open the database postgresql://"), line
    assert 'database "think_no_such_database" does not exist' in line
    if parts.password:
        assert parts.password not in done.stderr


def test_http_httptools_without_httptools_names_the_extra(tmp_path: Path, home: Path) -> None:
    # httptools shadowed by a module that cannot be imported, as without the fast extra.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "httptools.py").write_text("raise ImportError(\"No module named 'httptools'\", name='httptools')\n")
    done = think(tmp_path, home, "serve", "--model", "demo", "--no-plugins", "--db", str(tmp_path / "db.sqlite"),
                 "--port", "0", "--http", "httptools", PYTHONPATH=str(shadow))
    assert done.returncode == 2
    assert only_line(done.stderr) == "think serve: --http httptools needs httptools; pip install 'think-agent[fast]'"


def test_a_postgresql_url_without_the_extra_names_the_extra(tmp_path: Path, home: Path) -> None:
    # psycopg shadowed by a module that cannot be imported, as without the postgres extra.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "psycopg.py").write_text("raise ImportError(\"No module named 'psycopg'\", name='psycopg')\n")
    done = think(tmp_path, home, "run", "hi", "--model", "demo", "--no-plugins", "--db",
                 "postgresql://localhost/think", PYTHONPATH=str(shadow))
    assert done.returncode == 2
    line = only_line(done.stderr)
    assert line.startswith("think: --db postgresql://localhost/think:"), line
    assert "pip install 'think-agent[postgres]'" in line


def test_ctrl_c_while_think_run_streams_is_one_line_and_keeps_the_stopped_reply(tmp_path: Path, home: Path) -> None:
    db = str(tmp_path / "run.db")
    child = pexpect.spawn(
        sys.executable, ["-m", "think_core.cli", "run", "hello", "--model", "demo", "--no-plugins", "--db", db],
        encoding="utf-8", timeout=60, cwd=str(tmp_path),
    )
    child.expect_exact("offline demo model")  # the introduction streams word by word
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    rest = child.before or ""
    assert child.exitstatus == 130, (child.exitstatus, child.signalstatus, rest)
    assert "think: interrupted" in rest
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest

    history = think(tmp_path, home, "history", "cli", "--db", db)
    assert history.returncode == 0, history.stderr
    assert "assistant: I am the offline demo model" in history.stdout
    assert "(stopped)" in history.stdout


def test_tools_load_from_a_module_in_the_current_folder(tmp_path: Path, home: Path) -> None:
    (tmp_path / "mytools.py").write_text(
        "from think_core import tool\n\n"
        "@tool\n"
        "def shout(text: str) -> str:\n"
        '    """Say it louder."""\n'
        "    return text.upper()\n"
    )
    done = think(tmp_path, home, "run", "hi", "--model", "demo", "--no-plugins", "--tools", "mytools:shout",
                 "--db", str(tmp_path / "t.db"))
    assert done.returncode == 0, done.stderr
    missing = think(tmp_path, home, "run", "hi", "--model", "demo", "--no-plugins", "--tools", "nosuch:shout",
                    "--db", str(tmp_path / "t.db"))
    assert missing.returncode == 2
    assert only_line(missing.stderr) == "think: --tools 'nosuch:shout': No module named 'nosuch'"


def test_think_chat_names_the_endpoint_and_history_shows_the_failure(tmp_path: Path, home: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    db = str(tmp_path / "chat.db")
    done = think(tmp_path, home, "chat", "--model", f"openai-compatible:m@{url}", "--no-plugins", "--db", db,
                 stdin="hi\n/history\n")
    assert done.returncode == 0, done.stderr
    assert f"(model endpoint {url}/chat/completions)" in done.stdout
    shown = done.stdout.split("you> ")[2]  # what /history showed: the message and its error
    assert "user: hi" in shown and "error: " in shown, done.stdout
    assert "turn failed" not in done.stderr  # said once, by the chat itself

    history = think(tmp_path, home, "history", "cli", "--db", db)
    assert history.returncode == 0, history.stderr
    assert history.stdout.startswith("user: hi\nerror: ")


@pytest.mark.parametrize("command", [[], ["run"], ["chat"], ["serve"], ["analytics"], ["analytics", "report"]])
def test_help_shows_plain_words_not_docstring_markup(tmp_path: Path, home: Path, command: list[str]) -> None:
    done = think(tmp_path, home, *command, "--help")
    assert done.returncode == 0, done.stderr
    assert "``" not in done.stdout and not re.search(r":[a-z]+:`", done.stdout), done.stdout
