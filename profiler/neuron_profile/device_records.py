"""The Explorer tables (schema 7.4.0, `tools/neuron-explorer/profile-schema-reference.rst`, aws-neuron-sdk @81ce03ae)
that answer questions the studio asks of a hardware capture, each turned into a small JSON-safe record:

- `hbm_usage`: HBM bytes by usage type over time (`SystemProfileHbmUsage`) -> the Memory tab's timeline;
- `collectives`: what the collective engines ran and for how long (`CcOp`);
- `dependencies`: where the device waited between dependent rows (`Flow.gap_time`);
- `explorer_warnings`: Explorer's own ingestion warnings (`Warning`), shown with the profile;
- `throttling`: time the hardware limited utilization, and to what (`Throttle`, `ThrottleSummary`);
- `active_window`: `Summary.total_active_time` (union of engine, DMA and CC activity); `total_time` also holds the
  idle start-up of a real capture (~2 ms), so the active window is the figure to compare steps by.

All are measured (read from the profile); none is modeled. Timestamps are epoch ns, rebased on the profile's
origin in integers.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from neuron_studio.profiler.neuron_profile.tables import ExplorerTables
from neuron_studio.profiler.neuron_profile.values import int_col, num_col, number_in, str_col, union_len
from neuron_studio.profiler.summary_numbers import finite_float

__all__ = ["HBM_GROUPS", "HBM_BINS", "hbm_usage", "collectives", "dependencies", "explorer_warnings", "throttling",
           "active_window", "device_records"]

#: SystemProfileHbmUsage usage types grouped into the Memory tab's categories (every documented column once).
HBM_GROUPS: dict[str, tuple[str, ...]] = {
    "hbm_tensors": ("tensors_bytes",),
    "hbm_weights": ("weights_bytes",),
    "hbm_io": ("io_bytes",),
    "hbm_scratchpad": ("scratchpad_bytes", "shared_scratchpad_bytes", "dram_spill_bytes"),
    "hbm_instructions": ("tensor_instructions_bytes", "scalar_instructions_bytes", "vector_instructions_bytes",
                         "gpsimd_instructions_bytes", "sync_instructions_bytes", "ucode_lib_bytes",
                         "scalar_table_bytes"),
    "hbm_collectives": ("collectives_bytes", "dma_rings_collectives_bytes"),
    "hbm_dma_rings": ("dma_rings_runtime_bytes", "dma_rings_spill_bytes", "dma_rings_io_bytes"),
    "hbm_profiler": ("profiler_buffers_bytes",),
    "hbm_other": ("generic_bytes", "gpsimd_stdio_bytes", "unknown_bytes"),
}
HBM_BINS = 120
_SOURCE = "measured: Neuron Explorer {} (schema 7.4.0)"


def hbm_usage(t: ExplorerTables, t0: int, *, bins: int = HBM_BINS) -> dict[str, Any] | None:
    """HBM by category over the capture: each (device, HBM) series held until its next sample and summed at every
    sample time, then binned keeping each bin's highest total (the peak is drawn exactly). None without the table."""
    df = t.get("SystemProfileHbmUsage")
    if df is None or not len(df) or "timestamp" not in df.columns:
        return None
    ts = int_col(df, "timestamp", "SystemProfileHbmUsage.timestamp") - np.int64(t0)
    series = list(zip(num_col(df, "device_idx").astype(np.int64), num_col(df, "hbm_idx").astype(np.int64)))
    keys = sorted(set(series))
    times = np.unique(ts)
    cats = {g: np.zeros(len(times)) for g in HBM_GROUPS}
    total = np.zeros(len(times))
    for key in keys:
        m = np.asarray([s == key for s in series])
        order = np.argsort(ts[m], kind="stable")
        st = ts[m][order]
        at = np.searchsorted(st, times, side="right") - 1          # this series' last sample at each time
        live = at >= 0
        for g, cols in HBM_GROUPS.items():
            v = sum(num_col(df.loc[m], c)[order] for c in cols if c in df.columns)
            if not isinstance(v, np.ndarray):
                continue
            cats[g][live] += v[at[live]]
        tot = num_col(df.loc[m], "total_bytes")[order] if "total_bytes" in df.columns else \
            sum(num_col(df.loc[m], c)[order] for cols in HBM_GROUPS.values() for c in cols if c in df.columns)
        total[live] += np.asarray(tot)[at[live]]
    summed = sum(cats.values())
    gap = total - summed
    notes = []
    if (np.abs(gap) > 1).any():   # total_bytes is the documented total: any remainder is shown, never dropped
        cats["hbm_other"] = cats["hbm_other"] + np.maximum(gap, 0)
        notes.append("total_bytes exceeds the sum of the usage types at some samples: the rest is in 'other'")
    ipk = int(np.argmax(total))
    edges = np.linspace(0, len(times), min(bins, len(times)) + 1).astype(int)
    pick = [lo + int(np.argmax(total[lo:hi])) for lo, hi in zip(edges[:-1], edges[1:]) if hi > lo]
    used = [g for g in HBM_GROUPS if cats[g].any()]
    if len(keys) > 1:
        notes.append(f"summed over {len(keys)} (device, HBM) series: "
                     + ", ".join(f"device {d} HBM {h}" for d, h in keys))
    return {
        "x_ns": [int(times[i]) for i in pick], "total": [int(total[i]) for i in pick],
        "categories": used, **{g: [int(cats[g][i]) for i in pick] for g in used},
        "peak_bytes": int(total[ipk]), "peak_at_ns": int(times[ipk]),
        "by_category_at_peak": {g: int(cats[g][ipk]) for g in used},
        "samples": int(len(df)), "series": len(keys), "notes": notes,
        "groups": {g: list(HBM_GROUPS[g]) for g in used},
        "source": _SOURCE.format("SystemProfileHbmUsage") + ": HBM bytes by usage type (the runtime's whole "
                                                          "HBM, not only the allocator's tensors)",
    }


