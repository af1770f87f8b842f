"""Neuron profile tables -> the studio's model: a `MeasuredRun` (what `Profile` reads), the `Trace` rows and metadata.

Device op rows are ordered by start and rebased, in integer ns, on the first hardware timestamp; ops TorchNeuron
ran on CPU (from `OpTracking`) follow as fallback rows. The Summary's own figures are used first (`figures`
module); a figure is derived from the rows only where the Summary has none. The metadata says, per figure, what
it is (`figures`: measured / derived / modeled / not captured / unavailable) and what it was read from
(`figure_sources`), what the profile was measured from (`measured_from`) and what it does not hold
(`not_captured`); reader warnings go to `reader_warnings`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from neuron_studio.profiler.model.run_summary import RunSummary, cost_per_step, ratio
from neuron_studio.profiler.neuron_profile.measured_run import MeasuredGroups, MeasuredRun
from neuron_studio.profiler.neuron_profile.device_records import device_records, explorer_warnings
from neuron_studio.profiler.neuron_profile.executions import (
    Executions, FrameworkMapping, device_executions, instruction_windows, label_executions,
)
from neuron_studio.profiler.neuron_profile.op_rows import (
    OpRows, ops_from_executions, ops_from_framework_nodes, ops_from_instructions,
)
from neuron_studio.profiler.neuron_profile.figures import ChipChoice, SummaryFigures, resolve_chip, summary_figures
from neuron_studio.profiler.neuron_profile.tables import SYSTEM_SOURCES, ExplorerTables
from neuron_studio.profiler.neuron_profile.values import (
    ENGINE_NOTE, STUDIO_ENGINE, engine_of, first_row, int_col, num_col, number_in, str_col, union_len,
)
from neuron_studio.profiler.trace import HOST_COLUMNS, Trace
from neuron_studio.profiler.vocabulary import DEVICE_ENGINES

__all__ = ["measured_run", "trace_from_tables", "FALLBACK_REASON"]

_COMPUTE_ENGINES = tuple(e for e in DEVICE_ENGINES if e != "dma")

FALLBACK_REASON = ("ran on CPU, silently: reported by torch_neuronx.get_fallback_ops() while its tensors still say "
                   "device=neuron:0")


@dataclass(frozen=True)
class _Peaks:
    flops_per_s: float
    hbm_bytes_per_s: float
    lnc: int
    source: str


def _peaks(meta: Mapping[str, Any], chip: ChipChoice) -> _Peaks:
    """MFU/MBU denominators: the profile's Metadata where it has them, else the spec table of a known chip, else
    NaN (an unknown chip is not guessed)."""
    from neuron_studio.profiler.specs import chip_spec

    clock, rows, cols = number_in(meta, "tensor_engine_clock_freq"), number_in(meta, "tensor_engine_num_rows"), \
        number_in(meta, "tensor_engine_num_cols")
    pcores = int(number_in(meta, "num_physical_cores") or 0)
    hbm = number_in(meta, "hbm_ddr_bandwidth")
    spec = chip_spec(chip.chip) if chip.in_spec_table else None
    lnc = pcores or (spec.lnc_default if spec is not None else 1)
    nan = float("nan")
    if clock and rows and cols:
        flops = clock * 1e9 * rows * cols * 2.0 * lnc
        src = "Metadata: tensor_engine_clock_freq x num_rows x num_cols x 2 FLOP/MAC x num_physical_cores"
    elif spec is not None:
        flops = spec.core_tensor_bf16_flops_per_s * lnc
        src = f"spec table ({chip.chip}): per-core BF16 Tensor Engine peak x {lnc} physical cores (no Metadata)"
    else:
        flops, src = nan, f"unavailable: chip {chip.chip!r} is not in the spec table and Metadata has no clocks"
    if hbm:
        src += "; HBM: Metadata.hbm_ddr_bandwidth (one HBM stack, Explorer's MBU denominator)"
    elif spec is not None:
        hbm = spec.hbm_bandwidth_bytes_per_s / max(1, spec.logical_cores_per_chip(lnc))
        src += f"; HBM: spec table ({chip.chip}) chip bandwidth / logical cores (no Metadata)"
    else:
        hbm = nan
        src += "; HBM: unavailable (no Metadata.hbm_ddr_bandwidth, chip not in the spec table)"
    return _Peaks(float(flops), float(hbm), int(lnc), src)


def _bound(engine: np.ndarray, flops: np.ndarray, nbytes: np.ndarray, active: np.ndarray, peaks: _Peaks,
           fallback: np.ndarray) -> np.ndarray:
    t = np.maximum(active, 1.0) * 1e-9
    if not (np.isfinite(peaks.flops_per_s) and np.isfinite(peaks.hbm_bytes_per_s)):
        out = np.full(len(active), "none", dtype=object)     # no roofs: which one binds is not known
    else:
        comp = flops / t / max(peaks.flops_per_s, 1.0)
        mem = nbytes / t / max(peaks.hbm_bytes_per_s, 1.0)
        out = np.where(mem > comp, "memory", "compute").astype(object)
    out[(active <= 0)] = "none"
    out[fallback] = "fallback"
    return out


# -- rows ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Rows:
    """Device op rows by start time, rebased to `t0` in integer ns, then one row per CPU fallback op (at the end)."""

    n_dev: int
    n_fb: int
    order: np.ndarray
    t0: int
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


def _origin(t: ExplorerTables, ops: OpRows, meta_row: Mapping[str, Any]) -> int:
    """The timeline origin in int ns: the system profile's first event, else Metadata.first_hw_timestamp (exact,
    from the int64 column), else the first op."""
    if t.origin_ns is not None:
        return int(t.origin_ns)
    first = int(ops.start.min()) if len(ops.start) else None
    meta = t.get("Metadata")
    if meta is not None and "first_hw_timestamp" in meta.columns and len(meta) \
            and pd.notna(meta["first_hw_timestamp"].iloc[0]):
        t0 = int(int_col(meta.iloc[:1], "first_hw_timestamp", "Metadata.first_hw_timestamp")[0])
        if first is None or t0 <= first:
            return t0
    return first if first is not None else 0


def _rows(ops: OpRows, t0: int, tracking: Any) -> _Rows:
    order = np.argsort(ops.start, kind="stable")
    fb_names = list((tracking.fallback.items() if tracking is not None else []))
    n_dev, n_fb = len(order), sum(int(c) for _, c in fb_names)
    start = np.concatenate([np.asarray(ops.start, dtype=np.int64)[order] - np.int64(t0),
                            np.zeros(n_fb, dtype=np.int64)])
    active = np.concatenate([ops.active[order], np.zeros(n_fb)])
    end = start + np.round(active).astype(np.int64)
    if n_fb:
        start[n_dev:] = end[n_dev:] = int(end[:n_dev].max()) if n_dev else 0
    fb_rows = [name for name, c in fb_names for _ in range(int(c))]
    return _Rows(
        n_dev=n_dev, n_fb=n_fb, order=order, t0=int(t0), start=start, end=end, active=active,
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
def _engine_busy_from_rows(t: ExplorerTables, r: _Rows) -> dict[str, float]:
    """Per studio engine, the union of the instruction intervals (only used where the Summary has no figure)."""
    ins = t.get("Instruction")
    if ins is None or not len(ins) or t.source in SYSTEM_SOURCES:
        if r.n_dev and t.source not in SYSTEM_SOURCES:      # FrameworkNode ops: their own device time
            return {e: float(r.active[:r.n_dev][r.engine[:r.n_dev] == e].sum())
                    for e in _COMPUTE_ENGINES}
        return {}
    s = int_col(ins, "start_ts", "Instruction.start_ts")
    e = int_col(ins, "end_ts", "Instruction.end_ts") if "end_ts" in ins.columns else \
        s + num_col(ins, "duration_ns").astype(np.int64)
    eng = np.asarray([STUDIO_ENGINE.get(engine_of(v), "none") for v in str_col(ins, "engine")], dtype=object)
    return {k: float(union_len(s[eng == k], e[eng == k])) for k in _COMPUTE_ENGINES}


def _dma_rows_busy(t: ExplorerTables) -> float | None:
    dma = t.get("DmaActivity")
    if dma is None or not len(dma):
        return None
    return float(union_len(int_col(dma, "start_ts"), int_col(dma, "end_ts")))


def _figures(t: ExplorerTables, sf: SummaryFigures, chip: ChipChoice, peaks: _Peaks) -> tuple[dict, dict]:
    """(figures, figure_sources): what each headline figure is and the field it was read from."""
    system = t.source in SYSTEM_SOURCES
    sources: dict[str, str] = {"device_time": sf.step_ns.source}
    util_labels = set()
    for eng, fig in sf.utilization.items():
        sources[f"utilization.{eng}"] = fig.source
        util_labels.add(fig.label)
    util = "not captured" if system or not util_labels or util_labels == {"not captured"} else (
        "measured" if util_labels <= {"measured", "not captured"} else "derived")
    figures = {
        "device_time": sf.step_ns.label, "engine_utilization": util,
        "mfu": "not captured" if system else sf.mfu.label, "mbu": "not captured" if system else sf.mbu.label,
        "host_time": "measured" if t.host is not None and len(t.host) else "not captured",
        "cost": "modeled" if chip.in_spec_table and np.isfinite(sf.step_ns.value) else "unavailable",
    }
    sources.update({
        "mfu": sf.mfu.source, "mbu": sf.mbu.source, "peaks": peaks.source,
        "host_time": (f"span of the runtime/framework events in {t.files.get('*', ['the profile'])[-1]}"
                      if figures["host_time"] == "measured" else "not captured: the profile has no host events"),
        "cost": (f"modeled: price per chip-hour ({chip.chip}, spec table) x measured device time (one chip)"
                 if figures["cost"] == "modeled" else
                 f"unavailable: chip {chip.chip!r} has no price in the spec table" if not chip.in_spec_table else
                 "unavailable: no measured device time"),
        "chip": chip.chip_from,
    })
    if system:
        sources.update({"mfu": "not captured: a system profile has no FLOP counters",
                        "mbu": "not captured: a system profile has no HBM byte counters"})
    return figures, sources


def _not_captured(t: ExplorerTables, figures: Mapping[str, str], sf: SummaryFigures) -> list[str]:
    out = list(t.not_captured)
    for key, name in (("device_time", "device time"), ("host_time", "host time"), ("mfu", "MFU"), ("mbu", "MBU"),
                      ("engine_utilization", "engine utilization")):
        if figures[key] == "not captured" and name not in out:
            out.append(name)
    dma = sf.utilization.get("dma")
    if dma is not None and dma.label == "not captured" and "engine utilization" not in out:
        out.append("DMA utilization")
    return out


def _summary(t: ExplorerTables, summ: Mapping[str, Any], r: _Rows, chip: ChipChoice, mode: str,
             peaks: _Peaks) -> tuple[RunSummary, SummaryFigures, dict, dict]:
    """The Summary's own figures first, derived ones only where a field is absent (each labelled)."""
    from neuron_studio.profiler.specs import chip_spec

    total_bytes = (number_in(summ, "hbm_read_bytes") or 0.0) + (number_in(summ, "hbm_write_bytes") or 0.0)
    if not total_bytes:
        total_bytes = float((r.rd + r.wr).sum())
    total_flops = number_in(summ, "model_flops") or (
        max(0.0, (number_in(summ, "hardware_flops") or 0.0) - (number_in(summ, "transpose_flops") or 0.0))) \
        or float(r.flops.sum())
    span = float(r.end[:r.n_dev].max() - r.start[:r.n_dev].min()) if r.n_dev else None
    if t.source in SYSTEM_SOURCES:   # device time = union of nc_exec_running, never runtime calls
        summ = {"total_time": None}
    sf = summary_figures(summ, ops_busy_ns=_engine_busy_from_rows(t, r), ops_span_ns=span,
                         dma_rows_busy_ns=_dma_rows_busy(t), flops=total_flops, bytes_=total_bytes,
                         peak_flops_per_s=peaks.flops_per_s, hbm_bytes_per_s=peaks.hbm_bytes_per_s,
                         summary_name=t.label("Summary"))
    if t.source in SYSTEM_SOURCES:
        from neuron_studio.profiler.neuron_profile.figures import Figure

        nan = float("nan")
        sf.step_ns = Figure(float(t.device_time_ns), "measured", "union of the nc_exec_running events") \
            if t.device_time_ns is not None else Figure(nan, "not captured", "not captured: no nc_exec_running "
                                                                              "events in the system profile")
        sf.utilization = {e: Figure(nan, "not captured", "not captured: a system profile has no engine activity")
                          for e in DEVICE_ENGINES}
        sf.busy_ns = {e: nan for e in sf.utilization}
    step_ns = sf.step_ns.value
    ai = number_in(summ, "mm_arithmetic_intensity") or ratio(total_flops, total_bytes)
    execs = t.get("ExecutionInfo")
    launches = t.launches if t.launches is not None else (
        len(execs) if execs is not None and len(execs) else int(r.n_dev > 0))
    nan = float("nan")
    spec = chip_spec(chip.chip) if chip.in_spec_table else None
    price = spec.price_per_chip_hour_usd if spec is not None else nan
    c_step = cost_per_step(step_ns, price, 1)
    figures, sources = _figures(t, sf, chip, peaks)
    summary = RunSummary(
        chip=chip.chip, mode=mode, n_ops=r.n, step_time_ns=step_ns, launches=launches, groups=0, cores_used=1,
        chips_used=1, lnc=peaks.lnc, engine_busy_ns=dict(sf.busy_ns),
        engine_utilization={e: f.value for e, f in sf.utilization.items()}, mfu=float(sf.mfu.value),
        mbu=float(sf.mbu.value), arithmetic_intensity=float(ai), total_flops=float(total_flops),
        total_bytes=float(total_bytes), peak_flops_per_s=peaks.flops_per_s, hbm_bytes_per_s=peaks.hbm_bytes_per_s,
        fallback_ops=r.n_fb, host_fallback_ns=0.0, recompiles=0, compile_time_ns=0.0, h100_step_time_ns=nan,
        h100_gpus=0, price_per_chip_hour_usd=price, h100_price_per_chip_hour_usd=nan, cost_per_step_usd=c_step,
        cost_per_1000_steps_usd=c_step * 1000, h100_cost_per_step_usd=nan, h100_cost_per_1000_steps_usd=nan,
        price_sources={chip.chip: spec.sources.get("price_per_chip_hour_usd", "") if spec is not None else ""},
        assumptions={
            "source": f"measured: {t.source} in {t.directory}",
            "peaks": peaks.source, "mfu": sf.mfu.source, "mbu": sf.mbu.source,
            "percent_fields": sf.scale.basis if sf.scale is not None else "",
            "engines": ENGINE_NOTE,
            "h100": "no H100 comparison for measured runs",
            "cost": sources["cost"],
        },
        modeled=False,
    )
    return summary, sf, figures, sources


