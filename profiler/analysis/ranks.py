"""The reduce of a many-rank job: per-rank digests (`rank_digest`) → per-rank step times, matched collectives,
clock alignment, waiting and the straggler. It reads digests only, never a rank's events, so a job of any
number of ranks costs the client a few thousand rows per rank (`job_map` runs the map).

Rank identity (`resolve_ranks`): the rank a trace's `distributedInfo` names, else its file name, else its
folder, else its position in the input order; each rank says which. Two inputs with one rank are not one
job's ranks (`TraceSetError` from the caller naming both).

Steps: only the steps every rank recorded are compared (the intersection); a rank's step time is its mean
measured step over those steps, the others are named in a note. Figures that add up over steps (waits,
collectives, bytes, the job op table) are shown per step, so they read the same however many steps were
profiled: the waits per step are those of the collectives issued inside those common steps (a collective's
step is the step window holding its arrival on each rank) divided by their number. When a rank's steps are
unknown (a torch.profiler trace without ProfilerStep annotations: `rank_digest.UNKNOWN_STEPS`) or no step was
recorded on every rank, nothing is put per step: the totals over the capture stand, and a note says so.

Clock alignment: each rank's times are on its own capture clock; `start_wall_ns` puts them on the wall clock
(`+ start_wall_ns - origin`, the origin being the job start `run_start_wall_ns`, else the earliest rank
start). Ranks on one host share that clock, across hosts it is as good as their clock sync, and a trace
without a wall-clock start cannot be placed at all. Matched collectives measure it: a collective that blocks
until every rank has arrived releases all ranks together, so its *exit* (issue end) is one instant on every
rank. Per rank, the median deviation of its exits from each collective's median exit is its clock offset.
The correction is applied only when the exits agree much better than the arrivals (`BLOCKING_RATIO`): then
the collectives provably block, and the residual skew (median over collectives of the exit spread after
correction) is stated. Otherwise (asynchronous collectives: the host op returns at once, as NCCL's do) the
exits carry the stragglers' lateness and would hide it, so the wall clock stands and the skew is stated as not
measurable from the collectives.

Collectives: the k-th collective of a given op and group on each rank is the same collective (collectives are
issued in the same order on every rank of a group): that k is its sequence number. Its *arrival* on a rank is
when that rank issued it; it can only complete once the last rank arrived, so every other rank waits
`last arrival - own arrival` for it, and that wait is attributed to the last rank. The rank whose late
arrivals cause the most waiting (at least `STRAGGLER_MIN_WAIT_PER_STEP_NS` per step, and
`STRAGGLER_MIN_WAIT_SHARE` of the waiting ranks' compute before those collectives) is the straggler; the
collective instance it delays most is named, with the compute time it spent before that collective compared
with the other ranks. Both conditions are ratios of the profiled steps' own figures, so profiling more or
fewer steps of the same job does not change the verdict; with the steps unknown only the share applies (noted).

Times are each rank's measured host timeline; the modeled device duration of a collective (NeuronLink cost,
from the model) extends its window for the overlap figure, which is resolved to the digests' activity bins.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd


__all__ = ["RankAnalysis", "Straggler", "ClockAlignment", "collective_table", "find_straggler", "rank_table",
           "analyze_ranks", "reduce_digests", "resolve_ranks", "align_clocks",
           "step_scope", "STRAGGLER_MIN_WAIT_PER_STEP_NS", "STRAGGLER_MIN_WAIT_SHARE", "BLOCKING_RATIO",
           "RankIdentityError"]

#: A rank counts as a straggler only if the waits it causes (summed over the waiting ranks) are at least this
#: per profiled step: 0.1 ms, an assumption (neither measured here nor from a published figure), a noise floor
#: for small jobs, where a few µs of arrival jitter per collective can pass the share condition below. Per step,
#: not in total: a total over the profiled steps (the old 1 ms) named a rank making the others wait 0.3 ms a step
#: a straggler at 4 profiled steps and not at 3.
STRAGGLER_MIN_WAIT_PER_STEP_NS = 100_000
#: ... and to at least this fraction of the compute the waiting ranks did before those collectives (1%, an
#: assumption): a job whose ranks arrive a few µs apart at every collective adds up past the floor over hundreds
#: of collectives, and the rank that happens to be last most often is not slowing anyone down.
STRAGGLER_MIN_WAIT_SHARE = 0.01
#: Collectives count as blocking (their exits one instant on every rank) when the median spread of their
#: exits is at most this fraction of the median spread of their arrivals.
BLOCKING_RATIO = 0.5
#: Fewest collectives matched on every rank before their exits are used to align clocks.
MIN_ALIGN_COLLECTIVES = 3


class RankIdentityError(ValueError):
    """Two inputs claim the same rank: they are not one job's ranks (the message names both)."""


