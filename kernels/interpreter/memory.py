"""On-chip memory accounting by liveness, as the compiler's allocator sees it.

Each SBUF/PSUM allocation records when it was allocated, when each of its blocks was first and last accessed,
and when its Python object died. A tile occupies its bytes/partition from its allocation (a block of a
block-dimension tensor, `nl.ndarray((n, nl.par_dim(128), f))`, from its first access) until its last access:
a tile re-created in a loop does not overlap its previous incarnation, and a block tensor holds only the
blocks in use. A tile that is never accessed is live until it can no longer be reached. Capacity is checked
by sweeping these intervals when the kernel finishes. PSUM cannot spill: the error names the allocation
(variable and kernel line) that first pushes it over its capacity. SBUF tiles beyond its capacity are spilled
to HBM by the compiler's allocator (AWS's trn2 tutorial kernels compile and run with more live tiles than
SBUF holds): a visible `NkiSpillWarning`, and the spilled bytes are charged as HBM traffic.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import NkiRuleError

__all__ = ["AllocRecord", "MemoryTimeline", "NkiSpillWarning"]


class NkiSpillWarning(UserWarning):
    """The tiles live at once exceed SBUF: the compiler's allocator spills some to HBM and reloads them
    (`KernelTrace.spill_bytes`; the kernel model charges that traffic to the DMA engines)."""


@dataclass(eq=False)
class AllocRecord:
    """One on-chip allocation: bytes per partition per block, and its access interval(s)."""

    buffer: str
    block_bytes: int
    nblocks: int
    label: str
    kernel_line: str
    start: int
    death: int | None = None
    first: np.ndarray | None = None  # per block (block tensors only)
    last_blocks: np.ndarray | None = None
    first_access: int = -1
    last_access: int = -1
    owner_ref: Any = None  # weakref to the tile's owner; its callback records the death tick

    def __post_init__(self) -> None:
        if self.nblocks > 1:
            self.first = np.full(self.nblocks, -1, np.int64)
            self.last_blocks = np.full(self.nblocks, -1, np.int64)

    def touch(self, tick: int, blocks: np.ndarray | None = None) -> None:
        """Record an access at `tick` (to `blocks`, a block-id array view, for block tensors)."""
        if self.first_access < 0:
            self.first_access = tick
        self.last_access = tick
        if self.first is not None:
            if blocks is None:
                self.first[self.first < 0] = tick
                self.last_blocks[:] = tick
                return
            ids = np.asarray(blocks).reshape(-1)
            fresh = self.first[ids] < 0
            if fresh.any():
                self.first[ids[fresh]] = tick
            self.last_blocks[ids] = tick

    def die(self, tick: int) -> None:
        if self.death is None:
            self.death = tick

    def intervals(self, end: int) -> list[tuple[int, int, int]]:
        """(start, stop, bytes) intervals this allocation occupies (stop inclusive)."""
        if self.first_access < 0:  # never used: live while reachable
            return [(self.start, self.death if self.death is not None else end, self.block_bytes * self.nblocks)]
        if self.first is None:
            return [(self.start, self.last_access, self.block_bytes)]
        used = np.flatnonzero(self.first >= 0)
        return [(int(self.first[b]), int(self.last_blocks[b]), self.block_bytes) for b in used]


@dataclass
class MemoryTimeline:
    """All on-chip allocations of one kernel instance, with a capacity check by interval sweep."""

    capacity: dict[str, int]
    chip: str
    records: list[AllocRecord] = field(default_factory=list)
    spilled: int = 0  # SBUF bytes/partition the last `peaks` sweep found spilled

    def add(self, record: AllocRecord) -> AllocRecord:
        need = record.block_bytes
        cap = self.capacity[record.buffer]
        if need > cap:  # a single block larger than the whole buffer fails right away
            self._overflow(record, need, 0)
        self.records.append(record)
        return record

    def peaks(self, end: int) -> dict[str, int]:
        """Peak live bytes/partition per buffer; raises NkiRuleError when PSUM tiles live at once exceed PSUM.
        SBUF beyond its capacity is what the compiler's allocator spills: `spilled` then holds the
        bytes/partition that had to leave SBUF (each allocation that finds SBUF full displaces up to its own
        size); blocks of PSUM block tensors spill to SBUF. Either is warned once per buffer."""
        out = {}
        self.spilled = 0
        for buffer in self.capacity:
            cap = self.capacity[buffer]
            events: list[tuple[int, int, int, AllocRecord]] = []
            for rec in (r for r in self.records if r.buffer == buffer):
                for start, stop, nbytes in rec.intervals(end):
                    events.append((start, 1, nbytes, rec))
                    events.append((stop + 1, 0, nbytes, rec))  # frees sort before allocations at one tick
            events.sort(key=lambda e: (e[0], e[1]))
            live = peak = 0
            fixed = 0  # PSUM bytes of non-block tiles: these cannot be spilled
            warned = False
            for _, kind, nbytes, rec in events:
                block = rec.nblocks > 1
                if kind == 0:
                    live -= nbytes
                    fixed -= 0 if block else nbytes
                    continue
                live += nbytes
                fixed += 0 if block else nbytes
                if buffer != "sbuf" and fixed > cap:
                    self._overflow(rec, nbytes, fixed - nbytes)
                if live > cap:
                    if buffer == "sbuf":
                        self.spilled += min(nbytes, live - cap)
                    if not warned:
                        warned = True
                        where = ("spills tiles to HBM; the modeled time charges the spilled bytes (saved and "
                                 "reloaded) as DMA traffic" if buffer == "sbuf" else
                                 "spills blocks of block-dimension tensors to SBUF")
                        warnings.warn(f"{buffer.upper()} working set {live} B/partition exceeds the {self.chip} "
                                      f"capacity of {cap} B/partition at {rec.label} ({rec.kernel_line}): the "
                                      f"compiler's allocator {where}", NkiSpillWarning, stacklevel=4)
                peak = max(peak, live)
            out[buffer] = peak
        return out

    def _overflow(self, rec: AllocRecord, nbytes: int, live: int) -> None:
        cap = self.capacity[rec.buffer]
        if rec.buffer == "sbuf":
            raise NkiRuleError(
                "sbuf_capacity",
                f"allocating {nbytes} B/partition with {live} B/partition live exceeds the {self.chip} SBUF "
                f"capacity of {cap} B/partition", tensor=rec.label, kernel_line=rec.kernel_line)
        raise NkiRuleError(
            "psum_capacity",
            f"allocating {nbytes} B/partition with {live} B/partition live exceeds the {self.chip} PSUM "
            f"capacity of {cap} B/partition", tensor=rec.label, kernel_line=rec.kernel_line)
