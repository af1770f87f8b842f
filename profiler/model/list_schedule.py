"""List scheduling over a NeuronCore's engines, respecting data dependencies: the one algorithm both levels use.

`kernels.cost.kernel_time` places a kernel's instructions with it; `profiler.model.schedule` places the ops of one
launch (an adaptive-eager group or a compiled-graph execution) with it. In both, work items are placed in program
order. An item starts when
- its engine is free (engines run their queue in order; a `gap_filling` engine, the DMA queues of a kernel, takes
  the first free gap after the item's inputs are ready instead: 16 DMA engines, not one queue),
- the items that wrote what it reads have finished (read after write), and the last readers and writer of what it
  writes have finished (write after read, write after write): buffers are identified by opaque integer ids,
- every in-order `channel` it occupies (the op level's HBM: ops on different engines share its bandwidth) is free.
An item marked as a `barrier` (its reads and writes are unknown) starts after everything placed before it, and
everything after it starts after it ends, so a run without dependency facts is scheduled serially.
"""
from __future__ import annotations

import bisect
from typing import Hashable, Iterable

__all__ = ["GapQueue", "ListSchedule"]


class GapQueue:
    """Busy intervals of a pool of queues (merged, sorted). A transfer takes the first gap that fits after its
    inputs are ready, so one waiting on a producer does not hold back later, independent ones."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def reserve(self, earliest: float, dur: float) -> float:
        """Book `dur` at the first gap starting at or after `earliest`; return the start."""
        i = bisect.bisect_right(self.ends, earliest)
        t = earliest
        while i < len(self.starts) and self.starts[i] < t + dur:
            t = max(t, self.ends[i])
            i += 1
        # insert [t, t + dur) at i, merging with touching neighbours
        s, e = t, t + dur
        j = i
        if i > 0 and self.ends[i - 1] >= s:
            i -= 1
            s = self.starts[i]
        while j < len(self.starts) and self.starts[j] <= e:
            e = max(e, self.ends[j])
            j += 1
        self.starts[i:j] = [s]
        self.ends[i:j] = [e]
        return t

    def copy(self) -> "GapQueue":
        q = GapQueue()
        q.starts, q.ends = list(self.starts), list(self.ends)
        return q

    def forget_gaps_before(self, keep: int) -> None:
        """Keep only the last `keep` busy intervals separate: older gaps count as busy (bounds the search of
        long schedules; a transfer can no longer fill a gap that far back)."""
        n = len(self.starts) - keep
        if n > 0:
            self.starts[:n + 1] = [self.starts[0]]
            self.ends[:n + 1] = [self.ends[n]]


class ListSchedule:
    """Engine queues, channels and buffer hazards of one schedule that starts at `origin` (ns)."""

    def __init__(self, origin: float = 0.0, gap_filling: Iterable[Hashable] = ()) -> None:
        self.origin = origin
        self.end = origin                         # end of the last item to finish
        self._floor = origin                      # nothing starts before this (set by barriers)
        self._free: dict[Hashable, float] = {}    # engine / channel -> when its in-order queue is free
        self._gaps = {e: GapQueue() for e in gap_filling}
        self._ready: dict[int, float] = {}        # buffer -> end of its last write
        self._last_read: dict[int, float] = {}    # buffer -> end of its last read

    def place(self, engine: Hashable, dur: float, reads: Iterable[int] | None = (), writes: Iterable[int] | None = (),
              latency: float = 0.0, channel: Hashable = None, channel_ns: float = 0.0,
              occupies_engine: bool = True) -> tuple[float, float]:
        """Schedule one item; return (start, done). `latency` delays its consumers but not its engine (a DMA's
        fixed cost); `channel` is an in-order channel the item holds for `channel_ns` from its start.
        `reads`/`writes` None mark a barrier (unknown dependencies). `occupies_engine=False` (views: no work)
        places the item where its dependencies allow and holds no queue."""
        barrier = reads is None or writes is None
        if barrier:
            reads = writes = ()
        ready, last_read, free = self._ready, self._last_read, self._free
        start = self.end if barrier else self._floor
        for b in reads:
            t = ready.get(b)
            if t is not None and t > start:
                start = t
        for b in writes:
            t = ready.get(b)
            if t is not None and t > start:
                start = t
            t = last_read.get(b)
            if t is not None and t > start:
                start = t
        gaps = self._gaps.get(engine) if occupies_engine and self._gaps else None
        in_order = occupies_engine and gaps is None
        if in_order:
            t = free.get(engine, self.origin)
            if t > start:
                start = t
        held = channel is not None and channel_ns > 0
        if held:
            t = free.get(channel, self.origin)
            if t > start:
                start = t
        if gaps is not None:
            start = gaps.reserve(start, dur)
        done = start + dur + latency
        if in_order:
            free[engine] = start + dur
        if held:
            free[channel] = start + channel_ns
        for b in reads:
            if last_read.get(b, -1.0) < done:
                last_read[b] = done
        for b in writes:
            ready[b] = done
        if done > self.end:
            self.end = done
        if barrier and done > self._floor:
            self._floor = done
        return start, done
