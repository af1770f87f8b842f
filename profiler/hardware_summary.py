"""The `hardware` block of the profile summary payload and the sentences the breakdown shows for a capture on real
Trainium: compile-cache figures of the cell, how the device executions were joined to PyTorch ops, and the Explorer
records (active window, collectives, dependency waits, throttling). JSON-safe; renderers only lay it out. Every
figure here is measured (read from TorchNeuron or the profile), none is modeled. None for emulated runs. Times of
the profiled window (active window, collectives, throttling, dependency waits) are per profiled step, like every
other figure of the summary; compile-cache figures are per cell (warm-up included), as they happen once.
"""
from __future__ import annotations

from typing import Any

from neuron_studio.profiler.summary_numbers import finite_float

__all__ = ["hardware_block", "hardware_notes"]


def _ms(ns: Any) -> str:
    v = finite_float(ns)
    if v is None:
        return "?"
    return f"{v / 1e6:.3g} ms" if v >= 1e5 else f"{v / 1e3:.3g} us"


def _per_step(rec: dict, steps: int) -> dict:
    """The records with every `*_ns` figure of the profiled window divided by the number of steps."""
    def div(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: (finite_float(v) / steps if k.endswith("_ns") and finite_float(v) is not None else div(v))
                    for k, v in o.items()}
        if isinstance(o, list):
            return [div(v) for v in o]
        return o

    return {k: div(v) for k, v in rec.items() if k != "hbm_usage"}


def hardware_block(meta: dict, steps: int = 1) -> dict[str, Any] | None:
    """What a real capture adds to the summary (None when the trace is not one)."""
    if meta.get("backend") != "real":
        return None
    steps = max(1, int(steps))
    rec = _per_step(meta.get("device_records") or {}, steps)
    out = {"profiler_api": meta.get("profiler_api"), "rank": meta.get("rank"),
           "compile_cache": meta.get("compile_cache"), "framework_join": meta.get("framework_join"),
           "active_window": rec.get("active_window"), "collectives": rec.get("collectives"),
           "dependencies": rec.get("dependencies"), "throttling": rec.get("throttling"),
           "hbm_peak_bytes": (rec.get("hbm_usage") or {}).get("peak_bytes"), "measured": True}
    return out if any(v is not None for k, v in out.items() if k != "measured") else None


def hardware_notes(meta: dict, steps: int = 1) -> list[str]:
    """One sentence per hardware record, for the breakdown's notes (window times per profiled step)."""
    if meta.get("backend") != "real":
        return []
    steps = max(1, int(steps))
    out = []
    cc = meta.get("compile_cache")
    if isinstance(cc, dict) and cc.get("line"):
        out.append(f"{cc['line']} (measured: torch_neuronx.metrics; {cc.get('hits', 0)} cache hits, "
                   f"{cc.get('misses', 0)} misses)")
    join = meta.get("framework_join")
    if isinstance(join, dict) and join.get("executions"):
        out.append(f"{join['joined']} of {join['executions']} device executions joined to their PyTorch op "
                   f"({join.get('with_source', 0)} with a source line) through TorchNeuron's framework mapping")
    rec = _per_step(meta.get("device_records") or {}, steps)
    aw = rec.get("active_window")
    if isinstance(aw, dict) and aw.get("total_ns"):
        out.append(f"device active {_ms(aw['active_ns'])} of {_ms(aw['total_ns'])} per step "
                   f"(Summary.total_active_time; total_time also holds {_ms(aw.get('idle_ns'))} idle, such as the "
                   "capture's start-up)")
    cl = rec.get("collectives")
    if isinstance(cl, dict) and cl.get("ops"):
        top = cl["ops"][0]
        out.append(f"collectives: {cl['count']} operations, {_ms(cl['time_ns'])} per step on the collective engines "
                   f"(most: {top['operation']} {top['algorithm']} x{top['count']}, {_ms(top['time_ns'])})")
    th = rec.get("throttling")
    if isinstance(th, dict) and th.get("time_ns"):
        lim = th.get("mean_limit")
        out.append(f"hardware throttling for {_ms(th['time_ns'])} per step"
                   + (f" (utilization limited to {lim:.0%} on average then)" if lim is not None else "")
                   + ": MFU/HFU lose that time (Explorer's Throttle table)")
    dep = rec.get("dependencies")
    if isinstance(dep, dict) and dep.get("top"):
        t = dep["top"][0]
        out.append(f"dependency waits: {_ms(dep['gap_ns'])} per step over {dep['edges']} edges, most between {t['from']} and "
                   f"{t['to']} ({_ms(t['gap_ns'])}; Explorer's Flow table)")
    return out
