"""The compact, JSON-safe summary of a Profile: the payload of `application/vnd.neuron-studio.profile+json`.

Everything a renderer needs and nothing it must compute: renderers (inline HTML, the JupyterLab
extension, the CLI report) only lay this out. Every figure is per profiled step (times, counts, FLOPs,
bytes, modeled savings), so no table mixes totals over the steps with per-step figures.
"""
from __future__ import annotations

import math
from typing import Any

from neuron_studio.profiler.analysis import what_if as _wi
from neuron_studio.profiler.analysis.fusion_regions import REGION_MODES, region_splits
from neuron_studio.profiler.analysis.trace_overview import trace_overview
from neuron_studio.profiler.breakdown_summary import breakdown_block, what_if_block
from neuron_studio.profiler.hardware_summary import hardware_block
from neuron_studio.profiler.memory_summary import memory_block
from neuron_studio.profiler.summary_numbers import finite_float
from neuron_studio.profiler.vocabulary import DEVICE_ENGINES, counted

__all__ = ["profile_summary", "sync_places_block", "current_summary", "SUMMARY_VERSION", "TOP_SYNC_PLACES"]

#: 2: host syncs are `sync_places` (one row per place, counts and times per step) instead of version 1's
#: `sync_points` (one row per occurrence over the profiled steps, which a reader had to group and count).
SUMMARY_VERSION = 2
#: Lines the op table lists under it where the user's code ends launch regions.
_TOP_SPLITS = 10
_TOP_TABLE = 30
#: The sync places the summary lists (the costliest first); the rest are counted in `left_out`.
TOP_SYNC_PLACES = 50


def _per_step(total: Any, steps: int) -> float | None:
    """A figure summed over the profiled steps, per step (None stays None: not modeled)."""
    f = finite_float(total)
    return None if f is None else f / max(1, steps)


def _int(v: Any) -> int:
    f = finite_float(v)
    return int(f) if f is not None else 0


def _uncertainty(prof: Any) -> dict[str, Any]:
    """Modeled runs: the step time's range under the unmeasured assumptions, what drives it, and the model's
    calibration error against published measurements. Measured runs carry none of these."""
    if not prof.modeled_figures:
        return {}
    s = prof.summary
    steps = prof.steps
    low, high = getattr(s, "step_time_low_ns", 0.0), getattr(s, "step_time_high_ns", 0.0)
    return {
        "step_time_range_ns": [finite_float(low / steps), finite_float(high / steps)] if high > 0 else None,
        "range_drivers": _range_drivers(s, steps),
        "calibration_error": finite_float(getattr(s, "calibration_error", None)),
        # the chip's own calibration (profiler.model.calibration.calibration_summary): its text is what a badge
        # states ("trn2: modeled/measured lo–hi× on N published ..." or "... not validated against a measurement")
        "calibration": dict(getattr(s, "calibration", {}) or {}) or None,
        "calibration_note": _calibration_note(s),
    }


def _range_drivers(s: Any, steps: int) -> dict[str, str]:
    """What drives the step range, each figure per step: the launch cost's spread is charged on every launch of
    the busiest core, counted over the whole run by the model, so stated here divided by the profiled steps."""
    drivers = dict(getattr(s, "range_drivers", {}) or {})
    busiest = getattr(s, "busiest_core_launches", 0)
    if "launch_overhead_ns" in drivers and busiest:
        drivers["launch_overhead_ns"] += f", {counted(busiest / max(1, steps), 'launch')} per step on the busiest core"
    return drivers


def _calibration_note(s: Any) -> str:
    """The footnote (and tooltip) on the model's calibration, saying what it measures: the model against
    published measurements of other programs on this chip, not this run's own uncertainty (its range)."""
    cal = getattr(s, "calibration", None) or {}
    text = str(cal.get("text") or "") if isinstance(cal, dict) else ""
    if not text or not cal.get("validated", True):
        return (f"Calibration: {text or s.chip + ': not validated against a measurement'} (no published measurement "
                "on this chip checks the model yet; its figures rest on the chip's specifications). The step-time "
                "range is this run's own uncertainty.")
    return (f"Calibration: {text}. This compares the model with published measurements of other programs on this "
            "chip (BENCHMARKS.md); it is not this run's uncertainty, which is the step-time range.")


