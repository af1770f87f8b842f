"""`neuron-profile` / `neuron-explorer` JSON device profiles and summary-json, mapped onto Explorer tables.

- **neuron-profile JSON** (`neuron-profile view -n file.neff -s profile.ntff --output-format json`, default file
  `ntff.json`; `view -d DIR --output-format json` writes one `device_profile_model_<id>.json` per compiled model):
  `"summary"` (a one-row list) and `"instruction"` rows. Old files name the engine in `label` ("TensorMatrix");
  2.x files in `subgroup` ("Tensor") and add `layer`, `nki_source_location`, `bir_debug_info_source_location`,
  `hbm_*_bytes`, `evt_wait_time`, plus top-level `active_time` ({engine, start_ts, end_ts}), `dma` rows and
  `metadata` (instance type). `hlo_name` is a whole HLO statement ("%add.1 = add(...)"): the op is "add.1".
- **summary-json** (`view ... --output-format summary-json`): the Summary row alone, a flat dict.

Timestamps and durations are integer ns and stay int64 (`profiler.timebase`); Summary times are seconds.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from neuron_studio.profiler.neuron_profile.tables import ExplorerTables
from neuron_studio.profiler.timebase import TimestampError, to_int_ns
from neuron_studio.profiler.trace import TraceFormatError

__all__ = ["is_neuron_profile_json", "is_summary_json", "tables_from_neuron_profile_json",
           "tables_from_summary_json", "hlo_instruction_name", "JSON_FORMATS", "format_error"]

JSON_FORMATS = {
    "neuron-profile-json": "neuron-profile JSON ('summary' + 'instruction' lists; `view --output-format json`)",
    "summary-json": "summary-json (the Summary row as a flat dict; `view --output-format summary-json`)",
    "system-profile-json": "system_profile.json (Neuron_Runtime_API_Event / Framework_Event records)",
    "system-trace-json": "system trace JSON ({'trace_event': [...]}; `neuron-explorer view --output-format json`)",
}
_SUMMARY_KEY = re.compile(r"^(total_time|total_active_time|\w+_engine_\w+|\w+_percent|event_count|trace_count)$")
_HLO_NAME = re.compile(r"^\s*%?([^\s=%]+)")


def format_error(p: Path, kind: str, what: str) -> TraceFormatError:
    """A format error that names the format the file looks like and what is missing or wrong in it."""
    return TraceFormatError(f"{str(p)!r} looks like a {JSON_FORMATS[kind]} but {what}")


def hlo_instruction_name(v: Any) -> str:
    """'%add.1 = add(%dot, %custom-call.44)' -> 'add.1' (the HLO instruction name); a bare name stays as is."""
    s = "" if v is None or (isinstance(v, float) and v != v) else str(v)
    m = _HLO_NAME.match(s)
    return m.group(1) if m else s.strip()


def is_neuron_profile_json(doc: object) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("instruction"), list)


def is_summary_json(doc: object) -> bool:
    return isinstance(doc, dict) and any(_SUMMARY_KEY.match(str(k)) for k in doc)


def scalar_row(row: Any) -> dict[str, Any]:
    """A JSON object's scalar fields (lists and nested objects dropped)."""
    if not isinstance(row, dict):
        return {}
    return {k: v for k, v in row.items() if isinstance(v, (int, float, str, bool)) or v is None}


def int_field(rows: list[dict], key: str, where: str, p: Path, kind: str, default: int | None = None) -> np.ndarray:
    """`rows[i][key]` as exact int64 ns; a missing or non-numeric value names the row and the format."""
    vals = []
    for i, r in enumerate(rows):
        v = r.get(key, default)
        if v is None:
            raise format_error(p, kind, f"{where}[{i}] has no '{key}'")
        vals.append(v)
    try:
        return to_int_ns(vals, what=f"{where}.{key}")
    except TimestampError as e:
        raise format_error(p, kind, str(e)) from None


