"""Language-level tile math (`nl.add`, `a + b`, `nl.exp`, `nl.sum(t, axis=...)`, `nl.matmul`, `nl.transpose`,
`nl.where`, ...): each call allocates its SBUF (or PSUM) result and records one instruction on the engine the
compiler would use (activations on the Scalar Engine, arithmetic and reductions on the Vector Engine, matmul
and transpose on the Tensor Engine).

Every function takes NKI's `dtype=` (result dtype) and `mask=` (a boolean index expression: only the masked
elements are computed; the others keep their previous contents, which for a new tile means uninitialised).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import dtypes as _dt
from .errors import NkiRuleError
from .indexing import align_mask
from .isa import copy_engines, record
from .ops import BINARY, UNARY, Op
from .state import current, kernel_frame, kernel_line
from .tensor import HBM_BUFFERS, NkiTensor, allocate, describe

__all__ = ["elementwise", "apply_op", "reduce", "matmul", "transpose", "where", "copy", "assign", "accumulate",
           "loop_reduce", "expand_dims", "softmax", "as_op"]


def _fail(rule: str, detail: str, t: NkiTensor | None = None) -> None:
    raise NkiRuleError(rule, detail, tensor=describe(t) if t is not None else "",
                       kernel_line=kernel_line(kernel_frame(2)))


def _on_chip(t: NkiTensor) -> None:
    if t.buffer in HBM_BUFFERS:
        _fail("engine_operand_buffer", "compute engines read and write SBUF/PSUM only; load HBM data into SBUF "
              "first (nl.load)", t)


def _value(x: Any, mask: Any = None) -> np.ndarray | float:
    if isinstance(x, NkiTensor):
        _on_chip(x)
        return x.read(mask)
    if isinstance(x, (bool, int, float, np.number)):
        return x
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return x.item()
    raise TypeError(f"expected a tile or a number, got {type(x).__name__}")


def as_op(op: Any) -> Op:
    """Resolve `nl.add`, `np.add`, `nl.max` (a reduction) or an Op to the interpreter's Op."""
    if isinstance(op, Op):
        return op
    name = getattr(op, "name", None) or getattr(op, "__name__", "")
    alias = {"max": "maximum", "min": "minimum", "sum": "add", "true_divide": "divide"}
    name = alias.get(name, name)
    found = BINARY.get(name) or UNARY.get(name)
    if found is None:
        _fail("unsupported_op", f"{op!r} is not an operator the interpreter knows")
    return found


def _result(shape: tuple[int, ...], dtype: Any, like: NkiTensor | None, buffer: str = "sbuf") -> NkiTensor:
    dt = dtype if dtype is not None else (like.dtype if like is not None else "float32")
    return allocate(shape, dt, buffer, depth=4)


def elementwise(name: str, args: Sequence[Any], dtype: Any = None, mask: Any = None) -> NkiTensor:
    """Operator form (`a + b`, `2 * t`): the named binary op as a language-level instruction."""
    return apply_op(BINARY[name], *args, dtype=dtype, mask=mask)


def apply_op(op: Op, *args: Any, dtype: Any = None, mask: Any = None, **kwargs: Any) -> NkiTensor:
    """`nl.<op>(x[, y], dtype=, mask=)`: a new tile = op(args), broadcasting along free dims (numpy rules)."""
    unknown = set(kwargs) - {"name"}
    if unknown:
        raise NotImplementedError(f"nl.{op.name}: argument(s) {sorted(unknown)} are not supported by the "
                                  f"interpreter (at {kernel_line(kernel_frame(2))})")
    tiles = [a for a in args if isinstance(a, NkiTensor)]
    if not tiles:
        raise TypeError(f"nl.{op.name} needs at least one tile argument")
    values = _partition_first([_value(a, mask) for a in args])
    try:
        shape = np.broadcast_shapes(*(np.shape(v) for v in values))
    except ValueError:
        _fail("shape_mismatch", f"nl.{op.name} operands do not broadcast: "
              f"{[list(np.shape(v)) for v in values]}", tiles[-1])
    with np.errstate(all="ignore"):
        if op.arity == 1:
            y = op.fn(np.asarray(values[0], np.float32))
        else:
            if len(values) != 2:
                raise TypeError(f"nl.{op.name} takes two operands")
            a, b = (np.asarray(v, np.float32) if isinstance(v, np.ndarray) else v for v in values)
            y = op.fn(a, b)
    out = _result(tuple(shape), dtype, tiles[0])
    out.write(np.broadcast_to(y, shape), mask=mask)
    n = int(np.prod(shape))
    if op.arity == 1:
        record("scalar", f"activation.{op.name}", (out, *tiles), tiles[0].dtype, n, 2 * n)
    elif len(tiles) == 2:
        record("vector", f"tensor_tensor.{op.name}", (out, *tiles), tiles[0].dtype, n, n)
    else:
        record("vector", f"tensor_scalar.{op.name}", (out, tiles[0]), tiles[0].dtype, n, n)
    return out


