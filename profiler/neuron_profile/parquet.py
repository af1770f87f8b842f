"""Neuron Explorer Parquet output (`neuron-explorer view -d DIR --output-format parquet`): one file per table,
`<Table>.parquet` or split as `<Table>_<n>.parquet`, names matched case- and separator-insensitively."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from neuron_studio.profiler.neuron_profile.tables import CANON, ExplorerTables, norm_name, require_tables
from neuron_studio.profiler.trace import TraceFormatError

__all__ = ["has_tables", "has_summary", "read_parquet_tables"]


def has_summary(d: Path) -> bool:
    return any(CANON.get(norm_name(split_stem(p.stem)[0])) == "Summary" for p in d.glob("*.parquet"))


def has_tables(d: Path) -> bool:
    return any(norm_name(split_stem(p.stem)[0]) in CANON for p in d.glob("*.parquet"))


def split_stem(stem: str) -> tuple[str, int]:
    m = re.fullmatch(r"(.+?)_(\d+)", stem)
    return (m.group(1), int(m.group(2))) if m else (stem, -1)


def read_parquet_tables(d: Path) -> ExplorerTables:
    """Every known table in directory `d` (split files read together in `n` order); checks required tables."""
    import pyarrow.parquet as pq

    parts: dict[str, list[tuple[int, Path]]] = {}
    for p in sorted(d.glob("*.parquet")):
        base, n = split_stem(p.stem)
        canon = CANON.get(norm_name(base))
        if canon is not None and p.is_file():
            parts.setdefault(canon, []).append((n, p))
    tables: dict[str, pd.DataFrame] = {}
    files: dict[str, list[str]] = {}
    for name, lst in parts.items():
        lst.sort(key=lambda t: t[0])
        frames = []
        for _, p in lst:
            try:
                frames.append(pq.read_table(p).to_pandas())
            except Exception as e:  # noqa: BLE001 - any pyarrow failure becomes a format error naming the file
                raise TraceFormatError(f"cannot read Neuron Explorer table {name!r} from {str(p)!r}: {e}") from None
        tables[name] = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        files[name] = [p.name for _, p in lst]
    return require_tables(ExplorerTables(directory=d, tables=tables, files=files))
