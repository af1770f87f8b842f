"""Engine utilization over time (binned) and in total, per NeuronCore engine."""
from __future__ import annotations

import numpy as np
import pandas as pd

from neuron_studio.profiler.analysis.binning import interval_coverage
from neuron_studio.profiler.vocabulary import DEVICE_ENGINES

__all__ = ["engine_utilization", "ENGINES"]

ENGINES = DEVICE_ENGINES


def engine_utilization(ops: pd.DataFrame, *, bins: int = 100, cores: int | None = None,
                       start_ns: int | None = None, end_ns: int | None = None) -> pd.DataFrame:
    """Fraction of each bin each engine was busy, averaged over the cores used (0..1).

    Columns: bin, start_ns, end_ns, then one column per engine. Busy intervals are clipped to bins
    exactly (no sampling), so the integral over bins equals the busy time.
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1; got {bins}")
    lo = int(ops["device_start_ns"].min()) if start_ns is None and len(ops) else int(start_ns or 0)
    hi = int(ops["device_end_ns"].max()) if end_ns is None and len(ops) else int(end_ns or 0)
    if hi <= lo:
        hi = lo + 1
    edges = np.linspace(lo, hi, bins + 1)
    ncores = cores or max(1, int(ops["core"].nunique()) if len(ops) else 1)
    width = np.diff(edges)
    out = {"bin": np.arange(bins), "start_ns": edges[:-1].astype(np.int64), "end_ns": edges[1:].astype(np.int64)}
    for eng in ENGINES:
        sel = ops[ops["engine"] == eng]
        busy = np.zeros(bins)
        if len(sel):
            s = np.clip(sel["device_start_ns"].to_numpy(np.float64), lo, hi)
            e = np.clip(sel["device_end_ns"].to_numpy(np.float64), lo, hi)
            # busy time per bin = sum over intervals of overlap; vectorised through cumulative coverage
            busy = interval_coverage(edges, s, e)
        out[eng] = np.minimum(busy / (width * ncores), 1.0)
    return pd.DataFrame(out)
