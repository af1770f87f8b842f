"""Hot path: the ops that account for the top share of device time, each with why it is slow.

This is the hook where kernels attach: a `kernel_lookup(op, module, module_class)` callable returns
kernel matches (runs_as / candidate with file and line) for each hot op.
"""
from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from neuron_studio.profiler.analysis.group_mode import most_common
from neuron_studio.profiler.op_kinds import KIND_INFO

__all__ = ["HotOp", "hot_path", "attach_savings", "can_change", "WHY"]

WHY = {
    "compute": "compute-bound: the Tensor/Vector engine is the limit; a better kernel (tiling, FP8, fusion) helps",
    "memory": "memory-bound: HBM traffic dominates; fuse with neighbours or keep data in SBUF",
    "launch": "launch-bound: too small to amortise the per-launch overhead; fuse (adaptive eager / compile)",
    "fallback": "CPU fallback: runs on the host plus device<->host copies; needs a lowering or an NKI kernel",
    "host": "host round trip: the host does part of the work (a 64-bit cast, a copy to the CPU and back, or a "
            "random mask drawn on the host) and copies it over; keep the dtype on the device or drop the op",
    "sync": "sync: the host waits for the device here; move .item() / .cpu() / print out of the step",
    "transfer": "host<->device transfer over the host link; create tensors on the device and keep them there",
    "collective": "collective: NeuronLink/EFA traffic; overlap it with compute or shard less",
    "none": "no device work",
}


@dataclass
class HotOp:
    op: str
    module: str
    source: str | None
    count: int
    device_ns: int
    share: float
    bound: str
    why: str
    engine: str
    kernels: list[dict] = field(default_factory=list)   # from the kernel registry, best first

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def hot_path(ops: pd.DataFrame, *, top_share: float = 0.8, max_ops: int = 10,
             kernel_lookup: Callable[[str, str], list[dict]] | None = None) -> list[HotOp]:
    """Ops (grouped by op, module and source line) covering `top_share` of device time, at most `max_ops`."""
    if not 0 < top_share <= 1:
        raise ValueError(f"top_share must be in (0, 1]; got {top_share}")
    busy = ops[ops["device_ns"] > 0]
    if busy.empty:
        return []
    keys = ["op", "module", "source"]
    grouped = busy.fillna({"source": ""}).groupby(keys, sort=False, dropna=False)
    g = grouped.agg(device_ns=("device_ns", "sum"))
    # every call of the op counts, also those the model gives 0 ns (a tiny op's whole-ns time rounds to 0 in some
    # steps and 1 in others): counting only the busy calls made the count per step depend on the steps profiled
    calls = ops.fillna({"source": ""}).groupby(keys, sort=False, dropna=False)["seq"].size()
    g.insert(0, "count", calls.reindex(g.index).to_numpy())
    g["bound"] = most_common(grouped, "bound", "none")
    g["engine"] = most_common(grouped, "engine", "none")
    g = g.reset_index()
    g = g.sort_values("device_ns", ascending=False, kind="stable").reset_index(drop=True)
    total = float(busy["device_ns"].sum())
    out: list[HotOp] = []
    acc = 0.0
    for r in g.itertuples(index=False):
        if len(out) >= max_ops or acc >= top_share * total:
            break
        acc += r.device_ns
        hot = HotOp(op=r.op, module=r.module, source=r.source or None, count=int(r.count),
                    device_ns=int(r.device_ns), share=float(r.device_ns) / total, bound=r.bound,
                    why=WHY.get(r.bound, r.bound), engine=r.engine)
        if kernel_lookup is not None:
            hot.kernels = [k for k in kernel_lookup(r.op, r.module) if can_change(k, r.op, r.bound)]
        out.append(hot)
    return out


def can_change(match: dict, op: str, bound: str) -> bool:
    """Whether a kernel match can change what bounds the op: a kernel that runs the op already always counts; a
    candidate replacing one op helps a compute-, memory-bound or CPU-fallback op, never a launch-bound one (one
    launch replaces one launch); a module-level kernel (RMSNorm, gated MLP, attention, fused Adam) replaces many
    launches with one, so it helps launch-bound ops too."""
    if match.get("kind") != "candidate":
        return True
    if bound in ("compute", "memory", "fallback"):
        return True
    return bound == "launch" and not fnmatch.fnmatchcase(op, str(match.get("pattern") or ""))


def _roofline_ns(flops: float, nbytes: float, roofs: Any) -> float:
    return max(flops / max(roofs.peak_flops, 1.0), nbytes / max(roofs.hbm_bytes_per_s, 1.0)) * 1e9


#: Op kinds (op_kinds.KINDS) that do work on the device: the ops a module-level kernel replaces.
_DEVICE_WORK_KINDS = np.array([k for k, info in KIND_INFO.items() if info.runs_on in ("device", "device+host")],
                              dtype=object)


