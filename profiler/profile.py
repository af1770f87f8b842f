"""`Profile`: a Trace plus its modeled (or measured) device timeline, and the analyses over both.

A thin facade: each method delegates to one analysis module (profiler/analysis/*) and holds the user
docs once. Results are DataFrames or small dataclasses so notebooks and CI can assert on them
(`assert prof.mfu > 0.4`).
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from neuron_studio.profiler.analysis import diff as _diff
from neuron_studio.profiler.analysis import fusion_regions as _regions
from neuron_studio.profiler.analysis import gpu as _gpu
from neuron_studio.profiler.analysis import gpu_vs_trainium as _port
from neuron_studio.profiler.analysis import trace_gaps as _gaps
from neuron_studio.profiler.analysis import hot_path as _hot
from neuron_studio.profiler.analysis import memory as _mem
from neuron_studio.profiler.analysis import memory_forecast as _fc
from neuron_studio.profiler.analysis import op_table as _table
from neuron_studio.profiler.analysis import blockers as _blockers
from neuron_studio.profiler.analysis import roofline as _roof
from neuron_studio.profiler.analysis import step_breakdown as _bd
from neuron_studio.profiler.analysis import utilization as _util
from neuron_studio.profiler.analysis import what_if as _wi
from neuron_studio.profiler.analysis.frame import joined_ops
from neuron_studio.profiler.display import display_layer
from neuron_studio.profiler.kineto import is_collective_name
from neuron_studio.profiler.display import registered as display_registered
from neuron_studio.profiler.recompile_causes import SHAPES
from neuron_studio.profiler.trace import Trace
from neuron_studio.profiler.vocabulary import module_label, source_label

__all__ = ["Profile", "Cost"]


@dataclass(frozen=True)
class Cost:
    """Modeled cost of one step and of 1,000 steps on the chip and on H100 (labelled modeled)."""

    chip: str
    step_time_ns: float
    per_step_usd: float
    per_1000_steps_usd: float
    price_per_hour_usd: float
    h100_step_time_ns: float
    h100_per_step_usd: float
    h100_per_1000_steps_usd: float
    h100_price_per_hour_usd: float
    modeled: bool = True

    @property
    def per_1m_steps_usd(self) -> float:
        """Per million steps: the unit costs are shown in (a step costs fractions of a cent)."""
        return self.per_step_usd * 1e6

    @property
    def h100_per_1m_steps_usd(self) -> float:
        return self.h100_per_step_usd * 1e6

    @property
    def ratio_vs_h100(self) -> float:
        return self.per_1000_steps_usd / self.h100_per_1000_steps_usd if self.h100_per_1000_steps_usd else float("nan")


def default_kernel_lookup(op: str, module: str, module_class: str | None = None) -> list[dict]:
    """Kernels from the registry in neuron_studio.kernels (imported lazily; the profiler works without it)."""
    try:
        from neuron_studio.kernels.registry import lookup
    except ImportError:
        return []
    from dataclasses import asdict

    return [asdict(m) for m in lookup(op, module_path=module or None, module_class=module_class)]


def default_kernel_ns(kernel: str, chip: str, flops: float, nbytes: float, itemsize: int) -> float | None:
    """A studio kernel's modeled time for a call of this size, launch excluded (None: not modeled, e.g. no
    reference call or the kernels package is unavailable)."""
    try:
        from neuron_studio.kernels.efficiency import kernel_call_ns
    except ImportError:
        return None
    try:
        return kernel_call_ns(kernel, chip, flops, nbytes, itemsize)
    except (ValueError, RuntimeError):
        return None


class Profile:
    """Analyses of one run. Build with `Profile.from_trace(trace)`."""

    def __init__(self, trace: Trace, device_run: Any, *, kernel_lookup: Callable[[str, str], list[dict]] | None = None,
                 run_id: int | None = None) -> None:
        self.trace = trace
        self.device_run = device_run  # the device timeline: modeled (model_run) or measured on hardware
        self.kernel_lookup = kernel_lookup
        self.run_id = run_id
        self.summary_payload: dict[str, Any] | None = None  # set by the magic: summary with run context
        self._hot_cache: dict[tuple[float, int], list] = {}
        self._op_tables: dict[tuple[str, str], pd.DataFrame] = {}  # the summary and compare both read it
        self._memory_peaks: dict[int | None, pd.DataFrame] = {}
        self._gpu_activity: pd.DataFrame | None = None
        self._breakdown: _bd.StepBreakdown | None = None
        # what-if re-modeling, shared by the advisor and the breakdown's recommendation (both in every summary):
        # per set of re-modeled steps (`what_if.remodel_steps`; () = every step) their ops, the ops each mode is
        # modeled from and the code changes; the model columns and each (mode, chip) variant, keyed by the
        # identity of the ops frame they came from (a frame passed in from outside is never matched)
        self._step_ops_cache: dict[tuple[int, ...], tuple[pd.DataFrame, Any]] = {}
        self._mode_ops: dict[tuple[str, tuple[int, ...]], tuple[pd.DataFrame, str]] = {}
        self._remodel_columns: dict[int, tuple[pd.DataFrame, Any]] = {}
        self._variants: dict[tuple[str, str, int, int], tuple[pd.DataFrame, _wi.Variant]] = {}
        self._code_changes: dict[tuple[int, ...], list] = {}
        self.ops = joined_ops(trace.ops, device_run.ops_frame())
        self.ops["region_splits"] = _regions.region_boundary_counts(device_run.groups, self.ops)

    @classmethod
    def from_trace(cls, trace: Trace, *, chip: str | None = None, mode: str | None = None, config: Any = None,
                   kernel_lookup: Callable[[str, str], list[dict]] | None = default_kernel_lookup) -> "Profile":
        from neuron_studio.profiler.model import model_run

        recompiles = int(trace.compiles["recompile"].sum()) if len(trace.compiles) else 0
        switches = trace.meta.get("adaptive_switches") or {}
        if config is None and switches:   # TorchNeuron's adaptive-eager switches the run was captured under
            from neuron_studio.profiler.model import ModelConfig

            config = ModelConfig().replace(**switches)
        device_run = model_run(trace.ops, chip=chip or trace.chip, mode=mode or trace.mode, config=config,
                               recompiles=recompiles, world_size=int(trace.meta.get("world_size", 1) or 1),
                               local_world_size=int(trace.meta.get("local_world_size", 0) or 0) or None)
        return cls(trace, device_run, kernel_lookup=kernel_lookup)

    # -- headline figures --------------------------------------------------------------------------
    @property
    def summary(self) -> Any:
        return self.device_run.summary

    @property
    def steps(self) -> int:
        return self.trace.steps

    @property
    def step_time_ns(self) -> float:
        """Modeled device time of one steady-state step on the chosen chip."""
        return self.summary.step_time_ns / self.steps

    @property
    def host_time_ns(self) -> float:
        """Measured host wall time per step: the mean of the profiled steps' windows (step mark to step mark, or
        ProfilerStep#N), so time a step spends outside its ops (a sleep, data loading) counts and ops outside
        the steps do not; without marked steps, from the first to the last recorded op."""
        wins = _gpu.step_windows(self.trace.meta)
        if len(wins):
            return float(wins["dur_ns"].mean())
        ops = self.trace.ops
        if len(ops):
            return float(ops["end_ns"].max() - ops["start_ns"].min()) / self.steps
        return float(self.trace.meta.get("wall_ns", 0)) / self.steps

    @property
    def mfu(self) -> float:
        return self.summary.mfu

    @property
    def mbu(self) -> float:
        return self.summary.mbu

    @property
    def launches_per_step(self) -> float:
        return self.summary.launches / self.steps

    @property
    def modeled_figures(self) -> bool:
        return self.trace.meta.get("figures", {}).get("device_time", "modeled") == "modeled"

    def module_label(self, module: Any) -> str:
        """An op's module as every view shows it (`vocabulary.module_label`): an empty one is "top level" where the
        studio's module tracker saw every module call (eager and adaptive captures), "—" where it cannot tell
        (compile mode's graphs record no module; a trace imported from elsewhere)."""
        known = self.trace.mode != "compile" and not (
            self.trace.meta.get("backend") == "imported" or isinstance(self.trace.meta.get("imported"), dict))
        return module_label(module, top_level_known=known)

    # -- analyses ----------------------------------------------------------------------------------
    def op_table(self, by: str = "op", *, sort: str = "device_ns", top: int | None = None) -> pd.DataFrame:
        """Per op (or module path): count, modeled device time, measured host time, FLOPs, bytes, share.
        On an imported trace whose ops were recorded without shapes the model cannot size them, so the table
        ranks by what was measured (`measured_ns`: GPU time the op launched, or its host time on a CPU-only
        trace), `share` is of that, and `table.attrs["basis"]` says which (as `hot_basis`)."""
        if (by, sort) not in self._op_tables:
            basis = self.hot_basis
            measured = self._measured_ns() if basis != _gaps.MODELED else None
            self._op_tables[(by, sort)] = _table.op_table(self.ops, by=by, steps=self.steps, sort=sort,
                                                          measured_ns=measured, basis=basis)
        table = self._op_tables[(by, sort)]
        out = (table.head(top) if top else table).copy()
        out.attrs["basis"] = table.attrs.get("basis", _gaps.MODELED)
        return out

    def _measured_ns(self) -> pd.Series:
        """Per op row: the measured time the op stands for (GPU time it launched, else its host time)."""
        if self.hot_basis == _gaps.MEASURED_GPU:
            per_op = _gpu.gpu_time_per_op(self.gpu_activity())["gpu_ns"]
            return pd.Series(per_op.reindex(self.ops["seq"]).fillna(0).to_numpy(dtype="int64"), index=self.ops.index)
        return self.ops["host_ns"]

    def module_tree(self) -> pd.DataFrame:
        """Per module path (depth, per-step calls, self and total device time, FLOPs, bytes, share), each module
        named as every view names it (top level, backward pass)."""
        return _table.module_tree(self.ops, steps=self.steps, label=self.module_label)

    def engine_utilization(self, bins: int = 100) -> pd.DataFrame:
        return _util.engine_utilization(self.ops, bins=bins)

    def engine_totals(self) -> dict[str, float]:
        return dict(self.summary.engine_utilization)

    def roofs(self) -> _roof.Roofs:
        s = self.summary
        return _roof.Roofs(peak_flops=s.peak_flops_per_s, hbm_bytes_per_s=s.hbm_bytes_per_s,
                           ridge_intensity=s.peak_flops_per_s / max(s.hbm_bytes_per_s, 1.0), chip=s.chip)

    def roofline(self) -> pd.DataFrame:
        return _roof.roofline_points(self.ops, self.roofs())

    def hot_path(self, top_share: float = 0.8, max_ops: int = 10) -> list[_hot.HotOp]:
        """Ops covering `top_share` of device time, with the NKI kernel that runs or could replace each."""
        key = (top_share, max_ops)
        if key not in self._hot_cache:  # per instance: a functools.cache would keep every profile alive
            self._hot_cache[key] = self._hot_path(top_share, max_ops)
        return self._hot_cache[key]

    def _hot_path(self, top_share: float, max_ops: int) -> list[_hot.HotOp]:
        lookup = None
        if self.kernel_lookup is not None:
            classes = self.trace.meta.get("module_classes", {}) or {}

            def lookup(op: str, module: str) -> list[dict]:
                # the innermost enclosing module whose class has a kernel wins (RMSNorm, MLP, Attention, ...);
                # a backward op belongs to its forward module
                module = module.removesuffix(" (backward)").removesuffix("(backward)")
                parts = module.split(".") if module else []
                for i in range(len(parts), 0, -1):
                    path = ".".join(parts[:i])
                    found = self.kernel_lookup(op, path, classes.get(path))
                    if found:
                        for k in found:
                            k.setdefault("module_path", path)
                        return found
                return self.kernel_lookup(op, "", None)

        basis = self.hot_basis
        if basis != _gaps.MODELED:       # ops without shapes: rank by what was measured, never by zeros
            measured = self.ops.copy()
            measured["device_ns"] = self._measured_ns().to_numpy(dtype="int64")
            measured["engine"] = "gpu" if basis == _gaps.MEASURED_GPU else "host"
            measured["bound"] = "measured"
            return _hot.hot_path(measured, top_share=top_share, max_ops=max_ops, kernel_lookup=lookup)
        hot = _hot.hot_path(self.ops, top_share=top_share, max_ops=max_ops, kernel_lookup=lookup)
        chip = self.trace.chip
        sizes = self.trace.ops.set_index("seq")["itemsize"] if "itemsize" in self.trace.ops else None
        itemsize = None if sizes is None else sizes.reindex(self.ops["seq"]).fillna(2).to_numpy(dtype="int64")
        _hot.attach_savings(hot, self.ops, self.roofs(), launch_ns=self.device_run.config.launch_overhead_ns(
            self.trace.mode), kernel_ns=lambda k, f, b, i: default_kernel_ns(k, chip, f, b, i), itemsize=itemsize)
        for h in hot:   # a candidate the model shows saving nothing cannot change the op's bound: not a candidate
            h.kernels = [k for k in h.kernels if not (k.get("kind") == "candidate" and k.get("saving_ns") == 0.0)]
        return hot

    @property
    def hot_basis(self) -> str:
        """What the hot path ranks by: "modeled device time", or measured GPU/host time when the trace's ops
        were recorded without shapes (see analysis.trace_gaps)."""
        act = self.gpu_activity()
        linked = float(act.loc[act["op_seq"] >= 0, "dur_ns"].sum()) if len(act) else 0.0
        return _gaps.hot_basis(self.trace.meta, self.trace.ops, linked)

    def data_gaps(self) -> list[str]:
        """What this (imported) trace lacks for the analyses, each naming how to record it."""
        return _gaps.trace_gaps(self.trace.meta, self.trace.ops, self.gpu_activity())

    # -- GPU traces (torch.profiler traces recorded on CUDA/ROCm) --------------------------------------
    @property
    def device_kind(self) -> str | None:
        """What ran an imported trace's device activity, as it is named ("GPU", "MTIA", "accelerator"); None
        for a CPU-only trace or a studio run."""
        imp = self.trace.meta.get("imported") or {}
        if "device_kind" in imp:
            return imp["device_kind"]
        return "GPU" if len(self.gpu_activity()) else None

    def gpu_activity(self) -> pd.DataFrame:
        """Every GPU kernel, memcpy and memset, with its kind and the op that launched it (correlation ids)."""
        if self._gpu_activity is None:
            self._gpu_activity = _gpu.gpu_activity(self.trace.host, self.trace.ops)
        return self._gpu_activity

    def gpu_time_per_op(self) -> pd.DataFrame:
        """Measured GPU time launched by each op (indexed by op seq)."""
        return _gpu.gpu_time_per_op(self.gpu_activity())

    def kernel_breakdown(self, top: int | None = 20) -> pd.DataFrame:
        """GPU time by kernel name (count, total, mean, share, kind)."""
        return _gpu.kernel_breakdown(self.gpu_activity(), top=top)

    def temporal_breakdown(self) -> _gpu.TemporalBreakdown:
        """GPU time split into compute / communication / memory / idle over the trace's GPU span."""
        return _gpu.temporal_breakdown(self.gpu_activity())

    def gpu_vs_trainium(self, *, gpu_price_per_hour: float | None = None) -> _port.GpuVsTrainium:
        """The same job on Trainium: measured GPU time per op and per step next to the NeuronCore model's
        estimate, the fallbacks the port would hit, and cost per 1,000 steps on both."""
        from neuron_studio.hardware.specs import gpu_price_for

        act = self.gpu_activity()
        if not len(act):
            raise _port.NoDeviceActivity(
                "this trace has no GPU activity (no kernel, memcpy or memset events): a CPU-only trace has no "
                "measured device step to compare with Trainium; record with ProfilerActivity.CUDA on a GPU run")
        wins = _gpu.step_windows(self.trace.meta)
        steps = max(1, len(wins)) if len(wins) else self.steps
        if len(wins):
            step_ns = float(wins["dur_ns"].mean())
            in_steps = act[(act["start_ns"] >= wins["start_ns"].min()) & (act["start_ns"] < wins["end_ns"].max())]
        else:
            step_ns = float(_gpu.temporal_breakdown(act).span_ns)
            in_steps = act
        busy = _gpu.temporal_breakdown(in_steps)
        busy_ns = (busy.span_ns - busy.idle_ns) / steps
        devices = (self.trace.meta.get("imported") or {}).get("devices") or []
        gpu_name = devices[0].get("name") if devices else None
        price, source = (gpu_price_per_hour, "given") if gpu_price_per_hour is not None else gpu_price_for(gpu_name)
        cost = self.cost()
        explain = None
        try:
            from neuron_studio.device.coverage import op_coverage
            explain = op_coverage().explain
        except ImportError:  # pragma: no cover - the device package ships with the studio
            pass
        return _port.compare_gpu_trainium(
            self.ops, _gpu.gpu_time_per_op(act), steps=steps, gpu_step_ns=step_ns, gpu_busy_ns=busy_ns,
            trainium_step_ns=cost.step_time_ns, chip=cost.chip, trainium_price=cost.price_per_hour_usd,
            gpu=gpu_name, gpu_price=price, gpu_price_source=source, explain=explain,
            device_kind=self.device_kind or "GPU")

    def step_breakdown(self) -> _bd.StepBreakdown:
        """Where the step time goes: engine compute (overlapped engines once), collectives, CPU fallbacks, sync
        stalls, host<->device transfers, launch overhead and idle, adding up to the step time; per step in
        `.per_step`; the one or two changes it implies in `.recommendations`. On an imported GPU trace the
        measured GPU time per ProfilerStep; categories the data cannot tell are marked not determined."""
        if self._breakdown is None:
            self._breakdown = self._step_breakdown()
        return self._breakdown

    def _step_breakdown(self) -> _bd.StepBreakdown:
        import dataclasses

        act = self.gpu_activity()
        if len(act):
            return _bd.gpu_breakdown(act, _gpu.step_windows(self.trace.meta))
        if self.hot_basis == _gaps.MEASURED_HOST and len(self.trace.ops):
            # a CPU-only trace (no device activity; e.g. a gloo job) recorded without shapes: its measured host time
            names = self.trace.ops["name"].astype(str)
            return _bd.host_breakdown(self.trace.ops, _gpu.step_windows(self.trace.meta),
                                      names.map(is_collective_name).to_numpy(dtype=bool))
        if self.hot_basis != _gaps.MODELED:
            return _bd.unavailable_breakdown(
                "the trace's ops were recorded without input shapes and it has no GPU activity, so neither a "
                "modeled nor a measured device timeline exists; record with torch.profiler.profile("
                "record_shapes=True)")
        undetermined = {} if self.modeled_figures else _bd.MEASURED_UNDETERMINED
        bd, rows = _bd.modeled_breakdown(
            self.device_run.ops_frame(), self.trace.ops, steps=self.steps, step_time_ns=self.summary.step_time_ns,
            basis="modeled device time" if self.modeled_figures else "measured device time",
            undetermined=undetermined, kinds=self.ops["kind"].to_numpy(dtype=object))
        fb = self.cpu_fallbacks()
        advice = self.advice()
        # a first row that stops recompiles (compile time, not a step-time part) leads with the recompile
        # recommendation; the step-time parts name the rows after it
        lead = advice[0] if advice and advice[0].get("compiles") is not None else None
        recs = _bd.recommend(bd, rows, mode=self.trace.mode, launches_per_step=self.launches_per_step,
                             hot=self.hot_path() if self.modeled_figures else (),
                             fallback_ops=fb.loc[fb["kind"] == "host_fallback", "op"].tolist() if len(fb) else (),
                             fallback_reasons=dict(zip(fb["op"], fb["reason"])) if len(fb) else None,
                             advice=[a for a in advice if a is not lead] if advice is not None else None)
        rc = self.recompiles()
        if self.trace.mode == "compile" and len(rc):
            per = getattr(self.device_run.config, "compile_time_per_graph_ns", None)
            by_shape = rc["cause"] == SHAPES
            rec = _bd.recompile_recommendation(rc.loc[by_shape, "shapes"].astype(str).tolist(), per, lead,
                                               _blockers.shape_compiles(self.trace.compiles)["shapes"].astype(str).tolist())
            if rec is not None:
                recs = [rec] + recs if lead is not None else recs + [rec]
            other = _bd.guard_recompile_recommendation(rc.loc[~by_shape, "cause"].tolist(), per)
            if other is not None:
                recs = recs + [other]
        return dataclasses.replace(bd, recommendations=recs, notes=list(bd.notes) + self._outside_graph_notes())

    def _outside_graph_notes(self) -> list[str]:
        """Compile mode: the launches that ran outside the compiled graphs (between graph breaks), per step, and
        the breaks that put them there."""
        if self.trace.mode != "compile":
            return []
        ops = self.ops
        outside = ops["launch"].to_numpy(bool) & (ops["graph"].to_numpy() < 0)
        if not outside.any():
            return []
        gb = self.graph_breaks()
        where = "; ".join(f"{source_label(r.source) or '?'} ({r.reason})" for r in gb.head(3).itertuples(index=False))
        return [f"{outside.sum() / self.steps:.0f} launch(es) per step run outside the compiled graphs, eagerly"
                + (f": graph breaks at {where}" if where else "") + " → remove the breaks so those ops join a graph"]

    def advice(self) -> list[dict] | None:
        """The what-if rows on the profiled chip in the advisor's ranking (`what_if.rank_rows`, best first), as the
        breakdown's recommendations and the What if line both read them: re-modeled, as in the summary, from the
        first whole steps within REMODEL_MAX_OPS ops (`what_if(max_ops=...)`); None when one step is already more
        than that, or the run cannot be re-modeled."""
        if self.hot_basis != _gaps.MODELED:
            return None
        try:
            wi = self.what_if(chips=[self.summary.chip], max_ops=_wi.REMODEL_MAX_OPS)
        except _wi.WhatIfError:
            return None
        ranked = wi[wi["rank"].notna()].sort_values("rank")
        changes = {c.variant: c for c in self.code_changes(max_ops=_wi.REMODEL_MAX_OPS)}
        device_ops = self.device_run.ops_frame() if changes else None

        def cites(c: Any) -> dict:
            # what the change acts on, as the bar's reason cites it (its ops' share of the step and their line)
            if c is None:
                return {"addresses": None}
            scope = _bd.change_scope(device_ops, self.trace.ops, c.targets, steps=self.steps,
                                     step_time_ns=self.summary.step_time_ns)
            return {"addresses": c.addresses, "acts_on": c.acts_on, "scope": scope,
                    "target_ops": sorted({op for op, _ in c.targets})}

        return [{**r, **cites(changes.get(r["variant"]))} for r in ranked.to_dict("records")]

    def what_if(self, modes: Sequence[str] | None = None, chips: Sequence[str] | None = None,
                kernels: bool | Sequence[str] = True, changes: bool = True, *, max_ops: int | None = None
                ) -> pd.DataFrame:
        """The recorded ops re-modeled, without rerunning: each mode (eager / adaptive / compile) on each chip
        (trn1 / trn2 / trn3), each one-line PyTorch change that applies (fused optimizer, bf16 autocast, host syncs
        out of the step; `changes=False` for none) and each NKI kernel the hot path suggests swapped in
        (`kernels=False` for none, or kernel names). Per step: modeled step time with its low/high range under the
        unmeasured assumptions, MFU, cost per million steps, the line that runs the variant for real (a
        `%%neuron` line, the code line and `where` it goes, a kernel swap), `rank`: the advice order (1 first;
        none for rows that are not advice, `why_not` says why), `cell`:
        for a profile of a `%%neuron` cell, the whole cell that runs it (the profiled cell with that change), and
        `basis`: how well the re-modeling is known (exact under the model, or approximate and why). The row
        with `current` True is this profile's own figures.

        `max_ops` (the summary passes REMODEL_MAX_OPS): re-model at most this many ops, the first whole profiled
        steps within it, and scale the re-modeled rows by this profile's mean step over those steps' own modeled
        step (as a measured profile's rows are scaled), so the figures do not depend on how many steps were
        profiled; `.attrs["remodeled_steps"]` names the steps (() = all) and `.attrs["scope_note"]` says it. A
        WhatIfError when one step alone is more than `max_ops`. Default: every step."""
        from neuron_studio.hardware import trainium_chips
        from neuron_studio.profiler.vocabulary import MODES

        if self.hot_basis != _gaps.MODELED:
            raise _wi.WhatIfError("this trace's ops were recorded without input shapes, so the NeuronCore model "
                                  "cannot re-model them; record with torch.profiler.profile(record_shapes=True)")
        measured = not self.modeled_figures
        if self.summary.chip not in trainium_chips():
            raise _wi.WhatIfError(f"the profiled chip is {self.summary.chip!r}, not one the model knows "
                                  f"({', '.join(trainium_chips())}); load the profile with chip=... to compare")
        modes = tuple(modes) if modes is not None else ((self.summary.mode,) if measured else MODES)
        if measured and set(modes) - {self.summary.mode}:
            raise _wi.WhatIfError(
                f"this profile was measured in {self.summary.mode} mode; its device rows are what that mode ran, so "
                "another mode cannot be re-modeled from them. Profile the cell in that mode, or on the emulator")
        chips = tuple(c.lower() for c in chips) if chips is not None else trainium_chips()
        bad = [m for m in modes if m not in MODES] + [c for c in chips if c not in trainium_chips()]
        if bad:
            raise _wi.WhatIfError(f"unknown mode/chip {bad}; modes: {', '.join(MODES)}; chips: "
                                  f"{', '.join(trainium_chips())}")
        scope = self._remodel_steps(max_ops)
        s, n, cost = self.summary, self.steps, self.cost()
        own = _wi.Variant(s.mode, s.chip, self.step_time_ns,
                          s.step_time_low_ns / n if s.step_time_high_ns > 0 else None,
                          s.step_time_high_ns / n if s.step_time_high_ns > 0 else None, s.mfu, cost.per_1m_steps_usd)
        saves: list[dict] = []
        if kernels and self.modeled_figures:
            try:
                from neuron_studio.kernels.swap import SWAPPABLE
                swappable: tuple[str, ...] = tuple(SWAPPABLE)
            except ImportError:  # pragma: no cover - the kernels package ships with the studio
                swappable = ()
            saves = _wi.kernel_savings(self.hot_path(), n, swappable, None if kernels is True else list(kernels))
        ops = self._step_ops(scope)[0]
        per = len(scope.steps) or n

        def remodel(o: pd.DataFrame, mode: str, chip: str) -> _wi.Variant:
            return self._remodel_variant(o, mode, chip, steps=per)

        model = remodel
        if measured or not scope.every_step:
            # a measured profile: the measured step scaled by the model's ratio between the chips (and modes); some
            # steps of a modeled one: by the ratio to those steps modeled as profiled
            model = _wi.scaled_to(own, remodel(ops, s.mode, s.chip), remodel)
        meta = self.trace.meta
        command = meta.get("cli_command") if isinstance(meta.get("cli_command"), list) else None
        api_call = meta.get("api_call") if isinstance(meta.get("api_call"), dict) else None
        df = _wi.what_if_frame(own, modes=modes, chips=chips, recorded_mode=self.trace.mode,
                               trace_ops=ops, model=model, kernel_savings=saves,
                               changes=self.code_changes(max_ops=max_ops) if changes and not measured else (), steps=n,
                               warmup=meta.get("warmup"), measured=measured, cell=meta.get("cell"),
                               run_id=self.run_id, ops_for=lambda mode: self._ops_for_mode(mode, scope),
                               command=command, api_call=api_call, compile_why_not=self._compile_why_not(),
                               compiles=self._recompiling_compiles())
        df.attrs["remodeled_steps"] = scope.steps
        df.attrs["scope_note"] = scope.note
        return df

    def _remodel_steps(self, max_ops: int | None) -> _wi.RemodelSteps:
        """The profiled steps a what-if re-models within `max_ops` ops (`what_if.remodel_steps`)."""
        ops = self.trace.ops
        step = ops["step"].to_numpy() if "step" in ops else np.zeros(len(ops), dtype=np.int64)
        return _wi.remodel_steps(step, self.steps, max_ops)

    def _step_ops(self, scope: _wi.RemodelSteps) -> tuple[pd.DataFrame, Any]:
        """The recorded ops of the re-modeled steps, and their kinds (`_op_kinds`); once per set of steps."""
        if scope.every_step:
            return self.trace.ops, self._op_kinds()
        if scope.steps not in self._step_ops_cache:
            keep = self.trace.ops["step"].isin(scope.steps).to_numpy()
            kinds = self._op_kinds()
            self._step_ops_cache[scope.steps] = (self.trace.ops[keep].reset_index(drop=True),
                                                 None if kinds is None else kinds[keep])
        return self._step_ops_cache[scope.steps]

    def code_changes(self, *, max_ops: int | None = None) -> list:
        """The one-line PyTorch changes that apply to this run (fused optimizer, bf16 autocast, host syncs out of the
        step), each with the ops it would run (`analysis.code_changes`); built once. `max_ops`: of the steps
        `what_if(max_ops=...)` re-models (their ops; compiles still counted over every step)."""
        scope = self._remodel_steps(max_ops)
        if scope.steps not in self._code_changes:
            from neuron_studio.profiler.analysis import code_changes as _cc

            ops, kinds = self._step_ops(scope)
            self._code_changes[scope.steps] = _cc.code_changes(
                ops, cell=self.trace.meta.get("cell"), run_id=self.run_id, kinds=kinds,
                compiles=self.trace.compiles if self.trace.mode == "compile" else None,
                all_steps=None if scope.every_step else self.trace.ops)
        return self._code_changes[scope.steps]

    def _op_kinds(self) -> Any:
        """Each recorded op's kind (`profiler.op_kinds`, row i of `trace.ops`), or None when the joined ops do not
        line up with the recorded ones."""
        kinds = self.ops["kind"].to_numpy(dtype=object) if "kind" in self.ops else None
        return kinds if kinds is not None and len(kinds) == len(self.trace.ops) else None

    def _recompiling_compiles(self) -> int | None:
        """The graph compiles of a compile-mode profile that recompiled (the what-if's `compiles`), else None."""
        c = self.trace.compiles
        if self.trace.mode != "compile" or not len(_blockers.shape_recompiles(c)):
            return None
        return int(len(c))

    def _compile_why_not(self) -> str | None:
        """Why torch.compile is not advice for this run (shapes that are not static), or None."""
        from neuron_studio.profiler.analysis.code_changes import data_dependent_ops

        dd = data_dependent_ops(self.trace.ops, self._op_kinds())
        rc = len(_blockers.shape_recompiles(self.trace.compiles))   # other recompiles say nothing of shapes
        if not dd and not rc:
            return None
        said = []
        if dd:
            said.append(f"data-dependent output shapes ({', '.join(dd[:4])})")
        if rc:
            said.append(f"{rc} recompile{'s' if rc != 1 else ''} for new input shapes")
        return ("shapes are not static: " + " and ".join(said) + "; compile would break or recompile there "
                "(pad inputs to a few bucket shapes, replace boolean masking/nonzero with torch.where first)")

    def _ops_for_mode(self, mode: str, scope: _wi.RemodelSteps | None = None) -> tuple[pd.DataFrame, str]:
        """The recorded ops (of the re-modeled steps: `scope`, default all) as the model sees them in `mode`
        (`what_if.ops_for_mode`), built once per mode and steps."""
        steps = scope.steps if scope is not None else ()
        if (mode, steps) not in self._mode_ops:
            ops = self._step_ops(scope)[0] if scope is not None else self.trace.ops
            self._mode_ops[(mode, steps)] = _wi.ops_for_mode(ops, self.trace.mode, mode)
        return self._mode_ops[(mode, steps)]

    def _remodel_variant(self, ops: pd.DataFrame, mode: str, chip: str, steps: int | None = None) -> _wi.Variant:
        """`_remodel`, once per (mode, chip) for the same ops frame: the advisor and the breakdown's
        recommendation ask for the same variants."""
        key = (mode, chip, id(ops), steps or self.steps)
        hit = self._variants.get(key)
        if hit is not None and hit[0] is ops:
            return hit[1]
        v = self._remodel(ops, mode, chip, steps)
        self._variants[key] = (ops, v)
        return v

    def _remodel(self, ops: pd.DataFrame, mode: str, chip: str, steps: int | None = None) -> _wi.Variant:
        """Per-step figures of `ops` (`steps` steps of them; default: the profiled steps) modeled in `mode` on
        `chip` (the model's public entry point)."""
        from neuron_studio.profiler.model import ConfigError, ModelConfig, as_columns, model_run

        cfg = self.device_run.config if isinstance(self.device_run.config, ModelConfig) else ModelConfig()
        meta = self.trace.meta
        kw = dict(world_size=int(meta.get("world_size", 1) or 1),
                  local_world_size=int(meta.get("local_world_size", 0) or 0) or None)
        hit = self._remodel_columns.get(id(ops))
        if hit is None or hit[0] is not ops:   # the columns of one frame serve every chip it is modeled on
            hit = self._remodel_columns[id(ops)] = (ops, as_columns(ops, deterministic_tag=cfg.deterministic_tag))
        cols = hit[1]
        try:
            run = model_run(cols, chip=chip, mode=mode, config=cfg, **kw)
        except ConfigError:  # e.g. an LNC the other chip does not offer: that chip's default
            cfg = cfg.replace(lnc=None)
            run = model_run(cols, chip=chip, mode=mode, config=cfg, **kw)
        s, n = run.summary, steps or self.steps
        rng = s.step_time_high_ns > 0
        high = s.step_time_high_ns
        if mode == "compile" and self.trace.mode != "compile" and cfg.fusion_rule != "none":
            # graphs assumed over op-by-op ops: which intermediates stay on chip is decided by the compiled graph
            # (TorchNeuron's decompositions, its op order), not known here; the range's high end moves every op's
            # bytes through HBM (what_if.APPROX_GRAPHS names it)
            worst = model_run(cols, chip=chip, mode=mode, config=cfg.replace(fusion_rule="none"), **kw).summary
            high = max(high, worst.step_time_high_ns)
        return _wi.Variant(mode, s.chip, s.step_time_ns / n, s.step_time_low_ns / n if rng else None,
                           high / n if rng else None, s.mfu, s.cost_per_step_usd / n * 1e6)

    def _as_shown(self, df: pd.DataFrame) -> pd.DataFrame:
        """A table as a user reads it: its `source` (`sources`) in the one source format, its `module` as every
        view names it (`module_label`); the captured keys stay in `trace.ops`."""
        out = df.copy()
        if "source" in out:
            out["source"] = [source_label(x) if isinstance(x, str) and x else x for x in out["source"]]
        if "sources" in out:
            out["sources"] = [[source_label(x) for x in v] if isinstance(v, list) else v for v in out["sources"]]
        if "module" in out:
            out["module"] = [self.module_label(m) for m in out["module"]]
        return out

    def cpu_fallbacks(self, *, as_captured: bool = False) -> pd.DataFrame:
        """Ops run on the host (CPU fallbacks, host round trips) with their count, time and source lines
        (`cell [N] line L`; `as_captured=True`: as captured, `cell-N:L`)."""
        fb = _blockers.cpu_fallbacks(self.ops)
        return fb if as_captured else self._as_shown(fb)

    def sync_points(self, *, as_captured: bool = False) -> pd.DataFrame:
        """Each op that made the host wait, its source line (`cell [N] line L`; `as_captured=True`: as captured)
        and module, and whether it ended an adaptive-eager fusion group."""
        sp = _blockers.sync_points(self.ops, list(self.device_run.groups) if self.trace.mode == "adaptive" else None)
        return sp if as_captured else self._as_shown(sp)

    def sync_places(self, *, as_captured: bool = False) -> pd.DataFrame:
        """The sync points grouped per place (source line, op, reason): each place's occurrences per step
        (`count`), the modules that ran it (`modules`), whether it ended fusion groups, and the host time it costs
        per step (`time_ns`). `attrs["time_basis"]` says what that time is: "modeled" (the stall the model charges,
        as the step breakdown's sync part), "measured" (the calls' host time on the machine that ran them), or
        None when neither is known (ops the model could not size, with no measured time): `time_ns` is then NaN.
        Every view (summary, Issues tabs, text, `%neuron_check`) reads these rows; none groups on its own."""
        basis = self.sync_time_basis
        places = _blockers.sync_places(self.sync_points(as_captured=True), self.steps,
                                       {"modeled": "device_ns", "measured": "host_ns"}.get(basis or ""))
        if not as_captured and len(places):
            places = self._as_shown(places)
        places["modules"] = [[self.module_label(m) for m in ms] for ms in places["modules"]]
        places.attrs["time_basis"] = basis
        return places

    @property
    def sync_time_basis(self) -> str | None:
        """What a sync point's time is in this profile: "modeled" where the model sized the run's ops (the emulator's
        own host time is not Trainium's, so it is never shown as the cost), "measured" where the device time was
        measured or the model could not size the ops but the trace timed each call, else None."""
        if self.modeled_figures and self.hot_basis == _gaps.MODELED:
            return "modeled"
        if self.trace.meta.get("backend") != "emulated" and len(self.trace.ops) and \
                (self.trace.ops["end_ns"] > self.trace.ops["start_ns"]).any():
            return "measured"
        return None

    def recompiles(self) -> pd.DataFrame:
        return _blockers.recompiles(self.trace.compiles)

    def transfers(self) -> pd.DataFrame:
        return _blockers.transfers(self.ops)

    def idle_gaps(self, min_gap_ns: int = 1000) -> pd.DataFrame:
        return _blockers.idle_gaps(self.ops, min_gap_ns=min_gap_ns)

    def fusion_groups(self) -> pd.DataFrame:
        return self.device_run.groups.to_frame()

    def fusion_regions(self, *, launched_only: bool = True, buffer_limit: int | None = None,
                       skip_intermediate: bool | None = None) -> pd.DataFrame:
        """One row per launched region: an adaptive-eager region (TorchNeuron's concatenation rules), an op that
        ran alone, a compiled-graph execution or an eager op: first/last op, op count, launches, modeled times,
        what ended it (`ended_by`, e.g. "in-place aten::add_ ... at train.py:12") and the fix when the user's
        code decides it. No region crosses a step boundary or a sync.

        What if: `buffer_limit` (TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT) and `skip_intermediate`
        (TORCH_NEURONX_APPLY_SKIP_INTERMEDIATE) re-model the recorded ops in adaptive mode with those switches."""
        changes = {k: v for k, v in (("adaptive_buffer_limit", buffer_limit),
                                     ("adaptive_skip_intermediate", skip_intermediate)) if v is not None}
        if not changes:
            return _regions.fusion_regions(self.device_run.groups, self.ops, launched_only=launched_only)
        from neuron_studio.profiler.model import ModelConfig, model_run

        cfg = self.device_run.config if isinstance(self.device_run.config, ModelConfig) else ModelConfig()
        meta = self.trace.meta
        run = model_run(self.trace.ops, chip=self.summary.chip, mode="adaptive", config=cfg.replace(**changes),
                        world_size=int(meta.get("world_size", 1) or 1),
                        local_world_size=int(meta.get("local_world_size", 0) or 0) or None)
        return _regions.fusion_regions(run.groups, joined_ops(self.trace.ops, run.ops_frame()),
                                       launched_only=launched_only)

    def graph_breaks(self, *, as_captured: bool = False) -> pd.DataFrame:
        """Compile mode: each graph break Dynamo reported, at the user's line (`cell [N] line L` / `file.py:L`;
        `as_captured=True`: as captured), with its reason and count."""
        rows = self.trace.meta.get("graph_breaks") or []
        gb = pd.DataFrame(rows, columns=["source", "reason", "count"])
        return gb if as_captured else self._as_shown(gb)

    # -- device memory -----------------------------------------------------------------------------
    def memory_timeline(self, device: int | None = None) -> pd.DataFrame:
        """Bytes live on the device after every allocation and free, in total and per category
        (parameter, gradient, optimizer_state, input, activation, temporary); categories add up to the total.
        `device_time_ns` is the device time of the row's op (modeled on the emulator)."""
        _mem._require(self.trace.memory, self.trace.meta)
        dt = pd.Series(self.ops["device_end_ns"].to_numpy(), index=self.ops["seq"].to_numpy())
        return _mem.memory_timeline(self.trace.memory, device=device, device_time=dt[~dt.index.duplicated()])

    def memory_peak(self, top: int | None = None, device: int | None = None, *, as_captured: bool = False
                    ) -> pd.DataFrame:
        """What is live at the peak, largest first, with the op, module and source line that allocated it.
        `nbytes` sums to the peak (before `top`); `.attrs` holds the peak, where it happens, and per category.
        Sources read `cell [N] line L` / `file.py:L` and modules as every view shows them (`module_label`);
        `as_captured=True` keeps both as captured (`cell-N:L`: the key source links parse)."""
        _mem._require(self.trace.memory, self.trace.meta)
        peak = self._memory_peak(device)
        out = (peak.head(top) if top is not None else peak).copy()
        out.attrs = copy.deepcopy(peak.attrs)
        if not as_captured:
            out["source"] = [source_label(x) if isinstance(x, str) and x else x for x in out["source"]]
            out["module"] = [self.module_label(m) if isinstance(o, str) and o else m   # allocated by a step op
                             for m, o in zip(out["module"], out["op"])]
            a = out.attrs
            if isinstance(a.get("source"), str) and a["source"]:
                a["source"] = source_label(a["source"])
            if isinstance(a.get("op"), str) and a["op"]:
                a["module"] = self.module_label(a.get("module"))
        return out

    def _memory_peak(self, device: int | None) -> pd.DataFrame:
        """`memory_peak` of `device`, once per profile (the memory block, the forecast and the activations
        all start from it); callers get copies."""
        if device not in self._memory_peaks:
            self._memory_peaks[device] = _mem.memory_peak(self.trace.memory, device=device)
        return self._memory_peaks[device]

    def activation_memory(self, device: int | None = None) -> pd.DataFrame:
        """Activations (saved for backward) per module, children included: per step and live at the peak."""
        _mem._require(self.trace.memory, self.trace.meta)
        return _mem.activation_memory(self.trace.memory, device=device, steps=self.steps,
                                      peak=self._memory_peak(device))

    def memory_bounds(self, device: int | None = None) -> _mem.MemoryBounds:
        """Fragmentation-free lower bound vs a modeled allocator's high-water mark."""
        _mem._require(self.trace.memory, self.trace.meta)
        return _mem.memory_bounds(self.trace.memory, device=device)

    def memory_forecast(self, chip: str | None = None, lnc: int | None = None, *, device: int | None = None,
                        shards: int | None = None, scale: float | None = None) -> _fc.MemoryForecast:
        """Does the step fit on `chip` (default: the profile's) at `lnc`, and what each lever would save.

        `scale` multiplies every captured byte: the forecast for a model whose every tensor is `scale` times
        larger (e.g. k x wider, k x the vocabulary and k x the batch of a transformer: scale = k**2). It is
        arithmetic on this run's timeline, reported as such (`MemoryForecast.scale`). Default: the scale the run
        was profiled with (`%%neuron --memory-scale`), so the cell's Memory tab and this forecast agree; else 1."""
        if scale is None:
            scale = float(self.trace.meta.get("memory_scale") or 1.0)
        chip = (chip or self.trace.chip).lower()
        if lnc is None and chip == self.trace.chip:
            lnc = self.trace.meta.get("lnc")
        measured = self.trace.meta.get("memory_measured")
        if not len(self.trace.memory) and measured and measured.get("peak_bytes") is not None:
            return _fc.forecast_from_peak(int(measured["peak_bytes"] * scale), chip=chip, lnc=lnc,
                                          source=str(measured.get("source") or "measured peak"))
        _mem._require(self.trace.memory, self.trace.meta)
        return _fc.memory_forecast(self.trace.memory, chip=chip, lnc=lnc, device=device, shards=shards,
                                   module_classes=self.trace.meta.get("module_classes") or {}, scale=scale,
                                   peak=self._memory_peak(device) if scale == 1.0 else None)

    def cost(self) -> Cost:
        s = self.summary
        n = self.steps
        return Cost(
            chip=s.chip, step_time_ns=s.step_time_ns / n, per_step_usd=s.cost_per_step_usd / n,
            per_1000_steps_usd=s.cost_per_1000_steps_usd / n, price_per_hour_usd=s.price_per_chip_hour_usd,
            h100_step_time_ns=s.h100_step_time_ns / n, h100_per_step_usd=s.h100_cost_per_step_usd / n,
            h100_per_1000_steps_usd=s.h100_cost_per_1000_steps_usd / n,
            h100_price_per_hour_usd=s.h100_price_per_chip_hour_usd,
        )

    def export_chrome_trace(self, path: str | os.PathLike, *, bins: int = 200) -> Path:
        """Write this run as a Chrome trace JSON, as `torch.profiler.profile.export_chrome_trace` does.

        Opens in Perfetto / chrome://tracing and reads back exactly with `importers.read_trace`; `.gz` paths
        are gzip-compressed; the file is written atomically. Returns the path written."""
        from neuron_studio.profiler.chrome_trace import write_chrome_trace

        return write_chrome_trace(self, path, bins=bins)

    def diff(self, other: "Profile") -> _diff.ProfileDiff:
        """Changes from `other` (before) to this profile (after), per step."""
        ops = _diff.diff_tables(other.op_table(), self.op_table())
        eb = {k: v / other.steps for k, v in other.summary.engine_busy_ns.items()}
        ea = {k: v / self.steps for k, v in self.summary.engine_busy_ns.items()}
        eng = pd.DataFrame({"key": sorted(set(eb) | set(ea))})
        eng["per_step_device_ns"] = 0.0
        before = eng.assign(per_step_device_ns=[eb.get(k, 0.0) for k in eng["key"]])
        after = eng.assign(per_step_device_ns=[ea.get(k, 0.0) for k in eng["key"]])
        engines = _diff.diff_tables(before, after).rename(columns={"key": "engine"})
        return _diff.ProfileDiff(ops=ops, engines=engines, step_time_before_ns=other.step_time_ns,
                                 step_time_after_ns=self.step_time_ns)

    # -- export / display --------------------------------------------------------------------------
    def explore(self) -> Any:
        """A live explorer (panel): filters, a run picker, op table, zoomable timeline and roofline."""
        return display_layer("explore()").explore(self)

    def timeline_figure(self) -> Any:
        """Zoomable plotly chart of the engine tracks per NeuronCore."""
        return display_layer("timeline_figure()").timeline_figure(self.ops)

    def roofline_figure(self) -> Any:
        return display_layer("roofline_figure()").roofline_figure(self.roofline(), self.roofs())

    def to_summary(self, **extra: Any) -> dict[str, Any]:
        """The compact JSON summary (the MIME payload the notebook and the JupyterLab extension render)."""
        from neuron_studio.profiler.profile_summary import profile_summary

        return profile_summary(self, **extra)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return display_layer("_repr_mimebundle_()").mime_bundle(self.summary_payload or self.to_summary())

    def __repr__(self) -> str:
        if not display_registered():  # repr must not raise (debuggers, tracebacks): say what is missing
            return f"<Profile run {self.run_id!r}: no display layer registered (import neuron_studio to render)>"
        return display_layer("__repr__()").text(self.summary_payload or self.to_summary())
