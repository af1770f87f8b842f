"""State of the fake: what ran, and the log of API calls."""
from __future__ import annotations

import os

AVAILABLE = os.environ.get("FAKE_NEURONX_AVAILABLE", "1") == "1"
CALLS: list[tuple[str, object]] = []
EXECUTED: set[str] = set()
FALLBACK: set[str] = set()
DYNAMO: dict[str, object] = {}
MEMORY: dict[str, int] = {"allocated": 0, "peak": 0}  # what torch.neuron.memory_allocated()/max_... report


def allocate(nbytes: int) -> None:
    """What a test cell calls to pretend device tensors of `nbytes` were allocated (negative: freed)."""
    MEMORY["allocated"] += nbytes
    MEMORY["peak"] = max(MEMORY["peak"], MEMORY["allocated"])


def run_op(name: str, fallback: bool = False) -> None:
    """What a test cell calls to pretend TorchNeuron ran an op (on the device, or on CPU as a fallback)."""
    (FALLBACK if fallback else EXECUTED).add(name)


def compiled(graphs: int = 1) -> None:
    DYNAMO["graphs_compiled"] = int(DYNAMO.get("graphs_compiled", 0)) + graphs
    DYNAMO["neff_cache_hits"] = 0