@dataclass(frozen=True)
class Straggler:
    """The rank the others wait for, and where."""

    rank: int
    op: str                     # the collective it delays most ("c10d::allreduce_")
    caused_wait_ns: float       # total wait of the other ranks in collectives this rank arrived last at, over
                                # the `steps` counted (over the whole capture when `steps` is None)
    last_share: float           # fraction of collectives this rank arrived last at
    compute_before_ns: float    # its mean compute time before that collective (since its previous collective)
    others_compute_before_ns: float  # the same, median over the other ranks
    op_before: str | None = None     # the op it ran just before the most delayed collective instance
    index: int | None = None         # sequence number of the collective instance it delays most
    instance_wait_ns: float | None = None  # the others' total wait in that instance
    steps: int | None = None         # the steps the waits were counted over (None: the ranks' steps are unknown)

    @property
    def excess_compute_ns(self) -> float:
        return self.compute_before_ns - self.others_compute_before_ns

    @property
    def wait_per_step_ns(self) -> float | None:
        """The others' wait per profiled step (None when the steps are unknown)."""
        return None if not self.steps else self.caused_wait_ns / self.steps


@dataclass(frozen=True)
class ClockAlignment:
    """How the ranks were put on one clock: per rank the offset added to its own times (ns)."""

    method: str                          # "collective exits" | "wall clock" | "none"
    offsets_ns: dict[int, int]
    corrections_ns: dict[int, int]       # the part of the offsets measured from collective exits (0: not used)
    residual_skew_ns: float | None       # median exit spread after alignment; None when not measurable
    matched: int                         # collectives matched on every rank
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "residual_skew_ns": self.residual_skew_ns, "matched": self.matched,
                "detail": self.detail,
                "corrections_ns": {str(k): int(v) for k, v in sorted(self.corrections_ns.items())}}


