"""Launch grouping, per-op durations and the per-core timeline, all on numpy columns.

Pipeline (each step a pure function of arrays): engines → groups (mode rules) → launches → HBM traffic after
fusion → durations on one chip → per-core timeline (launches in order, the ops of one launch list-scheduled over
the engines, profiler/model/layout.py). The same groups are re-timed on the H100 spec.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from neuron_studio.profiler.model.columns import OpColumns
from neuron_studio.profiler.model.config import MODES, ConfigError, ModelConfig
from neuron_studio.profiler.model.adaptive_regions import (
    ROLE_BOUNDARY, ROLE_FLUSH, ROLE_GRAPH, ROLE_MATMUL, ROLE_OTHER, ROLE_PASSENGER, adaptive_regions,
    is_in_place_name, is_matmul_family,
)
from neuron_studio.profiler.model.layout import lay_out
# the module, not the name: op_kinds imports model.ops, whose package imports this module (a name import
# fails when op_kinds is imported first: `from neuron_studio.profiler.profile import Profile` in a fresh process)
from neuron_studio.profiler import op_kinds  # op_kinds.HOST_MASK_OPS: device ops whose random mask the host draws
from neuron_studio.hardware import ChipSpec, SpecError
from neuron_studio.profiler.model.columns import ATTN_CAUSAL, ATTN_DROPOUT
from neuron_studio.profiler.model.ops import (
    DTYPE_CLASSES, ENGINE_CODE, ENGINES, allreduce_algorithm, allreduce_steps, base_name, classify_engine,
    collective_factor, ring_steps,
)

__all__ = ["CoreRates", "core_rates", "Schedule", "schedule", "retime", "REASONS", "BOUNDS"]

E_TENSOR, E_VECTOR, E_SCALAR, E_GPSIMD, E_DMA, E_NONE, E_HOST = (ENGINE_CODE[e] for e in ENGINES)

# Why a group ended. Eager and compile: the reason of the row that started the next group on the same core.
# Adaptive (adaptive_regions.py): what closed the region, or why the op ran on its own.
REASONS = ("end", "eager", "sync", "fallback", "transfer", "deterministic", "matmul", "buffer_limit",
           "graph_start", "graph_break", "after_isolated", "in_place", "collective", "step_end", "direct")
(R_END, R_EAGER, R_SYNC, R_FALLBACK, R_TRANSFER, R_DETERMINISTIC, R_MATMUL, R_LIMIT, R_GRAPH_START,
 R_GRAPH_BREAK, R_AFTER, R_IN_PLACE, R_COLLECTIVE, R_STEP_END, R_DIRECT) = range(len(REASONS))

BOUNDS = ("compute", "memory", "launch", "fallback", "none")
B_COMPUTE, B_MEMORY, B_LAUNCH, B_FALLBACK, B_NONE = range(len(BOUNDS))


@dataclass(frozen=True)
class CoreRates:
    """Throughput of one logical core (the device torch sees), after LNC grouping. Units: per second."""

    lnc: int
    logical_cores_per_chip: int
    tensor_flops: tuple[float, float, float, float]   # indexed by dtype class: BF16, FP8, FP32, MXFP8
    vector_elems: tuple[float, float]          # (32-bit, 16-bit-or-narrower)
    scalar_elems: tuple[float, float]
    gpsimd_elems: float
    dma_bytes: float
    hbm_bytes: float
    link_bytes: float = 0.0                    # NeuronLink bytes/s per chip (reported, not used for timing)
    collective_latency_ns: float = 0.0         # fixed part of a collective within one instance
    collective_hop_ns: float = 0.0             # per ring step within one instance
    collective_bytes: float = 0.0              # per-rank bus bandwidth within one instance (bytes/s)
    internode_latency_ns: float = 0.0          # published collective latency across instances
    internode_bytes: float = 0.0               # per-rank bus bandwidth across instances (bytes/s)
    allreduce_mesh_max_chunk: float | None = None  # all-reduce algorithm switch points (None: Ring at every size)
    allreduce_rdh_max_chunk: float | None = None
    allreduce_latency_ns: float | None = None  # fixed part of an intra-instance all-reduce (None: collective_latency_ns)


def core_rates(spec: ChipSpec, config: ModelConfig) -> CoreRates:
    """Per-logical-core rates by the accessor's core convention (`ChipSpec.core`): physical-core figures × LNC,
    HBM/DMA split evenly across the chip's logical cores (or the whole chip's with `hbm_shared_by_cores=False`)."""
    lnc = None if (config.lnc is None or spec.kind != "trainium") else config.lnc
    try:
        core = spec.core(lnc)
    except SpecError as exc:
        raise ConfigError(f"lnc: {exc}") from exc
    shared = config.hbm_shared_by_cores
    return CoreRates(
        lnc=core.lnc,
        logical_cores_per_chip=core.cores_per_chip,
        tensor_flops=(core.tensor_bf16_flops, core.tensor_fp8_flops, core.tensor_fp32_flops, core.tensor_mxfp8_flops),
        vector_elems=(core.vector_elems_32bit, core.vector_elems_16bit),
        scalar_elems=(core.scalar_elems_32bit, core.scalar_elems_16bit),
        gpsimd_elems=core.gpsimd_elems,
        dma_bytes=core.dma_bytes if shared else spec.dma_bandwidth_bytes_per_s,
        hbm_bytes=core.stream_bytes if shared else spec.hbm_bandwidth_bytes_per_s,
        collective_latency_ns=spec.collective_latency_ns or 0.0,
        collective_hop_ns=spec.collective_hop_latency_ns or 0.0,
        collective_bytes=spec.collective_bus_bandwidth_bytes_per_s or 0.0,
        internode_latency_ns=spec.internode_collective_latency_ns or 0.0,
        internode_bytes=spec.internode_bus_bandwidth_bytes_per_s or 0.0,
        allreduce_mesh_max_chunk=spec.allreduce_mesh_max_chunk_bytes,
        allreduce_rdh_max_chunk=spec.allreduce_rdh_max_chunk_bytes,
        allreduce_latency_ns=spec.allreduce_latency_ns,
        link_bytes=spec.neuronlink_bandwidth_bytes_per_s,
    )


@dataclass(frozen=True)
class Schedule:
    """Arrays in SORTED order (stable by core; `order[k]` is the input row of sorted row k)."""

    order: np.ndarray | None
    core: np.ndarray
    core_start: np.ndarray
    engine: np.ndarray          # int8 engine code (Trainium)
    name_engine: np.ndarray     # int8 engine by name only (what the op would run on without CPU fallback)
    group: np.ndarray           # int64 group index in sorted order
    brk: np.ndarray             # bool: row starts a group
    group_reason: np.ndarray    # int8 per group (sorted order): why it ended (REASONS)
    group_boundary: np.ndarray  # int64 per group: sorted row of the op that ended it, -1 for none
    launch: np.ndarray          # bool: row opened a launch
    launch_overhead_ns: np.ndarray
    bytes_read: np.ndarray
    bytes_written: np.ndarray
    is_fallback: np.ndarray
    is_transfer: np.ndarray
    transfer_bytes: np.ndarray
    flops: np.ndarray
    elems: np.ndarray
    dtype_class: np.ndarray
    narrow: np.ndarray
    moved_bytes: np.ndarray     # bytes a DMA-engine op copies
    host_ns: np.ndarray         # measured host duration (fallback rows)
    in_bytes: np.ndarray
    out_bytes: np.ndarray
    link_bytes: np.ndarray | None = None  # bytes a collective puts on NeuronLink (ring factor applied)
    nodes: int = 1                        # instances the job spans (collectives cross EFA when > 1)
    collective_steps: np.ndarray | None = None  # ring steps of each collective (0 for other ops)
    allreduce_bytes: np.ndarray | None = None   # an all-reduce's buffer per rank (NaN for other rows)
    world_size: int = 1
    attention: np.ndarray | None = None   # int8 ATTN_* flags (causal halves the work; dropout draws host masks)
    host_mask_elems: np.ndarray | None = None  # random elements the host draws for this device op (dropout)
    rng_elems: np.ndarray | None = None   # random elements a CPU-fallback RNG op draws
    is_attention: np.ndarray | None = None  # scaled-dot-product attention rows (`elems` = score elements)
    reads: np.ndarray | None = None       # storages each row read (tuples; None = unknown), for the engine schedule
    writes: np.ndarray | None = None      # ... and wrote


def _not_none(a: np.ndarray | None, n: int) -> np.ndarray:
    if a is None:
        return np.zeros(n, dtype=bool)
    return np.asarray(a != None, dtype=bool)  # noqa: E711 - elementwise on an object array


def _take(a: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    return a if order is None else a[order]


_RNG_FALLBACKS = ("bernoulli", "normal", "uniform", "random", "exponential", "multinomial", "randperm", "rand",
                  "randn", "randint", "geometric", "cauchy", "log_normal")


def _per_name(cols: OpColumns, order: np.ndarray | None, pred: "Callable[[str], bool]") -> np.ndarray:
    flags = np.fromiter((pred(str(nm)) for nm in cols.names), dtype=bool, count=len(cols.names))
    return _take(flags[cols.name_code], order) if len(cols) else np.zeros(0, dtype=bool)


def schedule(cols: OpColumns, config: ModelConfig, mode: str, world_size: int = 1,
             local_world_size: int | None = None) -> Schedule:
    """Engines, groups, launches and post-fusion HBM traffic for `mode` (chip-independent).

    `local_world_size` is the number of ranks per instance (torchrun's LOCAL_WORLD_SIZE); None = all ranks on
    one instance."""
    if mode not in MODES:
        raise ConfigError(f"unknown mode {mode!r}; valid: {MODES}")
    n = len(cols)
    core_in = np.asarray(cols.core, dtype=np.int32)
    order: np.ndarray | None = None
    if n and (core_in != core_in[0]).any():
        order = np.argsort(core_in, kind="stable")
    core = _take(core_in, order)

    name_eng = np.fromiter((ENGINE_CODE[classify_engine(str(nm))] for nm in cols.names), dtype=np.int8,
                           count=len(cols.names))
    eng_by_name = name_eng[_take(cols.name_code, order)] if n else np.zeros(0, dtype=np.int8)
    is_view = _take(cols.is_view, order)
    eng_by_name = np.where(is_view, E_NONE, eng_by_name).astype(np.int8)
    is_fb = _take(_not_none(cols.fallback, n), order)
    is_sync = _take(_not_none(cols.sync, n), order)
    is_tr = _take(_not_none(cols.transfer, n), order) & ~is_fb
    eng = eng_by_name.copy()
    eng[is_tr] = E_DMA
    eng[is_fb] = E_HOST
    real = eng != E_NONE

    core_start = np.ones(n, dtype=bool)
    if n > 1:
        core_start[1:] = core[1:] != core[:-1]

    det = _take(cols.deterministic, order)
    graph = _take(cols.graph, order)

    step = _take(cols.step, order) if cols.step is not None else np.zeros(n, dtype=np.int64)
    step_start = np.zeros(n, dtype=bool)
    if n > 1:
        step_start[1:] = (step[1:] != step[:-1]) & ~core_start[1:]

    if mode == "adaptive":
        brk, group_reason, group_boundary = _adaptive_groups(cols, order, config, eng, real, is_fb, is_sync, is_tr,
                                                             det, graph, core_start, step_start)
    else:
        brk, group_reason, group_boundary = _eager_or_compile_groups(mode, real, is_fb, is_sync, is_tr, graph,
                                                                     core_start)
    group = np.cumsum(brk) - 1

    # One launch per group, opened by its first device-kernel op (views, host fallbacks, host<->device copies
    # launch nothing). Eager rows of compile mode and deterministic rows pay the eager launch cost.
    eligible = real & (eng != E_HOST) & ~is_tr
    launch = np.zeros(n, dtype=bool)
    idx = np.flatnonzero(eligible)
    if idx.size:
        gg = group[idx]
        first = np.ones(idx.size, dtype=bool)
        first[1:] = gg[1:] != gg[:-1]
        launch[idx[first]] = True
    base = np.full(n, config.launch_overhead_ns(mode))
    if mode == "compile":
        base[graph < 0] = config.eager_launch_overhead_ns
    else:
        if mode == "adaptive":
            base[det] = config.eager_launch_overhead_ns
        base[graph >= 0] = config.launch_overhead_ns("compile")
    ovh = np.where(launch, base, 0.0)

    in_b = np.where(real, _take(cols.in_bytes, order), 0.0)
    out_b = np.where(real, _take(cols.out_bytes, order), 0.0)
    rd, wr = in_b.copy(), out_b.copy()
    if config.fusion_rule == "chain" and n:
        ar = np.arange(n)
        prev_real = np.maximum.accumulate(np.where(real, ar, -1))
        prev_real = np.concatenate(([-1], prev_real[:-1]))
        pr = np.maximum(prev_real, 0)
        has_prev = real & (prev_real >= 0) & (group[pr] == group) & ~is_fb & ~is_tr
        feeds = np.ones(n, dtype=bool)
        if cols.reads is not None and cols.writes is not None:
            # with the storages ops read and wrote, a chain link is a real producer -> consumer pair
            feeds = _reads_what_prev_wrote(_take(cols.reads, order), _take(cols.writes, order), pr, has_prev)
            has_prev &= feeds
        rd = np.where(has_prev, in_b - np.minimum(in_b, out_b[pr]), in_b)
        next_real = np.minimum.accumulate(np.where(real, ar, n)[::-1])[::-1]
        next_real = np.concatenate((next_real[1:], [n]))
        nr = np.minimum(next_real, n - 1)
        has_next = real & (next_real < n) & (group[nr] == group) & ~is_fb & ~is_tr & feeds[nr]
        wr = np.where(has_next, 0.0, out_b)
    tb = _take(cols.transfer_bytes, order)
    tb = np.where(tb > 0, tb, np.maximum(in_b, out_b))
    if cols.transfer is not None and is_tr.any():
        direction = _take(cols.transfer, order)
        d2h = is_tr & np.asarray(direction == "d2h", dtype=bool)
        h2d = is_tr & ~d2h
        rd = np.where(is_tr, np.where(d2h, tb, 0.0), rd)
        wr = np.where(is_tr, np.where(h2d, tb, 0.0), wr)
    host_ns = np.where(is_fb, np.maximum(_take(cols.end_ns, order) - _take(cols.start_ns, order), 0), 0)
    elems = _take(cols.elems, order)
    is_rng = _per_name(cols, order, lambda nm: base_name(nm) in _RNG_FALLBACKS) & is_fb
    host_mask = _per_name(cols, order, lambda nm: base_name(nm) in op_kinds.HOST_MASK_OPS) & ~is_fb & real
    local = world_size if not local_world_size else max(1, min(int(local_world_size), int(world_size)))
    nodes = -(-max(1, int(world_size)) // max(1, local))
    return Schedule(
        order=order, core=core, core_start=core_start, engine=eng, name_engine=eng_by_name, group=group,
        brk=brk, group_reason=group_reason, group_boundary=group_boundary, launch=launch, launch_overhead_ns=ovh, bytes_read=rd, bytes_written=wr,
        is_fallback=is_fb, is_transfer=is_tr, transfer_bytes=np.where(is_tr, tb, 0.0),
        flops=_take(cols.flops, order), elems=elems,
        dtype_class=np.clip(_take(cols.dtype_class, order), 0, len(DTYPE_CLASSES) - 1).astype(np.int8),
        narrow=_take(cols.itemsize, order) <= 2, moved_bytes=out_b, host_ns=host_ns.astype(np.float64),
        in_bytes=in_b, out_bytes=out_b, link_bytes=_link_bytes(cols, order, world_size), nodes=nodes,
        collective_steps=_collective_steps(cols, order, world_size),
        allreduce_bytes=_allreduce_bytes(cols, order), world_size=max(1, int(world_size)),
        attention=_take(cols.attention, order) if cols.attention is not None else np.zeros(n, dtype=np.int8),
        host_mask_elems=np.where(host_mask, elems, 0.0), rng_elems=np.where(is_rng, elems, 0.0),
        is_attention=_per_name(cols, order, lambda nm: "scaled_dot_product" in nm) & (eng_by_name == E_TENSOR),
        reads=None if cols.reads is None else _take(cols.reads, order),
        writes=None if cols.writes is None else _take(cols.writes, order),
    )


def _eager_or_compile_groups(mode: str, real: np.ndarray, is_fb: np.ndarray, is_sync: np.ndarray,
                             is_tr: np.ndarray, graph: np.ndarray, core_start: np.ndarray
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eager: one group per device op (views join the op before them). Compile: one group per graph execution,
    ops outside graphs one by one. A group's reason is the reason the next group on its core started."""
    n = len(real)
    prev = lambda a, fill: np.concatenate(([fill], a[:-1])) if n else a  # noqa: E731
    if mode == "eager":
        solo = is_fb | is_tr | is_sync
        brk_before = real | solo
        conds = [is_fb, is_sync, is_tr, real]
        codes = [R_FALLBACK, R_SYNC, R_TRANSFER, R_EAGER]
    else:  # compile
        in_graph = graph >= 0
        gprev = prev(graph, -2)
        eager_row = ~in_graph & (real | is_sync | is_tr)
        solo = is_fb | (~in_graph & (is_sync | is_tr))
        gchange = in_graph & (graph != gprev)
        brk_before = solo | eager_row | gchange
        prev_in_graph = prev(in_graph, False)
        conds = [is_fb, gchange, ~in_graph & is_sync, ~in_graph & is_tr, eager_row & prev_in_graph, eager_row]
        codes = [R_FALLBACK, R_GRAPH_START, R_SYNC, R_TRANSFER, R_GRAPH_BREAK, R_EAGER]
    if mode != "compile" and n and (graph >= 0).any():
        # torch.compile(backend="neuron") used inside an eager run: its graphs still launch whole
        g_in = graph >= 0
        g_change = g_in & (graph != prev(graph, -2))
        g_leave = ~g_in & prev(g_in, False)
        brk_before = np.where(g_in, g_change | is_fb, brk_before | g_leave)
        solo = np.where(g_in, is_fb, solo)
        conds = [g_in & g_change, g_leave] + conds
        codes = [R_GRAPH_START, R_GRAPH_BREAK] + codes
    after = prev(solo, False)
    brk = core_start | brk_before | after
    reason = np.select(conds + [after], codes + [R_AFTER], default=R_END).astype(np.int8)
    gstart = np.flatnonzero(brk)
    nxt = np.concatenate((gstart[1:], [n])) if n else gstart
    valid = nxt < n
    valid[valid] &= ~core_start[nxt[valid]]
    group_reason = np.where(valid, reason[np.minimum(nxt, max(n - 1, 0))] if n else 0, R_END).astype(np.int8)
    group_boundary = np.where(valid, nxt, -1).astype(np.int64)
    return brk, group_reason, group_boundary


def _adaptive_groups(cols: OpColumns, order: np.ndarray | None, config: ModelConfig, eng: np.ndarray,
                     real: np.ndarray, is_fb: np.ndarray, is_sync: np.ndarray, is_tr: np.ndarray, det: np.ndarray,
                     graph: np.ndarray, core_start: np.ndarray, step_start: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TorchNeuron's concatenation rules (adaptive_regions.py) over the rows; per-group reason and boundary."""
    n = len(real)
    names = cols.names
    uniq_mm = np.fromiter((is_matmul_family(str(nm)) for nm in names), dtype=bool, count=len(names))
    uniq_ip = np.fromiter((is_in_place_name(str(nm)) for nm in names), dtype=bool, count=len(names))
    uniq_coll = np.fromiter((str(nm).startswith("c10d::") for nm in names), dtype=bool, count=len(names))
    code = _take(cols.name_code, order) if n else np.zeros(0, dtype=np.int32)
    is_mm, is_ip, is_coll = (u[code] if n else np.zeros(0, dtype=bool) for u in (uniq_mm, uniq_ip, uniq_coll))
    d2h = np.zeros(n, dtype=bool)
    if cols.transfer is not None:
        d2h = is_tr & np.asarray(_take(cols.transfer, order) == "d2h", dtype=bool)
    kernel = real | is_sync | is_fb | is_tr
    flush = is_sync | is_fb | d2h | det
    in_graph = graph >= 0
    role = np.select(
        [in_graph, flush, ~kernel, is_coll | is_tr | (is_ip & config.adaptive_skip_intermediate), is_mm],
        [ROLE_GRAPH, ROLE_FLUSH, ROLE_PASSENGER, ROLE_BOUNDARY, ROLE_MATMUL], default=ROLE_OTHER).astype(np.int8)
    own = np.select([is_fb, is_sync, det, is_tr, is_coll, is_ip & config.adaptive_skip_intermediate],
                    [R_FALLBACK, R_SYNC, R_DETERMINISTIC,
                                                                  R_TRANSFER, R_COLLECTIVE, R_IN_PLACE],
                    default=R_END).astype(np.int8)
    res = adaptive_regions(role, own, core_start, step_start, graph, buffer_limit=config.adaptive_buffer_limit,
                           r_matmul=R_MATMUL, r_direct=R_DIRECT, r_step=R_STEP_END, r_end=R_END, r_limit=R_LIMIT,
                           r_graph=R_GRAPH_START)
    gstart = np.flatnonzero(res.brk)
    return res.brk, res.start_reason[gstart], res.start_boundary[gstart]


def _reads_what_prev_wrote(reads: np.ndarray, writes: np.ndarray, prev: np.ndarray, has_prev: np.ndarray) -> np.ndarray:
    """Per row: does it read a storage its previous device op wrote? True where either row's facts are unknown."""
    out = np.ones(len(reads), dtype=bool)
    for i in np.flatnonzero(has_prev).tolist():
        r, w = reads[i], writes[prev[i]]
        if r is not None and w is not None:
            out[i] = not set(r).isdisjoint(w)
    return out


def _link_bytes(cols: OpColumns, order: np.ndarray | None, world_size: int) -> np.ndarray | None:
    """NeuronLink bytes per row for collectives (NaN for other ops); None when the run has no collective."""
    is_coll = np.asarray([str(nm).startswith("c10d::") for nm in cols.names], dtype=bool)
    if not len(is_coll) or not is_coll.any():
        return None
    factors = np.asarray([collective_factor(str(nm), world_size) if c else np.nan
                          for nm, c in zip(cols.names, is_coll)], dtype=np.float64)
    f = factors[cols.name_code]
    msg = np.where(cols.transfer_bytes > 0, cols.transfer_bytes, np.maximum(cols.in_bytes, cols.out_bytes))
    return _take(f * msg, order)


def _allreduce_bytes(cols: OpColumns, order: np.ndarray | None) -> np.ndarray | None:
    """Buffer bytes of each all-reduce row (NaN for other rows); None when the run has none."""
    is_ar = np.asarray([str(nm).startswith("c10d::") and "allreduce" in base_name(str(nm)) for nm in cols.names],
                       dtype=bool)
    if not len(is_ar) or not is_ar.any():
        return None
    msg = np.where(cols.transfer_bytes > 0, cols.transfer_bytes, np.maximum(cols.in_bytes, cols.out_bytes))
    return _take(np.where(is_ar[cols.name_code], msg, np.nan), order)


def _collective_steps(cols: OpColumns, order: np.ndarray | None, world_size: int) -> np.ndarray | None:
    """Ring steps per row (each pays one hop latency); None when the run has no collective."""
    steps = np.asarray([ring_steps(str(nm), world_size) for nm in cols.names], dtype=np.float64)
    if not len(steps) or not steps.any():
        return None
    return _take(steps[cols.name_code], order)


def _allreduce_rows(s: Schedule, rates: CoreRates) -> tuple[np.ndarray, list[str]]:
    """The all-reduce rows and the algorithm of each (decided once per distinct size: a trace has few)."""
    if s.allreduce_bytes is None:
        return np.zeros(0, dtype=np.int64), []
    nbytes = np.asarray(s.allreduce_bytes, dtype=np.float64)
    rows = np.flatnonzero(~np.isnan(nbytes))
    sizes, inv = np.unique(nbytes[rows], return_inverse=True)
    algos = [allreduce_algorithm(s.world_size, b, rates.logical_cores_per_chip, rates.allreduce_mesh_max_chunk,
                                 rates.allreduce_rdh_max_chunk) for b in sizes]
    return rows, [algos[k] for k in inv.tolist()]


def allreduce_algorithms(s: Schedule, rates: CoreRates) -> list[str | None]:
    """The intra-instance algorithm of each all-reduce row (None for other rows), as `retime` times it."""
    out: list[str | None] = [None] * len(s.engine)
    rows, algos = _allreduce_rows(s, rates)
    for i, algo in zip(rows.tolist(), algos):
        out[i] = algo
    return out


def allreduce_path_steps(s: Schedule, rates: CoreRates, steps: np.ndarray) -> np.ndarray:
    """`steps` with each all-reduce's hops replaced by those of the algorithm the runtime picks for its size."""
    out = steps.copy()
    rows, algos = _allreduce_rows(s, rates)
    if len(rows):
        hops = {a: allreduce_steps(a, s.world_size, rates.logical_cores_per_chip) for a in set(algos)}
        out[rows] = [hops[a] for a in algos]
    return out


@dataclass(frozen=True)
class Timing:
    """Per-row durations and the per-core timeline (sorted order, ns)."""

    compute_ns: np.ndarray
    memory_ns: np.ndarray
    duration_ns: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    bound: np.ndarray
    core_end_ns: np.ndarray      # end of the last launch per track (cores in sorted order)
    host_mask_ns: np.ndarray | None = None  # part of `duration_ns` the host spends drawing a device op's mask
    group_start_ns: np.ndarray | None = None  # when each group's launch begins (overhead included)
    group_end_ns: np.ndarray | None = None    # when its last op ends (ops of one launch overlap)


def retime(s: Schedule, rates: CoreRates, config: ModelConfig, *, launch_overhead_ns: np.ndarray | None = None,
           engine: np.ndarray | None = None, host_fallback: bool = True, track: np.ndarray | None = None,
           overlap: bool = True) -> Timing:
    """Durations of every row on one chip's rates and the timeline per track (core by default): launches in
    order, the ops of one launch list-scheduled over the engines by their data dependencies (`layout`).

    `engine`/`host_fallback=False` re-time CPU-fallback rows as device ops (for the H100 comparison, where
    those ops run natively); `track` maps rows to timeline tracks (e.g. several NeuronCores → one GPU);
    `overlap=False` runs the ops of a launch one after another (one GPU stream).
    """
    eng = s.engine if engine is None else engine
    ovh = s.launch_overhead_ns if launch_overhead_ns is None else launch_overhead_ns
    n = len(eng)
    tf = np.asarray(rates.tensor_flops)[s.dtype_class] * config.tensor_efficiency
    vec = np.where(s.narrow, rates.vector_elems[1], rates.vector_elems[0]) * config.vector_efficiency
    sca = np.where(s.narrow, rates.scalar_elems[1], rates.scalar_elems[0]) * config.scalar_efficiency
    attn = s.attention if s.attention is not None else np.zeros(n, dtype=np.int8)
    # A causal flash-attention kernel skips the fully masked half of the score tiles (matmuls and exps).
    work = np.where((attn & ATTN_CAUSAL) != 0, 0.5, 1.0)
    comp = np.zeros(n)
    m = eng == E_TENSOR
    # Tensor-Engine ops stream `elems` through the Scalar Engine (attention: exp over the scores); the two
    # engines overlap inside the op, so the slower one sets its compute time.
    exp_elems = np.where(s.is_attention, s.elems, 0.0) if s.is_attention is not None else np.zeros(n)
    comp[m] = np.maximum(s.flops[m] / tf[m], exp_elems[m] / sca[m]) * work[m]
    m = eng == E_VECTOR
    comp[m] = s.elems[m] / vec[m]
    m = eng == E_SCALAR
    comp[m] = s.elems[m] / sca[m]
    m = eng == E_GPSIMD
    comp[m] = s.elems[m] / (rates.gpsimd_elems * config.gpsimd_efficiency)
    m = (eng == E_DMA) & ~s.is_transfer
    comp[m] = s.moved_bytes[m] / (rates.dma_bytes * config.dma_efficiency)
    comp *= 1e9
    dev = (eng != E_NONE) & (eng != E_HOST) & ~s.is_transfer
    mem = np.where(dev, (s.bytes_read + s.bytes_written) / (rates.hbm_bytes * config.hbm_efficiency) * 1e9, 0.0)
    dur = np.maximum(comp, mem)
    link = config.host_link_bytes_per_s
    lat = config.host_transfer_latency_ns
    if s.is_transfer.any():
        dur = np.where(s.is_transfer, s.transfer_bytes / link * 1e9 + lat, dur)
    # Host-drawn random masks for device ops (nn.Dropout; SDPA with dropout, per layer and pass): the host
    # draws one value per element and copies a 1-byte mask to the device before the op can run.
    mask = np.zeros(n) if s.host_mask_elems is None else s.host_mask_elems.copy()
    sdpa_drop = (attn & ATTN_DROPOUT) != 0
    if sdpa_drop.any():
        mask = np.where(sdpa_drop & s.is_attention, s.elems, mask)
    mask_ns = np.zeros(n)
    if host_fallback and mask.any():
        mask_ns = np.where(mask > 0, mask / config.host_rng_elems_per_s * 1e9 + mask / link * 1e9 + lat, 0.0)
        dur = dur + mask_ns
    fb = s.is_fallback & (eng == E_HOST) if host_fallback else np.zeros(n, dtype=bool)
    if fb.any():
        # A host-CPU model, not the measured wall time: the modeled step must not depend on machine load.
        copies = (s.in_bytes / link * 1e9 + lat) + (s.out_bytes / link * 1e9 + lat)
        rng = np.zeros(n) if s.rng_elems is None else s.rng_elems
        host = (config.host_op_overhead_ns
                + np.maximum((s.in_bytes + s.out_bytes) / config.host_cpu_bytes_per_s,
                             s.flops / config.host_cpu_flops_per_s) * 1e9
                + rng / config.host_rng_elems_per_s * 1e9)
        dur = np.where(fb, host + copies, dur)
    coll = None
    if s.link_bytes is not None:
        coll = ~np.isnan(s.link_bytes)  # a collective on one rank moves nothing: latency only
        inter = s.nodes > 1
        bw = rates.internode_bytes if inter else rates.collective_bytes
        steps = np.zeros(n) if s.collective_steps is None else s.collective_steps
        if s.allreduce_bytes is not None and not inter:  # the runtime's algorithm by buffer size (Trn2)
            steps = allreduce_path_steps(s, rates, steps)
        fixed = np.full(n, rates.collective_latency_ns)
        if s.allreduce_bytes is not None and rates.allreduce_latency_ns is not None and s.world_size > 1:
            fixed = np.where(np.isnan(s.allreduce_bytes), fixed, rates.allreduce_latency_ns)
        intra = fixed + steps * rates.collective_hop_ns  # fixed + one hop per step of the algorithm
        c_lat = (rates.internode_latency_ns if inter else intra) * config.collective_latency_scale
        if bw > 0:
            dur = np.where(coll, np.nan_to_num(s.link_bytes) / bw * 1e9 + c_lat, dur)
        else:  # a GPU spec without collective figures: NeuronLink-equivalent link, no latency figure
            dur = np.where(coll, np.nan_to_num(s.link_bytes) / max(rates.link_bytes, 1.0) * 1e9, dur)
    bound = np.where(comp >= mem, B_COMPUTE, B_MEMORY).astype(np.int8)
    if coll is not None:
        bound[coll] = B_MEMORY
    bound[s.is_transfer] = B_MEMORY
    bound[(ovh > dur) & (ovh > 0)] = B_LAUNCH
    bound[eng == E_NONE] = B_NONE
    bound[fb] = B_FALLBACK

    if track is None:
        starts = s.core_start
    else:
        starts = np.ones(n, dtype=bool)
        if n > 1:
            starts[1:] = track[1:] != track[:-1]
    on_hbm = dev if coll is None else dev & ~coll
    lay = lay_out(s.group, starts, ovh, dur, engine=eng if overlap else None, hbm_ns=np.where(on_hbm, mem, 0.0),
                  reads=s.reads, writes=s.writes, no_engine=E_NONE, collective=coll)
    return Timing(compute_ns=comp, memory_ns=mem, duration_ns=dur, start_ns=lay.start_ns, end_ns=lay.end_ns,
                  bound=bound, core_end_ns=lay.track_end_ns, group_start_ns=lay.group_start_ns,
                  group_end_ns=lay.group_end_ns, host_mask_ns=mask_ns)
