"""Export a Trace (or a Profile) to files other tools open: Chrome trace JSON (Perfetto) and Parquet.

Both formats round-trip exactly through `neuron_studio.profiler.importers.read_trace`
(`read_trace(p).equals(trace)`):

- Chrome JSON: every `ops` and `host` row is one event whose `args` hold the row's exact values (ints as ints,
  strings as strings), plus `"_ns": {"table", "row"}` to put it back in place; `compiles` rows, the `meta`
  dict, column order and dtypes live under the top-level `metadata["neuron_studio"]`. Timestamps (`ts`,
  `dur`) are microsecond floats for display only. Host events go in one process ("host"); each NeuronCore is
  a process ("NeuronCore N (modeled)" or "(measured)") with one thread per engine carrying the device
  timeline from the model, and "engine utilization" counter tracks.
- Parquet: a directory `<name>/` holding `ops.parquet`, `host.parquet`, `compiles.parquet` and `meta.json`.

Files are written atomically: into a temporary sibling, then `os.replace`.
"""
from __future__ import annotations

import base64
import gzip
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pandas as pd

from neuron_studio.profiler.trace import Trace

__all__ = ["to_chrome_trace", "to_parquet", "chrome_events", "CHROME_FORMAT", "PARQUET_FORMAT", "FORMAT_VERSION",
           "DEVICE_PID_BASE", "ENGINE_THREADS"]

CHROME_FORMAT = "neuron-studio-chrome-trace"
PARQUET_FORMAT = "neuron-studio-parquet"
FORMAT_VERSION = 1
TABLES = ("ops", "host", "compiles")
# Device processes sit above any Linux pid (pid_max <= 2**22) so they never collide with the host process.
DEVICE_PID_BASE = 10_000_000
# Thread ids of the engine tracks inside a NeuronCore process, in display order.
ENGINE_THREADS: dict[str, int] = {"tensor": 1, "vector": 2, "scalar": 3, "gpsimd": 4, "dma": 5, "host": 6,
                                  "none": 7}
_THREAD_LABEL = {"host": "host (CPU fallback)", "none": "views (no device work)"}
_RESERVED_ARGS = ("_ns", "modeled")
_EVENT_CHUNK = 20_000


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


def _dtype_names(df: pd.DataFrame) -> dict[str, str]:
    return {c: str(df[c].dtype) for c in df.columns}


def _json_meta(meta: dict) -> dict:
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

def _atomic_write(path: Path, write: Callable[[Any], None], *, binary: bool = True) -> Path:
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


# -- Chrome trace JSON ---------------------------------------------------------------------------------------

def _as_profile(profile_or_trace: Any) -> Any:
    from neuron_studio.profiler.profile import Profile

    if isinstance(profile_or_trace, Trace):
        return Profile.from_trace(profile_or_trace, kernel_lookup=None)
    if isinstance(profile_or_trace, Profile):
        return profile_or_trace
    raise TypeError(f"expected a Profile or a Trace; got {type(profile_or_trace).__name__}")


def _meta_event(name: str, pid: int, tid: int, args: dict) -> dict:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "ts": 0, "args": args}


def _us(ns: np.ndarray) -> list:
    return (np.asarray(ns, dtype=np.float64) / 1000.0).tolist()


def _row_args(df: pd.DataFrame, table: str) -> Iterator[dict]:
    for c in _RESERVED_ARGS:
        if c in df.columns:
            raise ValueError(f"table {table!r} has a column named {c!r}, which the Chrome export reserves")
    cols = list(df.columns)
    values = [column_values(df[c]) for c in cols]
    for i, row in enumerate(zip(*values)):
        args = dict(zip(cols, row))
        args["_ns"] = {"table": table, "row": i}
        yield args


