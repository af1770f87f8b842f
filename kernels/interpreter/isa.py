"""`nki.isa` subset: instructions with explicit `dst` first, executed with numpy and recorded per engine.

Rules enforced here (see `NkiRuleError.rule`): matmul operands in SBUF ("matmul_operand_buffer"), matmul result
in PSUM ("matmul_dst_buffer"), contraction <= 128 ("matmul_contraction"), stationary free <= 128
("matmul_stationary_fmax"), moving free <= 512 ("matmul_moving_fmax"), DMA only between HBM and SBUF
("dma_buffers"), compute engines read/write on-chip memory only ("engine_operand_buffer"), shapes agree
("shape_mismatch").
"""
from __future__ import annotations

import enum
import functools
from typing import Any, Sequence

import numpy as np

from . import dtypes as _dt
from .access import contiguous_runs, partition_range, span
from .errors import NkiRuleError
from .indexing import align_mask
from .ops import BINARY, NUMPY_REDUCERS, UNARY, Op
from .state import current, kernel_frame, kernel_line
from .tensor import HBM_BUFFERS, NkiTensor, describe
from .trace import Instruction

__all__ = ["engine", "dma_copy", "dma_transpose", "nc_matmul", "nc_transpose", "tensor_tensor", "tensor_scalar",
           "activation", "tensor_reduce", "tensor_copy", "reciprocal", "memset", "affine_select", "record",
           "copy_engines"]

class engine(enum.Enum):
    """Engine selector accepted by instructions that can run on several engines."""

    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    sync = "sync"
    unknown = "unknown"


class reduce_cmd(enum.Enum):
    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"


def _fail(rule: str, detail: str, t: NkiTensor | None = None) -> None:
    raise NkiRuleError(rule, detail, tensor=describe(t) if t is not None else "",
                       kernel_line=kernel_line(kernel_frame(2)))


def record(engine_name: str, opcode: str, operands: Sequence[NkiTensor], dtype: str, elements: int, flops: int,
           nbytes: int = 0, cycles_hint: int = 0, also_reads: Sequence[Any] = (),
           also_writes: Sequence[Any] = (), alternatives: tuple[str, ...] = ()) -> None:
    """Append one instruction to the current trace, attributed to the kernel source line that issued it.

    `operands[0]` is the destination, the rest are sources (every ISA call passes them in that order);
    `also_reads`/`also_writes` add tiles that are not shape-bearing operands (per-partition scalars, reduce
    results); non-tile entries are ignored. `alternatives`: other engines the compiler may run it on (an
    instruction issued without an engine); the kernel model picks the one that finishes it first."""
    frame = kernel_frame(2)
    st = current()
    ids = [st.buffer_id(t._alloc) for t in operands]
    more_r = [t for t in also_reads if isinstance(t, NkiTensor)]
    more_w = [t for t in also_writes if isinstance(t, NkiTensor)]
    extra_r = tuple(st.buffer_id(t._alloc) for t in more_r)
    extra_w = tuple(st.buffer_id(t._alloc) for t in more_w)
    read_spans = tuple(span(t, b) for t, b in zip([*operands[1:], *more_r], (*ids[1:], *extra_r)))
    write_spans = tuple(span(t, b) for t, b in zip([*operands[:1], *more_w], (*ids[:1], *extra_w)))
    partitions, descriptors = (0, 0), 0
    if engine_name == "dma" and operands:
        partitions, descriptors = _dma_geometry(operands[0], operands[1] if len(operands) > 1 else operands[0])
    st.record(Instruction(
        engine=engine_name, opcode=opcode, shapes=tuple(t.shape for t in operands), dtype=dtype,
        elements=int(elements), flops=int(flops), bytes=int(nbytes),
        file=frame.f_code.co_filename if frame is not None else "", line=frame.f_lineno if frame else 0,
        cycles_hint=int(cycles_hint), reads=tuple(ids[1:]) + extra_r, writes=tuple(ids[:1]) + extra_w,
        read_spans=read_spans, write_spans=write_spans, partitions=partitions, descriptors=descriptors,
        alternatives=tuple(e for e in alternatives if e != engine_name)))


