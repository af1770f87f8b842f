"""`nki.language` subset for the interpreter: buffers, dtypes, tile sizes, creation, load/store, loops, math.

Language-level math (`nl.exp(t)`, `nl.add(a, b)`, `nl.sum(t, axis=1)`) allocates an SBUF result and records
one instruction (activations on the Scalar Engine, the rest on the Vector Engine).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Sequence

import numpy as np

from . import isa as _isa
from .ops import BINARY, UNARY, Op
from .state import active_spec
from .tensor import NkiTensor, allocate

__all__ = [
    "sbuf", "psum", "hbm", "shared_hbm", "private_hbm", "tile_size",
    "float32", "bfloat16", "float16", "tfloat32", "int32", "int16", "int8", "uint8", "bool_",
    "ndarray", "zeros", "ones", "full", "zeros_like", "empty_like",
    "affine_range", "sequential_range", "static_range", "load", "store", "copy",
    "sum", "max", "min", "mean", "program_id", "num_programs", "NkiTensor",
]

# Buffers (the real package uses enum members; strings compare the same way in this interpreter)
sbuf = "sbuf"
psum = "psum"
hbm = "hbm"
shared_hbm = "shared_hbm"
private_hbm = "private_hbm"

# Dtypes are strings, as in the real `nki.language`
float32 = "float32"
bfloat16 = "bfloat16"
float16 = "float16"
tfloat32 = "tfloat32"
int32 = "int32"
int16 = "int16"
int8 = "int8"
uint8 = "uint8"
bool_ = "bool"


class _TileSizeLimits(type):
    """Class-level properties: `nl.tile_size.pmax` reads the modeled chip's figure from the hardware accessor."""

    @property
    def pmax(cls) -> int:
        return int(active_spec().partition_max or 0)

    @property
    def psum_bank_fmax(cls) -> int:
        return int(active_spec().psum_bank_fmax or 0)

    @property
    def psum_fmax(cls) -> int:   # deprecated alias of psum_bank_fmax in the real nki (since 0.4.0)
        return int(active_spec().psum_bank_fmax or 0)

    @property
    def psum_num_banks(cls) -> int:
        return int(active_spec().psum_banks or 0)

    @property
    def gemm_stationary_fmax(cls) -> int:
        return int(active_spec().gemm_stationary_fmax or 0)

    @property
    def gemm_moving_fmax(cls) -> int:
        return int(active_spec().gemm_moving_fmax or 0)


class tile_size(metaclass=_TileSizeLimits):
    """Hardware tile limits of the chip being modeled (trainium.md §4.2), read from `neuron_studio.hardware`."""


def ndarray(shape: Sequence[int], dtype: Any, buffer: str | None = None, name: str = "") -> NkiTensor:
    """Uninitialised tensor (zero-filled here) in `buffer` (default SBUF)."""
    return allocate(tuple(shape), dtype, buffer or sbuf, name)


def full(shape: Sequence[int], fill_value: float, dtype: Any, buffer: str | None = None,
         name: str = "") -> NkiTensor:
    t = allocate(tuple(shape), dtype, buffer or sbuf, name)
    _isa.memset(t, fill_value)
    return t


def zeros(shape: Sequence[int], dtype: Any, buffer: str | None = None, name: str = "") -> NkiTensor:
    t = allocate(tuple(shape), dtype, buffer or sbuf, name)
    _isa.memset(t, 0.0)
    return t


def ones(shape: Sequence[int], dtype: Any, buffer: str | None = None, name: str = "") -> NkiTensor:
    t = allocate(tuple(shape), dtype, buffer or sbuf, name)
    _isa.memset(t, 1.0)
    return t


def zeros_like(t: NkiTensor, dtype: Any = None, buffer: str | None = None, name: str = "") -> NkiTensor:
    return zeros(t.shape, dtype or t.dtype, buffer or t.buffer, name)


def empty_like(t: NkiTensor, dtype: Any = None, buffer: str | None = None, name: str = "") -> NkiTensor:
    return allocate(t.shape, dtype or t.dtype, buffer or t.buffer, name)


