"""`neuronxcc.nki.isa`: the previous NKI release's instruction API, where each instruction returns its result
tile (`qk = nisa.nc_matmul(stationary, moving)`) instead of writing a `dst` argument.

Each function allocates the result where the hardware writes it (PSUM for Tensor Engine results, SBUF
otherwise) in the requested `dtype` and runs the current release's instruction on it. `mask=` limits which
result elements are written (the others stay uninitialised, as on the device); the instruction is charged for
its whole tile.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import isa as _isa
from . import isa_vector_ops as _vops
from .isa import engine, reduce_cmd
from .indexing import align_mask
from .tensor import NkiTensor, allocate, poison_value
from .unsupported import DOCUMENTED_ISA, module_getattr

__all__ = ["nc_matmul", "nc_transpose", "activation", "activation_reduce", "tensor_reduce", "tensor_tensor",
           "tensor_tensor_scan", "scalar_tensor_tensor", "tensor_scalar", "tensor_scalar_reduce", "tensor_copy",
           "tensor_partition_reduce", "reciprocal", "iota", "dropout", "affine_select", "memset", "dma_copy",
           "engine", "reduce_cmd", "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine",
           "dma_engine", "unknown_engine", "nc_version", "get_nc_version"]

tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
dma_engine = engine.sync
unknown_engine = engine.unknown


class nc_version:  # noqa: N801 - NKI name
    """NeuronCore generations (`nisa.get_nc_version()`)."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


_NC_OF_CHIP = {"trn1": nc_version.gen2, "trn2": nc_version.gen3, "trn3": nc_version.gen4}


def get_nc_version() -> int:
    """NeuronCore generation of the chip the kernel call models."""
    from .state import current

    return _NC_OF_CHIP.get(current().chip, nc_version.gen3)


def _masked(out: NkiTensor, mask: Any) -> NkiTensor:
    """`out` with the elements outside `mask` (an index-expression predicate) left unwritten (poisoned)."""
    if mask is not None:
        keep = align_mask(mask, out.shape)
        out.data[~keep] = poison_value(out.dtype)
        if out._acc is not None:
            out._acc[~keep] = False
    return out


def _new(shape: tuple[int, ...], dtype: Any, buffer: str = "sbuf") -> NkiTensor:
    return allocate(tuple(shape), dtype, buffer, depth=4)


def _reduced_shape(shape: tuple[int, ...], axis: Any, keepdims: bool) -> tuple[int, ...]:
    axes = {int(a) % len(shape) for a in ((axis,) if isinstance(axis, (int, np.integer)) else axis)}
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def nc_matmul(stationary: NkiTensor, moving: NkiTensor, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, mask: Any = None,
              **kwargs: Any) -> NkiTensor:
    """stationary[K, M].T @ moving[K, N] -> a new PSUM tile [M, N] (fp32)."""
    out = _new((stationary.shape[1] if stationary.ndim == 2 else 1, moving.shape[-1]), "float32", "psum")
    _isa.nc_matmul(out, stationary, moving, accumulate=False, **{k: v for k, v in kwargs.items()
                                                                 if k in ("tile_position", "tile_size")})
    out._from_matmul = True
    return _masked(out, mask)


