"""`NkiTensor`: a numpy-backed tensor living in one NKI buffer (HBM, SBUF or PSUM), with slicing views."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import dtypes as _dt
from .errors import NkiRuleError
from .state import assigned_name, current, kernel_frame, kernel_line

__all__ = ["NkiTensor", "allocate", "wrap_input", "describe", "HBM_BUFFERS"]

HBM_BUFFERS = ("hbm", "shared_hbm", "private_hbm")


class _Allocation:
    """Owner of one allocation; the memory pool frees it when the last tensor/view referencing it dies."""

    __slots__ = ("name", "__weakref__")

    def __init__(self, name: str | None) -> None:
        self.name = name


class NkiTensor:
    """A tile or HBM tensor. Indexing with ints/slices returns a view sharing the same storage.

    Out-of-range slices raise `NkiRuleError("out_of_bounds")` instead of clipping silently as numpy would.
    """

    __slots__ = ("data", "dtype", "buffer", "_alloc", "_path", "_readonly")

    def __init__(self, data: np.ndarray, dtype: str, buffer: str, alloc: _Allocation, path: str = "",
                 readonly: bool = False) -> None:
        self.data = data
        self.dtype = dtype
        self.buffer = buffer
        self._alloc = alloc
        self._path = path
        self._readonly = readonly

    # -- metadata -------------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def name(self) -> str | None:
        return self._alloc.name

    def __repr__(self) -> str:
        return f"NkiTensor({describe(self)})"

    # -- views ----------------------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> "NkiTensor":
        if not isinstance(key, tuple):
            key = (key,)
        if Ellipsis not in key:
            shape = self.data.shape
            for axis, k in enumerate(key):
                if axis >= len(shape):
                    break
                if isinstance(k, slice):
                    start = 0 if k.start is None else k.start
                    stop = shape[axis] if k.stop is None else k.stop
                    if start < 0 or stop > shape[axis] or start > stop:
                        self._oob(f"slice {start}:{stop} on axis {axis} of size {shape[axis]}")
                elif isinstance(k, (int, np.integer)) and not (-shape[axis] <= k < shape[axis]):
                    self._oob(f"index {k} on axis {axis} of size {shape[axis]}")
        return NkiTensor(self.data[key], self.dtype, self.buffer, self._alloc, self._path + _fmt_key(key),
                         self._readonly)

    def _oob(self, detail: str) -> None:
        frame = kernel_frame(3)
        raise NkiRuleError("out_of_bounds", detail, tensor=describe(self), kernel_line=kernel_line(frame))

    def reshape(self, shape: tuple[int, ...] | list[int]) -> "NkiTensor":
        """Reshape a contiguous tensor (HBM tensors, whole tiles); returns a view."""
        if not self.data.flags.c_contiguous:
            raise NkiRuleError("reshape_non_contiguous", "reshape needs a contiguous tensor",
                               tensor=describe(self), kernel_line=kernel_line(kernel_frame(2)))
        return NkiTensor(self.data.reshape(tuple(shape)), self.dtype, self.buffer, self._alloc,
                         self._path + f".reshape({tuple(shape)})", self._readonly)

    def broadcast_to(self, shape: tuple[int, ...] | list[int]) -> "NkiTensor":
        """Read-only stride-0 view (an access pattern with step 0), e.g. one HBM row read into every partition."""
        return NkiTensor(np.broadcast_to(self.data, tuple(shape)), self.dtype, self.buffer, self._alloc,
                         self._path + f".broadcast_to({tuple(shape)})", True)

    # -- data movement helpers (used by isa/language) -------------------------------------------------------
    def read(self) -> np.ndarray:
        return self.data

    def write(self, value: np.ndarray, src_dtype: str | None = None) -> None:
        """Store `value`, converting to this tensor's dtype (bf16 rounding) unless it already is that dtype."""
        if self._readonly:
            raise NkiRuleError("write_readonly", "cannot write through a broadcast view", tensor=describe(self),
                               kernel_line=kernel_line(kernel_frame(2)))
        if src_dtype != self.dtype:
            value = _dt.round_to(value, self.dtype)
        self.data[...] = value


def _fmt_key(key: tuple) -> str:
    parts = []
    for k in key:
        if isinstance(k, slice):
            parts.append(f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}")
        else:
            parts.append(str(k))
    return "[" + ", ".join(parts) + "]"


def describe(t: NkiTensor) -> str:
    """Human name for errors: `name[slice]` when the variable name is known, plus shape and buffer."""
    base = t.name or "<unnamed>"
    return f"{base}{t._path} shape={list(t.shape)} {t.buffer}"


def allocate(shape: tuple[int, ...], dtype: Any, buffer: str, name: str = "", fill: float | None = None,
             depth: int = 3) -> NkiTensor:
    """Allocate a tensor in `buffer`, enforcing partition/PSUM-bank rules and on-chip capacity."""
    st = current()
    dtype = _dt.normalize_dtype(dtype)
    shape = tuple(int(s) for s in shape)
    frame = kernel_frame(depth)
    var = name or assigned_name(frame)
    label = f"{var or '<unnamed>'} shape={list(shape)} {buffer}"
    if buffer in ("sbuf", "psum"):
        pmax, bank_bytes = int(st.spec.partition_max or 0), int(st.spec.psum_bank_bytes_per_partition or 0)
        if len(shape) < 1 or shape[0] > pmax:
            raise NkiRuleError("partition_dim",
                               f"partition dimension {shape[0] if shape else 0} exceeds pmax={pmax}",
                               tensor=label, kernel_line=kernel_line(frame))
        per_partition = int(np.prod(shape[1:], dtype=np.int64)) * _dt.itemsize(dtype)
        if buffer == "psum":
            if dtype != "float32":
                raise NkiRuleError("psum_dtype", f"PSUM tiles accumulate in float32, got {dtype}",
                                   tensor=label, kernel_line=kernel_line(frame))
            if per_partition > bank_bytes:
                raise NkiRuleError(
                    "psum_bank",
                    f"PSUM tile free size {per_partition // 4} fp32 ({per_partition} B/partition) exceeds one "
                    f"bank ({bank_bytes // 4} fp32 = {bank_bytes} B/partition)",
                    tensor=label, kernel_line=kernel_line(frame))
    elif buffer not in HBM_BUFFERS:
        raise NkiRuleError("buffer", f"unknown buffer {buffer!r}", tensor=label, kernel_line=kernel_line(frame))
    store = _dt.storage_dtype(dtype)
    data = np.zeros(shape, store) if fill is None or fill == 0 else np.full(shape, fill, store)
    alloc = _Allocation(var)
    if buffer in ("sbuf", "psum"):
        st.allocate(alloc, buffer, per_partition, label, frame)
    return NkiTensor(data, dtype, buffer, alloc)


def wrap_input(array: np.ndarray, dtype: str, name: str) -> NkiTensor:
    """Wrap a kernel argument as an HBM tensor (no copy)."""
    return NkiTensor(array, dtype, "shared_hbm", _Allocation(name))
