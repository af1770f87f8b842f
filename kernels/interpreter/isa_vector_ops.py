"""`nki.isa` instructions beyond the core set in `isa.py` (dst-first, as in the current NKI release): scans,
fused tensor-scalar reductions, scalar-tensor-tensor, activation with reduction, partition reductions, iota
and dropout. Executed with numpy, recorded on the engine that runs them."""
from __future__ import annotations

from typing import Any

import numpy as np

from .isa import (_binary, _bcast, _engine, _fail, _maskable, _on_chip, _operand, _reducer, _store, activation, record,
                  reduce_cmd)
from .state import current
from .tensor import NkiTensor

__all__ = ["tensor_tensor_scan", "scalar_tensor_tensor", "tensor_scalar_reduce", "activation_reduce",
           "tensor_partition_reduce", "iota", "dropout", "topk"]


def _flat(t: NkiTensor) -> np.ndarray:
    return np.asarray(t.read(), np.float32).reshape(t.shape[0], -1)


@_maskable
def tensor_tensor_scan(dst: NkiTensor, data0: NkiTensor, data1: NkiTensor, initial: Any, op0: Any, op1: Any,
                       reverse0: bool = False, reverse1: bool = False, name: Any = None) -> None:
    """dst[:, i] = op1(op0(data0[:, i], dst[:, i-1]), data1[:, i]) along the free axis, dst[:, -1] = initial."""
    _on_chip(dst, data0, data1)
    if data0.buffer == "psum" and data1.buffer == "psum":
        _fail("scan_operands", "tensor_tensor_scan data0 and data1 cannot both be in PSUM", data1)
    o0, o1 = _binary(op0), _binary(op1)
    a, b = _flat(data0), _flat(data1)
    if a.shape != b.shape:
        _fail("shape_mismatch", f"scan operands differ: {list(data0.shape)} vs {list(data1.shape)}", data1)
    p, n = a.shape
    prev = np.broadcast_to(np.asarray(_operand(initial, p), np.float32).reshape(-1), (p,)).copy() \
        if not isinstance(initial, (int, float)) else np.full(p, float(initial), np.float32)
    out = np.empty_like(a)
    f0, f1 = o0.fn, o1.fn
    with np.errstate(all="ignore"):
        for i in range(n):
            x = f0(prev, a[:, i]) if reverse0 else f0(a[:, i], prev)
            prev = f1(b[:, i], x) if reverse1 else f1(x, b[:, i])
            out[:, i] = prev
    _store(dst, out.reshape(dst.shape) if out.size == dst.data.size else out)
    record("vector", "tensor_tensor_scan", (dst, data0, data1), data0.dtype, a.size, 2 * a.size)


@_maskable
def scalar_tensor_tensor(dst: NkiTensor, data: NkiTensor, op0: Any, operand0: Any, op1: Any, operand1: NkiTensor,
                         reverse0: bool = False, reverse1: bool = False, engine: Any = None,
                         name: Any = None) -> None:
    """dst = (data op0 operand0) op1 operand1, operand0 a scalar / [P, 1] vector, operand1 a tile."""
    _on_chip(dst, data, operand1)
    p = data.shape[0]
    x = np.asarray(data.read(), np.float32)
    with np.errstate(all="ignore"):
        v = _bcast(_operand(operand0, p), x.ndim)
        f0 = _binary(op0).fn
        x = f0(v, x) if reverse0 else f0(x, v)
        t = np.asarray(operand1.read(), np.float32).reshape(x.shape)
        f1 = _binary(op1).fn
        x = f1(t, x) if reverse1 else f1(x, t)
    _store(dst, x)
    n = data.data.size
    record(_engine(engine, "vector"), "scalar_tensor_tensor", (dst, data, operand1), data.dtype, n, 2 * n)


@_maskable
def tensor_scalar_reduce(dst: NkiTensor, data: NkiTensor, op0: Any, operand0: Any, reduce_op: Any,
                         reduce_res: NkiTensor, reverse0: bool = False, name: Any = None) -> None:
    """dst = data op0 operand0, and reduce_res[P, 1] = reduce_op of dst along the free axes (Vector Engine)."""
    _on_chip(dst, data, reduce_res)
    p = data.shape[0]
    x = np.asarray(data.read(), np.float32)
    with np.errstate(all="ignore"):
        v = _bcast(_operand(operand0, p), x.ndim)
        f0 = _binary(op0).fn
        y = f0(v, x) if reverse0 else f0(x, v)
        r = _reducer(reduce_op)(y.reshape(p, -1), axis=1)
    _store(dst, y)
    _store(reduce_res, r.reshape(reduce_res.shape) if r.size == reduce_res.data.size else r)
    n = data.data.size
    record("vector", "tensor_scalar_reduce", (dst, data), data.dtype, n, 2 * n)


