"""The memory tab of the inline HTML, as a view model for `templates/tabs/memory.html`: geometry of the
stacked area of bytes live by category over the step (inline SVG, no JavaScript), the peak marker (a link to
the list of what is live there), and the rows of the forecast and lever tables. Reads the summary's `memory`
block only; the template escapes every field.
"""
from __future__ import annotations

from typing import Any

from neuron_studio.ui.formatting import as_number, fmt_bytes

__all__ = ["CATEGORY_COLORS", "CATEGORY_LABELS", "memory_view", "memory_line", "fmt_bytes"]

CATEGORY_COLORS = {"parameter": "#4e79a7", "gradient": "#f28e2b", "optimizer_state": "#b07aa1",
                   "input": "#9c755f", "activation": "#59a14f", "temporary": "#bab0ac",
                   # measured HBM by usage type on Trainium (profiler.neuron_profile.device_records.HBM_GROUPS)
                   "hbm_tensors": "#59a14f", "hbm_weights": "#4e79a7", "hbm_io": "#9c755f",
                   "hbm_scratchpad": "#edc948", "hbm_instructions": "#76b7b2", "hbm_collectives": "#e15759",
                   "hbm_dma_rings": "#ff9da7", "hbm_profiler": "#bab0ac", "hbm_other": "#79706e"}
CATEGORY_LABELS = {"parameter": "parameters", "gradient": "gradients", "optimizer_state": "optimizer state",
                   "input": "input batch", "activation": "activations (saved for backward)",
                   "temporary": "temporaries", "hbm_tensors": "tensors", "hbm_weights": "weights",
                   "hbm_io": "I/O", "hbm_scratchpad": "scratchpad and spill", "hbm_instructions": "instructions",
                   "hbm_collectives": "collectives", "hbm_dma_rings": "DMA rings",
                   "hbm_profiler": "profiler buffers", "hbm_other": "other"}


def memory_line(m: dict | None) -> str:
    """The summary line: 'peak 18.3 GiB of 24 GiB (trn2, LNC=2)' (plain text)."""
    if not m:
        return ""
    return str((m.get("forecast") or {}).get("summary_line") or f"peak {fmt_bytes(m.get('peak_bytes'))}")


def memory_view(m: dict, width: int = 900, height: int = 196) -> dict[str, Any]:
    """Everything the memory template draws, computed once (numbers as strings, ready for attributes)."""
    tl = m.get("timeline") if isinstance(m.get("timeline"), dict) else {}
    cats = [c for c in m.get("categories") or [] if isinstance(tl.get(c), list)]
    total = [as_number(v) or 0.0 for v in tl.get("total") or []]
    n = len(total)
    view: dict[str, Any] = {"line": memory_line(m), "polygons": [], "steps": [], "peak": None,
                            "width": width, "height": height,
                            "legend": [{"label": CATEGORY_LABELS.get(c, c), "color": CATEGORY_COLORS.get(c, "#888"),
                                        "bytes": fmt_bytes((m.get("by_category") or {}).get(c, 0))}
                                       for c in m.get("categories") or []]}
    if not n or not cats:
        return view
    left, top, plot_h = 70, 8, height - 30
    plot_w = width - left - 10
    ymax = max(max(total), 1.0)
    xs = [left + (plot_w * i / max(n - 1, 1)) for i in range(n)]

    def y(v: float) -> float:
        return top + plot_h - plot_h * v / ymax

    lower = [0.0] * n
    for c in cats:
        upper = [lo + (as_number(v) or 0.0) for lo, v in zip(lower, tl[c])]
        if any(u > lo for u, lo in zip(upper, lower)):
            pts = " ".join(f"{x:.1f},{y(u):.1f}" for x, u in zip(xs, upper))
            back = " ".join(f"{x:.1f},{y(lo):.1f}" for x, lo in zip(reversed(xs), reversed(lower)))
            view["polygons"].append({"points": f"{pts} {back}", "color": CATEGORY_COLORS.get(c, "#888"),
                                     "label": CATEGORY_LABELS.get(c, c)})
        lower = upper
    view["steps"] = [f"{xs[s]:.1f}" for s in tl.get("step_starts") or [] if isinstance(s, int) and 0 <= s < n]
    pk = (m.get("peak") or {}).get("index")
    if isinstance(pk, int) and 0 <= pk < n:
        view["peak"] = {"x": f"{xs[pk]:.1f}", "y": f"{y(total[pk]):.1f}", "bytes": fmt_bytes(m.get("peak_bytes"))}
    view.update(top=top, bottom=top + plot_h, ymax=fmt_bytes(ymax), axis_y=height - 6, left=left,
                x_label=str(tl.get("x_label") or ""), events=tl.get("events"))
    return view