def _partition_first(values: list) -> list:
    """Align operands on the partition axis (axis 0): a [P] or [P, 1] tile broadcasts along the free axes."""
    ndim = max(np.ndim(v) for v in values)
    return [v.reshape(v.shape + (1,) * (ndim - v.ndim)) if isinstance(v, np.ndarray) and 0 < v.ndim < ndim
            else v for v in values]


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(int(a) % ndim for a in axes)


def reduce(kind: str, x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None,
           negate: bool = False) -> NkiTensor:
    """`nl.sum/max/min/mean/prod/all/var(x, axis)`: reduce free axes into a new tile (Vector Engine)."""
    _on_chip(x)
    axes = _axes(axis, x.ndim)
    if 0 in axes:
        _fail("reduce_partition_axis", f"nl.{kind} reduces free axes only; axis 0 is the partition axis "
              "(transpose first, or use nisa.tensor_partition_reduce)", x)
    data = np.asarray(x.read(mask), np.float32)
    keep = None
    if mask is not None:
        keep = align_mask(mask, data.shape)
    fn = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean, "prod": np.prod, "all": np.all,
          "var": np.var}[kind]
    with np.errstate(all="ignore"):
        r = np.asarray(fn(data, axis=axes, keepdims=keepdims), np.float32)
    if negate:
        r = -r
    out = _result(r.shape, dtype, x)
    out_mask = None
    if keep is not None:
        out_mask = keep.any(axis=axes, keepdims=keepdims)
    out.write(r, mask=out_mask)
    n = data.size
    record("vector", f"tensor_reduce.{kind}", (out, x), x.dtype, n, n)
    return out


def matmul(x: NkiTensor, y: NkiTensor, transpose_x: bool = False, mask: Any = None, **_: Any) -> NkiTensor:
    """`nl.matmul(x, y, transpose_x)`: x @ y (or x.T @ y) on the Tensor Engine, result in PSUM (fp32).

    The contraction runs on the partition axis: x is [K, M] when `transpose_x`, else [M, K] (transposed on the
    Tensor Engine first, as the compiler does); y is [K, N]. K <= 128, M <= 128, N <= 512.
    """
    _on_chip(x)
    _on_chip(y)
    xs = np.asarray(x.read(mask), np.float32)
    ys = np.asarray(y.read(mask), np.float32)
    if xs.ndim != 2 or ys.ndim != 2:
        _fail("matmul_rank", "nl.matmul takes 2-D tiles", x)
    stationary = xs if transpose_x else xs.T
    k, m = stationary.shape
    k2, n = ys.shape
    if k != k2:
        _fail("shape_mismatch", f"nl.matmul contraction sizes differ: {k} vs {k2}", y)
    spec = current().spec
    if k > (spec.partition_max or 0):
        _fail("matmul_contraction", f"contraction dim {k} exceeds {spec.partition_max}", x)
    if m > (spec.gemm_stationary_fmax or 0):
        _fail("matmul_stationary_fmax", f"stationary free size {m} exceeds {spec.gemm_stationary_fmax}", x)
    if n > (spec.gemm_moving_fmax or 0):
        _fail("matmul_moving_fmax", f"moving free size {n} exceeds {spec.gemm_moving_fmax}", y)
    out = allocate((m, n), "float32", "psum", depth=3)
    out.write(stationary.T @ ys, mask=mask)
    dt = "float32" if "float32" in (x.dtype, y.dtype) else y.dtype
    if not transpose_x:
        record("tensor", "nc_transpose", (x,), x.dtype, k * m, 0, cycles_hint=k)
    record("tensor", "nc_matmul", (out, x, y), dt, k * n, 2 * k * m * n, cycles_hint=n)
    return out


