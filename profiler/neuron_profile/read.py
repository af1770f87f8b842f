"""Which reader for which input: find the profile (a directory of Parquet tables, its newest sub-directory that
has them, or the JSON files the Neuron tools write), read it, and check what the format must hold is there."""
from __future__ import annotations

import json
import re
from pathlib import Path

from neuron_studio.profiler.neuron_profile.parquet import has_summary, has_tables, read_parquet_tables
from neuron_studio.profiler.neuron_profile.profiler_json import (
    JSON_FORMATS, is_neuron_profile_json, is_summary_json, tables_from_neuron_profile_json, tables_from_summary_json,
)
from neuron_studio.profiler.neuron_profile.system_profile import system_records, tables_from_system_profile
from neuron_studio.profiler.neuron_profile.tables import ExplorerTables, require_tables
from neuron_studio.profiler.trace import TraceFormatError

__all__ = ["find_profile_dir", "read_tables", "read_legacy_json", "read_neuron_json", "json_files_in"]

_DEVICE_JSON = re.compile(r"device_profile_model_.+\.json")
_DEVICE_NAMES = ("ntff.json", "profile.json")


def json_files_in(d: Path) -> tuple[Path | None, Path | None]:
    """(device profile JSON, system_profile.json) in directory `d` by the names the tools write: one
    `device_profile_model_<id>.json` (several: an error naming them), else `ntff.json` / `profile.json`; else a
    single `*.json` of unknown name as the device file."""
    models = sorted(p for p in d.glob("device_profile_model_*.json") if _DEVICE_JSON.fullmatch(p.name))
    if len(models) > 1:
        raise TraceFormatError(
            f"{str(d)!r} holds {len(models)} device profiles ({', '.join(p.name for p in models)}), one per compiled "
            "model: load one of them by file name")
    device = models[0] if models else next((d / n for n in _DEVICE_NAMES if (d / n).is_file()), None)
    system = d / "system_profile.json" if (d / "system_profile.json").is_file() else None
    if device is None and system is None:
        others = sorted(d.glob("*.json"))
        if len(others) == 1:
            device = others[0]
    return device, system


def find_profile_dir(path: str | Path) -> Path:
    """The directory that holds the profile: `path` itself or its newest sub-directory that does."""
    p = Path(path).expanduser()
    if not p.exists():
        raise TraceFormatError(f"Neuron profile {str(p)!r} does not exist")
    if p.is_file():
        return p
    if has_tables(p) or any(json_files_in(p)):
        return p
    found = [d for depth in ("*", "*/*", "*/*/*") for d in p.glob(depth) if d.is_dir() and has_summary(d)]
    if found:
        return max(found, key=lambda d: d.stat().st_mtime)
    raise TraceFormatError(
        f"no Neuron profile in {str(p)!r}: expected Summary.parquet plus Instruction.parquet or "
        "FrameworkNode.parquet (from `neuron-explorer view -d <capture dir> --output-format parquet`), or a JSON "
        "file the Neuron tools write (ntff.json, device_profile_model_<id>.json, system_profile.json, summary-json)"
    )


def read_tables(path: str | Path) -> ExplorerTables:
    """Read a Neuron profile (Parquet directory or any of the JSON formats) into `ExplorerTables`."""
    d = find_profile_dir(path)
    if d.is_file():
        return require_tables(read_neuron_json(d))
    if has_tables(d):
        return require_tables(read_parquet_tables(d))
    device, system = json_files_in(d)
    if device is not None:
        t = read_neuron_json(device)
        if system is not None and t.host is None:   # the device profile's companion: host events
            s = read_neuron_json(system)
            t.host, t.files = s.host, {"*": [device.name, system.name]}
            t.notes.append(f"host events from {system.name} (its clock is not aligned with the device timeline)")
        return require_tables(t)
    assert system is not None
    return require_tables(read_neuron_json(system))


def read_neuron_json(path: str | Path) -> ExplorerTables:
    """Any JSON file the Neuron tools write (the format is recognised by content); a `TraceFormatError` names the
    format the file looks like and the field that is missing or malformed."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise TraceFormatError(f"cannot read {str(p)!r} as JSON: {e}") from None
    if is_neuron_profile_json(doc):
        return tables_from_neuron_profile_json(doc, p)
    system = system_records(doc)
    if system is not None:
        return tables_from_system_profile(*system, p)
    if is_summary_json(doc):
        return tables_from_summary_json(doc, p)
    raise TraceFormatError(f"{str(p)!r} is none of the Neuron profiler JSON formats: expected one of "
                           + "; ".join(JSON_FORMATS.values()))


read_legacy_json = read_neuron_json     # the name the package exported before the 2.x formats
