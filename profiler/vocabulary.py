"""Names every stage shares: run modes, NeuronCore engines, the gated-MLP child modules.

Defined once, here, because capture, the op model, the analyses, the kernels and the display all speak
them. No imports, so the JupyterLab extension can load this file without importing `neuron_studio`.
"""
from __future__ import annotations

__all__ = ["source_label", "counted", "CELL_SOURCE_PREFIX", "MODES", "DEVICE_ENGINES", "NO_ENGINE", "HOST_ENGINE", "COLLECTIVE_PREFIX", "ENGINE_LABELS", "GATED_MLP_NAMES"]

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

#: How a captured op source names a notebook cell: `cell-<In number>:<line>` (a file is `path:line`).
CELL_SOURCE_PREFIX = "cell-"


def source_label(source: object) -> str:
    """The one way an op source reads on screen: `cell [N] line L` for a notebook cell, `file.py:L` for a file
    (its name, not its directory); "" for none. The JupyterLab extension's `sourceLabel` mirrors it."""
    if not source:
        return ""
    s = str(source)
    path, sep, line = s.rpartition(":")
    if not sep or not line.isdigit():
        return s.rsplit("/", 1)[-1]
    if path.startswith(CELL_SOURCE_PREFIX) and path[len(CELL_SOURCE_PREFIX):].isdigit():
        return f"cell [{path[len(CELL_SOURCE_PREFIX):]}] line {line}"
    return f"{path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}"


def counted(n: float, noun: str, plural: str | None = None) -> str:
    """`n` and its noun, agreeing in number, `n` rounded to a whole count: "1 launch", "48 launches"."""
    k = round(float(n))
    return f"{k:,} {noun if k == 1 else (plural or noun + ('es' if noun.endswith(('s', 'sh', 'ch', 'x')) else 's'))}"
