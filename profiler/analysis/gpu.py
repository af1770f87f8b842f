"""GPU activity of an imported torch.profiler trace: kernels linked to the ops that launched them, measured
GPU time per op, a kernel breakdown and a temporal breakdown.

Linking: kineto gives a GPU activity (kernel, memcpy, memset) and the runtime call that launched it
(`cudaLaunchKernel`, `hipMemcpyWithStream`, ...) the same `correlation` id; the runtime call runs inside the
op that issued it, on the op's thread. So kernel → runtime call (by correlation) → the outermost op on that
thread whose interval contains the call. Activity whose launch was not recorded, or was issued outside any
op, is counted as unattributed, never spread over ops.

Temporal breakdown (as Holistic Trace Analysis reports it), over the span from the first to the last GPU
activity of the trace: *compute* = time any compute kernel runs; *communication* = time a collective
(NCCL/RCCL) kernel runs while no compute kernel does; *memory* = time a memcpy/memset runs while neither
does; *idle* = time nothing runs. The four add up to the span.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from neuron_studio.profiler.analysis.binning import union_intervals as _union
from neuron_studio.profiler.kineto import GPU_CATEGORIES, RUNTIME_CATEGORIES, gpu_kind

__all__ = ["TemporalBreakdown", "gpu_activity", "gpu_time_per_op", "kernel_breakdown", "temporal_breakdown",
           "has_gpu_activity", "step_windows"]

_ACTIVITY_COLUMNS = ["name", "category", "kind", "start_ns", "dur_ns", "stream", "device", "correlation",
                     "op_seq", "op"]


def has_gpu_activity(host: pd.DataFrame) -> bool:
    return bool(len(host)) and bool(host["category"].isin(GPU_CATEGORIES).any())


def _col(df: pd.DataFrame, name: str, default: int = -1) -> np.ndarray:
    if name in df.columns:
        return df[name].to_numpy(dtype=np.int64, na_value=default)
    return np.full(len(df), default, dtype=np.int64)


def gpu_activity(host: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU activity, with its kind and the op (seq, name) that launched it (-1/None if unknown)."""
    is_gpu = host["category"].isin(GPU_CATEGORIES).to_numpy(dtype=bool) if len(host) else np.zeros(0, bool)
    g = host[is_gpu]
    if not len(g):
        return pd.DataFrame({c: pd.Series([], dtype=object if c in ("name", "category", "kind", "op") else np.int64)
                             for c in _ACTIVITY_COLUMNS})
    names = g["name"].astype(str).to_numpy(dtype=object)
    cats = g["category"].astype(str).to_numpy(dtype=object)
    codes, uniq = pd.factorize(names)
    comm = np.asarray([gpu_kind("kernel", str(u)) == "communication" for u in uniq], dtype=bool)[codes]
    memory = np.isin(cats, [c for c in GPU_CATEGORIES if gpu_kind(c, "") == "memory"])
    kinds = np.where(memory, "memory", np.where(comm, "communication", "compute")).astype(object)
    corr = _col(g, "correlation")
    op_seq = np.full(len(g), -1, dtype=np.int64)
    launch = _launching_op(host, ops)
    if len(launch):
        hit = pd.Series(launch).reindex(corr).to_numpy(dtype=np.float64, na_value=-1.0)
        op_seq = np.where(corr >= 0, hit, -1).astype(np.int64)
    seq_to_name = pd.Series(ops["name"].to_numpy(dtype=object), index=ops["seq"].to_numpy())
    op_names = np.full(len(g), None, dtype=object)
    linked = op_seq >= 0
    if linked.any():
        op_names[linked] = seq_to_name.reindex(op_seq[linked]).to_numpy(dtype=object)
    return pd.DataFrame({
        "name": names, "category": cats, "kind": kinds,
        "start_ns": g["start_ns"].to_numpy(dtype=np.int64), "dur_ns": g["dur_ns"].to_numpy(dtype=np.int64),
        "stream": _col(g, "stream"), "device": _col(g, "device"), "correlation": corr,
        "op_seq": op_seq, "op": op_names,
    })


def _launching_op(host: pd.DataFrame, ops: pd.DataFrame) -> dict[int, int]:
    """correlation id → seq of the outermost op containing the runtime call with that id."""
    if "correlation" not in host.columns or not len(ops):
        return {}
    rt = host[host["category"].isin(RUNTIME_CATEGORIES).to_numpy(dtype=bool)]
    corr = _col(rt, "correlation")
    rt = rt[corr >= 0]
    corr = corr[corr >= 0]
    if not len(rt):
        return {}
    out: dict[int, int] = {}
    r_thread = rt["thread"].to_numpy(dtype=np.int64)
    r_start = rt["start_ns"].to_numpy(dtype=np.int64)
    r_end = r_start + rt["dur_ns"].to_numpy(dtype=np.int64)
    o_thread = ops["thread"].to_numpy(dtype=np.int64)
    o_start = ops["start_ns"].to_numpy(dtype=np.int64)
    o_end = ops["end_ns"].to_numpy(dtype=np.int64)
    o_seq = ops["seq"].to_numpy(dtype=np.int64)
    for tid in np.unique(r_thread):
        om = np.flatnonzero(o_thread == tid)
        if not len(om):
            continue
        om = om[np.argsort(o_start[om], kind="stable")]     # outermost ops of one thread do not overlap
        rm = np.flatnonzero(r_thread == tid)
        k = np.searchsorted(o_start[om], r_start[rm], side="right") - 1
        ok = (k >= 0) & (o_end[om[np.maximum(k, 0)]] >= r_end[rm])
        out.update(zip(corr[rm[ok]].tolist(), o_seq[om[k[ok]]].tolist()))
    return out


