"""Which bytes an instruction operand touches: the facts the kernel model needs from an access pattern.

- `Span`: the bytes of one allocation an operand addresses, as rows of `run` contiguous bytes every `stride`
  bytes (a bounding interval when the pattern has more than one strided level). The kernel model orders two
  instructions only when their spans overlap, so writing `tiles[k]` does not wait for readers of `tiles[k-1]`:
  dependencies follow the accessed slice, not the tensor (AWS's tutorials write k-tiles into slices of one
  SBUF tensor).
- `dma_geometry`: the SBUF partitions a transfer touches (each of the 16 DMA engines serves 8 partitions,
  nki-dma-overview.rst) and the number of contiguous runs of its HBM side (the descriptors the engines move).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Span", "span", "contiguous_runs", "partition_range", "root_layout"]


@dataclass(frozen=True, slots=True)
class Span:
    """Bytes `lo + i*stride + [0, run)` for i < rows of allocation `buffer` (ids unique within a kernel call)."""

    buffer: int
    lo: int
    stride: int
    run: int
    rows: int

    @property
    def end(self) -> int:
        return self.lo + (self.rows - 1) * self.stride + self.run

    def _hits(self, lo: int, hi: int) -> bool:
        """Does any row of this span intersect the interval [lo, hi)?"""
        s = self.stride
        i_min = max(0, (lo - self.run - self.lo) // s + 1)
        i_max = min(self.rows - 1, -((self.lo - hi) // s) - 1)
        return i_min <= i_max

    def overlaps(self, other: "Span") -> bool:
        """True when the two spans share a byte (conservatively True for unlike strided patterns)."""
        if self.buffer != other.buffer or self.lo >= other.end or other.lo >= self.end:
            return False
        if self.rows == 1 and other.rows == 1:
            return True
        if self.rows == 1:
            return other._hits(self.lo, self.end)
        if other.rows == 1:
            return self._hits(other.lo, other.end)
        if self.stride == other.stride:
            d = (other.lo - self.lo) % self.stride
            return d < self.run or self.stride - d < other.run
        return True

    def covers(self, other: "Span") -> bool:
        """True when every byte of `other` is in this span (exact for equal patterns and whole intervals)."""
        if self.buffer != other.buffer:
            return False
        if self.rows == 1 or self.stride == self.run:
            return self.lo <= other.lo and other.end <= self.end
        return (self.stride == other.stride and self.run >= other.run and self.lo <= other.lo
                and (other.lo - self.lo) % self.stride + other.run <= self.run and other.end <= self.end)


def _layout(a: np.ndarray) -> tuple[int, int, int, int]:
    """(first byte, row stride, contiguous run, rows) of array `a`; one bounding row when not expressible."""
    item = a.itemsize
    ptr = int(a.__array_interface__["data"][0])
    dims = [(int(n), int(st)) for n, st in zip(a.shape, a.strides) if n > 1]
    if a.size == 0:
        return ptr, 0, 0, 1
    if any(st <= 0 for _, st in dims):  # broadcast (stride 0) or reversed: the bounding interval
        lo = ptr + sum(min(0, (n - 1) * st) for n, st in dims)
        hi = ptr + sum(max(0, (n - 1) * st) for n, st in dims) + item
        return lo, 0, hi - lo, 1
    run = item
    while dims and dims[-1][1] == run:
        run *= dims[-1][0]
        dims.pop()
    merged: list[tuple[int, int]] = []
    for n, st in dims:
        if merged and merged[-1][1] == st * n:
            merged[-1] = (merged[-1][0] * n, st)
        else:
            merged.append((n, st))
    if not merged:
        return ptr, 0, run, 1
    if len(merged) == 1 and merged[0][1] >= run:
        n, st = merged[0]
        return ptr, st, run, n
    hi = ptr + sum((n - 1) * st for n, st in dims) + run
    return ptr, 0, hi - ptr, 1


def _array(t: Any) -> np.ndarray:
    """The elements an NkiTensor addresses in its storage (a gathered access pattern: its whole base array)."""
    scatter = getattr(t, "_scatter", None)
    return scatter[0] if scatter is not None else t.data


def span(t: Any, buffer: int) -> Span:
    """The span of NkiTensor `t` in allocation `buffer`."""
    lo, stride, run, rows = _layout(_array(t))
    return Span(buffer, lo, stride, run, rows)


def contiguous_runs(t: Any) -> int:
    """How many contiguous byte runs the access of `t` consists of (the DMA descriptors of that side)."""
    a = t.data
    if a.size == 0:
        return 0
    if getattr(t, "_scatter", None) is not None:  # a gathered access: one run per gathered row
        return int(np.prod(a.shape[:-1], dtype=np.int64)) if a.ndim > 1 else int(a.size)
    if any(st <= 0 for n, st in zip(a.shape, a.strides) if n > 1):  # broadcast rows: one run per row
        return int(np.prod(a.shape[:-1], dtype=np.int64)) if a.ndim > 1 else 1
    _, _, run, rows = _layout(a)
    if rows == 1 and run < a.size * a.itemsize:  # several strided levels: count runs of the innermost one
        item = a.itemsize
        inner = item
        for n, st in reversed([(int(n), int(st)) for n, st in zip(a.shape, a.strides) if n > 1]):
            if st != inner:
                break
            inner *= n
        return int(a.size * item // inner)
    return rows


def root_layout(data: np.ndarray, partition_axis: int) -> tuple[int, int, int]:
    """(first byte, partition stride, partitions) of a freshly allocated on-chip array."""
    return (int(data.__array_interface__["data"][0]), int(data.strides[partition_axis]),
            int(data.shape[partition_axis]))


def partition_range(t: Any) -> tuple[int, int]:
    """(first partition, partition count) an on-chip NkiTensor view covers; (0, 1) when unknown."""
    root = getattr(t._alloc, "root", None)
    if root is None:
        return 0, 1
    base, pstride, pcount = root
    if getattr(t, "_scatter", None) is not None:  # a gathered access may touch any partition
        return 0, pcount
    a = t.data
    if a.size == 0 or pstride <= 0:
        return 0, 0
    first = ((int(a.__array_interface__["data"][0]) - base) // pstride) % max(pcount, 1)
    count = next((int(n) for n, st in zip(a.shape, a.strides) if st == pstride and n > 1), 1)
    return first, count
