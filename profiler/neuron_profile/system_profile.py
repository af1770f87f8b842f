"""`system_profile.json` (`Neuron_Runtime_API_Event` / `Framework_Event` records): framework events become op rows
(active time = their overlap with runtime exec events) and every event a host row."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from neuron_studio.profiler.neuron_profile.tables import ExplorerTables
from neuron_studio.profiler.neuron_profile.values import num_list, union_len

__all__ = ["system_events", "tables_from_system_profile", "SYSTEM_PROFILE_SOURCE"]

SYSTEM_PROFILE_SOURCE = "system-profile-json"


def system_events(doc: Any) -> dict[str, list[dict]] | None:
    kinds = ("Neuron_Runtime_API_Event", "Framework_Event")
    out: dict[str, list[dict]] = {k: [] for k in kinds}
    seen = False
    if isinstance(doc, dict):
        for k in kinds:
            v = doc.get(k)
            if v is None:
                continue
            seen = True
            out[k].extend([e for e in (v if isinstance(v, list) else [v]) if isinstance(e, dict)])
    elif isinstance(doc, list):
        for rec in doc:
            if isinstance(rec, dict):
                for k in kinds:
                    if isinstance(rec.get(k), dict):
                        seen = True
                        out[k].append(rec[k])
    return out if seen else None


def tables_from_system_profile(events: dict[str, list[dict]], p: Path) -> ExplorerTables:
    rt, fw = events["Neuron_Runtime_API_Event"], events["Framework_Event"]

    def frame(evs: list[dict], what: str) -> pd.DataFrame:
        ts = num_list([e.get("timestamp") for e in evs], f"{what}.timestamp", p)
        dur = num_list([e.get("duration", 0) for e in evs], f"{what}.duration", p)
        return pd.DataFrame({"name": [str(e.get("name") or "") for e in evs], "start": ts.astype(np.int64),
                             "dur": dur.astype(np.int64), "group": [str(e.get("group") or "") for e in evs]})

    r, f = frame(rt, "Neuron_Runtime_API_Event"), frame(fw, "Framework_Event")
    execs = r[r["name"].str.contains("exec", case=False)] if len(r) else r
    t0 = int(min([x for x in (r["start"].min() if len(r) else None, f["start"].min() if len(f) else None)
                  if x is not None], default=0))
    rows = []
    ex_s = execs["start"].to_numpy(np.int64) if len(execs) else np.zeros(0, np.int64)
    ex_e = ex_s + (execs["dur"].to_numpy(np.int64) if len(execs) else np.zeros(0, np.int64))
    for ev in f.itertuples(index=False):
        s, e = int(ev.start), int(ev.start + ev.dur)
        if len(ex_s):
            cs, ce = np.clip(ex_s, s, e), np.clip(ex_e, s, e)
            active = union_len(cs[ce > cs], ce[ce > cs])
        else:
            active = e - s
        rows.append({"framework_name": ev.name, "start_ts": s, "end_ts": e, "active_ns": active})
    ops = pd.DataFrame(rows, columns=["framework_name", "start_ts", "end_ts", "active_ns"])
    if len(ex_s):
        total = (int(ex_e.max()) - int(ex_s.min())) * 1e-9
    elif len(f):
        total = float((f["start"] + f["dur"]).max() - f["start"].min()) * 1e-9
    else:
        total = 0.0
    host = pd.DataFrame({
        "name": list(r["name"]) + list(f["name"]),
        "category": ["neuron_rt"] * len(r) + ["framework"] * len(f),
        "thread": np.zeros(len(r) + len(f), dtype=np.int64),
        "start_ns": np.concatenate([r["start"].to_numpy(np.int64), f["start"].to_numpy(np.int64)]) - t0,
        "dur_ns": np.concatenate([r["dur"].to_numpy(np.int64), f["dur"].to_numpy(np.int64)]),
        "input_shapes": [None] * (len(r) + len(f)), "flops": np.zeros(len(r) + len(f)),
        "stack": [None] * (len(r) + len(f)),
    })
    tables = {"Summary": pd.DataFrame({"total_time": [total]}), "_SystemOps": ops}
    # registered under FrameworkNode's slot so `require_tables` accepts it; `measured_run` reads the marker source
    tables["FrameworkNode"] = pd.DataFrame({"node_name": ops["framework_name"], "children_names": ["[]"] * len(ops),
                                            "start_ts": ops["start_ts"], "end_ts": ops["end_ts"],
                                            "time_intervals": [f"[[{a}, {a + d}]]" for a, d in
                                                               zip(ops["start_ts"], ops["active_ns"])]})
    return ExplorerTables(directory=p.parent, tables=tables, source=SYSTEM_PROFILE_SOURCE,
                          files={"*": [p.name]}, host=host)
