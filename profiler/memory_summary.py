"""The `memory` block of the profile summary payload: everything the memory tab draws, JSON-safe.

Renderers (inline HTML, the JupyterLab extension, the CLI report) only lay this out: a stacked area of
bytes live per category over the profiled steps (binned, keeping each bin's highest point, so the peak is
drawn exactly), the peak marked, the storages live at the peak, activations per module, the lower bound vs
the allocator high-water mark, and the forecast per chip with its levers.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from neuron_studio.profiler.analysis.memory import CATEGORIES, NoMemoryDataError, binned_timeline
from neuron_studio.profiler.analysis.memory_forecast import fmt_bytes

__all__ = ["memory_block", "MEMORY_BINS", "LIVE_ROWS"]

MEMORY_BINS = 80
LIVE_ROWS = 20


def _s(v: Any) -> Any:
    if v is None or (isinstance(v, float) and v != v):
        return None
    return v if isinstance(v, (str, int, float, bool)) else str(v)


def _module(prof: Any, module: Any, op: Any) -> Any:
    """The module of a storage allocated by a step op as every view shows it (`Profile.module_label`); a storage
    from before the step (no op) keeps none."""
    return prof.module_label(module) if isinstance(op, str) and op else _s(module)


def memory_block(prof: Any, *, bins: int = MEMORY_BINS, live_rows: int = LIVE_ROWS) -> dict[str, Any] | None:
    """The memory block of a profile, or None when the profile holds no memory record."""
    if prof.trace.memory is None or not len(prof.trace.memory):
        return _measured_block(prof)
    try:
        tl = prof.memory_timeline()
        peak = prof.memory_peak(as_captured=True)   # sources as captured: the extension's links parse them
        forecast = prof.memory_forecast()
        bounds = prof.memory_bounds()
        acts = prof.activation_memory()
    except NoMemoryDataError:
        return None
    b = binned_timeline(tl, bins)
    x = b["device_time_ns"].to_numpy(dtype=np.float64)
    if np.isnan(x).all():
        x = b["time_ns"].to_numpy(dtype=np.float64)
    x = np.maximum.accumulate(np.nan_to_num(x, nan=0.0))
    peak_row = int(np.argmax(b["total_bytes"].to_numpy()))
    step_starts = [int(i) for i in np.flatnonzero(np.diff(b["step"].to_numpy()) > 0) + 1]
    a = peak.attrs
    return {
        "device": int(a["device"]),
        "peak_bytes": int(a["peak_bytes"]),
        "peak": {"op": _s(a["op"]), "module": _module(prof, a["module"], a["op"]), "source": _s(a["source"]),
                 "phase": _s(a["phase"]),
                 "step": int(a["step"]), "index": peak_row},
        "by_category": {c: int(v) for c, v in a["by_category"].items()},
        "categories": list(CATEGORIES),
        "timeline": {
            "x_ns": [float(v) for v in x],
            "x_label": "device time (modeled)" if prof.modeled_figures else "device time",
            "total": [int(v) for v in b["total_bytes"]],
            **{c: [int(v) for v in b[c]] for c in CATEGORIES},
            "step_starts": step_starts,
            "events": int(len(tl)),
        },
        "live": [{"nbytes": int(r.nbytes), "category": r.category, "name": _s(r.name), "dtype": _s(r.dtype),
                  "shape": _s(r.shape), "op": _s(r.op), "module": _module(prof, r.module, r.op),
                  "source": _s(r.source)}
                 for r in peak.head(live_rows).itertuples(index=False)],
        "live_count": int(len(peak)),
        "activations": [{"module": r.module, "activation_bytes": float(r.activation_bytes),
                         "at_peak_bytes": int(r.at_peak_bytes)} for r in acts.head(12).itertuples(index=False)],
        "bounds": {"lower_bound_bytes": bounds.lower_bound_bytes,
                   "allocator_high_water_bytes": bounds.allocator_high_water_bytes,
                   "round_bytes": bounds.round_bytes, "modeled": True},
        "forecast": _forecast_dict(forecast),
        "notes": _notes(prof),
    }


def _forecast_dict(forecast: Any) -> dict[str, Any]:
    return {
        "chip": forecast.chip, "lnc": forecast.lnc, "capacity_bytes": forecast.capacity_bytes,
        "headroom_bytes": forecast.headroom_bytes, "fits": forecast.fits,
        "profiling_reserve_bytes": forecast.profiling_reserve_bytes,
        "fits_while_profiling": forecast.fits_while_profiling, "summary_line": forecast.summary_line(),
        "chips": [{"chip": c.chip, "lnc": c.lnc, "capacity_bytes": c.capacity_bytes,
                   "headroom_bytes": c.headroom_bytes, "fits": c.fits,
                   "fits_while_profiling": c.fits_while_profiling} for c in forecast.chips],
        "levers": [{"key": lv.key, "title": lv.title, "peak_bytes": lv.peak_bytes, "saving_bytes": lv.saving_bytes,
                    "fits": lv.fits, "how": lv.how, "assumption": lv.assumption} for lv in forecast.levers],
        # modeled changes that would not lower this peak (a lever that adds bytes is not a lever): said, not listed
        "no_help": [{"key": lv.key, "title": lv.title, "adds_bytes": -lv.saving_bytes} for lv in forecast.no_help],
        "assumptions": list(forecast.assumptions),
        "modeled": forecast.modeled,
    }


def _measured_block(prof: Any) -> dict[str, Any] | None:
    """Real Trainium: the allocator's measured peak and the fit verdict, plus HBM by usage type over the capture
    when the profile has Explorer's SystemProfileHbmUsage table (nothing per allocation: TorchNeuron has no
    allocation record)."""
    meta = prof.trace.meta
    measured = meta.get("memory_measured") or {}
    hbm = (meta.get("device_records") or {}).get("hbm_usage")
    has_peak = measured.get("peak_bytes") is not None
    if not has_peak and not hbm:
        return None
    notes = [str(measured.get("source") or "measured peak")] if has_peak else []
    block: dict[str, Any] = {
        "device": 0, "peak_bytes": int(measured["peak_bytes"]) if has_peak else None, "measured": True, "peak": None,
        "by_category": {}, "categories": [], "timeline": None, "live": [], "live_count": 0, "activations": [],
        "bounds": None, "forecast": _forecast_dict(prof.memory_forecast()) if has_peak else None, "notes": notes,
        "hbm_peak_bytes": None,
    }
    if hbm:
        total = [int(v) for v in hbm["total"]]
        ipk = max(range(len(total)), key=total.__getitem__) if total else None
        block.update(
            categories=list(hbm["categories"]), by_category=dict(hbm["by_category_at_peak"]),
            hbm_peak_bytes=int(hbm["peak_bytes"]),
            timeline={"x_ns": [float(v) for v in hbm["x_ns"]],
                      "x_label": "capture time (measured HBM by usage type)", "total": total,
                      **{c: [int(v) for v in hbm[c]] for c in hbm["categories"]}, "step_starts": [],
                      "events": int(hbm["samples"])})
        if not has_peak:     # the marker's label is the HBM peak only when it is the block's peak
            block["peak_bytes"] = int(hbm["peak_bytes"])
            block["peak"] = {"op": None, "module": None, "source": None, "phase": None, "step": None, "index": ipk}
        notes.append(f"HBM timeline: {hbm['source']}; peak {hbm['peak_bytes']:,} bytes (runtime, NEFFs, "
                     "profiler buffers and tensors: more than the allocator's peak)")
        notes.extend(hbm.get("notes") or [])
    return block


def _notes(prof: Any) -> list[str]:
    out = ["bytes of live device tensors as the emulator's allocator counts them (exact for the emulated device)"]
    if prof.trace.mode == "compile":
        out.append("compile mode: what a compiled graph returns is counted, the activations it saves for backward "
                   "too; its intermediates are not (on Trainium they are the compiled graph's own runtime memory, "
                   "outside the allocator's count as well)")
    released = int(((prof.trace.meta.get("memory") or {}).get("released_from_earlier_bytes")) or 0)
    if released:
        out.append(f"not counted: {fmt_bytes(released)} held from before this cell ran (e.g. the graph of an earlier "
                   "run's loss, with that run's parameters and gradients) and freed by it; torch.neuron's "
                   "max_memory_allocated() includes it, the step does not need it")
    return out
