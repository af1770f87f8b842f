"""NKI dtypes as strings (as the real `nki.language` does) and their numpy storage.

numpy has no bfloat16: bf16 values are stored as float32 and rounded to bf16 (round-to-nearest-even, the same
conversion torch uses) whenever a value is written into a bf16 tensor, so numerics match bf16 hardware tolerances.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["normalize_dtype", "itemsize", "storage_dtype", "round_to", "BF16"]

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
