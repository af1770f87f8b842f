"""Plain-text rendering of a profile summary (terminals, logs, `text/plain`)."""
from __future__ import annotations

from typing import Any

from neuron_studio.profiler.profile_summary import current_summary
from neuron_studio.ui.breakdown_html import prediction_text
from neuron_studio.profiler.vocabulary import counted
from neuron_studio.ui.formatting import fmt_change, fmt_count, fmt_kernel, fmt_ns, fmt_pct, fmt_source, fmt_usd
from neuron_studio.ui.memory_html import fmt_bytes, memory_line

__all__ = ["render_text", "render_ranks_text", "breakdown_lines", "sync_lines"]


def _pct(v: Any) -> str:
    return fmt_pct(v, missing="-")  # plain text: an ASCII dash where HTML shows an en dash


def _range(s: dict) -> str:
    """' (range lo-hi: what drives it)' beside a modeled step time that rests on unmeasured assumptions."""
    r = s.get("step_time_range_ns")
    if not (r and r[0] is not None and r[1] is not None and r[1] > r[0]):
        return ""
    drivers = [str(v) for v in (s.get("range_drivers") or {}).values()]
    return f" (range {fmt_ns(r[0])}-{fmt_ns(r[1])}" + (f": {'; '.join(drivers)}" if drivers else "") + ")"


def _run_label(s: dict) -> str:
    if s.get("run_id") is not None:
        return f"run {s['run_id']}"
    return "(imported trace)" if s.get("backend") == "imported" else "(no run id)"


def _usd(v: Any) -> str:
    return "unavailable" if v is None else fmt_usd(v)


def _gpu_lines(s: dict, top: int) -> list[str]:
    """An imported GPU trace: measured temporal and kernel breakdowns, and the same job modeled on Trainium."""
    g = s.get("gpu")
    if not isinstance(g, dict):
        return []
    t = g.get("temporal") or {}
    kinds = ("compute", "communication", "memory", "idle")
    lines = ["  GPU (measured): " + "  ".join(f"{k} {_pct(t.get(k + '_share'))}" for k in kinds)
             + f"  over {fmt_ns(t.get('span_ns'))}"]
    for k in (g.get("kernels") or [])[:top]:
        lines.append(f"    {_pct(k.get('share')):>6}  {fmt_ns(k.get('total_ns')):>9}  {str(k.get('name'))[:90]}")
    v = g.get("vs_trainium")
    if isinstance(v, dict):
        trn = fmt_ns(v["trainium_step_ns"]) if v.get("trainium_step_ns") is not None else "not modeled"
        lines.append(f"  same job on {v.get('chip')} (modeled): step {trn} vs {v.get('gpu') or 'GPU'} "
                     f"{fmt_ns(v.get('gpu_step_ns'))} measured; per 1M steps "
                     f"{_usd(v.get('trainium_per_1m_steps_usd'))} vs {_usd(v.get('gpu_per_1m_steps_usd'))}")
        for i in (v.get("port_issues") or [])[:top]:
            lines.append(f"    port would hit: {i.get('op')} x{i.get('count')}: {i.get('why')}")
        for n in v.get("notes") or []:
            lines.append(f"    note: {n}")
    return lines


def sync_lines(s: dict, top: int) -> list[str]:
    """The summary's sync places (one line per place: count and host time per step), the first `top` of them, and
    how many more places there are (listed in the summary, or left out of it)."""
    sp = s.get("sync_places") if isinstance(s.get("sync_places"), dict) else {}
    places = [p for p in sp.get("places") or [] if isinstance(p, dict)]
    if not places:
        return []
    basis = sp.get("time_basis")
    lines = [f"  sync points ({counted(int(sp.get('total') or len(places)), 'place')}; "
             + (f"host time/step {basis}" if basis else "host time per step not determined") + "):"]
    for p in places[:top]:
        at = fmt_source(p.get("source")) or "(no source)"
        mods = ", ".join(str(m) for m in p.get("modules") or [] if m)
        lines.append(f"    {fmt_count(p.get('count')):>6}/step  {p.get('op')} ({p.get('reason')})  {at}"
                     + (f"  [{mods}]" if mods else "") + (f"  {fmt_ns(p.get('time_ns'))}/step" if basis else ""))
    more = max(0, len(places) - top) + int(sp.get("left_out") or 0)
    if more:
        lines.append(f"    ... {counted(more, 'more place')} (Issues tab; prof.sync_places())")
    return lines


