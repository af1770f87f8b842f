"""The old `neuron-profile` JSON (`"summary"` and `"instruction"` lists) mapped onto Summary/Instruction tables."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from neuron_studio.profiler.neuron_profile.tables import ExplorerTables
from neuron_studio.profiler.neuron_profile.values import engine_of, num_list

__all__ = ["is_neuron_profile_json", "tables_from_neuron_profile_json"]


def is_neuron_profile_json(doc: object) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("instruction"), list)


def tables_from_neuron_profile_json(doc: dict, p: Path) -> ExplorerTables:
    rows = [r for r in doc["instruction"] if isinstance(r, dict)]
    ts = num_list([r.get("timestamp") for r in rows], "instruction.timestamp", p)
    dur = num_list([r.get("duration", 0) for r in rows], "instruction.duration", p)
    ins = pd.DataFrame({
        "start_ts": ts.astype(np.int64), "end_ts": (ts + dur).astype(np.int64), "duration_ns": dur.astype(np.int64),
        "engine": [engine_of(r.get("label") or r.get("engine") or "") for r in rows],
        "timeline_track": [str(r.get("label") or "") for r in rows],
        "opcode": [str(r.get("opcode") or "") for r in rows],
        "operands": [str(r.get("operands") or "") for r in rows],
        "hlo_name": [str(r.get("hlo_name") or "") for r in rows],
    })
    summ = doc.get("summary")
    srow = summ[0] if isinstance(summ, list) and summ and isinstance(summ[0], dict) else (
        summ if isinstance(summ, dict) else {})
    srow = {k: v for k, v in srow.items() if isinstance(v, (int, float, str, bool)) or v is None}
    if "total_time" not in srow and len(ins):
        srow["total_time"] = float(ins["end_ts"].max() - ins["start_ts"].min()) * 1e-9
    tables = {"Summary": pd.DataFrame([srow]) if srow else pd.DataFrame({"total_time": [0.0]}), "Instruction": ins}
    return ExplorerTables(directory=p.parent, tables=tables, source="neuron-profile-json", files={"*": [p.name]})
