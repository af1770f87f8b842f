"""`torch.neuron` on the emulator: the functions TorchNeuron's device module offers, over the C++ runtime.

Random numbers: the device's random ops run CPU kernels on the CPU generator, so `torch.manual_seed(s)` gives
the same stream on `neuron` as on CPU; the seed functions here therefore delegate to the CPU generator (never
back to `torch.manual_seed`, which calls them and would recurse). `torch.Generator("neuron")` is a generator of
its own, drawing what a CPU generator with the same seed draws.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from neuron_studio.device.emulator.distributed import Event, Stream, current_stream, default_stream, stream

__all__ = [
    "is_available", "is_initialized", "device_count", "current_device", "set_device", "synchronize",
    "synchronize_for_timing", "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
    "get_rng_state", "set_rng_state", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "memory_stats", "reset_peak_memory_stats", "empty_cache", "get_device_properties",
    "get_device_name", "get_amp_supported_dtype", "is_bf16_supported", "device", "DeviceProperties",
    "Stream", "Event", "current_stream", "default_stream", "stream",
]

_registry = None  # the device registry (neuron_studio.device._Registry), bound by bind()
_C: Any = None  # the C++ extension, bound by bind()


def bind(registry: Any, native: Any) -> None:
    global _registry, _C
    _registry = registry
    _C = native
    for name in _RNG:
        globals()[name] = getattr(native, name)


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    return None


def device_count() -> int:
    return _C.device_count()


def current_device() -> int:
    return _C.current_device()


def _index(device: Any) -> int:
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return _C.check_index(device)
    d = torch.device(device)
    if d.type != "neuron":
        raise ValueError(f"expected a neuron device, got {d}")
    return _C.check_index(-1 if d.index is None else d.index)


def set_device(device: Any) -> None:
    _C.set_device(_index(device))


class device:
    """Context manager that changes the current neuron device, like `torch.cuda.device`."""

    def __init__(self, device: Any) -> None:
        self.idx = _index(device)

    def __enter__(self) -> None:
        self.prev = _C.current_device()
        _C.set_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        _C.set_device(self.prev)


def synchronize(device: Any = None) -> None:
    """Execution is synchronous on the emulator; the call is recorded as a sync point for the model."""
    _C.synchronize(_index(device), False)


def synchronize_for_timing(device: Any = None) -> None:
    """The profiler's own end-of-run sync: modeled like any sync, but not reported as the user's sync point."""
    _C.synchronize(_index(device), True)


# -- RNG: the CPU generator serves the emulated device -------------------------------------------
# manual_seed, manual_seed_all, seed, seed_all, initial_seed, get_rng_state, set_rng_state: the extension's
# builtins over the CPU default generator, bound by bind() (torch.compile graph-breaks on them, as on CPU's).
_RNG = ("manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state")


# -- memory ----------------------------------------------------------------------------------------
def memory_allocated(device: Any = None) -> int:
    return _C.memory_stats(_index(device))[0]


def max_memory_allocated(device: Any = None) -> int:
    return _C.memory_stats(_index(device))[1]


memory_reserved = memory_allocated
max_memory_reserved = max_memory_allocated


def reset_peak_memory_stats(device: Any = None) -> None:
    _C.reset_peak(_index(device))


def memory_stats(device: Any = None) -> dict[str, int]:
    allocated, peak, num_allocs, num_frees = _C.memory_stats(_index(device))
    return {
        "allocated_bytes.all.current": allocated,
        "allocated_bytes.all.peak": peak,
        "reserved_bytes.all.current": allocated,
        "reserved_bytes.all.peak": peak,
        "num_alloc_retries": 0,
        "num_allocs": num_allocs,
        "num_frees": num_frees,
    }


def empty_cache() -> None:
    """Nothing is cached: freed tensors return their memory at once."""
    return None


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    total_memory: int
    chip: str
    logical_core_size: int
    emulated: bool = True


def get_device_properties(device: Any = None) -> DeviceProperties:
    _index(device)
    t = _registry.target
    return DeviceProperties(
        name=f"{t.chip_name} logical NeuronCore (emulated)",
        total_memory=t.hbm_bytes_per_logical_core,
        chip=t.chip,
        logical_core_size=t.lnc,
    )


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported() -> bool:
    return True


def _is_compiled() -> bool:
    return True