def transpose(x: NkiTensor, dtype: Any = None, mask: Any = None, **_: Any) -> NkiTensor:
    """`nl.transpose(x)`: a [P, F] tile becomes [F, P] (Tensor Engine identity matmul, result in PSUM)."""
    _on_chip(x)
    data = x.read(mask)
    if data.ndim != 2:
        _fail("matmul_rank", "nl.transpose takes a 2-D tile", x)
    p, f = data.shape
    limit = current().spec.partition_max or 0
    if f > limit:
        _fail("transpose_fmax", f"transpose free size {f} exceeds {limit} (the result's partition dim)", x)
    out = allocate((f, p), "float32" if dtype is None else dtype, "psum" if dtype is None else "sbuf", depth=3)
    out.write(np.asarray(data, np.float32).T, mask=None if mask is None else np.asarray(mask).T)
    record("tensor", "nc_transpose", (out, x), x.dtype, p * f, 0, cycles_hint=f)
    return out


def where(condition: Any, x: Any, y: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """`nl.where(cond, x, y)`: elements of x where cond is true, else of y (Vector Engine select)."""
    tiles = [a for a in (condition, x, y) if isinstance(a, NkiTensor)]
    c = np.asarray(_value(condition, mask)).astype(bool) if isinstance(condition, NkiTensor) else \
        np.asarray(condition, bool)
    c, vx, vy = _partition_first([c, _value(x, mask), _value(y, mask)])
    shape = np.broadcast_shapes(np.shape(c), np.shape(vx), np.shape(vy))
    like = next((t for t in (x, y) if isinstance(t, NkiTensor)), tiles[0] if tiles else None)
    out = _result(tuple(shape), dtype, like)
    out.write(np.where(c, vx, vy), mask=mask)
    n = int(np.prod(shape))
    record("vector", "select", (out, *tiles), out.dtype, n, n)
    return out


def copy(x: NkiTensor, dtype: Any = None, mask: Any = None, **_: Any) -> NkiTensor:
    """`nl.copy(x)`: a new SBUF tile with x's values (cast to `dtype`)."""
    _on_chip(x)
    out = _result(x.shape, dtype, x)
    out.write(x.read(mask), x.dtype, mask=mask)
    record("vector", "tensor_copy", (out, x), x.dtype, x.data.size, 0, alternatives=copy_engines(None, out, x))
    return out


def expand_dims(x: NkiTensor, axis: int) -> NkiTensor:
    """`nl.expand_dims(x, axis)`: a view with a new size-1 axis."""
    return x.reshape(np.expand_dims(np.empty(x.shape, bool), axis).shape) if x._scatter is None else \
        _fail("reshape_non_contiguous", "expand_dims of an access pattern", x)  # type: ignore[func-returns-value]


def softmax(x: NkiTensor, axis: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """`nl.softmax(x, axis)`: exp(x - max) / sum(exp(x - max)) along free axes (Scalar + Vector engines)."""
    _on_chip(x)
    axes = _axes(axis, x.ndim)
    data = np.asarray(x.read(mask), np.float32)
    with np.errstate(all="ignore"):
        e = np.exp(data - data.max(axis=axes, keepdims=True))
        y = e / e.sum(axis=axes, keepdims=True)
    out = _result(x.shape, dtype, x)
    out.write(y, mask=mask)
    n = data.size
    record("vector", "tensor_reduce.max", (out, x), x.dtype, n, n)
    record("scalar", "activation.exp", (out, x), x.dtype, n, 2 * n)
    record("vector", "tensor_scalar.divide", (out, x), x.dtype, n, n)
    return out


def assign(target: NkiTensor, value: Any) -> None:
    """`tile[idx] = value`: write a tile (or number) into the addressed elements.

    A freshly computed right-hand side is written in place (the instruction that produced it wrote the
    target directly, as the compiler fuses it); anything else is an explicit copy instruction.
    """
    if isinstance(value, NkiTensor) and value._reduce_op is not None:
        op = value._reduce_op
        old = np.asarray(target.read(), np.float32)
        with np.errstate(all="ignore"):
            target.write(as_op(op).fn(old, np.asarray(value.read(), np.float32)))
        n = value.data.size
        record("vector", f"loop_reduce.{as_op(op).name}", (target, value), value.dtype, n, n)
        return
    if isinstance(value, NkiTensor):
        if target.buffer in HBM_BUFFERS or value.buffer in HBM_BUFFERS:
            _fail("dma_buffers", "assignment between HBM and on-chip memory: use nl.load / nl.store", target)
        data = value.read()
        if data.size != target.data.size and np.shape(data) != target.shape:
            try:
                data = np.broadcast_to(data, target.shape)
            except ValueError:
                _fail("shape_mismatch", f"cannot assign a {list(value.shape)} tile to {list(target.shape)}",
                      target)
        if np.shares_memory(target.data, value.data) and target._scatter is None:
            return  # `t[...] += x` already updated t in place
        target.write(data, value.dtype)
        if value.name is None and (target.buffer == value.buffer or value._from_matmul):
            _written_in_place(value)  # an unnamed fresh result: its instruction wrote the target directly
            if target.buffer == value.buffer:
                return
        record("vector", "tensor_copy", (target, value), value.dtype, target.data.size, 0,
               alternatives=copy_engines(None, target, value))
        return
    target.write(np.full(target.shape, _value(value), np.float32))
    record("vector", "memset", (target,), target.dtype, target.data.size, 0)


def accumulate(target: NkiTensor, value: Any, name: str) -> NkiTensor:
    """`t += x` (and -=, *=): in place on t. A PSUM tile += a fresh nc_matmul result is a matmul accumulation
    (no extra instruction, as on hardware); otherwise a Vector Engine tensor_tensor/tensor_scalar."""
    op = BINARY[name]
    v = _value(value)
    fused = isinstance(value, NkiTensor) and value._from_matmul and target.buffer == "psum" and name == "add"
    old = np.asarray(target.read(), np.float32)
    with np.errstate(all="ignore"):
        res = op.fn(old, v)
    if fused:  # the matmul accumulates into the PSUM tile: the first one of a group overwrites
        if target._acc is not None:
            res = np.where(target._acc, res, np.broadcast_to(v, res.shape))
        target.write(np.broadcast_to(res, target.shape), "float32", matmul=True)
    else:
        target.write(np.broadcast_to(res, target.shape))
    if fused and value.name is None:
        _written_in_place(value)
    if not fused:
        n = target.data.size
        kind = "tensor_tensor" if isinstance(value, NkiTensor) else "tensor_scalar"
        record("vector", f"{kind}.{name}", (target,), target.dtype, n, n)
    return target


def _written_in_place(value: NkiTensor) -> None:
    """The result tile never had storage of its own (the instruction wrote its consumer): no on-chip bytes."""
    rec = value._alloc.record
    if rec is not None:
        rec.block_bytes = 0


def loop_reduce(x: NkiTensor, op: Any, loop_indices: Any = None, dtype: Any = None, mask: Any = None,
                **_: Any) -> NkiTensor:
    """`dst[...] = nl.loop_reduce(x, op, loop_indices)`: dst = op(dst, x) on every iteration of the loops."""
    _on_chip(x)
    out = _result(x.shape, dtype, x)
    out.write(x.read(mask), x.dtype, mask=mask)  # the accumulate instruction is recorded by the assignment
    out._reduce_op = op
    return out