def _dma_geometry(dst: NkiTensor, src: NkiTensor) -> tuple[tuple[int, int], int]:
    """(SBUF partitions, descriptors) of a transfer: the engines follow its on-chip side's partitions (all 128
    for HBM->HBM), the descriptors are the contiguous runs of its HBM side (of the source for SBUF->SBUF)."""
    on_chip = dst if dst.buffer not in HBM_BUFFERS else (src if src.buffer not in HBM_BUFFERS else None)
    off_chip = src if src.buffer in HBM_BUFFERS else (dst if dst.buffer in HBM_BUFFERS else src)
    parts = partition_range(on_chip) if on_chip is not None else (0, int(current().spec.partition_max))
    runs = contiguous_runs(off_chip)
    if off_chip.buffer not in HBM_BUFFERS:  # SBUF->SBUF: a run never crosses a partition
        runs = max(runs, partition_range(off_chip)[1])
    return parts, max(1, runs)


def _on_chip(*tensors: NkiTensor) -> None:
    for t in tensors:
        if not isinstance(t, NkiTensor):
            _fail("operand_type", f"expected an NKI tile, got {type(t).__name__}")
        if t.buffer in HBM_BUFFERS:
            _fail("engine_operand_buffer", "compute engines read and write SBUF/PSUM only; DMA HBM data "
                  "into SBUF first", t)


def copy_engines(eng: Any, *tiles: NkiTensor) -> tuple[str, ...]:
    """The engines a copy issued without an engine may run on: nisa.tensor_copy's default engine.unknown lets
    the compiler select by engine workload among Vector, Scalar (NeuronCore-v3+) and GpSimd, which cannot
    access PSUM (nki.isa.tensor_copy API reference); () when the kernel names the engine."""
    if _engine(eng, "") != "":
        return ()
    engines = ["vector"]
    if current().chip != "trn1":
        engines.append("scalar")
    if not any(isinstance(t, NkiTensor) and t.buffer == "psum" for t in tiles):
        engines.append("gpsimd")
    return tuple(engines)


def _engine(eng: Any, default: str) -> str:
    if eng is None:
        return default
    name = eng.value if isinstance(eng, engine) else str(eng)
    return default if name in ("unknown", "") else name


def _store(dst: NkiTensor, value: np.ndarray, src_dtype: str | None = None) -> None:
    value = np.asarray(value)
    if value.shape != dst.shape:
        if value.size != int(np.prod(dst.shape)):
            _fail("shape_mismatch", f"result shape {list(value.shape)} does not fit dst shape {list(dst.shape)}",
                  dst)
        value = value.reshape(dst.shape)
    dst.write(value, src_dtype)


def _free(t: NkiTensor) -> int:
    return int(np.prod(t.shape[1:], dtype=np.int64)) if t.ndim > 1 else 1


def _operand(x: Any, partitions: int) -> np.ndarray | float:
    """A scalar operand: Python number, or a per-partition [P, 1] vector broadcast along the free dims."""
    if isinstance(x, NkiTensor):
        _on_chip(x)
        if x.shape[0] != partitions or _free(x) != 1:
            _fail("shape_mismatch", f"scalar operand must be a number or a [{partitions}, 1] tile", x)
        return x.read().reshape((partitions,) + (1,) * 1)
    return float(x)


def _bcast(v: np.ndarray | float, ndim: int) -> np.ndarray | float:
    if isinstance(v, np.ndarray) and ndim > 2:
        return v.reshape(v.shape[0], *([1] * (ndim - 1)))
    return v


def _binary(op: Any) -> Op:
    if isinstance(op, Op) and op.arity == 2:
        return op
    name = getattr(op, "name", None) or getattr(op, "__name__", "")
    if name in BINARY:
        return BINARY[name]
    raise NkiRuleError("unsupported_op", f"{op!r} is not a binary operator", kernel_line=kernel_line(kernel_frame(2)))


