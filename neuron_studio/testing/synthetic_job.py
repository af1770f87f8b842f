"""A synthetic many-rank job as torch.profiler (kineto) writes it: one Chrome trace per rank, with blocking
collectives, per-rank clock skew and one injected straggler. Used by benchmarks/bench_ranks.py (64 ranks ×
1M events) and by the many-rank tests (a few ranks × a few thousand events: tests/test_job_ranks.py, the
extension's job view and import tests), so both test the same shapes.

Per rank and launch (`kineto_writer`, as benchmarks/bench_trace_scale.py writes one rank): a `cpu_op` with
"Input Dims" / "Input type", its `cuda_runtime` launch, the GPU `kernel`, and the `ac2g` flow pair linking them;
each step a `ProfilerStep#N` annotation. Every `launches_per_collective` launches, a `c10d::allreduce_` (with its
"Input Dims", so its bytes are known) and its `ncclKernel_AllReduce` on the communication stream.

The job is simulated on one true clock: every rank computes its segment, arrives at the collective, and
leaves it when the last rank has arrived plus the transfer time (the host op blocks, as gloo's and a
synchronised Neuron collective's do). The straggler's matmuls take `straggler_extra_us` longer, so it arrives
last and the others wait. Each rank's wall clock is off by `skew_us(rank)` (what its `baseTimeNanoseconds`
then says), which the analysis should measure back from the collectives.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from neuron_studio.testing.kineto_writer import EVENTS_PER_LAUNCH, EventStream, LaunchOp, LaunchWriter

__all__ = ["JobSpec", "write_rank", "write_job", "skew_us", "arrivals"]

_OPS = [  # five of the scale benchmark's ops (benchmarks/bench_trace_scale.py), one matmul the straggler slows
    LaunchOp("aten::mm", [[512, 1024], [1024, 1024]], ["c10::BFloat16", "c10::BFloat16"],
             "ampere_bf16_s16816gemm_bf16_128x128", flops=2 * 512 * 1024 * 1024),
    LaunchOp("aten::add", [[512, 1024], [512, 1024], []], ["c10::BFloat16", "c10::BFloat16", "Scalar"],
             "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>"),
    LaunchOp("aten::mul", [[512, 4096], [512, 4096]], ["c10::BFloat16", "c10::BFloat16"],
             "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16>>"),
    LaunchOp("aten::gelu", [[512, 4096]], ["c10::BFloat16", ""],
             "void at::native::vectorized_elementwise_kernel<4, Gelu>"),
    LaunchOp("aten::native_layer_norm", [[512, 1024], [], [1024], [1024], []],
             ["c10::BFloat16", "", "c10::BFloat16", "c10::BFloat16", "Scalar"],
             "void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float>"),
]
_LAUNCH_US = 12.0          # host time per launch
_MM_EXTRA = 0              # index of aten::mm in _OPS
_BASE_NS = 1_700_000_000_000_000_000
_EVENTS_PER_COLLECTIVE = 2


@dataclass(frozen=True)
class JobSpec:
    """The job: ranks, size per rank, the straggler and how collectives are spaced."""

    ranks: int = 4
    events_per_rank: int = 20_000
    launches_per_step: int = 200
    launches_per_collective: int = 50
    allreduce_elems: int = 4 * 1024 * 1024      # float32: 16 MiB per allreduce
    straggler: int | None = 2
    straggler_extra_us: float = 4.0             # per aten::mm on the straggler
    max_skew_us: float = 150.0                  # clock skew of the ranks' wall clocks, within ±this
    distributed_info: str = "full"              # "full" | "rank-only" | "none"

    @property
    def launches(self) -> int:
        per = EVENTS_PER_LAUNCH + _EVENTS_PER_COLLECTIVE / self.launches_per_collective
        return int(self.events_per_rank / per)

    @property
    def collectives(self) -> int:
        return self.launches // self.launches_per_collective

    def transfer_us(self) -> float:
        return self.allreduce_elems * 4 / 100e3     # 100 GB/s ring bandwidth, µs


def skew_us(rank: int, spec: JobSpec) -> float:
    """The rank's wall-clock error (deterministic, within ±max_skew_us; rank 0 is exact)."""
    return 0.0 if rank == 0 else spec.max_skew_us * math.sin(rank * 2.399963)


def _jitter_us(rank: int, k: int) -> float:
    """Small deterministic per-rank, per-segment noise (0..3 µs)."""
    return ((rank * 7919 + k * 104729) % 1000) / 1000.0 * 3.0


def _segment_us(rank: int, k: int, spec: JobSpec) -> float:
    n = spec.launches_per_collective
    mm = sum(1 for i in range(k * n, (k + 1) * n) if i % len(_OPS) == _MM_EXTRA)
    extra = spec.straggler_extra_us * mm if rank == spec.straggler else 0.0
    return n * _LAUNCH_US + extra + _jitter_us(rank, k)


