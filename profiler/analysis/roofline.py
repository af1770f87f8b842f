"""Roofline: each op's arithmetic intensity and attained FLOP/s against the chip's roofs."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["Roofs", "roofline_points"]


@dataclass(frozen=True)
class Roofs:
    peak_flops: float          # FLOP/s of the whole chip at the dominant dtype (modeled spec)
    hbm_bytes_per_s: float
    ridge_intensity: float     # FLOP/byte where the roofs meet
    chip: str


def roofline_points(ops: pd.DataFrame, roofs: Roofs) -> pd.DataFrame:
    """One point per (op, input shapes) with FLOPs: intensity = FLOPs/byte, attained = FLOPs/device time."""
    sel = ops[(ops["flops"] > 0) & (ops["device_ns"] > 0)]
    if sel.empty:
        return pd.DataFrame(columns=["op", "input_shapes", "count", "flops", "bytes", "device_ns",
                                     "intensity", "attained_flops_per_s", "roof_flops_per_s", "bound",
                                     "fraction_of_roof"])
    g = sel.groupby(["op", "input_shapes"], sort=False).agg(
        count=("seq", "size"), flops=("flops", "sum"), bytes=("bytes", "sum"), device_ns=("device_ns", "sum"),
        bound=("bound", "first")).reset_index()
    g["intensity"] = g["flops"] / np.maximum(g["bytes"], 1.0)
    g["attained_flops_per_s"] = g["flops"] / (g["device_ns"] * 1e-9)
    g["roof_flops_per_s"] = np.minimum(roofs.peak_flops, g["intensity"] * roofs.hbm_bytes_per_s)
    g["fraction_of_roof"] = np.minimum(g["attained_flops_per_s"] / g["roof_flops_per_s"], 1.0)
    return g.sort_values("device_ns", ascending=False).reset_index(drop=True)