@dataclass
class RankAnalysis:
    ranks: pd.DataFrame             # one row per rank
    collectives: pd.DataFrame       # one row per (collective instance, rank), on the aligned clock
    instances: pd.DataFrame         # one row per collective instance (matched across ranks)
    straggler: Straggler | None
    slowest_collective: dict[str, Any] | None
    alignment: ClockAlignment | None = None
    steps: dict[str, Any] = field(default_factory=dict)
    op_table: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list[str] = field(default_factory=list)
    digests: list[Any] = field(default_factory=list, repr=False)   # the reduce's input, rank order as `ranks`

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
                "op_before": s.op_before, "index": s.index, "instance_wait_ns": s.instance_wait_ns,
                "steps": s.steps, "wait_per_step_ns": s.wait_per_step_ns},
            "straggler_rule": {"min_wait_per_step_ns": STRAGGLER_MIN_WAIT_PER_STEP_NS,
                               "min_wait_share": STRAGGLER_MIN_WAIT_SHARE, "steps": self.steps.get("per_step")},
            "slowest_collective": self.slowest_collective,
            "collectives": rows(self.instances.head(50)),
            "alignment": None if self.alignment is None else self.alignment.to_dict(),
            "steps": dict(self.steps),
            "op_table": rows(self.op_table.head(20)),
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------------------------------- identity
def resolve_ranks(digests: Sequence[Any], inputs: Sequence[Any] | None = None) -> tuple[list[int], list[str],
                                                                                           list[str]]:
    """(rank, where it came from) per digest, and notes. distributedInfo > file name > folder > position."""
    ranks, sources, notes = [], [], []
    for i, d in enumerate(digests):
        inp = inputs[i] if inputs is not None else None
        named, how = (inp.name_rank, inp.name_source) if inp is not None else (None, None)
        own = d.meta.get("rank")
        if own is not None:
            src = d.meta.get("rank_source") or "trace metadata"
            if named is not None and int(named) != int(own):
                notes.append(f"{inp.label}: its {how} says rank {named} but its {src} says rank {own}; "
                             f"{src} used")
            ranks.append(int(own))
            sources.append(src)
        elif named is not None:
            ranks.append(int(named))
            sources.append(how)
        else:
            ranks.append(i)
            sources.append("input order")
    if "input order" in sources:
        notes.append(f"{sources.count('input order')} trace(s) name no rank (no distributedInfo, file or folder "
                     "name): ranked by their position in the sorted inputs")
    seen: dict[int, int] = {}
    for i, r in enumerate(ranks):
        if r in seen:
            a = inputs[seen[r]].label if inputs is not None else f"trace {seen[r]}"
            b = inputs[i].label if inputs is not None else f"trace {i}"
            raise RankIdentityError(f"{a} and {b} both are rank {r} ({sources[seen[r]]}, {sources[i]}): "
                                    "not one job's ranks")
        seen[r] = i
    return ranks, sources, notes


# ------------------------------------------------------------------------------------------- alignment
def _wall_offsets(digests: Sequence[Any], ranks: Sequence[int]) -> tuple[dict[int, int], str, str]:
    starts = [d.meta.get("start_wall_ns") for d in digests]
    if not starts or any(not s for s in starts):
        return {r: 0 for r in ranks}, "none", "some ranks have no wall-clock start: each rank's times start at " \
                                              "its own capture start"
    run_start = [int(d.meta.get("run_start_wall_ns") or 0) for d in digests]
    origin = min(r for r in run_start) if all(run_start) else min(int(s) for s in starts)
    return {r: int(s) - origin for r, s in zip(ranks, starts)}, "wall clock", \
        "each rank's wall-clock start (one host's clock; across hosts as good as their clock sync)"


def _spread(frame: pd.DataFrame, col: str) -> float:
    g = frame.groupby("key")[col]
    return float((g.max() - g.min()).median())


def align_clocks(coll: pd.DataFrame, base: dict[int, int], method: str, detail: str) -> ClockAlignment:
    """Refine the base offsets from the exits of the collectives matched on every rank (see the module doc).
    `coll` holds each rank's collectives on its own clock (columns key, rank, arrival_ns, issue_end_ns)."""
    ranks = sorted(base)
    zero = {r: 0 for r in ranks}
    if len(ranks) < 2 or not len(coll):
        return ClockAlignment(method, dict(base), zero, None, 0, detail + "; no collectives matched across ranks, "
                              "so the residual skew is not measurable")
    c = coll.assign(arrival=coll["arrival_ns"] + coll["rank"].map(base),
                    exit=coll["issue_end_ns"] + coll["rank"].map(base))
    full = c.groupby("key")["rank"].transform("nunique") == len(ranks)
    c = c[full]
    matched = int(c["key"].nunique())
    if matched < MIN_ALIGN_COLLECTIVES:
        return ClockAlignment(method, dict(base), zero, None, matched,
                              detail + f"; {matched} collective(s) matched on every rank (fewer than "
                              f"{MIN_ALIGN_COLLECTIVES}): residual skew not measurable")
    ref = c.groupby("key")["exit"].transform("median")
    corr = (c["exit"] - ref).groupby(c["rank"]).median().round().astype(np.int64)
    corr = corr - int(corr.get(ranks[0], 0))      # the lowest rank's clock is the reference
    corrected = c.assign(exit=c["exit"] - c["rank"].map(corr), arrival=c["arrival"] - c["rank"].map(corr))
    exit_spread, arrival_spread = _spread(corrected, "exit"), _spread(corrected, "arrival")
    if arrival_spread > 0 and exit_spread <= BLOCKING_RATIO * arrival_spread:
        offsets = {r: int(base[r] - int(corr.get(r, 0))) for r in ranks}
        return ClockAlignment("collective exits", offsets, {r: -int(corr.get(r, 0)) for r in ranks},
                              exit_spread, matched,
                              f"{detail}, corrected by the exits of {matched} blocking collectives matched on "
                              f"every rank (residual skew: their median exit spread)")
    return ClockAlignment(method, dict(base), zero, None, matched,
                          f"{detail}; the {matched} matched collectives do not block on the host (their exits "
                          f"spread like their arrivals), so they cannot measure the skew and were not used")


