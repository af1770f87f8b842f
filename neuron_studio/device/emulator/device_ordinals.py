"""Neuron device ordinals: how many logical NeuronCores the emulated chip has, and each thread's current one.

`torch.neuron.set_device`/`current_device` and every `device="neuron:N"` go through `check_index`, so an
out-of-range ordinal fails the way CUDA's does, naming the valid range.
"""
from __future__ import annotations

import threading

__all__ = ["set_device_count", "current_device", "set_current_device", "check_index"]

_count = 0  # logical NeuronCores on the emulated chip; set once at registration (set_device_count)


def set_device_count(count: int) -> None:
    """Record how many logical NeuronCores the registered device has (called by tensor.configure)."""
    global _count
    _count = count


_current = threading.local()  # this thread's current neuron device (torch.neuron.set_device)


def current_device() -> int:
    """This thread's current neuron device ordinal (0 until `set_current_device`)."""
    return getattr(_current, "index", 0)


def set_current_device(index: int) -> None:
    """Make `index` (already validated by `check_index`) this thread's current neuron device."""
    _current.index = index


def check_index(index: int | None) -> int:
    """Validate a device ordinal the way CUDA does, naming how many devices exist."""
    if index is None:
        return current_device()
    if index < 0 or index >= _count:
        raise RuntimeError(
            f"neuron: invalid device ordinal {index}: this (emulated) chip has {_count} logical NeuronCores "
            f"(valid: neuron:0 .. neuron:{_count - 1}); see neuron_studio.device.info()"
        )
    return index
