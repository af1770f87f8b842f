"""`nki.language` for the interpreter (the same module serves `neuronxcc.nki.language`, the previous release):
buffers, dtypes, tile sizes, creation, load/store with masks, index expressions, loops, SPMD ids, math.

Language-level math (`nl.exp(t)`, `nl.add(a, b)`, `a + b`, `nl.sum(t, axis=1)`, `nl.matmul`) allocates its
result tile and records one instruction (see `lang_math`). Documented APIs the interpreter lacks raise
NotImplementedError naming the API and the kernel line.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Sequence

import numpy as np

from . import dtypes as _dt
from . import isa as _isa
from . import lang_math as _m
from . import registers as _isa_regs
from .errors import NkiRuleError
from .indexing import arange, ds, mgrid, par_dim
from .ops import BINARY, UNARY, Op
from .spmd import nc, spmd_dim
from .state import active_spec, current, kernel_frame, kernel_line
from .tensor import NkiTensor, allocate
from .unsupported import DOCUMENTED_LANGUAGE, unsupported

__all__ = [
    "sbuf", "psum", "hbm", "shared_hbm", "private_hbm", "tile_size", "par_dim",
    "float32", "bfloat16", "float16", "tfloat32", "int32", "int16", "int8", "uint32", "uint16", "uint8", "bool_",
    "float8_e4m3", "float8_e5m2", "finfo", "fp32", "fori_loop", "while_loop",
    "ndarray", "zeros", "ones", "full", "zeros_like", "empty_like", "ones_like", "shared_constant",
    "shared_identity_matrix", "rand", "random_seed",
    "affine_range", "sequential_range", "static_range", "load", "store", "load_transpose2d", "copy",
    "broadcast_to", "sum", "max", "min", "mean", "prod", "all", "var", "matmul", "transpose", "where",
    "expand_dims", "softmax", "dropout", "loop_reduce", "arange", "mgrid", "ds", "program_id", "num_programs",
    "program_ndim", "spmd_dim", "nc", "device_print", "static_cast", "NkiTensor",
]

# Buffers (the real package uses enum members; strings compare the same way in this interpreter)
sbuf = "sbuf"
psum = "psum"
hbm = "hbm"
shared_hbm = "shared_hbm"
private_hbm = "private_hbm"

# Dtypes are numpy dtypes (ml_dtypes' for bf16/FP8), as in AWS's `nki.language` (see dtypes.public_dtype)
float32 = _dt.public_dtype("float32")
bfloat16 = _dt.public_dtype("bfloat16")
float16 = _dt.public_dtype("float16")
tfloat32 = _dt.public_dtype("tfloat32")
int32 = _dt.public_dtype("int32")
int16 = _dt.public_dtype("int16")
int8 = _dt.public_dtype("int8")
uint32 = _dt.public_dtype("uint32")
uint16 = _dt.public_dtype("uint16")
uint8 = _dt.public_dtype("uint8")
bool_ = _dt.public_dtype("bool")
float8_e4m3 = _dt.public_dtype("float8_e4m3")
float8_e5m2 = _dt.public_dtype("float8_e5m2")
finfo = _dt.finfo
fp32 = _dt.finfo("float32")  # `nl.fp32.min` in AWS's kernels: float32's limits


class _TileSizeLimits(type):
    """Class-level properties: `nl.tile_size.pmax` reads the modeled chip's figure."""

    @property
    def pmax(cls) -> int:
        return int(active_spec().partition_max or 0)

    @property
    def psum_bank_fmax(cls) -> int:
        return int(active_spec().psum_bank_fmax or 0)

    @property
    def psum_fmax(cls) -> int:
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

    @property
    def total_available_sbuf_size(cls) -> int:
        return int(active_spec().sbuf_bytes_per_partition or 0)


class tile_size(metaclass=_TileSizeLimits):
    """Hardware tile limits of the chip being modeled."""


# -- creation ---------------------------------------------------------------------------------------------
def ndarray(shape: Sequence[int], dtype: Any, buffer: Any = None, name: str = "", **_: Any) -> NkiTensor:
    """Uninitialised tensor in `buffer` (default SBUF): reads as NaN (floats) / 0x5A.. (ints) until written."""
    return allocate(tuple(shape), dtype, buffer or sbuf, name)


def full(shape: Sequence[int], fill_value: float, dtype: Any, buffer: Any = None, name: str = "",
         **_: Any) -> NkiTensor:
    t = allocate(tuple(shape), dtype, buffer or sbuf, name)
    _fill(t, fill_value)
    return t


