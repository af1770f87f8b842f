"""Multi-rank analysis: per-rank traces of one job merged on one time axis.

Alignment: each rank's op times are relative to its own capture start; `meta["start_wall_ns"]` is that
start on the wall clock, so `start_wall_ns + start_ns - origin` puts every rank on one axis, the origin being
the job's common start (`meta["run_start_wall_ns"]`, else the earliest rank start). Ranks on one host share
the clock; across hosts the axis is as good as their clock sync.

Collectives: ops named `c10d::*` (see neuron_studio.device.emulator.distributed). The k-th collective of a
given op and group on each rank is the same collective (collectives are issued in the same order on every
rank of a group). Its *arrival* on a rank is when that rank issued it; it can only complete once the last
rank arrived, so every other rank waits `last arrival - own arrival` for it. The rank that arrives last the
most (weighted by the wait it causes) is the straggler; the collective it delays most is named, with the
compute time it spent before that collective compared with the other ranks.

Times here are the measured host timeline of each rank (the emulator executes on the CPU); the modeled
device duration of a collective (NeuronLink cost, from the model) extends its window for the overlap figure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

__all__ = ["RankAnalysis", "Straggler", "merge_ranks", "collective_table", "find_straggler", "rank_table",
           "comm_overlap", "analyze_ranks", "is_collective", "STRAGGLER_MIN_WAIT_NS"]

#: A rank counts as a straggler only if the waits it causes add up to at least this (1 ms): below it,
#: arrival order is scheduling noise.
STRAGGLER_MIN_WAIT_NS = 1_000_000


def is_collective(names: pd.Series) -> np.ndarray:
    return names.astype(str).str.startswith("c10d::").to_numpy(dtype=bool)


@dataclass(frozen=True)
class Straggler:
    """The rank the others wait for, and where."""

    rank: int
    op: str                     # the collective it delays most ("c10d::allreduce_")
    caused_wait_ns: float       # total wait of the other ranks in collectives this rank arrived last at
    last_share: float           # fraction of collectives this rank arrived last at
    compute_before_ns: float    # its mean compute time before that collective (since its previous collective)
    others_compute_before_ns: float  # the same, median over the other ranks
    op_before: str | None = None     # the op it ran just before the most delayed collective instance

    @property
    def excess_compute_ns(self) -> float:
        return self.compute_before_ns - self.others_compute_before_ns


@dataclass
class RankAnalysis:
    ranks: pd.DataFrame             # one row per rank
    collectives: pd.DataFrame       # one row per (collective instance, rank)
    instances: pd.DataFrame         # one row per collective instance (matched across ranks)
    timeline: pd.DataFrame          # every op of every rank, aligned (columns rank, t_start_ns, t_end_ns, ...)
    straggler: Straggler | None
    slowest_collective: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)

    def to_summary(self) -> dict[str, Any]:
        """JSON-safe block for reports (the CLI's per-rank section)."""
        def rows(df: pd.DataFrame) -> list[dict]:
            return [{k: (None if isinstance(v, float) and not np.isfinite(v) else
                         (v.item() if hasattr(v, "item") else v)) for k, v in r.items()}
                    for r in df.to_dict("records")]

        s = self.straggler
        return {
            "ranks": rows(self.ranks),
            "straggler": None if s is None else {
                "rank": s.rank, "op": s.op, "caused_wait_ns": s.caused_wait_ns, "last_share": s.last_share,
                "compute_before_ns": s.compute_before_ns, "others_compute_before_ns": s.others_compute_before_ns,
                "op_before": s.op_before},
            "slowest_collective": self.slowest_collective,
            "collectives": rows(self.instances.head(50)),
            "notes": list(self.notes),
        }


def _group_of(tags: Any) -> str:
    if isinstance(tags, str):
        for t in tags.split(","):
            if t.startswith("group="):
                return t[len("group="):]
    return ""


def merge_ranks(traces: Sequence[Any], ranks: Sequence[int] | None = None) -> pd.DataFrame:
    """All ranks' ops on one time axis: columns rank, t_start_ns, t_end_ns plus the `ops` columns."""
    ranks = list(ranks) if ranks is not None else [int(t.meta.get("rank", i)) for i, t in enumerate(traces)]
    starts = [int(t.meta.get("start_wall_ns", 0) or 0) for t in traces]
    origin = min((int(t.meta.get("run_start_wall_ns", 0) or 0) for t in traces), default=0) or min(starts, default=0)
    if any(s == 0 for s in starts):
        origin = 0
    frames = []
    for r, t, s in zip(ranks, traces, starts):
        ops = t.ops
        off = (s - origin) if s else 0
        df = pd.DataFrame({
            "rank": np.full(len(ops), r, dtype=np.int32), "seq": ops["seq"].to_numpy(),
            "name": ops["name"].to_numpy(), "step": ops["step"].to_numpy(), "is_view": ops["is_view"].to_numpy(),
            "t_start_ns": ops["start_ns"].to_numpy(dtype=np.int64) + off,
            "t_end_ns": ops["end_ns"].to_numpy(dtype=np.int64) + off,
            "in_bytes": ops["in_bytes"].to_numpy(), "out_bytes": ops["out_bytes"].to_numpy(),
            "transfer_bytes": ops["transfer_bytes"].to_numpy(),
            "tags": ops["tags"].to_numpy() if "tags" in ops.columns else np.full(len(ops), None, dtype=object),
        })
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["rank", "seq", "name", "step", "is_view", "t_start_ns", "t_end_ns", "in_bytes",
                                     "out_bytes", "transfer_bytes", "tags"])
    return pd.concat(frames, ignore_index=True).sort_values(["t_start_ns", "rank"], kind="stable").reset_index(drop=True)


