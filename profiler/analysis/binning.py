"""Exact busy time per time bin from a set of intervals (the engine timelines' one binning helper).

numpy only, so the JupyterLab extension's server routes can load this file without importing torch.
"""
from __future__ import annotations

import numpy as np

__all__ = ["interval_coverage", "union_intervals", "SortedIntervals"]


def interval_coverage(edges: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Total overlap of the intervals [start, end) with each bin [edges[i], edges[i+1]), in O((n + bins) log n).

    covered(t) = Σ max(0, t - start) - Σ max(0, t - end); the busy time in [a, b) is covered(b) - covered(a).
    """
    def ramp_sum(points: np.ndarray) -> np.ndarray:
        pts = np.sort(points)
        prefix = np.concatenate(([0.0], np.cumsum(pts)))
        k = np.searchsorted(pts, edges, side="left")
        return k * edges - prefix[k]

    return np.diff(ramp_sum(starts) - ramp_sum(ends))


def union_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint, sorted intervals covering the same time as [starts, ends): overlapping ones counted once."""
    s = np.asarray(starts)
    e = np.asarray(ends)
    if not len(s):
        return s, e
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    grp = np.cumsum(new) - 1
    us = s[new]
    ue = np.full(len(us), -np.inf if e.dtype.kind == "f" else np.iinfo(e.dtype).min, dtype=e.dtype)
    np.maximum.at(ue, grp, e)
    return us, ue


class SortedIntervals:
    """Intervals prepared once (sorted starts and ends with exact integer prefix sums) so the busy time per
    bin of any window costs O(bins log n) instead of re-sorting: the server's cache of a run's timeline.

    Times are integer ns; the coverage at an edge t, Σ max(0, t - s), is split into an exact int64 part
    at floor(t) plus k·frac(t), so zooming to nanosecond bins on a long run loses no precision.
    """

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.origin = int(min(starts.min(), ends.min())) if starts.size else 0
        self._starts = np.sort(np.asarray(starts, dtype=np.int64) - self.origin)
        self._ends = np.sort(np.asarray(ends, dtype=np.int64) - self.origin)
        self._prefix_s = np.concatenate(([0], np.cumsum(self._starts, dtype=np.int64)))
        self._prefix_e = np.concatenate(([0], np.cumsum(self._ends, dtype=np.int64)))
        top = int(self._ends[-1]) if self._ends.size else 0
        # k·floor(t) must fit in int64 for every edge inside the data's span (edges beyond it are clamped)
        self._exact = top * max(self._starts.size, 1) < 2**62

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self._starts, self._ends, self._prefix_s, self._prefix_e))

    def _ramp(self, points: np.ndarray, prefix: np.ndarray, whole: np.ndarray, frac: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
        """Σ max(0, t - p) over p at each edge t = whole + frac, as (exact integer part, fractional part)."""
        # points are integers: p < t  <=>  p < whole + 1 when frac > 0, p < whole when frac == 0
        k = np.searchsorted(points, whole + (frac > 0), side="left")
        return k * whole - prefix[k], k * frac

    def coverage(self, lo_ns: int, rel_edges: np.ndarray) -> np.ndarray:
        """Busy time in each bin [lo + rel_edges[i], lo + rel_edges[i+1]) (integer ns origin, float offsets)."""
        rel = np.asarray(rel_edges, dtype=np.float64)
        floor = np.floor(rel)
        frac = rel - floor
        whole = floor.astype(np.int64) + (int(lo_ns) - self.origin)
        top = int(self._ends[-1]) if self._ends.size else 0
        below, above = whole < 0, whole > top  # nothing changes outside the data: clamp, keep exactness
        whole = np.clip(whole, -1, top + 1)
        frac = np.where(below | above, 0.0, frac)
        if not self._exact:
            t = whole.astype(np.float64) + frac
            s_k = np.searchsorted(self._starts, t, side="left")
            e_k = np.searchsorted(self._ends, t, side="left")
            cov = (s_k - e_k) * t - (self._prefix_s[s_k] - self._prefix_e[e_k]).astype(np.float64)
            return np.diff(cov)
        s_int, s_frac = self._ramp(self._starts, self._prefix_s, whole, frac)
        e_int, e_frac = self._ramp(self._ends, self._prefix_e, whole, frac)
        return np.diff(s_int - e_int).astype(np.float64) + np.diff(s_frac - e_frac)
