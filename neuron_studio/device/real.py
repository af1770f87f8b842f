"""The real TorchNeuron backend: nothing to emulate, only to observe.

TorchNeuron registers `neuron` itself (via its `torch.backends` entry point or `import torch_neuronx`).
The studio reads its op tracking per cell instead of recording OpEvents per op.
"""
from __future__ import annotations

from typing import Any

__all__ = ["register_real"]


def register_real(registry: Any) -> None:
    import torch_neuronx  # noqa: F401  - registers the device and torch.neuron