# ------------------------------------------------------------------------------------------- collectives
def collective_table(per_rank: pd.DataFrame, offsets: dict[int, int]) -> pd.DataFrame:
    """One row per (collective instance, rank) on the aligned clock: arrival, wait for the last rank."""
    cols = ["key", "op", "group", "index", "rank", "arrival_ns", "issue_end_ns", "bytes", "compute_before_ns",
            "op_before", "seq", "modeled_ns", "last_arrival_ns", "wait_ns", "is_last", "finish_ns", "step"]
    if not len(per_rank):
        return pd.DataFrame(columns=cols)
    df = per_rank.copy()
    if "step" not in df:
        df["step"] = -1
    off = df["rank"].map(offsets).astype(np.int64)
    df["arrival_ns"] = df["arrival_ns"].astype(np.int64) + off
    df["issue_end_ns"] = df["issue_end_ns"].astype(np.int64) + off
    counts = df.groupby("key")["rank"].transform("nunique")
    df = df[counts >= 2].copy()
    if not len(df):
        return pd.DataFrame(columns=cols)
    g = df.groupby("key")
    df["last_arrival_ns"] = g["arrival_ns"].transform("max")
    df["wait_ns"] = (df["last_arrival_ns"] - df["arrival_ns"]).astype(float)
    last_rank = df.loc[g["arrival_ns"].idxmax(), ["key", "rank"]].set_index("key")["rank"]
    df["is_last"] = df["rank"].to_numpy() == df["key"].map(last_rank).to_numpy()
    df["finish_ns"] = np.maximum(df["last_arrival_ns"] + g["modeled_ns"].transform("max"),
                                 g["issue_end_ns"].transform("max"))
    return df[cols].sort_values(["last_arrival_ns", "key", "rank"], kind="stable").reset_index(drop=True)


def instances(coll: pd.DataFrame) -> pd.DataFrame:
    """One row per collective instance: op, bytes, first/last arrival, the last rank, the longest wait."""
    if not len(coll):
        return pd.DataFrame(columns=["key", "op", "group", "index", "bytes", "first_arrival_ns", "last_arrival_ns",
                                     "finish_ns", "span_ns", "last_rank", "ranks", "max_wait_ns", "total_wait_ns"])
    g = coll.groupby("key", sort=False)
    out = pd.DataFrame({
        "op": g["op"].first(), "group": g["group"].first(), "index": g["index"].first(), "bytes": g["bytes"].max(),
        "first_arrival_ns": g["arrival_ns"].min(), "last_arrival_ns": g["arrival_ns"].max(),
        "finish_ns": g["finish_ns"].max(), "ranks": g["rank"].nunique(), "max_wait_ns": g["wait_ns"].max(),
        "total_wait_ns": g["wait_ns"].sum(),
    })
    out["span_ns"] = out["finish_ns"] - out["first_arrival_ns"]
    out["last_rank"] = coll.loc[g["arrival_ns"].idxmax(), ["key", "rank"]].set_index("key")["rank"]
    return out.reset_index().sort_values("first_arrival_ns", kind="stable").reset_index(drop=True)