def attach_savings(hot: list[HotOp], ops: pd.DataFrame, roofs: Any, launch_ns: float = 0.0,
                   kernel_ns: Callable[[str, float, float, int], float | None] | None = None,
                   itemsize: Any = None) -> None:
    """Modeled saving of each kernel match: matched time minus the kernel's modeled time.

    The kernel's time for the work it replaces is `kernel_ns(kernel, flops, bytes, itemsize)`: the kernel model
    scaled to that call (`kernels.kernel_call_ns`), without the launch. Without it (a kernel the kernel model
    cannot run) the roofline is used and the match says so (`k["kernel_time"] = "roofline"`). `itemsize`
    (aligned with `ops`, bytes per element of each op's first input) picks the dtype the kernel runs in; 2
    (16-bit) where it is not known.

    Op-level matches (an aten op a kernel implements) save the gap to the kernel's time for the op's own work
    (one launch either way). Module-level matches (RMSNorm, gated MLP, attention) replace every op the module
    ran: per call (a contiguous run of the module's ops), a fused kernel reads the first op's operands and
    writes the last op's results once, so the saving is the module's modeled time (with its launch overheads)
    minus the kernel's time for that call plus one launch (`launch_ns`). Never negative.
    """
    has_launch = "launch_ns" in ops
    # the columns as arrays once: a DataFrame selection per kernel match costs more than the arithmetic
    op_col = ops["op"].to_numpy(dtype=object)
    module_col = ops["module"].to_numpy(dtype=object)
    flops_col = ops["flops"].to_numpy()
    bytes_col = ops["bytes"].to_numpy()
    device_col = ops["device_ns"].to_numpy()
    seq_col = ops["seq"].to_numpy()
    launch_col = ops["launch_ns"].to_numpy() if has_launch else None
    size_col = np.full(len(ops), 2, dtype=np.int64) if itemsize is None else np.asarray(itemsize, dtype=np.int64)

    def fused_ns(kernel: str, flops: float, nbytes: float, size: int) -> tuple[float, bool]:
        t = kernel_ns(kernel, flops, nbytes, size) if kernel_ns is not None else None
        return (float(t), True) if t is not None else (_roofline_ns(flops, nbytes, roofs), False)

    # ops that do device work, by the one op classification (not by `device_ns > 0`: an op's modeled time is
    # the difference of integer ns timestamps, so a tiny op reads 0 ns in one step and 1 ns in the next, and
    # counting it by its time made a module's launches, and so its kernel saving, depend on the profiled steps)
    on_device = np.isin(ops["kind"].to_numpy(dtype=object), _DEVICE_WORK_KINDS) if "kind" in ops else None
    for h in hot:
        for k in h.kernels:
            pattern = str(k.get("pattern") or "")
            if k.get("kind") == "candidate" and not k.get("file"):
                k["saving_ns"] = None  # a kernel outside this repo (e.g. the NKI Library): not modeled here
                continue
            kernel = str(k.get("kernel"))
            if pattern.startswith("aten::") or not h.module:
                sel = (op_col == h.op) & (module_col == h.module)
                size = int(size_col[sel][0]) if sel.any() else 2
                fused, modeled = fused_ns(kernel, float(flops_col[sel].sum()), float(bytes_col[sel].sum()), size)
                spent = float(device_col[sel].sum())
                k["kernel_time"] = "kernel model" if modeled else "roofline"
                k["saving_ns"] = float(min(spent, max(0.0, spent - fused)))
                k["replaces_ns"] = spent
                k["scope"] = "op"
                continue
            prefix = _module_for_pattern(h.module, k)
            under = np.fromiter((isinstance(m, str) and (m == prefix or m.startswith(prefix + "."))
                                 for m in module_col), dtype=bool, count=len(module_col))
            if on_device is None:
                raise ValueError("module-level kernel savings need the ops' `kind` column (op_kinds)")
            if not (under & on_device).any():
                k["saving_ns"] = 0.0
                continue
            # calls: contiguous runs (by seq) of ALL the module's ops, views and other device-free ops included
            # (they launch nothing, but they are the module's and must not split one call into several)
            every = np.flatnonzero(under)
            every = every[np.argsort(seq_col[every], kind="stable")]
            gaps = np.diff(seq_col[every]) > 1
            call_of = np.concatenate([[0], np.cumsum(gaps)])
            busy = on_device[every]
            rows, call = every[busy], call_of[busy]                    # the launched ops, in launch order
            cuts = np.nonzero(np.diff(call) != 0)[0]
            starts = np.concatenate([[0], cuts + 1])
            ends = np.concatenate([cuts, [len(rows) - 1]])
            b = bytes_col[rows]
            f = flops_col[rows]
            cf = np.concatenate([[0.0], np.cumsum(f)])
            fused, modeled = 0.0, True
            for s, e in zip(starts, ends):
                t, m = fused_ns(kernel, cf[e + 1] - cf[s], b[s] + b[e], int(size_col[rows[s]]))
                fused += t + launch_ns
                modeled &= m
            k["kernel_time"] = "kernel model" if modeled else "roofline"
            spent = float(device_col[rows].sum()) + (float(launch_col[rows].sum()) if has_launch else 0.0)
            k["saving_ns"] = float(min(spent, max(0.0, spent - fused)))
            k["replaces_ns"] = spent
            k["scope"] = f"module {prefix}"


def _module_for_pattern(module: str, match: dict) -> str:
    return match.get("module_path") or module