def render_text(s: dict, *, top: int = 5) -> str:
    s = current_summary(s)
    modeled = " (modeled)" if s.get("modeled", True) else ""
    lines = [
        f"Neuron profile {_run_label(s)}{' ' + str(s['name']) if s.get('name') else ''}: "
        f"{s.get('mode')} on {s.get('chip')} [{s.get('backend')}] status={s.get('status')}",
        f"  step time{modeled}: {fmt_ns(s.get('step_time_ns'))}{_range(s)}",
        f"  host/step (measured): {fmt_ns(s.get('host_time_ns'))}   MFU{modeled} {_pct(s.get('mfu'))}   "
        f"MBU{modeled} {_pct(s.get('mbu'))}   launches/step {float(s.get('launches') or 0):.3g}",
        f"  engine utilization{modeled}: "
        + "  ".join(f"{e['engine']} {_pct(e.get('utilization'))}" for e in s.get("engines", [])),
    ]
    lines.extend(breakdown_lines(s))
    b = s.get("badges") or {}
    lines.append(f"  fallbacks {b.get('fallbacks', 0)}   sync points {b.get('sync_points', 0)}   "
                 f"recompiles {b.get('recompiles', 0)}")
    lines.extend(sync_lines(s, top))
    c = s.get("cost") or {}
    if c:
        lines.append(f"  cost / 1M steps (modeled): {c.get('chip')} {_usd(c.get('per_1m_steps_usd'))}"
                     f"   H100 {_usd(c.get('h100_per_1m_steps_usd'))}")
    mem = s.get("memory")
    if isinstance(mem, dict) and mem:
        lines.append(f"  memory: {memory_line(mem)}")
        levers = [lv for lv in (mem.get("forecast") or {}).get("levers") or [] if (lv.get("saving_bytes") or 0) > 0]
        if levers and not (mem.get("forecast") or {}).get("fits", True):
            lv = levers[0]
            lines.append(f"    best lever (modeled): {lv.get('title')} saves {fmt_bytes(lv.get('saving_bytes'))}"
                         f"{'' if lv.get('fits') else ' (still does not fit)'}")
    hot = s.get("hot_ops") or []
    if hot:
        lines.append("  hot path:")
        for h in hot[:top]:
            k = h.get("kernel")
            kern = f"  -> {fmt_change(h.get('change'))}" if h.get("change") else ""
            if k:
                at = f" {k.get('file')}:{k.get('line') or ''}" if k.get("file") else ""
                kern += f"{';' if kern else '  ->'} {fmt_kernel(k)}{at}"
            lines.append(f"    {float(h.get('share') or 0) * 100:5.1f}%  {h.get('op')}  [{h.get('bound')}]  "
                         f"{h.get('module') or ''} {fmt_source(h.get('source'))}{kern}")
    cmp_ = s.get("compare")
    if cmp_ and cmp_.get("step_time_delta_pct") is not None:
        lines.append(f"  vs run {cmp_.get('run_id')}: step time {float(cmp_['step_time_delta_pct']):+.1f}%")
        said = prediction_text(cmp_)
        if said:
            lines.append(f"  {said}")
    lines.extend(_gpu_lines(s, top))
    for w in s.get("warnings") or []:
        lines.append(f"  ! {w}")
    if s.get("modeled", True) and s.get("calibration_note"):
        lines.append(f"  {s['calibration_note']}")
    prov = s.get("provenance")
    if isinstance(prov, dict):
        lines.append(f"  measured from {prov.get('measured_from')}")
        if prov.get("not_captured"):
            lines.append("  " + "; ".join(f"{x}: not captured" for x in prov["not_captured"]))
    if s.get("ranks_analysis"):
        lines.append(render_ranks_text(s["ranks_analysis"]))
    return "\n".join(lines)