# -- kernels and the utilization timeline ----------------------------------------------------------------
def _kernels_by_op(ops: OpRows) -> dict[tuple[str, str], list[dict]]:
    """Kernels keyed by (op, module) of the rows they belong to."""
    kernels: dict[tuple[str, str], list[dict]] = {}
    for i, key in enumerate(ops.keys):
        ks = ops.kernels.get(key)
        if ks:
            kernels.setdefault((str(ops.name[i]), str(ops.module[i])), []).extend(ks)
    return kernels


def _active_time(t: ExplorerTables, t0: int) -> pd.DataFrame | None:
    """ActiveTime rows (engine, core, start_ns, end_ns) rebased like the ops (int ns), plus the DMA rows as the
    `dma` engine; None without either."""
    frames = []
    at = t.get("ActiveTime")
    if at is not None and {"start_ts", "end_ts", "engine"} <= set(at.columns):
        frames.append(pd.DataFrame({
            "engine": [STUDIO_ENGINE.get(engine_of(e), "none") for e in str_col(at, "engine")],
            "core": num_col(at, "pcore_idx").astype(np.int64),
            "start_ns": int_col(at, "start_ts", "ActiveTime.start_ts") - np.int64(t0),
            "end_ns": int_col(at, "end_ts", "ActiveTime.end_ts") - np.int64(t0),
        }))
    dma = t.get("DmaActivity")
    if frames and dma is not None and len(dma):
        frames.append(pd.DataFrame({"engine": "dma", "core": 0, "start_ns": int_col(dma, "start_ts") - np.int64(t0),
                                    "end_ns": int_col(dma, "end_ts") - np.int64(t0)}))
    return pd.concat(frames, ignore_index=True) if frames else None


