"""The step-time breakdown and the what-if advisor of the inline HTML, as view models for
`templates/breakdown.html` and `templates/tabs/what_if.html`: segment widths and colours of the stacked bars,
the tab each recommendation opens and the rows it marks. Reads the summary's `breakdown` and `what_if` blocks
only (the analysis decided every number); the templates escape every field.
"""
from __future__ import annotations

from typing import Any

from neuron_studio.ui.formatting import as_number, fmt_ns, fmt_pct

__all__ = ["BREAKDOWN_COLORS", "REC_TABS", "breakdown_view", "justified_ops", "what_if_view", "prediction_text"]

BREAKDOWN_COLORS = {"compute": "#4e79a7", "collective": "#f28e2b", "fallback": "#e15759", "sync": "#b07aa1",
                    "transfer": "#9c755f", "launch": "#bab0ac", "idle": "#eeeeee"}
#: A recommendation's `tab` -> the label of the profile tab that holds its rows.
REC_TABS = {"optable": "Op table", "hot": "Hot path", "fallbacks": "Fallbacks & syncs", "syncs": "Fallbacks & syncs"}


def _segments(parts: dict[str, Any], step_ns: float | None, labels: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for key, label in labels.items():
        ns = as_number(parts.get(key))
        if ns is None or not step_ns or ns <= 0:
            continue
        out.append({"key": key, "label": label, "ns": ns, "color": BREAKDOWN_COLORS.get(key, "#888"),
                    "width": f"{max(0.0, min(100.0, ns / step_ns * 100)):.3f}",
                    "title": f"{label}: {fmt_ns(ns)} ({fmt_pct(ns / step_ns)})"})
    return out


def breakdown_view(s: dict, tab_index: dict[str, int]) -> dict[str, Any] | None:
    """The mean bar, per-step bars, the legend (undetermined categories with their reason) and the
    recommendations with the index of the tab holding their rows; None when the summary has no breakdown."""
    b = s.get("breakdown")
    if not isinstance(b, dict) or not b:
        return None
    parts = [p for p in b.get("parts") or [] if isinstance(p, dict)]
    labels = {str(p.get("key")): str(p.get("label")) for p in parts}
    step_ns = as_number(b.get("step_time_ns"))
    mean = {str(p.get("key")): p.get("ns") for p in parts}
    steps = []
    for st in b.get("steps") or []:
        if isinstance(st, dict) and isinstance(st.get("parts"), dict):
            sn = as_number(st.get("step_ns"))
            steps.append({"step": st.get("step"), "step_ns": sn, "segments": _segments(st["parts"], sn, labels)})
    recs = []
    for i, r in enumerate(b.get("recommendations") or []):
        if isinstance(r, dict):
            label = REC_TABS.get(str(r.get("tab")), "Op table")
            recs.append({"text": r.get("text"), "tab_label": label, "tab": tab_index.get(label),
                         "target": str(r.get("tab")), "index": i})
    legend = [{"label": p.get("label"), "color": BREAKDOWN_COLORS.get(str(p.get("key")), "#888"),
               "ns": p.get("ns"), "share": p.get("share"), "determined": p.get("determined", True) is not False,
               "note": p.get("note")} for p in parts
              if p.get("determined", True) is False or (as_number(p.get("ns")) or 0.0) > 0]
    return {"basis": b.get("basis"), "step_ns": step_ns, "segments": _segments(mean, step_ns, labels),
            "steps": steps if len(steps) > 1 else [], "legend": legend, "recommendations": recs,
            "notes": [str(n) for n in b.get("notes") or []], "best": _best(s)}


def justified_ops(s: dict) -> dict[str, list[str]]:
    """Per recommendation target ("optable", "hot", "fallbacks", "syncs"): the op names of the rows it cites."""
    out: dict[str, list[str]] = {}
    b = s.get("breakdown") if isinstance(s.get("breakdown"), dict) else {}
    for r in b.get("recommendations") or []:
        if isinstance(r, dict):
            out.setdefault(str(r.get("tab")), []).extend(str(o) for o in r.get("ops") or [])
    return out


def _best(s: dict) -> dict[str, Any] | None:
    w = s.get("what_if") if isinstance(s.get("what_if"), dict) else {}
    rows = [r for r in w.get("rows") or [] if isinstance(r, dict)]
    best = next((r for r in rows if r.get("variant") == w.get("best")), None)
    cur = next((r for r in rows if r.get("current")), None)
    if best is None or cur is None:
        return None
    b_ns, c_ns = as_number(best.get("step_time_ns")), as_number(cur.get("step_time_ns"))
    if not b_ns or not c_ns or b_ns >= c_ns:
        return None
    return {"variant": best.get("variant"), "step_ns": b_ns, "speedup": c_ns / b_ns, "run": best.get("run"),
            "approximate": "approximate" in str(best.get("basis") or "")}


def what_if_view(s: dict) -> dict[str, Any]:
    """The advisor's rows for the table (current row first, then the advice in its ranking, then the rest by step
    time), or the note saying why there are none."""
    w = s.get("what_if") if isinstance(s.get("what_if"), dict) else {}
    rows = [dict(r) for r in w.get("rows") or [] if isinstance(r, dict)]
    rank = {id(r): as_number(r.get("rank")) for r in rows}
    rows.sort(key=lambda r: (not r.get("current"), rank[id(r)] is None, rank[id(r)] or 0,
                             as_number(r.get("step_time_ns")) or float("inf")))
    reasons = []
    for r in rows:
        sp = as_number(r.get("speedup"))
        r["speedup_text"] = f"{sp:.2f}×" if sp else "–"
        basis = str(r.get("basis") or "")
        r["basis_label"] = ("this profile" if r.get("current") else
                            "approximate" if "approximate" in basis else
                            "scaled" if basis.startswith("the measured step scaled") else "exact (model)")
        note = f"{r['basis_label']}: {basis}"
        if not r.get("current") and note not in reasons:
            reasons.append(note)
    chip = next((r.get("chip") for r in rows if r.get("current")), None)
    return {"rows": rows, "best": w.get("best"), "note": w.get("note"), "scope_note": w.get("scope_note"),
            "reasons": reasons, "chip": chip,
            "has_cells": any(r.get("cell") and not r.get("current") for r in rows)}


def prediction_text(c: dict) -> str | None:
    """A compare block's prediction in one sentence ("predicted 41.6 µs by run 1's What if (adaptive on trn2, range
    21.6 µs–71.6 µs); this run: 41.6 µs, within the range, 1.00x the prediction"), or None without one."""
    p = c.get("prediction") if isinstance(c, dict) else None
    if not isinstance(p, dict) or as_number(p.get("step_time_ns")) is None:
        return None
    rng = (f", range {fmt_ns(p.get('low_ns'))}–{fmt_ns(p.get('high_ns'))}"
           if as_number(p.get("low_ns")) is not None and as_number(p.get("high_ns")) is not None else "")
    verdict = {True: "within the range", False: "OUTSIDE the range", None: "no range stated"}[p.get("within")]
    ratio = as_number(p.get("ratio"))
    return (f"predicted {fmt_ns(p.get('step_time_ns'))} by run {c.get('run_id')}'s What if ({p.get('variant')}{rng}); "
            f"this run: {fmt_ns(p.get('measured_ns'))}, {verdict}"
            + (f", {ratio:.2f}x the prediction" if ratio is not None else ""))
