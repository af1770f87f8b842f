"""Geometry of the inline HTML's static trace view (the Timeline tab) from the summary's `trace_view`.

The inline output carries no JavaScript (it must render the same in GitHub, nbviewer, VS Code and an
untrusted JupyterLab notebook, where scripts do not run), so the trace is drawn as SVG: one row per
lane (host threads' launches, each NeuronCore's engine tracks, collectives) on one time axis with ticks,
step markers, flow lines from a launch to the device op it started, and a native tooltip per box naming
the op, its lane, times, module, source line and shapes. Zoom, search and op details with source links
are the JupyterLab extension's viewer; the tab says so.
"""
from __future__ import annotations

import math
from typing import Any

from markupsafe import Markup, escape

from neuron_studio.ui.formatting import as_number, fmt_ns, fmt_source
from neuron_studio.ui.templating import ENGINE_COLORS

__all__ = ["trace_svg_view", "nice_ticks", "SPLIT_COLOR"]

LABEL_W = 150
ROW_H = 16
TOP = 16  # room for step labels
MAX_FLOWS = 300
_TRACK_COLORS = {**ENGINE_COLORS, "collective": "#edc948", "regions": "#bab0ac"}
#: A launch region the user's code ended (an in-place op, a host read...), as in the JupyterLab viewer.
SPLIT_COLOR = "#d81b60"