# -- trace rows and metadata -----------------------------------------------------------------------------
def _trace_ops(ops: OpRows, r: _Rows, core: int) -> pd.DataFrame:
    n, n_fb, order = r.n, r.n_fb, r.order
    name = r.name
    source = np.concatenate([(ops.source[order] if ops.source is not None else np.full(r.n_dev, "", dtype=object)),
                             np.full(n_fb, "", dtype=object)])
    wait = np.concatenate([(ops.wait_ns[order] if ops.wait_ns is not None else np.zeros(r.n_dev)), np.zeros(n_fb)])
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
        "transfer_bytes": np.zeros(n), "fallback": r.fallback,
        "source": np.asarray([x or None for x in source], dtype=object),
        "graph": np.zeros(n, np.int64), "deterministic": np.zeros(n, bool),
        "phase": _phases(ops, r),
        "module": r.module, "step": np.zeros(n, np.int32),
        # extra (measured-only) columns, kept by Trace
        "device_ns": np.round(r.active).astype(np.int64), "span_end_ns": np.concatenate(
            [np.asarray(ops.span_end, dtype=np.int64)[order] - np.int64(r.t0), r.end[r.n_dev:]]).astype(np.int64),
        "engine": r.engine, "instructions": np.concatenate([ops.count[order], np.zeros(n_fb, np.int64)]),
        "hlo_name": np.concatenate([ops.hlo[order], np.full(n_fb, "", dtype=object)]).astype(object),
        "evt_wait_ns": np.round(wait).astype(np.int64),
    })


