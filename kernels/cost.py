"""Modeled kernel time from a `KernelTrace`: a schedule of the instructions over the engines of one NeuronCore.

Model (each figure from the hardware accessor, each assumption from `ModelConfig`; checked against published
measurements in benchmarks/bench_calibration.py):
- Dependencies follow the bytes each instruction touches (`Instruction.read_spans` / `write_spans`): an
  instruction starts after the last writer of what it reads, and after the last readers and writer of what it
  writes, have finished. Two slices of one tensor are independent (per accessed slice, not per tensor).
- Tensor, Vector, Scalar and GpSimd engines run their instructions in program order. A copy issued without an
  engine (`nisa.tensor_copy`'s default engine.unknown, `nl.copy`, a tile assigned into another) goes where the
  compiler would put it, "based on engine workload" (nki.isa.tensor_copy API reference): the allowed engine
  (Vector; Scalar on NeuronCore-v3+; GpSimd unless PSUM is involved) that finishes it first.
  Tensor Engine: a matmul issues every max(N, MM_INIT) cycles (N = moving free size, x BF16/FP32 peak ratio in
  FP32), or its FLOPs at peak if larger (architecture guide: initiation interval max(N, 64)).
  Vector Engine: N cycles per input tile streamed (two-input ops ~2N) + a static overhead per instruction;
  Scalar Engine: N cycles + its static overhead (~189 ns for a dependent one-element instruction on NC-v2);
  N = elements / elements per cycle.
- DMA (nki-dma-overview.rst, nki-dma-bandwidth-guide.rst, trainium2_arch.rst):
  * on NeuronCore-v3/v4 each DMA instruction first takes `dge_instruction_ns` (~600 ns) on the descriptor
    generator; NeuronCore-v2 has none (static descriptors);
  * a transfer spreads over the DMA engines of the SBUF partitions it touches (16 engines, 8 partitions each:
    a 4-partition load uses one engine); each engine moves its share at the per-engine rate (core DMA
    bandwidth / 16) plus `dma_descriptor_overhead_ns` per contiguous run of the HBM side it moves (row
    descriptors of a strided tile vs one run of a contiguous block); DMA transposes run at the documented
    fraction of that rate (90% HBM->SBUF, 50% SBUF->SBUF on Trn2);
  * an engine takes the first free gap after the transfer is ready (16 engines, not one queue); the ~1.3 µs
    fixed latency delays the consumer but holds no engine.
- SBUF the kernel's live tiles do not fit in is spilled by the compiler's allocator: the spilled bytes are saved
  to HBM and reloaded on the DMA engines, in their idle time (`KernelTrace.spill_bytes`).
- Kernel time = last instruction's end + `ModelConfig.kernel_launch_overhead_ns` (preamble and completion).
A kernel runs on ONE PHYSICAL NeuronCore (`ChipSpec.core(lnc=1)`; the interpreter does not model the LNC grid).
"""
from __future__ import annotations

import bisect
import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field

from neuron_studio.hardware import ChipSpec, CoreFigures, SpecError, chip_spec
from neuron_studio.profiler.model.calibration import calibration_summary_or_none
from neuron_studio.profiler.model.config import ModelConfig
from neuron_studio.profiler.model.list_schedule import GapQueue

from .interpreter.access import Span
from .interpreter.dtypes import itemsize
from .interpreter.trace import ENGINES, Instruction, KernelTrace

__all__ = ["KernelTiming", "LineTiming", "kernel_time", "RANGED_FIGURES", "roofline_ns", "kernel_core", "instruction_ns",
           "DmaShape", "dma_shape"]

_FP32 = ("float32", "tfloat32")
_TWO_INPUT = ("tensor_tensor",)


def kernel_core(chip: str | ChipSpec) -> tuple[ChipSpec, CoreFigures]:
    """The spec of `chip` and the figures of the one physical NeuronCore a kernel runs on (LNC=1 view)."""
    if isinstance(chip, ChipSpec):
        spec = chip
    else:
        try:
            spec = chip_spec(chip)
        except SpecError as exc:
            raise ValueError(str(exc)) from exc
    if spec.kind != "trainium":
        raise ValueError(f"chip {spec.name!r} is not a Trainium chip; kernels model a NeuronCore")
    return spec, spec.core(1)


@dataclass(frozen=True)
class LineTiming:
    """Modeled busy time attributed to one kernel source line (summed over engines)."""

    file: str
    line: int
    ns: float
    instructions: int