def profile_summary(prof: Any, *, run_id: int | None = None, name: str | None = None, cell_key: str | None = None,
                    notebook: str | None = None, status: str | None = None, compare: dict | None = None,
                    warnings: list[str] | None = None, timeline_bins: int = 60) -> dict[str, Any]:
    meta = prof.trace.meta
    s = prof.summary
    cost = prof.cost()
    table = prof.op_table(top=_TOP_TABLE)
    util = prof.engine_utilization(bins=timeline_bins)
    engines = list(DEVICE_ENGINES)
    steps = prof.steps
    hot = []
    changes = _hot_changes(prof)
    for h in prof.hot_path():
        k = h.kernels[0] if h.kernels else None
        hot.append({
            "op": h.op, "module": prof.module_label(h.module), "source": h.source, "device_ns": _int(h.device_ns / steps),
            "share": finite_float(h.share), "bound": h.bound, "why": h.why, "engine": h.engine,
            "count": finite_float(h.count / steps),
            "change": changes.get((h.op, h.module.removesuffix(" (backward)").removesuffix("(backward)"))),
            "kernel": None if k is None else {
                "name": k.get("name") or k.get("kernel"), "kind": k.get("kind"), "file": k.get("file"),
                "line": k.get("line"), "saving_ns": _per_step(k.get("saving_ns"), steps), "scope": k.get("scope"),
                "replaces_ns": _per_step(k.get("replaces_ns"), steps),
                # a kernel a measured profile saw run (KernelInstructions) is measured, not modeled
                "modeled": not k.get("measured") and (k.get("saving_ns") is not None or k.get("kind") != "candidate"),
                "note": k.get("note") or None,
            },
        })
    # ops recorded without shapes cannot be modeled: no modeled headline built on them (the warnings say why)
    sized = prof.hot_basis == "modeled device time"
    no_timeline = _timeline_not_captured(prof)
    fb = prof.cpu_fallbacks()
    sync = prof.sync_places(as_captured=True)   # sources as captured: the extension's links parse them
    rc = prof.recompiles()
    return _finite({
        "version": SUMMARY_VERSION,
        "run_id": run_id if run_id is not None else prof.run_id,
        "name": name or meta.get("name"),
        "cell_key": cell_key,
        "notebook": notebook,
        "mode": prof.trace.mode,
        "chip": s.chip,
        "backend": meta.get("backend", "emulated"),
        "origin": _origin(meta),
        "modeled": prof.modeled_figures,
        "status": status or meta.get("status", "ok"),
        "steps": steps,
        "step_time_ns": finite_float(prof.step_time_ns) if sized else None,
        **(_uncertainty(prof) if sized else {}),
        "host_time_ns": finite_float(prof.host_time_ns),
        "mfu": finite_float(s.mfu) if sized else None,
        "mbu": finite_float(s.mbu) if sized else None,
        "launches": finite_float(prof.launches_per_step),
        "ops_per_step": finite_float(s.n_ops / steps),
        "engines": [{"engine": e, "utilization": finite_float(s.engine_utilization.get(e, 0.0)),
                     "busy_ns": finite_float(s.engine_busy_ns.get(e, 0.0) / steps)} for e in engines],
        "timeline": {"start_ns": util["start_ns"].tolist(), "end_ns": util["end_ns"].tolist(),
                     **{e: [round(float(x), 4) for x in util[e]] for e in engines}} if not no_timeline else None,
        "timeline_note": no_timeline,
        "trace_view": _trace_view(prof, sized),
        "hot_ops": hot,
        "op_table": [{"op": r.key, "count": finite_float(r.count / steps),
                      "device_ns": finite_float(r.per_step_device_ns),
                      "host_ns": finite_float(r.host_ns / steps), "flops": finite_float(r.flops / steps),
                      "bytes": finite_float(r.bytes / steps), "engine": r.engine, "bound": r.bound,
                      "share": finite_float(r.share),
                      # launch regions this op ended per step (an in-place op, a host read...): adaptive/compile
                      "region_splits": finite_float(r.region_splits / steps),
                      **({} if sized else _unsized_row(r))}
                     for r in table.itertuples(index=False)],
        # what the op table ranks by: "modeled device time", or measured GPU/host time when ops lack shapes
        "op_table_basis": table.attrs.get("basis", prof.hot_basis),
        # where the user's code ends launch regions, with the fix (the op table lists them under the table)
        "region_splits": region_splits(prof.fusion_regions(), steps)[:_TOP_SPLITS]
        if prof.trace.mode in REGION_MODES else [],
        # the places that fall back / make the host wait (the rows of the Issues tables), not their occurrences
        # over the profiled steps: the same step profiled 3 times has the same badges
        "badges": {"fallbacks": int(len(fb)), "sync_points": int(len(sync)),
                   "recompiles": int(len(rc))},
        "fallbacks": [{"op": r.op, "count": finite_float(r.count / steps), "reason": r.reason,
                       "time_ns": finite_float(r.device_ns / steps)}
                      for r in fb.itertuples(index=False)],
        "sync_places": sync_places_block(sync),
        # why each graph compiled again (profiler/recompile_causes.py: `cause` a CAUSES key, `reason` in words,
        # `detail` Dynamo's guard failures as it gave them)
        "recompiles": [{"graph": str(r.graph_key), "shape": str(r.shapes), "cause": str(r.cause),
                        "reason": str(r.reason), "detail": str(r.detail or "")}
                       for r in rc.itertuples(index=False)],
        "cost": {"chip": cost.chip, "per_step_usd": finite_float(cost.per_step_usd) if sized else None,
                 "per_1000_steps_usd": finite_float(cost.per_1000_steps_usd) if sized else None,
                 "h100_per_1000_steps_usd": finite_float(cost.h100_per_1000_steps_usd) if sized else None,
                 "per_1m_steps_usd": finite_float(cost.per_1m_steps_usd) if sized else None,
                 "h100_per_1m_steps_usd": finite_float(cost.h100_per_1m_steps_usd) if sized else None,
                 "price_per_hour_usd": finite_float(cost.price_per_hour_usd),
                 "h100_price_per_hour_usd": finite_float(cost.h100_price_per_hour_usd),
                 "h100_step_time_ns": finite_float(cost.h100_step_time_ns) if sized else None, "modeled": True},
        "compare": compare,
        "hot_basis": prof.hot_basis,
        "source": _source(meta),
        "gpu": _gpu_block(prof),
        "memory": memory_block(prof),
        "breakdown": breakdown_block(prof),
        "hardware": hardware_block(meta, steps),
        "what_if": what_if_block(prof),
        "warnings": list(warnings or []) + _trace_warnings(meta) + prof.data_gaps()
        + ([no_timeline] if no_timeline else []),
        "provenance": _provenance(meta),
    })


