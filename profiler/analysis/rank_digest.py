"""The map step of a many-rank job: one rank's trace → a compact digest, the only thing the reduce reads.

A digest holds what the job report needs from one rank, a few thousand rows instead of millions of events:

- `steps`: per step its measured window on the rank's own clock (ProfilerStep#N windows when the trace has
  them, else the span of the step's ops; a torch.profiler trace without ProfilerStep annotations has one row,
  the whole capture, marked `UNKNOWN_STEPS`) and, where the profile has one, the step breakdown's categories;
- `collectives`: every collective op (`c10d::*`, else the backend's `gloo:*` ranges) in issue order with its sequence number within
  (op, group), bytes, issue start/end, the compute time since the rank's previous collective, the last op
  before it, and its modeled device duration;
- `ops`: the op table's aggregates per op name (count, device/host ns, FLOPs, bytes, engine), totals over the
  profile's `meta["profile_steps"]` steps;
- `activity`: compute and collective busy time in `ACTIVITY_BINS` equal bins over the rank's span (the
  collapsed lane of the job timeline, and the overlap of communication with compute, resolved to one bin);
- `meta`: rank identity and where it came from, wall-clock start, step time (measured, modeled), MFU,
  memory peak, counts, the reader's notes.

Times are ns on the rank's own capture clock; `meta["start_wall_ns"]` puts them on the wall clock. Tables
travel as Parquet bytes (`to_payload`) so a map on a Dask worker returns them to the client as is, and are
written as one Parquet file per table plus `digest.json` (`write_digest` / `read_digest`).
"""
from __future__ import annotations

import io
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from neuron_studio.profiler.kineto import is_collective_name
from neuron_studio.profiler.vocabulary import COLLECTIVE_PREFIX

__all__ = ["RankDigest", "digest_trace", "write_digest", "read_digest", "ACTIVITY_BINS", "DIGEST_VERSION",
           "COLLECTIVE_COLUMNS", "UNKNOWN_STEPS", "interval_union", "cumulative_busy"]

#: 2: `steps` marks a capture without step annotations (`UNKNOWN_STEPS`), `meta["profile_steps"]` divides `ops`.
DIGEST_VERSION = 2
#: Bins of the activity table: the job timeline's collapsed lane resolution and the overlap's resolution.
ACTIVITY_BINS = 2048
TABLES = ("steps", "collectives", "ops", "activity")
#: The `steps` basis of a torch.profiler trace without ProfilerStep#N annotations: its one row is the whole
#: capture, however many iterations it holds.
UNKNOWN_STEPS = "whole capture (no ProfilerStep annotations)"
COLLECTIVE_COLUMNS = ["op", "group", "index", "seq", "arrival_ns", "issue_end_ns", "bytes", "compute_before_ns",
                      "op_before", "modeled_ns"]
_OP_COLUMNS = ["key", "count", "device_ns", "host_ns", "flops", "bytes", "engine"]


