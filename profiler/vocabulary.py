"""Names every stage shares: run modes, NeuronCore engines, the gated-MLP child modules.

Defined once, here, because capture, the op model, the analyses, the kernels and the display all speak
them. No imports, so the JupyterLab extension can load this file without importing `neuron_studio`.
"""
from __future__ import annotations

__all__ = ["MODES", "DEVICE_ENGINES", "NO_ENGINE", "HOST_ENGINE", "COLLECTIVE_PREFIX", "ENGINE_LABELS", "GATED_MLP_NAMES"]

#: How a cell runs on the device: op by op, op-by-op with modeled fusion, or compiled graphs.
MODES: tuple[str, ...] = ("eager", "adaptive", "compile")

#: The NeuronCore's engines an op can occupy, in display order (compute engines, then DMA).
DEVICE_ENGINES: tuple[str, ...] = ("tensor", "vector", "scalar", "gpsimd", "dma")
#: How the engines are spelled on screen (the Neuron docs' names).
ENGINE_LABELS: dict[str, str] = {"tensor": "Tensor", "vector": "Vector", "scalar": "Scalar", "gpsimd": "GpSimd",
                                 "dma": "DMA"}
#: The engine of an op that occupies none (views, metadata ops).
NO_ENGINE = "none"
#: The engine label of host-side work shown alongside the device tracks.
HOST_ENGINE = "host"
#: Op-name prefix of collectives (torch.distributed's c10d ops); the trace viewer gives them their own track.
COLLECTIVE_PREFIX = "c10d::"

#: (gate, up, down) Linear child names of a SiLU-gated MLP, in the spellings of common model families.
GATED_MLP_NAMES: tuple[tuple[str, str, str], ...] = (
    ("gate_proj", "up_proj", "down_proj"),
    ("w1", "w3", "w2"),
    ("gate", "up", "down"),
)