def _fill(t: NkiTensor, value: float) -> None:
    if t.buffer in ("sbuf", "psum"):
        _isa.memset(t, value)
    else:
        t.write(np.full(t.shape, value, np.float32))


def zeros(shape: Sequence[int], dtype: Any, buffer: Any = None, name: str = "", **_: Any) -> NkiTensor:
    t = allocate(tuple(shape), dtype, buffer or sbuf, name)
    _fill(t, 0.0)
    return t


def ones(shape: Sequence[int], dtype: Any, buffer: Any = None, name: str = "", **_: Any) -> NkiTensor:
    t = allocate(tuple(shape), dtype, buffer or sbuf, name)
    _fill(t, 1.0)
    return t


def zeros_like(t: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> NkiTensor:
    return zeros(t.shape, dtype or t.dtype, buffer or t.buffer, name)


def ones_like(t: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> NkiTensor:
    return ones(t.shape, dtype or t.dtype, buffer or t.buffer, name)


def empty_like(t: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> NkiTensor:
    return allocate(t.shape, dtype or t.dtype, buffer or t.buffer, name)


def shared_constant(constant: Any, dtype: Any = None, **_: Any) -> NkiTensor:
    """A shared HBM tensor holding `constant` (a numpy array known when the kernel is traced)."""
    arr = np.asarray(constant)
    t = allocate(arr.shape, dtype or arr.dtype, shared_hbm, depth=3)
    t.write(arr.astype(np.float32) if arr.dtype.kind in "iub" and (dtype or "") not in ("int8", "int32") else arr)
    return t


def shared_identity_matrix(n: int, dtype: Any = "uint8", **_: Any) -> NkiTensor:
    return shared_constant(np.identity(int(n)), dtype=dtype)


def rand(shape: Sequence[int], dtype: Any = float32, buffer: Any = None, **_: Any) -> NkiTensor:
    """Uniform [0, 1) values from the kernel call's seeded generator (GpSimd Engine)."""
    t = allocate(tuple(shape), dtype, buffer or sbuf)
    t.write(current().rng.random(t.shape, dtype=np.float32))
    _isa.record("gpsimd", "rand", (t,), t.dtype, t.data.size, 0)
    return t


def random_seed(seed: Any, **_: Any) -> None:
    """Reseed the kernel call's generator (an int, or a one-element tile)."""
    value = int(np.asarray(seed.read() if isinstance(seed, NkiTensor) else seed).reshape(-1)[0])
    st = current()
    st.seed = value
    st._rng = np.random.default_rng(value)


def dropout(x: NkiTensor, rate: Any, dtype: Any = None, mask: Any = None, **_: Any) -> NkiTensor:
    """Zero each element with probability `rate` (no rescaling), from the call's seeded generator."""
    from . import isa_vector_ops as _v

    if mask is not None:
        raise NotImplementedError(f"mask= on nl.dropout is not implemented (at {kernel_line(kernel_frame(2))})")
    out = allocate(x.shape, dtype or x.dtype, sbuf)
    _v.dropout(out, x, rate)
    return out


# -- loops ------------------------------------------------------------------------------------------------
def affine_range(start: int, stop: int | None = None, step: int = 1, **_: Any) -> range:
    """Loop without carried dependencies; unrolled at trace time (yields Python ints)."""
    return range(start, stop, step) if stop is not None else range(start)


sequential_range = affine_range
static_range = affine_range


def fori_loop(lower: Any, upper: Any, body_fun: Any, step: int = 1) -> None:
    """NKI 0.6's counted loop: `body_fun(i)` for i in range(lower, upper, step); bounds may be registers
    (`nisa.register_alloc`), read when the loop starts."""
    if not isinstance(step, int) or step <= 0:
        raise NkiRuleError("loop_step", f"fori_loop step must be a compile-time positive integer, got {step!r}",
                           kernel_line=kernel_line(kernel_frame(2)))
    for i in range(int(lower), int(upper), step):
        body_fun(_isa_regs.VirtualRegister(i))


def while_loop(init: Any, body_fun: Any) -> None:
    """NKI 0.6's while loop: runs `r = body_fun(r)` while the condition register is nonzero (checked first)."""
    r = init
    while int(r) != 0:
        r = body_fun(r)
        if r is None:
            raise NkiRuleError("while_loop_body", "while_loop's body must return the next condition register",
                               kernel_line=kernel_line(kernel_frame(2)))


# -- memory -----------------------------------------------------------------------------------------------
def load(src: NkiTensor, dtype: Any = None, mask: Any = None, name: str = "", **_: Any) -> NkiTensor:
    """DMA an HBM tensor (view or access pattern) into a new SBUF tile; masked-off elements stay uninitialised."""
    t = allocate(src.shape, dtype or src.dtype, sbuf, name)
    _isa.dma_copy(t, src, mask=mask)
    return t


def store(dst: NkiTensor, value: NkiTensor, mask: Any = None, **_: Any) -> None:
    """DMA an SBUF tile to an HBM tensor (view or access pattern), only where `mask`. A PSUM tile is first
    copied to SBUF (as the compiler does for `nl.store`)."""
    if isinstance(value, NkiTensor) and value.buffer == psum:
        staged = allocate(value.shape, value.dtype, sbuf)
        _isa.tensor_copy(staged, value)
        value = staged
    _isa.dma_copy(dst, value, mask=mask)


def load_transpose2d(src: NkiTensor, dtype: Any = None, mask: Any = None, **_: Any) -> NkiTensor:
    """DMA an HBM [F, P] tensor into an SBUF [P, F] tile (transposing descriptors)."""
    t = allocate(src.shape[::-1], dtype or src.dtype, sbuf)
    _isa.dma_copy(t, src, mask=mask, transpose=True)
    return t


def broadcast_to(x: NkiTensor, shape: Sequence[int]) -> NkiTensor:
    return x.broadcast_to(tuple(shape))


def static_cast(x: Any, dtype: Any) -> Any:
    """Cast a host numpy array (outside a kernel) or a tile to `dtype`."""
    if isinstance(x, NkiTensor):
        return _m.copy(x, dtype=dtype)
    from . import dtypes as _dt

    nd = _dt.normalize_dtype(dtype)
    return _dt.round_to(np.asarray(x), nd)


copy = _m.copy
matmul = _m.matmul
transpose = _m.transpose
where = _m.where
expand_dims = _m.expand_dims
softmax = _m.softmax
loop_reduce = _m.loop_reduce


class _Reduction:
    """`nl.sum/max/min/mean/...`: reduce free axes into a new SBUF tile; usable as `op=` for isa reductions."""

    def __init__(self, name: str, reduce: Any) -> None:
        self.name = name
        self.reduce = reduce

    def __call__(self, x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None,
                 name: str = "", **_: Any) -> NkiTensor:
        return _m.reduce(self.name, x, axis, dtype=dtype, keepdims=keepdims, mask=mask)

    def __repr__(self) -> str:
        return f"nl.{self.name}"


sum = _Reduction("sum", np.add.reduce)  # noqa: A001 - NKI name
max = _Reduction("max", np.maximum.reduce)  # noqa: A001
min = _Reduction("min", np.minimum.reduce)  # noqa: A001
mean = _Reduction("mean", None)
prod = _Reduction("prod", np.multiply.reduce)
all = _Reduction("all", np.logical_and.reduce)  # noqa: A001
var = _Reduction("var", None)


# -- SPMD -------------------------------------------------------------------------------------------------
def program_id(axis: int = 0) -> int:
    """This instance's coordinate along `axis` of the launch grid (0 without a grid)."""
    return current().program_id(axis)


def num_programs(axes: Any = None) -> int:
    """Instances along `axes` of the launch grid (all of them when None)."""
    return current().num_programs(axes)


def program_ndim() -> int:
    return len(current().grid.dims)


def device_print(prefix: str, x: Any, **_: Any) -> None:
    """Print a tile's values (the device prints from the kernel; here, when the instruction runs)."""
    value = x.read() if isinstance(x, NkiTensor) else x
    print(prefix, value)


@dataclass(frozen=True, eq=False)
class LanguageOp(Op):
    """`nl.exp(t)`, `nl.add(a, b)`: the operator called on tiles runs as a language-level op (new SBUF tile)."""

    def __call__(self, *args: Any, **kwargs: Any) -> NkiTensor:
        return _m.apply_op(self, *args, **kwargs)


_LANGUAGE_OPS = {
    name: LanguageOp(**{f.name: getattr(op, f.name) for f in fields(Op)})
    for name, op in {**UNARY, **BINARY}.items()
}


def __getattr__(name: str) -> Any:
    if name in _LANGUAGE_OPS:
        return _LANGUAGE_OPS[name]
    if name in DOCUMENTED_LANGUAGE:
        return unsupported("nki.language", name)
    raise AttributeError(f"nki.language has no attribute {name!r} (not in the NKI API reference)")