@dataclass
class RankDigest:
    """One rank's digest (see the module doc)."""

    meta: dict[str, Any]
    steps: pd.DataFrame
    collectives: pd.DataFrame
    ops: pd.DataFrame
    activity: pd.DataFrame
    summary: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def rank(self) -> int | None:
        r = self.meta.get("rank")
        return None if r is None else int(r)

    def tables(self) -> dict[str, pd.DataFrame]:
        return {t: getattr(self, t) for t in TABLES}

    def to_payload(self) -> dict[str, Any]:
        """Parquet bytes per table plus the JSON parts: what a worker sends back to the client."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        out: dict[str, Any] = {"digest.json": json.dumps(self._head(), allow_nan=False).encode()}
        for name, df in self.tables().items():
            buf = io.BytesIO()
            pq.write_table(pa.Table.from_pandas(df, preserve_index=False), buf)
            out[f"{name}.parquet"] = buf.getvalue()
        return out

    def _head(self) -> dict[str, Any]:
        return {"format": "neuron-studio-rank-digest", "version": DIGEST_VERSION, "meta": _json_safe(self.meta),
                "summary": _json_safe(self.summary), "notes": list(self.notes)}

    @classmethod
    def from_payload(cls, payload: dict[str, bytes]) -> "RankDigest":
        import pyarrow.parquet as pq

        head = json.loads(payload["digest.json"])
        if head.get("format") != "neuron-studio-rank-digest" or head.get("version") != DIGEST_VERSION:
            raise ValueError(f"not a rank digest of version {DIGEST_VERSION}: {str(head.get('format'))[:60]!r} "
                             f"version {head.get('version')!r}")
        tables = {t: pq.read_table(io.BytesIO(payload[f"{t}.parquet"])).to_pandas() for t in TABLES}
        return cls(meta=head["meta"], summary=head.get("summary"), notes=list(head.get("notes") or []), **tables)


def write_digest(digest: RankDigest | dict[str, bytes], directory: str | os.PathLike) -> Path:
    """Write a digest (or its payload) as `directory/{digest.json,<table>.parquet}`, each file atomically."""
    payload = digest.to_payload() if isinstance(digest, RankDigest) else digest
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for name, data in payload.items():
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=d)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, d / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return d


def read_digest(directory: str | os.PathLike) -> RankDigest:
    d = Path(directory)
    names = ["digest.json", *(f"{t}.parquet" for t in TABLES)]
    missing = [n for n in names if not (d / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{d}: not a rank digest (missing {', '.join(missing)})")
    return RankDigest.from_payload({n: (d / n).read_bytes() for n in names})


# ----------------------------------------------------------------------------------------------- the map
def digest_trace(trace: Any, profile: Any = None, *, bins: int = ACTIVITY_BINS, with_summary: bool = False,
                 summary_name: str | None = None) -> RankDigest:
    """The digest of one rank's `Trace` (and its `Profile`, for the modeled figures, step breakdown, op
    table and memory peak; without it those are left out and say so)."""
    ops = trace.ops
    meta = trace.meta
    notes: list[str] = []
    order = np.lexsort((ops["seq"].to_numpy(), ops["start_ns"].to_numpy()))
    names = ops["name"].astype(str).to_numpy()[order]
    starts = ops["start_ns"].to_numpy(dtype=np.int64)[order]
    ends = ops["end_ns"].to_numpy(dtype=np.int64)[order]
    view = ops["is_view"].to_numpy(dtype=bool)[order]
    is_coll = collective_mask(names)
    compute = ~is_coll & ~view
    coll = _collectives(ops, order, names, starts, ends, is_coll, compute, _modeled_ns(profile))
    t0 = int(starts.min()) if len(starts) else 0
    t1 = int(ends.max()) if len(ends) else 0
    activity, bin_ns = _activity(starts, ends, compute, is_coll, t0, t1, bins)
    steps = _steps(trace, profile)
    d_meta: dict[str, Any] = {
        "rank": meta.get("rank"), "rank_source": meta.get("rank_source") if meta.get("rank") is not None else None,
        "world_size": meta.get("world_size"), "start_wall_ns": meta.get("start_wall_ns"),
        "run_start_wall_ns": meta.get("run_start_wall_ns"), "name": meta.get("name"),
        "backend": meta.get("backend"), "chip": meta.get("chip"), "mode": meta.get("mode"),
        "ops": int(len(ops)), "host_events": int(len(trace.host)),
        "events": (meta.get("imported") or {}).get("events"), "first_ns": t0, "last_ns": t1,
        "activity_bin_ns": bin_ns, "steps": int(len(steps)),
        "profile_steps": int(profile.steps) if profile is not None else None,
        "collective_thread": _common_thread(ops["thread"].to_numpy(dtype=np.int64)[order][is_coll]),
    }
    d_meta.update(_profile_figures(trace, profile, notes))
    summary = None
    if with_summary and profile is not None:
        from neuron_studio.profiler.profile_summary import _finite

        summary = _finite(profile.to_summary(name=summary_name))
    return RankDigest(meta=d_meta, steps=steps, collectives=coll, ops=_op_aggregates(profile), activity=activity,
                      summary=summary, notes=notes)


def collective_mask(names: np.ndarray) -> np.ndarray:
    """Which ops are collectives (`kineto.is_collective_name`): the c10d ops, or, on a rank whose trace has
    none (a CPU-only gloo trace), the backend's collective ranges (`gloo:all_reduce`); never both, which
    would count each collective twice."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    uniq, inv = np.unique(names.astype(str), return_inverse=True)
    coll = np.array([is_collective_name(n) for n in uniq.tolist()], dtype=bool)
    c10d = np.char.startswith(uniq.astype(str), COLLECTIVE_PREFIX) & coll
    return (c10d if c10d.any() else coll)[inv]


def _common_thread(threads: np.ndarray) -> int | None:
    """The host thread most collectives were issued on (None: no collective)."""
    if not threads.size:
        return None
    vals, counts = np.unique(threads, return_counts=True)
    return int(vals[np.argmax(counts)])


def _group_of(tags: Any) -> str:
    if isinstance(tags, str):
        for t in tags.split(","):
            if t.startswith("group="):
                return t[len("group="):]
    return ""


