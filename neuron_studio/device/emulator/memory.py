"""Device-memory accounting of the emulator, as the profiler reads it.

The C++ allocator (csrc/NeuronRuntime.cpp) counts every neuron storage: allocations, frees (the moment the
last tensor or view of a storage dies), re-allocations by a resize (FSDP2 frees an unsharded parameter by
resizing its storage to 0 bytes and gathers it again by resizing it back; each re-allocation is a new
allocation id linked to the storage's first one). That is what `torch.neuron.memory_allocated()` and
`torch.accelerator.memory_allocated()` report (nothing is cached: reserved == allocated).

While a `MemoryLog` is open (the profiler opens one per capture), the allocator also keeps every allocation
and free in the order it counted them, so a profile can replay exactly the figures `memory_allocated()` /
`max_memory_allocated()` report.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["MemoryTracker", "DeviceMemory", "MemoryLog", "ALLOC", "FREE", "LOG_FIELDS"]

ALLOC = 1
FREE = -1
# One record per allocation or free, in allocator order. `after_seq` is the device's last op sequence
# number when it happened (the op that allocates gets the next number); dtype/shape only for allocations.
LOG_FIELDS = ("kind", "alloc_id", "device", "nbytes", "time_ns", "after_seq", "thread", "dtype", "shape")


@dataclass
class DeviceMemory:
    allocated: int = 0
    peak: int = 0
    num_allocs: int = 0
    num_frees: int = 0


class MemoryLog:
    """Allocation and free records of one consumer (a profile capture), plus the live set when it opened.

    `records`, `baseline` ((alloc_id, device, nbytes) live when opened) and `renewed` (alloc_id of a storage's
    re-allocation -> its first alloc_id) are filled when the log closes."""

    def __init__(self, native: Any) -> None:
        self._C = native
        self._id = native.open_memory_log()
        self.records: list[tuple] = []
        self.baseline: list[tuple[int, int, int]] = []
        self.renewed: dict[int, int] = {}
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            records, baseline, renewed = self._C.close_memory_log(self._id)
            self.records, self.baseline, self.renewed = records, [tuple(b) for b in baseline], dict(renewed)

    def __enter__(self) -> "MemoryLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MemoryTracker:
    """The allocator's figures per device and the storage identity of tensors, for the profiler."""

    def __init__(self, native: Any, device_count: int) -> None:
        self._C = native
        self.device_count = device_count

    def device_memory(self, index: int) -> DeviceMemory:
        return DeviceMemory(*self._C.memory_stats(index))

    def reset_peak(self, index: int) -> None:
        self._C.reset_peak(index)

    def drain(self) -> None:
        """Frees are counted the moment a storage dies: nothing is queued (kept for the capture's call)."""

    def open_log(self, seq_source: Any = None) -> MemoryLog:
        """Start recording allocations and frees; the log's baseline is every storage live right now."""
        return MemoryLog(self._C)

    def storage_id(self, t: Any) -> int | None:
        """The allocation id of the storage behind neuron tensor `t` (None: no neuron storage with bytes). A
        DTensor (FSDP2's sharded parameters, gradients and optimizer state) answers for its local shard."""
        if not isinstance(t, torch.Tensor):
            return None
        local = getattr(t, "_local_tensor", None)
        if isinstance(local, torch.Tensor):
            return self.storage_id(local)
        if t.device.type != "neuron" or getattr(t, "is_meta", False):
            return None
        try:
            return self._C.storage_alloc_id(t)
        except (RuntimeError, TypeError):  # tensor subclasses without storage
            return None
