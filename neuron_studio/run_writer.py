"""Is a run's writing process still alive? Decides when a `running` run is reported `interrupted`.

Each run records its writer (pid, the process's start time, host name, boot id). The writer is gone only
when that is provable from this host: the host rebooted since, or the pid is dead or reused by another
process. A writer on another host, or one recorded without an identity, cannot be judged: still running.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["boot_id", "process_start", "writer_identity", "writer_gone"]


def boot_id() -> str:
    """This boot's id (Linux); '' where unknown, in which case a reboot cannot be detected."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), telling a reused pid apart; None if
    the process does not exist or it cannot be read; '' where /proc is unavailable."""
    if not Path("/proc/self/stat").exists():
        return ""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    if fields and fields[0] in ("Z", "X"):  # a zombie has finished running
        return None
    return fields[19] if len(fields) > 19 else ""


def writer_identity() -> tuple[int, str, str, str]:
    """This process as a run's writer: (pid, start time, host name, boot id), stored with each run."""
    pid = os.getpid()
    return pid, process_start(pid) or "", socket.gethostname(), boot_id()


def writer_gone(pid: int | None, start: str | None, host: str | None, boot: str | None) -> bool:
    """True only when the writing process has provably stopped: on this host, either the host rebooted
    since, or the pid is dead or now belongs to another process. Unknown or remote writers: False."""
    if pid is None or not host or host != socket.gethostname():
        return False
    my_boot = boot_id()
    if boot and my_boot and boot != my_boot:
        return True
    if int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, owned by someone else
        pass
    except OSError:
        return False
    now = process_start(int(pid))
    return now is None or bool(start and now and now != start)