def chrome_events(profile: Any, *, bins: int = 200) -> Iterator[dict]:
    """The trace events of a Profile, streamed (metadata, host events, device events, counters)."""
    trace: Trace = profile.trace
    meta = trace.meta
    host_pid = meta.get("pid") if isinstance(meta.get("pid"), int) and not isinstance(meta.get("pid"), bool) \
        else 0
    host_pid = host_pid if 0 <= host_pid < DEVICE_PID_BASE else 0
    figures = meta.get("figures") if isinstance(meta.get("figures"), dict) else {}
    measured = figures.get("device_time") == "measured"
    label = "measured" if measured else "modeled"

    # host process
    host = trace.host
    yield _meta_event("process_name", host_pid, 0, {"name": "host"})
    yield _meta_event("process_sort_index", host_pid, 0, {"sort_index": 0})
    for tid in pd.unique(host["thread"]).tolist():
        yield _meta_event("thread_name", host_pid, int(tid), {"name": f"host thread {tid}"})
    if len(host):
        ts = _us(host["start_ns"].to_numpy())
        dur = _us(np.maximum(host["dur_ns"].to_numpy(), 0))
        names, cats, tids = host["name"].tolist(), host["category"].tolist(), host["thread"].tolist()
        for i, args in enumerate(_row_args(host, "host")):
            yield {"ph": "X", "name": _text(names[i]), "cat": _text(cats[i]) or "host", "pid": host_pid,
                   "tid": int(tids[i]), "ts": ts[i], "dur": dur[i], "args": args}

    # one process per NeuronCore, one thread per engine
    ops = profile.ops
    cores = sorted(int(c) for c in pd.unique(ops["core"])) if len(ops) else []
    for k, core in enumerate(cores):
        pid = DEVICE_PID_BASE + core
        yield _meta_event("process_name", pid, 0, {"name": f"NeuronCore {core} ({label})"})
        yield _meta_event("process_sort_index", pid, 0, {"sort_index": 1 + k})
        yield _meta_event("process_labels", pid, 0, {"labels": label})
        used = set(ops.loc[ops["core"] == core, "engine"].tolist())
        for eng, tid in ENGINE_THREADS.items():
            if eng in used or eng in ("tensor", "vector", "scalar", "gpsimd", "dma"):
                yield _meta_event("thread_name", pid, tid, {"name": _THREAD_LABEL.get(eng, eng)})
                yield _meta_event("thread_sort_index", pid, tid, {"sort_index": tid})
    if len(ops):
        tops = trace.ops
        ts = _us(ops["device_start_ns"].to_numpy())
        dur = _us(np.maximum(ops["device_end_ns"].to_numpy() - ops["device_start_ns"].to_numpy(), 0))
        engines, core_l = ops["engine"].tolist(), ops["core"].tolist()
        names, bound = tops["name"].tolist(), ops["bound"].tolist()
        m = profile.device_run.ops
        dev = {k: np.asarray(m[k], dtype=np.float64).tolist() for k in ("duration_ns", "launch_overhead_ns",
                                                                         "bytes_read", "bytes_written")}
        for i, args in enumerate(_row_args(tops, "ops")):
            eng = engines[i]
            args["modeled"] = {"engine": eng, "bound": bound[i], "duration_ns": dev["duration_ns"][i],
                               "launch_overhead_ns": dev["launch_overhead_ns"][i],
                               "bytes_read": dev["bytes_read"][i], "bytes_written": dev["bytes_written"][i]}
            yield {"ph": "X", "name": _text(names[i]), "cat": "device_op", "pid": DEVICE_PID_BASE + int(core_l[i]),
                   "tid": ENGINE_THREADS.get(eng, ENGINE_THREADS["none"]), "ts": ts[i], "dur": dur[i],
                   "args": args}

    # engine utilization counters, per core, on a shared time grid
    if len(ops) and bins > 0:
        from neuron_studio.profiler.analysis.utilization import ENGINES, engine_utilization

        lo, hi = int(ops["device_start_ns"].min()), int(ops["device_end_ns"].max())
        for core in cores:
            sel = ops[ops["core"] == core]
            util = profile.engine_utilization(bins=bins) if len(cores) == 1 else \
                engine_utilization(sel, bins=bins, cores=1, start_ns=lo, end_ns=hi)
            pid = DEVICE_PID_BASE + core
            starts = _us(util["start_ns"].to_numpy())
            vals = {e: util[e].round(6).tolist() for e in ENGINES}
            for b in range(len(util)):
                yield {"ph": "C", "name": "engine utilization", "pid": pid, "tid": 0, "ts": starts[b],
                       "args": {e: vals[e][b] for e in ENGINES}}
            yield {"ph": "C", "name": "engine utilization", "pid": pid, "tid": 0, "ts": _us([hi])[0],
                   "args": {e: 0.0 for e in ENGINES}}


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ("" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))


def chrome_metadata(profile: Any) -> dict:
    trace: Trace = profile.trace
    return {"neuron_studio": {
        "format": CHROME_FORMAT,
        "version": FORMAT_VERSION,
        "meta": _json_meta(trace.meta),
        "columns": {t: [str(c) for c in getattr(trace, t).columns] for t in TABLES},
        "dtypes": {t: _dtype_names(getattr(trace, t)) for t in TABLES},
        "rows": {t: int(len(getattr(trace, t))) for t in TABLES},
        "compiles": [list(r) for r in zip(*(column_values(trace.compiles[c]) for c in trace.compiles.columns))]
        if len(trace.compiles) else [],
        "device_timeline": "measured" if not profile.modeled_figures else "modeled",
        "time_base": "host events: ns since capture start; device events: the modeled per-core timeline",
    }}