def affine_range(start: int, stop: int | None = None, step: int = 1) -> range:
    """Loop without carried dependencies; unrolled at trace time (yields Python ints)."""
    return range(start, stop, step) if stop is not None else range(start)


sequential_range = affine_range
static_range = affine_range


def load(src: NkiTensor, dtype: Any = None, name: str = "") -> NkiTensor:
    """DMA an HBM tensor (view) into a new SBUF tile."""
    t = allocate(src.shape, dtype or src.dtype, sbuf, name)
    _isa.dma_copy(t, src)
    return t


def store(dst: NkiTensor, value: NkiTensor) -> None:
    """DMA an SBUF tile to an HBM tensor (view)."""
    _isa.dma_copy(dst, value)


def copy(x: NkiTensor, dtype: Any = None, name: str = "") -> NkiTensor:
    t = allocate(x.shape, dtype or x.dtype, sbuf, name)
    _isa.tensor_copy(t, x)
    return t


def _apply_op(op: Op, *args: Any, dtype: Any = None, name: str = "", **_: Any) -> NkiTensor:
    """Language-level element-wise op: new SBUF tile = op(args)."""
    tiles = [a for a in args if isinstance(a, NkiTensor)]
    if not tiles:
        raise TypeError(f"nl.{op.name} needs at least one tile argument")
    out = allocate(tiles[0].shape, dtype or tiles[0].dtype, sbuf, name)
    if op.arity == 1:
        _isa.activation(out, op, args[0])
    elif all(isinstance(a, NkiTensor) for a in args[:2]):
        _isa.tensor_tensor(out, args[0], args[1], op)
    elif isinstance(args[0], NkiTensor):
        _isa.tensor_scalar(out, args[0], op, args[1])
    else:
        _isa.tensor_scalar(out, args[1], op, args[0], reverse0=True)
    return out


class _Reduction:
    """`nl.sum/max/min/mean`: reduce free axes into a new SBUF tile; usable as `op=` for isa reductions."""

    def __init__(self, name: str, reduce: Any, mean: bool = False) -> None:
        self.name = name
        self.reduce = reduce
        self._mean = mean

    def __call__(self, x: NkiTensor, axis: int | Sequence[int], dtype: Any = None, keepdims: bool = False,
                 name: str = "") -> NkiTensor:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape)) if keepdims else \
            tuple(s for i, s in enumerate(x.shape) if i not in axes)
        out = allocate(shape, dtype or x.dtype, sbuf, name)
        _isa.tensor_reduce(out, self, x, axes, keepdims=keepdims)
        if self._mean:
            count = int(np.prod([x.shape[a] for a in axes]))
            _isa.tensor_scalar(out, out, BINARY["multiply"], 1.0 / count)
        return out

    def __repr__(self) -> str:
        return f"nl.{self.name}"


sum = _Reduction("sum", np.add.reduce)  # noqa: A001 - NKI name
max = _Reduction("max", np.maximum.reduce)  # noqa: A001
min = _Reduction("min", np.minimum.reduce)  # noqa: A001
mean = _Reduction("mean", np.add.reduce, mean=True)


def program_id(axis: int) -> int:
    """Single-program launch in the interpreter."""
    return 0


def num_programs(axes: int | None = None) -> int:
    return 1


@dataclass(frozen=True, eq=False)
class LanguageOp(Op):
    """`nl.exp(t)`, `nl.add(a, b)`: the operator called on tiles runs as a language-level op (new SBUF tile).

    Defined here rather than on `Op` so that `ops` stays below `isa` and `language` (no import cycle).
    """

    def __call__(self, *args: Any, **kwargs: Any) -> NkiTensor:
        return _apply_op(self, *args, **kwargs)


_LANGUAGE_OPS = {
    name: LanguageOp(**{f.name: getattr(op, f.name) for f in fields(Op)})
    for name, op in {**UNARY, **BINARY}.items()
}


def __getattr__(name: str) -> Any:
    if name in _LANGUAGE_OPS:
        return _LANGUAGE_OPS[name]
    raise AttributeError(f"nki.language has no attribute {name!r} in the Neuron Studio interpreter")
