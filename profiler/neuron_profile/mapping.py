"""Explorer tables -> the studio's model: a `MeasuredRun` (what `Profile` reads), the `Trace` rows and metadata.

Device op rows are ordered by start and rebased to the first hardware timestamp; ops TorchNeuron ran on CPU
(from `OpTracking`) follow as fallback rows. Explorer's own Summary figures are used first; a figure is
derived from the op rows only where its column is absent, and the metadata says which (`figures`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from neuron_studio.profiler.model.run_summary import RunSummary, cost_per_step, ratio
from neuron_studio.profiler.neuron_profile.measured_run import MeasuredGroups, MeasuredRun
from neuron_studio.profiler.neuron_profile.op_rows import OpRows, ops_from_framework_nodes, ops_from_instructions
from neuron_studio.profiler.neuron_profile.system_profile import SYSTEM_PROFILE_SOURCE
from neuron_studio.profiler.neuron_profile.tables import ExplorerTables
from neuron_studio.profiler.neuron_profile.values import (
    ENGINE_NOTE, STUDIO_ENGINE, chip_from_instance_type, engine_of, first_row, num_col, number_in, str_col,
)
from neuron_studio.profiler.trace import HOST_COLUMNS, Trace
from neuron_studio.profiler.vocabulary import DEVICE_ENGINES

__all__ = ["measured_run", "trace_from_tables", "FALLBACK_REASON"]

FALLBACK_REASON = "cpu fallback (reported by torch_neuronx.get_fallback_ops)"


@dataclass(frozen=True)
class _Peaks:
    flops_per_s: float
    hbm_bytes_per_s: float
    lnc: int
    source: str


def _peaks(meta: Mapping[str, Any], chip: str) -> _Peaks:
    clock, rows, cols = number_in(meta, "tensor_engine_clock_freq"), number_in(meta, "tensor_engine_num_rows"), \
        number_in(meta, "tensor_engine_num_cols")
    pcores = int(number_in(meta, "num_physical_cores") or 0)
    hbm = number_in(meta, "hbm_ddr_bandwidth")
    from neuron_studio.profiler.specs import chip_spec

    spec = chip_spec(chip)
    lnc = pcores or spec.lnc_default
    if clock and rows and cols:
        flops = clock * 1e9 * rows * cols * 2.0 * lnc
        src = "Metadata: tensor_engine_clock_freq x num_rows x num_cols x 2 FLOP/MAC x num_physical_cores"
    else:
        flops = spec.core_tensor_bf16_flops_per_s * lnc
        src = f"spec table ({chip}): per-core BF16 Tensor Engine peak x {lnc} physical cores (no Metadata)"
    if hbm:
        src += "; HBM: Metadata.hbm_ddr_bandwidth (one HBM stack, Explorer's MBU denominator)"
    else:
        hbm = spec.hbm_bandwidth_bytes_per_s / max(1, spec.logical_cores_per_chip(lnc))
        src += f"; HBM: spec table ({chip}) chip bandwidth / logical cores (no Metadata)"
    return _Peaks(float(flops), float(hbm), int(lnc), src)


def _bound(engine: np.ndarray, flops: np.ndarray, nbytes: np.ndarray, active: np.ndarray, peaks: _Peaks,
           fallback: np.ndarray) -> np.ndarray:
    t = np.maximum(active, 1.0) * 1e-9
    comp = flops / t / max(peaks.flops_per_s, 1.0)
    mem = nbytes / t / max(peaks.hbm_bytes_per_s, 1.0)
    out = np.where(mem > comp, "memory", "compute").astype(object)
    out[(active <= 0)] = "none"
    out[fallback] = "fallback"
    return out


# -- rows ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Rows:
    """Device op rows by start time, rebased to `t0`, then one row per CPU fallback op (at the end)."""

    n_dev: int
    n_fb: int
    order: np.ndarray
    t0: float
    start: np.ndarray
    end: np.ndarray
    active: np.ndarray
    name: np.ndarray
    module: np.ndarray
    engine: np.ndarray
    flops: np.ndarray
    rd: np.ndarray
    wr: np.ndarray
    fallback: np.ndarray
    is_fb: np.ndarray

    @property
    def n(self) -> int:
        return self.n_dev + self.n_fb


def _rows(ops: OpRows, meta_row: Mapping[str, Any], tracking: Any) -> _Rows:
    # timeline origin: first hardware timestamp, else the first op
    t0 = number_in(meta_row, "first_hw_timestamp")
    if t0 is None or (len(ops.start) and t0 > ops.start.min()):
        t0 = float(ops.start.min()) if len(ops.start) else 0.0
    order = np.argsort(ops.start, kind="stable")
    fb_names = list((tracking.fallback.items() if tracking is not None else []))
    n_dev, n_fb = len(order), sum(int(c) for _, c in fb_names)
    start = np.concatenate([ops.start[order] - t0, np.zeros(n_fb)]).astype(np.int64)
    active = np.concatenate([ops.active[order], np.zeros(n_fb)])
    end = start + active.astype(np.int64)
    if n_fb:
        start[n_dev:] = end[n_dev:] = int(end[:n_dev].max()) if n_dev else 0
    fb_rows = [name for name, c in fb_names for _ in range(int(c))]
    return _Rows(
        n_dev=n_dev, n_fb=n_fb, order=order, t0=t0, start=start, end=end, active=active,
        name=np.concatenate([ops.name[order], np.asarray(fb_rows, dtype=object)]).astype(object),
        module=np.concatenate([ops.module[order], np.full(n_fb, "", dtype=object)]).astype(object),
        engine=np.concatenate([ops.engine[order], np.full(n_fb, "none", dtype=object)]).astype(object),
        flops=np.concatenate([ops.flops[order], np.zeros(n_fb)]),
        rd=np.concatenate([ops.bytes_read[order], np.zeros(n_fb)]),
        wr=np.concatenate([ops.bytes_written[order], np.zeros(n_fb)]),
        fallback=np.concatenate([np.full(n_dev, None, dtype=object), np.full(n_fb, FALLBACK_REASON, dtype=object)]),
        is_fb=np.concatenate([np.zeros(n_dev, bool), np.ones(n_fb, bool)]),
    )


def _run_ops(r: _Rows, core: int, bound: np.ndarray) -> dict[str, np.ndarray]:
    n = r.n
    launch = np.zeros(n, dtype=bool)
    if r.n_dev:
        launch[0] = True
    return {
        "seq": np.arange(n, dtype=np.int64), "name": r.name, "core": np.full(n, core, dtype=np.int64),
        "engine": r.engine, "start_ns": r.start.astype(np.float64), "end_ns": r.end.astype(np.float64),
        "duration_ns": r.active, "compute_ns": np.where(bound == "compute", r.active, 0.0),
        "memory_ns": np.where(bound == "memory", r.active, 0.0), "launch_overhead_ns": np.zeros(n),
        "flops": r.flops, "bytes_read": r.rd, "bytes_written": r.wr, "bound": bound,
        "group": np.full(n, -1, dtype=np.int64), "launch": launch, "fallback": r.fallback,
    }


# -- summary ---------------------------------------------------------------------------------------------
def _engine_figures(summ: Mapping[str, Any], r: _Rows, step_ns: float
                    ) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """Per engine: busy ns and utilization, from Summary where it has them (else from the op rows, listed)."""
    busy: dict[str, float] = {}
    util: dict[str, float] = {}
    derived: list[str] = []
    active, engine, n_dev = r.active, r.engine, r.n_dev
    dev_busy = {e: float(active[:n_dev][engine[:n_dev] == e].sum()) for e in DEVICE_ENGINES}
    for e in ("tensor", "vector", "scalar", "gpsimd", "sync"):
        pct, sec = number_in(summ, f"{e}_engine_active_time_percent"), number_in(summ, f"{e}_engine_active_time")
        key = e
        if pct is None and sec is None:
            if e == "sync":
                continue
            derived.append(e)
            busy[key] = dev_busy[e]
            util[key] = min(1.0, ratio(busy[key], step_ns))
            continue
        util[key] = (pct / 100.0) if pct is not None else min(1.0, ratio((sec or 0) * 1e9, step_ns))
        busy[key] = (sec * 1e9) if sec is not None else util[key] * step_ns
    dpct, dsec = number_in(summ, "dma_active_time_percent"), number_in(summ, "dma_active_time")
    if dpct is not None or dsec is not None:
        util["dma"] = (dpct / 100.0) if dpct is not None else min(1.0, ratio((dsec or 0) * 1e9, step_ns))
        busy["dma"] = (dsec * 1e9) if dsec is not None else util["dma"] * step_ns
    elif "sync" in util:
        util["dma"], busy["dma"] = util["sync"], busy["sync"]
    else:
        busy["dma"] = dev_busy["dma"]
        util["dma"] = min(1.0, ratio(busy["dma"], step_ns))
        derived.append("dma")
    return busy, util, derived


def _figures(t: ExplorerTables, derived: list[str], mfu_pct: float | None, mbu_pct: float | None) -> dict[str, str]:
    """Where each headline figure came from: measured, derived from op rows, unavailable, or modeled."""
    has_fw_sys = t.source == SYSTEM_PROFILE_SOURCE
    return {
        "device_time": "measured",
        "engine_utilization": "unavailable" if has_fw_sys else ("measured" if not derived else "measured (partly "
                                                                "derived from op rows)"),
        "mfu": "measured" if mfu_pct is not None else ("unavailable" if has_fw_sys else "derived"),
        "mbu": "measured" if mbu_pct is not None else ("unavailable" if has_fw_sys else "derived"),
        "host_time": "unavailable",
        "cost": "modeled",
    }


def _summary(t: ExplorerTables, summ: Mapping[str, Any], r: _Rows, chip: str, mode: str,
             peaks: _Peaks) -> tuple[RunSummary, dict[str, str]]:
    """Explorer's own Summary figures first, derived ones only where a column is absent."""
    from neuron_studio.profiler.specs import chip_spec

    step_s = number_in(summ, "total_time") or number_in(summ, "total_exec_time")
    if not step_s:
        step_s = float(r.end.max() - r.start.min()) * 1e-9 if r.n_dev else 0.0
    step_ns = step_s * 1e9
    busy, util, derived = _engine_figures(summ, r, step_ns)
    total_bytes = (number_in(summ, "hbm_read_bytes") or 0.0) + (number_in(summ, "hbm_write_bytes") or 0.0)
    if not total_bytes:
        total_bytes = float((r.rd + r.wr).sum())
    total_flops = number_in(summ, "model_flops") or (
        max(0.0, (number_in(summ, "hardware_flops") or 0.0) - (number_in(summ, "transpose_flops") or 0.0))) \
        or float(r.flops.sum())
    mfu_pct, mbu_pct = number_in(summ, "mfu_estimated_percent"), number_in(summ, "mbu_estimated_percent")
    mfu = mfu_pct / 100.0 if mfu_pct is not None else ratio(total_flops, peaks.flops_per_s * step_s)
    mbu = mbu_pct / 100.0 if mbu_pct is not None else ratio(total_bytes, peaks.hbm_bytes_per_s * step_s)
    ai = number_in(summ, "mm_arithmetic_intensity") or ratio(total_flops, total_bytes)
    execs = t.get("ExecutionInfo")
    launches = len(execs) if execs is not None and len(execs) else int(r.n_dev > 0)
    spec = chip_spec(chip)
    price = spec.price_per_chip_hour_usd
    c_step = cost_per_step(step_ns, price, 1)
    nan = float("nan")
    summary = RunSummary(
        chip=chip, mode=mode, n_ops=r.n, step_time_ns=step_ns, launches=launches, groups=0, cores_used=1,
        chips_used=1, lnc=peaks.lnc, engine_busy_ns=busy, engine_utilization=util, mfu=float(mfu), mbu=float(mbu),
        arithmetic_intensity=float(ai), total_flops=float(total_flops), total_bytes=float(total_bytes),
        peak_flops_per_s=peaks.flops_per_s, hbm_bytes_per_s=peaks.hbm_bytes_per_s, fallback_ops=r.n_fb,
        host_fallback_ns=0.0, recompiles=0, compile_time_ns=0.0, h100_step_time_ns=nan, h100_gpus=0,
        price_per_chip_hour_usd=price, h100_price_per_chip_hour_usd=nan, cost_per_step_usd=c_step,
        cost_per_1000_steps_usd=c_step * 1000, h100_cost_per_step_usd=nan, h100_cost_per_1000_steps_usd=nan,
        price_sources={chip: spec.sources.get("price_per_chip_hour_usd", "")},
        assumptions={
            "source": f"measured: Neuron Explorer tables in {t.directory} ({t.source})",
            "peaks": peaks.source,
            "mfu": "Summary.mfu_estimated_percent" if mfu_pct is not None else
                   "model FLOPs / (peak x Summary.total_time) (Summary has no mfu_estimated_percent)",
            "mbu": "Summary.mbu_estimated_percent" if mbu_pct is not None else
                   "HBM bytes / (HBM peak x Summary.total_time)",
            "engines": ENGINE_NOTE,
            "h100": "no H100 comparison for measured runs",
            "cost": "price per chip-hour x measured device time (one chip)",
        },
        modeled=False,
    )
    return summary, _figures(t, derived, mfu_pct, mbu_pct)