def _reducer(op: Any) -> Any:
    """The reduction of `op`: an NKI operator with one, a numpy ufunc, or a numpy reduction function
    (np.max, np.sum, ...: AWS's kernels pass `op=np.max` to tensor_reduce)."""
    red = getattr(op, "reduce", None)
    if red is None and str(getattr(op, "__module__", "")).startswith("numpy"):
        name = NUMPY_REDUCERS.get(getattr(op, "__name__", ""))
        red = BINARY[name].reduce if name else None
    if red is None:
        raise NkiRuleError("unsupported_op", f"{op!r} cannot reduce", kernel_line=kernel_line(kernel_frame(2)))
    return red


def _maskable(fn: Any) -> Any:
    """Let an instruction take `mask=` (an index-expression predicate over dst, as AWS's kernels pass it): only
    the masked elements of dst are written; the instruction is charged for its whole tile."""

    @functools.wraps(fn)
    def run(dst: NkiTensor, *args: Any, mask: Any = None, **kwargs: Any) -> Any:
        if mask is None:
            return fn(dst, *args, **kwargs)
        keep = align_mask(mask, dst.shape)
        before = np.array(dst.data, copy=True)
        out = fn(dst, *args, **kwargs)
        kept = np.where(keep, dst.data, before)
        if dst._scatter is not None:
            dst.write(kept, dst.dtype)
        else:
            dst.data[...] = kept
        return out

    return run


# -- DMA ----------------------------------------------------------------------------------------------------
def dma_copy(dst: NkiTensor, src: NkiTensor, mask: Any = None, transpose: bool = False, **_: Any) -> None:
    """Copy between HBM and SBUF on a DMA queue (casts to dst dtype); with `mask`, only the masked elements."""
    kinds = {("hbm" if t.buffer in HBM_BUFFERS else t.buffer) for t in (dst, src)}
    if kinds != {"hbm", "sbuf"} and not (src.buffer in HBM_BUFFERS and dst.buffer in HBM_BUFFERS):
        _fail("dma_buffers", f"DMA moves data between HBM and SBUF only, got {src.buffer} -> {dst.buffer}",
              src if src.buffer not in ("sbuf",) + HBM_BUFFERS else dst)
    if src.data.size != dst.data.size:
        _fail("shape_mismatch", f"dma src shape {list(src.shape)} vs dst shape {list(dst.shape)}", dst)
    value = src.read(mask)
    if transpose:
        value = value.T
        mask = None if mask is None else np.asarray(mask).T
    if value.shape != dst.shape:
        value = value.reshape(dst.shape)
        if mask is not None and np.ndim(mask) == len(src.shape) and src.shape != dst.shape:
            mask = align_mask(mask, src.shape).reshape(dst.shape)
    dst.write(value, src.dtype, mask=mask)
    n = src.data.size if mask is None else int(align_mask(mask, dst.shape).sum())
    record("dma", "dma_copy", (dst, src), src.dtype, n, 0, n * _dt.itemsize(src.dtype))


_DMA_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def dma_transpose(dst: NkiTensor, src: NkiTensor, axes: Any = None, **_: Any) -> None:
    """Transpose on the DMA engines (Trainium2+): HBM->SBUF or SBUF->SBUF; permutation [1, 0] for 2-d tiles,
    [2, 1, 0] for 3-d, [3, 1, 2, 0] for 4-d (nki.isa.dma_transpose), or `axes`. Modeled at the documented
    fraction of the DMA rate (90% from HBM, 50% SBUF->SBUF on Trn2)."""
    if dst.buffer != "sbuf" or (src.buffer != "sbuf" and src.buffer not in HBM_BUFFERS):
        _fail("dma_buffers", f"dma_transpose writes SBUF from HBM or SBUF, got {src.buffer} -> {dst.buffer}", dst)
    if current().chip == "trn1":
        _fail("dma_transpose_chip", "DMA transpose needs Trainium2 or later (trainium2_arch.rst)", src)
    perm = tuple(axes) if axes is not None else _DMA_TRANSPOSE_AXES.get(src.ndim)
    if perm is None:
        _fail("shape_mismatch", f"dma_transpose takes 2-4 d tiles, got {src.ndim}-d", src)
    value = np.transpose(src.read(), perm)
    if value.shape != dst.shape:
        _fail("shape_mismatch", f"dma_transpose of {list(src.shape)} is {list(value.shape)}, dst is "
              f"{list(dst.shape)}", dst)
    dst.write(value, src.dtype)
    n = src.data.size
    kind = "sbuf" if src.buffer == "sbuf" else "hbm"
    record("dma", f"dma_transpose.{kind}", (dst, src), src.dtype, n, 0, n * _dt.itemsize(src.dtype))


