"""Neuron-device storages for emulated tensors: a data-less device storage aliasing the CPU storage.

The wrapper subclass has no memory of its own, so `Tensor.untyped_storage()` and `set_(storage, ...)`
go through these two helpers, which map a host storage to its one device storage and back, and
`storage.resize_` of a device storage (FSDP2 frees and re-allocates unsharded parameters that way) resizes
the host storage behind it and tells the allocator (`resize_device_storage`).
"""
from __future__ import annotations

import weakref

import torch

from typing import Any

__all__ = ["device_storage", "host_storage", "resize_device_storage"]


def device_storage(host: torch.UntypedStorage, device: torch.device) -> torch.UntypedStorage:
    """A neuron-device storage aliasing `host` (one per host storage, kept alive by its users)."""
    cached = getattr(host, "_neuron_storage", None)
    found = cached() if cached is not None else None
    if found is None or found.data_ptr() != host.data_ptr() or found.nbytes() != host.nbytes():
        found = torch._C._construct_storage_from_data_pointer(host.data_ptr(), device, host.nbytes())
        found._neuron_host = host  # the device storage owns no memory: keep the host's alive
        host._neuron_storage = weakref.ref(found)
    return found


def host_storage(storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """The CPU storage behind a neuron storage from `device_storage` (for set_)."""
    host = getattr(storage, "_neuron_host", None)
    if host is None:
        raise RuntimeError(
            "neuron: this storage was not obtained from a neuron tensor (Tensor.untyped_storage()); the emulated "
            "device can only re-use storages of existing neuron tensors"
        )
    return host


def resize_device_storage(storage: torch.UntypedStorage, nbytes: int, memory: Any) -> torch.UntypedStorage:
    """`storage.resize_(nbytes)` for a neuron storage from `device_storage`: torch would ask a C++ hook
    (`resizePrivateUse1Bytes`) a Python backend cannot register, so resize the CPU storage behind it and
    report the resize to `memory` (the emulator's MemoryTracker: a resize to 0 frees, a resize back allocates).
    Returns the device storage of the resized host storage."""
    host = host_storage(storage)
    before = host.data_ptr()
    host.resize_(nbytes)
    memory.resized(storage.device.index or 0, host, before)
    return device_storage(host, storage.device)
