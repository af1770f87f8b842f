"""The whole run's trace at one resolution, small enough to travel inside the profile summary.

The inline HTML output and the JupyterLab renderer of a saved notebook have no server to ask for
level-of-detail windows; they draw this overview instead: every lane's boxes for the whole run at
`width_px` (`trace_lod`), single-op boxes with their name, module, source line and shapes.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from neuron_studio.profiler.analysis import trace_lod
from neuron_studio.profiler.analysis.fusion_regions import REGION_MODES
from neuron_studio.profiler.vocabulary import COLLECTIVE_PREFIX, DEVICE_ENGINES, ENGINE_LABELS, NO_ENGINE

__all__ = ["trace_overview", "OVERVIEW_WIDTH_PX", "region_table"]

#: Resolution of the overview: a box per pixel of an output about this wide, at most.
OVERVIEW_WIDTH_PX = 800


def _col(ops: Any, name: str, default: Any) -> np.ndarray:
    return ops[name].to_numpy() if name in ops else np.full(len(ops), default)


def trace_overview(prof: Any, width_px: int = OVERVIEW_WIDTH_PX) -> dict[str, Any] | None:
    """The overview of `prof`'s device timeline (None when it has no timed device op)."""
    m = prof.ops
    if not len(m):
        return None
    host = prof.trace.ops.set_index("seq")
    joined = host.reindex(m["seq"].to_numpy())
    names = m["op"].astype(str).to_numpy()
    name_codes, name_values = pd.factorize(names)
    engine_codes, engine_values = pd.factorize(m["engine"].astype(str).to_numpy())
    lanes = trace_lod.build_lanes(
        name_codes=name_codes, name_values=list(name_values), engine_codes=engine_codes,
        engine_values=list(engine_values), cores=m["core"].to_numpy(),
        starts=m["device_start_ns"].to_numpy(np.int64), ends=m["device_end_ns"].to_numpy(np.int64),
        device_engines=DEVICE_ENGINES, no_engine=NO_ENGINE, collective_prefix=COLLECTIVE_PREFIX,
        threads=joined["thread"].fillna(-1).to_numpy(np.int64) if "thread" in joined else None,
        launch_ns=np.nan_to_num(_col(m, "launch_ns", 0).astype(np.float64)).astype(np.int64),
        steps=joined["step"].fillna(-1).to_numpy(np.int64) if "step" in joined else None,
        engine_labels=ENGINE_LABELS)
    if not any(lane.starts.size for lane in lanes.lanes):
        return None
    lo, hi = lanes.first_start, max(lanes.last_end, lanes.first_start + 1)
    px_ns = trace_lod.check_window(lo, hi, width_px)
    seq = m["seq"].to_numpy(np.int64)
    text = {"name": names, "module": m["module"].fillna("").astype(str).to_numpy(),
            "source": m["source"].fillna("").astype(str).to_numpy(),
            "input_shapes": joined["input_shapes"].fillna("").astype(str).to_numpy()
            if "input_shapes" in joined else np.full(len(m), ""),
            "output_shapes": joined["output_shapes"].fillna("").astype(str).to_numpy()
            if "output_shapes" in joined else np.full(len(m), "")}
    engines = m["engine"].astype(str).to_numpy()
    flops = m["flops"].to_numpy(np.float64) if "flops" in m else None
    intern: dict[str, int] = {}
    ops: dict[str, dict[str, Any]] = {}
    regions, region_cols = _region_lanes(prof)
    region_info: dict[str, dict[str, Any]] = {}
    out_lanes = []
    for lane in trace_lod.with_region_lanes(lanes.lanes, regions):
        boxes = trace_lod.lane_boxes(lane, lo, hi, px_ns)
        if lane.kind == "regions":
            out_lanes.append({"id": lane.id, "label": lane.label, "kind": lane.kind, "core": lane.core,
                              "track": lane.track, "total": int(lane.starts.size),
                              **trace_lod.region_boxes_json(lane, boxes, lo, regions.split_ends[lane.id])})
            region_info.update(trace_lod.region_details(region_cols, boxes.rows))
            continue
        out_lanes.append({"id": lane.id, "label": lane.label, "kind": lane.kind, "core": lane.core,
                          "track": lane.track, "total": int(lane.starts.size),
                          **trace_lod.boxes_json(boxes, lo, seq, lambda idx: names[idx], intern)})
        for r in boxes.rows[boxes.rows >= 0].tolist():
            ops.setdefault(str(int(seq[r])), {
                "module": text["module"][r], "source": text["source"][r], "engine": engines[r],
                "input_shapes": text["input_shapes"][r], "output_shapes": text["output_shapes"][r],
                "flops": float(flops[r]) if flops is not None else None})
    return {"origin_ns": lo, "start_ns": lo, "end_ns": hi, "width_px": width_px, "px_ns": px_ns,
            "run_start_ns": lo, "run_end_ns": hi, "total_ops": int(len(m)), "names": list(intern),
            "steps": [{"step": s, "start": t - lo} for s, t in lanes.steps if s >= 0],
            "lanes": out_lanes, "ops": ops, "regions": region_info,
            "clock": "modeled" if prof.modeled_figures else "measured"}


def region_table(prof: Any) -> pd.DataFrame | None:
    """The launched regions drawn on the timeline (adaptive and compile runs; eager launches each op), in the
    columns the viewer reads; None when the run's mode has no multi-op launches or it has no regions."""
    if prof.trace.mode not in REGION_MODES:
        return None
    reg = prof.fusion_regions()
    if not len(reg):
        return None
    return pd.DataFrame({
        "core": reg["core"].astype("int32"), "start_ns": reg["start_ns"].astype("int64"),
        "end_ns": reg["end_ns"].astype("int64"), "step": reg["step"].astype("int32"),
        "n_ops": reg["n_ops"].astype("int64"), "launches": reg["launches"].astype("int64"),
        "first_op": reg["first_op"].astype(str), "last_op": reg["last_op"].astype(str),
        "ended_by": reg["ended_by"].astype(str), "fix": reg["fix"].fillna("").astype(str),
    })


def _region_lanes(prof: Any) -> tuple[trace_lod.RegionLanes | None, dict[str, np.ndarray]]:
    table = region_table(prof)
    if table is None:
        return None, {}
    cols = {c: table[c].to_numpy() for c in table.columns}
    return trace_lod.region_lanes_from_columns(cols), cols