# -- Tensor engine ------------------------------------------------------------------------------------------
@_maskable
def nc_matmul(dst: NkiTensor, stationary: NkiTensor, moving: NkiTensor, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, accumulate: bool | None = None,
              tile_position: Any = (), tile_size: Any = (), perf_mode: Any = None, name: Any = None) -> None:
    """dst[M, N] (+)= stationary[K, M].T @ moving[K, N] on the Tensor Engine, fp32 accumulation in PSUM.

    `accumulate=None` (the default) and `True` add into dst (zero it with `nl.zeros(..., buffer=nl.psum)`);
    `False` overwrites.
    """
    for t, role in ((stationary, "stationary"), (moving, "moving")):
        if t.buffer != "sbuf":
            _fail("matmul_operand_buffer", f"matmul {role} operand must be in SBUF, found in {t.buffer}", t)
    if dst.buffer != "psum":
        _fail("matmul_dst_buffer", f"matmul result must be written to PSUM, not {dst.buffer}", dst)
    if stationary.ndim != 2 or moving.ndim != 2:
        _fail("matmul_rank", "matmul operands must be 2-D [partition, free] tiles", stationary)
    k, m = stationary.shape
    k2, n = moving.shape
    if k != k2:
        _fail("shape_mismatch", f"contraction (partition) sizes differ: stationary {k} vs moving {k2}", moving)
    spec = current().spec
    if k > (spec.partition_max or 0):
        _fail("matmul_contraction", f"contraction dim {k} exceeds {spec.partition_max}", stationary)
    if m > (spec.gemm_stationary_fmax or 0):
        _fail("matmul_stationary_fmax", f"stationary free size {m} exceeds gemm_stationary_fmax="
              f"{spec.gemm_stationary_fmax}", stationary)
    if n > (spec.gemm_moving_fmax or 0):
        _fail("matmul_moving_fmax", f"moving free size {n} exceeds gemm_moving_fmax={spec.gemm_moving_fmax}",
              moving)
    if dst.shape != (m, n):
        _fail("shape_mismatch", f"matmul dst shape {list(dst.shape)} != [{m}, {n}]", dst)
    prod = stationary.read().T.astype(np.float32, copy=False) @ moving.read().astype(np.float32, copy=False)
    if accumulate is None:  # open an accumulation group where none is open, else accumulate into it
        old = dst.read()
        prod = np.where(dst._acc, old + prod, prod) if dst._acc is not None else prod
    elif accumulate:
        prod = dst.read() + prod
    dst.write(prod, "float32", matmul=True)
    dt = "float32" if "float32" in (stationary.dtype, moving.dtype) else moving.dtype
    record("tensor", "nc_matmul", (dst, stationary, moving), dt, k * n, 2 * k * m * n, cycles_hint=n)


@_maskable
def nc_transpose(dst: NkiTensor, data: NkiTensor, engine: Any = None, name: Any = None) -> None:
    """dst[F, P] = data[P, F].T; on the Tensor Engine (identity matmul) the result lands in PSUM."""
    _on_chip(dst, data)
    if data.ndim != 2:
        _fail("matmul_rank", "nc_transpose takes a 2-D tile", data)
    p, f = data.shape
    eng = _engine(engine, "tensor")
    if eng == "tensor":
        fmax = current().spec.gemm_stationary_fmax or 0
        if f > fmax:
            _fail("transpose_fmax", f"transpose free size {f} exceeds {fmax}", data)
        if dst.buffer != "psum":
            _fail("matmul_dst_buffer", "Tensor Engine transpose writes PSUM", dst)
        if data.buffer != "sbuf":
            _fail("matmul_operand_buffer", "Tensor Engine transpose reads SBUF", data)
    if dst.shape != (f, p):
        _fail("shape_mismatch", f"transpose dst shape {list(dst.shape)} != [{f}, {p}]", dst)
    _store(dst, data.read().T, data.dtype)
    record(eng, "nc_transpose", (dst, data), data.dtype, p * f, 0, cycles_hint=f)