@_maskable
def activation_reduce(dst: NkiTensor, op: Any, data: NkiTensor, reduce_op: Any, reduce_res: NkiTensor,
                      bias: Any = None, scale: Any = 1.0, name: Any = None) -> None:
    """`activation` with reduce_cmd=reset_reduce: reduce_res = sum of the activated values per partition."""
    activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
               reduce_cmd=reduce_cmd.reset_reduce)


@_maskable
def tensor_partition_reduce(dst: NkiTensor, op: Any, data: NkiTensor, name: Any = None) -> None:
    """Reduce across partitions: dst[1, F] = op over axis 0 of data[P, F] (GpSimd Engine)."""
    _on_chip(dst, data)
    r = _reducer(op)(np.asarray(data.read(), np.float32), axis=0)
    _store(dst, r.reshape(dst.shape) if r.size == dst.data.size else r)
    record("gpsimd", "tensor_partition_reduce", (dst, data), data.dtype, data.data.size, data.data.size)


@_maskable
def iota(dst: NkiTensor, expr: Any, offset: int = 0, channel_multiplier: int = 0, name: Any = None) -> None:
    """dst = an index expression's values (`nl.arange` / affine expression), plus offset (GpSimd Engine).

    `expr` is an index expression broadcastable to dst (e.g. `nl.arange(128)[:, None] * 2 + nl.arange(64)`),
    or an affine pattern [[step, num], ...] with `channel_multiplier` per partition.
    """
    _on_chip(dst)
    if isinstance(expr, np.ndarray):
        vals = np.broadcast_to(np.asarray(expr, np.float64) + offset, dst.shape)
    else:
        p = dst.shape[0]
        free = np.zeros((1,), np.float64)
        for step, num in expr:
            free = (free[:, None] + np.arange(num, dtype=np.float64)[None, :] * step).reshape(-1)
        vals = offset + np.arange(p, dtype=np.float64)[:, None] * channel_multiplier + free[None, :]
        if vals.size != dst.data.size:
            _fail("shape_mismatch", f"iota pattern covers {vals.size} elements, dst has {dst.data.size}", dst)
        vals = vals.reshape(dst.shape)
    _store(dst, vals)
    record("gpsimd", "iota", (dst,), dst.dtype, dst.data.size, 0)


@_maskable
def dropout(dst: NkiTensor, data: NkiTensor, prob: Any, name: Any = None) -> None:
    """dst = data with each element zeroed with probability `prob` (scalar or [P, 1] vector), kept ones scaled
    by nothing (NKI's dropout does not rescale). Random bits come from the kernel call's seeded generator."""
    _on_chip(dst, data)
    p = data.shape[0]
    x = np.asarray(data.read(), np.float32)
    rate = _bcast(_operand(prob, p), x.ndim)
    keep = current().rng.random(x.shape, dtype=np.float32) >= rate
    _store(dst, np.where(keep, x, np.float32(0)))
    record("vector", "dropout", (dst, data), data.dtype, x.size, x.size)


def topk(val_dst: NkiTensor, idx_dst: NkiTensor, src: NkiTensor, n: int, name: Any = None) -> None:
    """NKI 0.6's GpSimd top-K: each group of 16 partitions holds one "snake" of `n` BF16 elements (element e at
    partition e % 16, column e // 16); every partition of the group gets the K = val_dst.shape[1] largest values in
    ascending order and their 0-based snake indices (uint32). Cost per the API reference: 4n + K GpSimd cycles
    per partition."""
    _on_chip(val_dst, idx_dst, src)
    p, cols = src.shape[0], int(np.prod(src.shape[1:], dtype=np.int64))
    k = int(np.prod(val_dst.shape[1:], dtype=np.int64))
    if p % 16 or not 8 <= n < 65536 or not 1 <= k <= n or cols * 16 < n:
        _fail("topk_shape", f"topk needs partitions a multiple of 16, 8 <= n < 65536, 1 <= K <= n and "
              f"src free size >= ceil(n / 16); got {p} partitions, n={n}, K={k}, free size {cols}", src)
    if idx_dst.shape != val_dst.shape:
        _fail("shape_mismatch", f"topk idx_dst {list(idx_dst.shape)} != val_dst {list(val_dst.shape)}", idx_dst)
    x = src.read().astype(np.float32, copy=False).reshape(p // 16, 16, cols)
    snake = x.transpose(0, 2, 1).reshape(p // 16, cols * 16)[:, :n]        # element e = column e//16, row e%16
    order = np.argsort(snake, axis=1, kind="stable")[:, n - k:]           # the K largest, ascending
    vals = np.take_along_axis(snake, order, axis=1)
    _store(val_dst, np.repeat(vals, 16, axis=0))
    _store(idx_dst, np.repeat(order, 16, axis=0).astype(np.uint32))
    record("gpsimd", "topk", (val_dst, src), src.dtype, p * (4 * n + k), 0, also_writes=(idx_dst,))