@dataclass
class KernelTiming:
    """Modeled time of one kernel call: `total_ns` is the end of the schedule plus the launch preamble;
    `per_engine_ns` is each engine's busy time (engines overlap, so they do not add up to the total).

    `calibration` says how the kernel model compares with `chip`'s published measurements ("not validated against
    a measurement" for a chip without one). `range_ns` is (low, high) of `total_ns` over the ranges of the chip's
    assumed figures the kernel model reads (`assumptions`: figure -> (value used, low, high)); it is filled for a
    chip that is not validated, or when `kernel_time(..., ranges=True)` asks for it, else None."""

    kernel: str
    chip: str
    total_ns: float
    per_engine_ns: dict[str, float] = field(default_factory=dict)
    per_line: list[LineTiming] = field(default_factory=list)
    launch_overhead_ns: float = 0.0
    calibration: str = ""
    validated: bool = False
    range_ns: tuple[float, float] | None = None
    assumptions: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    @property
    def bound_engine(self) -> str:
        """The busiest engine (the one that limits the kernel when it is well pipelined)."""
        return max(self.per_engine_ns, key=self.per_engine_ns.__getitem__) if self.per_engine_ns else ""

    def utilization(self, engine: str) -> float:
        return self.per_engine_ns.get(engine, 0.0) / self.total_ns if self.total_ns else 0.0

    def describe(self) -> str:
        """One line: the modeled time, its range and the assumptions behind it, and the calibration statement."""
        text = f"{self.kernel}: {self.total_ns / 1e3:.1f} µs modeled on {self.chip}"
        if self.range_ns is not None:
            lo, hi = self.range_ns
            named = ", ".join(f"{k} {v[1]:g}–{v[2]:g} (used {v[0]:g})" for k, v in self.assumptions.items())
            text += f", range {lo / 1e3:.1f}–{hi / 1e3:.1f} µs" + (f" over the assumed {named}" if named else "")
        return f"{text}; {self.calibration}" if self.calibration else text


# The chip figures the kernel model reads that a spec may give as an assumed range, and which way each moves the
# time: +1 a higher value is slower, -1 a higher value is faster (a DMA transpose's share of the DMA rate).
RANGED_FIGURES: dict[str, int] = {
    "dma_descriptor_overhead_ns": +1,
    "dge_instruction_ns": +1,
    "dma_transpose_hbm_percent": -1,
    "dma_transpose_sbuf_percent": -1,
}


def _narrow(dtype: str) -> bool:
    """Floats of 2 bytes or fewer take the engines' 16-bit data path: BF16/FP16 on every chip, FP8 documented on
    Trn3 and assumed on Trn2 (specs.json notes); integers use the 32-bit ("others") width."""
    try:
        return dtype.startswith(("bfloat", "float")) and itemsize(dtype) <= 2
    except KeyError:
        return False


@dataclass(frozen=True)
class DmaShape:
    """How one transfer occupies the DMA engines: engines first..first+engines-1, each busy `engine_ns`."""

    first: int
    engines: int
    engine_ns: float