# -- kernels and the utilization timeline ----------------------------------------------------------------
def _kernels_by_op(ops: OpRows) -> dict[tuple[str, str], list[dict]]:
    """Kernels keyed by (op, module) of the rows they belong to."""
    kernels: dict[tuple[str, str], list[dict]] = {}
    for i, key in enumerate(ops.keys):
        ks = ops.kernels.get(key)
        if ks:
            kernels.setdefault((str(ops.name[i]), str(ops.module[i])), []).extend(ks)
    return kernels


def _active_time(t: ExplorerTables, t0: float) -> pd.DataFrame | None:
    """ActiveTime rows (engine, core, start_ns, end_ns) rebased like the ops, or None."""
    at = t.get("ActiveTime")
    if at is None or not {"start_ts", "end_ts", "engine"} <= set(at.columns):
        return None
    return pd.DataFrame({
        "engine": [STUDIO_ENGINE.get(engine_of(e), "none") for e in str_col(at, "engine")],
        "core": num_col(at, "pcore_idx").astype(np.int64),
        "start_ns": (num_col(at, "start_ts") - t0).astype(np.int64),
        "end_ns": (num_col(at, "end_ts") - t0).astype(np.int64),
    })


# -- trace rows and metadata -----------------------------------------------------------------------------
def _trace_ops(ops: OpRows, r: _Rows, core: int) -> pd.DataFrame:
    n, n_fb, order = r.n, r.n_fb, r.order
    name = r.name
    return pd.DataFrame({
        "seq": np.arange(n, dtype=np.int64), "name": name, "overload": np.full(n, "", dtype=object),
        "start_ns": r.start, "end_ns": r.start,  # no host timing per device op: host duration 0
        "thread": np.zeros(n, dtype=np.int64), "device_index": np.full(n, core, dtype=np.int32),
        "input_shapes": np.full(n, "", dtype=object), "input_dtypes": np.full(n, "", dtype=object),
        "output_shapes": np.full(n, "", dtype=object), "output_dtypes": np.full(n, "", dtype=object),
        "flops": r.flops, "in_bytes": r.rd, "out_bytes": r.wr, "elems": np.zeros(n),
        "itemsize": np.zeros(n, np.int8),
        "dtype_class": np.zeros(n, np.int8), "is_view": np.zeros(n, bool), "is_inplace": np.zeros(n, bool),
        "sync": np.full(n, None, dtype=object), "transfer": np.full(n, None, dtype=object),
        "transfer_bytes": np.zeros(n), "fallback": r.fallback, "source": np.full(n, None, dtype=object),
        "graph": np.zeros(n, np.int64), "deterministic": np.zeros(n, bool),
        "phase": np.asarray(["backward" if "backward" in str(x).lower() else "forward" for x in name], dtype=object),
        "module": r.module, "step": np.zeros(n, np.int32),
        # extra (measured-only) columns, kept by Trace
        "device_ns": r.active.astype(np.int64), "span_end_ns": np.concatenate(
            [ops.span_end[order] - r.t0, r.end[r.n_dev:]]).astype(np.int64),
        "engine": r.engine, "instructions": np.concatenate([ops.count[order], np.zeros(n_fb, np.int64)]),
        "hlo_name": np.concatenate([ops.hlo[order], np.full(n_fb, "", dtype=object)]).astype(object),
    })


