"""Chrome trace JSON of a `Profile` (opens in Perfetto / chrome://tracing), written without importing `Profile`
so that `Profile.export_chrome_trace` and `export.to_chrome_trace` share one writer.

Every `ops` and `host` row is one event whose `args` hold the row's exact values plus `"_ns": {"table", "row"}`;
`compiles` rows, the `meta` dict, column order and dtypes live under `metadata["neuron_studio"]`. Host events go
in one process ("host"); each NeuronCore is a process with one thread per engine and utilization counters.
"""
from __future__ import annotations

import gzip
import math
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import pandas as pd

from neuron_studio.profiler.trace import Trace
from neuron_studio.profiler.trace_encoding import (
    CHROME_FORMAT, FORMAT_VERSION, TABLES, atomic_write, tables_of, column_values, dtype_names, dumps_ascii, json_meta,
)
from neuron_studio.profiler.vocabulary import DEVICE_ENGINES

__all__ = ["write_chrome_trace", "chrome_events", "chrome_metadata", "DEVICE_PID_BASE", "ENGINE_THREADS"]

# Device processes sit above any Linux pid (pid_max <= 2**22) so they never collide with the host process.
DEVICE_PID_BASE = 10_000_000
# Thread ids of the engine tracks inside a NeuronCore process, in display order.
ENGINE_THREADS: dict[str, int] = {"tensor": 1, "vector": 2, "scalar": 3, "gpsimd": 4, "dma": 5, "host": 6,
                                  "none": 7}
_THREAD_LABEL = {"host": "host (CPU fallback)", "none": "views (no device work)"}
_RESERVED_ARGS = ("_ns", "modeled")
_EVENT_CHUNK = 20_000


def _meta_event(name: str, pid: int, tid: int, args: dict) -> dict:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "ts": 0, "args": args}


def _us(ns: np.ndarray) -> list:
    return (np.asarray(ns, dtype=np.float64) / 1000.0).tolist()


def _row_args(df: pd.DataFrame, table: str) -> Iterator[dict]:
    for c in _RESERVED_ARGS:
        if c in df.columns:
            raise ValueError(f"table {table!r} has a column named {c!r}, which the Chrome export reserves")
    cols = list(df.columns)
    values = [column_values(df[c]) for c in cols]
    for i, row in enumerate(zip(*values)):
        args = dict(zip(cols, row))
        args["_ns"] = {"table": table, "row": i}
        yield args


