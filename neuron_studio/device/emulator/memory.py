"""Device-memory accounting for the emulator: bytes held by live neuron tensors, per device.

A storage is counted once however many wrappers (views, aliases) share it, and released when the last
wrapper dies. That is what `torch.neuron.memory_allocated()` reports, like CUDA's caching allocator
reports bytes in live tensors (there is no cache here, so reserved == allocated).

While a `MemoryLog` is open (the profiler opens one per capture), every allocation and free is also
appended to it, in the order the tracker counts them, so a profile can replay exactly the figures
`memory_allocated()` / `max_memory_allocated()` report. With no log open the hooks cost one attribute test.
"""
from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["MemoryTracker", "DeviceMemory", "MemoryLog", "ALLOC", "FREE", "LOG_FIELDS"]

ALLOC = 1
FREE = -1
# One record per allocation or free, in tracker order. `after_seq` is the device's last op sequence
# number when it happened (the op that allocates gets the next number); dtype/shape only for allocations.
LOG_FIELDS = ("kind", "alloc_id", "device", "nbytes", "time_ns", "after_seq", "thread", "dtype", "shape")


@dataclass
class DeviceMemory:
    allocated: int = 0
    peak: int = 0
    num_allocs: int = 0
    num_frees: int = 0


class MemoryLog:
    """Allocation and free records of one consumer (a profile capture), plus the live set when it opened."""

    def __init__(self, tracker: "MemoryTracker", seq_source: Any) -> None:
        self._tracker = tracker
        self._seq_source = seq_source  # an object with `last_seq` (the device's event bus)
        self.records: list[tuple] = []
        self.baseline: list[tuple[int, int, int]] = []  # (alloc_id, device, nbytes) live when opened
        self.closed = False

    def _append(self, kind: int, alloc_id: int, device: int, nbytes: int, elem: torch.Tensor | None) -> None:
        self.records.append((kind, alloc_id, device, nbytes, time.perf_counter_ns(), self._seq_source.last_seq,
                             threading.get_ident(), elem.dtype if elem is not None else None,
                             tuple(elem.shape) if elem is not None else None))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._tracker._remove_log(self)

    def __enter__(self) -> "MemoryLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class MemoryTracker:
    devices: list[DeviceMemory] = field(default_factory=list)
    # (device, data_ptr) -> [refs, nbytes, alloc_id]
    _storages: dict[tuple[int, int], list] = field(default_factory=dict)
    _refs: dict = field(default_factory=dict)  # id(weakref to a wrapper's data) -> (the weakref, its storage key)
    _logs: tuple = ()
    _next_id: int = 0

    @classmethod
    def for_devices(cls, n: int) -> "MemoryTracker":
        return cls(devices=[DeviceMemory() for _ in range(n)])

    def track(self, wrapper: torch.Tensor, elem: torch.Tensor, index: int) -> None:
        # Runs for every op output: kept lean (the GIL serialises the dict updates).
        try:
            st = elem.untyped_storage()
            key = (index, st.data_ptr())
        except RuntimeError:  # fake/functional tensors while torch.compile traces: no memory to count
            return
        if key[1] == 0:
            return
        entry = self._storages.get(key)
        if entry is None:
            nbytes = st.nbytes()
            self._next_id += 1
            self._storages[key] = [1, nbytes, self._next_id]
            d = self.devices[index]
            d.allocated += nbytes
            d.num_allocs += 1
            if d.allocated > d.peak:
                d.peak = d.allocated
            if self._logs:
                for log in self._logs:
                    log._append(ALLOC, self._next_id, index, nbytes, elem)
        else:
            entry[0] += 1
        # weakref on the CPU data, not the wrapper: torch.utils.swap_tensors refuses tensors with weakrefs.
        # Keyed by the weakref's id: weakrefs compare by their referents, and tensors do not compare to a bool.
        ref = weakref.ref(elem, self._release)
        self._refs[id(ref)] = (ref, key)

    def _release(self, ref: weakref.ref) -> None:
        item = self._refs.pop(id(ref), None)
        if item is None:
            return
        key = item[1]
        entry = self._storages.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] <= 0:
            del self._storages[key]
            d = self.devices[key[0]]
            d.allocated -= entry[1]
            d.num_frees += 1
            if self._logs:
                for log in self._logs:
                    log._append(FREE, entry[2], key[0], entry[1], None)

    def reset_peak(self, index: int) -> None:
        d = self.devices[index]
        d.peak = d.allocated

    # -- what the profiler reads ------------------------------------------------------------------
    def open_log(self, seq_source: Any) -> MemoryLog:
        """Start recording allocations and frees; the log's baseline is every storage live right now."""
        log = MemoryLog(self, seq_source)
        log.baseline = [(e[2], k[0], e[1]) for k, e in list(self._storages.items())]
        self._logs = self._logs + (log,)
        return log

    def _remove_log(self, log: MemoryLog) -> None:
        self._logs = tuple(x for x in self._logs if x is not log)

    def storage_id(self, t: Any) -> int | None:
        """The allocation id of the storage behind neuron tensor `t` (None: not a tracked neuron tensor)."""
        elem = getattr(t, "_elem", None)
        index = getattr(t, "_nidx", None)
        if elem is None or index is None:
            return None
        try:
            entry = self._storages.get((index, elem.untyped_storage().data_ptr()))
        except RuntimeError:
            return None
        return entry[2] if entry is not None else None
