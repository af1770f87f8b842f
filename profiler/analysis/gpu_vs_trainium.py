"""The same job on Trainium: a GPU trace's measured time next to the NeuronCore model's estimate.

For a torch.profiler trace recorded on a GPU with `record_shapes=True`, every op the GPU ran is re-modeled
on the chosen NeuronCore (the same model as the emulated device, so the estimate is *modeled*); this module
puts the two side by side:

- per op: calls per step, measured GPU time per step (the kernels it launched), modeled Trainium time per
  step, and what the port would hit (a CPU fallback listed in the op-coverage data, a custom op with no
  Neuron lowering). Ops recorded without input shapes get no Trainium figure (None, never 0);
- per step: the measured step time (ProfilerStep windows), the GPU's busy time, the modeled Trainium step;
- cost per 1,000 steps: measured step time × the GPU's hourly price (from the specs when the recorded device
  is one it knows, or the price passed in), and the modeled Trainium step × the chip's price.

Assumptions stated with the result: one GPU maps to one Trainium chip; the Trainium figure is device time
only (the host-side Python of the step is not modeled), so it is a lower bound of the step wall time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["GpuVsTrainium", "NoDeviceActivity", "compare_gpu_trainium", "NS_PER_HOUR"]

NS_PER_HOUR = 3.6e12
_COLUMNS = ["op", "calls_per_step", "gpu_ns_per_step", "trainium_ns_per_step", "ratio", "shapes_recorded",
            "port"]


class NoDeviceActivity(ValueError):
    """The trace has no GPU (or other device) activity: there is no measured device side to compare."""


@dataclass
class GpuVsTrainium:
    gpu: str | None                       # the recorded device ("NVIDIA A100-PG509-200")
    chip: str                             # the modeled Trainium chip
    steps: int
    gpu_step_ns: float                    # measured wall time per step
    gpu_busy_ns: float                    # measured GPU activity (union) per step
    trainium_step_ns: float | None        # modeled device time per step (None without shapes)
    ops: pd.DataFrame                     # one row per op name, _COLUMNS
    port_issues: list[dict]               # fallbacks and unsupported ops the port would hit
    gpu_price_per_hour_usd: float | None
    gpu_price_source: str
    trainium_price_per_hour_usd: float
    sized_gpu_share: float                # share of the measured GPU time launched by ops with shapes
    notes: list[str] = field(default_factory=list)
    modeled: bool = True                  # the Trainium side is modeled; the GPU side measured
    device_kind: str = "GPU"              # what the recorded device is ("GPU", "MTIA", "accelerator")

    @property
    def gpu_per_1000_steps_usd(self) -> float | None:
        if self.gpu_price_per_hour_usd is None:
            return None
        return self.gpu_step_ns * 1000 / NS_PER_HOUR * self.gpu_price_per_hour_usd

    @property
    def trainium_per_1000_steps_usd(self) -> float | None:
        if self.trainium_step_ns is None:
            return None
        return self.trainium_step_ns * 1000 / NS_PER_HOUR * self.trainium_price_per_hour_usd

    def to_summary(self, top: int = 25) -> dict[str, Any]:
        rows = []
        for r in self.ops.head(top).itertuples(index=False):
            rows.append({"op": r.op, "calls_per_step": float(r.calls_per_step),
                         "gpu_ns": float(r.gpu_ns_per_step),
                         "trainium_ns": None if pd.isna(r.trainium_ns_per_step) else float(r.trainium_ns_per_step),
                         "ratio": None if pd.isna(r.ratio) else float(r.ratio),
                         "shapes_recorded": float(r.shapes_recorded), "port": r.port})
        return {
            "gpu": self.gpu, "chip": self.chip, "steps": self.steps, "gpu_step_ns": self.gpu_step_ns,
            "gpu_busy_ns": self.gpu_busy_ns, "trainium_step_ns": self.trainium_step_ns,
            "gpu_per_1000_steps_usd": self.gpu_per_1000_steps_usd,
            "trainium_per_1000_steps_usd": self.trainium_per_1000_steps_usd,
            "gpu_per_1m_steps_usd": None if self.gpu_per_1000_steps_usd is None else self.gpu_per_1000_steps_usd * 1000,
            "trainium_per_1m_steps_usd": (None if self.trainium_per_1000_steps_usd is None
                                          else self.trainium_per_1000_steps_usd * 1000),
            "gpu_price_per_hour_usd": self.gpu_price_per_hour_usd, "gpu_price_source": self.gpu_price_source,
            "trainium_price_per_hour_usd": self.trainium_price_per_hour_usd,
            "sized_gpu_share": self.sized_gpu_share, "ops": rows, "port_issues": self.port_issues[:top],
            "notes": list(self.notes), "modeled": True, "device_kind": self.device_kind,
        }


def _port_status(op: str, fallback: Any) -> str:
    if isinstance(fallback, str) and fallback:
        return f"CPU fallback: {fallback}"
    return "lowered"


def compare_gpu_trainium(ops: pd.DataFrame, gpu_per_op: pd.DataFrame, *, steps: int, gpu_step_ns: float,
                         gpu_busy_ns: float, trainium_step_ns: float, chip: str, trainium_price: float,
                         gpu: str | None, gpu_price: float | None, gpu_price_source: str,
                         explain: Any = None, device_kind: str = "GPU") -> GpuVsTrainium:
    """`ops`: the joined per-op frame (op, seq, device_ns, input_shapes, fallback); `gpu_per_op`: measured
    GPU ns per op seq (analysis.gpu.gpu_time_per_op)."""
    steps = max(1, int(steps))
    df = pd.DataFrame({"seq": ops["seq"].to_numpy(), "op": ops["op"].to_numpy(dtype=object),
                       "device_ns": ops["device_ns"].to_numpy(dtype=np.float64),
                       "sized": ops["input_shapes"].map(lambda v: isinstance(v, str)).to_numpy(dtype=bool),
                       "fallback": ops["fallback"].to_numpy(dtype=object)})
    g_ns = gpu_per_op["gpu_ns"] if len(gpu_per_op) else pd.Series(dtype=np.float64)
    df["gpu_ns"] = g_ns.reindex(df["seq"]).fillna(0.0).to_numpy(dtype=np.float64)
    df["device_sized_ns"] = np.where(df["sized"], df["device_ns"], 0.0)
    grp = df.groupby("op", sort=False)
    t = grp.agg(calls=("seq", "size"), gpu_ns=("gpu_ns", "sum"), trn_ns=("device_sized_ns", "sum"),
                sized=("sized", "mean"), fallback=("fallback", "first")).reset_index()
    out = pd.DataFrame({
        "op": t["op"], "calls_per_step": t["calls"] / steps, "gpu_ns_per_step": t["gpu_ns"] / steps,
        "trainium_ns_per_step": np.where(t["sized"] > 0, t["trn_ns"] / steps, np.nan),
        "shapes_recorded": t["sized"],
        "port": [_port_status(o, f) for o, f in zip(t["op"], t["fallback"])],
    })
    out["ratio"] = np.where((out["gpu_ns_per_step"] > 0) & out["trainium_ns_per_step"].notna(),
                            out["trainium_ns_per_step"] / out["gpu_ns_per_step"].where(out["gpu_ns_per_step"] > 0),
                            np.nan)
    out = out.sort_values(["gpu_ns_per_step", "op"], ascending=[False, True], kind="stable")[_COLUMNS]
    out = out.reset_index(drop=True)
    issues = []
    for r in t[t["fallback"].map(lambda v: isinstance(v, str) and bool(v))].itertuples(index=False):
        issues.append({"op": r.op, "count": int(r.calls), "reason": r.fallback,
                       "why": explain(r.fallback) if explain else r.fallback, "gpu_ns": float(r.gpu_ns / steps)})
    issues.sort(key=lambda d: -d["gpu_ns"])
    total_gpu = float(df["gpu_ns"].sum())
    sized_gpu = float(df.loc[df["sized"], "gpu_ns"].sum())
    any_sized = bool(df["sized"].any())
    kind = device_kind
    notes = [f"Trainium figures are modeled device time (the NeuronCore model of each recorded op); the {kind} "
             f"figures are measured. One {kind} is compared with one Trainium chip; host-side Python is not "
             "modeled, so the Trainium step is a lower bound of its wall time."]
    if not any_sized:
        notes.append("no op has recorded input shapes, so no Trainium estimate is possible: record with "
                     "torch.profiler.profile(record_shapes=True)")
    elif sized_gpu < total_gpu:
        notes.append(f"ops launching {100 * (1 - sized_gpu / total_gpu):.1f}% of the measured {kind} time have no "
                     "recorded shapes; the Trainium step leaves them out (record_shapes=True)")
    if gpu_price is None:
        notes.append(f"no hourly price known for {gpu or f'the recorded {kind}'}: pass gpu_price_per_hour= to cost "
                     f"the {kind} side")
    return GpuVsTrainium(
        gpu=gpu, chip=chip, steps=steps, gpu_step_ns=float(gpu_step_ns), gpu_busy_ns=float(gpu_busy_ns),
        trainium_step_ns=float(trainium_step_ns) if any_sized else None, ops=out, port_issues=issues,
        gpu_price_per_hour_usd=gpu_price, gpu_price_source=gpu_price_source,
        trainium_price_per_hour_usd=float(trainium_price),
        sized_gpu_share=sized_gpu / total_gpu if total_gpu else 0.0, notes=notes, device_kind=kind)
