"""Fake TorchNeuron (tests only): registers a `torch.neuron` module and records every API call."""
from __future__ import annotations

import types

import torch

from torch_neuronx import _fake
from torch_neuronx._fake import CALLS

__version__ = "2.13.3.0+fake"
__all__ = ["get_fallback_ops", "get_executed_ops", "clear_op_tracking", "get_dynamo_metrics",
           "reset_dynamo_metrics", "synchronize", "profiling", "metrics"]


def _device_module() -> types.ModuleType:
    m = types.ModuleType("torch.neuron")
    m.is_available = lambda: _fake.AVAILABLE
    m.device_count = lambda: 4
    m.current_device = lambda: 0
    m.set_device = lambda i: CALLS.append(("set_device", i))
    m.synchronize = lambda device=None: CALLS.append(("synchronize", None))
    m.memory_allocated = lambda device=None: _fake.MEMORY["allocated"]
    m.max_memory_allocated = lambda device=None: _fake.MEMORY["peak"]
    m.reset_peak_memory_stats = lambda device=None: _fake.MEMORY.update(peak=_fake.MEMORY["allocated"])
    m.memory_stats = lambda device=None: {"allocated_bytes": _fake.MEMORY["allocated"],
                                          "peak_bytes": _fake.MEMORY["peak"], "reserved_bytes": 0}
    return m


torch.utils.rename_privateuse1_backend("neuron")
torch._register_device_module("neuron", _device_module())


def clear_op_tracking() -> None:
    CALLS.append(("clear_op_tracking", None))
    _fake.EXECUTED.clear()
    _fake.FALLBACK.clear()


def get_executed_ops() -> set:
    CALLS.append(("get_executed_ops", None))
    return set(_fake.EXECUTED)


def get_fallback_ops() -> set:
    CALLS.append(("get_fallback_ops", None))
    return set(_fake.FALLBACK)


def get_dynamo_metrics() -> dict:
    CALLS.append(("get_dynamo_metrics", None))
    return dict(_fake.DYNAMO)


def reset_dynamo_metrics() -> None:
    CALLS.append(("reset_dynamo_metrics", None))
    _fake.DYNAMO.clear()


def synchronize(device=None) -> None:
    CALLS.append(("synchronize", None))


run_op = _fake.run_op
_fake.install()

from torch_neuronx import metrics, profiling  # noqa: E402