def _phases(ops: OpRows, r: _Rows) -> np.ndarray:
    """Forward/backward/optimizer: from the PyTorch join when there is one, else from the op name."""
    by_name = np.asarray(["backward" if "backward" in str(x).lower() else "forward" for x in r.name], dtype=object)
    if ops.phase is None:
        return by_name
    joined = np.concatenate([np.asarray(ops.phase, dtype=object)[r.order], np.full(r.n_fb, "", dtype=object)])
    return np.where(joined != "", joined, by_name).astype(object)


def _execution_ops(t: ExplorerTables, ex: Executions, mapping: FrameworkMapping | None, log: Any, tracking: Any
                   ) -> tuple[OpRows, dict[str, Any]]:
    """One op row per device execution, named by the PyTorch op TorchNeuron's mapping joins it to."""
    fallback = ex.neff.copy() if len(ex.neff) == len(ex) else np.full(len(ex), "", dtype=object)
    ins = t.get("Instruction")
    if ins is not None and len(ins) and "hlo_name" in ins.columns:
        from neuron_studio.profiler.neuron_profile.profiler_json import hlo_instruction_name

        k = instruction_windows(ins, ex)
        hlo = str_col(ins, "hlo_name")
        for i in np.flatnonzero(k >= 0)[::-1]:          # the first instruction of each window wins
            if hlo[i]:
                fallback[k[i]] = hlo_instruction_name(hlo[i])
    fallback = np.asarray([f or "nc_exec_running" for f in fallback], dtype=object)
    labels = label_executions(ex, mapping, log, fallback, cpu_ops=tracking.fallback if tracking is not None else ())
    return ops_from_executions(t, ex, labels), labels.stats


