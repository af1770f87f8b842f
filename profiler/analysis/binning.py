"""Exact busy time per time bin from a set of intervals (the engine timelines' one binning helper).

numpy only, so the JupyterLab extension's server routes can load this file without importing torch.
"""
from __future__ import annotations

import numpy as np

__all__ = ["interval_coverage"]


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