# -- Vector / Scalar / GpSimd -------------------------------------------------------------------------------
@_maskable
def tensor_tensor(dst: NkiTensor, data1: NkiTensor, data2: NkiTensor, op: Any, engine: Any = None,
                  name: Any = None) -> None:
    """dst = op(data1, data2) element-wise (same shapes) on the Vector Engine."""
    _on_chip(dst, data1, data2)
    o = _binary(op)
    if data1.shape != data2.shape:
        _fail("shape_mismatch", f"tensor_tensor operands differ: {list(data1.shape)} vs {list(data2.shape)}",
              data2)
    with np.errstate(all="ignore"):
        _store(dst, o.fn(data1.read(), data2.read()))
    n = data1.data.size
    record(_engine(engine, "vector"), f"tensor_tensor.{o.name}", (dst, data1, data2), data1.dtype, n, n)


@_maskable
def tensor_scalar(dst: NkiTensor, data: NkiTensor, op0: Any, operand0: Any, reverse0: bool = False,
                  op1: Any = None, operand1: Any = None, reverse1: bool = False, engine: Any = None,
                  name: Any = None) -> None:
    """dst = (data op0 operand0) op1 operand1; operands are numbers or per-partition [P, 1] vectors."""
    _on_chip(dst, data)
    p = data.shape[0]
    x = data.read().astype(np.float32, copy=False)
    with np.errstate(all="ignore"):
        for op, operand, rev in ((op0, operand0, reverse0), (op1, operand1, reverse1)):
            if op is None:
                continue
            o = _binary(op)
            v = _bcast(_operand(operand, p), x.ndim)
            x = o.fn(v, x) if rev else o.fn(x, v)
    _store(dst, x)
    n = data.data.size
    nops = 1 + (op1 is not None)
    record(_engine(engine, "vector"), "tensor_scalar", (dst, data), data.dtype, n, n * nops,
           also_reads=(operand0, operand1))


@_maskable
def activation(dst: NkiTensor, op: Any, data: NkiTensor, bias: Any = None, scale: Any = 1.0,
               reduce_op: Any = None, reduce_res: NkiTensor | None = None, reduce_cmd: Any = None,
               engine: Any = None, name: Any = None) -> None:
    """dst = op(data * scale + bias) on the Scalar Engine; optional sum of the result along the free dims."""
    _on_chip(dst, data)
    fn = op.fn if isinstance(op, Op) else UNARY[getattr(op, "name", getattr(op, "__name__", ""))].fn
    p = data.shape[0]
    x = data.read().astype(np.float32, copy=False)
    with np.errstate(all="ignore"):
        s = _bcast(_operand(scale, p), x.ndim)
        if not (isinstance(s, float) and s == 1.0):
            x = x * s
        if bias is not None:
            x = x + _bcast(_operand(bias, p), x.ndim)
        y = fn(x)
    _store(dst, y)
    cmd = getattr(reduce_cmd, "value", reduce_cmd)
    if cmd is None:  # the studio's kernels: a reduction with reduce_res resets the registers first
        cmd = "reset_reduce" if reduce_op is not None else "idle"
    if cmd in ("reduce", "reset_reduce") and reduce_op is None:
        _fail("activation_reduce", f"reduce_cmd={cmd} needs reduce_op", dst)
    regs = current().scalar_registers(p)
    if cmd in ("reset", "reset_reduce"):
        regs[:p] = 0.0
    if cmd in ("reduce", "reset_reduce"):
        red = _reducer(reduce_op)
        r = red(np.asarray(y, np.float32).reshape(p, -1), axis=1)
        regs[:p] = red(np.stack([regs[:p], r]), axis=0)
    if reduce_res is not None:  # without it the sum stays in the registers for a later instruction to read
        _on_chip(reduce_res)
        _store(reduce_res, regs[:p].reshape(reduce_res.shape) if reduce_res.data.size == p else regs[:p])
    n = data.data.size
    record(_engine(engine, "scalar"), f"activation.{getattr(op, 'name', op)}", (dst, data), data.dtype, n,
           n * (2 + (reduce_op is not None)), also_reads=(bias, scale), also_writes=(reduce_res,))


