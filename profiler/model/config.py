"""Every assumption of the NeuronCore performance model, named in one place with its rationale.

Nothing in `ModelConfig` is a documented hardware figure (those live in neuron_studio/hardware/specs.json); each field is a
judgement call the model needs. Change one with `ModelConfig(field=...)` or `config.replace(field=...)`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

from neuron_studio.profiler.vocabulary import MODES

__all__ = ["ModelConfig", "ConfigError", "MODES", "FUSION_RULES"]

FUSION_RULES = ("chain", "none")


class ConfigError(ValueError):
    """A ModelConfig field has an impossible value (names the field)."""


@dataclass(frozen=True)
class ModelConfig:
    """Assumed constants of the performance model. All are overridable; all are labelled assumptions."""

    lnc: int | None = None
    """Physical NeuronCores per logical core (the device torch sees), one of the chip's `lnc_allowed`. None = the
    chip's default (Trn2/Trn3: 2, Trn1: 1). Rates follow the core convention of `neuron_studio.hardware`."""

    eager_launch_overhead_ns: float = 15_000.0
    """Per-op launch cost in eager mode. Each eager op is its own NEFF executed through the Neuron runtime
    (trainium.md §1.5); runtime submit + completion for a small NEFF is on the order of 10-20 µs. Unmeasured:
    verify on a device."""

    adaptive_launch_overhead_ns: float = 15_000.0
    """Launch cost of one adaptive-eager fusion group: a fused group is still one NEFF execution, so the same
    runtime cost as an eager op is assumed."""

    compile_launch_overhead_ns: float = 15_000.0
    """Launch cost of one compiled-graph execution (one NEFF per graph, §1.8). Same runtime path as eager."""

    h100_launch_overhead_ns: float = 4_000.0
    """Per-launch cost on the H100 comparison: PyTorch eager CUDA dispatch + kernel launch is ~3-5 µs per
    kernel without CUDA graphs; 4 µs assumed. Applied per launch of the same grouping as the Trainium run."""

    tensor_efficiency: float = 0.9
    """Achievable fraction of Tensor Engine peak for large matmuls (tiling, PSUM drain, weight loads)."""

    vector_efficiency: float = 0.9
    """Achievable fraction of Vector Engine elements/cycle (instruction issue and partition-tail losses)."""

    scalar_efficiency: float = 0.9
    """Achievable fraction of Scalar Engine elements/cycle (activation table switches ignored)."""

    gpsimd_efficiency: float = 0.5
    """Achievable fraction of GpSimd lane throughput: gather/scatter/sort are irregular and index-bound."""

    dma_efficiency: float = 0.9
    """Achievable fraction of DMA bandwidth for copies/layout changes (descriptor overhead, small chunks)."""

    hbm_efficiency: float = 0.85
    """Achievable fraction of HBM bandwidth for streaming ops (refresh, bank conflicts, DMA queueing)."""

    hbm_shared_by_cores: bool = True
    """True: each logical core gets chip HBM bandwidth / logical cores per chip (trainium.md §6: ≈0.73 TB/s per
    logical core on Trn2). False: one core may use the whole chip's bandwidth (optimistic when others idle)."""

    host_link_bytes_per_s: float = 64e9
    """Host↔device link bandwidth for CPU-fallback copies and explicit transfers: PCIe Gen5 x16 ≈ 64 GB/s per
    direction. Assumed; not in the Neuron reference."""

    host_transfer_latency_ns: float = 10_000.0
    """Fixed cost of each host↔device copy (DMA setup + runtime sync), paid per copy direction."""

    collective_latency_scale: float = 1.0
    """Multiplier on the chip's published collective latencies (specs: nccom-test's small-message floor within
    an instance, the 64-rank plateau across instances). The published figures are for 2 ranks on one instance
    and 64 ranks on two; other rank counts are unmeasured, so the summary's range uses 0.5x-2x."""

    host_cpu_bytes_per_s: float = 10e9
    """Host memory throughput of one CPU-fallback op (read inputs + write outputs): PyTorch CPU kernels on a
    trn1/trn2 host stream ~10 GB/s per op (a few cores of one socket). Assumed; replaces the measured wall time
    so the modeled step does not depend on how busy the machine running the emulator is."""

    host_cpu_flops_per_s: float = 100e9
    """Host arithmetic throughput of one CPU-fallback op (FP32, a few AVX-512 cores). Assumed."""

    host_rng_elems_per_s: float = 1e9
    """Random numbers per second drawn by the host for RNG fallbacks and host-drawn dropout masks (PyTorch's
    CPU Philox/MT generators: ~1 G elements/s). Assumed."""

    host_op_overhead_ns: float = 20_000.0
    """Fixed cost of one CPU-fallback op: dispatch, device sync and the runtime's copy setup. Assumed."""

    kernel_launch_overhead_ns: float = 12_000.0
    """Preamble + completion of one NKI kernel execution on a NeuronCore (semaphore setup, instruction fetch,
    final DMA completion) in `kernels.kernel_time`, as neuron-bench and the profiler count kernel latency.
    Derived from the CS149 Trn2 rows (calibration cs149_vector_add_stream_free_200/1000/2000): kernels whose
    instructions the model puts at 5-15 µs measure 15-28 µs, 10-15 µs more; 12 µs taken. Invisible in the
    millisecond kernels of AWS's tutorials."""

    fusion_rule: str = "chain"
    """How fused ops (adaptive groups, compiled graphs) avoid HBM traffic. "chain": each op's input that
    equals the previous op's output in bytes is treated as an on-chip intermediate (read from SBUF, not HBM);
    other inputs (weights, second operands) come from HBM; only the group's last op writes to HBM. It works on
    byte sizes, so imported traces (which carry no storage ids) get the same rule; it underestimates traffic when
    an intermediate is also used after the group (e.g. residuals). The storages ops read and write order the ops
    of a launch over the engines (profiler/model/layout.py), not their HBM traffic. "none": fused ops move the
    same bytes as eager ops."""

    adaptive_buffer_limit: int = 1024
    """Ops TorchNeuron buffers per stream before the next op counts as a boundary (the buffer is concatenated and
    that op runs alone): `TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT`, default 1024 (ConcatenationEngine.h in
    parmoham-aws/test-repo-parmoham @98154b86). `adaptive_limit_from_env()` reads the variable."""

    adaptive_skip_intermediate: bool = True
    """`TORCH_NEURONX_APPLY_SKIP_INTERMEDIATE` (default on, ConcatenationEngine.cpp @98154b86): in-place ops (an
    output address among the inputs) are region boundaries that run alone. Off ("0"), TorchNeuron instead ends a
    region where an op writes an address an earlier op of the buffer wrote; the model then treats in-place ops
    as ordinary ops (a bound: it does not track repeated writes). `adaptive_limit_from_env()` reads it."""

    adaptive_deep_queue: bool = True
    """Assumption, not measured: the host keeps TorchNeuron's execution queue deeper than its low-water mark
    (`TORCH_NEURONX_CONCATENATION_QUEUE_LOW_THRESHOLD`, default 15, OperationExecutionEngine.cpp @98154b86), so
    buffers are flushed by the rules, never early because the device starved. If the device outruns the host
    (tiny ops), TorchNeuron concatenates less than modeled. The only supported value is True."""

    deterministic_tag: str = "deterministic"
    """An event carrying this tag ran under deterministic algorithms, which disable Adaptive Eager (§1.4):
    it runs as an eager op and breaks any group."""

    compile_time_per_graph_ns: float = 60e9
    """Cost of one (re)compile: neuronx-cc "can take several minutes for large models" (§1.8); 60 s assumed.
    Reported separately; never added to steady-state step time."""

    def __post_init__(self) -> None:
        for name in ("tensor_efficiency", "vector_efficiency", "scalar_efficiency", "gpsimd_efficiency",
                     "dma_efficiency", "hbm_efficiency"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 < v <= 1.0):
                raise ConfigError(f"{name} must be in (0, 1], got {v!r}")
        for name in ("eager_launch_overhead_ns", "adaptive_launch_overhead_ns", "compile_launch_overhead_ns",
                     "h100_launch_overhead_ns", "host_transfer_latency_ns", "compile_time_per_graph_ns",
                     "host_op_overhead_ns", "kernel_launch_overhead_ns"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ConfigError(f"{name} must be a finite number >= 0, got {v!r}")
        for name in ("host_link_bytes_per_s", "host_cpu_bytes_per_s", "host_cpu_flops_per_s", "host_rng_elems_per_s",
                     "collective_latency_scale"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigError(f"{name} must be a finite number > 0, got {v!r}")
        if self.lnc is not None and (not isinstance(self.lnc, int) or self.lnc < 1):
            raise ConfigError(f"lnc must be None or an integer >= 1, got {self.lnc!r}")
        if self.fusion_rule not in FUSION_RULES:
            raise ConfigError(f"fusion_rule must be one of {FUSION_RULES}, got {self.fusion_rule!r}")
        if not isinstance(self.adaptive_buffer_limit, int) or isinstance(self.adaptive_buffer_limit, bool) \
                or self.adaptive_buffer_limit < 1:
            raise ConfigError(f"adaptive_buffer_limit must be an integer >= 1, got {self.adaptive_buffer_limit!r}")
        if self.adaptive_deep_queue is not True:
            raise ConfigError("adaptive_deep_queue: only True is modeled (a starving device's early flushes depend on "
                              "timing the model does not have)")

    # Plausible ranges of the unmeasured assumptions that move the step time (the summary shows the step under
    # the low and the high end): launch costs of a NEFF execution (runtime submit + completion, 5-30 µs) and
    # collective latencies at rank counts nccom-test did not publish (0.5-2x).
    RANGES: ClassVar[dict[str, tuple[float, float]]] = {
        "launch_overhead_ns": (5_000.0, 30_000.0),
        "collective_latency_scale": (0.5, 2.0),
    }

    @classmethod
    def adaptive_limit_from_env(cls, environ: "dict[str, str] | None" = None) -> dict[str, object]:
        """The adaptive-eager switches TorchNeuron reads, as ModelConfig fields (for `replace` / what-if):
        `TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT` (a positive integer; TorchNeuron ignores others, as here)
        and `TORCH_NEURONX_APPLY_SKIP_INTERMEDIATE` ("0" turns it off)."""
        import os

        env = os.environ if environ is None else environ
        out: dict[str, object] = {}
        raw = env.get("TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT")
        if raw is not None and raw.strip().lstrip("+").isdigit() and int(raw) > 0:
            out["adaptive_buffer_limit"] = int(raw)
        if env.get("TORCH_NEURONX_APPLY_SKIP_INTERMEDIATE") == "0":
            out["adaptive_skip_intermediate"] = False
        return out

    def replace(self, **changes: object) -> "ModelConfig":
        """A copy with `changes` applied (validated); unknown names raise ConfigError."""
        valid = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - valid)
        if unknown:
            raise ConfigError(f"unknown ModelConfig field(s) {unknown}; valid: {sorted(valid)}")
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def launch_overhead_ns(self, mode: str) -> float:
        """Launch cost of one launch in `mode` on Trainium."""
        if mode not in MODES:
            raise ConfigError(f"unknown mode {mode!r}; valid: {MODES}")
        return float(getattr(self, f"{mode}_launch_overhead_ns"))

    def efficiency(self, engine: str) -> float:
        """Achievable fraction of peak for `engine` (1.0 for engines without a throughput limit)."""
        return float(getattr(self, f"{engine}_efficiency", 1.0))