def gpu_time_per_op(activity: pd.DataFrame) -> pd.DataFrame:
    """Per op seq: measured GPU time it launched (kernels, copies, sets) and the number of activities."""
    a = activity[activity["op_seq"] >= 0]
    g = a.groupby("op_seq").agg(gpu_ns=("dur_ns", "sum"), gpu_activities=("dur_ns", "size"))
    return g


def kernel_breakdown(activity: pd.DataFrame, *, top: int | None = 20) -> pd.DataFrame:
    """GPU activity by name: count, total, mean, share of all GPU time, kind; the rest folded into "other"."""
    if not len(activity):
        return pd.DataFrame(columns=["name", "kind", "count", "total_ns", "mean_ns", "share"])
    g = activity.groupby(["name", "kind"], sort=False).agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"))
    g = g.reset_index().sort_values(["total_ns", "name"], ascending=[False, True], kind="stable")
    total = float(g["total_ns"].sum())
    if top is not None and len(g) > top:
        rest = g.iloc[top:]
        g = pd.concat([g.iloc[:top], pd.DataFrame([{"name": f"other ({len(rest)} names)", "kind": "mixed",
                                                     "count": int(rest["count"].sum()),
                                                     "total_ns": int(rest["total_ns"].sum())}])])
    g["mean_ns"] = g["total_ns"] / g["count"].clip(lower=1)
    g["share"] = g["total_ns"] / total if total else 0.0
    return g.reset_index(drop=True)[["name", "kind", "count", "total_ns", "mean_ns", "share"]]


@dataclass(frozen=True)
class TemporalBreakdown:
    """GPU time of one rank over its span (ns), split as HTA does; shares guard a zero span."""

    span_ns: int
    compute_ns: int
    communication_ns: int
    memory_ns: int
    idle_ns: int

    def share(self, part: str) -> float:
        return getattr(self, f"{part}_ns") / self.span_ns if self.span_ns else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update({f"{p}_share": self.share(p) for p in ("compute", "communication", "memory", "idle")})
        return d


def _covered(us: np.ndarray, ue: np.ndarray, bs: np.ndarray, be: np.ndarray) -> int:
    """Length of the union (us, ue) that the union (bs, be) also covers (both sorted and disjoint)."""
    if not len(us) or not len(bs):
        return 0
    cb = np.concatenate(([0], np.cumsum(be - bs)))

    def cover_upto(t: np.ndarray) -> np.ndarray:     # covered length of (bs, be) below each t
        k = np.searchsorted(bs, t, side="right")
        part = np.where(k > 0, np.minimum(t, be[np.maximum(k - 1, 0)]) - bs[np.maximum(k - 1, 0)], 0)
        return cb[np.maximum(k - 1, 0)] * (k > 0) + np.maximum(part, 0)

    return int((cover_upto(ue) - cover_upto(us)).sum())


def temporal_breakdown(activity: pd.DataFrame) -> TemporalBreakdown:
    if not len(activity):
        return TemporalBreakdown(0, 0, 0, 0, 0)
    s = activity["start_ns"].to_numpy(dtype=np.int64)
    e = s + activity["dur_ns"].to_numpy(dtype=np.int64)
    kind = activity["kind"].to_numpy(dtype=object)
    comp = _union(s[kind == "compute"], e[kind == "compute"])
    cm = (kind == "compute") | (kind == "communication")
    comp_comm = _union(s[cm], e[cm])
    comm = _union(s[kind == "communication"], e[kind == "communication"])
    mem = _union(s[kind == "memory"], e[kind == "memory"])
    busy = _union(s, e)
    compute_ns = int((comp[1] - comp[0]).sum())
    comm_ns = int((comm[1] - comm[0]).sum()) - _covered(*comm, *comp)
    mem_ns = int((mem[1] - mem[0]).sum()) - _covered(*mem, *comp_comm)
    span = int(e.max() - s.min())
    idle = span - int((busy[1] - busy[0]).sum())
    return TemporalBreakdown(span, compute_ns, comm_ns, mem_ns, idle)


def step_windows(meta: dict) -> pd.DataFrame:
    """The profiled steps' windows (step, start_ns, end_ns, dur_ns): a capture's, between its step marks, or the
    ProfilerStep#N windows an importer recorded; empty when the trace marked no steps."""
    wins = meta.get("step_windows") or (meta.get("imported") or {}).get("step_windows") or []
    df = pd.DataFrame(wins, columns=["step", "start_ns", "end_ns"])
    df["dur_ns"] = df["end_ns"] - df["start_ns"]
    return df
