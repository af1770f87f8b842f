"""Adaptive eager as TorchNeuron runs it: which recorded ops TorchNeuron concatenates into one launch.

The rules follow TorchNeuron's op-concatenation engine in the pre-release source mirror
`parmoham-aws/test-repo-parmoham` at commit 98154b867aa24562a3213e520d9ad7fd41032291 (read, not copied):

- `torch_neuronx/csrc/core/concatenation/ConcatenationEngine.cpp` (`ProcessConcatenationTask`): ops are buffered
  per stream (here: per NeuronCore). Accumulation starts disabled; while it is disabled every op runs on its own,
  and the first boundary or matmul-family op runs on its own and enables it. While enabled, an ordinary op is
  buffered; a matmul-family op is buffered and the buffer (ending with it) is flushed and concatenated; a
  non-fusible boundary flushes the buffer (concatenated) and runs on its own.
- Non-fusible boundaries (`IsNonFusibleBoundaryOperation`, `IsInPlaceOperation`): any kernel that is not an HLO
  kernel (host↔device copies, collectives), an HLO kernel with collectives, an in-place op (an output address
  among its inputs; `TORCH_NEURONX_APPLY_SKIP_INTERMEDIATE`, default on) and the buffer reaching
  `TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT` (default 1024, `ConcatenationEngine.h`).
- The matmul family (`IrConcatStrategy.cpp`, `MatMulToMatMulStrategy`): aten::linear, linear_backward, matmul,
  matmul_backward, mm, bmm, addmm, baddbmm, addbmm, conv2d and nki_kernel_global (user NKI kernels).
- Concatenation (`ConcatenationCore.cpp`, `IrNodeManager.cpp` `ConcatAll`): every HLO op of a flushed buffer is
  merged into one; a merge that fails runs the original ops one by one (assumed not to happen).
- A host wait (`OperationExecutionEngine.cpp` `ConcatenationWorker`: the execution queue drains, so the buffer is
  flushed with `Flush`, which runs the buffered ops in order *without* concatenation and disables accumulation):
  syncs, device→host copies, CPU fallbacks (their inputs are copied to the host), and the studio's own
  synchronisation at every step end. So no region crosses a step boundary or any point where the studio syncs.
- `torch.use_deterministic_algorithms()` disables adaptive eager (Neuron docs, trainium.md §1.4): those ops run
  one by one.

Assumptions (named in `ModelConfig`): the host keeps the device's queue deeper than TorchNeuron's low-water mark
(`TORCH_NEURONX_CONCATENATION_QUEUE_LOW_THRESHOLD`, 15), so buffering is never cut short by a starving device;
one stream per NeuronCore; every concatenation compiles.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MATMUL_FAMILY", "ROLE_PASSENGER", "ROLE_FLUSH", "ROLE_BOUNDARY", "ROLE_MATMUL", "ROLE_OTHER",
           "ROLE_GRAPH", "AdaptiveRegions", "adaptive_regions", "is_in_place_name", "is_matmul_family",
           "SOURCE_COMMIT", "SOURCE_REPO"]

SOURCE_REPO = "parmoham-aws/test-repo-parmoham"
SOURCE_COMMIT = "98154b867aa24562a3213e520d9ad7fd41032291"

#: TorchNeuron's fusible boundary ops (MatMulToMatMulStrategy), by aten base name; `neuron_studio::` kernels
#: swapped in by `kernels.use` are NKI kernels (nki_kernel_global).
MATMUL_FAMILY: frozenset[str] = frozenset({"linear", "linear_backward", "matmul", "matmul_backward", "mm", "bmm",
                                           "addmm", "baddbmm", "addbmm", "conv2d", "nki_kernel_global"})

# Row roles, decided once per row before the state machine runs.
ROLE_PASSENGER, ROLE_FLUSH, ROLE_BOUNDARY, ROLE_MATMUL, ROLE_OTHER, ROLE_GRAPH = range(6)


def is_matmul_family(name: str) -> bool:
    """Does TorchNeuron close an adaptive region at this op (the op is the region's last)?"""
    if name.startswith("neuron_studio::") or name == "nki_kernel_global":
        return True
    n = name.split("::", 1)[-1].split(".", 1)[0]
    return n in MATMUL_FAMILY


def is_in_place_name(name: str) -> bool:
    """aten's in-place naming convention (`add_`, `copy_`, `_foreach_mul_`): the op writes one of its inputs, so
    its output address is among its input addresses (TorchNeuron's `IsInPlaceOperation`)."""
    n = name.split("::", 1)[-1].split(".", 1)[0]
    return n.endswith("_") and not n.endswith("__")


@dataclass(frozen=True)
class AdaptiveRegions:
    """Where groups start (`brk`, sorted rows) and, per group start row, why the group ended and the row
    responsible (`start_reason`, `start_boundary`: -1 for none). Codes are the schedule's REASONS."""

    brk: np.ndarray
    start_reason: np.ndarray
    start_boundary: np.ndarray


def adaptive_regions(role: np.ndarray, own_reason: np.ndarray, core_start: np.ndarray, step_start: np.ndarray,
                     graph: np.ndarray, *, buffer_limit: int, r_matmul: int, r_direct: int, r_step: int,
                     r_end: int, r_limit: int, r_graph: int) -> AdaptiveRegions:
    """Run TorchNeuron's per-stream state machine over the rows of each core (sorted by core).

    `role`: ROLE_* per row. `own_reason`: for flush and boundary rows the reason code they end a region with
    (sync kind, fallback, in-place, collective, transfer, deterministic). `step_start`: the first row of a step
    (the studio synchronised before it). A flush row and a boundary row each run alone; pending buffered ops at
    a flush run one by one (not concatenated)."""
    n = len(role)
    brk = np.zeros(n, dtype=bool)
    reason = np.full(n, r_end, dtype=np.int8)
    bnd = np.full(n, -1, dtype=np.int64)
    roles = role.tolist()
    own = own_reason.tolist()
    cstart = core_start.tolist()
    sstart = step_start.tolist()
    graphs = graph.tolist()

    def start(i: int, why: int, b: int) -> None:
        brk[i] = True
        reason[i] = why
        bnd[i] = b

    buf: list[int] = []
    acc = False
    last_flush = -1
    prev_graph = -1
    for i in range(n):
        if cstart[i]:
            for j in buf:
                start(j, r_end, -1)
            buf, acc, last_flush, prev_graph = [], False, -1, -1
            brk[i] = True  # a core's first row always opens a group (its reason is set below if it is a kernel)
        elif sstart[i]:
            for j in buf:   # the studio's step-end sync: pending ops run one by one
                start(j, r_step, -1)
            buf, acc, last_flush = [], False, -1
            brk[i] = True
        r = roles[i]
        if r == ROLE_PASSENGER:
            continue
        if r == ROLE_GRAPH:   # a compiled graph used inside an adaptive run launches whole
            g = graphs[i]
            if g != prev_graph:
                if buf:
                    start(buf[0], r_graph, i)
                    buf = []
                start(i, r_graph, i)
            prev_graph = g
            continue
        prev_graph = -1
        if r == ROLE_FLUSH:
            for j in buf:
                start(j, own[i], i)
            buf, acc, last_flush = [], False, i
            start(i, own[i], i)
            continue
        if not acc:
            if r == ROLE_OTHER:
                start(i, r_direct, last_flush)
            else:
                start(i, r_matmul if r == ROLE_MATMUL else own[i], i)
                acc = True
            continue
        if r == ROLE_BOUNDARY or len(buf) >= buffer_limit:
            why = own[i] if r == ROLE_BOUNDARY else r_limit
            if buf:
                start(buf[0], why, i)
                buf = []
            start(i, own[i] if r == ROLE_BOUNDARY else r_limit, i)
            continue
        buf.append(i)
        if r == ROLE_MATMUL:
            start(buf[0], r_matmul, i)
            buf = []
    for j in buf:   # the run ends: what is still buffered is flushed one by one
        start(j, r_end, -1)
    return AdaptiveRegions(brk=brk, start_reason=reason, start_boundary=bnd)
