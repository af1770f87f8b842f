"""`model_run`: OpEvents or op columns in, a `ModeledRun` (per-op table, fusion groups, summary) out."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence, overload

import numpy as np

from neuron_studio.hardware import ChipSpec, chip_spec
from neuron_studio.profiler.model.calibration import calibration_summary_or_none
from neuron_studio.profiler.model.columns import OpColumns, as_columns
from neuron_studio.profiler.model.adaptive_regions import SOURCE_COMMIT, SOURCE_REPO
from neuron_studio.profiler.model.config import ModelConfig
from neuron_studio.profiler.model.ops import ENGINES
from neuron_studio.profiler.model.schedule import (
    BOUNDS, E_DMA, E_HOST, E_NONE, R_SYNC, R_TRANSFER, REASONS, Schedule, core_rates, retime,
    schedule,
)
from neuron_studio.profiler.model.run_summary import RunSummary, cost_per_step, engine_figures, ratio

__all__ = ["FusionGroup", "FusionGroups", "ModeledRun", "model_run"]

_SRC = f"{SOURCE_REPO} @{SOURCE_COMMIT[:8]}"
#: The launch rule of each mode, with the TorchNeuron source it follows (shown with every modeled run).
_MODE_RULES = {
    "eager": {"launches": "one NEFF launch per device op (Neuron docs: eager compiles one NEFF per operator); "
                          "views, host fallbacks and host copies launch nothing"},
    "adaptive": {"launches": "TorchNeuron's op concatenation: a region closes at a matmul-family op (aten::linear, "
                             "mm, bmm, addmm, baddbmm, addbmm, matmul, conv2d, NKI kernels); in-place ops, "
                             "collectives, host copies and a full buffer (1024 ops) are boundaries that run alone; "
                             "host waits, fallbacks and step ends flush the buffer unconcatenated "
                             f"({_SRC}: torch_neuronx/csrc/core/concatenation/ConcatenationEngine.cpp, "
                             "IrConcatStrategy.cpp, ConcatenationCore.cpp, IrNodeManager.cpp; "
                             "csrc/core/OperationExecutionEngine.cpp); assumes the host keeps the queue deep"},
    "compile": {"launches": "one NEFF launch per compiled-graph execution; ops between graphs (graph breaks) one "
                            "launch each; input mutations (optimizer updates) inside the graph "
                            f"({_SRC}: torch_neuronx/neuron_dynamo_backend/backend.py, "
                            "keep_inference_input_mutations=True; fx/passes/functionalize_copy_inplace_result.py; "
                            "executor.py aliases outputs to input buffers)"},
}

_ENGINE_NAMES = np.asarray(ENGINES, dtype=object)
_BOUND_NAMES = np.asarray(BOUNDS, dtype=object)


@dataclass(frozen=True)
class FusionGroup:
    """One launch unit: an eager op (+ its views), an adaptive-eager group, or a compiled graph execution.

    `boundary_*` name the op that ended the group (the next op on the same core) and why; "end" when the
    group is the last on its core.
    """

    id: int
    core: int
    first_seq: int
    last_seq: int
    n_ops: int
    launches: int
    start_ns: float
    end_ns: float
    boundary_reason: str
    boundary_op: str | None
    boundary_seq: int | None
    boundary_source: str | None


class FusionGroups(Sequence[FusionGroup]):
    """Columnar list of FusionGroup: 1M eager launches cost arrays, not 1M objects; items built on access."""

    def __init__(self, cols: dict[str, np.ndarray], seq: np.ndarray, names: np.ndarray,
                 source: np.ndarray | None, sync: np.ndarray | None, transfer: np.ndarray | None) -> None:
        self.columns = cols
        self._seq, self._names, self._source, self._sync, self._transfer = seq, names, source, sync, transfer

    def __len__(self) -> int:
        return len(self.columns["id"])

    @overload
    def __getitem__(self, i: int) -> FusionGroup: ...
    @overload
    def __getitem__(self, i: slice) -> list[FusionGroup]: ...

    def __getitem__(self, i: int | slice) -> FusionGroup | list[FusionGroup]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        c = self.columns
        b = int(c["boundary_row"][i])
        code = int(c["reason"][i])
        reason = REASONS[code]
        if b >= 0 and code == R_SYNC and self._sync is not None:
            reason = f"sync:{self._sync[b]}"
        elif b >= 0 and code == R_TRANSFER and self._transfer is not None:
            reason = f"transfer:{self._transfer[b]}"
        return FusionGroup(
            id=int(c["id"][i]), core=int(c["core"][i]), first_seq=int(self._seq[c["first_row"][i]]),
            last_seq=int(self._seq[c["last_row"][i]]), n_ops=int(c["n_ops"][i]), launches=int(c["launches"][i]),
            start_ns=float(c["start_ns"][i]), end_ns=float(c["end_ns"][i]), boundary_reason=reason,
            boundary_op=str(self._names[b]) if b >= 0 else None,
            boundary_seq=int(self._seq[b]) if b >= 0 else None,
            boundary_source=(self._source[b] if (b >= 0 and self._source is not None) else None),
        )

    def __iter__(self) -> Iterator[FusionGroup]:
        return (self[i] for i in range(len(self)))

    def to_frame(self) -> Any:
        """pandas DataFrame of the group columns (row indices refer to the input rows)."""
        import pandas as pd

        df = pd.DataFrame(self.columns)
        df["boundary_reason"] = np.asarray(REASONS, dtype=object)[self.columns["reason"]]
        return df


@dataclass(frozen=True)
class ModeledRun:
    """Result of `model_run`. `ops` has one row per input event, in input order. Everything is modeled."""

    ops: dict[str, np.ndarray]
    groups: FusionGroups
    summary: RunSummary
    config: ModelConfig
    spec: ChipSpec
    h100_spec: ChipSpec
    modeled: bool = True

    def ops_frame(self) -> Any:
        """The per-op table as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.ops)


