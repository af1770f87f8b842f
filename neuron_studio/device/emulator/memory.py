"""Device-memory accounting for the emulator: bytes held by live neuron tensors, per device.

A storage is counted once however many wrappers (views, aliases) share it, and released when the last
wrapper dies. That is what `torch.neuron.memory_allocated()` reports, like CUDA's caching allocator
reports bytes in live tensors (there is no cache here, so reserved == allocated).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch

__all__ = ["MemoryTracker", "DeviceMemory"]


@dataclass
class DeviceMemory:
    allocated: int = 0
    peak: int = 0
    num_allocs: int = 0
    num_frees: int = 0


@dataclass
class MemoryTracker:
    devices: list[DeviceMemory] = field(default_factory=list)
    _storages: dict[tuple[int, int], list] = field(default_factory=dict)  # (device, data_ptr) -> [refs, nbytes]
    _refs: dict = field(default_factory=dict)  # id(weakref to a wrapper's data) -> (the weakref, its storage key)

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
            self._storages[key] = [1, nbytes]
            d = self.devices[index]
            d.allocated += nbytes
            d.num_allocs += 1
            if d.allocated > d.peak:
                d.peak = d.allocated
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

    def reset_peak(self, index: int) -> None:
        d = self.devices[index]
        d.peak = d.allocated
