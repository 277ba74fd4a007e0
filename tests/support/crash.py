"""The crash worker (``bench/crash_worker.py``) as the crash tests run it: a real process doing
durable ``submit_messages`` on a SQLite file that kills itself with SIGKILL at a marked point
(``run_worker``), what its tools did (``tool_log``) and the answers it stored (``answers``)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "bench" / "crash_worker.py"
LEASE = "2"  # seconds: the second worker waits for the dead one's lease to expire

_spec = importlib.util.spec_from_file_location("crash_worker", WORKER)
assert _spec is not None and _spec.loader is not None
crash_worker: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash_worker)


def run_worker(db: Path, messages: int, **crash: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THINK_CRASH_")}
    env.update({f"THINK_CRASH_{k.upper()}": v for k, v in crash.items()})
    done = subprocess.run(
        [sys.executable, str(WORKER), str(db), "s", str(messages), "--lease", LEASE],
        env=env, capture_output=True, text=True, timeout=300,
    )
    if crash:
        assert done.returncode == -signal.SIGKILL, done.stderr
    else:
        assert done.returncode == 0, done.stderr
    return done.returncode


def tool_log(db: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(f"{db}.tools").read_text().splitlines()]


def answers(db: Path) -> list[Any]:
    with crash_worker.SQLiteStore(str(db)) as store:
        return [m for m in store.list_messages("s") if m.role == "assistant"]