def collective_table(timeline: pd.DataFrame, modeled_ns: dict[tuple[int, int], float] | None = None) -> pd.DataFrame:
    """One row per (collective instance, rank): arrival, wait for the last rank, compute before it."""
    cols = ["key", "op", "group", "index", "rank", "arrival_ns", "issue_end_ns", "bytes", "compute_before_ns",
            "op_before", "last_arrival_ns", "wait_ns", "is_last", "finish_ns"]
    tl = timeline
    if not len(tl):
        return pd.DataFrame(columns=cols)
    coll = is_collective(tl["name"])
    if not coll.any():
        return pd.DataFrame(columns=cols)
    tl = tl.sort_values(["rank", "t_start_ns", "seq"], kind="stable").reset_index(drop=True)
    coll = is_collective(tl["name"])
    rows = []
    for rank, g in tl.groupby("rank", sort=True):
        idx = np.flatnonzero(coll[g.index.to_numpy()])
        names = g["name"].to_numpy()
        starts = g["t_start_ns"].to_numpy()
        ends = g["t_end_ns"].to_numpy()
        view = g["is_view"].to_numpy(dtype=bool)
        prev_end = int(starts[0]) if len(starts) else 0
        prev_pos = 0
        counters: dict[tuple[str, str], int] = {}
        for pos in idx:
            name = str(names[pos])
            group = _group_of(g["tags"].iloc[pos])
            k = counters.get((name, group), 0)
            counters[(name, group)] = k + 1
            before = [p for p in range(prev_pos, pos) if not view[p] and not coll[g.index[p]]]
            tb = float(g["transfer_bytes"].iloc[pos])
            nbytes = tb if tb > 0 else float(max(g["in_bytes"].iloc[pos], g["out_bytes"].iloc[pos]))
            rows.append({"key": f"{name}|{group}|{k}", "op": name, "group": group, "index": k, "rank": int(rank),
                         "arrival_ns": int(starts[pos]), "issue_end_ns": int(ends[pos]), "bytes": nbytes,
                         "compute_before_ns": float(starts[pos] - prev_end),
                         "op_before": str(names[before[-1]]) if before else None,
                         "seq": int(g["seq"].iloc[pos])})
            prev_end = int(ends[pos])
            prev_pos = pos + 1
    df = pd.DataFrame(rows)
    counts = df.groupby("key")["rank"].transform("nunique")
    df = df[counts >= 2].copy()
    if not len(df):
        return pd.DataFrame(columns=cols)
    df["last_arrival_ns"] = df.groupby("key")["arrival_ns"].transform("max")
    df["wait_ns"] = (df["last_arrival_ns"] - df["arrival_ns"]).astype(float)
    last_rank = df.loc[df.groupby("key")["arrival_ns"].idxmax(), ["key", "rank"]].set_index("key")["rank"]
    df["is_last"] = df["rank"].to_numpy() == df["key"].map(last_rank).to_numpy()
    dur = np.zeros(len(df))
    if modeled_ns:
        dur = np.array([modeled_ns.get((int(r), int(s)), 0.0) for r, s in zip(df["rank"], df["seq"])])
    df["modeled_ns"] = dur
    df["finish_ns"] = df["last_arrival_ns"] + df.groupby("key")["modeled_ns"].transform("max")
    df["finish_ns"] = np.maximum(df["finish_ns"].to_numpy(), df.groupby("key")["issue_end_ns"].transform("max"))
    return df.sort_values(["last_arrival_ns", "key", "rank"], kind="stable").reset_index(drop=True)