def _collectives(ops: pd.DataFrame, order: np.ndarray, names: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 is_coll: np.ndarray, compute: np.ndarray, modeled: dict[int, float]) -> pd.DataFrame:
    """Per collective in issue order: its sequence number within (op, group) and what came before it."""
    pos = np.flatnonzero(is_coll)
    if not pos.size:
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in zip(
            COLLECTIVE_COLUMNS, ["object", "object", "int64", "int64", "int64", "int64", "float64", "float64",
                                 "object", "float64"])})
    seq = ops["seq"].to_numpy(dtype=np.int64)[order][pos]
    tags = ops["tags"].to_numpy()[order][pos] if "tags" in ops.columns else np.full(pos.size, None, dtype=object)
    tb = ops["transfer_bytes"].to_numpy(dtype=float)[order][pos]
    io_b = np.maximum(ops["in_bytes"].to_numpy(dtype=float)[order][pos], ops["out_bytes"].to_numpy(dtype=float)[order][pos])
    nbytes = np.where(tb > 0, tb, io_b)
    # the last compute op before each position, and the previous collective's end
    last_compute = np.maximum.accumulate(np.where(compute, np.arange(len(names)), -1))
    prev_end = np.concatenate([[starts[0]], ends[pos[:-1]]])
    prev_pos = np.concatenate([[-1], pos[:-1]])
    before = np.where(pos > 0, last_compute[np.maximum(pos - 1, 0)], -1)
    op_before = [str(names[b]) if b > p else None for b, p in zip(before.tolist(), prev_pos.tolist())]
    groups = [_group_of(t) for t in tags]
    counters: dict[tuple[str, str], int] = {}
    index = []
    for n, g in zip(names[pos].tolist(), groups):
        k = counters.get((n, g), 0)
        counters[(n, g)] = k + 1
        index.append(k)
    return pd.DataFrame({
        "op": names[pos].astype(object), "group": groups, "index": np.array(index, dtype=np.int64), "seq": seq,
        "arrival_ns": starts[pos], "issue_end_ns": ends[pos], "bytes": nbytes.astype(float),
        "compute_before_ns": (starts[pos] - prev_end).astype(float), "op_before": op_before,
        "modeled_ns": np.array([modeled.get(int(s), 0.0) for s in seq.tolist()], dtype=float),
    })


def _modeled_ns(profile: Any) -> dict[int, float]:
    """Modeled device duration of each collective op (by seq), from the profile's device timeline."""
    if profile is None:
        return {}
    m = profile.ops
    if "op" not in m.columns or not len(m):
        return {}
    mask = m["op"].astype(str).str.startswith(COLLECTIVE_PREFIX).to_numpy()
    sub = m[mask]
    return {int(s): float(e - b) for s, b, e in zip(sub["seq"], sub["device_start_ns"], sub["device_end_ns"])}


def interval_union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of [start, end) intervals as sorted disjoint intervals."""
    if not len(starts):
        return starts.astype(np.int64), ends.astype(np.int64)
    o = np.argsort(starts, kind="stable")
    s, e = starts[o].astype(np.int64), ends[o].astype(np.int64)
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    heads = np.flatnonzero(new)
    return s[heads], np.maximum.reduceat(run_end, heads)


def cumulative_busy(us: np.ndarray, ue: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Busy time of the disjoint sorted intervals (us, ue) before each point of `x`."""
    x = np.asarray(x, dtype=np.int64)
    if not len(us):
        return np.zeros(x.shape, dtype=np.int64)
    lens = ue - us
    cum = np.concatenate([[0], np.cumsum(lens)])
    i = np.searchsorted(us, x, side="right")          # intervals starting at or before x
    j = np.maximum(i - 1, 0)
    partial = np.where(i > 0, np.clip(x - us[j], 0, lens[j]), 0)
    return cum[j] + partial


def _activity(starts: np.ndarray, ends: np.ndarray, compute: np.ndarray, is_coll: np.ndarray, t0: int, t1: int,
              bins: int) -> tuple[pd.DataFrame, int]:
    """Compute and collective busy ns per equal bin over [t0, t1] (bin width rounded up to whole ns)."""
    bin_ns = max(1, math.ceil((t1 - t0) / bins)) if t1 > t0 else 1
    edges = t0 + bin_ns * np.arange(bins + 1, dtype=np.int64)
    cols = {"start_ns": edges[:-1]}
    for label, mask in (("compute_ns", compute), ("collective_ns", is_coll)):
        us, ue = interval_union(starts[mask], ends[mask])
        cols[label] = np.diff(cumulative_busy(us, ue, edges))
    return pd.DataFrame(cols), int(bin_ns)


