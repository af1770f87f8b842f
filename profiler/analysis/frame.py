"""The joined per-op frame every analysis reads: trace ops (where from) + modeled ops (what it cost), with each
op's one classification (`kind`, profiler/op_kinds.py) and the bound that follows from it."""
from __future__ import annotations

import numpy as np
import pandas as pd

from neuron_studio.profiler.model.columns import attention_flags
from neuron_studio.profiler.op_kinds import K_DEVICE, classify_ops, kind_names

__all__ = ["joined_ops", "op_kind_codes", "KIND_BOUND"]

#: The bound of an op that is not a device kernel: what limits it is what it is.
KIND_BOUND = {"host_fallback": "fallback", "host_round_trip": "host", "sync": "sync", "transfer": "transfer",
              "collective": "collective", "view": "none"}


def op_kind_codes(trace_ops: pd.DataFrame, engine: np.ndarray) -> np.ndarray:
    """`op_kinds.classify_ops` over a trace's ops table and the device run's engine per op."""
    tags = trace_ops["tags"].to_numpy() if "tags" in trace_ops else None
    attention = (np.fromiter((attention_flags(t) if isinstance(t, (str, tuple)) else 0 for t in tags),
                             dtype=np.int8, count=len(tags)) if tags is not None else None)
    no_engine = np.asarray(engine, dtype=object) == "none"
    if "is_view" in trace_ops:
        no_engine = no_engine | trace_ops["is_view"].to_numpy(bool)

    def col(name: str) -> np.ndarray | None:
        return trace_ops[name].to_numpy() if name in trace_ops else None

    return classify_ops(trace_ops["name"].to_numpy(dtype=object), no_engine=no_engine, fallback=col("fallback"),
                        sync=col("sync"), transfer=col("transfer"), attention=attention)


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
        "step": (trace_ops["step"].to_numpy() if "step" in trace_ops else np.zeros(len(trace_ops), dtype=np.int32)),
        "tags": (trace_ops["tags"].to_numpy() if "tags" in trace_ops else np.full(len(trace_ops), "", dtype=object)),
    })
    df["device_ns"] = df["device_end_ns"] - df["device_start_ns"]
    codes = op_kind_codes(trace_ops, df["engine"].to_numpy(dtype=object))
    df["kind"] = kind_names(codes)
    df["bound"] = _bound(df, m, codes)
    return df


def _bound(df: pd.DataFrame, m: pd.DataFrame, codes: np.ndarray) -> np.ndarray:
    """The model's bound for device kernels; the kind's own bound for everything else. A device op whose time
    is mostly its host-drawn random mask is host-bound; one with no engine time and no HBM traffic is bound by
    its launch (or by nothing), never "compute"."""
    bound = df["bound"].to_numpy(dtype=object).copy()
    names = kind_names(codes)
    for k, b in KIND_BOUND.items():
        bound[names == k] = b
    dev = codes == K_DEVICE
    if "compute_ns" in m and "memory_ns" in m:
        idle = dev & (m["compute_ns"].to_numpy(np.float64) <= 0) & (m["memory_ns"].to_numpy(np.float64) <= 0) \
            & np.isin(bound, ("compute", "memory"))
        bound[idle] = np.where(df["launch_ns"].to_numpy(np.float64)[idle] > 0, "launch", "none")
    return bound
