"""`Trace`: what a run recorded, as plain columnar tables plus metadata. Parsed once, analysed many times.

- `ops`: one row per op executed on the `neuron` device (from the device's OpEvents, or imported),
  with the model's derived sizes (in_bytes, out_bytes, elems, itemsize, dtype_class) so that it can be
  re-modeled without shapes, plus where it came from (module path, phase, user source line).
- `host`: host-side events from torch.profiler (or an imported Chrome trace): name, thread, times, shapes.
- `compiles`: one row per compile of a graph (compile mode), with the input shapes that triggered it.
- `memory`: device memory (emulator): the storages live when the profiled steps begin, then every
  allocation and free in allocator order, each with its size, op, module, source line and category
  (profiler/memory_capture.py). Empty when nothing was recorded (real hardware, imported traces).
- `meta`: backend, chip, mode, torch version, steps, and which figures are modeled vs measured.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["Trace", "TraceFormatError", "OPS_COLUMNS", "HOST_COLUMNS", "COMPILE_COLUMNS", "MEMORY_COLUMNS",
           "ops_frame"]


class TraceFormatError(ValueError):
    """A trace file or table could not be read: names the file/table and what was wrong."""


OPS_COLUMNS: dict[str, str] = {
    "seq": "int64", "name": "object", "overload": "object", "start_ns": "int64", "end_ns": "int64",
    "thread": "int64", "device_index": "int32", "input_shapes": "object", "input_dtypes": "object",
    "output_shapes": "object", "output_dtypes": "object", "flops": "float64", "in_bytes": "float64",
    "out_bytes": "float64", "elems": "float64", "itemsize": "int8", "dtype_class": "int8", "is_view": "bool",
    "is_inplace": "bool", "sync": "object", "transfer": "object", "transfer_bytes": "float64",
    "fallback": "object", "source": "object", "graph": "int64", "deterministic": "bool", "phase": "object",
    "module": "object", "step": "int32",
}
HOST_COLUMNS: dict[str, str] = {
    "name": "object", "category": "object", "thread": "int64", "start_ns": "int64", "dur_ns": "int64",
    "input_shapes": "object", "flops": "float64", "stack": "object",
}
COMPILE_COLUMNS: dict[str, str] = {
    "graph_key": "object", "shapes": "object", "reason": "object", "compile_ns": "int64", "recompile": "bool",
}
MEMORY_COLUMNS: dict[str, str] = {
    "kind": "int8", "alloc_id": "int64", "device": "int32", "nbytes": "int64", "time_ns": "int64", "seq": "int64",
    "step": "int32", "category": "object", "name": "object", "dtype": "object", "shape": "object", "op": "object",
    "module": "object", "phase": "object", "source": "object", "output_of": "object",
}


def _empty(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({k: pd.Series([], dtype=v) for k, v in columns.items()})


def _conform(df: pd.DataFrame | None, columns: dict[str, str], table: str) -> pd.DataFrame:
    """Check required columns and dtypes; unknown extra columns are kept (forward compatibility)."""
    if df is None:
        return _empty(columns)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise TraceFormatError(f"table {table!r} is missing column(s) {missing}")
    out = df.copy() if not df.index.equals(pd.RangeIndex(len(df))) else df
    for c, dt in columns.items():
        if dt == "object":
            continue
        col = out[c]
        try:
            if dt == "bool":
                if col.dtype != bool:
                    if col.isna().any():
                        raise TraceFormatError(f"table {table!r} column {c!r} has missing values")
                    out[c] = col.astype(bool)
            else:
                arr = pd.to_numeric(col, errors="raise")
                if not np.all(np.isfinite(arr.to_numpy(dtype=np.float64, na_value=np.nan))):
                    raise TraceFormatError(f"table {table!r} column {c!r} has non-finite values")
                if dt.startswith("int"):
                    info = np.iinfo(dt)
                    if len(arr) and (arr.max() > info.max or arr.min() < info.min):
                        raise TraceFormatError(f"table {table!r} column {c!r} has values out of range for {dt}")
                out[c] = arr.astype(dt)
        except (TypeError, ValueError, OverflowError) as e:
            if isinstance(e, TraceFormatError):
                raise
            raise TraceFormatError(f"table {table!r} column {c!r} cannot be read as {dt}: {e}") from None
    return out.reset_index(drop=True)


@dataclass
class Trace:
    ops: pd.DataFrame
    host: pd.DataFrame = field(default_factory=lambda: _empty(HOST_COLUMNS))
    compiles: pd.DataFrame = field(default_factory=lambda: _empty(COMPILE_COLUMNS))
    meta: dict[str, Any] = field(default_factory=dict)
    memory: pd.DataFrame = field(default_factory=lambda: _empty(MEMORY_COLUMNS))

    def __post_init__(self) -> None:
        self.ops = _conform(self.ops, OPS_COLUMNS, "ops")
        self.memory = _conform(self.memory, MEMORY_COLUMNS, "memory")
        self.host = _conform(self.host, HOST_COLUMNS, "host")
        self.compiles = _conform(self.compiles, COMPILE_COLUMNS, "compiles")
        if (self.ops["end_ns"] < self.ops["start_ns"]).any():
            raise TraceFormatError("table 'ops' has rows that end before they start")

    @property
    def chip(self) -> str:
        return str(self.meta.get("chip", "trn2"))

    @property
    def mode(self) -> str:
        return str(self.meta.get("mode", "eager"))

    @property
    def steps(self) -> int:
        return max(1, int(self.meta.get("steps", 1) or 1))

    def equals(self, other: "Trace") -> bool:
        """Exact equality of tables and metadata (used by round-trip tests)."""
        return (
            self.meta == other.meta
            and _frames_equal(self.ops, other.ops)
            and _frames_equal(self.host, other.host)
            and _frames_equal(self.compiles, other.compiles)
            and _frames_equal(self.memory, other.memory)
        )


def _frames_equal(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return False
    for c in a.columns:
        sx, sy = a[c], b[c]
        if isinstance(sx.dtype, np.dtype) and isinstance(sy.dtype, np.dtype) and sx.dtype.kind in "biuf" \
                and sy.dtype.kind in "biuf":
            # numeric fast path: same result as comparing normalised values (NaN == NaN, 1 == 1.0 == True)
            nan = sx.dtype.kind == "f" and sy.dtype.kind == "f"
            if not np.array_equal(sx.to_numpy(), sy.to_numpy(), equal_nan=nan):
                return False
            continue
        x, y = sx.tolist(), sy.tolist()
        if x == y:  # element-wise equal implies equal after normalising; NaN cells fall through
            continue
        if [_norm(v) for v in x] != [_norm(v) for v in y]:
            return False
    return True


def _norm(v: Any) -> Any:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    return v


def ops_frame(events: list, *, modules: list[str] | None = None, phases: list[str] | None = None,
              steps: list[int] | None = None) -> pd.DataFrame:
    """OpEvents -> the `ops` table (shapes kept as strings for display; sizes derived for the model)."""
    from neuron_studio.profiler.model.columns import events_to_columns

    cols = events_to_columns(events)
    n = len(events)
    df = pd.DataFrame({
        "seq": cols.seq,
        "name": cols.name_array(),
        "overload": [e.overload for e in events],
        "start_ns": cols.start_ns,
        "end_ns": cols.end_ns,
        "thread": np.asarray([e.thread for e in events], dtype=np.int64),
        "device_index": cols.core,
        "input_shapes": [_shapes_str(e.input_shapes) for e in events],
        "input_dtypes": [",".join(e.input_dtypes) for e in events],
        "output_shapes": [_shapes_str(e.output_shapes) for e in events],
        "output_dtypes": [",".join(e.output_dtypes) for e in events],
        "flops": cols.flops,
        "in_bytes": cols.in_bytes,
        "out_bytes": cols.out_bytes,
        "elems": cols.elems,
        "itemsize": cols.itemsize,
        "dtype_class": cols.dtype_class,
        "is_view": cols.is_view,
        "is_inplace": np.asarray([e.is_inplace for e in events], dtype=bool),
        "sync": [e.sync for e in events],
        "transfer": [e.transfer for e in events],
        "transfer_bytes": cols.transfer_bytes,
        "fallback": [e.fallback for e in events],
        "source": [e.source for e in events],
        "graph": cols.graph,
        "deterministic": cols.deterministic,
        "phase": phases if phases is not None else [_phase(e) for e in events],
        "module": modules if modules is not None else [""] * n,
        "step": np.asarray(steps if steps is not None else [0] * n, dtype=np.int32),
        "tags": [",".join(e.tags) for e in events],
    })
    df["reads"], df["writes"] = _storage_columns(events)
    return df


def _storage_columns(events: list) -> tuple[list[str | None], list[str | None]]:
    """The storages each op read and wrote, renumbered 1, 2, ... in order of first use ("3,7"; None when the
    device did not record them): the model's data dependencies between the ops of one launch."""
    ids: dict[int, int] = {}

    def enc(v: tuple[int, ...] | None) -> str | None:
        if v is None:
            return None
        return ",".join(str(ids.setdefault(x, len(ids) + 1)) for x in v)

    reads, writes = [], []
    for e in events:
        reads.append(enc(e.reads))
        writes.append(enc(e.writes))
    return reads, writes


def _phase(e: Any) -> str:
    return "backward" if "backward" in e.tags else "forward"


def _shapes_str(shapes: tuple) -> str:
    return ";".join("x".join(str(d) for d in s) if s else "()" for s in shapes)
