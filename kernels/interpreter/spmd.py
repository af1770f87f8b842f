"""SPMD launch grids: `kernel[g]`, `kernel[g0, g1]`, `kernel[nl.spmd_dim(g, nl.nc(2)), g1]`.

NKI runs one kernel instance per point of the launch grid; `nl.program_id(axis)` is the instance's coordinate
and `nl.num_programs(axis)` the grid size along `axis`. Instances share `shared_hbm` tensors (the kernel's
output) and own everything else. The interpreter runs the instances one after another in row-major order,
which is one valid schedule: NKI promises no order between instances, and kernels may not depend on one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

__all__ = ["nc", "spmd_dim", "LaunchGrid", "parse_grid"]


@dataclass(frozen=True)
class nc:  # noqa: N801 - NKI name
    """`nl.nc(n)`: distribute a grid axis over n physical NeuronCores (logical NeuronCore, LNC=n)."""

    count: int


@dataclass(frozen=True)
class spmd_dim:  # noqa: N801 - NKI name
    """`nl.spmd_dim(size, nl.nc(n))`: a grid axis of size*n instances, instance i on physical core i % n."""

    size: int
    cores: nc | int = 1

    @property
    def extent(self) -> int:
        n = self.cores.count if isinstance(self.cores, nc) else int(self.cores)
        return int(self.size) * n


@dataclass(frozen=True)
class LaunchGrid:
    """The launch grid of one kernel call (`()` for a plain call: one instance)."""

    dims: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    def points(self) -> Iterator[tuple[int, ...]]:
        """Every instance's coordinates in row-major order."""
        if not self.dims:
            yield ()
            return
        idx = [0] * len(self.dims)
        for _ in range(self.size):
            yield tuple(idx)
            for axis in range(len(self.dims) - 1, -1, -1):
                idx[axis] += 1
                if idx[axis] < self.dims[axis]:
                    break
                idx[axis] = 0


def parse_grid(key: Any) -> LaunchGrid:
    """`kernel[key]`: an int, an `spmd_dim`, or a tuple of them (at most 4 axes, as NKI allows)."""
    items: Sequence[Any] = key if isinstance(key, (tuple, list)) else (key,)
    dims = []
    for item in items:
        if isinstance(item, spmd_dim):
            dims.append(item.extent)
        elif isinstance(item, nc):
            dims.append(item.count)
        elif isinstance(item, int) or (hasattr(item, "__index__") and not isinstance(item, bool)):
            dims.append(int(item))
        else:
            raise TypeError(f"launch grid entries are ints or nl.spmd_dim(...), got {item!r}")
    if len(dims) > 4:
        raise ValueError(f"an SPMD launch grid has at most 4 dimensions, got {len(dims)}")
    if any(d < 1 for d in dims):
        raise ValueError(f"launch grid sizes must be >= 1, got {dims}")
    return LaunchGrid(tuple(dims))