def _dumps(obj: Any) -> str:
    # ASCII only, no NaN; `<` escaped so the text can be embedded in HTML (`</script>` stays data).
    return json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")


def _chrome_chunks(profile: Any, bins: int) -> Iterable[str]:
    yield '{"displayTimeUnit":"ns","metadata":' + _dumps(chrome_metadata(profile)) + ',\n"traceEvents":[\n'
    buf: list[str] = []
    first = True
    for ev in chrome_events(profile, bins=bins):
        buf.append(_dumps(ev))
        if len(buf) >= _EVENT_CHUNK:
            yield ("" if first else ",\n") + ",\n".join(buf)
            first, buf = False, []
    if buf:
        yield ("" if first else ",\n") + ",\n".join(buf)
    yield "\n]}\n"


def to_chrome_trace(profile_or_trace: Any, path: str | os.PathLike, *, bins: int = 200) -> Path:
    """Write a Chrome trace JSON (opens in Perfetto / chrome://tracing); `.gz` paths are gzip-compressed.

    A Trace is modeled first (`Profile.from_trace`) to get the device timeline. Returns the path written.
    """
    profile = _as_profile(profile_or_trace)
    path = Path(path)

    def write(fh: Any) -> None:
        out = gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) if path.suffix == ".gz" else fh
        for chunk in _chrome_chunks(profile, bins):
            out.write(chunk.encode("ascii"))
        if out is not fh:
            out.close()

    return _atomic_write(path, write)


# -- Parquet ---------------------------------------------------------------------------------------------

def _arrow_table(df: pd.DataFrame, table: str) -> tuple[Any, list[str]]:
    """An Arrow table of `df`; object columns Arrow cannot type (mixed values, lone surrogates) are stored as
    JSON text of `encode_value` cells and listed in the second item."""
    import pyarrow as pa

    json_cols: list[str] = []
    for c in df.columns:
        if not isinstance(c, str):
            raise ValueError(f"table {table!r} has a non-string column name {c!r}")
    try:
        return pa.Table.from_pandas(df, preserve_index=False), json_cols
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, UnicodeError, OverflowError):
        pass
    out = {}
    for c in df.columns:
        col = df[c]
        try:
            pa.Table.from_pandas(col.to_frame(), preserve_index=False)
            out[c] = col
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, UnicodeError, OverflowError):
            json_cols.append(c)
            out[c] = pd.Series([json.dumps(encode_value(v), ensure_ascii=True, allow_nan=False)
                                for v in col.tolist()], dtype=object)
    return pa.Table.from_pandas(pd.DataFrame(out), preserve_index=False), json_cols


def to_parquet(trace: Trace, path: str | os.PathLike) -> Path:
    """Write `trace` as a directory of Parquet tables plus `meta.json`; replaces an existing export there.

    Columnar and compressed (zstd): a 1M-op trace loads in well under a second.
    """
    import pyarrow.parquet as pq

    if not isinstance(trace, Trace):
        trace = getattr(trace, "trace", trace)
        if not isinstance(trace, Trace):
            raise TypeError(f"expected a Trace or a Profile; got {type(trace).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        json_cols = {}
        for t in TABLES:
            df = getattr(trace, t)
            table, json_cols[t] = _arrow_table(df, t)
            pq.write_table(table, tmp / f"{t}.parquet", compression="zstd")
        doc = {"format": PARQUET_FORMAT, "version": FORMAT_VERSION, "meta": _json_meta(trace.meta),
               "columns": {t: [str(c) for c in getattr(trace, t).columns] for t in TABLES},
               "dtypes": {t: _dtype_names(getattr(trace, t)) for t in TABLES},
               "rows": {t: int(len(getattr(trace, t))) for t in TABLES}, "json_columns": json_cols}
        (tmp / "meta.json").write_text(_dumps(doc), encoding="ascii")
        _replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _replace_dir(src: Path, dst: Path) -> None:
    """Move the finished directory `src` to `dst`. An existing `dst` is first moved aside, so readers see
    either the old export or the new one, never a half-written one."""
    if not dst.exists() and not dst.is_symlink():
        os.replace(src, dst)
        return
    if dst.is_dir() and not dst.is_symlink():
        if any(dst.iterdir()) and not (dst / "meta.json").exists():
            raise FileExistsError(f"{dst} exists and is not a Neuron Studio trace directory; not replacing it")
        old = Path(tempfile.mkdtemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".old"))
        os.replace(dst, old / "x")
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
        return
    raise FileExistsError(f"{dst} exists and is not a directory; not replacing it")
