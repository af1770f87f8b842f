"""Read traces back into the `Trace` model: our Parquet directories, our Chrome JSON, and plain
torch.profiler Chrome traces from any PyTorch program.

`read_trace(path)` looks at the content, not the file name:

- a directory with `meta.json` → our Parquet export (exact round trip);
- Chrome JSON (optionally gzip) whose `metadata.neuron_studio` names our format → exact round trip;
- any other Chrome JSON (object with `traceEvents`, or a bare event array) → `host` gets every complete
  event; `ops` gets the innermost `cpu_op` events, their sizes derived from "Input Dims"/"Input type" (output
  shapes inferred, FLOPs from the "flops" arg when recorded); `meta` says backend "imported", figures modeled.

Anything malformed raises `TraceFormatError` naming the file and what was wrong; strings are kept verbatim.
"""
from __future__ import annotations

import contextlib
import gc
import gzip
import json
import math
import operator
import os
import zlib
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from neuron_studio.profiler.export import CHROME_FORMAT, FORMAT_VERSION, PARQUET_FORMAT, TABLES, decode_value
from neuron_studio.profiler.trace import COMPILE_COLUMNS, HOST_COLUMNS, OPS_COLUMNS, Trace, TraceFormatError

__all__ = ["read_trace", "read_trace_bytes", "trace_from_chrome", "TraceFormatError"]

_INT64_MAX = np.iinfo(np.int64).max
_MAX_ROWS = 1 << 31
_NUMERIC_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32",
                   "float64", "bool"}
_SIMPLE = (str, int, float, bool, type(None))
_EMPTY: dict = {}
_GET_PH = operator.methodcaller("get", "ph")
_FIELDS = operator.itemgetter("name", "cat", "ts", "dur", "tid")
_SPEC = {"ops": OPS_COLUMNS, "host": HOST_COLUMNS, "compiles": COMPILE_COLUMNS}


class _Bad(Exception):
    """Internal: a reason; `read_trace*` prefixes the file name and raises TraceFormatError."""


def read_trace(path: str | os.PathLike) -> Trace:
    """Read a trace file or directory (format detected from the content)."""
    p = Path(path)
    name = p.name or str(p)
    try:
        if p.is_dir():
            return _guard(name, lambda: _read_parquet_dir(p))
        with _gc_paused():
            # the file's bytes live only while they are parsed (a 1M-event trace is ~250 MB)
            doc = _guard(name, lambda: _load_json(p.read_bytes()))
            return trace_from_chrome(doc, name=name)
    except OSError as e:
        raise TraceFormatError(f"{name}: cannot be read ({e.strerror or e})") from None


def read_trace_bytes(data: bytes, *, name: str = "<memory>") -> Trace:
    """Read a Chrome trace JSON document (optionally gzip-compressed) held in memory."""
    with _gc_paused():
        doc = _guard(name, lambda: _load_json(data))
        return trace_from_chrome(doc, name=name)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing allocates millions of small dicts/lists that hold no cycles; the cyclic GC would rescan
    every live object (torch's included) many times over while they pile up."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _guard(name: str, fn: Any) -> Trace:
    try:
        with _gc_paused():
            return fn()
    except _Bad as e:
        raise TraceFormatError(f"{name}: {e}") from None
    except TraceFormatError as e:
        raise TraceFormatError(f"{name}: {e}") from None
    except RecursionError:
        raise TraceFormatError(f"{name}: nested too deeply") from None
    except MemoryError:
        raise TraceFormatError(f"{name}: too large to load in memory") from None
    except OSError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, ArithmeticError,
            UnicodeError) as e:
        # a safety net: every expected problem is named above; this keeps the contract for the rest
        raise TraceFormatError(f"{name}: unreadable trace ({type(e).__name__}: {str(e)[:200]})") from None


# -- JSON ---------------------------------------------------------------------------------------------------

def _reject_constant(s: str) -> Any:
    raise _Bad(f"non-finite number {s} in JSON")


_FAILED = object()
try:  # orjson: strict RFC 8259 like json.loads, several times faster on big traces
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a dependency; stay correct without it
    _orjson = None
