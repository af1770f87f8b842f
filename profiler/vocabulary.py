"""Names every stage shares: run modes, NeuronCore engines, the gated-MLP child modules.

Defined once, here, because capture, the op model, the analyses, the kernels and the display all speak
them. No imports, so the JupyterLab extension can load this file without importing `neuron_studio`.
"""
from __future__ import annotations

__all__ = ["MODES", "DEVICE_ENGINES", "NO_ENGINE", "HOST_ENGINE", "GATED_MLP_NAMES"]

#: How a cell runs on the device: op by op, op-by-op with modeled fusion, or compiled graphs.
MODES: tuple[str, ...] = ("eager", "adaptive", "compile")

#: The NeuronCore's engines an op can occupy, in display order (compute engines, then DMA).
DEVICE_ENGINES: tuple[str, ...] = ("tensor", "vector", "scalar", "gpsimd", "dma")
#: The engine of an op that occupies none (views, metadata ops).
NO_ENGINE = "none"
#: The engine label of host-side work shown alongside the device tracks.
HOST_ENGINE = "host"

#: (gate, up, down) Linear child names of a SiLU-gated MLP, in the spellings of common model families.
GATED_MLP_NAMES: tuple[tuple[str, str, str], ...] = (
    ("gate_proj", "up_proj", "down_proj"),
    ("w1", "w3", "w2"),
    ("gate", "up", "down"),
)
