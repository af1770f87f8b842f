"""Modeled kernel time from a `KernelTrace`: per engine, per kernel source line.

Model (deliberately simple, documented so its numbers can be read honestly):
- Compute instruction: time = max(flops / engine peak, streamed elements / engine throughput)
  + INSTRUCTION_OVERHEAD_CYCLES at the engine clock. For the Tensor Engine the streamed term is the moving
  tile's free size (one column per cycle; 4x slower in fp32), so small tiles show their poor utilisation.
- DMA: bytes / per-core DMA bandwidth + DMA_FIXED_NS per instruction. Per-core bandwidth = min(chip DMA,
  chip HBM bandwidth) / NeuronCores per chip.
- Engines run concurrently: kernel time = max over engines of their busy time. This is an optimistic overlap
  assumption (perfect pipelining, no dependency stalls); it is a lower bound on the real kernel time.
Hardware figures come from /work/shared/reference/trainium.md §6 (AWS Neuron architecture docs).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .interpreter.trace import ENGINES, KernelTrace

__all__ = ["KernelTiming", "LineTiming", "kernel_time", "roofline_ns", "CHIPS", "INSTRUCTION_OVERHEAD_CYCLES",
           "DMA_FIXED_NS"]

INSTRUCTION_OVERHEAD_CYCLES = 64  # fixed issue/drain cost per compute instruction, engine cycles
DMA_FIXED_NS = 100.0  # per dma_copy: descriptor issue; queue latency assumed hidden by the 16 DMA queues
FP32_MATMUL_SLOWDOWN = 4  # per-core Tensor Engine: 79 BF16 vs 20 FP32 TFLOPS (trn2/trn3), 92 vs 23 (trn1)

# Per NeuronCore (physical) figures; trainium.md §6. Throughputs in elements/cycle, clocks in GHz.
CHIPS: dict[str, dict[str, float]] = {
    "trn1": {"cores": 2, "pe_clock_ghz": 2.8, "pe_bf16_tflops": 92.0, "pe_fp32_tflops": 23.0,
             "vector_clock_ghz": 1.12, "vector_elems_bf16": 128, "vector_elems": 128,
             "scalar_clock_ghz": 1.4, "scalar_elems": 128, "gpsimd_clock_ghz": 1.4, "gpsimd_elems": 128,
             "dma_gbps_chip": 1000.0, "hbm_gbps_chip": 880.0},   # 820 GiB/s
    "trn2": {"cores": 8, "pe_clock_ghz": 2.4, "pe_bf16_tflops": 79.0, "pe_fp32_tflops": 20.0,
             "vector_clock_ghz": 0.96, "vector_elems_bf16": 512, "vector_elems": 256,
             "scalar_clock_ghz": 1.2, "scalar_elems": 128, "gpsimd_clock_ghz": 1.2, "gpsimd_elems": 128,
             "dma_gbps_chip": 3500.0, "hbm_gbps_chip": 2900.0},
    "trn3": {"cores": 8, "pe_clock_ghz": 2.4, "pe_bf16_tflops": 79.0, "pe_fp32_tflops": 20.0,
             "vector_clock_ghz": 1.2, "vector_elems_bf16": 512, "vector_elems": 256,
             "scalar_clock_ghz": 1.2, "scalar_elems": 128, "gpsimd_clock_ghz": 1.2, "gpsimd_elems": 128,
             "dma_gbps_chip": 4900.0, "hbm_gbps_chip": 4900.0},
}
# GpSimd throughput (8 cores x 512-bit = 128 fp32 lanes) is derived, not documented.


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


def _dma_bytes_per_ns(spec: dict[str, float]) -> float:
    return min(spec["dma_gbps_chip"], spec["hbm_gbps_chip"]) / spec["cores"]  # GB/s == bytes/ns


def instruction_ns(engine: str, dtype: str, elements: int, flops: int, nbytes: int, cycles_hint: int,
                   spec: dict[str, float]) -> float:
    """Modeled time of one instruction on `engine` (see module docstring)."""
    if engine == "dma":
        return nbytes / _dma_bytes_per_ns(spec) + DMA_FIXED_NS
    if engine == "tensor":
        fp32 = dtype in ("float32", "tfloat32")
        peak = spec["pe_fp32_tflops" if fp32 else "pe_bf16_tflops"] * 1e3  # flops per ns
        stream_cycles = cycles_hint * (FP32_MATMUL_SLOWDOWN if fp32 else 1)
        clock = spec["pe_clock_ghz"]
        return max(flops / peak, stream_cycles / clock) + INSTRUCTION_OVERHEAD_CYCLES / clock
    if engine == "vector":
        per_cycle = spec["vector_elems_bf16"] if dtype in ("bfloat16", "float16") else spec["vector_elems"]
        clock = spec["vector_clock_ghz"]
    elif engine == "scalar":
        per_cycle, clock = spec["scalar_elems"], spec["scalar_clock_ghz"]
    else:  # gpsimd and anything unknown
        per_cycle, clock = spec["gpsimd_elems"], spec["gpsimd_clock_ghz"]
    # Element-wise engines do ~1 op per element per lane, so the throughput term dominates the flops term.
    return max(elements, flops / 2) / (per_cycle * clock) + INSTRUCTION_OVERHEAD_CYCLES / clock


def kernel_time(trace: KernelTrace, chip: str | None = None) -> KernelTiming:
    """Model the time of `trace` on `chip` (default: the chip the trace was recorded for)."""
    chip = chip or trace.chip
    if chip not in CHIPS:
        raise ValueError(f"unknown chip {chip!r}; expected one of {sorted(CHIPS)}")
    spec = CHIPS[chip]
    per_engine: dict[str, float] = {e: 0.0 for e in ENGINES}
    lines: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0])
    for ins in trace.instructions:
        ns = instruction_ns(ins.engine, ins.dtype, ins.elements, ins.flops, ins.bytes, ins.cycles_hint, spec)
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
    """Op-level roofline on one NeuronCore: max(flops / Tensor Engine peak, HBM bytes / per-core bandwidth)."""
    spec = CHIPS[chip]
    peak = spec["pe_fp32_tflops" if dtype in ("float32", "tfloat32") else "pe_bf16_tflops"] * 1e3
    return max(flops / peak, nbytes / _dma_bytes_per_ns(spec))
