"""Which reader for which input: find the profile (a directory of Parquet tables, its newest sub-directory
that has them, or a legacy JSON file), read it, and check the required tables are there."""
from __future__ import annotations

import json
from pathlib import Path

from neuron_studio.profiler.neuron_profile.parquet import has_summary, has_tables, read_parquet_tables
from neuron_studio.profiler.neuron_profile.profiler_json import is_neuron_profile_json, tables_from_neuron_profile_json
from neuron_studio.profiler.neuron_profile.system_profile import system_events, tables_from_system_profile
from neuron_studio.profiler.neuron_profile.tables import ExplorerTables, require_tables
from neuron_studio.profiler.trace import TraceFormatError

__all__ = ["find_profile_dir", "read_tables", "read_legacy_json"]


def find_profile_dir(path: str | Path) -> Path:
    """The directory that holds the Explorer tables: `path` itself or its newest sub-directory that does."""
    p = Path(path).expanduser()
    if not p.exists():
        raise TraceFormatError(f"Neuron Explorer output {str(p)!r} does not exist")
    if p.is_file():
        return p
    if has_tables(p) or _legacy_json_in(p) is not None:
        return p
    found = [d for depth in ("*", "*/*", "*/*/*") for d in p.glob(depth) if d.is_dir() and has_summary(d)]
    if found:
        return max(found, key=lambda d: d.stat().st_mtime)
    raise TraceFormatError(
        f"no Neuron Explorer output in {str(p)!r}: expected Summary.parquet plus Instruction.parquet or "
        "FrameworkNode.parquet (from `neuron-explorer view -d <capture dir> --output-format parquet`), "
        "or a legacy system_profile.json / neuron-profile JSON file"
    )


def _legacy_json_in(d: Path) -> Path | None:
    for name in ("system_profile.json", "profile.json"):
        if (d / name).is_file():
            return d / name
    return None


def read_tables(path: str | Path) -> ExplorerTables:
    """Read an Explorer output (Parquet directory or legacy JSON) into `ExplorerTables`; checks required tables."""
    d = find_profile_dir(path)
    if d.is_file():
        return require_tables(read_legacy_json(d))
    if not has_tables(d):
        legacy = _legacy_json_in(d)
        if legacy is not None:
            return require_tables(read_legacy_json(legacy))
    return require_tables(read_parquet_tables(d))


def read_legacy_json(path: str | Path) -> ExplorerTables:
    """`system_profile.json` or an old `neuron-profile` JSON, mapped onto Summary/Instruction-shaped tables."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise TraceFormatError(f"cannot read {str(p)!r} as JSON: {e}") from None
    if is_neuron_profile_json(doc):
        return tables_from_neuron_profile_json(doc, p)
    events = system_events(doc)
    if events is not None:
        return tables_from_system_profile(events, p)
    raise TraceFormatError(
        f"{str(p)!r} is neither a neuron-profile JSON (with 'summary' and 'instruction' lists) nor a "
        "system_profile.json (with Neuron_Runtime_API_Event / Framework_Event records)")
