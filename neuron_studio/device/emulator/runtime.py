"""`torch.neuron` on the emulator: the same functions TorchNeuron's device module offers.

Random numbers: the emulator draws from the CPU generator, so `torch.manual_seed(s)` gives the same
stream on `neuron` as on CPU; the seed functions here therefore only validate and delegate to the CPU
generator (never back to `torch.manual_seed`, which calls them and would recurse).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from neuron_studio.device import events as ev
from neuron_studio.device.emulator.device_ordinals import check_index, current_device, set_current_device

__all__ = [
    "is_available", "is_initialized", "device_count", "current_device", "set_device", "synchronize",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
    "reset_peak_memory_stats", "empty_cache", "get_device_properties", "get_device_name",
    "get_amp_supported_dtype", "is_bf16_supported", "device", "DeviceProperties",
]

_registry = None  # the device registry (neuron_studio.device._Registry), bound by bind()


def bind(registry: Any) -> None:
    global _registry
    _registry = registry


def _reg():  # noqa: ANN202
    return _registry


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    return None


def device_count() -> int:
    return _reg().device_count


def _index(device: Any) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        idx = device
    else:
        d = torch.device(device)
        if d.type != "neuron":
            raise ValueError(f"expected a neuron device, got {d}")
        idx = d.index if d.index is not None else current_device()
    return check_index(idx)


def set_device(device: Any) -> None:
    set_current_device(_index(device))


class device:
    """Context manager that changes the current neuron device, like `torch.cuda.device`."""

    def __init__(self, device: Any) -> None:
        self.idx = _index(device)

    def __enter__(self) -> None:
        self.prev = current_device()
        set_current_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        set_current_device(self.prev)


def synchronize(device: Any = None) -> None:
    """Execution is synchronous on the emulator; the call is recorded as a sync point for the model."""
    _record_sync(_index(device), ())


def synchronize_for_timing(device: Any = None) -> None:
    """The profiler's own end-of-run sync: modeled like any sync, but not reported as the user's sync point."""
    _record_sync(_index(device), (ev.TAG_TIMING_SYNC,))


def _record_sync(idx: int, tags: tuple[str, ...]) -> None:
    bus = _reg().bus
    if bus.active:
        now = time.perf_counter_ns()
        bus.publish(
            ev.OpEvent(
                seq=bus.next_seq(), name="neuron::synchronize", overload="default", start_ns=now, end_ns=now,
                thread=threading.get_ident(), device_index=idx, input_shapes=(), input_dtypes=(),
                output_shapes=(), output_dtypes=(), sync=ev.SYNC_EXPLICIT, graph=bus.current_graph, tags=tags,
            )
        )


# -- RNG: the CPU generator serves the emulated device -------------------------------------------
def manual_seed(seed: int) -> None:
    torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    torch.default_generator.manual_seed(int(seed))


def seed() -> None:
    torch.default_generator.seed()


def seed_all() -> None:
    torch.default_generator.seed()


def initial_seed() -> int:
    return torch.default_generator.initial_seed()


def get_rng_state(device: Any = None) -> torch.Tensor:
    return torch.default_generator.get_state()


def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
    torch.default_generator.set_state(state)


# -- memory ----------------------------------------------------------------------------------------
def memory_allocated(device: Any = None) -> int:
    return _reg().memory.device_memory(_index(device)).allocated


def max_memory_allocated(device: Any = None) -> int:
    return _reg().memory.device_memory(_index(device)).peak


memory_reserved = memory_allocated
max_memory_reserved = max_memory_allocated


def reset_peak_memory_stats(device: Any = None) -> None:
    _reg().memory.reset_peak(_index(device))


def memory_stats(device: Any = None) -> dict[str, int]:
    d = _reg().memory.device_memory(_index(device))
    return {
        "allocated_bytes.all.current": d.allocated,
        "allocated_bytes.all.peak": d.peak,
        "reserved_bytes.all.current": d.allocated,
        "reserved_bytes.all.peak": d.peak,
        "num_alloc_retries": 0,
        "num_allocs": d.num_allocs,
        "num_frees": d.num_frees,
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
    t = _reg().target
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