def step_scope(coll: pd.DataFrame, common_steps: Sequence[int], unknown: Sequence[int]
               ) -> tuple[pd.DataFrame, int | None, list[str]]:
    """The collectives the per-step figures count, over how many steps, and what was left out (notes).

    Counted: the instances whose arrival lies inside one of the `common_steps` (the steps every rank recorded)
    on every rank, over `len(common_steps)` steps. With steps unknown on some rank (`unknown`: those ranks) or no
    common step, every collective is counted and the steps are None: nothing can be put per step."""
    n = int(coll["key"].nunique()) if len(coll) else 0
    if unknown:
        shown = ", ".join(str(r) for r in list(unknown)[:8]) + ("…" if len(unknown) > 8 else "")
        return coll, None, [f"rank(s) {shown} recorded no ProfilerStep annotations, so the profiled steps are "
                            "unknown: waits, collectives and bytes are totals over the capture, not per step (the "
                            "job op table counts each such rank's whole capture as one step), and the straggler "
                            "rule's per-step floor "
                            f"({STRAGGLER_MIN_WAIT_PER_STEP_NS / 1e6:g} ms per step) was not applied, only its "
                            f"share of compute ({STRAGGLER_MIN_WAIT_SHARE:.0%}). Call prof.step() once per "
                            "iteration to get per-step figures"]
    if not len(common_steps):
        return coll, None, ["no step was recorded on every rank: waits, collectives and bytes are totals over the "
                            "capture, not per step, and the straggler rule's per-step floor was not applied"]
    inside = coll["step"].isin(set(int(x) for x in common_steps)) if len(coll) else pd.Series([], dtype=bool)
    keep = inside.groupby(coll["key"]).transform("all") if len(coll) else inside
    counted = coll[keep]
    left = n - (int(counted["key"].nunique()) if len(counted) else 0)
    notes = []
    if left:
        notes.append(f"{left} of {n} collective instance(s) arrived outside the {len(common_steps)} step(s) every "
                     "rank recorded: left out of the per-step waits, collectives and bytes and of the straggler")
    return counted, len(common_steps), notes


def find_straggler(coll: pd.DataFrame, *, steps: int | None,
                   min_wait_per_step_ns: float = STRAGGLER_MIN_WAIT_PER_STEP_NS,
                   min_wait_share: float = STRAGGLER_MIN_WAIT_SHARE) -> Straggler | None:
    """The rank whose late arrivals make the others wait longest, over `coll` (the collectives of `steps`
    profiled steps, `step_scope`). None when the waits it causes are below `min_wait_per_step_ns` per step, or
    below `min_wait_share` of the compute the waiting ranks did before those collectives (arrival order then is
    noise, not a rank holding the job back). `steps` None (unknown): only the share applies."""
    if not len(coll):
        return None
    inst = coll.groupby("key").agg(total=("wait_ns", "sum"))
    lasts = coll[coll["is_last"]].set_index("key")
    caused = lasts.join(inst)[["rank", "op", "index", "total"]]
    by_rank = caused.groupby("rank")["total"].sum()
    if not len(by_rank) or (steps is not None and by_rank.max() < min_wait_per_step_ns * max(1, int(steps))):
        return None
    rank = int(by_rank.idxmax())
    mine = caused[caused["rank"] == rank]
    waiting = coll[coll["key"].isin(mine.index) & (coll["rank"] != rank)]
    if "compute_before_ns" in waiting and by_rank.max() < min_wait_share * float(waiting["compute_before_ns"].sum()):
        return None
    op = str(mine.groupby("op")["total"].sum().idxmax())
    share = float(len(mine)) / max(1, coll["key"].nunique())
    on_op = coll[coll["op"] == op]
    mine_cb = float(on_op.loc[on_op["rank"] == rank, "compute_before_ns"].mean())
    others = on_op.loc[on_op["rank"] != rank].groupby("rank")["compute_before_ns"].mean()
    worst_key = mine[mine["op"] == op]["total"].idxmax()
    before = coll[(coll["key"] == worst_key) & (coll["rank"] == rank)]["op_before"]
    return Straggler(rank=rank, op=op, caused_wait_ns=float(by_rank.max()), last_share=share,
                     compute_before_ns=mine_cb, others_compute_before_ns=float(others.median()) if len(others) else 0.0,
                     op_before=None if before.empty else before.iloc[0],
                     index=int(mine.loc[worst_key, "index"]), instance_wait_ns=float(mine.loc[worst_key, "total"]),
                     steps=None if steps is None else int(steps))


