"""Self-contained HTML for a profile summary: no JavaScript, no CDN, every string escaped.

Tabs are CSS-only (radio inputs), charts are inline SVG, so the output renders the same in JupyterLab,
VS Code, nbviewer and GitHub, with or without a kernel. Renders the summary payload only: no analysis here.
"""
from __future__ import annotations

import html
import uuid
from typing import Any

from neuron_studio.profiler.vocabulary import DEVICE_ENGINES

__all__ = ["render_html", "fmt_ns", "fmt_pct", "escape", "CSS"]

ENGINE_COLORS = {"tensor": "#4e79a7", "vector": "#59a14f", "scalar": "#f28e2b", "gpsimd": "#b07aa1",
                 "dma": "#9c755f", "host": "#e15759"}

CSS = """
.nstu{font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:13px;color:var(--jp-ui-font-color1,#222);max-width:980px}
.nstu .hd{display:flex;gap:8px;align-items:baseline;flex-wrap:wrap;margin-bottom:6px}
.nstu .tt{font-weight:600;font-size:14px}
.nstu .tag{border-radius:3px;padding:0 5px;font-size:11px;background:#eef;color:#335}
.nstu .tag.mod{background:#fff3cd;color:#7a5b00}
.nstu .tag.err{background:#fde2e1;color:#8a1c1c}
.nstu .kp{display:flex;gap:18px;flex-wrap:wrap;margin:6px 0}
.nstu .kp div{min-width:90px}.nstu .kp b{display:block;font-size:16px}
.nstu .kp span{font-size:11px;color:#666}
.nstu .bar{display:flex;align-items:center;gap:6px;margin:2px 0}
.nstu .bar .nm{width:56px;font-size:12px}.nstu .bar .bg{flex:0 0 220px;height:10px;background:#eee;border-radius:2px}
.nstu .bar .fg{height:10px;border-radius:2px}.nstu .bar .v{font-size:11px;color:#555}
.nstu table{border-collapse:collapse;margin:4px 0;font-size:12px}
.nstu th,.nstu td{border-bottom:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top}
.nstu td.n{text-align:right;font-variant-numeric:tabular-nums}
.nstu .badges span{margin-right:8px}
.nstu .tabs input{display:none}
.nstu .tabs label{display:inline-block;padding:3px 10px;border:1px solid #ccc;border-bottom:none;border-radius:4px 4px 0 0;cursor:pointer;font-size:12px;background:#f6f6f6}
.nstu .tabs .pane{display:none;border-top:1px solid #ccc;padding:6px 0}
.nstu .muted{color:#777;font-size:11px}
.nstu code{font-size:11px}
"""


def fmt_ns(ns: Any) -> str:
    if ns is None:
        return "–"
    ns = float(ns)
    for unit, div in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= div:
            return f"{ns / div:.3g} {unit}"
    return f"{ns:.0f} ns"


def fmt_pct(v: Any, missing: str = "–") -> str:
    """A 0..1 fraction as a percentage with one decimal (`missing` when None)."""
    return missing if v is None else f"{float(v) * 100:.1f}%"


def escape(v: Any) -> str:
    """Anything from a trace or a cell, made safe to put into HTML (text and attribute values)."""
    return html.escape("" if v is None else str(v), quote=True)


def _usd(v: Any) -> str:
    return "–" if v is None else f"${float(v):.4g}"


def _source(src: Any) -> str:
    if not src:
        return ""
    s = str(src)
    if s.startswith("cell-"):
        cell, _, line = s[len("cell-"):].partition(":")
        return f"cell [{cell}] line {line}"
    return s.rsplit("/", 1)[-1]


