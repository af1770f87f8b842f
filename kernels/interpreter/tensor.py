"""`NkiTensor`: a numpy-backed tensor living in one NKI buffer (HBM, SBUF or PSUM), with views and access patterns.

Indexing with ints/slices (and affine `nl.arange` expressions that reduce to slices) returns a view sharing the
same storage; other index expressions return an access pattern that gathers on read and scatters on write.
Uninitialised memory is poisoned (NaN for floats, a sentinel for ints): a kernel reading what it never wrote
gets NaN/sentinel values, and an output element the kernel never wrote is an error when the kernel returns.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import dtypes as _dt
from .access import root_layout
from .errors import NkiRuleError
from .indexing import AdvancedKey, ParDim, affine_key, align_mask, resolve
from .state import assigned_name, current, kernel_frame, kernel_line

__all__ = ["NkiTensor", "allocate", "wrap_input", "describe", "HBM_BUFFERS", "poison_value", "INT_POISON"]

HBM_BUFFERS = ("hbm", "shared_hbm", "private_hbm")
# NkiTensor view methods of the current NKI release that the interpreter does not implement
_TENSOR_VIEW_APIS = frozenset({"ap", "slice", "select", "permute", "view", "bitcast", "expand", "squeeze",
                               "unsqueeze", "transpose"})
INT_POISON = 0x5A  # byte pattern of uninitialised integer memory (0x5A5A5A5A for int32)


def poison_value(dtype: str) -> Any:
    """What uninitialised memory of `dtype` reads as: NaN for floats, a repeated 0x5A byte for integers."""
    store = np.dtype(_dt.storage_dtype(dtype))
    if store.kind == "f":
        return np.nan
    if store.kind == "b":
        return True
    pattern = int.from_bytes(bytes([INT_POISON]) * store.itemsize, "little")
    return np.array(pattern, dtype=f"u{store.itemsize}").view(store).item()


class _Allocation:
    """Owner of one allocation; the memory pool frees it when the last tensor/view referencing it dies."""

    __slots__ = ("name", "line", "record", "root", "__weakref__")

    def __init__(self, name: str | None, line: str = "") -> None:
        self.name = name
        self.line = line
        self.record: Any = None  # the on-chip AllocRecord (liveness), None for HBM tensors
        self.root: tuple[int, int, int] | None = None  # on-chip: (first byte, partition stride, partitions)


class NkiTensor:
    """A tile or HBM tensor.

    `data` is the numpy view of the elements this tensor addresses. For a gather/scatter access pattern
    `data` is a gathered copy and `_scatter` = (base array, key) routes writes back into the storage.
    `_written` (HBM tensors the kernel allocates) is a parallel bool view recording which elements were written.
    Out-of-range slices raise `NkiRuleError("out_of_bounds")` instead of clipping silently as numpy would.
    """

    __slots__ = ("data", "dtype", "buffer", "_alloc", "_path", "_readonly", "_scatter", "_written", "_oob",
                 "_from_matmul", "_reduce_op", "_blocks", "_acc", "__weakref__")

    def __init__(self, data: np.ndarray, dtype: str, buffer: str, alloc: _Allocation, path: str = "",
                 readonly: bool = False, written: np.ndarray | None = None,
                 blocks: np.ndarray | None = None) -> None:
        self.data = data
        self.dtype = dtype
        self.buffer = buffer
        self._alloc = alloc
        self._path = path
        self._readonly = readonly
        self._scatter: tuple[np.ndarray, AdvancedKey] | None = None
        self._written = written
        self._oob: np.ndarray | None = None
        self._from_matmul = False
        self._reduce_op: Any = None
        self._blocks = blocks  # block ids this view covers (block-dimension tiles), for liveness
        self._acc: np.ndarray | None = None  # PSUM: True where a matmul accumulation group is open

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

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getattr__(self, name: str) -> Any:
        if name in _TENSOR_VIEW_APIS:
            raise NotImplementedError(f"NkiTensor.{name} (the current release's tensor view API) is not implemented "
                                      f"by the Neuron Studio interpreter (used at {kernel_line(kernel_frame(2))}); "
                                      "index with slices or nl.arange expressions instead")
        raise AttributeError(f"NkiTensor has no attribute {name!r}")

    # -- views ----------------------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> "NkiTensor":
        if not isinstance(key, tuple):
            key = (key,)
        if self._scatter is not None:
            self._fail("access_pattern", "an indexed access pattern cannot be indexed again; index the tile "
                       "itself", 3)
        has_ellipsis = any(k is Ellipsis for k in key)
        fast = affine_key(key, self.ndim) if not has_ellipsis else key
        if fast is None:
            return self._gather(key)
        key = fast
        if not has_ellipsis:
            shape = self.data.shape
            if len(key) > len(shape):
                self._fail("out_of_bounds", f"{len(key)} indices for a {len(shape)}-d tensor", 3)
            for axis, k in enumerate(key):
                if isinstance(k, slice):
                    start = 0 if k.start is None else k.start
                    stop = shape[axis] if k.stop is None else k.stop
                    if start < 0 or stop > shape[axis] or start > stop:
                        return self._gather(key)  # maybe masked: checked where it is used
                elif isinstance(k, (int, np.integer)) and not (-shape[axis] <= k < shape[axis]):
                    self._fail("out_of_bounds", f"index {k} on axis {axis} of size {shape[axis]}", 3)
        written = self._written[key] if self._written is not None else None
        blocks = self._blocks
        if blocks is not None and blocks.ndim and not has_ellipsis:
            blocks = blocks[key[:blocks.ndim]]
        view = NkiTensor(self.data[key], self.dtype, self.buffer, self._alloc, self._path + _fmt_key(key),
                         self._readonly, written, blocks)
        if self._acc is not None:
            view._acc = self._acc[key]
        return view

    def _gather(self, key: tuple) -> "NkiTensor":
        adv = resolve(key, self.data.shape)
        view = NkiTensor(self.data[adv.index], self.dtype, self.buffer, self._alloc,
                         self._path + _fmt_key(key), self._readonly, None, self._blocks)
        view._scatter = (self.data, adv)
        view._oob = adv.oob
        if self._acc is not None:
            view._acc = self._acc[adv.index]
        if self._written is not None:
            view._written = self._written  # base mask: scatter marks through the same key
        return view

    def __setitem__(self, key: Any, value: Any) -> None:
        """`tile[idx] = value`: copy a tile (or scalar) into the addressed elements (a Vector Engine copy)."""
        target = self[key]
        current().assign(target, value)

    def _fail(self, rule: str, detail: str, depth: int) -> None:
        raise NkiRuleError(rule, detail, tensor=describe(self), kernel_line=kernel_line(kernel_frame(depth)))

    def reshape(self, shape: tuple[int, ...] | list[int]) -> "NkiTensor":
        """Reshape a contiguous tensor (HBM tensors, whole tiles); returns a view."""
        if self._scatter is not None or not self.data.flags.c_contiguous:
            raise NkiRuleError("reshape_non_contiguous", "reshape needs a contiguous tensor",
                               tensor=describe(self), kernel_line=kernel_line(kernel_frame(2)))
        written = self._written.reshape(tuple(shape)) if self._written is not None else None
        return NkiTensor(self.data.reshape(tuple(shape)), self.dtype, self.buffer, self._alloc,
                         self._path + f".reshape({tuple(shape)})", self._readonly, written, self._blocks)

    def broadcast_to(self, shape: tuple[int, ...] | list[int]) -> "NkiTensor":
        """Read-only stride-0 view (an access pattern with step 0), e.g. one HBM row read into every partition.

        An on-chip tile's axis 0 is its partition axis, so a [P] tile (a free-axis reduction without keepdims)
        broadcasts along the free axes to [P, F], as NKI does, not numpy's trailing-axis way ([F] -> [P, F]),
        which would divide row i of a softmax by row j's sum."""
        target = tuple(shape)
        data = self.data
        if self.buffer in ("sbuf", "psum") and 0 < data.ndim < len(target) and data.shape[0] == target[0]:
            data = data.reshape(data.shape + (1,) * (len(target) - data.ndim))
        return NkiTensor(np.broadcast_to(data, target), self.dtype, self.buffer, self._alloc,
                         self._path + f".broadcast_to({tuple(shape)})", True, None, self._blocks)

    # -- data movement helpers (used by isa/language) -------------------------------------------------------
    def _touch(self) -> None:
        rec = self._alloc.record
        if rec is not None:
            rec.touch(current().tick, self._blocks)

    def read(self, mask: np.ndarray | None = None) -> np.ndarray:
        """The addressed values; out-of-range elements of an access pattern are an error unless masked off."""
        self._touch()
        if self._oob is not None:
            bad = self._oob if mask is None else (self._oob & align_mask(mask, self._oob.shape))
            if bad.any():
                self._fail("out_of_bounds", f"access reads {int(bad.sum())} element(s) outside the tensor "
                           f"(shape {list(self._scatter[0].shape)}); mask them off with mask=", 4)
        return self.data

    def write(self, value: np.ndarray, src_dtype: str | None = None, mask: np.ndarray | None = None,
              matmul: bool = False) -> None:
        """Store `value` (only where `mask`), converting to this tensor's dtype (bf16 rounding) when needed.

        In PSUM, a write by a matmul (`matmul=True`) leaves an accumulation group open; any other write closes it.
        """
        if self._readonly:
            raise NkiRuleError("write_readonly", "cannot write through a broadcast view", tensor=describe(self),
                               kernel_line=kernel_line(kernel_frame(2)))
        self._touch()
        if src_dtype != self.dtype:
            value = _dt.round_to(value, self.dtype)
        value = np.asarray(value)
        if value.shape != self.data.shape:
            value = np.broadcast_to(value, self.data.shape) if value.size != self.data.size \
                else value.reshape(self.data.shape)
        keep = None
        if mask is not None:
            keep = align_mask(mask, self.data.shape)
        if self._oob is not None:
            bad = self._oob if keep is None else (self._oob & keep)
            if bad.any():
                self._fail("out_of_bounds", f"access writes {int(bad.sum())} element(s) outside the tensor "
                           f"(shape {list(self._scatter[0].shape)}); mask them off with mask=", 4)
            keep = ~self._oob if keep is None else (keep & ~self._oob)
        if self._scatter is None:
            if keep is None:
                self.data[...] = value
                if self._written is not None:
                    self._written[...] = True
                if self._acc is not None:
                    self._acc[...] = matmul
            else:
                np.copyto(self.data, value, where=keep)
                if self._written is not None:
                    self._written[keep] = True
                if self._acc is not None:
                    self._acc[keep] = matmul
            return
        if self._acc is not None:
            raise NkiRuleError("psum_access_pattern", "writes to PSUM through a gather/scatter access pattern are "
                               "not supported", tensor=describe(self), kernel_line=kernel_line(kernel_frame(2)))
        base, adv = self._scatter
        if keep is None:
            base[adv.index] = value
            if self._written is not None:
                self._written[adv.index] = True
        else:
            idx = tuple(np.broadcast_to(i, adv.shape)[keep] for i in adv.index)
            base[idx] = value[keep]
            if self._written is not None:
                self._written[idx] = True
        self.data = base[adv.index]

    # -- language-level operators (`a + b`, `t / 4`, `acc += x`) --------------------------------------------
    def _binary(self, name: str, other: Any, reverse: bool = False) -> "NkiTensor":
        return current().elementwise(name, (other, self) if reverse else (self, other))

    def __add__(self, other: Any) -> "NkiTensor":
        return self._binary("add", other)

    def __radd__(self, other: Any) -> "NkiTensor":
        return self._binary("add", other, True)

    def __sub__(self, other: Any) -> "NkiTensor":
        return self._binary("subtract", other)

    def __rsub__(self, other: Any) -> "NkiTensor":
        return self._binary("subtract", other, True)

    def __mul__(self, other: Any) -> "NkiTensor":
        return self._binary("multiply", other)

    def __rmul__(self, other: Any) -> "NkiTensor":
        return self._binary("multiply", other, True)

    def __truediv__(self, other: Any) -> "NkiTensor":
        return self._binary("divide", other)

    def __rtruediv__(self, other: Any) -> "NkiTensor":
        return self._binary("divide", other, True)

    def __pow__(self, other: Any) -> "NkiTensor":
        return self._binary("power", other)

    def __neg__(self) -> "NkiTensor":
        return self._binary("multiply", -1.0)

    def __gt__(self, other: Any) -> "NkiTensor":
        return self._binary("greater", other)

    def __ge__(self, other: Any) -> "NkiTensor":
        return self._binary("greater_equal", other)

    def __lt__(self, other: Any) -> "NkiTensor":
        return self._binary("less", other)

    def __le__(self, other: Any) -> "NkiTensor":
        return self._binary("less_equal", other)

    def __iadd__(self, other: Any) -> "NkiTensor":
        return current().accumulate(self, other, "add")

    def __isub__(self, other: Any) -> "NkiTensor":
        return current().accumulate(self, other, "subtract")

    def __imul__(self, other: Any) -> "NkiTensor":
        return current().accumulate(self, other, "multiply")

    def __bool__(self) -> bool:
        raise NkiRuleError("tile_truth_value", "a tile has no Python truth value (data-dependent control flow "
                           "is not expressible in NKI)", tensor=describe(self),
                           kernel_line=kernel_line(kernel_frame(2)))