# ------------------------------------------------------------------------------------------- per rank
def _overlap(d: Any, mine: pd.DataFrame, offset: int) -> tuple[float, float]:
    """(time in collectives, the part of it overlapping the rank's compute), from its activity bins."""
    from neuron_studio.profiler.analysis.rank_digest import cumulative_busy, interval_union

    if not len(mine):
        return 0.0, 0.0
    ws, we = interval_union(mine["arrival_ns"].to_numpy(dtype=np.int64) - offset,
                            mine["finish_ns"].to_numpy(dtype=np.int64) - offset)
    comm = float((we - ws).sum())
    act = d.activity
    if not len(act):
        return comm, 0.0
    edges = np.append(act["start_ns"].to_numpy(dtype=np.int64), int(act["start_ns"].iloc[-1]) +
                      int(d.meta.get("activity_bin_ns") or 1))
    cum = np.concatenate([[0.0], np.cumsum(act["compute_ns"].to_numpy(dtype=float))])

    def busy(x: np.ndarray) -> np.ndarray:    # compute busy before x, linear within a bin
        return np.interp(x.astype(float), edges.astype(float), cum)

    inside = busy(we) - busy(ws)
    return comm, float(np.minimum(inside, we - ws).sum())


def rank_table(digests: Sequence[Any], ranks: Sequence[int], sources: Sequence[str], coll: pd.DataFrame,
               offsets: dict[int, int], common_steps: Sequence[int], counted: pd.DataFrame | None = None,
               steps: int | None = None) -> pd.DataFrame:
    """Per rank: measured step time over the common steps, modeled step time, MFU, collectives, bytes, wait,
    overlap, memory peak (and the measured GPU shares of GPU traces). Collectives, bytes and wait are totals
    over the capture and, over the `counted` collectives of `steps` steps (`step_scope`), per step (NaN when the
    steps are unknown); `last_share` is the fraction of its collectives it arrived last at."""
    rows = []
    common = set(int(s) for s in common_steps)
    counted = coll if counted is None else counted

    def per_step(v: float) -> float:
        return v / steps if steps else float("nan")

    for d, rank, src in zip(digests, ranks, sources):
        st = d.steps[d.steps["step"].isin(common)] if common else d.steps
        c = coll[coll["rank"] == rank] if len(coll) else coll
        k = counted[counted["rank"] == rank] if len(counted) else counted
        comm, ov = _overlap(d, c, offsets.get(rank, 0))
        m = d.meta
        row = {
            "rank": int(rank), "rank_source": src, "ops": int(m.get("ops") or 0), "steps": int(len(st)),
            "step_time_ns": float(st["duration_ns"].mean()) if len(st) else float("nan"),
            "modeled_step_time_ns": _num(m.get("modeled_step_time_ns")), "mfu": _num(m.get("mfu")),
            "tensor_utilization": _num(m.get("tensor_utilization")),
            "collectives": int(len(c)), "comm_bytes": float(c["bytes"].sum()) if len(c) else 0.0,
            "wait_ns": float(c["wait_ns"].sum()) if len(c) else 0.0,
            "last_arrivals": int(c["is_last"].sum()) if len(c) else 0,
            "last_share": float(c["is_last"].mean()) if len(c) else float("nan"),
            "collectives_per_step": per_step(float(len(k))),
            "comm_bytes_per_step": per_step(float(k["bytes"].sum()) if len(k) else 0.0),
            "wait_per_step_ns": per_step(float(k["wait_ns"].sum()) if len(k) else 0.0),
            "comm_ns": comm, "overlap_share": ov / comm if comm else 0.0,
            "memory_peak_bytes": _num(m.get("memory_peak_bytes")),
            "clock_offset_ns": int(offsets.get(rank, 0)),
            "first_op_ns": int(offsets.get(rank, 0)) + int(m.get("first_ns") or 0),   # on the job's clock
        }
        for part in ("compute", "communication", "memory", "idle"):
            if m.get(f"gpu_{part}_share") is not None:
                row[f"gpu_{part}_share"] = float(m[f"gpu_{part}_share"])
        rows.append(row)
    return pd.DataFrame(rows).sort_values("rank", kind="stable").reset_index(drop=True)


