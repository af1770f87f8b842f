"""Shared test setup: importing neuron_studio registers the `neuron` device (emulated unless TorchNeuron is here)."""
from __future__ import annotations

import pytest
import torch

import neuron_studio  # noqa: F401


@pytest.fixture
def neuron_device() -> torch.device:
    """`neuron:0`, with the current device reset afterwards (tests may call torch.neuron.set_device)."""
    yield torch.device("neuron", 0)
    torch.neuron.set_device(0)
