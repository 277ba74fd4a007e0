"""Who a process is, and whether a process recorded earlier is gone.

A running durable submission records its owner's host, pid and process start time. Another
process on the same host can then tell at once that the owner died — the pid no longer exists,
or belongs to a process started at another time (the pid was reused) — and recover the
submission without waiting for its lease to expire. Only a certain death counts: an owner on
another host, in another PID namespace (a container) or whose start time cannot be read is
treated as alive until its lease expires.

Linux reads ``/proc`` (start time in clock ticks since boot, the boot id and the PID namespace);
elsewhere on POSIX only a missing pid is certain; on Windows nothing is.
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass

__all__ = ["ProcessIdentity", "process_is_gone", "this_process"]


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as other processes can recognise it.

    :param host: the host name.
    :param pid: the process id.
    :param started: when the process started (Unix seconds), ``None`` when unknown.
    :param namespace: the kernel boot and PID namespace the pid belongs to (pids are comparable
        only within one), ``None`` when unknown.
    """

    host: str
    pid: int
    started: float | None
    namespace: str | None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except (OSError, ValueError):
        return None


@functools.cache
def _boot_time() -> float | None:
    stat = _read("/proc/stat")
    for line in (stat or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def _start_time(pid: int) -> float | None:
    """The start time of ``pid`` (Unix seconds), ``None`` when it is gone (a zombie, killed and
    not yet reaped by its parent, is gone) or unknown."""
    stat = _read(f"/proc/{pid}/stat")
    boot = _boot_time()
    if stat is None or boot is None:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    fields = stat.rpartition(")")[2].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    try:
        ticks = int(fields[19])  # field 22, starttime, in clock ticks after boot
    except (IndexError, ValueError):
        return None
    return round(boot + ticks / os.sysconf("SC_CLK_TCK"), 2)


@functools.cache
def _namespace() -> str | None:
    boot_id = _read("/proc/sys/kernel/random/boot_id")
    try:
        pid_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot_id.strip()}/{pid_ns}" if boot_id else None


def this_process(host: str | None = None) -> ProcessIdentity:
    """The current process's identity (``host`` overrides the host name)."""
    pid = os.getpid()
    return ProcessIdentity(host or socket.gethostname(), pid, _start_time(pid), _namespace())


def process_is_gone(owner: ProcessIdentity, here: ProcessIdentity | None = None) -> bool:
    """Whether ``owner`` certainly no longer runs. ``False`` when it runs, and whenever that
    cannot be told from here (another host, another PID namespace, no start time to compare)."""
    here = here or this_process()
    if owner.host != here.host or owner.namespace != here.namespace:
        return False
    if owner.pid == here.pid:
        return owner.started is not None and here.started is not None and owner.started != here.started
    if here.namespace is not None:  # /proc is readable: compare start times (a reused pid differs)
        current = _start_time(owner.pid)
        return current is None or (owner.started is not None and current != owner.started)
    if os.name != "posix":
        return False
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by another user
        return False
    return False
