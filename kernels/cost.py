"""Modeled kernel time from a `KernelTrace`: a schedule of the instructions over the engines of one NeuronCore.

Model (each figure from the hardware accessor, each assumption from `ModelConfig`; calibrated against the NKI
tutorials' published latencies, benchmarks/bench_calibration.py):
- Every engine (Tensor, Vector, Scalar, GpSimd) and the DMA queues execute their instructions in program order;
  an instruction starts when its engine is free and the instructions that wrote its inputs (and last read or
  wrote its outputs) have finished: the allocations each instruction reads and writes are in the trace. So
  loads overlap compute when the kernel double-buffers (fresh tiles per iteration) and serialise when it does
  not.
- Tensor Engine: a matmul issues every max(N, MM_INIT) cycles (N = moving free size, x BF16/FP32 peak ratio in
  FP32), or its FLOPs at peak if larger (architecture guide: initiation interval max(N, 64)).
- Vector Engine: N cycles per input tile streamed (two-input ops ~2N) + a static overhead per instruction;
  Scalar Engine: N cycles + its static overhead (~189 ns for a dependent one-element instruction on NC-v2);
  N = elements / elements per cycle.
- DMA: bytes / (per-core DMA peak x payload efficiency) occupies the queues (a transfer takes the first free
  slot after its inputs are ready, not strictly in program order: 16 engines); the ~1.3 µs fixed latency
  delays the consumer but not the next transfer. Efficiency = bytes-per-partition / 4 KiB (saturation), floored at the
  fitted `ModelConfig.dma_small_payload_efficiency`.
- Kernel time = last instruction's end + `ModelConfig.kernel_launch_overhead_ns` (preamble and completion).
A kernel runs on ONE PHYSICAL NeuronCore (`ChipSpec.core(lnc=1)`; the interpreter does not model the LNC grid).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from neuron_studio.hardware import ChipSpec, CoreFigures, SpecError, chip_spec
from neuron_studio.profiler.model.config import ModelConfig
from neuron_studio.profiler.model.list_schedule import ListSchedule

from .interpreter.dtypes import itemsize
from .interpreter.trace import ENGINES, Instruction, KernelTrace

__all__ = ["KernelTiming", "LineTiming", "kernel_time", "roofline_ns", "kernel_core", "instruction_ns",
           "dma_efficiency"]

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
    `per_engine_ns` is each engine's busy time (engines overlap, so they do not add up to the total)."""

    kernel: str
    chip: str
    total_ns: float
    per_engine_ns: dict[str, float] = field(default_factory=dict)
    per_line: list[LineTiming] = field(default_factory=list)
    launch_overhead_ns: float = 0.0

    @property
    def bound_engine(self) -> str:
        """The busiest engine (the one that limits the kernel when it is well pipelined)."""
        return max(self.per_engine_ns, key=self.per_engine_ns.__getitem__) if self.per_engine_ns else ""

    def utilization(self, engine: str) -> float:
        return self.per_engine_ns.get(engine, 0.0) / self.total_ns if self.total_ns else 0.0


def _narrow(dtype: str) -> bool:
    """Floats of 2 bytes or fewer take the engines' 16-bit data path: BF16/FP16 on every chip, FP8 documented on
    Trn3 and assumed on Trn2 (specs.json notes); integers use the 32-bit ("others") width."""
    try:
        return dtype.startswith(("bfloat", "float")) and itemsize(dtype) <= 2
    except KeyError:
        return False


def dma_efficiency(bytes_per_partition: float, spec: ChipSpec, config: ModelConfig) -> float:
    """Fraction of the per-core DMA peak a transfer with this contiguous payload per partition reaches."""
    sat = float(spec.dma_saturation_bytes_per_partition or 4096)
    return min(1.0, max(config.dma_small_payload_efficiency, bytes_per_partition / sat))


def _bytes_per_partition(nbytes: int, shapes: tuple[tuple[int, ...], ...], pmax: int) -> float:
    parts = max((s[0] for s in shapes if s and s[0] <= pmax), default=1)
    return nbytes / max(1, parts)


def instruction_ns(engine: str, dtype: str, elements: int, flops: int, nbytes: int, cycles_hint: int,
                   spec: ChipSpec, core: CoreFigures | None = None, *, opcode: str = "",
                   shapes: tuple[tuple[int, ...], ...] = (), config: ModelConfig | None = None) -> float:
    """Time `engine` is busy with one instruction on one physical core of `spec` (see module docstring).

    For DMA this is the queue occupancy; the fixed DMA latency is added by the schedule, not here."""
    core = core or spec.core(1)
    cfg = config or ModelConfig()
    if engine == "dma":
        bpp = _bytes_per_partition(nbytes, shapes, spec.partition_max or 128)
        return nbytes / (float(spec.core_dma_bandwidth_bytes_per_s or core.dma_bytes) / 1e9
                         * dma_efficiency(bpp, spec, cfg))
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


def kernel_time(trace: KernelTrace, chip: str | None = None, config: ModelConfig | None = None) -> KernelTiming:
    """Model the time of `trace` on `chip` (default: the chip the trace was recorded for)."""
    chip = chip or trace.chip
    cfg = config or ModelConfig()
    spec, core = kernel_core(chip)
    latency = float(spec.dma_fixed_latency_ns or 0.0)
    busy = {e: 0.0 for e in ENGINES}
    lines: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0])
    # DMA transfers take the first free gap of the 16 DMA queues; the other engines run in program order
    sched = ListSchedule(gap_filling=("dma",))
    ins: Instruction
    for ins in trace.instructions:
        eng = ins.engine if ins.engine in busy else "gpsimd"
        dur = instruction_ns(eng, ins.dtype, ins.elements, ins.flops, ins.bytes, ins.cycles_hint, spec, core,
                             opcode=ins.opcode, shapes=ins.shapes, config=cfg)
        sched.place(eng, dur, ins.reads, ins.writes, latency=latency if eng == "dma" else 0.0)
        busy[eng] += dur
        acc = lines[(ins.file, ins.line)]
        acc[0] += dur
        acc[1] += 1
    end = sched.end
    per_line = sorted((LineTiming(f, ln, v[0], int(v[1])) for (f, ln), v in lines.items()), key=lambda t: -t.ns)
    launch = cfg.kernel_launch_overhead_ns if trace.instructions else 0.0
    return KernelTiming(kernel=trace.kernel, chip=chip, total_ns=end + launch, per_engine_ns=busy,
                        per_line=per_line, launch_overhead_ns=launch)


def roofline_ns(flops: float, nbytes: float, chip: str | ChipSpec = "trn2", dtype: str = "bfloat16") -> float:
    """Op-level roofline on one physical NeuronCore: max(flops / Tensor Engine peak, bytes / what the core can
    stream from HBM: min(its HBM share, its DMA engines' peak))."""
    _, core = kernel_core(chip)
    peak = (core.tensor_fp32_flops if dtype in _FP32 else core.tensor_bf16_flops) / 1e9
    return max(flops / peak, nbytes / (core.stream_bytes / 1e9))
