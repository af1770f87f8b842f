"""Launched regions: one row per launch unit of the device run (an adaptive-eager region, an op that ran alone, a
compiled-graph execution, an eager op), with what ended it and, where the user's code decides it, the fix.

Pure: the device run's group columns and the joined op frame in, a DataFrame out.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["fusion_regions", "REGION_COLUMNS", "ENDED_BY", "region_boundary_counts", "SPLIT_REASONS",
           "REGION_MODES", "region_splits", "studio_syncs", "STUDIO_SYNC_TAG"]

REGION_COLUMNS = ["region", "core", "step", "first_op", "last_op", "first_seq", "last_seq", "n_ops", "launches",
                  "start_ns", "end_ns", "duration_ns", "reason", "ended_by", "boundary_op", "boundary_source", "fix"]

#: What a group's reason means to a reader ("{op}" is the boundary op).
ENDED_BY = {
    "matmul": "closed by matmul-family {op} (TorchNeuron concatenates up to and including it)",
    "in_place": "in-place {op}: a region boundary that runs alone",
    "collective": "collective {op}: runs alone",
    "transfer": "host↔device copy {op}: not an HLO kernel, runs alone",
    "buffer_limit": "buffer limit reached (TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT) at {op}",
    "sync": "host wait {op}: buffered ops run one by one, not concatenated",
    "fallback": "CPU fallback {op} (a host wait): buffered ops run one by one",
    "deterministic": "deterministic algorithms: adaptive eager is off, op by op",
    "step_end": "step end (the studio synchronises): buffered ops run one by one",
    "direct": "no open region (after a host wait or the step start, ops run alone until a matmul or boundary)",
    "eager": "eager: one launch per op",
    "graph_start": "next compiled graph starts",
    "graph_break": "graph ends; next op runs outside the compiled graph",
    "after_isolated": "after an op that runs alone",
    "end": "end of the run",
}
#: Reasons where the user's code splits a region, and what to write instead.
_FIX = {
    "in_place": "this in-place update splits the region: use the out-of-place form "
                "(`x = x + y` instead of `x += y` / `x.add_(y)`)",
    "sync": "move the host read (.item(), .cpu(), print) out of the step, or do it every N steps",
    "fallback": "replace the CPU-fallback op (a lowered op, another formulation, or an NKI kernel)",
    "buffer_limit": "raise TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT, or add a matmul boundary earlier",
    "deterministic": "turn off torch.use_deterministic_algorithms() for performance runs",
    "graph_break": "remove the graph break (see graph_breaks()) so the ops run inside the compiled graph",
}
#: In-place ops whose out-of-place form is an operator: the fix names it ("this `x += y` splits the region").
_OPERATOR_FORMS = {"add_": "+", "sub_": "-", "mul_": "*", "div_": "/"}
_OPTIMIZER_FIX = ("the optimizer's in-place updates run alone, one launch each: a fused optimizer "
                  "(`torch.optim.AdamW(..., fused=True)`; What if tab) or compiling the optimizer step fuses them")


def _fix(reason: str, op: Any, module: Any) -> str:
    """What to change where the user's code ends a region; names the op's own out-of-place form."""
    if reason != "in_place":
        return _FIX.get(reason, "")
    if isinstance(module, str) and module.startswith("optimizer"):
        return _OPTIMIZER_FIX
    base = str(op or "").rpartition("::")[2]
    sym = _OPERATOR_FORMS.get(base)
    if sym:
        return f"this `x {sym}= y` splits the region: write `x = x {sym} y` (out of place, it joins the region)"
    if base.endswith("_"):
        return (f"this in-place `{base}` splits the region: use its out-of-place form `{base[:-1]}` "
                "(`x = x.{0}(...)`), which joins the region".format(base[:-1]))
    return _FIX["in_place"]


#: Reasons counted as "splits a region" in the op table (the op's own code ends a region).
SPLIT_REASONS = ("in_place", "sync", "fallback", "collective", "transfer", "buffer_limit")
#: Modes whose launch unit can hold several ops (eager launches each op): their regions are drawn on the
#: timeline and their splits listed.
REGION_MODES = ("adaptive", "compile")


#: The tag of the studio's own sync at each step end (the emulator's synchronize_for_timing): a step end, never
#: the user's host read.
STUDIO_SYNC_TAG = "timing_sync"


def studio_syncs(ops: pd.DataFrame) -> np.ndarray:
    """Per op row: is it the studio's own step-end sync (tagged by the device), not one the user's code made?"""
    if "tags" not in ops:
        return np.zeros(len(ops), dtype=bool)
    return ops["tags"].fillna("").astype(str).str.contains(STUDIO_SYNC_TAG, regex=False).to_numpy()


def _short(src: Any) -> str:
    if not isinstance(src, str) or not src:
        return ""
    path, _, line = src.rpartition(":")
    return f"{os.path.basename(path) or path}:{line}" if path else src


def fusion_regions(groups: Any, ops: pd.DataFrame, *, launched_only: bool = True) -> pd.DataFrame:
    """One row per launch unit (`launched_only=False`: also units that launch nothing, e.g. a sync or a
    host fallback), ordered by first op. `reason`: the schedule's code; `ended_by`: the sentence; `fix`: what
    to change in the user's code, when the user's code decides it."""
    cols = getattr(groups, "columns", None)
    if cols is None or not len(cols.get("id", ())):
        return pd.DataFrame(columns=REGION_COLUMNS)
    n = len(cols["id"])
    frame = groups.to_frame()
    names = ops["op"].to_numpy(dtype=object)
    seq = ops["seq"].to_numpy()
    step = ops["step"].to_numpy() if "step" in ops else np.zeros(len(ops), dtype=np.int64)
    src = ops["source"].to_numpy(dtype=object)
    first, last = frame["first_row"].to_numpy(np.int64), frame["last_row"].to_numpy(np.int64)
    b = frame["boundary_row"].to_numpy(np.int64)
    reason = frame["boundary_reason"].to_numpy(dtype=object).copy()
    # the studio's own sync at a step end closes the region as the step end, not as the user's host read
    reason[(reason == "sync") & (b >= 0) & studio_syncs(ops)[np.maximum(b, 0)]] = "step_end"
    bop = np.where(b >= 0, names[np.maximum(b, 0)], None)
    bsrc = np.where(b >= 0, src[np.maximum(b, 0)], None)
    mods = ops["module"].to_numpy(dtype=object) if "module" in ops else np.full(len(ops), None, dtype=object)
    bmod = np.where(b >= 0, mods[np.maximum(b, 0)], None)
    ended = [ENDED_BY.get(r, r).format(op=o or "") + (f" at {_short(s)}" if isinstance(s, str) and s else "")
             for r, o, s in zip(reason, bop, bsrc)]
    out = pd.DataFrame({
        "region": np.arange(n), "core": frame["core"].to_numpy(), "step": step[first],
        "first_op": names[first], "last_op": names[last], "first_seq": seq[first], "last_seq": seq[last],
        "n_ops": frame["n_ops"].to_numpy(), "launches": frame["launches"].to_numpy(),
        "start_ns": frame["start_ns"].to_numpy(np.float64), "end_ns": frame["end_ns"].to_numpy(np.float64),
        "reason": reason, "ended_by": ended, "boundary_op": bop, "boundary_source": bsrc,
        "fix": [_fix(r, o, m) for r, o, m in zip(reason, bop, bmod)],
    })
    out["duration_ns"] = out["end_ns"] - out["start_ns"]
    if launched_only:
        out = out[out["launches"] > 0].reset_index(drop=True)
        out["region"] = np.arange(len(out))
    return out[REGION_COLUMNS]


def region_boundary_counts(groups: Any, ops: pd.DataFrame) -> np.ndarray:
    """Per op row: how many launch units this op ended with a reason the user's code decides (SPLIT_REASONS;
    the studio's own step-end sync is not one)."""
    counts = np.zeros(len(ops), dtype=np.int64)
    cols = getattr(groups, "columns", None)
    if cols is None or not len(cols.get("id", ())):
        return counts
    frame = groups.to_frame()
    sel = frame["boundary_reason"].isin(SPLIT_REASONS).to_numpy() & (frame["boundary_row"].to_numpy() >= 0)
    rows = frame["boundary_row"].to_numpy(np.int64)[sel]
    rows = rows[~studio_syncs(ops)[rows]]
    np.add.at(counts, rows, 1)
    return counts


def region_splits(regions: pd.DataFrame, steps: int) -> list[dict[str, Any]]:
    """Where the user's code ends regions (rows of `fusion_regions` with a fix), one entry per (reason, op,
    line), most per step first: the op, its line, regions it ends per step, what ended them, the fix."""
    split = regions[regions["fix"] != ""]
    if not len(split):
        return []
    split = split.fillna({"boundary_source": ""})
    g = split.groupby(["reason", "boundary_op", "boundary_source"], sort=False)
    out = [{"reason": r, "op": op, "source": src or None, "per_step": n / max(steps, 1),
            "ended_by": str(rows["ended_by"].iloc[0]), "fix": str(rows["fix"].iloc[0])}
           for (r, op, src), rows in g for n in (len(rows),)]
    return sorted(out, key=lambda d: -d["per_step"])
