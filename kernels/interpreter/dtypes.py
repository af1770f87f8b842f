"""NKI dtypes: what `nl.float32`, `nl.bfloat16`, ... are, and how tiles of each dtype are stored.

AWS's `nki.language` exposes numpy dtypes (ml_dtypes' for bfloat16 and the FP8 formats), so kernels and their
drivers write `np.zeros(shape, dtype=nl.bfloat16)`; `public_dtype` gives the same objects (ml_dtypes when it is
installed; the NKI name as a string for a dtype numpy cannot represent here, e.g. tfloat32). Inside the
interpreter a tile's dtype is its NKI name (a numpy dtype compares equal to its name).

bf16 values are stored as float32 and rounded to bf16 (round-to-nearest-even, the same conversion torch uses)
whenever a value is written into a bf16 tensor, so numerics match bf16 hardware tolerances.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["normalize_dtype", "itemsize", "storage_dtype", "round_to", "BF16", "public_dtype", "finfo"]

BF16 = "bfloat16"
_ITEMSIZE = {
    "float32": 4, "bfloat16": 2, "float16": 2, "tfloat32": 4, "int32": 4, "int16": 2, "int8": 1,
    "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1, "float8_e4m3": 1, "float8_e5m2": 1,
}
_STORAGE = {
    "float32": np.float32, "bfloat16": np.float32, "tfloat32": np.float32, "float16": np.float16,
    "int32": np.int32, "int16": np.int16, "int8": np.int8, "uint32": np.uint32, "uint16": np.uint16,
    "uint8": np.uint8, "bool": np.bool_, "float8_e4m3": np.float32, "float8_e5m2": np.float32,
}


def normalize_dtype(dtype: Any) -> str:
    """Accept an NKI dtype string, a numpy dtype/type or a torch dtype; return the NKI dtype string."""
    if isinstance(dtype, str) and dtype in _ITEMSIZE:
        return dtype
    name = str(dtype)
    if name.startswith("torch."):
        name = name[len("torch."):]
    if name in _ITEMSIZE:
        return name
    try:
        name = np.dtype(dtype).name
    except TypeError as exc:  # pragma: no cover - defensive
        raise ValueError(f"unsupported dtype {dtype!r}") from exc
    if name == "bool":
        return "bool"
    if name in _ITEMSIZE:
        return name
    raise ValueError(f"unsupported dtype {dtype!r}")


def public_dtype(name: str) -> Any:
    """`nl.<name>`: the numpy dtype AWS's package exposes for NKI dtype `name`, or `name` where numpy cannot
    represent it here (tfloat32; bfloat16/FP8 without ml_dtypes installed)."""
    try:
        return np.dtype(name)
    except TypeError:
        pass
    try:
        import ml_dtypes
    except ImportError:
        return name
    kind = getattr(ml_dtypes, name, None)
    return np.dtype(kind) if kind is not None else name


def finfo(dtype: Any) -> Any:
    """`nl.finfo(dtype)`: machine limits of a float dtype (`.min`, `.max`, `.eps`, `.tiny`), as numpy.finfo."""
    name = normalize_dtype(dtype)
    if name == "tfloat32":
        name = "float32"  # tf32 is stored as, and has the range of, float32
    kind = public_dtype(name)
    if isinstance(kind, str):
        raise TypeError(f"nl.finfo({name}) needs ml_dtypes (pip install ml_dtypes)")
    try:
        import ml_dtypes
        return ml_dtypes.finfo(kind)
    except ImportError:
        return np.finfo(kind)


def itemsize(dtype: str) -> int:
    return _ITEMSIZE[dtype]


def storage_dtype(dtype: str) -> type:
    return _STORAGE[dtype]


def _round_bf16(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000))
    out = rounded.view(np.float32)
    nan = np.isnan(x)
    if nan.any():
        out = np.where(nan, x, out)
    return out


def round_to(value: np.ndarray, dtype: str) -> np.ndarray:
    """Convert `value` to the storage of `dtype`, rounding to bf16 where needed."""
    if dtype == BF16:
        return _round_bf16(value)
    return np.asarray(value).astype(_STORAGE[dtype], copy=False)