def _measured_from(t: ExplorerTables) -> str:
    files = sorted({f for fs in t.files.values() for f in fs}) if t.files else []
    return f"{t.source} in {t.directory}: {', '.join(files)}" if files else f"{t.source} in {t.directory}"


def _trace_meta(t: ExplorerTables, meta_row: Mapping[str, Any], summ: Mapping[str, Any], chip: ChipChoice,
                mode: str, figures: dict[str, str], sources: dict[str, str], not_captured: list[str],
                warnings: list[str], summary: RunSummary, kernels: dict[tuple[str, str], list[dict]]
                ) -> dict[str, Any]:
    def meta(key: str) -> Any:
        return meta_row.get(key) if meta_row.get(key) is not None else summ.get(key)

    return {
        "format": "neuron-studio-trace", "version": 1, "backend": "real", "chip": chip.chip, "mode": mode,
        "status": "ok", "figures": figures, "figure_sources": sources, "measured_from": _measured_from(t),
        "not_captured": not_captured, "reader_warnings": warnings, "engine_aliases": {"dma": ENGINE_NOTE},
        "source": {"kind": t.source, "directory": str(t.directory), "tables": sorted(t.tables),
                   "files": t.files, "profile_schema_version": meta("profile_schema_version"),
                   "explorer_version": meta("explorer_version"), "instance_type": chip.instance_type,
                   "runtime_version": meta("runtime_version"), "compiler_version": meta("compiler_version"),
                   "profiler_version": meta("profiler_version"), "chip_from": chip.chip_from},
        "measured_summary": summary.to_dict(),
        "measured_kernels": [{"op": k[0], "module": k[1], "kernels": v} for k, v in kernels.items()],
    }