def instances(coll: pd.DataFrame) -> pd.DataFrame:
    """One row per collective instance: op, bytes, first/last arrival, the last rank, the longest wait."""
    if not len(coll):
        return pd.DataFrame(columns=["key", "op", "group", "index", "bytes", "first_arrival_ns", "last_arrival_ns",
                                     "finish_ns", "span_ns", "last_rank", "max_wait_ns", "total_wait_ns"])
    g = coll.groupby("key", sort=False)
    out = pd.DataFrame({
        "op": g["op"].first(), "group": g["group"].first(), "index": g["index"].first(), "bytes": g["bytes"].max(),
        "first_arrival_ns": g["arrival_ns"].min(), "last_arrival_ns": g["arrival_ns"].max(),
        "finish_ns": g["finish_ns"].max(), "max_wait_ns": g["wait_ns"].max(), "total_wait_ns": g["wait_ns"].sum(),
    })
    out["span_ns"] = out["finish_ns"] - out["first_arrival_ns"]
    out["last_rank"] = coll.loc[g["arrival_ns"].idxmax(), ["key", "rank"]].set_index("key")["rank"]
    return out.reset_index().sort_values("first_arrival_ns", kind="stable").reset_index(drop=True)


def find_straggler(coll: pd.DataFrame, *, min_wait_ns: float = STRAGGLER_MIN_WAIT_NS) -> Straggler | None:
    """The rank whose late arrivals make the others wait longest (None below `min_wait_ns` in total)."""
    if not len(coll):
        return None
    inst = coll.groupby("key").agg(total=("wait_ns", "sum"))
    lasts = coll[coll["is_last"]].set_index("key")
    caused = lasts.join(inst)[["rank", "op", "total"]]
    by_rank = caused.groupby("rank")["total"].sum()
    if not len(by_rank) or by_rank.max() < min_wait_ns:
        return None
    rank = int(by_rank.idxmax())
    mine = caused[caused["rank"] == rank]
    op = str(mine.groupby("op")["total"].sum().idxmax())
    share = float(len(mine)) / max(1, coll["key"].nunique())
    on_op = coll[coll["op"] == op]
    mine_cb = float(on_op.loc[on_op["rank"] == rank, "compute_before_ns"].mean())
    others = on_op.loc[on_op["rank"] != rank].groupby("rank")["compute_before_ns"].mean()
    worst_key = mine[mine["op"] == op]["total"].idxmax()
    before = coll[(coll["key"] == worst_key) & (coll["rank"] == rank)]["op_before"]
    return Straggler(rank=rank, op=op, caused_wait_ns=float(by_rank.max()), last_share=share,
                     compute_before_ns=mine_cb, others_compute_before_ns=float(others.median()) if len(others) else 0.0,
                     op_before=None if before.empty else before.iloc[0])


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not len(starts):
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    grp = np.cumsum(new) - 1
    us = s[new]
    ue = np.zeros(len(us), dtype=e.dtype)
    np.maximum.at(ue, grp, e)
    return us, ue


