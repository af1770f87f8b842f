"""The measured `Profile`: load one from Neuron Explorer output, or rebuild one from a stored run."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from neuron_studio.profiler.model.run_summary import RunSummary
from neuron_studio.profiler.neuron_profile.executions import FrameworkMapping
from neuron_studio.profiler.neuron_profile.mapping import trace_from_tables
from neuron_studio.profiler.neuron_profile.measured_run import MeasuredGroups, MeasuredRun
from neuron_studio.profiler.neuron_profile.read import read_tables
from neuron_studio.profiler.profile import Profile, default_kernel_lookup
from neuron_studio.profiler.trace import Trace, TraceFormatError

__all__ = ["MeasuredProfile", "load_neuron_profile", "profile_from_saved"]


class MeasuredProfile(Profile):
    """A `Profile` over measured data: same analyses; the hot path leads with the NKI kernels (file/line) the
    profile saw run each op, and the utilization timeline comes from Explorer's `ActiveTime` when present."""

    def _hot_path(self, top_share: float, max_ops: int) -> list:
        hot = super()._hot_path(top_share, max_ops)
        for h in hot:
            measured = self.device_run.kernels_for(h.op, h.module)
            if measured:
                h.kernels = measured + [k for k in h.kernels if not k.get("measured")]
        return hot

    @property
    def host_time_ns(self) -> float:
        """Host wall time per step: the span of the host events the capture recorded (torch.profiler on the
        real device, runtime/framework events of a system profile); NaN when the profile has none."""
        host = self.trace.host
        if self.trace.meta.get("figures", {}).get("host_time") != "measured" or host is None or not len(host):
            return float("nan")
        start = host["start_ns"].to_numpy(np.int64)
        end = start + host["dur_ns"].to_numpy(np.int64)
        return float(int(end.max()) - int(start.min())) / self.steps

    def engine_utilization(self, bins: int = 100) -> pd.DataFrame:
        """Busy fraction per engine per bin over the whole measured device time `[0, step time]` (Summary's
        total_time includes idle start-up), from `ActiveTime` when present, else from the op rows."""
        from neuron_studio.profiler.analysis import utilization as _util

        at = getattr(self.device_run, "active_time", None)
        step = self.summary.step_time_ns
        step = float(step) if np.isfinite(step) else 0.0
        if at is None or not len(at):
            ops = self.ops
            hi = int(max(ops["device_end_ns"].max() if len(ops) else 0, step))
            return _util.engine_utilization(ops, bins=bins, start_ns=0, end_ns=hi)
        frame = pd.DataFrame({"device_start_ns": at["start_ns"], "device_end_ns": at["end_ns"],
                              "engine": at["engine"], "core": at["core"]})
        lo = int(min(0, frame["device_start_ns"].min(), self.ops["device_start_ns"].min() if len(self.ops) else 0))
        hi = int(max(frame["device_end_ns"].max(), self.ops["device_end_ns"].max() if len(self.ops) else 0, step))
        return _util.engine_utilization(frame, bins=bins, cores=max(1, int(at["core"].nunique())), start_ns=lo,
                                        end_ns=hi)


def load_neuron_profile(path: str | Path, *, chip: str | None = None, mode: str = "eager", steps: int = 1,
                        name: str | None = None, tracking: Any = None,
                        extra_meta: Mapping[str, Any] | None = None,
                        kernel_lookup: Callable[..., list[dict]] | None = default_kernel_lookup,
                        mapping: FrameworkMapping | None = None, framework_log: Any = None,
                        compiles: pd.DataFrame | None = None) -> MeasuredProfile:
    """A measured `Profile` from Neuron Explorer output (Parquet directory, system_profile.json or
    neuron-profile JSON). `chip` overrides Metadata.instance_type; `steps` divides per-step figures;
    `tracking` (an `OpTracking`) adds the ops TorchNeuron ran on CPU as fallback rows.

    `mapping` (TorchNeuron's framework mapping, `executions.read_framework_mapping`) and `framework_log` (the
    studio's `FrameworkLog.ops` of the capture) together make the op rows the device executions, each named by its
    PyTorch op, module and source line; without both the rows come from the device profile's own names.
    `compiles`: the capture's graph compiles (`Trace.compiles`: compile mode, each with its cause)."""
    tables = read_tables(path)
    trace, run = trace_from_tables(tables, chip=chip, mode=mode, steps=steps, name=name, tracking=tracking,
                                   extra_meta=extra_meta, mapping=mapping, framework_log=framework_log,
                                   compiles=compiles)
    return MeasuredProfile(trace, run, kernel_lookup=kernel_lookup)


def profile_from_saved(trace: Trace, device_ops: pd.DataFrame | None = None, *,
                       kernel_lookup: Callable[..., list[dict]] | None = default_kernel_lookup) -> MeasuredProfile:
    """Rebuild a measured Profile from a stored run (trace tables + `device_ops`, as `save_profile` writes them).

    Needs `trace.meta["measured_summary"]`; kernels come from `trace.meta["measured_kernels"]`. The
    utilization timeline falls back to the op rows (ActiveTime is not stored)."""
    from neuron_studio.profiler.model.config import ModelConfig

    ms = trace.meta.get("measured_summary")
    if not isinstance(ms, Mapping):
        raise TraceFormatError("trace has no 'measured_summary' in its metadata: not a measured (real) run")
    fields = {f for f in RunSummary.__dataclass_fields__}
    summary = RunSummary(**{k: v for k, v in ms.items() if k in fields})
    n = len(trace.ops)
    if device_ops is not None and len(device_ops) == n:
        d = device_ops
        start, end = d["start_ns"].to_numpy(np.float64), d["end_ns"].to_numpy(np.float64)
        engine, core, bound = d["engine"].astype(str).to_numpy(object), d["core"].to_numpy(np.int64), \
            d["bound"].astype(str).to_numpy(object)
        rd, wr = d["bytes_read"].to_numpy(np.float64), d["bytes_written"].to_numpy(np.float64)
    else:
        o = trace.ops
        start = o["start_ns"].to_numpy(np.float64)
        end = start + (o["device_ns"].to_numpy(np.float64) if "device_ns" in o else 0.0)
        engine = o["engine"].astype(str).to_numpy(object) if "engine" in o else np.full(n, "none", dtype=object)
        core = o["device_index"].to_numpy(np.int64)
        bound = np.full(n, "none", dtype=object)
        rd, wr = o["in_bytes"].to_numpy(np.float64), o["out_bytes"].to_numpy(np.float64)
    dur = end - start
    fb = trace.ops["fallback"].to_numpy(object)
    ops = {"seq": trace.ops["seq"].to_numpy(np.int64), "name": trace.ops["name"].to_numpy(object), "core": core,
           "engine": engine, "start_ns": start, "end_ns": end, "duration_ns": dur,
           "compute_ns": np.where(bound == "compute", dur, 0.0), "memory_ns": np.where(bound == "memory", dur, 0.0),
           "launch_overhead_ns": np.zeros(n), "flops": trace.ops["flops"].to_numpy(np.float64), "bytes_read": rd,
           "bytes_written": wr, "bound": bound, "group": np.full(n, -1, dtype=np.int64),
           "launch": np.arange(n) == 0, "fallback": fb}
    kernels = {(k["op"], k["module"]): list(k["kernels"]) for k in trace.meta.get("measured_kernels") or []
               if isinstance(k, Mapping)}
    run = MeasuredRun(ops=ops, groups=MeasuredGroups(), summary=summary, config=ModelConfig(), kernels=kernels)
    return MeasuredProfile(trace, run, kernel_lookup=kernel_lookup)