def measured_run(t: ExplorerTables, *, chip: str | None = None, mode: str = "eager", tracking: Any = None,
                 mapping: FrameworkMapping | None = None, framework_log: Any = None
                 ) -> tuple[MeasuredRun, dict[str, Any], pd.DataFrame]:
    """Tables -> (MeasuredRun, the trace metadata it implies, the trace's `ops` rows). With TorchNeuron's framework
    mapping (and the studio's `FrameworkLog` of the capture) the op rows are the device executions, each joined to
    its PyTorch op, module and source line (`executions`)."""
    from neuron_studio.profiler.model.config import ModelConfig
    from neuron_studio.profiler.specs import trainium_chips

    meta_row = first_row(t.get("Metadata"))
    summ = first_row(t.get("Summary"))
    choice = resolve_chip(chip, [(t.label("Metadata"), meta_row), (t.label("Summary"), summ)], trainium_chips())
    peaks = _peaks(meta_row, choice)
    ex = device_executions(t) if mapping is not None and framework_log is not None else None
    join = None
    if ex is not None and len(ex):
        ops, join = _execution_ops(t, ex, mapping, framework_log, tracking)
    elif t.has("Instruction"):
        ops = ops_from_instructions(t)
    elif t.has("FrameworkNode"):
        ops = ops_from_framework_nodes(t)
    else:
        ops = _no_ops()
    core = int(number_in(meta_row, "neuroncore_idx") or 0)
    t0 = _origin(t, ops, meta_row)
    r = _rows(ops, t0, tracking)
    bound = _bound(r.engine, r.flops, r.rd + r.wr, r.active, peaks, r.is_fb)
    summary, sf, figures, sources = _summary(t, summ, r, choice, mode, peaks)
    warnings = list(t.notes) + list(choice.warnings) + (sf.scale.warnings if sf.scale is not None else []) \
        + explorer_warnings(t)
    if join is not None and join["unjoined"]:
        warnings.append(f"{join['executions'] - join['joined']} of {join['executions']} device executions are not "
                        "joined to a PyTorch op (" + "; ".join(f"{v}: {k}" for k, v in join["unjoined"].items())
                        + "); they keep the runtime's name (HLO or NEFF)")
    kernels = _kernels_by_op(ops)
    run = MeasuredRun(ops=_run_ops(r, core, bound), groups=MeasuredGroups(), summary=summary, config=ModelConfig(),
                      kernels=kernels, active_time=_active_time(t, r.t0))
    meta = _trace_meta(t, meta_row, summ, choice, mode, figures, sources, _not_captured(t, figures, sf), warnings,
                       summary, kernels)
    meta["device_records"] = device_records(t, summ, r.t0)
    if join is not None:
        meta["framework_join"] = join
        meta["figure_sources"]["op_names"] = (
            "measured device executions (SystemProfileEvents nc_exec_running) joined to PyTorch ops through "
            "TorchNeuron's framework_mapping (runtime sequence id -> seq_nr, thread) and the studio's op log")
    return run, meta, _trace_ops(ops, r, core)


def _no_ops() -> OpRows:
    """A summary-only profile (summary-json) has no op rows."""
    e = np.zeros(0)
    return OpRows(name=np.zeros(0, dtype=object), module=np.zeros(0, dtype=object), start=np.zeros(0, np.int64),
                  active=e, span_end=np.zeros(0, np.int64), engine=np.zeros(0, dtype=object), flops=e,
                  bytes_read=e, bytes_written=e, count=np.zeros(0, np.int64), hlo=np.zeros(0, dtype=object),
                  keys=[])


def trace_from_tables(t: ExplorerTables, *, chip: str | None = None, mode: str = "eager", steps: int = 1,
                      name: str | None = None, tracking: Any = None,
                      extra_meta: Mapping[str, Any] | None = None, mapping: FrameworkMapping | None = None,
                      framework_log: Any = None, compiles: pd.DataFrame | None = None) -> tuple[Trace, MeasuredRun]:
    """Tables -> (the measured `Trace`, its `MeasuredRun`), with the run's name, steps and op tracking; `compiles`:
    the graph compiles the studio's `neuron` backend logged during the capture (compile mode), with their causes."""
    run, meta, ops = measured_run(t, chip=chip, mode=mode, tracking=tracking, mapping=mapping,
                                  framework_log=framework_log)
    meta.update({"name": name, "steps": int(max(1, steps)), "warmup": 0, "dropped_events": 0,
                 "wall_ns": 0, "module_classes": {}})
    if tracking is not None:
        meta["op_tracking"] = tracking.to_dict()
    if extra_meta:
        meta.update(dict(extra_meta))
    host = t.host if t.host is not None else None
    if host is not None:
        host = host[list(HOST_COLUMNS)]
    return Trace(ops=ops, host=host, compiles=compiles, meta=meta), run