def _steps(trace: Any, profile: Any) -> pd.DataFrame:
    """Per step: its measured window on the rank's clock, plus the step breakdown's categories (ns). A
    torch.profiler trace without ProfilerStep annotations has one row, basis `UNKNOWN_STEPS`: the whole capture,
    not a step (the reduce then cannot put its figures per step, and says so)."""
    imported = trace.meta.get("imported") or {}
    wins = trace.meta.get("step_windows") or imported.get("step_windows") or []   # as the profile's host step
    if wins:
        df = pd.DataFrame({"step": [int(w["step"]) for w in wins], "start_ns": [int(w["start_ns"]) for w in wins],
                           "end_ns": [int(w["end_ns"]) for w in wins]})
        df["basis"] = "ProfilerStep window" if imported else "step mark to step mark"
    else:
        ops = trace.ops
        step = ops["step"].to_numpy(dtype=np.int64)
        # a capture saved without step windows: its profiled steps are warmup .. warmup + steps - 1; ops after its
        # last step mark carry the next index (the tail of the script, not a step: averaging it in would shift
        # every figure per step)
        first = int(trace.meta.get("warmup") or 0)
        profiled = (step >= first) & (step < first + int(trace.meta.get("steps") or 1))
        if "steps" in trace.meta and profiled.any():
            ops, step = ops[profiled], step[profiled]
        g = pd.DataFrame({"step": step, "s": ops["start_ns"].to_numpy(dtype=np.int64),
                          "e": ops["end_ns"].to_numpy(dtype=np.int64)}).groupby("step", sort=True)
        df = pd.DataFrame({"step": g["s"].min().index.to_numpy(dtype=np.int64),
                           "start_ns": g["s"].min().to_numpy(), "end_ns": g["e"].max().to_numpy()})
        df["basis"] = UNKNOWN_STEPS if imported.get("kind") == "chrome-trace" else "span of the step's ops"
    df = df.drop_duplicates("step", keep="first").sort_values("step", kind="stable").reset_index(drop=True)
    df["duration_ns"] = (df["end_ns"] - df["start_ns"]).astype(np.int64)
    if profile is not None:
        try:
            bd = profile.step_breakdown()
        except Exception as e:  # noqa: BLE001 - the digest names what it could not compute
            bd = None
            df.attrs["breakdown_error"] = f"{type(e).__name__}: {e}"
        if bd is not None and bd.available and len(bd.per_step) and "step" in bd.per_step.columns:
            per = bd.per_step.drop_duplicates("step").set_index("step")
            cats = [c for c in per.columns if pd.api.types.is_numeric_dtype(per[c])]
            for c in cats:
                df[f"bd_{c}"] = per[c].reindex(df["step"]).to_numpy(dtype=float)
    return df


def _op_aggregates(profile: Any) -> pd.DataFrame:
    if profile is None:
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in zip(
            _OP_COLUMNS, ["object", "int64", "float64", "float64", "float64", "float64", "object"])})
    t = profile.op_table(by="op")
    out = t[[c for c in _OP_COLUMNS if c in t.columns]].copy()
    out["key"] = out["key"].astype(str)
    out["engine"] = out["engine"].astype(str)
    return out.reset_index(drop=True)


def _profile_figures(trace: Any, profile: Any, notes: list[str]) -> dict[str, Any]:
    """Modeled figures, memory peak and the measured GPU shares of one rank (None where not available)."""
    out: dict[str, Any] = {"modeled_step_time_ns": None, "mfu": None, "tensor_utilization": None,
                           "memory_peak_bytes": None, "memory_peak_basis": None}
    if profile is None:
        notes.append("no profile: modeled figures, op table and step breakdown left out")
        return out
    out["modeled_step_time_ns"] = float(profile.step_time_ns)
    out["mfu"] = float(profile.mfu)
    out["tensor_utilization"] = float(profile.summary.engine_utilization.get("tensor", 0.0))
    if len(trace.memory):
        try:
            out["memory_peak_bytes"] = int(profile.memory_peak(top=1).attrs.get("peak_bytes") or 0)
            out["memory_peak_basis"] = "recorded allocations"
        except Exception as e:  # noqa: BLE001
            notes.append(f"memory peak not computed: {type(e).__name__}: {e}")
    else:
        mem = (trace.meta.get("imported") or {}).get("memory") or []
        peaks = [m.get("peak_bytes") for m in mem if isinstance(m, dict) and m.get("peak_bytes") is not None]
        if peaks:
            out["memory_peak_bytes"] = int(max(peaks))
            out["memory_peak_basis"] = "kineto [memory] events (largest device)"
    act = profile.gpu_activity()
    if len(act):
        tb = profile.temporal_breakdown()
        for part in ("compute", "communication", "memory", "idle"):
            out[f"gpu_{part}_share"] = tb.share(part)
    return out


def _json_safe(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(float(v)) else None
    if isinstance(v, np.bool_):
        return bool(v)
    return v