def sync_places_block(places: Any, top: int = TOP_SYNC_PLACES) -> dict[str, Any]:
    """The Issues tabs' sync-point list (`Profile.sync_places` rows), as every renderer shows it: one row per place
    with its count and time per step, the costliest `top` places; `left_out` places (and their `left_out_count`
    occurrences per step) are not listed, and the renderers say so. `time_basis`: "modeled" | "measured" | None."""
    shown = places.head(top)
    rest = places.iloc[top:]
    basis = places.attrs.get("time_basis")
    return {
        "places": [{"op": r.op, "reason": r.reason, "source": r.source if isinstance(r.source, str) else None,
                    "modules": list(r.modules), "count": finite_float(r.count),
                    "time_ns": finite_float(r.time_ns) if basis else None}
                   for r in shown.itertuples(index=False)],
        "total": int(len(places)),
        "left_out": int(len(rest)),
        "left_out_count": finite_float(rest["count"].sum()) if len(rest) else 0.0,
        "time_basis": basis,
    }


def current_summary(s: dict[str, Any]) -> dict[str, Any]:
    """A stored summary read as the current version, for the renderers: version 1's `sync_points` (one row per
    occurrence over the profiled steps) become `sync_places` rows, counted per step over its `steps`; version 1
    kept no sync times, so `time_basis` is None (no time shown). Current summaries are returned as they are."""
    if not isinstance(s, dict) or "sync_places" in s or not isinstance(s.get("sync_points"), list):
        return s
    steps = max(1, int(finite_float(s.get("steps")) or 1))
    rows: dict[tuple, dict[str, Any]] = {}
    for p in s["sync_points"]:
        if not isinstance(p, dict):
            continue
        src = p.get("source") if isinstance(p.get("source"), str) else None
        row = rows.setdefault((src, str(p.get("op")), str(p.get("reason"))), {
            "op": str(p.get("op")), "reason": str(p.get("reason")), "source": src, "modules": [], "n": 0})
        row["n"] += 1
        if p.get("module") not in (None, "") and p["module"] not in row["modules"]:
            row["modules"].append(str(p["module"]))
    places = [{"op": r["op"], "reason": r["reason"], "source": r["source"], "modules": r["modules"],
               "count": r["n"] / steps, "time_ns": None} for r in rows.values()]
    return {**s, "sync_places": {"places": places, "total": len(places), "left_out": 0, "left_out_count": 0.0,
                                 "time_basis": None}}


