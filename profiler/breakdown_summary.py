"""The step-time breakdown and the what-if advisor as JSON-safe blocks of the profile summary.

Renderers (inline HTML, the JupyterLab extension, the CLI report) only draw these: every number, label,
recommendation and run line is decided here, from `Profile.step_breakdown()` and `Profile.what_if()`.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from neuron_studio.profiler.analysis import what_if as _wi
from neuron_studio.profiler.hardware_summary import hardware_notes
from neuron_studio.profiler.summary_numbers import finite_float

__all__ = ["breakdown_block", "what_if_block", "BREAKDOWN_MAX_STEPS"]
#: Per-step bars kept in the summary (the mean bar always covers every step).
BREAKDOWN_MAX_STEPS = 50


def breakdown_block(prof: Any) -> dict[str, Any]:
    """The mean step's parts (adding up to `step_time_ns`), per-step parts, recommendations and notes."""
    bd = prof.step_breakdown()
    keys = [p.key for p in bd.parts]
    steps = []
    for r in bd.per_step.head(BREAKDOWN_MAX_STEPS).itertuples(index=False):
        d = r._asdict()
        steps.append({"step": int(d["step"]), "step_ns": finite_float(d["step_ns"]),
                      "parts": {k: finite_float(d.get(k)) for k in keys}})
    return {
        "basis": bd.basis,
        "step_time_ns": finite_float(bd.step_time_ns),
        "parts": [{"key": p.key, "label": p.label, "ns": finite_float(p.ns), "share": finite_float(p.share),
                   "determined": p.determined, "note": p.note} for p in bd.parts],
        "steps": steps,
        "steps_total": int(len(bd.per_step)),
        "recommendations": [{"category": r.category, "share": finite_float(r.share), "text": r.text, "tab": r.tab,
                             "ops": list(r.ops)} for r in bd.recommendations],
        "notes": list(bd.notes) + hardware_notes(prof.trace.meta, prof.steps),
    }


def what_if_block(prof: Any) -> dict[str, Any]:
    """The advisor's rows (or why there are none) and `best`: the fastest predicted variant on the profiled chip.
    Re-modeled from the first whole steps within `what_if.REMODEL_MAX_OPS` ops: `remodeled_steps` names them
    (empty: every step) and `scope_note` says so; when one step alone is more, `note` says that instead of rows."""
    try:
        df = prof.what_if(max_ops=_wi.REMODEL_MAX_OPS)
    except _wi.WhatIfError as exc:
        return {"rows": [], "note": str(exc)}
    rows = []
    for r in df.itertuples(index=False):
        rows.append({"variant": r.variant, "kind": r.kind, "mode": r.mode, "chip": r.chip, "kernel": r.kernel,
                     "step_time_ns": finite_float(r.step_time_ns), "step_time_low_ns": finite_float(r.step_time_low_ns),
                     "step_time_high_ns": finite_float(r.step_time_high_ns), "speedup": finite_float(r.speedup),
                     "mfu": finite_float(r.mfu),
                     "cost_per_1m_steps_usd": finite_float(r.cost_per_1m_steps_usd),
                     # per 1,000 steps: what stored summaries and older front ends read (the renderers show per 1M)
                     "cost_per_1000_steps_usd": finite_float(r.cost_per_1m_steps_usd / 1000), "current": bool(r.current),
                     "basis": r.basis, "run": r.run, "where": r.where, "cell": r.cell,
                     "rank": None if pd.isna(r.rank) else int(r.rank), "why_not": r.why_not,
                     # graph compiles of the profiled steps (a compile-mode profile that recompiles, and its bucketing)
                     "compiles": None if pd.isna(r.compiles) else int(r.compiles)})
    # the advisor's first-ranked row (`what_if.rank_rows`): the change the breakdown's verdict names too
    best = next((r for r in rows if r["rank"] == 1), None)
    return {"rows": rows, "best": None if best is None else best["variant"],
            "modeled": bool(prof.modeled_figures), "note": None, "cell": _profiled_cell(prof),
            "remodeled_steps": list(df.attrs.get("remodeled_steps") or ()), "scope_note": df.attrs.get("scope_note")}


def _profiled_cell(prof: Any) -> dict[str, Any] | None:
    """The notebook cell the profile ran from (where the extension inserts a row's cell below), or None when it
    did not run from a `%%neuron` cell (CLI, imported trace, the Python API)."""
    cell = prof.trace.meta.get("cell")
    if not isinstance(cell, dict) or not isinstance(cell.get("source"), str):
        return None
    return {"source": cell["source"], "id": cell.get("id"), "notebook": cell.get("notebook")}
