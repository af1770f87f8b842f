"""The joined per-op frame every analysis reads: trace ops (where from) + modeled ops (what it cost)."""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["joined_ops"]


def joined_ops(trace_ops: pd.DataFrame, modeled_ops: pd.DataFrame) -> pd.DataFrame:
    """Row i of both tables is the same op (the model keeps input order)."""
    if len(trace_ops) != len(modeled_ops):
        raise ValueError(f"trace has {len(trace_ops)} ops but the model returned {len(modeled_ops)}")
    m = modeled_ops.reset_index(drop=True)
    df = pd.DataFrame({
        "seq": trace_ops["seq"].to_numpy(),
        "op": trace_ops["name"].to_numpy(),
        "module": trace_ops["module"].fillna("").to_numpy(),
        "phase": trace_ops["phase"].fillna("").to_numpy(),
        "source": trace_ops["source"].to_numpy(),
        "core": m["core"].to_numpy(),
        "engine": m["engine"].to_numpy(),
        "device_start_ns": m["start_ns"].to_numpy(np.int64),
        "device_end_ns": m["end_ns"].to_numpy(np.int64),
        "host_ns": (trace_ops["end_ns"] - trace_ops["start_ns"]).to_numpy(np.int64),
        "flops": m["flops"].to_numpy(np.float64),
        "bytes": (m["bytes_read"] + m["bytes_written"]).to_numpy(np.float64),
        "bound": m["bound"].to_numpy(),
        "group": m["group"].to_numpy(),
        "launch": m["launch"].to_numpy(bool),
        "launch_ns": (m["launch_overhead_ns"].to_numpy(np.float64) if "launch_overhead_ns" in m
                      else np.zeros(len(m))),
        "fallback": trace_ops["fallback"].to_numpy(),
        "sync": trace_ops["sync"].to_numpy(),
        "transfer": trace_ops["transfer"].to_numpy(),
        "transfer_bytes": trace_ops["transfer_bytes"].to_numpy(np.float64),
        "input_shapes": trace_ops["input_shapes"].to_numpy(),
        "is_view": trace_ops["is_view"].to_numpy(bool),
        "graph": trace_ops["graph"].to_numpy(),
        "tags": (trace_ops["tags"].to_numpy() if "tags" in trace_ops else np.full(len(trace_ops), "", dtype=object)),
    })
    df["device_ns"] = df["device_end_ns"] - df["device_start_ns"]
    return df