def _unsort(a: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    if order is None:
        return a
    out = np.empty_like(a)
    out[order] = a
    return out


def _recompile_count(recompiles: int | Sequence[Any]) -> int:
    if isinstance(recompiles, (int, np.integer)) and not isinstance(recompiles, bool):
        if recompiles < 0:
            raise ValueError(f"recompiles must be >= 0, got {recompiles}")
        return int(recompiles)
    return len(recompiles)


def _step_range(s: Schedule, t: Any, cfg: ModelConfig, rates: Any) -> tuple[float, float, dict[str, str], int]:
    """Step time with the unmeasured assumptions (`ModelConfig.RANGES`) at their low and high values.

    Launches run one after another on a core, so each core's end moves by exactly (its launches x the launch-cost
    change); it moves by at most (its collective latencies x the latency-scale change), exactly when its
    collectives do not overlap other work: where they do, the range is a bound (wider, never narrower)."""
    n = len(s.core)
    if not n:
        return 0.0, 0.0, {}, 0
    cores, core_idx = np.unique(s.core, return_inverse=True)
    ovh_now = np.bincount(core_idx, weights=s.launch_overhead_ns, minlength=len(cores))
    launches = np.bincount(core_idx, weights=s.launch.astype(np.float64), minlength=len(cores))
    coll_lat = np.zeros(len(cores))
    if s.link_bytes is not None:
        is_coll = ~np.isnan(s.link_bytes)
        lat = (rates.internode_latency_ns if s.nodes > 1 else rates.collective_latency_ns) * cfg.collective_latency_scale
        coll_lat = np.bincount(core_idx, weights=np.where(is_coll, lat, 0.0), minlength=len(cores))
    ends = t.core_end_ns
    (l_lo, l_hi), (c_lo, c_hi) = cfg.RANGES["launch_overhead_ns"], cfg.RANGES["collective_latency_scale"]

    def at(launch_ns: float, coll_scale: float) -> float:
        return float((ends - ovh_now + launches * launch_ns
                      + coll_lat * (coll_scale / cfg.collective_latency_scale - 1.0)).max())

    low, high = at(l_lo, c_lo), at(l_hi, c_hi)
    drivers = {}
    spread_launch = at(l_hi, cfg.collective_latency_scale) - at(l_lo, cfg.collective_latency_scale)
    spread_coll = at(float(ovh_now.max() / max(launches.max(), 1)), c_hi) - \
        at(float(ovh_now.max() / max(launches.max(), 1)), c_lo)
    if spread_launch > 0:
        # the count is of the whole run (every profiled step); the summary states it per step (profile_summary)
        drivers["launch_overhead_ns"] = f"launch cost per NEFF execution {l_lo / 1e3:.0f}-{l_hi / 1e3:.0f} µs (unmeasured)"
    if spread_coll > 0:
        drivers["collective_latency_scale"] = (f"collective latency {c_lo}-{c_hi}x the published nccom-test "
                                               "figures (other rank counts unmeasured)")
    return min(low, high), max(low, high), drivers, int(launches.max())


def model_run(
    columns_or_events: Any,
    *,
    chip: str | ChipSpec = "trn2",
    mode: str = "eager",
    config: ModelConfig | None = None,
    recompiles: int | Sequence[Any] = 0,
    spec_overrides: dict[str, float] | None = None,
    world_size: int = 1,
    local_world_size: int | None = None,
) -> ModeledRun:
    """Model a run of ops on `chip` in `mode` ("eager" | "adaptive" | "compile").

    Input: OpColumns, a DataFrame/dict of OpEvent-named columns, or an iterable of OpEvents. `recompiles`
    (a count, or a list of compile records) is costed separately as compile time, never in the step time.
    `world_size` / `local_world_size` (ranks per instance) size the collectives; `local_world_size=None` packs
    as many ranks on an instance as it holds (`ChipSpec.logical_cores_per_instance`: 32 on trn1.32xlarge, 64 on
    trn2.48xlarge at LNC=2), so 64 trn1 ranks are two instances, never one that does not exist.
    """
    cfg = config if config is not None else ModelConfig()
    spec = chip if isinstance(chip, ChipSpec) else chip_spec(chip, spec_overrides)
    h100 = chip_spec("h100")
    cols: OpColumns = as_columns(columns_or_events, deterministic_tag=cfg.deterministic_tag)
    n = len(cols)
    if local_world_size is None:
        per_instance = spec.logical_cores_per_instance(cfg.lnc)
        local_world_size = min(int(world_size), per_instance) if per_instance else None
    s: Schedule = schedule(cols, cfg, mode, world_size, local_world_size)
    rates = core_rates(spec, cfg)
    t = retime(s, rates, cfg)
    order = s.order

    # H100: the same launches, re-timed with H100 peaks; CPU-fallback ops run natively on the GPU; all
    # logical cores of one Trainium chip map to one GPU (chip-for-chip comparison).
    h_rates = core_rates(h100, cfg)
    h_eng = s.name_engine.copy()
    h_eng[s.is_transfer] = E_DMA
    h_launch = s.launch | (s.is_fallback & (h_eng != E_NONE))
    h_ovh = np.where(h_launch, cfg.h100_launch_overhead_ns, 0.0)
    lpc = rates.logical_cores_per_chip
    chip_of = s.core // lpc
    ht = retime(s, h_rates, cfg, launch_overhead_ns=h_ovh, engine=h_eng, host_fallback=False, track=chip_of,
                overlap=False)

    # Groups (sorted order), renumbered by their first row's input position.
    gstart = np.flatnonzero(s.brk)
    gend = np.concatenate((gstart[1:], [n])) - 1 if n else gstart
    bnd_sorted = s.group_boundary
    reason = s.group_reason
    to_input = (lambda k: k) if order is None else (lambda k: order[k])
    first_row = to_input(gstart)
    rank = np.argsort(first_row, kind="stable")
    new_id = np.empty(len(gstart), dtype=np.int64)
    new_id[rank] = np.arange(len(gstart))
    launches_per = np.bincount(s.group, weights=s.launch, minlength=len(gstart)).astype(np.int64) if n \
        else np.zeros(0, dtype=np.int64)
    gcols = {
        "id": np.arange(len(gstart), dtype=np.int64),
        "core": s.core[gstart][rank].astype(np.int64),
        "first_row": first_row[rank],
        "last_row": to_input(gend)[rank],
        "n_ops": (gend - gstart + 1)[rank],
        "launches": launches_per[rank],
        "start_ns": t.group_start_ns[rank] if n else np.zeros(0),
        "end_ns": t.group_end_ns[rank] if n else np.zeros(0),
        "reason": reason[rank],
        "boundary_row": np.where(bnd_sorted >= 0, to_input(np.maximum(bnd_sorted, 0)), -1)[rank],
    }
    names = cols.name_array()
    groups = FusionGroups(gcols, cols.seq, names, cols.source, cols.sync, cols.transfer)

    fb_in = cols.fallback if cols.fallback is not None else np.full(n, None, dtype=object)
    ops = {
        "seq": cols.seq,
        "name": names,
        "core": np.asarray(cols.core),
        "engine": _ENGINE_NAMES[_unsort(s.engine, order)] if n else np.empty(0, dtype=object),
        "start_ns": _unsort(t.start_ns, order),
        "end_ns": _unsort(t.end_ns, order),
        "duration_ns": _unsort(t.duration_ns, order),
        "compute_ns": _unsort(t.compute_ns, order),
        "memory_ns": _unsort(t.memory_ns, order),
        "launch_overhead_ns": _unsort(s.launch_overhead_ns, order),
        "host_mask_ns": _unsort(t.host_mask_ns, order),  # host-drawn random mask inside duration_ns (dropout)
        "flops": cols.flops,
        "bytes_read": _unsort(s.bytes_read, order),
        "bytes_written": _unsort(s.bytes_written, order),
        "bound": _BOUND_NAMES[_unsort(t.bound, order)] if n else np.empty(0, dtype=object),
        "group": new_id[_unsort(s.group, order)] if n else np.zeros(0, dtype=np.int64),
        "launch": _unsort(s.launch, order),
        "fallback": fb_in,
        "h100_duration_ns": _unsort(ht.duration_ns, order),
    }

    step = float(t.core_end_ns.max()) if n else 0.0
    low, high, drivers, busiest_launches = _step_range(s, t, cfg, rates)
    cores_used = int(np.unique(s.core).size) if n else 0
    chips_used = int(np.unique(chip_of).size) if n else 0
    busy, util = engine_figures(s.engine, t.duration_ns, step, cores_used)
    total_flops = float(cols.flops.sum())
    # HBM traffic of device ops only: collectives move bytes over NeuronLink/EFA, host copies over PCIe.
    on_hbm = (s.engine != E_HOST) & (s.engine != E_NONE) & ~s.is_transfer
    if s.link_bytes is not None:
        on_hbm &= np.isnan(s.link_bytes)
    total_bytes = float(np.where(on_hbm, s.bytes_read + s.bytes_written, 0.0).sum())
    # MFU against the peak of each op's own dtype (FP8 at the FP8 rate, FP32 at the FP32 rate): the fraction of
    # core-time the Tensor Engine would need at peak. BF16 peak reported as the headline peak.
    tf = np.asarray(rates.tensor_flops, dtype=np.float64)
    peak_seconds = float((s.flops / tf[s.dtype_class]).sum()) if n else 0.0
    peak = rates.tensor_flops[0] * cores_used
    hbm = rates.hbm_bytes * cores_used
    h_step = float(ht.core_end_ns.max()) if n else 0.0
    n_re = _recompile_count(recompiles)
    price, h_price = spec.price_per_chip_hour_usd, h100.price_per_chip_hour_usd
    c_step = cost_per_step(step, price, chips_used)
    h_cstep = cost_per_step(h_step, h_price, chips_used)
    cal = calibration_summary_or_none(spec.name)
    summary = RunSummary(
        chip=spec.name, mode=mode, n_ops=n, step_time_ns=step, launches=int(s.launch.sum()),
        groups=len(gstart), cores_used=cores_used, chips_used=chips_used, lnc=rates.lnc,
        engine_busy_ns=busy, engine_utilization=util,
        mfu=ratio(peak_seconds, cores_used * step * 1e-9), mbu=ratio(total_bytes, hbm * step * 1e-9),
        arithmetic_intensity=ratio(total_flops, total_bytes), total_flops=total_flops, total_bytes=total_bytes,
        peak_flops_per_s=peak, hbm_bytes_per_s=hbm,
        fallback_ops=int(s.is_fallback.sum()),
        host_fallback_ns=float(t.duration_ns[s.engine == E_HOST].sum()),
        recompiles=n_re, compile_time_ns=n_re * cfg.compile_time_per_graph_ns,
        h100_step_time_ns=h_step, h100_gpus=chips_used,
        price_per_chip_hour_usd=price, h100_price_per_chip_hour_usd=h_price,
        cost_per_step_usd=c_step, cost_per_1000_steps_usd=c_step * 1000,
        h100_cost_per_step_usd=h_cstep, h100_cost_per_1000_steps_usd=h_cstep * 1000,
        step_time_low_ns=low, step_time_high_ns=high, range_drivers=drivers,
        busiest_core_launches=busiest_launches,
        calibration_error=cal.geomean if cal is not None else None,
        calibration=cal.to_dict() if cal is not None else {},
        price_sources={spec.name: spec.sources.get("price_per_chip_hour_usd", ""),
                       "h100": h100.sources.get("price_per_chip_hour_usd", "")},
        assumptions={
            "h100": "same launches as the Trainium run, H100 peaks, h100_launch_overhead_ns per launch; "
                    "CPU-fallback ops run on the GPU; one GPU per Trainium chip used",
            "mfu": "sum over ops of FLOPs / (Tensor Engine peak of the op's dtype per logical core), divided by "
                   "cores used x step time (FP8 ops against the FP8 peak, FP32 against FP32)",
            "mbu": "HBM bytes of device ops (collectives and host copies excluded) / (HBM bandwidth per logical "
                   "core x cores used x step time)",
            "cost": "price per chip-hour x chips used x step time",
            **_MODE_RULES.get(mode, {}),
        },
    )
    return ModeledRun(ops=ops, groups=groups, summary=summary, config=cfg, spec=spec, h100_spec=h100)
