"""Modeled kernel time from a `KernelTrace`: per engine, per kernel source line.

Model (deliberately simple, documented so its numbers can be read honestly):
- Compute instruction: time = max(flops / engine peak, streamed elements / engine throughput)
  + INSTRUCTION_OVERHEAD_CYCLES at the engine clock. For the Tensor Engine the streamed term is the moving
  tile's free size (one column per cycle; slower in fp32 by the BF16/FP32 peak ratio, 4x), so small tiles show
  their poor utilisation. Vector/Scalar Engines use their 16-bit width for floats of 2 bytes or fewer.
- DMA: bytes / per-core DMA bandwidth + DMA_FIXED_NS per instruction. Per-core bandwidth = min(chip DMA,
  chip HBM bandwidth) shared evenly by the chip's physical NeuronCores.
- Engines run concurrently: kernel time = max over engines of their busy time. This is an optimistic overlap
  assumption (perfect pipelining, no dependency stalls); it is a lower bound on the real kernel time.
Hardware figures come from the one accessor (`neuron_studio.hardware`); a kernel runs on ONE PHYSICAL NeuronCore,
i.e. `ChipSpec.core(lnc=1)` under the accessor's core convention (the interpreter does not model the LNC grid).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from neuron_studio.hardware import ChipSpec, CoreFigures, SpecError, chip_spec

from .interpreter.dtypes import itemsize
from .interpreter.trace import ENGINES, KernelTrace

__all__ = ["KernelTiming", "LineTiming", "kernel_time", "roofline_ns", "kernel_core", "INSTRUCTION_OVERHEAD_CYCLES",
           "DMA_FIXED_NS"]

INSTRUCTION_OVERHEAD_CYCLES = 64  # [assumed] fixed issue/drain cost per compute instruction, engine cycles
DMA_FIXED_NS = 100.0  # [assumed] per dma_copy: descriptor issue; queue latency assumed hidden by the 16 DMA queues
_FP32 = ("float32", "tfloat32")


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
    """Modeled time of one kernel call."""

    kernel: str
    chip: str
    total_ns: float
    per_engine_ns: dict[str, float] = field(default_factory=dict)
    per_line: list[LineTiming] = field(default_factory=list)

    @property
    def bound_engine(self) -> str:
        """The engine whose busy time sets the kernel time."""
        return max(self.per_engine_ns, key=self.per_engine_ns.__getitem__) if self.per_engine_ns else ""

    def utilization(self, engine: str) -> float:
        return self.per_engine_ns.get(engine, 0.0) / self.total_ns if self.total_ns else 0.0


def _dma_bytes_per_ns(core: CoreFigures) -> float:
    return min(core.dma_bytes, core.hbm_bytes) / 1e9


def _narrow(dtype: str) -> bool:
    """Floats of 2 bytes or fewer take the engines' 16-bit data path: BF16/FP16 on every chip, FP8 documented on
    Trn3 and assumed on Trn2 (specs.json notes); integers use the 32-bit ("others") width."""
    try:
        return dtype.startswith(("bfloat", "float")) and itemsize(dtype) <= 2
    except KeyError:
        return False


def instruction_ns(engine: str, dtype: str, elements: int, flops: int, nbytes: int, cycles_hint: int,
                   spec: ChipSpec, core: CoreFigures | None = None) -> float:
    """Modeled time of one instruction on `engine` on one physical core of `spec` (see module docstring)."""
    core = core or spec.core(1)
    if engine == "dma":
        return nbytes / _dma_bytes_per_ns(core) + DMA_FIXED_NS
    if engine == "tensor":
        fp32 = dtype in _FP32
        peak = (core.tensor_fp32_flops if fp32 else core.tensor_bf16_flops) / 1e9  # flops per ns
        slowdown = round(core.tensor_bf16_flops / core.tensor_fp32_flops) if fp32 else 1
        clock = spec.tensor_engine_clock_hz / 1e9
        return max(flops / peak, cycles_hint * slowdown / clock) + INSTRUCTION_OVERHEAD_CYCLES / clock
    narrow = _narrow(dtype)
    if engine == "vector":
        per_cycle = spec.vector_elems_per_cycle_16bit if narrow else spec.vector_elems_per_cycle_32bit
        clock = spec.vector_clock_hz / 1e9
    elif engine == "scalar":
        per_cycle = spec.scalar_elems_per_cycle_16bit if narrow else spec.scalar_elems_per_cycle_32bit
        clock = spec.scalar_clock_hz / 1e9
    else:  # gpsimd and anything unknown
        per_cycle, clock = spec.gpsimd_elems_per_cycle, spec.gpsimd_clock_hz / 1e9
    # Element-wise engines do ~1 op per element per lane, so the throughput term dominates the flops term.
    return max(elements, flops / 2) / (per_cycle * clock) + INSTRUCTION_OVERHEAD_CYCLES / clock


def kernel_time(trace: KernelTrace, chip: str | None = None) -> KernelTiming:
    """Model the time of `trace` on `chip` (default: the chip the trace was recorded for)."""
    chip = chip or trace.chip
    spec, core = kernel_core(chip)
    per_engine: dict[str, float] = {e: 0.0 for e in ENGINES}
    lines: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0])
    for ins in trace.instructions:
        ns = instruction_ns(ins.engine, ins.dtype, ins.elements, ins.flops, ins.bytes, ins.cycles_hint, spec, core)
        per_engine[ins.engine] = per_engine.get(ins.engine, 0.0) + ns
        acc = lines[(ins.file, ins.line)]
        acc[0] += ns
        acc[1] += 1
    per_line = sorted((LineTiming(f, ln, v[0], int(v[1])) for (f, ln), v in lines.items()),
                      key=lambda t: -t.ns)
    total = max(per_engine.values()) if per_engine else 0.0
    return KernelTiming(kernel=trace.kernel, chip=chip, total_ns=total, per_engine_ns=per_engine,
                        per_line=per_line)


def roofline_ns(flops: float, nbytes: float, chip: str = "trn2", dtype: str = "bfloat16") -> float:
    """Op-level roofline on one physical NeuronCore: max(flops / Tensor Engine peak, bytes / per-core bandwidth)."""
    _, core = kernel_core(chip)
    peak = (core.tensor_fp32_flops if dtype in _FP32 else core.tensor_bf16_flops) / 1e9
    return max(flops / peak, nbytes / _dma_bytes_per_ns(core))
