"""Export a Trace (or a Profile) to files other tools open: Chrome trace JSON (Perfetto) and Parquet.

Both formats round-trip exactly through `neuron_studio.profiler.importers.read_trace`
(`read_trace(p).equals(trace)`):

- Chrome JSON: every `ops` and `host` row is one event whose `args` hold the row's exact values (ints as ints,
  strings as strings), plus `"_ns": {"table", "row"}` to put it back in place; `compiles` rows, the `meta`
  dict, column order and dtypes live under the top-level `metadata["neuron_studio"]`. Timestamps (`ts`,
  `dur`) are microsecond floats for display only. Host events go in one process ("host"); each NeuronCore is
  a process ("NeuronCore N (modeled)" or "(measured)") with one thread per engine carrying the device
  timeline from the model, and "engine utilization" counter tracks.
- Parquet: a directory `<name>/` holding `ops.parquet`, `host.parquet`, `compiles.parquet` and `meta.json`
  (plus `memory.parquet` when the trace recorded device allocations; directories without it still read).

Files are written atomically: into a temporary sibling, then `os.replace`. The Chrome writer lives in
`chrome_trace` (shared with `Profile.export_chrome_trace`); the value encoding in `trace_encoding`.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from neuron_studio.profiler.chrome_trace import (
    DEVICE_PID_BASE, ENGINE_THREADS, chrome_events, chrome_metadata, write_chrome_trace,
)
from neuron_studio.profiler.trace import Trace
from neuron_studio.profiler.trace_encoding import (
    CHROME_FORMAT, FORMAT_VERSION, PARQUET_FORMAT, TABLES, decode_value, tables_of, dtype_names, dumps_ascii, encode_value,
    json_meta,
)

__all__ = ["to_chrome_trace", "to_parquet", "chrome_events", "chrome_metadata", "CHROME_FORMAT", "PARQUET_FORMAT",
           "FORMAT_VERSION", "TABLES", "DEVICE_PID_BASE", "ENGINE_THREADS", "decode_value"]


# -- Chrome trace JSON ---------------------------------------------------------------------------------------

def _as_profile(profile_or_trace: Any) -> Any:
    from neuron_studio.profiler.profile import Profile

    if isinstance(profile_or_trace, Trace):
        return Profile.from_trace(profile_or_trace, kernel_lookup=None)
    if isinstance(profile_or_trace, Profile):
        return profile_or_trace
    raise TypeError(f"expected a Profile or a Trace; got {type(profile_or_trace).__name__}")


def to_chrome_trace(profile_or_trace: Any, path: str | os.PathLike, *, bins: int = 200) -> Path:
    """Write a Chrome trace JSON (opens in Perfetto / chrome://tracing); `.gz` paths are gzip-compressed.

    A Trace is modeled first (`Profile.from_trace`) to get the device timeline. Returns the path written.
    """
    return write_chrome_trace(_as_profile(profile_or_trace), path, bins=bins)


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
        tables = tables_of(trace)
        for t in tables:
            df = getattr(trace, t)
            table, json_cols[t] = _arrow_table(df, t)
            pq.write_table(table, tmp / f"{t}.parquet", compression="zstd")
        doc = {"format": PARQUET_FORMAT, "version": FORMAT_VERSION, "meta": json_meta(trace.meta),
               "columns": {t: [str(c) for c in getattr(trace, t).columns] for t in tables},
               "dtypes": {t: dtype_names(getattr(trace, t)) for t in tables},
               "rows": {t: int(len(getattr(trace, t))) for t in tables}, "json_columns": json_cols}
        (tmp / "meta.json").write_text(dumps_ascii(doc), encoding="ascii")
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