def nc_transpose(data: NkiTensor, engine: Any = None, mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:
    """data[P, F] -> [F, P]: Tensor Engine into PSUM (default), or Vector Engine into SBUF (32x32 blocks)."""
    eng = _isa._engine(engine, "tensor")
    p, f = data.shape
    out = _new((f, p), "float32" if eng == "tensor" else (dtype or data.dtype), "psum" if eng == "tensor" else "sbuf")
    _isa.nc_transpose(out, data, engine=engine)
    return _masked(out, mask)


def activation(op: Any, data: NkiTensor, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None,
               reduce_res: NkiTensor | None = None, reduce_cmd: Any = None, mask: Any = None, dtype: Any = None,
               **_: Any) -> NkiTensor:
    """op(data * scale + bias) on the Scalar Engine -> a new SBUF tile."""
    out = _new(data.shape, dtype or data.dtype)
    _isa.activation(out, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                    reduce_cmd=reduce_cmd)
    return _masked(out, mask)


def activation_reduce(op: Any, data: NkiTensor, reduce_op: Any, reduce_res: NkiTensor, bias: Any = None,
                      scale: Any = 1.0, mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:
    out = _new(data.shape, dtype or data.dtype)
    _vops.activation_reduce(out, op, data, reduce_op=reduce_op, reduce_res=reduce_res, bias=bias, scale=scale)
    return _masked(out, mask)


def tensor_reduce(op: Any, data: NkiTensor, axis: Any, negate: bool = False, keepdims: bool = False,
                  mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:
    out = _new(_reduced_shape(data.shape, axis, keepdims), dtype or data.dtype)
    _isa.tensor_reduce(out, op, data, axis, negate=negate, keepdims=keepdims)
    return _masked(out, mask)


def tensor_tensor(data1: NkiTensor, data2: NkiTensor, op: Any, engine: Any = None, mask: Any = None,
                  dtype: Any = None, **_: Any) -> NkiTensor:
    out = _new(data1.shape, dtype or data1.dtype)
    _isa.tensor_tensor(out, data1, data2, op, engine=engine)
    return _masked(out, mask)


def tensor_tensor_scan(data0: NkiTensor, data1: NkiTensor, initial: Any, op0: Any, op1: Any,
                       reverse0: bool = False, reverse1: bool = False, mask: Any = None, dtype: Any = None,
                       **_: Any) -> NkiTensor:
    out = _new(data0.shape, dtype or data0.dtype)
    _vops.tensor_tensor_scan(out, data0, data1, initial, op0, op1, reverse0=reverse0, reverse1=reverse1)
    return _masked(out, mask)


def scalar_tensor_tensor(data: NkiTensor, op0: Any, operand0: Any, op1: Any, operand1: NkiTensor,
                         reverse0: bool = False, reverse1: bool = False, mask: Any = None, dtype: Any = None,
                         **_: Any) -> NkiTensor:
    out = _new(data.shape, dtype or data.dtype)
    _vops.scalar_tensor_tensor(out, data, op0, operand0, op1, operand1, reverse0=reverse0, reverse1=reverse1)
    return _masked(out, mask)


def tensor_scalar(data: NkiTensor, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None,
                  operand1: Any = None, reverse1: bool = False, engine: Any = None, mask: Any = None,
                  dtype: Any = None, **_: Any) -> NkiTensor:
    out = _new(data.shape, dtype or data.dtype)
    _isa.tensor_scalar(out, data, op0, operand0, reverse0=reverse0, op1=op1, operand1=operand1,
                       reverse1=reverse1, engine=engine)
    return _masked(out, mask)


def tensor_scalar_reduce(data: NkiTensor, op0: Any, operand0: Any, reduce_op: Any, reduce_res: NkiTensor,
                         reverse0: bool = False, mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:
    out = _new(data.shape, dtype or data.dtype)
    _vops.tensor_scalar_reduce(out, data, op0, operand0, reduce_op, reduce_res, reverse0=reverse0)
    return _masked(out, mask)


def tensor_copy(src: NkiTensor, engine: Any = None, mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:
    """A new SBUF tile with src's values (PSUM evacuation, casts)."""
    out = _new(src.shape, dtype or src.dtype)
    _isa.tensor_copy(out, src, engine=engine)
    return _masked(out, mask)


def tensor_partition_reduce(op: Any, data: NkiTensor, mask: Any = None, dtype: Any = None,
                            **_: Any) -> NkiTensor:
    out = _new((1,) + data.shape[1:], dtype or data.dtype)
    _vops.tensor_partition_reduce(out, op, data)
    return _masked(out, mask)


def reciprocal(data: NkiTensor, mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:
    out = _new(data.shape, dtype or data.dtype)
    _isa.reciprocal(out, data)
    return _masked(out, mask)


def iota(expr: Any, dtype: Any, mask: Any = None, **_: Any) -> NkiTensor:
    """A new tile holding the values of an index expression (shape = the expression's broadcast shape)."""
    out = _new(np.shape(expr), dtype)
    _vops.iota(out, expr)
    return _masked(out, mask)


def dropout(data: NkiTensor, prob: Any, mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:
    out = _new(data.shape, dtype or data.dtype)
    _vops.dropout(out, data, prob)
    return _masked(out, mask)


def affine_select(pred: Any, on_true_tile: NkiTensor, on_false_value: float, mask: Any = None,
                  dtype: Any = None, **_: Any) -> NkiTensor:
    """on_true_tile where the affine predicate (an index-expression comparison) holds, else on_false_value."""
    from .isa import record

    cond = np.broadcast_to(np.asarray(pred, bool), on_true_tile.shape)
    out = _new(on_true_tile.shape, dtype or on_true_tile.dtype)
    out.write(np.where(cond, on_true_tile.read(), np.float32(on_false_value)))
    record("gpsimd", "affine_select", (out, on_true_tile), on_true_tile.dtype, out.data.size, out.data.size)
    return _masked(out, mask)


def memset(shape: Any, value: float, dtype: Any, mask: Any = None, engine: Any = None, **_: Any) -> NkiTensor:
    out = _new(tuple(shape), dtype)
    _isa.memset(out, value, engine=engine)
    return _masked(out, mask)


def dma_copy(dst: NkiTensor, src: NkiTensor, mask: Any = None, dge_mode: Any = None, **_: Any) -> None:
    """Copy between HBM and SBUF (the one instruction that took `dst` in the previous release too)."""
    _isa.dma_copy(dst, src, mask=mask)


__getattr__ = module_getattr("neuronxcc.nki.isa", DOCUMENTED_ISA)