def collectives(t: ExplorerTables) -> dict[str, Any] | None:
    """Per collective operation: count, device time, bytes moved and mean bus bandwidth; the trigger delay."""
    df = t.get("CcOp")
    if df is None or not len(df) or "operation" not in df.columns:
        return None
    s, e = int_col(df, "start_ts", "CcOp.start_ts"), int_col(df, "end_ts", "CcOp.end_ts")
    nbytes = np.maximum(num_col(df, "input_size"), num_col(df, "output_size"))
    f = pd.DataFrame({"op": str_col(df, "operation"), "alg": str_col(df, "algorithm"), "ns": (e - s).astype(float),
                      "bytes": nbytes, "bus": num_col(df, "bus_bandwidth", np.nan),
                      "delay": num_col(df, "cc_trigger_start_delay")})
    rows = []
    for (op, alg), g in f.groupby(["op", "alg"], sort=False):
        bus = g["bus"].dropna()
        rows.append({"operation": op, "algorithm": alg, "count": int(len(g)), "time_ns": int(g["ns"].sum()),
                     "bytes": int(g["bytes"].sum()), "bus_bandwidth_bytes_per_s": float(bus.mean()) if len(bus) else None,
                     "trigger_delay_ns": int(g["delay"].sum())})
    rows.sort(key=lambda r: -r["time_ns"])
    return {"ops": rows, "count": int(len(df)), "time_ns": int(union_len(s, e)),
            "source": _SOURCE.format("CcOp") + " (time: union of the operations' windows)"}


def dependencies(t: ExplorerTables, top: int = 5) -> dict[str, Any] | None:
    """Where dependent rows waited on each other: the gap (end of the input event -> start of the output event)
    summed per (input table, output table, dependency type), largest first."""
    df = t.get("Flow")
    if df is None or not len(df):
        return None
    f = pd.DataFrame({"from": str_col(df, "in_table"), "to": str_col(df, "out_table"),
                      "type": str_col(df, "dependency_type"), "gap": num_col(df, "gap_time")})
    g = f.groupby(["from", "to", "type"], sort=False)["gap"].agg(["count", "sum", "max"]).sort_values(
        "sum", ascending=False)
    return {"edges": int(len(df)), "gap_ns": int(f["gap"].sum()),
            "top": [{"from": a, "to": b, "type": c or None, "edges": int(r["count"]), "gap_ns": int(r["sum"]),
                     "max_gap_ns": int(r["max"])} for (a, b, c), r in g.head(top).iterrows()],
            "source": _SOURCE.format("Flow") + " (gap_time per dependency edge)"}


def explorer_warnings(t: ExplorerTables) -> list[str]:
    """Explorer's own warnings ("worth checking first: rows here can indicate a data-quality problem")."""
    df = t.get("Warning")
    if df is None or not len(df):
        return []
    return [f"Neuron Explorer ({c or 'warning'}): {m}" for m, c in zip(str_col(df, "message"), str_col(df, "category"))
            if m]


def throttling(t: ExplorerTables) -> dict[str, Any] | None:
    """Time under hardware throttling (union of the events' windows) and the time-weighted utilization limit k/n."""
    df = t.get("Throttle")
    summ = t.get("ThrottleSummary")
    if (df is None or not len(df)) and (summ is None or not len(summ)):
        return None
    out: dict[str, Any] = {"source": _SOURCE.format("Throttle")}
    if df is not None and len(df) and {"timestamp", "duration"} <= set(df.columns):
        s = int_col(df, "timestamp", "Throttle.timestamp")
        d = num_col(df, "duration").astype(np.int64)
        k, n = num_col(df, "k"), num_col(df, "n")
        lim = np.where(n > 0, k / np.where(n > 0, n, 1), np.nan)
        w = d.astype(float)
        ok = np.isfinite(lim) & (w > 0)
        out.update(events=int(len(df)), time_ns=int(union_len(s, s + d)),
                   mean_limit=float((lim[ok] * w[ok]).sum() / w[ok].sum()) if ok.any() else None,
                   types=sorted(set(str_col(df, "type")) - {""}))
    if summ is not None and len(summ) and "throttle_active_time_ns" in summ.columns:
        allrows = summ[str_col(summ, "throttle_type") == "all"] if "throttle_type" in summ.columns else summ
        out["summary_time_ns"] = int(num_col(allrows, "throttle_active_time_ns").sum())
        out["source"] += "; ThrottleSummary"
    return out


def active_window(summ: Mapping[str, Any]) -> dict[str, Any] | None:
    """Summary.total_active_time (s) as ns, beside total_time (which includes idle start-up)."""
    active = finite_float(number_in(summ, "total_active_time"))
    if active is None:
        return None
    total = finite_float(number_in(summ, "total_time"))
    return {"active_ns": active * 1e9, "total_ns": total * 1e9 if total is not None else None,
            "idle_ns": (total - active) * 1e9 if total is not None else None,
            "source": "measured: Summary.total_active_time (union of engine, DMA and CC activity); total_time also "
                      "holds idle time such as the capture's start-up"}


def device_records(t: ExplorerTables, summ: Mapping[str, Any], t0: int) -> dict[str, Any]:
    """Every record above that the profile has (absent tables are simply absent keys)."""
    out: dict[str, Any] = {}
    for key, value in (("hbm_usage", hbm_usage(t, t0)), ("collectives", collectives(t)),
                       ("dependencies", dependencies(t)), ("throttling", throttling(t)),
                       ("active_window", active_window(summ))):
        if value is not None:
            out[key] = value
    return out
