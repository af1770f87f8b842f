"""Small parsers for Explorer column values: engine names, numbers inside strings, interval unions, op paths,
columns with neutral defaults, and the chip an instance type names."""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

import numpy as np
import pandas as pd

from neuron_studio.profiler.neuron_profile.tables import norm_name
from neuron_studio.profiler.trace import TraceFormatError

__all__ = [
    "ENGINES", "STUDIO_ENGINE", "ENGINE_ALIASES", "ENGINE_NOTE", "engine_of", "numbers", "span", "union_len",
    "intervals_len", "op_name", "split_path", "num_col", "str_col", "first_row", "number_in",
    "chip_from_instance_type", "int_col", "int_numbers", "nki_file",
]

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
STUDIO_ENGINE = {"tensor": "tensor", "vector": "vector", "scalar": "scalar", "gpsimd": "gpsimd", "sync": "dma",
                 "dma": "dma", "none": "none"}
ENGINE_ALIASES = {
    "tensor": "tensor", "pe": "tensor", "tensormatrix": "tensor", "tensorengine": "tensor", "matmul": "tensor",
    "vector": "vector", "dve": "vector", "vectorengine": "vector",
    "scalar": "scalar", "act": "scalar", "activation": "scalar", "scalarengine": "scalar",
    "gpsimd": "gpsimd", "pool": "gpsimd", "gpsimdengine": "gpsimd",
    "sync": "sync", "sp": "sync", "syncengine": "sync",
    "dma": "dma", "qsyncio": "dma",
}
ENGINE_NOTE = ("dma: in the op rows and the ActiveTime timeline, Sync engine (SP) instructions (and the JSON dma rows); "
               "in the summary, DMA queues active only (dma_active_time*), never the Sync engine (shown as sync)")


def engine_of(v: Any) -> str:
    s = norm_name(str(v or ""))
    if s in ENGINE_ALIASES:
        return ENGINE_ALIASES[s]
    for k in ("tensor", "vector", "scalar", "gpsimd", "pool", "act", "sync", "dma"):
        if k in s:
            return ENGINE_ALIASES.get(k, k)
    return "none"


_NUM = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def numbers(v: Any) -> list[float]:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return []
    if isinstance(v, (int, float, np.integer, np.floating)):
        return [float(v)]
    if isinstance(v, (list, tuple, np.ndarray)):
        out: list[float] = []
        for x in v:
            out.extend(numbers(x))
        return out
    return [float(x) for x in _NUM.findall(str(v))]


def span(v: Any) -> float:
    """`total_time_<engine>`: "[min_ts, max_ts]" -> max - min; a plain number is already a duration (ns)."""
    if isinstance(v, (int, float, np.integer, np.floating)) and not (isinstance(v, float) and math.isnan(v)):
        return max(0.0, float(v))
    xs = numbers(v)
    return max(0.0, xs[-1] - xs[0]) if len(xs) >= 2 else 0.0


def union_len(s: np.ndarray, e: np.ndarray) -> int:
    if len(s) == 0:
        return 0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    prev = np.maximum.accumulate(np.concatenate([[s[0]], e[:-1]]))
    return int(np.maximum(0, e - np.maximum(s, prev)).sum())


def int_numbers(v: Any) -> list[int]:
    """The numbers inside a value as exact integers ("[[1729888371056597613, ...]]" stays exact: epoch ns do not
    fit float64)."""
    if isinstance(v, (int, np.integer)):
        return [int(v)]
    if isinstance(v, (list, tuple, np.ndarray)):
        out: list[int] = []
        for x in v:
            out.extend(int_numbers(x))
        return out
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return []
    if isinstance(v, float):
        return [round(v)]
    return [int(x) if re.fullmatch(r"-?\d+", x) else round(float(x)) for x in _NUM.findall(str(v))]


def intervals_len(v: Any) -> int | None:
    """Union length of a `time_intervals` value ("[[s, e], ...]", epoch ns), in exact integers."""
    xs = int_numbers(v)
    if len(xs) < 2:
        return None
    a = np.asarray(xs[: len(xs) // 2 * 2], dtype=np.int64).reshape(-1, 2)
    return union_len(a[:, 0], a[:, 1])


def int_col(df: pd.DataFrame, name: str, what: str | None = None) -> np.ndarray:
    """Column `name` as exact int64 (timestamps: an int64 column is taken as is, never through float64);
    a missing value is a format error naming the table column and row."""
    from neuron_studio.profiler.timebase import TimestampError, to_int_ns

    col = df[name]
    if col.dtype.kind in "iu":
        return col.to_numpy(np.int64)
    try:
        return to_int_ns(col.astype(object).tolist(), what=what or name)
    except TimestampError as e:
        raise TraceFormatError(f"Neuron profile: {e}") from None


_NKI_LOC = re.compile(r"([^'\"\[\],\s][^'\"\[\],]*?):(\d+)")


def nki_file(loc: Any) -> tuple[str, int] | None:
    """'kernels/rmsnorm.py:42' (or a list of such strings) -> ('kernels/rmsnorm.py', 42); None when absent."""
    m = _NKI_LOC.search(str(loc or ""))
    return (m.group(1).strip(), int(m.group(2))) if m else None


def op_name(seg: str) -> str:
    seg = seg.strip()
    base = re.sub(r"\[\d+\]$", "", seg)
    if base.startswith("aten."):
        return "aten::" + base[5:].split(".")[0]
    return base or seg


def split_path(name: str) -> tuple[str, str]:
    parts = [x for x in str(name).split("/") if x]
    if not parts:
        return "(unattributed)", ""
    return op_name(parts[-1]), ".".join(parts[:-1])


def num_col(df: pd.DataFrame, name: str, default: float = 0.0) -> np.ndarray:
    if name not in df.columns:
        return np.full(len(df), default, dtype=np.float64)
    return pd.to_numeric(df[name], errors="coerce").fillna(default).to_numpy(np.float64)


def str_col(df: pd.DataFrame, name: str) -> np.ndarray:
    if name not in df.columns:
        return np.full(len(df), "", dtype=object)
    return np.asarray([("" if (v is None or (isinstance(v, float) and math.isnan(v))) else str(v))
                       for v in df[name].tolist()], dtype=object)


def first_row(df: pd.DataFrame | None) -> dict[str, Any]:
    """The first row of a one-row table (Summary, Metadata) as plain Python values; {} when absent."""
    if df is None or not len(df):
        return {}
    out = {}
    for k, v in df.iloc[0].to_dict().items():
        if isinstance(v, (np.integer,)):
            v = int(v)
        elif isinstance(v, (np.floating,)):
            v = float(v)
        elif isinstance(v, (np.bool_,)):
            v = bool(v)
        out[str(k)] = v
    return out


def number_in(d: Mapping[str, Any], key: str) -> float | None:
    """`d[key]` as a finite float, or None when absent or not a finite number."""
    v = d.get(key)
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def chip_from_instance_type(instance_type: str | None) -> str | None:
    """'trn2.48xlarge' -> 'trn2', 'trn1n.32xlarge' -> 'trn1', 'trn3...' -> 'trn3'; None when not Trainium."""
    m = re.match(r"\s*trn(\d)", str(instance_type or "").lower())
    return f"trn{m.group(1)}" if m else None