def _trace_meta(t: ExplorerTables, meta_row: Mapping[str, Any], chip: str, chip_found: str | None, mode: str,
                figures: dict[str, str], summary: RunSummary,
                kernels: dict[tuple[str, str], list[dict]]) -> dict[str, Any]:
    return {
        "format": "neuron-studio-trace", "version": 1, "backend": "real", "chip": chip, "mode": mode,
        "status": "ok", "figures": figures, "engine_aliases": {"dma": ENGINE_NOTE},
        "source": {"kind": t.source, "directory": str(t.directory), "tables": sorted(t.tables),
                   "files": t.files, "profile_schema_version": meta_row.get("profile_schema_version"),
                   "explorer_version": meta_row.get("explorer_version"),
                   "instance_type": meta_row.get("instance_type"),
                   "runtime_version": meta_row.get("runtime_version"),
                   "compiler_version": meta_row.get("compiler_version"),
                   "chip_from": "Metadata.instance_type" if chip_found and chip == chip_found else "argument/default"},
        "measured_summary": summary.to_dict(),
        "measured_kernels": [{"op": k[0], "module": k[1], "kernels": v} for k, v in kernels.items()],
    }


def measured_run(t: ExplorerTables, *, chip: str | None = None, mode: str = "eager",
                 tracking: Any = None) -> tuple[MeasuredRun, dict[str, Any], pd.DataFrame]:
    """Tables -> (MeasuredRun, the trace metadata it implies, the trace's `ops` rows)."""
    from neuron_studio.profiler.model.config import ModelConfig

    meta_row = first_row(t.get("Metadata"))
    summ = first_row(t.get("Summary"))
    chip_found = chip_from_instance_type(meta_row.get("instance_type"))
    chip = (chip or chip_found or "trn2").lower()
    peaks = _peaks(meta_row, chip)
    ops = ops_from_instructions(t) if t.has("Instruction") else ops_from_framework_nodes(t)
    core = int(number_in(meta_row, "neuroncore_idx") or 0)
    r = _rows(ops, meta_row, tracking)
    bound = _bound(r.engine, r.flops, r.rd + r.wr, r.active, peaks, r.is_fb)
    summary, figures = _summary(t, summ, r, chip, mode, peaks)
    kernels = _kernels_by_op(ops)
    run = MeasuredRun(ops=_run_ops(r, core, bound), groups=MeasuredGroups(), summary=summary, config=ModelConfig(),
                      kernels=kernels, active_time=_active_time(t, r.t0))
    meta = _trace_meta(t, meta_row, chip, chip_found, mode, figures, summary, kernels)
    return run, meta, _trace_ops(ops, r, core)


def trace_from_tables(t: ExplorerTables, *, chip: str | None = None, mode: str = "eager", steps: int = 1,
                      name: str | None = None, tracking: Any = None,
                      extra_meta: Mapping[str, Any] | None = None) -> tuple[Trace, MeasuredRun]:
    """Tables -> (the measured `Trace`, its `MeasuredRun`), with the run's name, steps and op tracking."""
    run, meta, ops = measured_run(t, chip=chip, mode=mode, tracking=tracking)
    meta.update({"name": name, "steps": int(max(1, steps)), "warmup": 0, "dropped_events": 0,
                 "wall_ns": 0, "module_classes": {}})
    if tracking is not None:
        meta["op_tracking"] = tracking.to_dict()
    if extra_meta:
        meta.update(dict(extra_meta))
    host = t.host if t.host is not None else None
    if host is not None:
        host = host[list(HOST_COLUMNS)]
    return Trace(ops=ops, host=host, meta=meta), run
