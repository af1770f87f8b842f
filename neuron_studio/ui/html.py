"""Self-contained HTML for a profile summary: no JavaScript, no CDN, every field escaped.

Tabs are CSS-only (radio inputs), charts are inline SVG, so the output renders the same in JupyterLab,
VS Code, nbviewer and GitHub, with or without a kernel. Renders the summary payload only: no analysis here.
The markup lives in Jinja2 templates (`templates/profile.html`, one `templates/tabs/<tab>.html` per tab)
rendered with autoescaping, so no field can be inserted unescaped.

Adding a tab: write `templates/tabs/<name>.html` (it sees the summary as `s`, the formatting filters
`ns`, `pct`, `usd`, `sci`, `source`, and what you pass in `Tab.context` as `tab.context`) and append a `Tab` in
`profile_tabs` (return it only when the summary has the data).
"""
from __future__ import annotations

import html
import uuid
from dataclasses import dataclass, field
from typing import Any

from neuron_studio.profiler.profile_summary import current_summary
from neuron_studio.profiler.vocabulary import DEVICE_ENGINES
from neuron_studio.ui.formatting import as_number, fmt_ns, fmt_pct, fmt_sci, fmt_usd
from neuron_studio.ui.breakdown_html import breakdown_view, justified_ops, prediction_text, what_if_view
from neuron_studio.ui.memory_html import memory_line, memory_view
from neuron_studio.ui.templating import ENGINE_COLORS, render_template
from neuron_studio.ui.trace_html import trace_svg_view

__all__ = ["render_html", "profile_tabs", "timeline_view", "measured_view", "gpu_temporal_view", "source_line", "Tab",
           "fmt_ns", "fmt_pct", "escape", "ENGINE_COLORS"]


def escape(v: Any) -> str:
    """Anything from a trace or a cell, made safe to put into HTML built outside the templates."""
    return html.escape("" if v is None else str(v), quote=True)


@dataclass(frozen=True)
class Tab:
    """One tab of the profile view: its label and the template (under templates/) drawing its pane."""
    label: str
    template: str
    context: dict[str, Any] = field(default_factory=dict)


def profile_tabs(s: dict) -> list[Tab]:
    """The tabs of the profile view, in order; a tab whose data the summary lacks is left out."""
    tabs = [Tab("Summary", "tabs/summary.html"), Tab("Timeline", "tabs/timeline.html",
                                                     {"timeline": timeline_view(s), "trace": trace_svg_view(s)}),
            Tab("Op table", "tabs/op_table.html"), Tab("Hot path", "tabs/hot_path.html"),
            Tab("Fallbacks & syncs", "tabs/issues.html"),
            Tab("Diff", "tabs/diff.html", {"prediction": prediction_text(s.get("compare") or {})})]
    if isinstance(s.get("what_if"), dict) and s["what_if"]:
        tabs.insert(len(tabs) - 1, Tab("What if", "tabs/what_if.html", {"what_if": what_if_view(s)}))
    if isinstance(s.get("memory"), dict) and s["memory"]:
        tabs.insert(len(tabs) - 1, Tab("Memory", "tabs/memory.html", {"memory": memory_view(s["memory"])}))
    ranks = s.get("ranks_analysis")
    if isinstance(ranks, dict) and ranks:
        tabs.insert(1, Tab(f"Ranks ({len(ranks.get('ranks') or [])})", "tabs/ranks.html"))
    gpu = s.get("gpu")
    if isinstance(gpu, dict) and gpu:      # an imported CUDA/ROCm trace: measured GPU, then the port estimate
        at = 1 + (isinstance(ranks, dict) and bool(ranks))
        kind = gpu.get("device_kind") or "GPU"             # MTIA traces are not GPU traces
        tabs[at:at] = [Tab(f"{kind} (measured)", "tabs/gpu.html", {"temporal": gpu_temporal_view(gpu), "kind": kind})] + (
            [Tab(f"{kind} → Trainium", "tabs/gpu_vs_trainium.html", {"kind": kind})]
            if isinstance(gpu.get("vs_trainium"), dict) else [])
    return tabs


def gpu_temporal_view(gpu: dict) -> list[dict[str, Any]]:
    """The temporal-breakdown strip: one segment per kind with its width (%), colour and figures."""
    t = gpu.get("temporal") if isinstance(gpu.get("temporal"), dict) else {}
    out = []
    for kind, color in (("compute", "#4e79a7"), ("communication", "#f28e2b"), ("memory", "#9c755f"),
                        ("idle", "#ddd")):
        share = as_number(t.get(f"{kind}_share")) or 0.0
        out.append({"kind": kind, "color": color, "width": f"{max(0.0, min(100.0, share * 100)):.2f}",
                    "share": t.get(f"{kind}_share"), "ns": t.get(f"{kind}_ns")})
    return out


def source_line(s: dict) -> str:
    """"file · rank 0 of 2 · NVIDIA A100" for an imported trace, else ""."""
    src = s.get("source") if isinstance(s.get("source"), dict) else {}
    if not src:
        return ""
    parts = [str(src.get("file") or "trace")]
    if src.get("rank") is not None:
        parts.append(f"rank {src['rank']} of {src.get('world_size')}")
    if src.get("device"):
        parts.append(str(src["device"]))
    return " · ".join(parts)