@_maskable
def tensor_reduce(dst: NkiTensor, op: Any, data: NkiTensor, axis: int | Sequence[int], negate: bool = False,
                  keepdims: bool = False, name: Any = None) -> None:
    """Reduce along free axes on the Vector Engine (`negate` flips the sign of the result)."""
    _on_chip(dst, data)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if 0 in axes:
        _fail("reduce_partition_axis", "tensor_reduce reduces free axes only (use tensor_partition_reduce)", data)
    red = _reducer(op)
    r = red(data.read().astype(np.float32, copy=False), axis=axes, keepdims=keepdims)
    _store(dst, -r if negate else r)
    n = data.data.size
    record("vector", f"tensor_reduce.{getattr(op, 'name', op)}", (dst, data), data.dtype, n, n)


@_maskable
def tensor_copy(dst: NkiTensor, src: NkiTensor, engine: Any = None, dtype: Any = None, name: Any = None) -> None:
    """On-chip copy (PSUM -> SBUF evacuation, dtype casts) on the Vector Engine by default; `dtype` is the
    engine's output type (values are rounded to it, then stored in dst's dtype)."""
    _on_chip(dst, src)
    if src.data.size != dst.data.size:
        _fail("shape_mismatch", f"tensor_copy src {list(src.shape)} vs dst {list(dst.shape)}", dst)
    value = src.read()
    if dtype is not None:
        value = _dt.round_to(value, _dt.normalize_dtype(dtype))
    _store(dst, value, src.dtype if dtype is None else None)
    record(_engine(engine, "vector"), "tensor_copy", (dst, src), src.dtype, src.data.size, 0,
           alternatives=copy_engines(engine, dst, src))


@_maskable
def reciprocal(dst: NkiTensor, data: NkiTensor, name: Any = None) -> None:
    """dst = 1 / data on the Vector Engine."""
    _on_chip(dst, data)
    with np.errstate(all="ignore"):
        _store(dst, 1.0 / data.read().astype(np.float32, copy=False))
    record("vector", "reciprocal", (dst, data), data.dtype, data.data.size, data.data.size)


@_maskable
def memset(dst: NkiTensor, value: float, engine: Any = None, name: Any = None) -> None:
    """Fill a tile with a constant."""
    _on_chip(dst)
    _store(dst, np.full(dst.shape, value, np.float32))
    record(_engine(engine, "vector"), "memset", (dst,), dst.dtype, dst.data.size, 0)


@_maskable
def affine_select(dst: NkiTensor, pattern: Sequence[Sequence[int]], offset: int, channel_multiplier: int,
                  on_true_tile: NkiTensor, on_false_value: float, cmp_op: Any = None, name: Any = None) -> None:
    """dst = on_true_tile where cmp_op(offset + p*channel_multiplier + sum(step_i*idx_i), 0) else value (GpSimd).

    Typical use: causal masks (pattern [[-1, F]], channel_multiplier 1, cmp_op nl.greater_equal).
    """
    _on_chip(dst, on_true_tile)
    cmp = _binary(cmp_op if cmp_op is not None else BINARY["equal"])
    p = dst.shape[0]
    expr = np.full((p, 1), float(offset)) + np.arange(p, dtype=np.float64)[:, None] * channel_multiplier
    free = np.zeros((1,), np.float64)
    for step, num in pattern:
        free = (free[:, None] + np.arange(num, dtype=np.float64)[None, :] * step).reshape(-1)
    if free.size != _free(dst):
        _fail("shape_mismatch", f"affine pattern covers {free.size} elements/partition, dst has {_free(dst)}",
              dst)
    pred = cmp.fn(expr + free[None, :], 0.0).astype(bool)
    vals = np.where(pred, on_true_tile.read().reshape(p, -1), np.float32(on_false_value))
    _store(dst, vals)
    record("gpsimd", "affine_select", (dst, on_true_tile), on_true_tile.dtype, dst.data.size, dst.data.size)
