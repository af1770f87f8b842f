"""`Trace`: what a run recorded, as plain columnar tables plus metadata. Parsed once, analysed many times.

- `ops`: one row per op executed on the `neuron` device (from the device's op events, or imported),
  with the model's derived sizes (in_bytes, out_bytes, elems, itemsize, dtype_class) so that it can be
  re-modeled without shapes, plus where it came from (module path, phase, user source line).
- `host`: host-side events from torch.profiler (or an imported Chrome trace): name, thread, times, shapes.
- `compiles`: one row per compile of a graph (compile mode), with its input shapes and why it compiled: `cause` (a
  `profiler.recompile_causes.CAUSES` key), `reason` (in words), `detail` (Dynamo's guard failures as it gave them)
  and Dynamo's `compile_id` ("0/1", as TORCH_LOGS prints it).
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

from neuron_studio.device.events import FLAG_BACKWARD, FLAG_DETERMINISTIC, OpBatch
from neuron_studio.profiler.recompile_causes import fill_causes

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
    "cause": "object", "detail": "object", "compile_id": "object",
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
        if self.compiles is not None and {"graph_key", "shapes", "recompile"} <= set(self.compiles.columns):
            self.compiles = fill_causes(self.compiles)   # recorded before causes were kept
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


def ops_frame(batch: OpBatch, *, modules: list[str] | None = None, phases: list[str] | None = None,
              steps: list[int] | np.ndarray | None = None) -> pd.DataFrame:
    """Drained op events -> the `ops` table (shapes kept as strings for display; sizes derived for the model).

    What the ops of one signature share (name, shapes, dtypes, sizes, FLOPs, policies) is computed once per
    signature and broadcast to its rows; the per-row columns are the batch's arrays."""
    from neuron_studio.profiler.model.ops import classify_engine, shape_stats

    sigs = batch.signatures
    at = batch.signature
    n = len(batch)

    def per_sig(values: list, dtype: object = object) -> np.ndarray:
        arr = np.empty(len(sigs), dtype=dtype)
        arr[:] = values
        return arr[at]

    stats = [shape_stats(s.name, classify_engine(s.name, s.is_view), s.input_shapes, s.input_dtypes,
                         s.output_shapes, s.output_dtypes, s.flops) for s in sigs]
    in_b, out_b, elems, itemsize, dclass, flops = (list(c) for c in zip(*stats)) if stats else ([],) * 6
    reads, writes = _storage_columns(batch)
    df = pd.DataFrame({
        "seq": batch.seq,
        "name": per_sig([s.name for s in sigs]),
        "overload": per_sig([s.overload for s in sigs]),
        "start_ns": batch.start_ns,
        "end_ns": batch.end_ns,
        "thread": batch.thread,
        "device_index": batch.device_index,
        "input_shapes": per_sig([_shapes_str(s.input_shapes) for s in sigs]),
        "input_dtypes": per_sig([",".join(s.input_dtypes) for s in sigs]),
        "output_shapes": per_sig([_shapes_str(s.output_shapes) for s in sigs]),
        "output_dtypes": per_sig([",".join(s.output_dtypes) for s in sigs]),
        "flops": per_sig(flops, np.float64),
        "in_bytes": per_sig(in_b, np.float64),
        "out_bytes": per_sig(out_b, np.float64),
        "elems": per_sig(elems, np.float64),
        "itemsize": per_sig(itemsize, np.int8),
        "dtype_class": per_sig(dclass, np.int8),
        "is_view": per_sig([s.is_view for s in sigs], bool),
        "is_inplace": per_sig([s.is_inplace for s in sigs], bool),
        "sync": per_sig([s.sync for s in sigs]),
        "transfer": per_sig([s.transfer for s in sigs]),
        "transfer_bytes": batch.transfer_bytes.astype(np.float64),
        "fallback": per_sig([s.fallback for s in sigs]),
        "source": batch.source,
        "graph": batch.graph,
        "deterministic": (batch.flags & FLAG_DETERMINISTIC) != 0,
        "phase": phases if phases is not None else np.where(batch.flags & FLAG_BACKWARD, "backward", "forward")
        .astype(object),
        "module": modules if modules is not None else [""] * n,
        "step": np.asarray(steps if steps is not None else np.zeros(n), dtype=np.int32),
        "tags": [",".join(t) for t in batch.tags()],
        "reads": reads,
        "writes": writes,
    })
    return df


def _storage_columns(batch: OpBatch) -> tuple[list[str | None], list[str | None]]:
    """The storages each op read and wrote, renumbered 1, 2, ... in order of first use ("3,7"; None when the
    device did not record them): the model's data dependencies between the ops of one launch."""
    n = len(batch)
    r_off, w_off = batch.reads_offsets, batch.writes_offsets
    r_len, w_len = np.diff(r_off), np.diff(w_off)
    # each row's reads, then its writes: the order ids are numbered in
    start = r_off[:-1] + w_off[:-1]
    ids = np.empty(len(batch.reads) + len(batch.writes), dtype=np.int64)
    ids[np.repeat(start - r_off[:-1], r_len) + np.arange(len(batch.reads))] = batch.reads
    ids[np.repeat(start + r_len - w_off[:-1], w_len) + np.arange(len(batch.writes))] = batch.writes
    if len(ids):
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(1, len(first) + 1)
        text = rank[inverse.reshape(-1)].astype(str).tolist()
    else:
        text = []
    keep = [s.records_storages for s in batch.signatures]
    starts, r_ends, w_ends = start.tolist(), (start + r_len).tolist(), (start + r_len + w_len).tolist()
    reads: list[str | None] = [None] * n
    writes: list[str | None] = [None] * n
    for i, s in enumerate(batch.signature.tolist()):
        if keep[s]:
            reads[i] = ",".join(text[starts[i]:r_ends[i]])
            writes[i] = ",".join(text[r_ends[i]:w_ends[i]])
    return reads, writes


def _shapes_str(shapes: tuple) -> str:
    return ";".join("x".join(str(d) for d in s) if s else "()" for s in shapes)