def chrome_events(profile: Any, *, bins: int = 200) -> Iterator[dict]:
    """The trace events of a Profile, streamed (metadata, host events, device events, counters)."""
    trace: Trace = profile.trace
    meta = trace.meta
    host_pid = meta.get("pid") if isinstance(meta.get("pid"), int) and not isinstance(meta.get("pid"), bool) \
        else 0
    host_pid = host_pid if 0 <= host_pid < DEVICE_PID_BASE else 0
    figures = meta.get("figures") if isinstance(meta.get("figures"), dict) else {}
    measured = figures.get("device_time") == "measured"
    label = "measured" if measured else "modeled"

    # host process
    host = trace.host
    yield _meta_event("process_name", host_pid, 0, {"name": "host"})
    yield _meta_event("process_sort_index", host_pid, 0, {"sort_index": 0})
    for tid in pd.unique(host["thread"]).tolist():
        yield _meta_event("thread_name", host_pid, int(tid), {"name": f"host thread {tid}"})
    if len(host):
        ts = _us(host["start_ns"].to_numpy())
        dur = _us(np.maximum(host["dur_ns"].to_numpy(), 0))
        names, cats, tids = host["name"].tolist(), host["category"].tolist(), host["thread"].tolist()
        for i, args in enumerate(_row_args(host, "host")):
            yield {"ph": "X", "name": _text(names[i]), "cat": _text(cats[i]) or "host", "pid": host_pid,
                   "tid": int(tids[i]), "ts": ts[i], "dur": dur[i], "args": args}

    # one process per NeuronCore, one thread per engine
    ops = profile.ops
    cores = sorted(int(c) for c in pd.unique(ops["core"])) if len(ops) else []
    for k, core in enumerate(cores):
        pid = DEVICE_PID_BASE + core
        yield _meta_event("process_name", pid, 0, {"name": f"NeuronCore {core} ({label})"})
        yield _meta_event("process_sort_index", pid, 0, {"sort_index": 1 + k})
        yield _meta_event("process_labels", pid, 0, {"labels": label})
        used = set(ops.loc[ops["core"] == core, "engine"].tolist())
        for eng, tid in ENGINE_THREADS.items():
            if eng in used or eng in DEVICE_ENGINES:
                yield _meta_event("thread_name", pid, tid, {"name": _THREAD_LABEL.get(eng, eng)})
                yield _meta_event("thread_sort_index", pid, tid, {"sort_index": tid})
    if len(ops):
        tops = trace.ops
        ts = _us(ops["device_start_ns"].to_numpy())
        dur = _us(np.maximum(ops["device_end_ns"].to_numpy() - ops["device_start_ns"].to_numpy(), 0))
        engines, core_l = ops["engine"].tolist(), ops["core"].tolist()
        names, bound = tops["name"].tolist(), ops["bound"].tolist()
        m = profile.device_run.ops
        dev = {k: np.asarray(m[k], dtype=np.float64).tolist() for k in ("duration_ns", "launch_overhead_ns",
                                                                         "bytes_read", "bytes_written")}
        for i, args in enumerate(_row_args(tops, "ops")):
            eng = engines[i]
            args["modeled"] = {"engine": eng, "bound": bound[i], "duration_ns": dev["duration_ns"][i],
                               "launch_overhead_ns": dev["launch_overhead_ns"][i],
                               "bytes_read": dev["bytes_read"][i], "bytes_written": dev["bytes_written"][i]}
            yield {"ph": "X", "name": _text(names[i]), "cat": "device_op", "pid": DEVICE_PID_BASE + int(core_l[i]),
                   "tid": ENGINE_THREADS.get(eng, ENGINE_THREADS["none"]), "ts": ts[i], "dur": dur[i],
                   "args": args}

    # engine utilization counters, per core, on a shared time grid
    if len(ops) and bins > 0:
        from neuron_studio.profiler.analysis.utilization import ENGINES, engine_utilization

        lo, hi = int(ops["device_start_ns"].min()), int(ops["device_end_ns"].max())
        for core in cores:
            sel = ops[ops["core"] == core]
            util = profile.engine_utilization(bins=bins) if len(cores) == 1 else \
                engine_utilization(sel, bins=bins, cores=1, start_ns=lo, end_ns=hi)
            pid = DEVICE_PID_BASE + core
            starts = _us(util["start_ns"].to_numpy())
            vals = {e: util[e].round(6).tolist() for e in ENGINES}
            for b in range(len(util)):
                yield {"ph": "C", "name": "engine utilization", "pid": pid, "tid": 0, "ts": starts[b],
                       "args": {e: vals[e][b] for e in ENGINES}}
            yield {"ph": "C", "name": "engine utilization", "pid": pid, "tid": 0, "ts": _us([hi])[0],
                   "args": {e: 0.0 for e in ENGINES}}


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ("" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))


def _rows(df: pd.DataFrame) -> list:
    return [list(r) for r in zip(*(column_values(df[c]) for c in df.columns))] if len(df) else []


def chrome_metadata(profile: Any) -> dict:
    trace: Trace = profile.trace
    return {"neuron_studio": {
        "format": CHROME_FORMAT,
        "version": FORMAT_VERSION,
        "meta": json_meta(trace.meta),
        "columns": {t: [str(c) for c in getattr(trace, t).columns] for t in tables_of(trace)},
        "dtypes": {t: dtype_names(getattr(trace, t)) for t in tables_of(trace)},
        "rows": {t: int(len(getattr(trace, t))) for t in tables_of(trace)},
        "compiles": _rows(trace.compiles),
        # device allocations (when recorded) travel like compiles
        **({"memory": _rows(trace.memory)} if len(trace.memory) else {}),
        "device_timeline": "measured" if not profile.modeled_figures else "modeled",
        "time_base": "host events: ns since capture start; device events: the modeled per-core timeline",
    }}


def _chrome_chunks(profile: Any, bins: int) -> Iterable[str]:
    yield '{"displayTimeUnit":"ns","metadata":' + dumps_ascii(chrome_metadata(profile)) + ',\n"traceEvents":[\n'
    buf: list[str] = []
    first = True
    for ev in chrome_events(profile, bins=bins):
        buf.append(dumps_ascii(ev))
        if len(buf) >= _EVENT_CHUNK:
            yield ("" if first else ",\n") + ",\n".join(buf)
            first, buf = False, []
    if buf:
        yield ("" if first else ",\n") + ",\n".join(buf)
    yield "\n]}\n"


def write_chrome_trace(profile: Any, path: str | os.PathLike, *, bins: int = 200) -> Path:
    """Write `profile` as Chrome trace JSON (atomically; `.gz` paths gzip-compressed). Returns the path."""
    path = Path(path)

    def write(fh: Any) -> None:
        out = gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) if path.suffix == ".gz" else fh
        for chunk in _chrome_chunks(profile, bins):
            out.write(chunk.encode("ascii"))
        if out is not fh:
            out.close()

    return atomic_write(path, write)
