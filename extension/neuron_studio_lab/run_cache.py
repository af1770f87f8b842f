"""A run's device ops prepared once for timeline requests, kept in a small per-server LRU cache.

Reading a 1M-op Parquet table and sorting it takes about a second; every zoom of the panel's timeline
needs the same table. `RunOpsCache` keeps the prepared form (the display columns, the start order and
one `SortedIntervals` per engine) for the few most recently viewed runs, keyed by the table file's
identity (path, inode, size, mtime) so a re-saved table is read again. It lives on the web application
(not a module global) and is safe to use from the executor threads the handlers run their work in;
concurrent requests for a run that is not cached yet wait for one read instead of each reading it.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["PreparedOps", "RunOpsCache", "prepare_ops"]

#: Runs kept prepared; and a bound on their total memory (whichever is reached first evicts the oldest).
DEFAULT_MAX_RUNS = 4
DEFAULT_MAX_BYTES = 1 << 30


@dataclass(frozen=True)
class PreparedOps:
    """One run's device ops, ready for any timeline window."""

    table: Any  # pyarrow.Table of the display columns, in file order
    starts: np.ndarray  # int64 start times in start order
    ends: np.ndarray  # int64 end times, same order
    order: np.ndarray  # row index into `table` of each position of the start order
    first_start: int  # the earliest start and the latest end: the whole run's window
    last_end: int
    max_duration: int  # the longest op: an op overlapping [lo, hi] starts at or after lo - max_duration
    engines: dict[str, Any]  # engine name -> SortedIntervals (file order of first appearance)
    n_cores: int
    nbytes: int

    @property
    def num_rows(self) -> int:
        return int(self.starts.size)


def prepare_ops(table: Any, sorted_intervals: Callable[[np.ndarray, np.ndarray], Any]) -> PreparedOps:
    """Sort a device ops table (columns engine, start_ns, end_ns, core) once for `timeline` queries."""
    table = table.combine_chunks()  # one chunk per column: taking a page of rows is then O(page), not O(n)
    starts = table.column("start_ns").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    ends = table.column("end_ns").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    encoded = table.column("engine").combine_chunks().dictionary_encode()
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    names = [str(v) for v in encoded.dictionary.to_pylist()]
    cores = table.column("core").to_numpy(zero_copy_only=False)
    engines: dict[str, Any] = {}
    for code in dict.fromkeys(codes.tolist()):
        mask = codes == code
        engines[names[code] if code >= 0 else "none"] = sorted_intervals(starts[mask], ends[mask])
    order = np.argsort(starts, kind="stable")
    durations = ends - starts
    nbytes = int(table.nbytes) + starts.nbytes * 3 + order.nbytes + sum(e.nbytes for e in engines.values())
    return PreparedOps(
        table=table,
        starts=starts[order],
        ends=ends[order],
        order=order,
        first_start=int(starts.min()) if starts.size else 0,
        last_end=int(ends.max()) if ends.size else 0,
        max_duration=int(durations.max()) if durations.size else 0,
        engines=engines,
        n_cores=max(1, int(np.unique(cores).size)) if cores.size else 1,
        nbytes=nbytes,
    )


class RunOpsCache:
    """LRU of `PreparedOps` keyed by the table file's identity; thread-safe, one load per key at a time."""

    def __init__(self, max_runs: int = DEFAULT_MAX_RUNS, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple, PreparedOps] = OrderedDict()
        self._loading: dict[tuple, threading.Lock] = {}
        self._lock = threading.Lock()
        self.loads = 0  # how many times a table was read (tests and the benchmark report it)

    @staticmethod
    def key(path: Path, kind: str = "ops") -> tuple:
        st = os.stat(path)
        return (str(path), kind, st.st_ino, st.st_size, st.st_mtime_ns)

    def get(self, path: Path, load: Callable[[], Any], kind: str = "ops") -> Any:
        """The prepared form `kind` of the table at `path` ("ops": `PreparedOps`; the trace viewer keeps its
        lanes under its own kind), loading (once) if absent or changed on disk. Entries need an `nbytes`."""
        key = self.key(path, kind)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit
            gate = self._loading.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                hit = self._entries.get(key)
                if hit is not None:
                    return hit
            prepared = load()
            with self._lock:
                self.loads += 1
                # an older version of the same file is stale now
                for old in [k for k in self._entries if k[:2] == key[:2]]:
                    del self._entries[old]
                self._entries[key] = prepared
                self._loading.pop(key, None)
                self._evict()
            return prepared

    def _evict(self) -> None:
        total = sum(p.nbytes for p in self._entries.values())
        while len(self._entries) > 1 and (len(self._entries) > self.max_runs or total > self.max_bytes):
            _, dropped = self._entries.popitem(last=False)
            total -= dropped.nbytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
