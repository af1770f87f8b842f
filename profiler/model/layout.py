"""The per-core timeline of modeled ops: launches run one after another on a core; inside one launch (an
adaptive-eager group or a compiled-graph execution) the ops are list-scheduled over the engines.

A launch starts when the previous launch on its track has ended; it first pays its launch overhead, then its ops
run. Eager launches hold one op, so they stay serial. Inside a launch of several ops, the Tensor, Vector, Scalar
and GpSimd engines, the DMA queues and the collective engine work concurrently: an op starts when the ops that
wrote its inputs have finished (the storages each op read and wrote, recorded by the device), when its engine is
free, and when HBM is free for its memory traffic (one in-order channel per core: concurrent ops share its
bandwidth, so MBU stays a fraction of it). Without dependency facts (imported traces) the ops of a launch run one
after another, as before. The algorithm is `list_schedule.ListSchedule`, which kernels.cost uses for instructions.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_studio.profiler.model.list_schedule import ListSchedule

__all__ = ["Layout", "lay_out", "COLLECTIVE_ENGINE"]

COLLECTIVE_ENGINE = "collective"   # queue key of collectives: they run on their own engine, not the DMA queues
_HBM = "hbm"


@dataclass(frozen=True)
class Layout:
    """Row times (sorted order, ns from the track's start), per-group bounds and the end of each track."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    group_start_ns: np.ndarray    # when each group's launch begins (its overhead included)
    group_end_ns: np.ndarray      # when its last op ends
    track_end_ns: np.ndarray      # end of the last group per track, tracks in sorted order


def lay_out(group: np.ndarray, track_start: np.ndarray, ovh: np.ndarray, dur: np.ndarray,
            engine: np.ndarray | None = None, hbm_ns: np.ndarray | None = None,
            reads: np.ndarray | None = None, writes: np.ndarray | None = None,
            no_engine: int = -1, collective: np.ndarray | None = None) -> Layout:
    """Lay the rows out. `group` numbers groups 0.. contiguously in row order; `track_start` marks a row that
    starts a new track (a core, or a GPU for the H100 comparison); a group never spans two tracks.

    With `engine`, `reads` and `writes`, groups holding two or more ops with a duration are list-scheduled
    (`no_engine` marks rows that occupy no engine: views; `collective` marks rows on the collective engine;
    `hbm_ns` is each row's HBM occupancy). Otherwise every group runs its rows one after another."""
    n = len(group)
    if not n:
        z = np.zeros(0)
        return Layout(z, z, z, z, z)
    step = ovh + dur
    g_first = np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1])))
    n_groups = len(g_first)
    g_last = np.concatenate((g_first[1:], [n])) - 1
    cum = np.cumsum(step)
    before = cum[g_first] - step[g_first]
    local_end = cum - before[group]
    local_start = local_end - dur
    span = cum[g_last] - before
    if engine is not None and reads is not None and writes is not None:
        busy = np.bincount(group, weights=(dur > 0).astype(np.float64), minlength=n_groups)
        for g in np.flatnonzero(busy >= 2).tolist():
            lo, hi = int(g_first[g]), int(g_last[g]) + 1
            span[g] = _schedule_group(lo, hi, ovh, dur, engine, hbm_ns, reads, writes, no_engine, collective,
                                      local_start, local_end)
    # groups one after another on each track
    t_first = np.flatnonzero(track_start[g_first])
    g_track = np.cumsum(track_start[g_first]) - 1
    cum_span = np.cumsum(span)
    track_before = cum_span[t_first] - span[t_first]
    g_end = cum_span - track_before[g_track]
    g_start = g_end - span
    start = g_start[group] + local_start
    end = g_start[group] + local_end
    t_last = np.concatenate((t_first[1:], [n_groups])) - 1
    return Layout(start_ns=start, end_ns=end, group_start_ns=g_start, group_end_ns=g_end,
                  track_end_ns=g_end[t_last])


def _schedule_group(lo: int, hi: int, ovh: np.ndarray, dur: np.ndarray, engine: np.ndarray,
                    hbm_ns: np.ndarray | None, reads: np.ndarray, writes: np.ndarray, no_engine: int,
                    collective: np.ndarray | None, local_start: np.ndarray, local_end: np.ndarray) -> float:
    """List-schedule rows lo..hi-1 of one launch after its overhead; write their group-relative times and
    return the group's span."""
    origin = float(ovh[lo:hi].sum())
    sched = ListSchedule(origin)
    durs = dur[lo:hi].tolist()
    engs = engine[lo:hi].tolist()
    hbm = hbm_ns[lo:hi].tolist() if hbm_ns is not None else [0.0] * (hi - lo)
    coll = collective[lo:hi].tolist() if collective is not None else [False] * (hi - lo)
    rds, wrs = reads[lo:hi].tolist(), writes[lo:hi].tolist()
    place = sched.place
    starts, ends = [], []
    for k in range(hi - lo):
        e = engs[k]
        s, d = place(COLLECTIVE_ENGINE if coll[k] else e, durs[k], rds[k], wrs[k], 0.0, _HBM, hbm[k], e != no_engine)
        starts.append(s)
        ends.append(d)
    local_start[lo:hi] = starts
    local_end[lo:hi] = ends
    return max(sched.end, origin)