def tables_from_neuron_profile_json(doc: dict, p: Path) -> ExplorerTables:
    kind = "neuron-profile-json"
    rows = [r for r in doc["instruction"] if isinstance(r, dict)]
    ts = int_field(rows, "timestamp", "instruction", p, kind)
    dur = int_field(rows, "duration", "instruction", p, kind, default=0)
    if len(dur) and (dur < 0).any():
        raise format_error(p, kind, f"instruction[{int(np.argmax(dur < 0))}] has a negative duration")

    def col(key: str) -> list[str]:
        return ["" if r.get(key) is None else str(r.get(key)) for r in rows]

    def num(key: str) -> np.ndarray:
        return pd.to_numeric(pd.Series([r.get(key) for r in rows], dtype=object), errors="coerce").fillna(0.0) \
            .to_numpy(np.float64)

    ins = pd.DataFrame({
        "start_ts": ts, "end_ts": ts + dur, "duration_ns": dur,
        "engine": [str(r.get("subgroup") or r.get("label") or r.get("engine") or "") for r in rows],
        "timeline_track": col("label"), "opcode": col("opcode"), "operands": col("operands"),
        "hlo_name": col("hlo_name"), "layer": col("layer"), "nki_source_location": col("nki_source_location"),
        "bir_debug_info_source_location": col("bir_debug_info_source_location"),
        "instruction_type": col("instruction_type"), "hbm_read_bytes": num("hbm_read_bytes"),
        "hbm_write_bytes": num("hbm_write_bytes"), "evt_wait_time_ns": num("evt_wait_time"),
    })
    summ = doc.get("summary")
    srow = scalar_row(summ[0] if isinstance(summ, list) and summ else summ)
    tables: dict[str, pd.DataFrame] = {"Instruction": ins}
    labels = {"Summary": "summary", "Instruction": "instruction"}
    not_captured: list[str] = []
    if srow:
        tables["Summary"] = pd.DataFrame([srow])
    else:
        tables["Summary"] = pd.DataFrame(index=[0])   # step time then comes from the instruction span (derived)
        not_captured.append("Summary (total time, engine active times)")
    meta = doc.get("metadata")
    mrow = scalar_row(meta[0] if isinstance(meta, list) and meta else meta)
    if mrow:
        tables["Metadata"] = pd.DataFrame([mrow])
        labels["Metadata"] = "metadata[0]"
    at = [r for r in doc.get("active_time") or [] if isinstance(r, dict)]
    if at:
        s = int_field(at, "start_ts", "active_time", p, kind)
        e = int_field(at, "end_ts", "active_time", p, kind)
        tables["ActiveTime"] = pd.DataFrame({"start_ts": s, "end_ts": e, "duration_ns": e - s,
                                             "engine": [str(r.get("engine") or "") for r in at],
                                             "pcore_idx": [int(r.get("pcore_idx") or 0) for r in at]})
        labels["ActiveTime"] = "active_time"
    dma = [r for r in doc.get("dma") or [] if isinstance(r, dict)]
    if dma:
        s = int_field(dma, "timestamp", "dma", p, kind)
        d = int_field(dma, "duration", "dma", p, kind, default=0)
        tables["DmaActivity"] = pd.DataFrame({
            "start_ts": s, "end_ts": s + d, "duration_ns": d, "queue": [str(r.get("subgroup") or "") for r in dma],
            "bytes": pd.to_numeric(pd.Series([r.get("transfer_size") for r in dma], dtype=object),
                                   errors="coerce").fillna(0.0).to_numpy(np.float64)})
        labels["DmaActivity"] = "dma"
    return ExplorerTables(directory=p.parent, tables=tables, source=kind, files={"*": [p.name]}, labels=labels,
                          not_captured=not_captured)


def tables_from_summary_json(doc: dict, p: Path) -> ExplorerTables:
    srow = scalar_row(doc)
    if srow.get("total_time") is None:
        raise format_error(p, "summary-json", "has no 'total_time' (the measured device time the figures divide by)")
    return ExplorerTables(directory=p.parent, tables={"Summary": pd.DataFrame([srow])}, source="summary-json",
                          files={"*": [p.name]}, labels={"Summary": "summary"},
                          not_captured=["per-op device time", "engine timeline"])