def _num(v: Any) -> float:
    return float("nan") if v is None else float(v)


def _unknown_steps(digests: Sequence[Any], ranks: Sequence[int]) -> list[int]:
    """The ranks whose steps are unknown (their one `steps` row is the whole capture)."""
    from neuron_studio.profiler.analysis.rank_digest import UNKNOWN_STEPS

    return [int(r) for d, r in zip(digests, ranks) if "basis" in d.steps and (d.steps["basis"] == UNKNOWN_STEPS).any()]


def _collective_steps(d: Any) -> np.ndarray:
    """Per collective of a digest, the step whose window holds its arrival (-1: outside every window)."""
    c, st = d.collectives, d.steps
    if not len(c) or not len(st):
        return np.full(len(c), -1, dtype=np.int64)
    o = np.argsort(st["start_ns"].to_numpy(dtype=np.int64), kind="stable")
    s = st["start_ns"].to_numpy(dtype=np.int64)[o]
    e = st["end_ns"].to_numpy(dtype=np.int64)[o]
    k = st["step"].to_numpy(dtype=np.int64)[o]
    a = c["arrival_ns"].to_numpy(dtype=np.int64)
    i = np.searchsorted(s, a, side="right") - 1           # the latest window starting at or before the arrival
    j = np.maximum(i, 0)
    return np.where((i >= 0) & (a <= e[j]), k[j], -1)


def _common_steps(digests: Sequence[Any], ranks: Sequence[int]) -> tuple[list[int], dict[str, Any], list[str]]:
    sets = [set(d.steps["step"].astype(int).tolist()) for d in digests]
    common = sorted(set.intersection(*sets)) if sets else []
    notes = []
    extra = {r: sorted(s - set(common)) for r, s in zip(ranks, sets) if s - set(common)}
    if extra:
        shown = ", ".join(f"rank {r}: {v[:5]}{'…' if len(v) > 5 else ''}" for r, v in list(extra.items())[:8])
        notes.append(f"steps not recorded on every rank are left out of the step times ({shown})")
    if sets and not common:
        notes.append("no step was recorded on every rank: step times use each rank's own steps")
    return common, {"common": len(common), "first": common[0] if common else None,
                    "last": common[-1] if common else None, "ranks_with_extra_steps": len(extra)}, notes


_PER_STEP = ("count", "device_ns", "host_ns", "flops", "bytes")


def _job_op_table(digests: Sequence[Any]) -> pd.DataFrame:
    """Per op name, each rank's figures per step (its totals over its profile's steps, divided by them), summed
    over the ranks: the job's per-step op table, the same however many steps each rank profiled."""
    frames = []
    for i, d in enumerate(digests):
        if not len(d.ops):
            continue
        n = max(1, int(d.meta.get("profile_steps") or 1))
        frames.append(d.ops.assign(_r=i, **{f"{c}_per_step": d.ops[c].astype(float) / n for c in _PER_STEP}))
    cols = [f"{c}_per_step" for c in _PER_STEP]
    if not frames:
        return pd.DataFrame(columns=["key", *cols, "ranks"])
    allops = pd.concat(frames, ignore_index=True)
    g = allops.groupby("key", sort=False)
    out = g.agg(**{c: (c, "sum") for c in cols}, ranks=("_r", "nunique")).reset_index()
    return out.sort_values("device_ns_per_step", ascending=False, kind="stable").reset_index(drop=True)