def _intersect_len(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    total = 0.0
    i = j = 0
    (as_, ae), (bs, be) = a, b
    while i < len(as_) and j < len(bs):
        lo, hi = max(as_[i], bs[j]), min(ae[i], be[j])
        if hi > lo:
            total += float(hi - lo)
        if ae[i] < be[j]:
            i += 1
        else:
            j += 1
    return total


def comm_overlap(timeline: pd.DataFrame, coll: pd.DataFrame) -> pd.DataFrame:
    """Per rank: time in collectives (arrival to completion) and how much of it overlaps its own compute."""
    out = []
    for rank, g in timeline.groupby("rank", sort=True):
        comp = ~is_collective(g["name"]) & ~g["is_view"].to_numpy(dtype=bool)
        cu = _union(g["t_start_ns"].to_numpy()[comp].astype(np.int64), g["t_end_ns"].to_numpy()[comp].astype(np.int64))
        c = coll[coll["rank"] == rank] if len(coll) else coll
        wu = _union(c["arrival_ns"].to_numpy(dtype=np.int64), c["finish_ns"].to_numpy(dtype=np.int64)) if len(c) \
            else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        comm = float((wu[1] - wu[0]).sum()) if len(wu[0]) else 0.0
        ov = _intersect_len(wu, cu) if comm else 0.0
        out.append({"rank": int(rank), "comm_ns": comm, "overlap_ns": ov,
                    "overlap_share": ov / comm if comm else 0.0,
                    "compute_ns": float((cu[1] - cu[0]).sum()) if len(cu[0]) else 0.0})
    return pd.DataFrame(out, columns=["rank", "comm_ns", "overlap_ns", "overlap_share", "compute_ns"])


def rank_table(timeline: pd.DataFrame, coll: pd.DataFrame, profiles: dict[int, Any] | None = None) -> pd.DataFrame:
    """Per rank: measured step time, modeled step time, MFU, collectives, bytes, wait, overlap."""
    rows = []
    ov = comm_overlap(timeline, coll).set_index("rank") if len(timeline) else pd.DataFrame()
    for rank, g in timeline.groupby("rank", sort=True):
        per_step = g.groupby("step").agg(s=("t_start_ns", "min"), e=("t_end_ns", "max"))
        step_ns = float((per_step["e"] - per_step["s"]).mean()) if len(per_step) else float("nan")
        c = coll[coll["rank"] == rank] if len(coll) else coll
        prof = (profiles or {}).get(int(rank))
        rows.append({
            "rank": int(rank), "ops": int(len(g)), "steps": int(g["step"].nunique()),
            "step_time_ns": step_ns,
            "modeled_step_time_ns": float(prof.step_time_ns) if prof is not None else float("nan"),
            "mfu": float(prof.mfu) if prof is not None else float("nan"),
            "tensor_utilization": float(prof.summary.engine_utilization.get("tensor", 0.0)) if prof is not None
            else float("nan"),
            "collectives": int(len(c)), "comm_bytes": float(c["bytes"].sum()) if len(c) else 0.0,
            "wait_ns": float(c["wait_ns"].sum()) if len(c) else 0.0,
            "last_arrivals": int(c["is_last"].sum()) if len(c) else 0,
            "comm_ns": float(ov.loc[rank, "comm_ns"]) if rank in ov.index else 0.0,
            "overlap_share": float(ov.loc[rank, "overlap_share"]) if rank in ov.index else 0.0,
        })
    return pd.DataFrame(rows)


def _modeled_collective_ns(profiles: dict[int, Any] | None) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    for rank, prof in (profiles or {}).items():
        m = prof.ops
        mask = m["op"].astype(str).str.startswith("c10d::").to_numpy() if "op" in m.columns else None
        if mask is None or not mask.any():
            continue
        sub = m[mask]
        for seq, s, e in zip(sub["seq"], sub["device_start_ns"], sub["device_end_ns"]):
            out[(int(rank), int(seq))] = float(e - s)
    return out


def analyze_ranks(traces: Sequence[Any], profiles: dict[int, Any] | None = None,
                  ranks: Sequence[int] | None = None) -> RankAnalysis:
    """Merge per-rank traces and find per-rank step time, the straggler, overlap and the slowest collective."""
    timeline = merge_ranks(traces, ranks)
    coll = collective_table(timeline, _modeled_collective_ns(profiles))
    inst = instances(coll)
    notes = []
    if any(not t.meta.get("start_wall_ns") for t in traces):
        notes.append("some ranks have no start time: their timelines are not aligned")
    rank_ids = list(ranks) if ranks is not None else [int(t.meta.get("rank", i)) for i, t in enumerate(traces)]
    if len(set(rank_ids)) < len(rank_ids):
        dup = sorted({r for r in rank_ids if rank_ids.count(r) > 1})
        notes.append(f"rank(s) {dup} appear in more than one trace: the traces are not one job's ranks")
    world = max((int(t.meta.get("world_size") or 0) for t in traces), default=0)
    if world > len(set(rank_ids)):
        notes.append(f"{len(set(rank_ids))} of {world} ranks present: figures cover these ranks only")
    slowest = None
    if len(inst):
        r = inst.loc[inst["span_ns"].idxmax()]
        slowest = {"op": str(r["op"]), "index": int(r["index"]), "group": str(r["group"]), "bytes": float(r["bytes"]),
                   "span_ns": float(r["span_ns"]), "last_rank": int(r["last_rank"]),
                   "max_wait_ns": float(r["max_wait_ns"])}
    table = rank_table(timeline, coll, profiles)
    if len(table):
        table = _measured_step_times(table, dict(zip(rank_ids, traces)))
    return RankAnalysis(ranks=table, collectives=coll, instances=inst,
                        timeline=timeline, straggler=find_straggler(coll), slowest_collective=slowest, notes=notes)


def _measured_step_times(table: pd.DataFrame, by_rank: dict[int, Any]) -> pd.DataFrame:
    """Where a rank's trace recorded ProfilerStep#N windows, its step time is their mean duration (what the
    step took on that rank), not the span of the ops it could attribute. Ranks recorded on a GPU also get
    their temporal breakdown (shares of compute / communication / memory / idle over their GPU span)."""
    from neuron_studio.profiler.analysis.gpu import gpu_activity, temporal_breakdown

    out = table.copy()
    for i, rank in enumerate(out["rank"].tolist()):
        t = by_rank.get(int(rank))
        if t is None:
            continue
        wins = (t.meta.get("imported") or {}).get("step_windows") or []
        if wins:
            out.loc[i, "step_time_ns"] = float(np.mean([w["end_ns"] - w["start_ns"] for w in wins]))
            out.loc[i, "steps"] = len(wins)
        act = gpu_activity(t.host, t.ops)
        if len(act):
            tb = temporal_breakdown(act)
            for part in ("compute", "communication", "memory", "idle"):
                out.loc[i, f"gpu_{part}_share"] = tb.share(part)
    return out