def timeline_view(s: dict, width: int = 900, row_h: int = 14) -> dict[str, Any]:
    """Geometry of the engine-utilization SVG (one row per engine, one rect per busy bin)."""
    tl = s.get("timeline") if isinstance(s.get("timeline"), dict) else {}
    engines = [e for e in DEVICE_ENGINES if isinstance(tl.get(e), list)]
    starts = tl.get("start_ns") or []
    if not engines or not starts:
        return {"rows": [], "message": s.get("timeline_note") or "no device timeline"}
    bw = (width - 70) / len(starts)
    rows, bad = [], []
    for r, eng in enumerate(engines):
        rects = []
        for i, v in enumerate(tl[eng]):
            f = as_number(v) if v is not None else 0.0
            if f is None:
                bad.append(eng)
                break
            if f > 0:
                rects.append({"x": f"{70 + i * bw:.1f}", "width": f"{max(bw, 0.5):.1f}",
                              "opacity": f"{min(1.0, 0.15 + 0.85 * f):.2f}"})
        rows.append({"engine": eng, "y": r * row_h + 1, "label_y": r * row_h + row_h - 3,
                     "color": ENGINE_COLORS.get(eng, "#888"), "rects": rects})
    if bad:
        return {"rows": [], "message": f"timeline not drawn: non-numeric utilization for {', '.join(bad)}"}
    ends = tl.get("end_ns") or [0]
    return {"rows": rows, "width": width, "height": row_h * len(engines) + 18, "bar_h": row_h - 2,
            "axis_y": row_h * len(engines) + 14, "end": ends[-1] if isinstance(ends, list) else ends}


def measured_view(s: dict) -> dict[str, Any] | None:
    """What a measured profile was read from, what it lacks, which figures are derived (None: not stated)."""
    prov = s.get("provenance")
    if not isinstance(prov, dict):
        return None
    figures = prov.get("figures") if isinstance(prov.get("figures"), dict) else {}
    missing = prov.get("not_captured") or []
    return {"source": prov.get("measured_from"), "not_captured": missing if isinstance(missing, list) else [missing],
            "derived": [k for k, v in figures.items() if v in ("derived", "modeled")]}


def _step_range(s: dict) -> str:
    """' (lo–hi)' when a modeled step time rests on unmeasured assumptions, else ''."""
    r = s.get("step_time_range_ns")
    if not isinstance(r, (list, tuple)) or len(r) != 2:
        return ""
    lo, hi = as_number(r[0]), as_number(r[1])
    if lo is None or hi is None or hi <= lo:
        return ""
    return f" ({fmt_ns(lo)}–{fmt_ns(hi)})"


def calibration_text(s: dict) -> str:
    """The chip's calibration statement as the model produced it (profiler.model.calibration), or ''."""
    cal = s.get("calibration")
    return str(cal.get("text") or "") if isinstance(cal, dict) else ""


def _key_figures(s: dict, modeled: bool) -> list[tuple[str, str]]:
    cost = s.get("cost") if isinstance(s.get("cost"), dict) else {}
    drivers = s.get("range_drivers") if isinstance(s.get("range_drivers"), dict) else {}
    label = "step time" + (" (modeled)" if modeled else "")
    if modeled and _step_range(s) and drivers:   # the run's own range, and what drives it, beside the figure
        label += "; range from " + "; ".join(str(v) for v in drivers.values())
    tag = " (modeled)" if modeled else ""
    bd = s.get("breakdown") if isinstance(s.get("breakdown"), dict) else {}
    # an imported trace the model could not size (no shapes): its measured step, said so, not a modeled "—"
    measured_step = ([(f"step time ({bd['basis']})", fmt_ns(bd.get("step_time_ns")))]
                     if s.get("step_time_ns") is None and bd.get("step_time_ns") is not None
                     and str(bd.get("basis", "")).startswith("measured") else [])
    return measured_step + [
        (label, fmt_ns(s.get("step_time_ns")) + (_step_range(s) if modeled else "")),
        ("host time/step (measured)", fmt_ns(s.get("host_time_ns"))),
        (f"MFU{tag}", fmt_pct(s.get("mfu"))), (f"MBU{tag}", fmt_pct(s.get("mbu"))),
        ("launches/step", fmt_sci(s.get("launches"))),
        (f"cost / 1M steps ({cost.get('chip') or ''}, modeled)", fmt_usd(cost.get("per_1m_steps_usd"))),
        ("H100 / 1M steps (modeled)", fmt_usd(cost.get("h100_per_1m_steps_usd"))),
    ] + ([("peak device memory", memory_line(s["memory"]))] if isinstance(s.get("memory"), dict) and s["memory"]
         else [])


def render_html(s: dict) -> str:
    """The profile view of summary `s` (the payload of `profile_summary`, or a stored one of an older version) as
    one self-contained HTML block."""
    s = current_summary(s)
    uid = f"nstu{uuid.uuid4().hex[:10]}"  # unique per output: several profiles can share a page
    modeled = s.get("modeled", True) is not False
    badges = s.get("badges") if isinstance(s.get("badges"), dict) else {}
    drivers = s.get("range_drivers") if isinstance(s.get("range_drivers"), dict) else {}
    tabs = profile_tabs(s)
    tab_index = {t.label: i for i, t in enumerate(tabs)}
    return render_template("profile.html", s=s, uid=uid, breakdown=breakdown_view(s, tab_index),
                           justified=justified_ops(s), modeled=modeled, status=s.get("status") or "ok",
                           calibration=calibration_text(s) if modeled else "",
                           range_drivers=[str(v) for v in drivers.values()],
                           badges=badges, key_figures=_key_figures(s, modeled), tabs=tabs,
                           measured=None if modeled else measured_view(s),
                           imported=s.get("backend") == "imported", source_line=source_line(s),
                           hot_basis=s.get("hot_basis") or "modeled device time")