try:  # pandas' bundled ujson parses about twice as fast as the json module; optional, private API
    from pandas._libs._ujson import ujson_loads as _ujson_loads
except ImportError:  # pragma: no cover - depends on the pandas build
    _ujson_loads = None


def _fast_loads(data: bytes) -> Any:
    """Parse with the fast parser when it is certain to agree with `json.loads`; else return _FAILED.

    It reads NaN as null and Infinity as a number, so documents containing those words take the exact
    path (which rejects them with a message); any error it raises is re-diagnosed by the exact path too.
    """
    if len(data) < 1 << 16:
        return _FAILED
    if _orjson is not None:  # rejects NaN/Infinity, >64-bit ints and lone surrogates: those take the exact path
        try:
            return _orjson.loads(data)
        except (_orjson.JSONDecodeError, RecursionError, MemoryError):
            return _FAILED
    if _ujson_loads is None or b"NaN" in data or b"Infinity" in data:
        return _FAILED
    try:
        return _ujson_loads(data, precise_float=True)
    except (ValueError, OverflowError, RecursionError, MemoryError):
        return _FAILED


def _load_json(data: bytes) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise _Bad(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise _Bad(f"corrupt gzip data ({e})") from None
    if len(data) < 4096 and not data.strip():
        raise _Bad("empty file")
    if data[:4] == b"PAR1":
        raise _Bad("a Parquet file; read the trace directory that contains it instead")
    fast = _fast_loads(data)
    if fast is not _FAILED:
        return fast
    try:
        return json.loads(data, parse_constant=_reject_constant)
    except _Bad:
        raise
    except RecursionError:
        raise _Bad("JSON nested too deeply") from None
    except UnicodeDecodeError as e:
        raise _Bad(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        tail = data[-256:]
        end = len(data) - (len(tail) - len(tail.rstrip()))      # e.pos counts characters: exact for ASCII
        truncated = e.pos >= end - 1 or e.msg.startswith("Unterminated string")
        what = "truncated JSON (the file ends early)" if truncated else "invalid JSON"
        raise _Bad(f"{what}: {e.msg} (line {e.lineno}, column {e.colno})") from None


def trace_from_chrome(doc: Any, *, name: str = "<memory>") -> Trace:
    """A parsed Chrome trace document → Trace (ours exactly; any other → imported host events + ops)."""
    if isinstance(doc, list):
        return _guard(name, lambda: _plain(doc, {}, name))
    if not isinstance(doc, dict):
        raise TraceFormatError(f"{name}: expected a JSON object with 'traceEvents' or an event array, "
                               f"got {type(doc).__name__}")
    md = doc.get("metadata")
    ns = md.get("neuron_studio") if isinstance(md, dict) else None
    if ns is not None:
        return _guard(name, lambda: _ours(doc, ns))
    if "traceEvents" not in doc:
        raise TraceFormatError(f"{name}: not a Chrome trace (no 'traceEvents' key)")
    events = doc["traceEvents"]
    if not isinstance(events, list):
        raise TraceFormatError(f"{name}: 'traceEvents' must be an array, got {type(events).__name__}")
    return _guard(name, lambda: _plain(events, doc, name))


# -- our formats ----------------------------------------------------------------------------------------

def _check_header(ns: Any, fmt: str) -> None:
    if not isinstance(ns, dict):
        raise _Bad("Neuron Studio metadata must be an object")
    if ns.get("format") != fmt:
        raise _Bad(f"unknown Neuron Studio format {str(ns.get('format'))[:60]!r} (expected {fmt!r})")
    v = ns.get("version")
    if type(v) is not int or not 1 <= v <= FORMAT_VERSION:
        raise _Bad(f"unsupported format version {str(v)[:20]} (this reader knows 1..{FORMAT_VERSION})")
    for key in ("columns", "dtypes", "rows"):
        if not isinstance(ns.get(key), dict):
            raise _Bad(f"metadata {key!r} must be an object")
    for t in TABLES:
        cols = ns["columns"].get(t)
        if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols) or len(set(cols)) != len(cols):
            raise _Bad(f"metadata columns[{t!r}] must be a list of distinct strings")
        missing = [c for c in _SPEC[t] if c not in cols]
        if missing:
            raise _Bad(f"table {t!r} is missing column(s) {missing}")
        n = ns["rows"].get(t)
        if type(n) is not int or not 0 <= n < _MAX_ROWS:
            raise _Bad(f"metadata rows[{t!r}] must be a non-negative integer, got {str(n)[:30]!r}")
        if not isinstance(ns["dtypes"].get(t, {}), dict):
            raise _Bad(f"metadata dtypes[{t!r}] must be an object")


def _decode_meta(m: Any) -> dict:
    if not isinstance(m, dict) or m.get("encoding") not in ("json", "tagged") or "value" not in m:
        raise _Bad("metadata 'meta' must be an object with 'encoding' and 'value'")
    try:
        value = m["value"] if m["encoding"] == "json" else decode_value(m["value"])
    except ValueError as e:
        raise _Bad(f"metadata 'meta': {e}") from None
    if not isinstance(value, dict):
        raise _Bad("metadata 'meta' value must be an object")
    _check_meta(value)
    return value


def _check_meta(meta: dict) -> None:
    """The fields the analyses read must be usable (a trace that imports must also model)."""
    from neuron_studio.profiler.model.config import MODES
    from neuron_studio.profiler.specs import available_chips

    chip = meta.get("chip", "trn2")
    if not isinstance(chip, str) or chip.lower() not in available_chips():
        raise _Bad(f"meta 'chip' {str(chip)[:40]!r} is not a known chip ({', '.join(available_chips())})")
    mode = meta.get("mode", "eager")
    if mode not in MODES:
        raise _Bad(f"meta 'mode' {str(mode)[:40]!r} is not one of {', '.join(MODES)}")
    steps = meta.get("steps", 1)
    if steps is not None and (type(steps) is not int or not 0 <= steps < 1 << 40):
        raise _Bad(f"meta 'steps' must be a non-negative integer, got {str(steps)[:40]!r}")
    wall = meta.get("wall_ns", 0)
    if type(wall) not in (int, float) or not math.isfinite(wall):
        raise _Bad(f"meta 'wall_ns' must be a number, got {str(wall)[:40]!r}")
    figures = meta.get("figures", {})
    if not isinstance(figures, dict):
        raise _Bad("meta 'figures' must be an object")


def _column(values: list, dtype: str | None, table: str, col: str) -> Any:
    """Decode tagged cells, then restore a recorded numeric dtype exactly (no silent truncation)."""
    if not all(type(v) in _SIMPLE for v in values):
        try:
            values = [v if type(v) in _SIMPLE else decode_value(v) for v in values]
        except ValueError as e:
            raise _Bad(f"table {table!r} column {col!r}: {e}") from None
    if dtype not in _NUMERIC_DTYPES:
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr
    if dtype == "bool":
        if not all(type(v) is bool for v in values):
            raise _Bad(f"table {table!r} column {col!r} must hold true/false values")
        return np.asarray(values, dtype=bool)
    if dtype.startswith(("int", "uint")):
        if not all(type(v) is int for v in values):
            bad = next(v for v in values if type(v) is not int)
            raise _Bad(f"table {table!r} column {col!r} must hold integers, found {str(bad)[:40]!r}")
        info = np.iinfo(dtype)
        if values and (max(values) > info.max or min(values) < info.min):
            raise _Bad(f"table {table!r} column {col!r} has values out of range for {dtype}")
        return np.asarray(values, dtype=dtype)
    if not all(type(v) in (int, float) for v in values):
        bad = next(v for v in values if type(v) not in (int, float))
        raise _Bad(f"table {table!r} column {col!r} must hold numbers, found {str(bad)[:40]!r}")
    arr = np.asarray(values, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise _Bad(f"table {table!r} column {col!r} has non-finite values")
    return arr.astype(dtype)


def _frame(rows: list[list], cols: list[str], dtypes: dict, table: str) -> pd.DataFrame:
    data = {}
    for j, c in enumerate(cols):
        dt = dtypes.get(c)
        data[c] = _column([r[j] for r in rows], dt if isinstance(dt, str) else None, table, c)
    return pd.DataFrame({c: _series(v) for c, v in data.items()}, columns=cols) if cols \
        else pd.DataFrame(index=range(len(rows)))


def _frame_of(cols: dict[str, np.ndarray]) -> pd.DataFrame:
    return pd.DataFrame({c: _series(np.asarray(v)) for c, v in cols.items()}, copy=False)


def _series(a: np.ndarray) -> pd.Series:
    # object stays object: pandas would otherwise infer its Arrow string dtype, which rejects lone surrogates
    return pd.Series(a, dtype=object, copy=False) if a.dtype == object else pd.Series(a, copy=False)


def _ours(doc: dict, ns: Any) -> Trace:
    _check_header(ns, CHROME_FORMAT)
    meta = _decode_meta(ns.get("meta"))
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise _Bad("'traceEvents' must be an array")
    cols = {t: ns["columns"][t] for t in TABLES}
    slots: dict[str, list] = {t: [None] * ns["rows"][t] for t in ("ops", "host")}
    for i, ev in enumerate(events):
        if type(ev) is not dict:
            raise _Bad(f"event {i} is not an object")
        args = ev.get("args")
        if type(args) is not dict:
            continue
        tag = args.get("_ns")
        if tag is None:
            continue
        if type(tag) is not dict:
            raise _Bad(f"event {i}: '_ns' must be an object")
        table, row = tag.get("table"), tag.get("row")
        if table not in slots:
            raise _Bad(f"event {i}: unknown table {str(table)[:40]!r}")
        if type(row) is not int or not 0 <= row < len(slots[table]):
            raise _Bad(f"event {i}: row {str(row)[:30]!r} out of range for table {table!r}")
        if slots[table][row] is not None:
            raise _Bad(f"event {i}: duplicate row {row} of table {table!r}")
        try:
            slots[table][row] = [args[c] for c in cols[table]]
        except KeyError as e:
            raise _Bad(f"event {i}: {table} row {row} lacks column {e.args[0]!r}") from None
    for t, rows in slots.items():
        if rows and any(r is None for r in rows):
            missing = sum(r is None for r in rows)
            raise _Bad(f"table {t!r}: {missing} of {len(rows)} rows missing from traceEvents")
    comp = ns.get("compiles", [])
    n_comp = ns["rows"]["compiles"]
    if not isinstance(comp, list) or len(comp) != n_comp:
        raise _Bad(f"metadata 'compiles' must be an array of {n_comp} rows")
    if not all(isinstance(r, list) and len(r) == len(cols["compiles"]) for r in comp):
        raise _Bad(f"metadata 'compiles' rows must be arrays of {len(cols['compiles'])} values")
    frames = {t: _frame(slots[t], cols[t], ns["dtypes"].get(t, {}), t) for t in ("ops", "host")}
    frames["compiles"] = _frame(comp, cols["compiles"], ns["dtypes"].get("compiles", {}), "compiles")
    return Trace(ops=frames["ops"], host=frames["host"], compiles=frames["compiles"], meta=meta)


def _read_parquet_dir(p: Path) -> Trace:
    import pyarrow as pa
    import pyarrow.parquet as pq

    mpath = p / "meta.json"
    if not mpath.is_file():
        raise _Bad("directory has no meta.json (not a Neuron Studio trace directory)")
    try:
        doc = json.loads(mpath.read_bytes(), parse_constant=_reject_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _Bad(f"meta.json is not valid JSON ({e})") from None
    _check_header(doc, PARQUET_FORMAT)
    meta = _decode_meta(doc.get("meta"))
    json_cols = doc.get("json_columns", {})
    if not isinstance(json_cols, dict):
        raise _Bad("meta.json 'json_columns' must be an object")
    frames = {}
    for t in TABLES:
        f = p / f"{t}.parquet"
        if not f.is_file():
            raise _Bad(f"missing {t}.parquet")
        try:
            df = pq.read_table(f).to_pandas()
        except (pa.ArrowException, OSError) as e:
            raise _Bad(f"{t}.parquet cannot be read ({str(e)[:200]})") from None
        cols = doc["columns"][t]
        if list(df.columns) != cols:
            raise _Bad(f"{t}.parquet columns {list(df.columns)[:40]} differ from meta.json {cols[:40]}")
        if len(df) != doc["rows"][t]:
            raise _Bad(f"{t}.parquet has {len(df)} rows, meta.json says {doc['rows'][t]}")
        jc = json_cols.get(t, [])
        if not isinstance(jc, list) or not all(c in cols for c in jc):
            raise _Bad(f"meta.json json_columns[{t!r}] must list columns of {t!r}")
        for c in jc:
            try:
                df[c] = pd.Series(_column([json.loads(v, parse_constant=_reject_constant)
                                           for v in df[c].tolist()], None, t, c), dtype=object, index=df.index)
            except (json.JSONDecodeError, TypeError) as e:
                raise _Bad(f"{t}.parquet column {c!r} holds invalid JSON text ({e})") from None
        frames[t] = df
    return Trace(ops=frames["ops"], host=frames["host"], compiles=frames["compiles"], meta=meta)


# -- plain torch.profiler / Chrome traces ------------------------------------------------------------------

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
_TS_LIMIT_US = 9.0e15  # int64 nanoseconds


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


class _Where:
    """Event numbers (positions in traceEvents) of the complete events, computed only for error messages."""

    def __init__(self, phs: list, extra: list[int]) -> None:
        self.phs, self.extra, self._pos = phs, extra, None

    def __call__(self, j: int) -> int:
        if self._pos is None:
            self._pos = [i for i, p in enumerate(self.phs) if p == "X"] + self.extra
        return self._pos[j]


def _fail_first(values: Any, ok: Any, what: str, where: _Where) -> None:
    for j, v in enumerate(values):
        if not ok(v):
            raise _Bad(f"event {where(j)}: {what}, got {str(v)[:60]!r}")


def _is_num(v: Any) -> bool:
    return type(v) is int or type(v) is float


def _numbers(values: Any, what: str, where: _Where) -> np.ndarray:
    if not set(map(type, values)) <= {int, float}:
        _fail_first(values, _is_num, f"{what} must be a number", where)
    try:
        arr = np.asarray(values, dtype=np.float64)
    except OverflowError:                                  # ints beyond float range
        arr = np.asarray([float(v) if abs(v) < 1e308 else math.inf for v in values])
    if not np.isfinite(arr).all():
        j = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise _Bad(f"event {where(j)}: {what} is not finite")
    return arr


def _intern_ids(values: Any, what: str, where: _Where) -> tuple[np.ndarray, dict]:
    """pid/tid values → int64 (ints as given; strings such as "Spans" numbered above 2**40)."""
    kinds = set(map(type, values))
    if kinds <= {int}:
        if values and (max(values) > _INT64_MAX or min(values) < -_INT64_MAX):
            _fail_first(values, lambda v: -_INT64_MAX <= v <= _INT64_MAX, f"{what} out of range", where)
        return np.asarray(values, dtype=np.int64), {}
    names: dict[str, int] = {}
    out = np.empty(len(values), dtype=np.int64)
    for j, v in enumerate(values):
        if type(v) is int and -_INT64_MAX <= v <= _INT64_MAX:
            out[j] = v
        elif type(v) is str:
            code = names.get(v)
            if code is None:
                code = names[v] = (1 << 40) + len(names)
            out[j] = code
        else:
            raise _Bad(f"event {where(j)}: {what} must be an integer or a string, got {str(v)[:40]!r}")
    return out, names


def _containing(start: np.ndarray, end: np.ndarray, thread: np.ndarray, r_start: np.ndarray, r_end: np.ndarray,
                r_thread: np.ndarray, r_value: np.ndarray, default: Any) -> np.ndarray:
    """Per event, the value of the latest-starting region on the same thread that contains it."""
    out = np.full(len(start), default, dtype=r_value.dtype if len(r_value) else object)
    for tid in np.unique(r_thread):
        m = thread == tid
        if not m.any():
            continue
        rm = r_thread == tid
        order = np.argsort(r_start[rm], kind="stable")
        rs, re, rv = r_start[rm][order], r_end[rm][order], r_value[rm][order]
        k = np.searchsorted(rs, start[m], side="right") - 1
        ok = (k >= 0) & (re[np.maximum(k, 0)] >= end[m])
        vals = out[m]
        vals[ok] = rv[k[ok]]
        out[m] = vals
    return out


def _plain(events: list, doc: dict, name: str) -> Trace:
    # complete events ("X"), plus B/E pairs matched per thread
    if not set(map(type, events)) <= {dict}:
        raise _Bad(f"event {next(i for i, ev in enumerate(events) if type(ev) is not dict)} is not an object")
    phs = list(map(_GET_PH, events))
    xs = [ev for ev, p in zip(events, phs) if p == "X"]
    extra: list[int] = []
    if "B" in set(phs):
        be_pos = [i for i, p in enumerate(phs) if p in ("B", "E")]
        be = _pair_begin_end([events[i] for i in be_pos], be_pos)
        xs += be
        extra = [e.pop("_pos") for e in be]
    where = _Where(phs, extra)
    n = len(xs)
    try:  # fast path: every event has all five keys (torch.profiler's do)
        names, cats, ts_l, dur_l, tid_l = zip(*map(_FIELDS, xs)) if n else ((),) * 5
    except KeyError:
        names = tuple(e.get("name") for e in xs)
        cats = tuple(e.get("cat", "") for e in xs)
        ts_l = tuple(e.get("ts") for e in xs)
        dur_l = tuple(e.get("dur", 0) for e in xs)
        tid_l = tuple(e.get("tid", 0) for e in xs)
    if not set(map(type, names)) <= {str}:
        _fail_first(names, lambda v: type(v) is str, "name must be a string", where)
    if not set(map(type, cats)) <= {str}:
        _fail_first(cats, lambda v: type(v) is str, "cat must be a string", where)
    ts = _numbers(ts_l, "ts", where)
    dur = _numbers(dur_l, "dur", where)
    if n and (dur < 0).any():
        j = int(np.flatnonzero(dur < 0)[0])
        raise _Bad(f"event {where(j)}: negative duration {dur[j]}")
    cat_arr = np.asarray(cats, dtype=object)
    # string tests run once per distinct value (a few hundred names), then broadcast through codes
    cat_codes, cat_uni = pd.factorize(cat_arr)
    cat_uni = list(cat_uni)

    def cat_is(value: str) -> np.ndarray:
        return cat_codes == cat_uni.index(value) if value in cat_uni else np.zeros(n, dtype=bool)

    keep = ~cat_is("Trace")                                         # the profiler's own whole-run span
    t0 = float(ts[keep].min()) if keep.any() else 0.0
    if n and (np.abs(ts - t0).max() > _TS_LIMIT_US or dur.max() > _TS_LIMIT_US):
        raise _Bad("timestamps or durations out of range (more than 100 days apart)")
    tids, tid_names = _intern_ids(tid_l, "tid", where)

    start_ns = np.rint((ts - t0) * 1000.0).astype(np.int64)
    dur_ns = np.rint(dur * 1000.0).astype(np.int64)
    name_arr = np.asarray(names, dtype=object)
    name_codes, name_uni = pd.factorize(name_arr)

    def name_matches(pred: Any) -> np.ndarray:
        per_name = np.fromiter((bool(pred(x)) for x in name_uni), dtype=bool, count=len(name_uni))
        return per_name[name_codes] if n else np.zeros(0, dtype=bool)

    is_cpu_op = cat_is("cpu_op") & keep
    op_rows = np.flatnonzero(is_cpu_op & name_matches(lambda x: "::" in x and not x.startswith("autograd::")))
    args = [xs[i].get("args") for i in op_rows]
    args = [a if type(a) is dict else _EMPTY for a in args]
    dims = [a.get("Input Dims") for a in args]
    in_shapes = np.full(n, None, dtype=object)
    in_shapes[op_rows] = [str(d) if type(d) is list else None for d in dims]
    flops_host = np.zeros(n)
    fl_raw = [a.get("flops", 0) for a in args]
    flops_host[op_rows] = [float(v) if type(v) in (int, float) and 0 <= v < 1e24 else 0.0 for v in fl_raw]

    host = _frame_of({
        "name": name_arr[keep], "category": cat_arr[keep], "thread": tids[keep],
        "start_ns": start_ns[keep], "dur_ns": dur_ns[keep], "input_shapes": in_shapes[keep],
        "flops": flops_host[keep], "stack": np.full(int(keep.sum()), None, dtype=object),
    })

    # ops: the outermost framework ops ("ns::op", e.g. aten::linear, aten::mm) on each thread: what a device
    # backend receives. Their children (aten::t inside aten::linear) are the op's own implementation.
    s, e, th = start_ns[op_rows], start_ns[op_rows] + dur_ns[op_rows], tids[op_rows]
    top = _outermost(s, e, th)
    leaf = top[np.lexsort((top, s[top]))]                      # by start time, then file order
    rows = op_rows[leaf]

    # phase: inside an autograd engine function → backward; step: inside "ProfilerStep#N"
    bwr = np.flatnonzero(is_cpu_op & name_matches(lambda x: x.startswith("autograd::engine::evaluate_function")))
    phase = _containing(s[leaf], e[leaf], th[leaf], start_ns[bwr], start_ns[bwr] + dur_ns[bwr], tids[bwr],
                        np.full(len(bwr), "backward", dtype=object), "forward")
    ann = np.flatnonzero(cat_is("user_annotation") & name_matches(lambda x: x.startswith("ProfilerStep#")))
    step_no = np.asarray([_step_number(name_arr[i]) for i in ann], dtype=np.int64)
    okstep = step_no >= 0
    ann, step_no = ann[okstep], step_no[okstep]
    steps = _containing(s[leaf], e[leaf], th[leaf], start_ns[ann], start_ns[ann] + dur_ns[ann], tids[ann],
                        step_no, 0).astype(np.int64) if len(ann) else np.zeros(len(rows), dtype=np.int64)
    if len(ann):
        steps = np.clip(steps, 0, np.iinfo(np.int32).max)

    memo: dict[tuple, tuple] = {}
    derived = []
    row_args = [args[j] for j in leaf.tolist()]
    for nm, sh, fl, a in zip(name_arr[rows].tolist(), in_shapes[rows].tolist(), flops_host[rows].tolist(),
                             row_args):
        types = a.get("Input type")
        try:
            key = (nm, sh, tuple(types) if type(types) is list else types, fl)
            r = memo.get(key)
        except TypeError:                                      # unhashable junk in "Input type"
            key = (nm, sh, str(types), fl)
            r = memo.get(key)
        if r is None:
            r = memo[key] = _derive(nm, a.get("Input Dims"), types, fl)
        derived.append(r)
    m = len(rows)
    cols = list(zip(*derived)) if derived else [()] * 10
    ops = _frame_of({
        "seq": np.arange(m, dtype=np.int64),
        "name": name_arr[rows],
        "overload": np.full(m, "", dtype=object),
        "start_ns": start_ns[rows],
        "end_ns": start_ns[rows] + dur_ns[rows],
        "thread": tids[rows],
        "device_index": np.zeros(m, dtype=np.int32),
        "input_shapes": np.asarray(cols[0], dtype=object),
        "input_dtypes": np.asarray(cols[1], dtype=object),
        "output_shapes": np.asarray(cols[2], dtype=object),
        "output_dtypes": np.asarray(cols[3], dtype=object),
        "flops": np.asarray(cols[9], dtype=np.float64),
        "in_bytes": np.asarray(cols[4], dtype=np.float64),
        "out_bytes": np.asarray(cols[5], dtype=np.float64),
        "elems": np.asarray(cols[6], dtype=np.float64),
        "itemsize": np.asarray(cols[7], dtype=np.int8),
        "dtype_class": np.asarray(cols[8], dtype=np.int8),
        "is_view": np.zeros(m, dtype=bool),
        "is_inplace": _per_name(name_arr[rows], _inplace),
        "sync": np.full(m, None, dtype=object),
        "transfer": np.full(m, None, dtype=object),
        "transfer_bytes": np.zeros(m),
        "fallback": np.full(m, None, dtype=object),
        "source": np.full(m, None, dtype=object),
        "graph": np.full(m, -1, dtype=np.int64),
        "deterministic": np.zeros(m, dtype=bool),
        "phase": phase,
        "module": np.full(m, "", dtype=object),
        "step": steps.astype(np.int32),
    })
    n_steps = int(np.unique(step_no).size) if len(ann) else 1
    span = int((start_ns[keep] + dur_ns[keep]).max()) if keep.any() else 0
    source_meta = {k: v for k, v in doc.items() if k != "traceEvents"
                   and (type(v) in (str, int, bool) or (type(v) is float and math.isfinite(v)))}
    meta = {
        "format": "neuron-studio-trace", "version": 1, "backend": "imported", "chip": "trn2", "mode": "eager",
        "name": name, "status": "ok", "steps": max(1, n_steps), "warmup": 0, "wall_ns": span,
        "dropped_events": 0,
        "figures": {"device_time": "modeled", "engine_utilization": "modeled", "host_time": "measured",
                    "cost": "modeled"},
        "imported": {"kind": "chrome-trace", "file": name, "events": len(events), "complete_events": n,
                     "ops": m, "start_us": t0, "output_shapes": "inferred", "trace_meta": source_meta},
    }
    if tid_names:
        meta["imported"]["thread_names"] = {str(v): k for k, v in tid_names.items()}
    return Trace(ops=ops, host=host, meta=meta)


def _outermost(start: np.ndarray, end: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Indices of events not nested inside another event of the same thread (events nest properly)."""
    keep = []
    for tid in np.unique(thread):
        idx = np.flatnonzero(thread == tid)
        order = idx[np.lexsort((-end[idx], start[idx]))]
        e = end[order]
        prev_max = np.maximum.accumulate(np.concatenate(([np.iinfo(np.int64).min], e[:-1])))
        keep.append(order[~(prev_max >= e) | (np.arange(len(order)) == 0)])
    return np.sort(np.concatenate(keep)) if keep else np.zeros(0, dtype=np.int64)


def _derive(name: str, dims: Any, types: Any, flops: float) -> tuple:
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


def _per_name(names: np.ndarray, fn: Any) -> np.ndarray:
    """`fn(name)` per row, evaluated once per distinct name."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    codes, uniq = pd.factorize(names)
    return np.asarray([fn(u) for u in uniq], dtype=bool)[codes]


def _step_number(s: str) -> int:
    tail = s[len("ProfilerStep#"):]
    return int(tail) if tail.isdigit() and len(tail) < 10 else -1


def _inplace(name: str) -> bool:
    b = name.split("::", 1)[-1].split(".", 1)[0]
    return b.endswith("_") and not b.endswith("__")


def _pair_begin_end(evs: list[dict], pos: list[int]) -> list[dict]:
    """Match "B"/"E" events per (pid, tid) into complete events (unmatched ones are dropped)."""
    stacks: dict[tuple, list] = {}
    out = []
    for ev, p in zip(evs, pos):
        key = (str(ev.get("pid")), str(ev.get("tid")))
        if ev.get("ph") == "B":
            stacks.setdefault(key, []).append((ev, p))
            continue
        st = stacks.get(key)
        if not st:
            continue
        b, bp = st.pop()
        tb, te = b.get("ts"), ev.get("ts")
        if type(tb) not in (int, float) or type(te) not in (int, float):
            raise _Bad(f"event {bp}: ts must be a number")
        args = dict(b["args"]) if type(b.get("args")) is dict else {}
        if type(ev.get("args")) is dict:
            args.update(ev["args"])
        out.append({"ph": "X", "name": b.get("name", ev.get("name")), "cat": b.get("cat", ""),
                    "pid": b.get("pid"), "tid": b.get("tid", 0), "ts": tb, "dur": te - tb, "args": args,
                    "_pos": bp})
    return out