def _table(headers: list[str], rows: list[list[tuple[str, bool]]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td class='n'>{c}</td>" if num else f"<td>{c}</td>" for c, num in r)
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _measured_note(prov: Any) -> str:
    """What a measured profile was read from and what it does not hold ("host time: not captured")."""
    if not isinstance(prov, dict):
        return "<div class='muted'>Measured on Neuron hardware.</div>"
    missing = "; ".join(f"{escape(x)}: not captured" for x in prov.get("not_captured") or [])
    derived = ", ".join(escape(k) for k, v in (prov.get("figures") or {}).items() if v in ("derived", "modeled"))
    return (f"<div class='muted'>Measured on Neuron hardware from {escape(prov.get('measured_from'))}."
            + (f" {missing}." if missing else "") + (f" Derived or modeled: {derived}." if derived else "")
            + "</div>")


def _engines(s: dict) -> str:
    out = []
    for e in s.get("engines", []):
        captured = e.get("utilization") is not None          # None: not in the profile (shown as such, not 0%)
        u = float(e.get("utilization") or 0.0)
        color = ENGINE_COLORS.get(e.get("engine"), "#888")
        value = f"{fmt_pct(u)} · {fmt_ns(e.get('busy_ns'))}/step" if captured else "not captured"
        out.append(f"<div class='bar'><span class='nm'>{escape(e.get('engine'))}</span><span class='bg'>"
                   f"<div class='fg' style='width:{min(100.0, u * 100):.1f}%;background:{color}'></div></span>"
                   f"<span class='v'>{value}</span></div>")
    return "".join(out)


def _hot(s: dict, limit: int = 6) -> str:
    rows = []
    for h in s.get("hot_ops", [])[:limit]:
        k = h.get("kernel")
        kernel = "–"
        if k:
            loc = f"{escape(str(k.get('file') or '').rsplit('/', 1)[-1])}:{escape(k.get('line') or '')}" if k.get("file") else ""
            kernel = f"{escape(k.get('name'))} <span class='muted'>({escape(k.get('kind'))}) {loc}</span>"
        rows.append([(escape(h.get("op")), False), (escape(h.get("module")), False), (escape(_source(h.get("source"))), False),
                     (fmt_ns(h.get("device_ns")), True), (fmt_pct(h.get("share")), True),
                     (f"<span title='{escape(h.get('why'))}'>{escape(h.get('bound'))}</span>", False), (kernel, False)])
    return _table(["op", "module", "source", "device/step", "share", "bound", "NKI kernel"], rows)


def _timeline_svg(s: dict, width: int = 900, row_h: int = 14) -> str:
    tl = s.get("timeline") or {}
    engines = [e for e in DEVICE_ENGINES if e in tl]
    starts = tl.get("start_ns") or []
    if not engines or not starts:
        return "<p class='muted'>no device timeline</p>"
    n = len(starts)
    bw = (width - 70) / n
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{row_h * len(engines) + 18}' "
             f"role='img' aria-label='engine utilization over time'>"]
    for r, eng in enumerate(engines):
        y = r * row_h
        parts.append(f"<text x='0' y='{y + row_h - 3}' font-size='10'>{escape(eng)}</text>")
        color = ENGINE_COLORS.get(eng, "#888")
        for i, v in enumerate(tl[eng]):
            v = float(v or 0.0)
            if v <= 0:
                continue
            parts.append(f"<rect x='{70 + i * bw:.1f}' y='{y + 1}' width='{max(bw, 0.5):.1f}' height='{row_h - 2}' "
                         f"fill='{color}' fill-opacity='{min(1.0, 0.15 + 0.85 * v):.2f}'/>")
    end = (tl.get("end_ns") or [0])[-1]
    parts.append(f"<text x='70' y='{row_h * len(engines) + 14}' font-size='10'>0</text>"
                 f"<text x='{width - 60}' y='{row_h * len(engines) + 14}' font-size='10'>{escape(fmt_ns(end))}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _op_table(s: dict) -> str:
    rows = [[(escape(r.get("op")), False), (str(r.get("count")), True), (fmt_ns(r.get("device_ns")), True),
             (fmt_ns(r.get("host_ns")), True), (f"{float(r.get('flops') or 0):.3g}", True),
             (f"{float(r.get('bytes') or 0):.3g}", True), (escape(r.get("engine")), False), (escape(r.get("bound")), False),
             (fmt_pct(r.get("share")), True)] for r in s.get("op_table", [])]
    return _table(["op", "count", "device/step", "host/step", "FLOPs/step", "bytes/step", "engine", "bound", "share"],
                  rows)


def _issues(s: dict) -> str:
    parts = []
    fb = s.get("fallbacks") or []
    parts.append("<b>CPU fallbacks</b>" + (_table(["op", "count", "reason", "time"], [
        [(escape(f.get("op")), False), (str(f.get("count")), True), (escape(f.get("reason")), False),
         (fmt_ns(f.get("time_ns")), True)] for f in fb]) if fb else "<p class='muted'>none</p>"))
    sp = s.get("sync_points") or []
    parts.append("<b>Sync points</b>" + (_table(["op", "reason", "source", "module"], [
        [(escape(x.get("op")), False), (escape(x.get("reason")), False), (escape(_source(x.get("source"))), False),
         (escape(x.get("module")), False)] for x in sp]) if sp else "<p class='muted'>none</p>"))
    rc = s.get("recompiles") or []
    parts.append("<b>Recompiles</b>" + (_table(["graph", "shapes", "reason"], [
        [(escape(x.get("graph")), False), (escape(x.get("shape")), False), (escape(x.get("reason")), False)] for x in rc])
        if rc else "<p class='muted'>none</p>"))
    return "".join(parts)


def _compare(s: dict) -> str:
    c = s.get("compare")
    if not c:
        return "<p class='muted'>no earlier run of this cell to compare with</p>"
    head = (f"<p>vs run {escape(c.get('run_id'))} {escape(c.get('name') or '')}: step time "
            f"{fmt_ns(c.get('step_time_before_ns'))} → {fmt_ns(c.get('step_time_after_ns'))}"
            + (f" (<b>{float(c['step_time_delta_pct']):+.1f}%</b>)" if c.get("step_time_delta_pct") is not None else "")
            + "</p>")
    rows = [[(escape(o.get("op")), False), (fmt_ns(o.get("before_ns")), True), (fmt_ns(o.get("after_ns")), True),
             (fmt_ns(o.get("delta_ns")), True), (escape(o.get("status")), False)] for o in c.get("ops", [])]
    return head + _table(["op", "before", "after", "delta", ""], rows)


def _ranks(block: dict | None) -> str:
    if not block:
        return ""
    head = ["rank", "step (host)", "step (modeled)", "MFU", "collectives", "comm bytes", "waited", "last arrivals",
            "comm/compute overlap"]
    rows = "".join(
        "<tr>" + "".join(f"<td>{c}</td>" for c in (
            escape(r.get("rank")), fmt_ns(r.get("step_time_ns")), fmt_ns(r.get("modeled_step_time_ns")),
            fmt_pct(r.get("mfu")), escape(r.get("collectives")), f"{float(r.get('comm_bytes') or 0):.3g}",
            fmt_ns(r.get("wait_ns")), escape(r.get("last_arrivals")), fmt_pct(r.get("overlap_share")))) + "</tr>"
        for r in block.get("ranks", []))
    parts = ["<table><thead><tr>"
             + "".join(f"<th>{escape(h)}</th>" for h in head) + f"</tr></thead><tbody>{rows}</tbody></table>"]
    s = block.get("straggler")
    if s:
        parts.append(f"<p><b>Straggler: rank {escape(s['rank'])}</b> — the other ranks wait {fmt_ns(s['caused_wait_ns'])} "
                     f"in <code>{escape(s['op'])}</code>; its compute before that collective is "
                     f"{fmt_ns(s['compute_before_ns'])} vs {fmt_ns(s['others_compute_before_ns'])} on the others"
                     + (f" (last op before it: <code>{escape(s.get('op_before'))}</code>)" if s.get("op_before") else "")
                     + ".</p>")
    else:
        parts.append("<p class='muted'>No straggler: no rank makes the others wait noticeably.</p>")
    c = block.get("slowest_collective")
    if c:
        parts.append(f"<p>Slowest collective: <code>{escape(c['op'])}</code> #{escape(c['index'])} "
                     f"({float(c['bytes']):.3g} bytes) spans {fmt_ns(c['span_ns'])}; last to arrive: rank "
                     f"{escape(c['last_rank'])}.</p>")
    coll = block.get("collectives") or []
    if coll:
        ch = ["op", "#", "bytes", "last rank", "max wait", "span"]
        crow = "".join("<tr>" + "".join(f"<td>{x}</td>" for x in (
            f"<code>{escape(r.get('op'))}</code>", escape(r.get("index")), f"{float(r.get('bytes') or 0):.3g}",
            escape(r.get("last_rank")), fmt_ns(r.get("max_wait_ns")), fmt_ns(r.get("span_ns")))) + "</tr>"
            for r in coll)
        parts.append("<b>Collectives</b><table><thead><tr>" + "".join(f"<th>{h}</th>" for h in ch)
                     + f"</tr></thead><tbody>{crow}</tbody></table>")
    parts.append("<div class='muted'>Per-rank times are each rank's measured host timeline, aligned on the job "
                 "start; collective device time is modeled (NeuronLink).</div>")
    return "".join(parts)


def render_html(s: dict) -> str:
    uid = f"nstu{uuid.uuid4().hex[:10]}"  # unique per output: several profiles can share a page
    modeled = s.get("modeled", True)
    badges = s.get("badges") or {}
    cost = s.get("cost") or {}
    status = s.get("status") or "ok"
    tags = [f"<span class='tag'>{escape(s.get('mode'))}</span>", f"<span class='tag'>{escape(s.get('chip'))}</span>",
            f"<span class='tag'>{escape(s.get('backend'))}</span>"]
    if modeled:
        tags.append("<span class='tag mod' title='device figures come from the performance model, not a "
                    "measurement'>modeled</span>")
    if status != "ok":
        tags.append(f"<span class='tag err'>{escape(status)}</span>")
    title = f"Neuron profile · run {escape(s.get('run_id'))}" + (f" · {escape(s.get('name'))}" if s.get("name") else "")
    kp = "".join(f"<div><b>{v}</b><span>{escape(k)}</span></div>" for k, v in [
        ("step time" + (" (modeled)" if modeled else ""), fmt_ns(s.get("step_time_ns"))),
        ("host time/step", fmt_ns(s.get("host_time_ns"))),
        ("MFU", fmt_pct(s.get("mfu"))), ("MBU", fmt_pct(s.get("mbu"))),
        ("launches/step", f"{float(s.get('launches') or 0):.3g}"),
        (f"cost / 1k steps ({cost.get('chip', '')})", _usd(cost.get("per_1000_steps_usd"))),
        ("H100 / 1k steps", _usd(cost.get("h100_per_1000_steps_usd"))),
    ])
    badge_html = (f"<div class='badges'><span>fallbacks: <b>{escape(badges.get('fallbacks', 0))}</b></span>"
                  f"<span>sync points: <b>{escape(badges.get('sync_points', 0))}</b></span>"
                  f"<span>recompiles: <b>{escape(badges.get('recompiles', 0))}</b></span></div>")
    warn = "".join(f"<div class='muted'>⚠ {escape(w)}</div>" for w in s.get("warnings") or [])
    tabs = [("Summary", "<b>Engines</b>" + _engines(s) + "<b>Hot path</b>" + _hot(s)),
            ("Timeline", _timeline_svg(s)), ("Op table", _op_table(s)), ("Hot path", _hot(s, 20)),
            ("Fallbacks & syncs", _issues(s)), ("Diff", _compare(s))]
    if s.get("ranks_analysis"):
        tabs.insert(1, (f"Ranks ({len(s['ranks_analysis'].get('ranks', []))})", _ranks(s["ranks_analysis"])))
    tab_css = "".join(f"#{uid}-t{i}:checked ~ .p{i}{{display:block}}#{uid}-t{i}:checked + label{{background:#fff;font-weight:600}}"
                      for i in range(len(tabs)))
    tab_html = "".join(
        f"<input type='radio' name='{uid}' id='{uid}-t{i}'{' checked' if i == 0 else ''}>"
        f"<label for='{uid}-t{i}'>{escape(name)}</label>" for i, (name, _) in enumerate(tabs))
    panes = "".join(f"<div class='pane p{i}'>{body}</div>" for i, (_, body) in enumerate(tabs))
    note = ("<div class='muted'>Modeled: device times, utilization, MFU and cost come from Neuron Studio's "
            "NeuronCore model of the ops this run executed (emulated device); host times are measured.</div>"
            if modeled else _measured_note(s.get("provenance")))
    return (f"<div class='nstu' id='{uid}'><style>{CSS}{tab_css}</style>"
            f"<div class='hd'><span class='tt'>{title}</span>{''.join(tags)}</div>"
            f"<div class='kp'>{kp}</div>{badge_html}{warn}"
            f"<div class='tabs'>{tab_html}{panes}</div>{note}</div>")
