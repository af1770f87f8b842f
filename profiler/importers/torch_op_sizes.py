"""Sizes of a torch.profiler op from what it records ("Input Dims", "Input type"): input shapes and dtypes,
a best-effort output shape, and the model's derived byte/FLOP figures."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["derive_sizes", "per_name", "is_inplace"]

# torch.profiler "Input type" strings (C++ type names) → dtype names the model knows.
_TORCH_TYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "long": "int64", "int64_t": "int64", "int": "int32", "short int": "int16",
    "short": "int16", "signed char": "int8", "unsigned char": "uint8", "bool": "bool",
    "unsigned short": "uint16", "unsigned int": "uint32", "unsigned long": "uint64",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128", "c10::complex<c10::Half>": "complex32",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz", "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
    "c10::Float8_e8m0fnu": "float8_e8m0fnu", "c10::qint8": "qint8", "c10::quint8": "quint8",
    "c10::qint32": "qint32",
}
_MAX_NUMEL = 1 << 48
_MAX_DIMS = 16


def _shape(d: Any) -> tuple | None:
    if type(d) is not list or len(d) > _MAX_DIMS:
        return None
    n = 1
    for x in d:
        if type(x) is not int or x < 0:
            return None
        n *= x
        if n > _MAX_NUMEL:
            return None
    return tuple(d)


def _tensor_inputs(dims: Any, types: Any) -> tuple[list[tuple], list[str]]:
    shapes: list[tuple] = []
    dtypes: list[str] = []
    if type(dims) is not list or type(types) is not list:
        return shapes, dtypes
    for d, t in zip(dims, types):
        if type(t) is not str:
            continue
        dt = _TORCH_TYPES.get(t)
        if dt is None:
            if t == "TensorList" and type(d) is list:   # dims of each tensor, dtype unknown: float32
                for sub in d:
                    s = _shape(sub)
                    if s is not None:
                        shapes.append(s)
                        dtypes.append("float32")
            continue
        s = _shape(d)
        if s is not None:
            shapes.append(s)
            dtypes.append(dt)
    return shapes, dtypes


def _infer_outputs(base: str, shapes: list[tuple]) -> list[tuple]:
    """Best-effort output shape (torch.profiler does not record outputs): matmul rules, else the largest
    input (elementwise ops; reductions over-count their output, which a memory-bound estimate tolerates)."""
    if not shapes:
        return []
    try:
        if base in ("mm", "bmm", "matmul") and len(shapes) >= 2 and shapes[0] and shapes[1]:
            a, b = shapes[0], shapes[1]
            return [a[:-1] + b[-1:]] if len(b) >= 2 else [a[:-1]]
        if base in ("addmm", "baddbmm", "addbmm") and len(shapes) >= 3 and shapes[1] and shapes[2]:
            return [shapes[1][:-1] + shapes[2][-1:]]
        if base == "linear" and len(shapes) >= 2 and shapes[0] and shapes[1]:
            return [shapes[0][:-1] + shapes[1][:1]]
    except (IndexError, TypeError):
        pass
    return [max(shapes, key=lambda s: math.prod(s) if s else 1)]


def _shapes_str(shapes: list[tuple]) -> str:
    return ";".join("x".join(str(d) for d in s) if s else "()" for s in shapes)


def derive_sizes(name: str, dims: Any, types: Any, flops: float) -> tuple:
    """Shape strings and the model's derived sizes for one distinct (op, inputs) combination."""
    from neuron_studio.profiler.model.ops import base_name, classify_engine, shape_stats

    shp, dts = _tensor_inputs(dims, types)
    base = base_name(name)
    outs = _infer_outputs(base, shp)
    if outs and base not in ("mm", "bmm", "matmul", "addmm", "baddbmm", "addbmm", "linear"):
        odt = [dts[max(range(len(shp)), key=lambda k: math.prod(shp[k]))]]   # dtype of the largest input
    else:
        odt = dts[:1] * len(outs)
    st = shape_stats(name, classify_engine(name), shp, dts, outs, odt, int(flops))
    return (_shapes_str(shp), ",".join(dts), _shapes_str(outs), ",".join(odt)) + st


def per_name(names: np.ndarray, fn: Any) -> np.ndarray:
    """`fn(name)` per row, evaluated once per distinct name."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    codes, uniq = pd.factorize(names)
    return np.asarray([fn(u) for u in uniq], dtype=bool)[codes]

def is_inplace(name: str) -> bool:
    b = name.split("::", 1)[-1].split(".", 1)[0]
    return b.endswith("_") and not b.endswith("__")
