"""Instruction records: what the interpreter executed, on which engine, from which kernel source line."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from neuron_studio.profiler.vocabulary import DEVICE_ENGINES

from .access import Span

__all__ = ["Instruction", "KernelTrace", "ENGINES"]

ENGINES = DEVICE_ENGINES


@dataclass(frozen=True)
class Instruction:
    """One executed NKI instruction.

    `elements` is the number of elements the engine streams (output elements for element-wise ops, input
    elements for reductions, moving-tile columns x partitions for matmul); `flops` counts arithmetic (2*M*N*K for
    matmul); `bytes` is what a DMA moves (0 for compute engines); `dtype` is the dtype the engine computes in.
    `reads`/`writes` identify the allocations touched (operand 0 is the destination by the ISA's convention),
    so the kernel model can respect data dependencies between engines.
    """

    engine: str
    opcode: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    elements: int
    flops: int
    bytes: int
    file: str
    line: int
    cycles_hint: int = 0  # engine-specific streaming cycles (tensor engine: moving free size)
    reads: tuple[int, ...] = ()   # allocations (buffer ids, unique per kernel call) the instruction reads
    writes: tuple[int, ...] = ()  # allocations it writes
    read_spans: tuple[Span, ...] = ()   # the bytes of those allocations it reads: the kernel model orders
    write_spans: tuple[Span, ...] = ()  # instructions by these (per accessed slice, not per tensor)
    partitions: tuple[int, int] = (0, 0)  # DMA: (first SBUF partition, partition count) of its on-chip side
    descriptors: int = 0                   # DMA: contiguous runs of its HBM side (descriptors the engines move)
    alternatives: tuple[str, ...] = ()     # other engines the compiler may run it on (issued without an engine)


@dataclass
class KernelTrace:
    """Everything one kernel call executed, in program order, plus memory high-water marks."""

    kernel: str
    chip: str
    instructions: list[Instruction] = field(default_factory=list)
    peak_sbuf_bytes_per_partition: int = 0
    peak_psum_bytes_per_partition: int = 0
    spill_bytes: int = 0  # SBUF bytes the compiler's allocator would spill to HBM and reload (save + reload)

    def __len__(self) -> int:
        return len(self.instructions)

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __getitem__(self, i: int) -> Instruction:
        return self.instructions[i]

    def columns(self) -> dict[str, list]:
        """Columnar view (one list per field), ready for `pandas.DataFrame(trace.columns())`."""
        names = list(Instruction.__dataclass_fields__)
        return {n: [getattr(ins, n) for ins in self.instructions] for n in names}

    def count(self, opcode: str | None = None, engine: str | None = None) -> int:
        return sum(1 for i in self.instructions
                   if (opcode is None or i.opcode == opcode) and (engine is None or i.engine == engine))