# ------------------------------------------------------------------------------------------- reduce
def reduce_digests(digests: Sequence[Any], inputs: Sequence[Any] | None = None) -> RankAnalysis:
    """The job analysis from its ranks' digests (see the module doc); `inputs` (the `RankInput`s, same order)
    give the ranks that file and folder names state."""
    ranks, sources, notes = resolve_ranks(digests, inputs)
    base, method, detail = _wall_offsets(digests, ranks)
    own = []
    for d, r in zip(digests, ranks):
        c = d.collectives
        if len(c):
            own.append(c.assign(rank=int(r), key=c["op"].astype(str) + "|" + c["group"].astype(str) + "|"
                                + c["index"].astype(str), step=_collective_steps(d)))
    per_rank = pd.concat(own, ignore_index=True) if own else pd.DataFrame(
        columns=["key", "rank", "op", "group", "index", "seq", "arrival_ns", "issue_end_ns", "bytes",
                 "compute_before_ns", "op_before", "modeled_ns", "step"])
    alignment = align_clocks(per_rank, base, method, detail)
    if method == "none" and alignment.method == "none":
        notes.append("some ranks have no start time and their collectives do not block: their timelines are "
                     "not aligned")
    coll = collective_table(per_rank, alignment.offsets_ns)
    inst = instances(coll)
    worlds = [int(d.meta.get("world_size") or 0) for d in digests]
    world = max(worlds, default=0)
    if world > len(set(ranks)):
        notes.append(f"{len(set(ranks))} of {world} ranks present: figures cover these ranks only")
    common, step_info, step_notes = _common_steps(digests, ranks)
    notes.extend(step_notes)
    counted, per_steps, scope_notes = step_scope(coll, common, _unknown_steps(digests, ranks))
    notes.extend(scope_notes)
    step_info["per_step"] = per_steps
    slowest = None
    if len(inst):
        r = inst.loc[inst["span_ns"].idxmax()]
        slowest = {"op": str(r["op"]), "index": int(r["index"]), "group": str(r["group"]), "bytes": float(r["bytes"]),
                   "span_ns": float(r["span_ns"]), "last_rank": int(r["last_rank"]),
                   "max_wait_ns": float(r["max_wait_ns"]), "ranks": int(r["ranks"])}
    table = rank_table(digests, ranks, sources, coll, alignment.offsets_ns, common, counted, per_steps)
    for d in digests:
        notes.extend(f"rank {d.meta.get('rank', '?')}: {n}" for n in d.notes[:3])
    by_rank = dict(zip(ranks, digests))
    return RankAnalysis(ranks=table, collectives=coll, instances=inst,
                        straggler=find_straggler(counted, steps=per_steps),
                        slowest_collective=slowest, alignment=alignment, steps=step_info,
                        op_table=_job_op_table(digests), notes=notes,
                        digests=[by_rank[r] for r in table["rank"].tolist()])


def analyze_ranks(traces: Sequence[Any], profiles: dict[int, Any] | None = None,
                  ranks: Sequence[int] | None = None) -> RankAnalysis:
    """In-process convenience over traces already in memory: digest each, then reduce. `profiles` (rank →
    Profile) add the modeled figures; `ranks` override the ranks the traces name. For a job on disk,
    `job_map.analyze_job` digests one rank at a time instead."""
    from neuron_studio.profiler.analysis.rank_digest import digest_trace

    rank_ids = list(ranks) if ranks is not None else [t.meta.get("rank", i) for i, t in enumerate(traces)]
    digests = []
    for t, r in zip(traces, rank_ids):
        d = digest_trace(t, (profiles or {}).get(int(r)) if r is not None else None)
        if ranks is not None:
            d.meta["rank"], d.meta["rank_source"] = int(r), d.meta.get("rank_source") or "given"
        elif d.meta.get("rank") is not None and not d.meta.get("rank_source"):
            d.meta["rank_source"] = "trace metadata"
        digests.append(d)
    return reduce_digests(digests)