def breakdown_lines(s: dict) -> list[str]:
    """Where the step goes (parts adding up to the step, undetermined ones said so), the recommendations and
    the what-if advisor's best variant with the line that runs it."""
    b = s.get("breakdown")
    if not isinstance(b, dict) or not b:
        return []
    if b.get("step_time_ns") is None:
        return [f"  step breakdown: not available: {' '.join(str(n) for n in b.get('notes') or [])}"]
    parts = [p for p in b.get("parts") or [] if isinstance(p, dict)]
    shown = [f"{p.get('label')} {_pct(p.get('share'))}" for p in parts
             if p.get("determined", True) is not False and (p.get("share") or 0) > 0]
    undet = [str(p.get("label")) for p in parts if p.get("determined", True) is False]
    lines = [f"  where the step goes ({b.get('basis')}, {fmt_ns(b.get('step_time_ns'))}): " + ", ".join(shown)
             + (f"; not determined: {', '.join(undet)}" if undet else "")]
    for r in b.get("recommendations") or []:
        lines.append(f"    -> {r.get('text')}")
    w = s.get("what_if") if isinstance(s.get("what_if"), dict) else {}
    rows = [r for r in w.get("rows") or [] if isinstance(r, dict)]
    best = next((r for r in rows if r.get("variant") == w.get("best")), None)
    cur = next((r for r in rows if r.get("current")), None)
    if best and cur and best.get("step_time_ns") and cur.get("step_time_ns") \
            and best["step_time_ns"] < cur["step_time_ns"]:
        approx = ", approximate" if "approximate" in str(best.get("basis")) else ""
        lines.append(f"  what if (modeled{approx}): {best.get('variant')} {fmt_ns(best['step_time_ns'])}/step "
                     f"({cur['step_time_ns'] / best['step_time_ns']:.1f}x faster): {best.get('run')}")
        if w.get("scope_note"):
            lines.append(f"    ({w['scope_note']})")
    return lines


def render_ranks_text(block: dict) -> str:
    """Per-rank lines of a multi-rank run (straggler, slowest collective)."""
    lines = ["  ranks:"]
    per = (block.get("steps") or {}).get("per_step")     # per step over these steps; else totals, said so
    for r in block.get("ranks", []):
        src = f" [{r['rank_source']}]" if r.get("rank_source") else ""
        coll = (f"collectives/step {fmt_count(r.get('collectives_per_step'))}  "
                f"waited/step {fmt_ns(r.get('wait_per_step_ns'))}") if per else \
            f"collectives {r.get('collectives')} (total)  waited {fmt_ns(r.get('wait_ns'))} (total)"
        lines.append(f"    rank {r['rank']}{src}: step {fmt_ns(r.get('step_time_ns'))} (host)  "
                     f"modeled {fmt_ns(r.get('modeled_step_time_ns'))}  {coll}  "
                     f"overlap {float(r.get('overlap_share') or 0) * 100:.0f}%"
                     + ("" if r.get("gpu_compute_share") is None else
                        "  GPU " + " ".join(f"{k} {_pct(r.get(f'gpu_{k}_share'))}"
                                            for k in ("compute", "communication", "memory", "idle"))))
    s = block.get("straggler")
    if s:
        waited = (f"{fmt_ns(s['wait_per_step_ns'])} per step (over {s.get('steps')} steps)"
                  if s.get("wait_per_step_ns") is not None else
                  f"{fmt_ns(s['caused_wait_ns'])} in total over the "
                  + ("capture (its steps are unknown)" if "steps" in s else "profiled steps"))
        lines.append(f"  straggler: rank {s['rank']} — the others wait {waited} in {s['op']} "
                     f"(its compute before it: {fmt_ns(s['compute_before_ns'])} vs "
                     f"{fmt_ns(s['others_compute_before_ns'])})")
    c = block.get("slowest_collective")
    if c:
        lines.append(f"  slowest collective: {c['op']} #{c['index']} ({c['bytes']:.0f} B) spans "
                     f"{fmt_ns(c['span_ns'])}, last rank {c['last_rank']}")
    al = block.get("alignment")
    if al:
        skew = fmt_ns(al["residual_skew_ns"]) if al.get("residual_skew_ns") is not None else "not measurable"
        lines.append(f"  clocks: {al['method']}, residual skew {skew}")
    for n in block.get("notes") or []:
        lines.append(f"  note: {n}")
    return "\n".join(lines)