def arrivals(spec: JobSpec) -> tuple[list[list[float]], list[float]]:
    """Per collective k: every rank's true arrival time (µs from the job start) and the common exit time."""
    t = 0.0
    arr, exits = [], []
    for k in range(spec.collectives):
        a = [t + _segment_us(r, k, spec) for r in range(spec.ranks)]
        e = max(a) + spec.transfer_us()
        arr.append(a)
        exits.append(e)
        t = e
    return arr, exits


def _header(rank: int, spec: JobSpec) -> str:
    parts = ['"schemaVersion": 1']
    if spec.distributed_info == "full":
        parts.append(f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {spec.ranks}}}')
    elif spec.distributed_info == "rank-only":
        parts.append(f'"distributedInfo": {{"rank": {rank}}}')
    base = _BASE_NS + int(round(skew_us(rank, spec) * 1000))
    parts.append(f'"baseTimeNanoseconds": {base}')
    parts.append('"deviceProperties": [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 85000000000}]')
    return "{" + ",\n".join(parts) + ',\n"traceEvents": [\n'


def write_rank(path: Path, rank: int, spec: JobSpec, plan: tuple[list[list[float]], list[float]] | None = None) -> int:
    """Write one rank's trace (streamed, bounded memory); returns the number of events written."""
    arr, exits = plan or arrivals(spec)
    pid, tid, stream, comm = 1000 + rank, 1000 + rank, 7, 20
    n_coll = len(exits)
    launches = n_coll * spec.launches_per_collective
    written = 0
    elems = spec.allreduce_elems
    writer = LaunchWriter(_OPS, pid=pid, tid=tid, stream=stream)
    with open(path, "w") as fh:
        fh.write(_header(rank, spec))
        fh.write(f'{{"ph": "M", "name": "process_name", "pid": {pid}, "tid": 0, "args": {{"name": "python"}}}},\n'
                 f'{{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {{"name": "GPU 0"}}}}')
        written += 2
        out = EventStream(fh)
        t = 1000.0                          # µs on the rank's clock (true time + 1000)
        gpu_t = t
        ext = 0
        step_start = t
        for k in range(launches):
            seg, pos = divmod(k, spec.launches_per_collective)
            if k % spec.launches_per_step == 0:
                step_start = t
            ext += 1
            extra = spec.straggler_extra_us if (rank == spec.straggler and k % len(_OPS) == _MM_EXTRA) else 0.0
            lt = t + 2.0 + extra
            gpu_t = max(gpu_t, lt + 4.0)
            kdur = 6.0 + (k % 5)
            out.add(writer.launch(k % len(_OPS), k, ext, 100_000 + k, t, 9.0 + (k % 7) * 0.25 + extra, lt, gpu_t,
                                  kdur))
            gpu_t += kdur + 0.5
            written += EVENTS_PER_LAUNCH
            t += _LAUNCH_US + extra
            if pos == spec.launches_per_collective - 1:
                # the segment ends: arrive at the collective (the simulated arrival, so every rank agrees on
                # the schedule), block until the last rank arrived plus the transfer
                a, e = 1000.0 + arr[seg][rank], 1000.0 + exits[seg]
                ext += 1
                out.add(f'{{"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": {pid}, '
                        f'"tid": {tid}, "ts": {a:.3f}, "dur": {e - a:.3f}, "args": {{"External id": {ext}, '
                        f'"Input Dims": [[{elems}]], "Input type": ["float"]}}}}')
                ks = max(gpu_t, e - spec.transfer_us())
                out.add(f'{{"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", '
                        f'"pid": 0, "tid": {comm}, "ts": {ks:.3f}, "dur": {spec.transfer_us():.3f}, '
                        f'"args": {{"External id": {ext}, "device": 0, "stream": {comm}, '
                        f'"Collective name": "allreduce", "In msg nelems": {elems}, '
                        f'"Out msg nelems": {elems}, "Group size": {spec.ranks}, "dtype": "Float"}}}}')
                written += _EVENTS_PER_COLLECTIVE
                t = e
            if k % spec.launches_per_step == spec.launches_per_step - 1 or k == launches - 1:
                s = k // spec.launches_per_step
                out.add(f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{s}", "pid": {pid}, '
                        f'"tid": {tid}, "ts": {step_start - 0.5:.3f}, "dur": {t - step_start + 0.5:.3f}, '
                        f'"args": {{"External id": {10**9 + s}}}}}')
                written += 1
        out.close()
    return written


def write_job(directory: Path, spec: JobSpec, *, name: str = "rank-{rank}.pt.trace.json") -> list[Path]:
    """Write every rank's trace into `directory`; returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    plan = arrivals(spec)
    paths = []
    for r in range(spec.ranks):
        p = directory / name.format(rank=r)
        write_rank(p, r, spec, plan)
        paths.append(p)
    return paths