def nice_ticks(span: float, target: int = 6) -> list[float]:
    """Round tick offsets (1, 2 or 5 × 10^k apart) covering [0, span]."""
    if span <= 0:
        return [0.0]
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(span // step) + 1)]


def _ints(lane: dict, key: str) -> list[int] | None:
    """The lane's column `key` as integers; None when it is missing or holds anything but numbers."""
    vals = lane.get(key)
    if not isinstance(vals, list):
        return None
    nums = [as_number(v) for v in vals]
    return None if any(n is None for n in nums) else [int(n) for n in nums]  # type: ignore[arg-type]


def _boxes_svg(boxes: list[dict], y: int, h: int) -> Markup:
    """A lane's boxes as SVG rects with their tooltips (escaped here: hundreds of rects are one join, not a
    template loop each); the lane's fill is on the group around them, an opacity only where it is not 1."""
    return Markup("".join(
        f"<rect class='ns-box' x='{b['x']}' y='{y}' width='{b['w']}' height='{h}'"
        + ("" if b["opacity"] == "1" else f" fill-opacity='{b['opacity']}'")
        + (f" fill='{b['fill']}' data-split='{b['split']}'" if b.get("fill") else "")
        + f"><title>{escape(b['title'])}</title></rect>" for b in boxes))


def _region_boxes(tv: dict, label: str, columns: list[list[int]], region_cols: list[list[int]],
                  x: Any) -> list[dict]:
    """A launch-region lane's boxes: each region's ops, what ended it and the fix in its tooltip; the regions
    the user's code ended drawn in SPLIT_COLOR."""
    starts, ends, counts = columns[:3]
    regions, splits = region_cols
    info = tv.get("regions") if isinstance(tv.get("regions"), dict) else {}
    boxes = []
    for i in range(min(len(c) for c in (*columns, *region_cols))):
        x0, x1 = x(starts[i]), x(ends[i])
        span = f"{label} · {fmt_ns(ends[i] - starts[i])} at {fmt_ns(starts[i])}"
        if counts[i] == 1 and regions[i] >= 0:
            r = info.get(str(regions[i]))
            r = r if isinstance(r, dict) else {}
            first, last = str(r.get("first_op") or "?"), str(r.get("last_op") or "?")
            ops = first if first == last else f"{first} … {last}"
            title = " · ".join(v for v in (f"launch region: {r.get('n_ops', '?')} ops ({ops})", span,
                                           f"ended: {r.get('ended_by') or '?'}",
                                           f"fix: {r['fix']}" if r.get("fix") else "") if v)
            opacity = "1"
        else:
            title = (f"{counts[i]:,} launch regions merged" + (f", {splits[i]} ended by your code" if splits[i] else "")
                     + f" · {span} (zoom in the JupyterLab viewer to separate them)")
            opacity = "0.6"
        boxes.append({"x": f"{x0:.1f}", "w": f"{max(x1 - x0, 0.6):.1f}", "title": title, "opacity": opacity,
                      "fill": SPLIT_COLOR if splits[i] else None, "split": splits[i]})
    return boxes


def trace_svg_view(s: dict, width: int = 900) -> dict[str, Any] | None:
    """Rows, boxes, ticks, steps and flows of the static trace view; None without a usable `trace_view`."""
    tv = s.get("trace_view")
    if not isinstance(tv, dict) or not isinstance(tv.get("lanes"), list):
        return None
    start, end = as_number(tv.get("start_ns")), as_number(tv.get("end_ns"))
    origin = as_number(tv.get("origin_ns"))
    if start is None or end is None or origin is None or end <= start:
        return None
    names = [str(n) for n in tv.get("names") or []]
    details = tv.get("ops") if isinstance(tv.get("ops"), dict) else {}
    plot_w = width - LABEL_W
    span = end - start

    def x(t: float) -> float:
        return LABEL_W + (t + origin - start) / span * plot_w

    rows, host_end, device_start, bad = [], {}, {}, []
    for lane in (l for l in tv["lanes"] if isinstance(l, dict)):
        y = TOP + len(rows) * ROW_H
        color = _TRACK_COLORS.get(str(lane.get("track")), "#888")
        label = str(lane.get("label") or lane.get("id") or "")
        boxes = []
        columns = [_ints(lane, k) for k in ("start", "end", "count", "busy", "seq", "name")]
        if any(c is None for c in columns):
            bad.append(label)  # said under the view, not drawn wrong
            continue
        starts, ends, counts, busy, seqs, name_ids = columns  # type: ignore[misc]
        if lane.get("kind") == "regions":
            region_cols = [_ints(lane, k) for k in ("region", "split")]
            if any(c is None for c in region_cols):
                bad.append(label)
                continue
            boxes = _region_boxes(tv, label, columns, region_cols, x)  # type: ignore[arg-type]
            rows.append({"label": label, "y": y, "label_y": y + ROW_H - 4, "h": ROW_H - 3, "color": color,
                         "boxes": boxes, "boxes_svg": _boxes_svg(boxes, y, ROW_H - 3), "kind": "regions"})
            continue
        for i in range(min(len(c) for c in columns)):  # type: ignore[arg-type]
            x0, x1 = x(starts[i]), x(ends[i])
            dur = ends[i] - starts[i]
            if counts[i] == 1 and seqs[i] >= 0:
                name = names[name_ids[i]] if 0 <= name_ids[i] < len(names) else "op"
                d = details.get(str(seqs[i]))
                d = d if isinstance(d, dict) else {}
                shapes = " → ".join(v for v in (str(d.get("input_shapes") or ""), str(d.get("output_shapes") or ""))
                                    if v)
                title = " · ".join(v for v in (
                    name, label, f"{fmt_ns(dur)} at {fmt_ns(starts[i])}", str(d.get("module") or ""),
                    fmt_source(d.get("source")), shapes and f"shapes {shapes}") if v)
                if lane.get("kind") == "host":
                    host_end[seqs[i]] = (x1, y)
                else:
                    device_start.setdefault(seqs[i], (x0, y))
                opacity = "1"
            else:
                title = (f"{counts[i]:,} ops merged · {label} · busy {fmt_ns(busy[i])} in "
                         f"{fmt_ns(starts[i])}–{fmt_ns(ends[i])} (zoom in the JupyterLab viewer to separate them)")
                opacity = f"{max(0.25, min(1.0, busy[i] / dur)) if dur > 0 else 1.0:.2f}"
            boxes.append({"x": f"{x0:.1f}", "w": f"{max(x1 - x0, 0.6):.1f}", "title": title, "opacity": opacity})
        rows.append({"label": label, "y": y, "label_y": y + ROW_H - 4, "h": ROW_H - 3, "color": color,
                     "boxes": boxes, "boxes_svg": _boxes_svg(boxes, y, ROW_H - 3), "kind": lane.get("kind")})
    height = TOP + len(rows) * ROW_H
    ticks = [{"x": f"{x(t + start - origin):.1f}", "label": fmt_ns(t)} for t in nice_ticks(span)]
    steps = [{"x": f"{x(as_number(st['start'])):.1f}", "label": f"step {st.get('step')}"}  # type: ignore[arg-type]
             for st in tv.get("steps") or [] if isinstance(st, dict) and as_number(st.get("start")) is not None]
    flows = [{"x1": f"{hx:.1f}", "y1": hy + ROW_H - 3, "x2": f"{device_start[q][0]:.1f}", "y2": device_start[q][1]}
             for q, (hx, hy) in list(host_end.items()) if q in device_start][:MAX_FLOWS]
    return {"rows": rows, "width": width, "height": height + 16, "axis_y": height + 12, "plot_top": TOP,
            "plot_bottom": height, "label_w": LABEL_W, "ticks": ticks, "steps": steps, "flows": flows,
            "total_ops": tv.get("total_ops"), "span": fmt_ns(span), "clock": tv.get("clock") or "modeled",
            "not_drawn": bad, "note": str(tv["note"]) if isinstance(tv.get("note"), str) else None}