def dma_shape(nbytes: int, partitions: tuple[int, int], descriptors: int, spec: ChipSpec, opcode: str = "dma_copy"
              ) -> DmaShape:
    """The DMA engines a transfer of `nbytes` over SBUF `partitions` (first, count) with `descriptors`
    contiguous runs on its HBM side uses, and how long each is busy (see the module docstring)."""
    n_eng = int(spec.dma_engines_per_core)
    per_eng = max(1, int(spec.partition_max) // n_eng)
    first_p, count = max(0, partitions[0]), max(1, partitions[1])
    first = min(n_eng - 1, first_p // per_eng)
    last = min(n_eng - 1, (first_p + count - 1) // per_eng)
    engines = last - first + 1
    rate = float(spec.core_dma_bandwidth_bytes_per_s or 0.0) / n_eng / 1e9  # bytes per ns per engine
    if opcode.startswith("dma_transpose"):
        pct = spec.dma_transpose_sbuf_percent if opcode.endswith(".sbuf") else spec.dma_transpose_hbm_percent
        rate *= float(pct) / 100 if pct else 1.0
    runs = -(-max(1, descriptors) // engines)
    return DmaShape(first, engines, nbytes / engines / rate + runs * float(spec.dma_descriptor_overhead_ns or 0.0))


def instruction_ns(engine: str, dtype: str, elements: int, flops: int, nbytes: int, cycles_hint: int,
                   spec: ChipSpec, core: CoreFigures | None = None, *, opcode: str = "",
                   partitions: tuple[int, int] = (0, 0), descriptors: int = 0) -> float:
    """Time `engine` is busy with one instruction on one physical core of `spec` (see module docstring).

    For DMA this is how long each engine it uses is busy; the descriptor generation and the fixed DMA latency
    are added by the schedule, not here."""
    core = core or spec.core(1)
    if engine == "dma":
        parts = partitions if partitions[1] else (0, int(spec.partition_max))
        return dma_shape(nbytes, parts, descriptors, spec, opcode).engine_ns
    if engine == "tensor":
        fp32 = dtype in _FP32
        peak = (core.tensor_fp32_flops if fp32 else core.tensor_bf16_flops) / 1e9  # flops per ns
        slowdown = round(core.tensor_bf16_flops / core.tensor_fp32_flops) if fp32 else 1
        clock = spec.tensor_engine_clock_hz / 1e9
        cycles = max(cycles_hint * slowdown, float(spec.tensor_mm_init_cycles or 0))
        return max(flops / peak, cycles / clock)
    narrow = _narrow(dtype)
    if engine == "vector":
        per_cycle = spec.vector_elems_per_cycle_16bit if narrow else spec.vector_elems_per_cycle_32bit
        clock = spec.vector_clock_hz / 1e9
        static = float(spec.vector_static_overhead_cycles or 0)
    elif engine == "scalar":
        per_cycle = spec.scalar_elems_per_cycle_16bit if narrow else spec.scalar_elems_per_cycle_32bit
        clock = spec.scalar_clock_hz / 1e9
        static = float(spec.scalar_static_overhead_cycles or 0)
    else:  # gpsimd: no published rule of thumb; the Vector Engine's static overhead is assumed
        per_cycle, clock = spec.gpsimd_elems_per_cycle, spec.gpsimd_clock_hz / 1e9
        static = float(spec.vector_static_overhead_cycles or 0)
    passes = 2 if (engine == "vector" and opcode.startswith(_TWO_INPUT)) else 1
    return (passes * elements / per_cycle + static) / clock


class _Written:
    """The write entries [span, write end, last read end] of one allocation, sorted by first byte, so a lookup
    only visits entries that can overlap (a kernel storing 25,600 slices of one output stays linear)."""

    __slots__ = ("los", "entries", "reach")

    def __init__(self) -> None:
        self.los: list[int] = []
        self.entries: list[list] = []
        self.reach = 0  # the longest extent (end - lo) of any entry: how far back an overlap can start

    def near(self, sp: Span) -> range:
        """Indices of the entries whose first byte lies where an entry overlapping `sp` must start."""
        return range(bisect.bisect_left(self.los, sp.lo - self.reach), bisect.bisect_left(self.los, sp.end))

    def add(self, sp: Span, done: float) -> None:
        idx = self.near(sp)
        keep = [i for i in idx if not sp.covers(self.entries[i][0])]  # a covered entry is superseded
        if len(keep) != len(idx):
            self.los[idx.start:idx.stop] = [self.los[i] for i in keep]
            self.entries[idx.start:idx.stop] = [self.entries[i] for i in keep]
        i = bisect.bisect_right(self.los, sp.lo)
        self.los.insert(i, sp.lo)
        self.entries.insert(i, [sp, done, 0.0])
        self.reach = max(self.reach, sp.end - sp.lo)


class _Hazards:
    """Per-allocation byte spans with the end of their last write and last read (see `Span`)."""

    def __init__(self) -> None:
        self.written: dict[int, _Written] = {}
        self.read_only: dict[int, float] = {}  # buffer -> last read of bytes no recorded write covers

    def earliest(self, reads: tuple[Span, ...], writes: tuple[Span, ...]) -> float:
        t = 0.0
        for r in reads:
            w = self.written.get(r.buffer)
            if w is not None:
                for i in w.near(r):
                    sp, w_end, _ = w.entries[i]
                    if w_end > t and sp.overlaps(r):
                        t = w_end
        for x in writes:
            w = self.written.get(x.buffer)
            if w is not None:
                for i in w.near(x):
                    sp, w_end, r_end = w.entries[i]
                    last = w_end if w_end > r_end else r_end
                    if last > t and sp.overlaps(x):
                        t = last
            t = max(t, self.read_only.get(x.buffer, 0.0))
        return t

    def commit(self, reads: tuple[Span, ...], writes: tuple[Span, ...], done: float) -> None:
        for r in reads:
            hit = False
            w = self.written.get(r.buffer)
            if w is not None:
                for i in w.near(r):
                    e = w.entries[i]
                    if e[0].overlaps(r):
                        hit = True
                        if e[2] < done:
                            e[2] = done
            if not hit and self.read_only.get(r.buffer, 0.0) < done:
                self.read_only[r.buffer] = done
        for x in writes:
            w = self.written.get(x.buffer)
            if w is None:
                w = self.written[x.buffer] = _Written()
            w.add(x, done)


class _KernelSchedule:
    """Engines of one physical NeuronCore: in-order compute engines, DMA engines that take the first free gap,
    the descriptor generator (NC-v3/v4), and the byte-span hazards between instructions."""

    GAPS_KEPT = 32  # busy intervals per DMA engine / generator searched for a free gap (older gaps count as busy)

    def __init__(self, spec: ChipSpec) -> None:
        self.free: dict[str, float] = defaultdict(float)
        self.n_dma = int(spec.dma_engines_per_core)
        # engines with identical timelines share one queue (copy on divergence): a full-width transfer books once
        shared = GapQueue()
        self.dma = [shared] * self.n_dma
        self.users: dict[int, int] = {id(shared): self.n_dma}
        self.dge_ns = float(spec.dge_instruction_ns or 0.0)
        self.dge = GapQueue()
        self.latency = float(spec.dma_fixed_latency_ns or 0.0)
        self.hazards = _Hazards()
        self.end = 0.0

    def ready(self, ins: Instruction) -> float:
        return self.hazards.earliest(ins.read_spans, ins.write_spans)

    def compute(self, engine: str, dur: float, ins: Instruction, ready: float | None = None) -> None:
        ready = self.hazards.earliest(ins.read_spans, ins.write_spans) if ready is None else ready
        start = max(ready, self.free[engine])
        done = start + dur
        self.free[engine] = done
        self.hazards.commit(ins.read_spans, ins.write_spans, done)
        self.end = max(self.end, done)

    def transfer(self, shape: DmaShape, ins: Instruction) -> None:
        ready = self.hazards.earliest(ins.read_spans, ins.write_spans)
        if self.dge_ns:
            ready = self.dge.reserve(ready, self.dge_ns) + self.dge_ns
            self.dge.forget_gaps_before(self.GAPS_KEPT)
        done = self._book(shape, ready) + self.latency
        self.hazards.commit(ins.read_spans, ins.write_spans, done)
        self.end = max(self.end, done)

    def background(self, shape: DmaShape) -> None:
        """Traffic with no dependencies (spills): each engine's share in its first free gap."""
        self.end = max(self.end, self._book(shape, 0.0))

    def _book(self, shape: DmaShape, ready: float) -> float:
        """Book `shape.engine_ns` on each of its engines at their first free gap after `ready`; the last end."""
        groups: dict[int, tuple[GapQueue, list[int]]] = {}
        for e in range(shape.first, shape.first + shape.engines):
            groups.setdefault(id(self.dma[e]), (self.dma[e], []))[1].append(e)
        last = ready
        for q, engines in groups.values():
            if self.users[id(q)] != len(engines):  # shared with engines outside this transfer: split off
                self.users[id(q)] -= len(engines)
                q = q.copy()
                self.users[id(q)] = len(engines)
                for e in engines:
                    self.dma[e] = q
            last = max(last, q.reserve(ready, shape.engine_ns) + shape.engine_ns)
            q.forget_gaps_before(self.GAPS_KEPT)
        return last


def _schedule(trace: KernelTrace, spec: ChipSpec, core: CoreFigures
              ) -> tuple[float, dict[str, float], dict[tuple[str, int], list[float]]]:
    """The schedule of `trace` on one core of `spec`: its end, each engine's busy time, busy time per line."""
    pmax = int(spec.partition_max)
    busy = {e: 0.0 for e in ENGINES}
    lines: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0])
    sched = _KernelSchedule(spec)
    ins: Instruction
    for ins in trace.instructions:
        eng = ins.engine if ins.engine in busy else "gpsimd"
        if eng == "dma":
            shape = dma_shape(ins.bytes, ins.partitions if ins.partitions[1] else (0, pmax), ins.descriptors, spec,
                              ins.opcode)
            sched.transfer(shape, ins)
            dur = shape.engine_ns
            busy[eng] += dur * shape.engines / sched.n_dma
        elif ins.alternatives:  # no engine named: the compiler's pick, the engine that finishes it first
            ready = sched.ready(ins)
            choice = []
            for e in (eng, *ins.alternatives):
                d = instruction_ns(e, ins.dtype, ins.elements, ins.flops, ins.bytes, ins.cycles_hint, spec, core,
                                   opcode=ins.opcode)
                choice.append((max(ready, sched.free[e]) + d, d, e))
            _, dur, eng = min(choice)
            sched.compute(eng, dur, ins, ready)
            busy[eng] += dur
        else:
            dur = instruction_ns(eng, ins.dtype, ins.elements, ins.flops, ins.bytes, ins.cycles_hint, spec, core,
                                 opcode=ins.opcode)
            sched.compute(eng, dur, ins)
            busy[eng] += dur
        acc = lines[(ins.file, ins.line)]
        acc[0] += dur
        acc[1] += 1
    if trace.spill_bytes:  # saved and reloaded whole partitions rows: two runs per partition
        spill = dma_shape(trace.spill_bytes, (0, pmax), 2 * pmax, spec)
        sched.background(spill)
        busy["dma"] += spill.engine_ns * spill.engines / sched.n_dma
    return sched.end, busy, lines


def _range_ends(spec: ChipSpec) -> tuple[ChipSpec, ChipSpec, dict[str, tuple[float, float, float]]]:
    """`spec` at the fast and the slow end of its ranged figures the kernel model reads, and those figures."""
    fast: dict[str, float] = {}
    slow: dict[str, float] = {}
    used: dict[str, tuple[float, float, float]] = {}
    for name, sign in RANGED_FIGURES.items():
        if name not in spec.ranges or getattr(spec, name, None) is None:
            continue
        lo, hi = spec.ranges[name]
        used[name] = (float(getattr(spec, name)), float(lo), float(hi))
        fast[name], slow[name] = (lo, hi) if sign > 0 else (hi, lo)
    return dataclasses.replace(spec, **fast), dataclasses.replace(spec, **slow), used


def kernel_time(trace: KernelTrace, chip: str | ChipSpec | None = None, config: ModelConfig | None = None, *,
                ranges: bool | None = None) -> KernelTiming:
    """Model the time of `trace` on `chip` (default: the chip the trace was recorded for).

    `ranges`: also model the kernel at both ends of the chip's assumed figures (`KernelTiming.range_ns`); by
    default only for a chip no published measurement validates (Trn3), whose figures are spec-derived."""
    chip = chip or trace.chip
    cfg = config or ModelConfig()
    spec, core = kernel_core(chip)
    end, busy, lines = _schedule(trace, spec, core)
    per_line = sorted((LineTiming(f, ln, v[0], int(v[1])) for (f, ln), v in lines.items()), key=lambda t: -t.ns)
    launch = cfg.kernel_launch_overhead_ns if trace.instructions else 0.0
    cal = calibration_summary_or_none(spec.name)
    validated = bool(cal and cal.validated)
    timing = KernelTiming(kernel=trace.kernel, chip=spec.name, total_ns=end + launch, per_engine_ns=busy,
                          per_line=per_line, launch_overhead_ns=launch, validated=validated,
                          calibration=cal.text if cal else "no calibration data set")
    if ranges or (ranges is None and not validated):
        fast, slow, used = _range_ends(spec)
        timing.assumptions = used
        timing.range_ns = (_schedule(trace, fast, fast.core(1))[0] + launch,
                           _schedule(trace, slow, slow.core(1))[0] + launch) if used else (timing.total_ns,) * 2
    return timing


def roofline_ns(flops: float, nbytes: float, chip: str | ChipSpec = "trn2", dtype: str = "bfloat16") -> float:
    """Op-level roofline on one physical NeuronCore: max(flops / Tensor Engine peak, bytes / what the core can
    stream from HBM: min(its HBM share, its DMA engines' peak))."""
    _, core = kernel_core(chip)
    peak = (core.tensor_fp32_flops if dtype in _FP32 else core.tensor_bf16_flops) / 1e9
    return max(flops / peak, nbytes / (core.stream_bytes / 1e9))
