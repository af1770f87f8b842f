"""Keep kineto's USDT marker lines (`USDT:... profiler_start` / `profiler_stop`) out of the user's output.

torch's kineto writes them to stderr at level USDT (5), above ERROR (4), whenever a profiler starts or
stops; `KINETO_LOG_LEVEL` is read once per process, and a level that hides them also hides kineto's
errors for the rest of the process. So only around the studio's own profiler start/stop calls (no user
code runs inside them) stderr's file descriptor is pointed at a temporary file; afterwards every line
that is not such a marker is written back to the real stderr, so nothing else is lost.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Iterator

__all__ = ["without_kineto_markers", "USDT_MARKER"]

#: One kineto USDT marker line: "USDT:<date> <time> <pid>:<tid> <file>:<line>] profiler_start" (or _stop).
USDT_MARKER = re.compile(rb"^USDT:[^\n]*\] profiler_(?:start|stop)\r?$")


@contextlib.contextmanager
def without_kineto_markers() -> Iterator[None]:
    """Run the enclosed profiler start/stop with kineto's marker lines removed from stderr (fd 2)."""
    try:
        fd = sys.__stderr__.fileno() if sys.__stderr__ is not None else 2
        saved = os.dup(fd)
    except (OSError, ValueError, AttributeError):   # no real stderr (embedded interpreter): nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as sink:
        _flush()
        os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            _flush()
            os.dup2(saved, fd)
            os.close(saved)
            sink.seek(0)
            kept = [line for line in sink.read().splitlines(keepends=True) if not USDT_MARKER.match(line.rstrip(b"\n"))]
            if kept:
                os.write(fd, b"".join(kept))


def _flush() -> None:
    for stream in (sys.stderr, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
