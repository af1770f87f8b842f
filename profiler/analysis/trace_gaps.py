"""What an imported trace lacks for the analyses, said in words: each gap names what is missing, what it
changes, and how to record it. The summary and the panel show these as warnings.

`hot_basis` picks what the hot path ranks by: the model's device time when the ops are sized; measured GPU
time (or measured host time without a GPU) when too many ops were recorded without shapes, so a ranking is
never built on ops the model could not size.
"""
from __future__ import annotations

import pandas as pd

from neuron_studio.profiler.kineto import is_collective_name

__all__ = ["unsized_ops", "hot_basis", "trace_gaps", "UNSIZED_LIMIT", "MODELED", "MEASURED_GPU", "MEASURED_HOST"]

#: Above this share of ops without recorded shapes, the hot path ranks by measured time instead.
UNSIZED_LIMIT = 0.10
MODELED, MEASURED_GPU, MEASURED_HOST = "modeled device time", "measured GPU time", "measured host time"
_RECORD = "record with torch.profiler.profile(record_shapes=True)"


def unsized_ops(trace_ops: pd.DataFrame) -> int:
    """Ops whose inputs were not recorded (imported traces mark them with input_shapes None)."""
    return int(trace_ops["input_shapes"].isna().sum()) if len(trace_ops) else 0


def hot_basis(meta: dict, trace_ops: pd.DataFrame, gpu_linked_ns: float) -> str:
    """Only imported torch.profiler traces can lack shapes; every other run ranks by its device time."""
    n = len(trace_ops)
    if (meta.get("imported") or {}).get("kind") != "chrome-trace" or not n \
            or unsized_ops(trace_ops) <= UNSIZED_LIMIT * n:
        return MODELED
    return MEASURED_GPU if gpu_linked_ns > 0 else MEASURED_HOST


def trace_gaps(meta: dict, trace_ops: pd.DataFrame, activity: pd.DataFrame) -> list[str]:
    imp = meta.get("imported")
    if not isinstance(imp, dict):
        return []
    out: list[str] = []
    n = len(trace_ops)
    if not n:
        cats = ", ".join(sorted(imp.get("categories", {}))[:12]) or "none"
        out.append(f"no ops found among {imp.get('complete_events', 0)} complete events (categories: {cats}); "
                   "the op table, hot path and model are empty. Ops are cpu_op events named namespace::op "
                   "(record with torch.profiler, activities including ProfilerActivity.CPU)")
    unsized = unsized_ops(trace_ops)
    if unsized:
        pct = 100.0 * unsized / n
        what = (f"the hot path ranks by {MEASURED_GPU if len(activity) else MEASURED_HOST} instead"
                if unsized > UNSIZED_LIMIT * n else "their modeled time is launch overhead only")
        out.append(f"{unsized} of {n} ops ({pct:.0f}%) have no recorded input shapes, so the NeuronCore model "
                   f"cannot size them; {what}. To model them, {_RECORD}")
    if n and not imp.get("step_windows"):
        out.append("no ProfilerStep#N annotations: the whole trace counts as one step. Call prof.step() once per "
                   "iteration (torch.profiler.profile(schedule=...)) to get per-step figures")
    if meta.get("rank") is None and n and trace_ops["name"].astype(str).map(is_collective_name).any():
        out.append("the trace has collectives but no distributedInfo, so its rank is unknown and ranks follow the "
                   "order the files are given in; kineto writes distributedInfo when torch.distributed is "
                   "initialised before profiling")
    if n and not len(activity) and imp.get("device_kind", "none") is None:
        out.append("the trace has no GPU or other device activity (a CPU-only trace): every figure of it is "
                   "measured host time; the NeuronCore figures are modeled from its ops' recorded shapes only")
    if imp.get("timestamps") == "float64":
        out.append("timestamps were read at float64 precision (the file's decimal text could not be matched "
                   "to its events), so event times may be off by up to 0.25 µs and nesting may be approximate")
    if len(activity):
        orphan = int(activity.loc[activity["op_seq"] < 0, "dur_ns"].sum())
        total = int(activity["dur_ns"].sum())
        if total and orphan:
            out.append(f"{100.0 * orphan / total:.1f}% of the measured GPU time has no recorded launching op "
                       "(its runtime call is missing from the trace or ran outside any op); it is counted as "
                       "unattributed, not spread over ops")
    out.extend(str(x) for x in imp.get("notes", []))
    return out