def _fmt_key(key: tuple) -> str:
    parts = []
    for k in key:
        if isinstance(k, slice):
            step = f":{k.step}" if k.step not in (None, 1) else ""
            parts.append(f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}{step}")
        elif isinstance(k, np.ndarray):
            parts.append(f"<index {list(k.shape)}>")
        else:
            parts.append(str(k))
    return "[" + ", ".join(parts) + "]"


def describe(t: NkiTensor) -> str:
    """Human name for errors: `name[slice]` when the variable name is known, plus shape and buffer."""
    base = t.name or "<unnamed>"
    return f"{base}{t._path} shape={list(t.shape)} {t.buffer}"


def _partition_axis(shape: tuple) -> int:
    marked = [i for i, s in enumerate(shape) if isinstance(s, ParDim)]
    return marked[0] if marked else 0


def allocate(shape: tuple[int, ...], dtype: Any, buffer: Any, name: str = "", fill: float | None = None,
             depth: int = 3) -> NkiTensor:
    """Allocate a tensor in `buffer`, enforcing partition/PSUM-bank rules and on-chip capacity.

    `fill=None` leaves the memory uninitialised (poisoned); HBM tensors record which elements get written.
    """
    st = current()
    dtype = _dt.normalize_dtype(dtype)
    pax = _partition_axis(tuple(shape))
    shape = tuple(int(s) for s in shape)
    frame = kernel_frame(depth)
    var = name or assigned_name(frame)
    buffer = st.buffer_name(buffer, var, frame)
    label = f"{var or '<unnamed>'} shape={list(shape)} {buffer}"
    per_partition = 0
    if buffer in ("sbuf", "psum"):
        pmax, bank_bytes = int(st.spec.partition_max or 0), int(st.spec.psum_bank_bytes_per_partition or 0)
        if len(shape) < 1 or shape[pax] > pmax:
            raise NkiRuleError("partition_dim",
                               f"partition dimension {shape[pax] if shape else 0} exceeds pmax={pmax}",
                               tensor=label, kernel_line=kernel_line(frame))
        per_partition = int(np.prod(shape, dtype=np.int64)) // max(shape[pax], 1) * _dt.itemsize(dtype)
        if buffer == "psum":
            if dtype != "float32":
                raise NkiRuleError("psum_dtype", f"PSUM tiles accumulate in float32, got {dtype}",
                                   tensor=label, kernel_line=kernel_line(frame))
            tile_bytes = int(np.prod(shape[pax + 1:], dtype=np.int64)) * _dt.itemsize(dtype)
            if tile_bytes > bank_bytes:
                raise NkiRuleError(
                    "psum_bank",
                    f"PSUM tile free size {tile_bytes // 4} fp32 ({tile_bytes} B/partition) exceeds one "
                    f"bank ({bank_bytes // 4} fp32 = {bank_bytes} B/partition)",
                    tensor=label, kernel_line=kernel_line(frame))
    elif buffer not in HBM_BUFFERS:
        raise NkiRuleError("buffer", f"unknown buffer {buffer!r}", tensor=label, kernel_line=kernel_line(frame))
    store = _dt.storage_dtype(dtype)
    if buffer in HBM_BUFFERS:
        shared = st.shared_hbm(var, shape, dtype, buffer)
        if shared is not None:
            return shared
    data = np.full(shape, poison_value(dtype) if fill is None else fill, store)
    alloc = _Allocation(var, kernel_line(frame))
    written = None
    if buffer in ("sbuf", "psum"):
        st.allocate(alloc, buffer, per_partition, shape[:pax], label, frame)
        alloc.root = root_layout(data, pax)
    elif fill is None:
        written = np.zeros(shape, bool)
    blocks = np.arange(int(np.prod(shape[:pax], dtype=np.int64))).reshape(shape[:pax]) if pax else None
    t = NkiTensor(data, dtype, buffer, alloc, written=written, blocks=blocks)
    if buffer == "psum":
        t._acc = np.zeros(shape, bool)
    if buffer in HBM_BUFFERS:
        st.register_hbm(t, buffer)
    return t


def wrap_input(array: np.ndarray, dtype: str, name: str) -> NkiTensor:
    """Wrap a kernel argument as an HBM tensor (no copy)."""
    return NkiTensor(array, dtype, "shared_hbm", _Allocation(name))
