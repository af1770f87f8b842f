"""Neuron Studio's own trace formats (Chrome JSON with `metadata.neuron_studio`, Parquet directory with
`meta.json`) read back exactly: every header, column and row is checked before it becomes a `Trace`."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from neuron_studio.profiler.trace_encoding import (
    CHROME_FORMAT, FORMAT_VERSION, OPTIONAL_TABLES, PARQUET_FORMAT, TABLES, decode_value,
)
from neuron_studio.profiler.importers.common import BadTrace, series
from neuron_studio.profiler.importers.json_text import reject_constant
from neuron_studio.profiler.trace import COMPILE_COLUMNS, HOST_COLUMNS, MEMORY_COLUMNS, OPS_COLUMNS, Trace

__all__ = ["studio_chrome_trace", "read_parquet_dir"]

_MAX_ROWS = 1 << 31
_NUMERIC_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32",
                   "float64", "bool"}
_SIMPLE = (str, int, float, bool, type(None))
_SPEC = {"ops": OPS_COLUMNS, "host": HOST_COLUMNS, "compiles": COMPILE_COLUMNS, "memory": MEMORY_COLUMNS}


def _present(ns: dict) -> tuple[str, ...]:
    """The required tables and the optional ones this file carries."""
    return TABLES + tuple(t for t in OPTIONAL_TABLES if t in ns["columns"])


def _check_header(ns: Any, fmt: str) -> None:
    if not isinstance(ns, dict):
        raise BadTrace("Neuron Studio metadata must be an object")
    if ns.get("format") != fmt:
        raise BadTrace(f"unknown Neuron Studio format {str(ns.get('format'))[:60]!r} (expected {fmt!r})")
    v = ns.get("version")
    if type(v) is not int or not 1 <= v <= FORMAT_VERSION:
        raise BadTrace(f"unsupported format version {str(v)[:20]} (this reader knows 1..{FORMAT_VERSION})")
    for key in ("columns", "dtypes", "rows"):
        if not isinstance(ns.get(key), dict):
            raise BadTrace(f"metadata {key!r} must be an object")
    for t in _present(ns):
        cols = ns["columns"].get(t)
        if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols) or len(set(cols)) != len(cols):
            raise BadTrace(f"metadata columns[{t!r}] must be a list of distinct strings")
        missing = [c for c in _SPEC[t] if c not in cols]
        if missing:
            raise BadTrace(f"table {t!r} is missing column(s) {missing}")
        n = ns["rows"].get(t)
        if type(n) is not int or not 0 <= n < _MAX_ROWS:
            raise BadTrace(f"metadata rows[{t!r}] must be a non-negative integer, got {str(n)[:30]!r}")
        if not isinstance(ns["dtypes"].get(t, {}), dict):
            raise BadTrace(f"metadata dtypes[{t!r}] must be an object")


def _decode_meta(m: Any) -> dict:
    if not isinstance(m, dict) or m.get("encoding") not in ("json", "tagged") or "value" not in m:
        raise BadTrace("metadata 'meta' must be an object with 'encoding' and 'value'")
    try:
        value = m["value"] if m["encoding"] == "json" else decode_value(m["value"])
    except ValueError as e:
        raise BadTrace(f"metadata 'meta': {e}") from None
    if not isinstance(value, dict):
        raise BadTrace("metadata 'meta' value must be an object")
    _check_meta(value)
    return value


def _check_meta(meta: dict) -> None:
    """The fields the analyses read must be usable (a trace that imports must also model)."""
    from neuron_studio.profiler.model.config import MODES
    from neuron_studio.profiler.specs import available_chips

    chip = meta.get("chip", "trn2")
    if not isinstance(chip, str) or chip.lower() not in available_chips():
        raise BadTrace(f"meta 'chip' {str(chip)[:40]!r} is not a known chip ({', '.join(available_chips())})")
    mode = meta.get("mode", "eager")
    if mode not in MODES:
        raise BadTrace(f"meta 'mode' {str(mode)[:40]!r} is not one of {', '.join(MODES)}")
    steps = meta.get("steps", 1)
    if steps is not None and (type(steps) is not int or not 0 <= steps < 1 << 40):
        raise BadTrace(f"meta 'steps' must be a non-negative integer, got {str(steps)[:40]!r}")
    wall = meta.get("wall_ns", 0)
    if type(wall) not in (int, float) or not math.isfinite(wall):
        raise BadTrace(f"meta 'wall_ns' must be a number, got {str(wall)[:40]!r}")
    figures = meta.get("figures", {})
    if not isinstance(figures, dict):
        raise BadTrace("meta 'figures' must be an object")
    wins = meta.get("step_windows", [])
    if not isinstance(wins, list) or not all(
            isinstance(w, dict) and all(type(w.get(k)) is int for k in ("step", "start_ns", "end_ns")) for w in wins):
        raise BadTrace("meta 'step_windows' must be a list of {step, start_ns, end_ns} integer objects")


def _column(values: list, dtype: str | None, table: str, col: str) -> Any:
    """Decode tagged cells, then restore a recorded numeric dtype exactly (no silent truncation)."""
    if not all(type(v) in _SIMPLE for v in values):
        try:
            values = [v if type(v) in _SIMPLE else decode_value(v) for v in values]
        except ValueError as e:
            raise BadTrace(f"table {table!r} column {col!r}: {e}") from None
    if dtype not in _NUMERIC_DTYPES:
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr
    if dtype == "bool":
        if not all(type(v) is bool for v in values):
            raise BadTrace(f"table {table!r} column {col!r} must hold true/false values")
        return np.asarray(values, dtype=bool)
    if dtype.startswith(("int", "uint")):
        if not all(type(v) is int for v in values):
            bad = next(v for v in values if type(v) is not int)
            raise BadTrace(f"table {table!r} column {col!r} must hold integers, found {str(bad)[:40]!r}")
        info = np.iinfo(dtype)
        if values and (max(values) > info.max or min(values) < info.min):
            raise BadTrace(f"table {table!r} column {col!r} has values out of range for {dtype}")
        return np.asarray(values, dtype=dtype)
    if not all(type(v) in (int, float) for v in values):
        bad = next(v for v in values if type(v) not in (int, float))
        raise BadTrace(f"table {table!r} column {col!r} must hold numbers, found {str(bad)[:40]!r}")
    arr = np.asarray(values, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise BadTrace(f"table {table!r} column {col!r} has non-finite values")
    return arr.astype(dtype)


def _frame(rows: list[list], cols: list[str], dtypes: dict, table: str) -> pd.DataFrame:
    data = {}
    for j, c in enumerate(cols):
        dt = dtypes.get(c)
        data[c] = _column([r[j] for r in rows], dt if isinstance(dt, str) else None, table, c)
    return pd.DataFrame({c: series(v) for c, v in data.items()}, columns=cols) if cols \
        else pd.DataFrame(index=range(len(rows)))


def studio_chrome_trace(doc: dict, ns: Any) -> Trace:
    _check_header(ns, CHROME_FORMAT)
    meta = _decode_meta(ns.get("meta"))
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise BadTrace("'traceEvents' must be an array")
    cols = {t: ns["columns"][t] for t in _present(ns)}
    slots: dict[str, list] = {t: [None] * ns["rows"][t] for t in ("ops", "host")}
    for i, ev in enumerate(events):
        if type(ev) is not dict:
            raise BadTrace(f"event {i} is not an object")
        args = ev.get("args")
        if type(args) is not dict:
            continue
        tag = args.get("_ns")
        if tag is None:
            continue
        if type(tag) is not dict:
            raise BadTrace(f"event {i}: '_ns' must be an object")
        table, row = tag.get("table"), tag.get("row")
        if table not in slots:
            raise BadTrace(f"event {i}: unknown table {str(table)[:40]!r}")
        if type(row) is not int or not 0 <= row < len(slots[table]):
            raise BadTrace(f"event {i}: row {str(row)[:30]!r} out of range for table {table!r}")
        if slots[table][row] is not None:
            raise BadTrace(f"event {i}: duplicate row {row} of table {table!r}")
        try:
            slots[table][row] = [args[c] for c in cols[table]]
        except KeyError as e:
            raise BadTrace(f"event {i}: {table} row {row} lacks column {e.args[0]!r}") from None
    for t, rows in slots.items():
        if rows and any(r is None for r in rows):
            missing = sum(r is None for r in rows)
            raise BadTrace(f"table {t!r}: {missing} of {len(rows)} rows missing from traceEvents")
    comp = ns.get("compiles", [])
    n_comp = ns["rows"]["compiles"]
    if not isinstance(comp, list) or len(comp) != n_comp:
        raise BadTrace(f"metadata 'compiles' must be an array of {n_comp} rows")
    if not all(isinstance(r, list) and len(r) == len(cols["compiles"]) for r in comp):
        raise BadTrace(f"metadata 'compiles' rows must be arrays of {len(cols['compiles'])} values")
    frames = {t: _frame(slots[t], cols[t], ns["dtypes"].get(t, {}), t) for t in ("ops", "host")}
    frames["compiles"] = _frame(comp, cols["compiles"], ns["dtypes"].get("compiles", {}), "compiles")
    memory = None
    if "memory" in cols:
        mem = ns.get("memory", [])
        if not isinstance(mem, list) or len(mem) != ns["rows"]["memory"] or not all(
                isinstance(r, list) and len(r) == len(cols["memory"]) for r in mem):
            raise BadTrace(f"metadata 'memory' must be an array of {ns['rows']['memory']} rows of "
                           f"{len(cols['memory'])} values")
        memory = _frame(mem, cols["memory"], ns["dtypes"].get("memory", {}), "memory")
    return Trace(ops=frames["ops"], host=frames["host"], compiles=frames["compiles"], meta=meta, memory=memory)


def read_parquet_dir(p: Path) -> Trace:
    import pyarrow as pa
    import pyarrow.parquet as pq

    mpath = p / "meta.json"
    if not mpath.is_file():
        raise BadTrace("directory has no meta.json (not a Neuron Studio trace directory)")
    try:
        doc = json.loads(mpath.read_bytes(), parse_constant=reject_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadTrace(f"meta.json is not valid JSON ({e})") from None
    _check_header(doc, PARQUET_FORMAT)
    meta = _decode_meta(doc.get("meta"))
    json_cols = doc.get("json_columns", {})
    if not isinstance(json_cols, dict):
        raise BadTrace("meta.json 'json_columns' must be an object")
    frames = {}
    for t in _present(doc):
        f = p / f"{t}.parquet"
        if not f.is_file():
            raise BadTrace(f"missing {t}.parquet")
        try:
            df = pq.read_table(f).to_pandas()
        except (pa.ArrowException, OSError) as e:
            raise BadTrace(f"{t}.parquet cannot be read ({str(e)[:200]})") from None
        cols = doc["columns"][t]
        if list(df.columns) != cols:
            raise BadTrace(f"{t}.parquet columns {list(df.columns)[:40]} differ from meta.json {cols[:40]}")
        if len(df) != doc["rows"][t]:
            raise BadTrace(f"{t}.parquet has {len(df)} rows, meta.json says {doc['rows'][t]}")
        jc = json_cols.get(t, [])
        if not isinstance(jc, list) or not all(c in cols for c in jc):
            raise BadTrace(f"meta.json json_columns[{t!r}] must list columns of {t!r}")
        for c in jc:
            try:
                df[c] = pd.Series(_column([json.loads(v, parse_constant=reject_constant)
                                           for v in df[c].tolist()], None, t, c), dtype=object, index=df.index)
            except (json.JSONDecodeError, TypeError) as e:
                raise BadTrace(f"{t}.parquet column {c!r} holds invalid JSON text ({e})") from None
        frames[t] = df
    return Trace(ops=frames["ops"], host=frames["host"], compiles=frames["compiles"], meta=meta,
                 memory=frames.get("memory"))

