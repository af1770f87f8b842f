"""Device-memory accounting for the emulator: bytes held by live neuron tensors, per device.

A storage is counted once however many wrappers (views, aliases) share it, and released when the last
wrapper dies. That is what `torch.neuron.memory_allocated()` reports, like CUDA's caching allocator
reports bytes in live tensors (there is no cache here, so reserved == allocated).

A storage can also be resized in place (`storage.resize_`): FSDP2 frees an unsharded parameter by resizing
its storage to 0 bytes after use and re-allocates it by resizing it back before the next use, while the
parameter tensor itself stays alive. `resized` hears of it: a resize to 0 is a free (the storage is parked,
still owned by its wrappers, and counts nothing), a resize back is a new allocation of the same storage
(under its new data pointer, with a new allocation id, so nothing is counted twice).

A dead tensor's weakref callback only queues its weakref (`deque.append`, a C call): no Python code runs
inside it, so a Ctrl-C that arrives while the garbage collector frees tensors is delivered to the user's
code instead of being swallowed as an "exception ignored" in a callback (which also left the count half
updated). The queue is drained before anything reads or changes the count: each allocation, each op the
device dispatches, every query (`device_memory`), opening and closing a log. Peaks are therefore exact
(a free always lands before the next allocation) and a free keeps its place among the op sequence numbers.

While a `MemoryLog` is open (the profiler opens one per capture), every allocation and free is also
appended to it, in the order the tracker counts them, so a profile can replay exactly the figures
`memory_allocated()` / `max_memory_allocated()` report. With no log open the hooks cost one attribute test.
"""
from __future__ import annotations

