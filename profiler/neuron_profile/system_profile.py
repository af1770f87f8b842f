"""System profiles: runtime and framework events as the Neuron tools write them, mapped onto Explorer tables.

- `system_profile.json` (`neuron-profile view -d DIR --output-format json`, 2.x beta): `Neuron_Runtime_API_Event`
  and `Framework_Event` records (one record or a list per key, or a list of `{kind: record}` objects), plus
  `mem_usage` / `cpu_util` samples (not read).
- the system trace (`neuron-explorer view -d DIR --output-format json`): `{"trace_event": [flat events]}` with
  `name`, `timestamp`, `duration`, `model_name`, `nc_idx`, ...

Only `nc_exec_running` is device execution; `nrt_execute`, `kbl_exec_*` and every other runtime call are host
time. Device time is the union of the `nc_exec_running` windows; each window becomes an op row named after the
innermost framework event enclosing its start (else its `model_name`). Every other event is a host row.
Timestamps are epoch ns: they stay int64 and are rebased on the first event before any float math.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from neuron_studio.profiler.neuron_profile.profiler_json import int_field
from neuron_studio.profiler.neuron_profile.tables import ExplorerTables
from neuron_studio.profiler.timebase import rebase_ns
from neuron_studio.profiler.trace import HOST_COLUMNS

__all__ = ["system_records", "tables_from_system_profile", "SYSTEM_PROFILE_SOURCE", "SYSTEM_TRACE_SOURCE",
           "DEVICE_EXEC_EVENT"]

SYSTEM_PROFILE_SOURCE = "system-profile-json"
SYSTEM_TRACE_SOURCE = "system-trace-json"
DEVICE_EXEC_EVENT = "nc_exec_running"
_KINDS = ("Neuron_Runtime_API_Event", "Framework_Event")


def system_records(doc: Any) -> tuple[str, str | None, list[dict]] | None:
    """(source, where, events) of a system profile in any of its layouts; None when `doc` is not one. Events of
    a system_profile.json carry their record kind in `_kind`."""
    if isinstance(doc, dict) and isinstance(doc.get("trace_event"), list):
        return SYSTEM_TRACE_SOURCE, "trace_event", [e for e in doc["trace_event"] if isinstance(e, dict)]
    out: list[dict] = []
    seen = False
    for rec in [doc] if isinstance(doc, dict) else (doc if isinstance(doc, list) else []):
        if not isinstance(rec, dict):
            continue
        for k in _KINDS:
            v = rec.get(k)
            if v is None:
                continue
            seen = True
            out.extend(dict(e, _kind=k) for e in (v if isinstance(v, list) else [v]) if isinstance(e, dict))
    return (SYSTEM_PROFILE_SOURCE, None, out) if seen else None


def _int_or0(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _union(s: list[int], e: list[int]) -> int:
    total, end = 0, None
    for a, b in sorted(zip(s, e)):
        if end is None or a >= end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total


def tables_from_system_profile(source: str, where: str | None, evs: list[dict], p: Path) -> ExplorerTables:
    loc = where or "event"
    ts = int_field(evs, "timestamp", loc, p, source)
    dur = int_field(evs, "duration", loc, p, source, default=0)
    names = [str(e.get("name") or "") for e in evs]
    rel, origin = rebase_ns(ts)
    is_dev = np.asarray([n == DEVICE_EXEC_EVENT for n in names], dtype=bool)
    fw = np.asarray([e.get("_kind") == "Framework_Event" or str(e.get("trace_event_source") or "") == "framework"
                     for e in evs], dtype=bool)
    hs = np.flatnonzero(~is_dev)
    host = pd.DataFrame({
        "name": [names[i] for i in hs], "category": ["framework" if fw[i] else "neuron_rt" for i in hs],
        "thread": np.asarray([_int_or0(evs[i].get("thread_id")) for i in hs], dtype=np.int64),
        "start_ns": rel[hs], "dur_ns": dur[hs], "input_shapes": [None] * len(hs), "flops": np.zeros(len(hs)),
        "stack": [None] * len(hs),
    })[list(HOST_COLUMNS)]
    dev = np.flatnonzero(is_dev)
    d_s, d_e = ts[dev].tolist(), (ts[dev] + dur[dev]).tolist()
    frames = [(i, int(ts[i]), int(ts[i] + dur[i])) for i in np.flatnonzero(fw)]
    rows = []
    for j, (s, e) in enumerate(zip(d_s, d_e)):
        owner = [f for f in frames if f[1] <= s < f[2]]
        name = names[min(owner, key=lambda f: f[2] - f[1])[0]] if owner else \
            str(evs[dev[j]].get("model_name") or DEVICE_EXEC_EVENT)
        rows.append((s, e, e - s, name))
    ins = pd.DataFrame({"start_ts": np.asarray([r[0] for r in rows], dtype=np.int64),
                        "end_ts": np.asarray([r[1] for r in rows], dtype=np.int64),
                        "duration_ns": np.asarray([r[2] for r in rows], dtype=np.int64),
                        "engine": [""] * len(rows), "op_name": [r[3] for r in rows],
                        "raw_framework_id": np.arange(len(rows), dtype=np.int64)})   # one op row per execution
    not_captured = ["engine utilization", "MFU", "MBU"]        # a system profile has no engine or FLOP counters
    notes = []
    if not len(dev):
        not_captured.insert(0, "device time")
        notes.append(f"{p.name} has no {DEVICE_EXEC_EVENT} events, so no device time was captured (runtime calls "
                     "such as nrt_execute are host time); capture with device profiling on")
    return ExplorerTables(
        directory=p.parent, tables={"Instruction": ins, "Metadata": pd.DataFrame([{"first_hw_timestamp": origin}])},
        source=source, files={"*": [p.name]}, host=host, labels={"Instruction": where or DEVICE_EXEC_EVENT},
        origin_ns=origin, device_time_ns=_union(d_s, d_e) if len(dev) else None, launches=int(len(dev)),
        not_captured=not_captured, notes=notes)
