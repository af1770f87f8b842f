"""NKI index expressions (`nl.arange`, `nl.mgrid`, `nl.ds`, affine arithmetic on them) and access patterns.

An index expression is a numpy integer array shaped to broadcast against the other indices of one access
(`nl.arange(128)[:, None]` is a [128, 1] column); arithmetic on it (`offset + 2 * i`) is numpy arithmetic, and
comparing it gives a boolean mask. Indexing a tensor with such arrays is NKI's affine access: when every array
walks one axis with a constant positive step, in axis order, it becomes a numpy slice (a real view, no copy);
otherwise the access is a gather/scatter through numpy advanced indexing. Out-of-range indices are not clipped
silently: they are recorded and become an error unless a `mask=` excludes them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["IndexExpr", "arange", "mgrid", "ds", "par_dim", "ParDim", "affine_key", "AdvancedKey", "resolve",
           "align_mask"]


class IndexExpr(np.ndarray):
    """An integer index array produced by `nl.arange` / `nl.mgrid` (a numpy array; the subclass marks intent)."""

    def __array_finalize__(self, obj: Any) -> None:  # numpy subclass hook
        return


def arange(start: int, stop: int | None = None, step: int = 1) -> IndexExpr:
    """`nl.arange(n)` / `nl.arange(start, stop, step)`: a 1-D index expression (add axes with `[:, None]`)."""
    values = np.arange(start, stop, step, dtype=np.int64) if stop is not None else np.arange(start, dtype=np.int64)
    return values.view(IndexExpr)


class _MGrid:
    """`nl.mgrid[0:P, 0:F]`: one index expression per axis, each broadcastable to the full grid."""

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, tuple):
            key = (key,)
        for k in key:
            if not isinstance(k, slice):
                raise TypeError(f"nl.mgrid takes slices (nl.mgrid[0:128, 0:512]), got {k!r}")
        grids = np.ogrid[key]
        if len(key) == 1:
            return np.asarray(grids, dtype=np.int64).view(IndexExpr)
        return tuple(np.asarray(g, dtype=np.int64).view(IndexExpr) for g in grids)


mgrid = _MGrid()


def ds(start: int, size: int) -> slice:
    """`nl.ds(start, size)`: a dynamic slice start:start+size."""
    return slice(int(start), int(start) + int(size))


class ParDim(int):
    """`nl.par_dim(n)`: marks the partition axis of a tile shape whose leading axes are block axes."""

    def __repr__(self) -> str:
        return f"par_dim({int(self)})"


def par_dim(size: int) -> ParDim:
    return ParDim(int(size))


def _as_index_array(k: Any) -> np.ndarray | None:
    if isinstance(k, np.ndarray) and k.dtype.kind in "iu":
        return k
    if isinstance(k, (list, tuple)) and k and all(isinstance(v, (int, np.integer)) for v in k):
        return np.asarray(k, dtype=np.int64)
    return None


def _progression_slice(arr: np.ndarray, axis: int) -> slice | None:
    """`arr` varies along `axis` only, as start + step*i with step >= 1: the equivalent slice (else None)."""
    flat = arr.reshape(-1)
    n = flat.size
    if n == 0:
        return None
    start = int(flat[0])
    if n == 1:
        return slice(start, start + 1) if start >= 0 else None
    step = int(flat[1] - flat[0])
    if step < 1 or start < 0:
        return None
    if not np.array_equal(flat, start + step * np.arange(n)):
        return None
    return slice(start, start + step * (n - 1) + 1, step)


def _positions(key: tuple) -> list[int]:
    """Key positions that keep an axis (everything but plain ints)."""
    return [j for j, k in enumerate(key) if not isinstance(k, (int, np.integer))]


def affine_key(key: tuple, ndim: int) -> tuple | None:
    """Turn an all-affine index-array key into slices (a view), or None when it needs a gather.

    Requires every index array to vary only along its own axis of the access (the m-th kept position of the key
    walks axis m of the broadcast shape) as an arithmetic progression with step >= 1. Ints drop their axis,
    slices pass through.
    """
    arrays = [(j, a) for j, k in enumerate(key) if (a := _as_index_array(k)) is not None]
    if not arrays:
        return key
    kept = _positions(key)
    out = list(key)
    for j, a in arrays:
        if a.ndim != len(kept):
            return None
        m = kept.index(j)
        varying = [ax for ax, s in enumerate(a.shape) if s != 1]
        if len(varying) > 1 or (varying and varying[0] != m):
            return None
        sl = _progression_slice(a, m)
        if sl is None:
            return None
        out[j] = sl
    return tuple(out)


@dataclass
class AdvancedKey:
    """A gather/scatter access: clipped index arrays, the result shape, and where the indices were out of range."""

    index: tuple
    shape: tuple[int, ...]
    oob: np.ndarray | None  # bool, result-shaped; None when every index is in range


def resolve(key: tuple, shape: tuple[int, ...]) -> AdvancedKey:
    """Build the gather key for `key` (ints, slices and index arrays) on an array of `shape`.

    The access shape is the broadcast of the index arrays, where a slice at the m-th kept position of the key
    contributes axis m (NKI's affine access: `t[i_p, 0:512]` with `i_p` = [128, 1] reads [128, 512]).
    """
    if len(key) > len(shape):
        raise IndexError(f"{len(key)} indices for a tensor with {len(shape)} dimensions")
    key = tuple(key) + (slice(None),) * (len(shape) - len(key))
    kept = _positions(key)
    arrays = [_as_index_array(k) for k in key]
    adims = {a.ndim for a in arrays if a is not None}
    ndim = max(adims | {len(kept)}) if adims else len(kept)
    parts: list[np.ndarray] = []
    for axis, k in enumerate(key):
        if isinstance(k, slice):
            start, stop, step = k.start or 0, shape[axis] if k.stop is None else k.stop, k.step or 1
            rng = np.arange(start, stop, step, dtype=np.int64)
            shp = [1] * ndim
            shp[kept.index(axis) + (ndim - len(kept))] = rng.size
            parts.append(rng.reshape(shp))
        elif isinstance(k, (int, np.integer)):
            parts.append(np.asarray(int(k), dtype=np.int64).reshape((1,) * ndim))
        else:
            a = arrays[axis]
            if a is None:
                raise TypeError(f"unsupported index {k!r} on axis {axis}")
            parts.append(a.reshape((1,) * (ndim - a.ndim) + a.shape))
    out_shape = tuple(np.broadcast_shapes(*(p.shape for p in parts)))
    oob = None
    index = []
    for axis, idx in enumerate(parts):
        bad = (idx < 0) | (idx >= shape[axis])
        if bad.any():
            oob = bad if oob is None else (oob | bad)
            idx = np.clip(idx, 0, shape[axis] - 1)
        index.append(idx)
    if oob is not None:
        oob = np.broadcast_to(oob, out_shape)
    return AdvancedKey(tuple(index), out_shape, oob)


def align_mask(mask: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A boolean mask broadcast to a tile `shape`, aligned on the partition axis (axis 0): a [P, 1] mask applies
    to a [P] reduction result, a [P] mask to every free element of its partition."""
    m = np.asarray(mask, dtype=bool)
    while m.ndim > len(shape) and m.shape[-1] == 1:
        m = m[..., 0]
    if 0 < m.ndim < len(shape):
        m = m.reshape(m.shape + (1,) * (len(shape) - m.ndim))
    return np.broadcast_to(m, shape)
