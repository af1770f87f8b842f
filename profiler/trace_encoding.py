"""The exact value encoding both trace formats share (and the importers decode), the file header fields, and
atomic file writes: into a temporary sibling, then `os.replace`."""
from __future__ import annotations

import base64
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

__all__ = ["CHROME_FORMAT", "PARQUET_FORMAT", "FORMAT_VERSION", "TABLES", "OPTIONAL_TABLES", "tables_of",
           "encode_value", "decode_value", "column_values", "dtype_names", "json_meta", "dumps_ascii", "atomic_write"]

CHROME_FORMAT = "neuron-studio-chrome-trace"
PARQUET_FORMAT = "neuron-studio-parquet"
FORMAT_VERSION = 1
TABLES = ("ops", "host", "compiles")
OPTIONAL_TABLES = ("memory",)  # written when non-empty (device allocations); readers accept files without them


def tables_of(trace: Any) -> tuple[str, ...]:
    """The tables a file of `trace` holds: the required ones and the non-empty optional ones."""
    return TABLES + tuple(t for t in OPTIONAL_TABLES if len(getattr(trace, t)))


# -- exact value encoding (shared with the importers) ------------------------------------------------------
# JSON carries None/bool/int/float/str/list natively. Anything else is tagged as a one-key object whose key
# starts with "$", so decoding is unambiguous: every dict cell is tagged, never written bare.

def encode_value(v: Any) -> Any:
    """A table cell as JSON-safe data that `decode_value` turns back into an equal value."""
    if v is None or isinstance(v, (str, bool)):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return None            # missing (Trace.equals treats NaN and None alike)
        if math.isinf(f):
            return {"$float": "inf" if f > 0 else "-inf"}
        return f
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, tuple):
        return {"$tuple": [encode_value(x) for x in v]}
    if isinstance(v, (list, np.ndarray)):
        return [encode_value(x) for x in (v.tolist() if isinstance(v, np.ndarray) else v)]
    if isinstance(v, dict):
        return {"$dict": [[encode_value(k), encode_value(x)] for k, x in v.items()]}
    if isinstance(v, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(v)).decode("ascii")}
    return str(v)  # unknown objects keep their text (the only lossy case)


_MAX_DEPTH = 64


def decode_value(v: Any, depth: int = 0) -> Any:
    """Inverse of `encode_value`; raises ValueError on an unknown tag or absurd nesting."""
    if v is None or isinstance(v, (str, bool, int, float)):
        return v
    if depth > _MAX_DEPTH:
        raise ValueError(f"value nested deeper than {_MAX_DEPTH} levels")
    if isinstance(v, list):
        return [decode_value(x, depth + 1) for x in v]
    if isinstance(v, dict):
        if len(v) != 1:
            raise ValueError(f"unexpected object value with keys {sorted(map(str, v))[:5]}")
        (tag, x), = v.items()
        if tag == "$tuple" and isinstance(x, list):
            return tuple(decode_value(y, depth + 1) for y in x)
        if tag == "$float" and x in ("inf", "-inf"):
            return float(x)
        if tag == "$dict" and isinstance(x, list) and all(isinstance(p, list) and len(p) == 2 for p in x):
            out = {}
            for k, y in x:
                k = decode_value(k, depth + 1)
                try:
                    out[k] = decode_value(y, depth + 1)
                except TypeError:
                    raise ValueError(f"unhashable dict key {type(k).__name__}") from None
            return out
        if tag == "$bytes" and isinstance(x, str):
            return base64.b64decode(x.encode("ascii"), validate=True)
        raise ValueError(f"unknown value tag {str(tag)[:40]!r}")
    raise ValueError(f"unexpected value of type {type(v).__name__}")


def column_values(col: pd.Series) -> list:
    """A column as a list of JSON-safe cells (fast paths for numeric and plain string columns)."""
    kind = col.dtype.kind
    if kind in "iub":
        return col.tolist()
    if kind == "f":
        vals = col.tolist()
        if col.notna().all() and np.isfinite(col.to_numpy()).all():
            return vals
        return [encode_value(v) for v in vals]
    vals = col.tolist()
    out = vals
    for i, v in enumerate(vals):
        if v is None or type(v) is str:
            continue
        if out is vals:
            out = list(vals)
        out[i] = encode_value(v)
    return out


def dtype_names(df: pd.DataFrame) -> dict[str, str]:
    return {c: str(df[c].dtype) for c in df.columns}


def json_meta(meta: dict) -> dict:
    """The meta dict for the file: plain JSON when that round-trips exactly, else tagged like table cells."""
    try:
        plain = json.loads(json.dumps(meta, allow_nan=False))
        if plain == meta and _same_types(plain, meta):
            return {"encoding": "json", "value": plain}
    except (TypeError, ValueError, RecursionError):
        pass
    return {"encoding": "tagged", "value": encode_value(dict(meta))}


def _kind(v: Any) -> type:
    for k in (bool, int, float, str, dict, list):     # subclasses (torch's TorchVersion is a str) count as the base
        if isinstance(v, k):
            return k
    return type(v)


def _same_types(a: Any, b: Any) -> bool:
    """True when JSON kept every container and number type (1 == 1.0 and (1,) != [1] would hide changes)."""
    if _kind(a) != _kind(b):
        return False
    if isinstance(a, dict):
        return all(_same_types(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return all(_same_types(x, y) for x, y in zip(a, b))
    return True


# -- atomic writes -------------------------------------------------------------------------------------------

def atomic_write(path: Path, write: Callable[[Any], None], *, binary: bool = True) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def dumps_ascii(obj: Any) -> str:
    # ASCII only, no NaN; `<` escaped so the text can be embedded in HTML (`</script>` stays data).
    return json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")
