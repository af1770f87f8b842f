"""Names every stage shares: run modes, NeuronCore engines, the gated-MLP child modules.

Defined once, here, because capture, the op model, the analyses, the kernels and the display all speak
them. No imports, so the JupyterLab extension can load this file without importing `neuron_studio`.
"""
from __future__ import annotations

__all__ = ["source_label", "module_label", "counted", "BACKWARD_SUFFIX", "TOP_LEVEL", "CELL_SOURCE_PREFIX", "MODES", "DEVICE_ENGINES", "NO_ENGINE", "HOST_ENGINE", "COLLECTIVE_PREFIX", "ENGINE_LABELS", "GATED_MLP_NAMES"]

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


#: How a backward op's module reads: its forward module's path and this suffix ("Block.mlp (backward)").
BACKWARD_SUFFIX = " (backward)"
#: The module of an op that ran outside every nn.Module (the step's own code, e.g. the loss).
TOP_LEVEL = "top level"


def module_label(module: object, top_level_known: bool = True) -> str:
    """The one way an op's module reads on screen. The capture records "" for an op outside every nn.Module and
    "(backward)" for the backward of one; shown as "top level" / "top level (backward)", so that "(backward)" is
    only ever a suffix to a name. `top_level_known` False (compile mode, whose graphs record no module; a trace
    imported from elsewhere): an empty module is not known to be the top level, so "—" and "backward pass"."""
    m = "" if module is None or (isinstance(module, float) and module != module) else str(module)
    bare = m.strip()
    if bare and bare != BACKWARD_SUFFIX.strip():
        return m
    if not top_level_known:
        return "backward pass" if bare else "—"
    return TOP_LEVEL + (BACKWARD_SUFFIX if bare else "")


def counted(n: float, noun: str, plural: str | None = None) -> str:
    """`n` and its noun, agreeing in number, `n` rounded to a whole count: "1 launch", "48 launches"."""
    k = round(float(n))
    return f"{k:,} {noun if k == 1 else (plural or noun + ('es' if noun.endswith(('s', 'sh', 'ch', 'x')) else 's'))}"