import threading
import time
import weakref
from collections import deque
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
        # storages re-allocated by a resize while the log was open: alloc_id -> the storage's first alloc_id
        self.renewed: dict[int, int] = {}
        self.closed = False

    def _append(self, kind: int, alloc_id: int, device: int, nbytes: int, elem: torch.Tensor | None) -> None:
        self.records.append((kind, alloc_id, device, nbytes, time.perf_counter_ns(), self._seq_source.last_seq,
                             threading.get_ident(), elem.dtype if elem is not None else None,
                             tuple(elem.shape) if elem is not None else None))

    def close(self) -> None:
        if not self.closed:
            self._tracker.drain()  # frees that happened before closing belong to this log
            self.closed = True
            self._tracker._remove_log(self)

    def __enter__(self) -> "MemoryLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class MemoryTracker:
    devices: list[DeviceMemory] = field(default_factory=list)
    # (device, data_ptr) -> [refs, nbytes, alloc_id, this key, None]
    _storages: dict[tuple[int, int], list] = field(default_factory=dict)
    # (device, storage identity) -> [refs, 0, alloc_id, None, its key here]: storages resized to 0 bytes
    _parked: dict[tuple[int, int], list] = field(default_factory=dict)
    _refs: dict = field(default_factory=dict)  # id(weakref to a wrapper's data) -> (the weakref, its entry)
    _logs: tuple = ()
    _next_id: int = 0
    _dead: deque = field(default_factory=deque)  # weakrefs of dead tensors, not yet uncounted (see drain)

    @classmethod
    def for_devices(cls, n: int) -> "MemoryTracker":
        return cls(devices=[DeviceMemory() for _ in range(n)])

    def drain(self) -> None:
        """Uncount the storages whose last tensor died since the last drain (in the order they died)."""
        dead = self._dead
        while dead:
            self._release(dead[0])  # interrupted before it ran, the free stays queued for the next drain
            dead.popleft()

    def device_memory(self, index: int) -> DeviceMemory:
        """Device `index`'s counts, with every free so far applied."""
        if self._dead:
            self.drain()
        return self.devices[index]

    def track(self, wrapper: torch.Tensor, elem: torch.Tensor, index: int) -> None:
        # Runs for every op output: kept lean (the GIL serialises the dict updates).
        if self._dead:
            self.drain()
        try:
            st = elem.untyped_storage()
            key = (index, st.data_ptr())
        except RuntimeError:  # fake/functional tensors while torch.compile traces: no memory to count
            return
        if key[1] == 0:  # no memory; a storage FSDP2 freed by resizing it is still owned by this tensor
            entry = self._parked.get((index, st._cdata)) if self._parked else None
            if entry is None:
                return
            entry[0] += 1
        else:
            entry = self._storages.get(key)
            if entry is None:
                entry = self._storages[key] = [1, 0, 0, key, None]
                self._allocate(entry, index, st.nbytes(), elem)
            else:
                entry[0] += 1
        # weakref on the CPU data, not the wrapper: torch.utils.swap_tensors refuses tensors with weakrefs.
        # Keyed by the weakref's id: weakrefs compare by their referents, and tensors do not compare to a bool.
        ref = weakref.ref(elem, self._dead.append)
        self._refs[id(ref)] = (ref, entry)

    def _allocate(self, entry: list, index: int, nbytes: int, elem: torch.Tensor | None) -> None:
        self._next_id += 1
        entry[1] = nbytes
        entry[2] = self._next_id
        d = self.devices[index]
        d.allocated += nbytes
        d.num_allocs += 1
        if d.allocated > d.peak:
            d.peak = d.allocated
        if self._logs:
            for log in self._logs:
                log._append(ALLOC, self._next_id, index, nbytes, elem)

    def _free(self, entry: list, index: int) -> None:
        d = self.devices[index]
        d.allocated -= entry[1]
        d.num_frees += 1
        if self._logs:
            for log in self._logs:
                log._append(FREE, entry[2], index, entry[1], None)

    def _release(self, ref: weakref.ref) -> None:
        item = self._refs.pop(id(ref), None)
        if item is None:
            return
        entry = item[1]
        entry[0] -= 1
        if entry[0] > 0:
            return
        if entry[3] is not None:  # live
            del self._storages[entry[3]]
            self._free(entry, entry[3][0])
        else:  # parked: its bytes were freed when it was resized to 0
            self._parked.pop(entry[4], None)

    def resized(self, index: int, storage: torch.UntypedStorage, old_ptr: int) -> None:
        """`storage` (the CPU storage of neuron tensors on device `index`) was just resized in place; it had
        data pointer `old_ptr` before. Free, re-allocate or re-size its entry so the count follows."""
        if self._dead:
            self.drain()
        new_ptr, nbytes = storage.data_ptr(), storage.nbytes()
        pkey = (index, storage._cdata)
        entry = self._storages.pop((index, old_ptr), None) if old_ptr else self._parked.pop(pkey, None)
        if entry is None:  # not a storage of a live neuron tensor (or one never counted): nothing to follow
            return
        if entry[3] is not None:  # it was live: its old bytes are gone
            self._free(entry, index)
        if new_ptr == 0:
            entry[1], entry[3], entry[4] = 0, None, pkey
            self._parked[pkey] = entry
            return
        old_id = entry[2]
        entry[3], entry[4] = (index, new_ptr), None
        self._storages[entry[3]] = entry
        self._allocate(entry, index, nbytes, None)
        for log in self._logs:
            log.renewed[entry[2]] = log.renewed.get(old_id, old_id)

    def follow(self, elem: torch.Tensor, index: int) -> None:
        """`elem` (a neuron tensor's CPU data on device `index`) was just resized by an op (resize_, an out=
        argument that had to grow): its storage may hold a new size at a new address. Move its count there
        (the old bytes are freed, the new ones allocated), or start counting a storage that held nothing.
        Runs only when an op changed a tensor's geometry."""
        if self._dead:
            self.drain()
        try:
            st = elem.untyped_storage()
            ptr = st.data_ptr()
        except RuntimeError:  # fake/functional tensors while torch.compile traces: no memory to follow
            return
        if ptr == 0:
            return
        entry = self._storages.get((index, ptr))
        if entry is not None:
            if entry[1] != st.nbytes():  # re-sized where it was
                self.resized(index, st, ptr)
            return
        for ref, entry in list(self._refs.values()):
            if ref() is elem:
                self.resized(index, st, entry[3][1] if entry[3] is not None else 0)
                return
        self.track(elem, elem, index)  # a storage that held nothing when the tensor was made

    def adopt(self, outputs: Any, index: int) -> None:
        """Count the host tensors a compiled graph returns (`outputs`, nested lists/tuples) as memory of device
        `index` while their storage lives. AOTAutograd runs a compiled graph on the CPU data of neuron tensors,
        so the activations its forward graph saves for backward come back as plain host tensors that no
        wrapper owns (autograd then keeps other tensor objects on the same storage: the weakref is on the
        storage). Outputs that are, or alias, storages already counted are counted once."""
        if self._dead:
            self.drain()
        if isinstance(outputs, (list, tuple)):
            for o in outputs:
                self.adopt(o, index)
            return
        if type(outputs) is not torch.Tensor or outputs.device.type != "cpu":
            return
        st = outputs.untyped_storage()
        key = (index, st.data_ptr())
        if key[1] == 0:
            return
        entry = self._storages.get(key)
        if entry is None:
            entry = self._storages[key] = [1, 0, 0, key, None]
            self._allocate(entry, index, st.nbytes(), outputs)
        else:
            entry[0] += 1
        ref = weakref.ref(st, self._dead.append)
        self._refs[id(ref)] = (ref, entry)

    def reset_peak(self, index: int) -> None:
        d = self.device_memory(index)
        d.peak = d.allocated

    # -- what the profiler reads ------------------------------------------------------------------
    def open_log(self, seq_source: Any) -> MemoryLog:
        """Start recording allocations and frees; the log's baseline is every storage live right now."""
        if self._dead:
            self.drain()
        log = MemoryLog(self, seq_source)
        log.baseline = [(e[2], k[0], e[1]) for k, e in list(self._storages.items())]
        self._logs = self._logs + (log,)
        return log

    def _remove_log(self, log: MemoryLog) -> None:
        self._logs = tuple(x for x in self._logs if x is not log)

    def storage_id(self, t: Any) -> int | None:
        """The allocation id of the storage behind neuron tensor `t` (None: not a tracked neuron tensor). A
        DTensor (FSDP2's sharded parameters, gradients and optimizer state) answers for its local shard, a
        host tensor a compiled graph returned (`adopt`) for itself."""
        if self._dead:
            self.drain()
        elem = getattr(t, "_elem", None)
        index = getattr(t, "_nidx", None)
        if elem is None or index is None:
            local = getattr(t, "_local_tensor", None)
            if isinstance(local, torch.Tensor):
                return self.storage_id(local)
            if type(t) is torch.Tensor and t.device.type == "cpu":  # a compiled graph's output (see adopt)
                try:
                    ptr = t.untyped_storage().data_ptr()
                except RuntimeError:
                    return None
                for i in range(len(self.devices)):
                    entry = self._storages.get((i, ptr))
                    if entry is not None:
                        return entry[2]
            return None
        try:
            entry = self._storages.get((index, elem.untyped_storage().data_ptr()))
        except RuntimeError:
            return None
        return entry[2] if entry is not None else None
