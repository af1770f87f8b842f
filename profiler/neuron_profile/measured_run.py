"""The measured stand-in for the cost model's `ModeledRun`: what `Profile` reads, filled from hardware data."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd

from neuron_studio.profiler.model.run_summary import RunSummary

__all__ = ["MeasuredGroups", "MeasuredRun"]


class MeasuredGroups(Sequence):
    """Measured runs have no modeled fusion groups: an empty sequence with the same `to_frame()`."""

    COLUMNS = ("id", "core", "first_row", "last_row", "n_ops", "launches", "start_ns", "end_ns", "reason",
               "boundary_row", "boundary_reason")

    def __len__(self) -> int:
        return 0

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return []
        raise IndexError(i)

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({c: pd.Series([], dtype="object" if c == "boundary_reason" else "int64")
                             for c in self.COLUMNS})


@dataclass(frozen=True)
class MeasuredRun:
    """Measured stand-in for `ModeledRun`: the same interface `Profile` reads (`ops`, `ops_frame()`, `groups`,
    `summary`, `config`), filled from Neuron Explorer tables instead of the cost model.

    `ops` columns: seq, name, core, engine, start_ns, end_ns, duration_ns, compute_ns, memory_ns,
    launch_overhead_ns (0: measured time already includes it), flops, bytes_read, bytes_written, bound
    (the roof the op is closer to, from its measured FLOP/s and bytes/s), group (-1), launch, fallback.
    `kernels`: {(op, module): [kernel dicts]} from KernelInstructions/KernelStackFrames.
    `active_time`: ActiveTime rows (engine, core, start_ns, end_ns) rebased like the ops, or None.
    """

    ops: dict[str, np.ndarray]
    groups: MeasuredGroups
    summary: RunSummary
    config: Any
    kernels: dict[tuple[str, str], list[dict]] = field(default_factory=dict)
    active_time: pd.DataFrame | None = None
    modeled: bool = False

    def ops_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.ops)

    def kernels_for(self, op: str, module: str) -> list[dict]:
        return [dict(k) for k in self.kernels.get((op, module), [])]