def _trace_view(prof: Any, sized: bool) -> dict[str, Any] | None:
    """The trace overview; for ops recorded without shapes, with a note saying its device lanes are not the ops' time
    (the model drew them from launch costs alone: it could not size the ops) and where the measured time is."""
    tv = trace_overview(prof)
    if tv is not None and not sized:
        tv["note"] = (f"This trace's ops were recorded without input shapes, so the model cannot size them: the "
                      f"device lanes below are drawn from launch costs alone on a modeled clock, not the time the "
                      f"ops took. The Op table and Hot path rank by {prof.hot_basis}.")
    return tv


def _timeline_not_captured(prof: Any) -> str | None:
    """Why there is no timeline to draw (a measured profile without op rows, e.g. summary-json: its engines'
    totals are known, their timing is not), else None. An all-zero timeline beside a 96% busy engine would
    read as idle."""
    if len(prof.ops):
        return None
    meta = prof.trace.meta
    if "measured_from" in meta:
        return (f"timeline not captured: {meta['measured_from']} holds the run's totals only, no per-op or "
                "per-instruction rows; export the profile with its instructions (Parquet, or the JSON with "
                "\"instruction\" rows) to see when each engine ran")
    return "timeline not captured: the run recorded no op"


def _unsized_row(r: Any) -> dict[str, Any]:
    """An op-table row of a trace ranked by measured time: its measured time; the model's columns, which rest
    on ops it could not size, left empty rather than shown as figures."""
    return {"measured_ns": finite_float(r.per_step_measured_ns), "device_ns": None, "flops": None, "bytes": None,
            "engine": "", "bound": ""}


def _hot_changes(prof: Any) -> dict[tuple[str, str], dict]:
    """(op, module) -> the PyTorch change that rewrites those ops, with its what-if figures, for the hot path (the
    line to try before any kernel); the advisor's fastest change wins where several apply."""
    advice = prof.advice() if prof.modeled_figures else None
    if not advice:
        return {}
    rows = {r["variant"]: r for r in advice if r.get("kind") == "code"}
    out: dict[tuple[str, str], dict] = {}
    for c in prof.code_changes(max_ops=_wi.REMODEL_MAX_OPS):   # the changes the advice was re-modeled from
        r = rows.get(c.variant)
        if r is None:
            continue
        for key in c.targets:
            if key not in out or out[key]["rank"] > r["rank"]:
                out[key] = {"variant": c.variant, "run": c.line, "where": c.where, "rank": int(r["rank"]),
                            "speedup": finite_float(r["speedup"])}
    return out


def _origin(meta: dict) -> str:
    """What the run came from: a `%%neuron` "cell", a `neuron-studio run` "script", an "imported" trace, or the
    Python "api" (the advice writes its lines in that syntax; the Diff tab says how to compare)."""
    if isinstance(meta.get("cli_command"), list) and meta["cli_command"]:
        return "script"
    if isinstance(meta.get("cell"), dict):
        return "cell"
    if meta.get("backend") == "imported" or isinstance(meta.get("imported"), dict):
        return "imported"
    return "api"


def _source(meta: dict) -> dict | None:
    """Where an imported trace came from: file, rank, world size, devices."""
    imp = meta.get("imported")
    if not isinstance(imp, dict):
        return None
    devices = imp.get("devices") or []
    return {"file": imp.get("file"), "kind": imp.get("kind"), "rank": meta.get("rank"),
            "world_size": meta.get("world_size"), "device": devices[0].get("name") if devices else None,
            "events": imp.get("events"), "ops": imp.get("ops")}


def _gpu_block(prof: Any) -> dict | None:
    """Measured GPU figures of an imported CUDA/ROCm trace and the same job modeled on Trainium."""
    act = prof.gpu_activity()
    if not len(act):
        return None
    tb = prof.temporal_breakdown()
    kb = prof.kernel_breakdown(top=15)
    linked = act[act["op_seq"] >= 0]
    return {
        "device_kind": prof.device_kind or "GPU",
        "activities": int(len(act)), "total_ns": int(act["dur_ns"].sum()),
        "unattributed_ns": int(act.loc[act["op_seq"] < 0, "dur_ns"].sum()),
        "linked_ops": int(linked["op_seq"].nunique()),
        "temporal": tb.to_dict(),
        "kernels": [{"name": r.name, "kind": r.kind, "count": int(r.count), "total_ns": int(r.total_ns),
                     "mean_ns": float(r.mean_ns), "share": float(r.share)} for r in kb.itertuples(index=False)],
        "vs_trainium": prof.gpu_vs_trainium().to_summary(),
    }


def _finite(o: Any) -> Any:
    """JSON-safe: NaN/inf (pandas' missing values included) become null; numpy scalars become Python ones."""
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if hasattr(o, "item") and not isinstance(o, (str, bytes)):
        return _finite(o.item())
    return o


def _provenance(meta: dict) -> dict[str, Any] | None:
    """A measured profile's account of itself: what it was measured from, what it does not hold, and for each
    headline figure whether it is measured / derived / modeled / not captured, and from which field."""
    if "measured_from" not in meta:
        return None
    return {"measured_from": meta.get("measured_from"), "not_captured": list(meta.get("not_captured") or []),
            "figures": dict(meta.get("figures") or {}), "figure_sources": dict(meta.get("figure_sources") or {})}


def _trace_warnings(meta: dict) -> list[str]:
    out = [str(w) for w in meta.get("reader_warnings") or []]
    if meta.get("dropped_events"):
        out.append(f"{meta['dropped_events']} op events were dropped (buffer full); figures undercount")
    if meta.get("unrecorded_ops"):
        out.append(f"{meta['unrecorded_ops']} ops ran but their events could not be recorded; figures undercount")
    if meta.get("host_events_error"):
        out.append(f"host events unavailable: {meta['host_events_error']}")
    if meta.get("ops_after_last_step"):
        out.append(f"{meta['ops_after_last_step']} ops ran after the last step mark: they are no profiled step and "
                   "are left out of every figure (to profile them, run them inside a step, before its .step())")
    return out
