"""What blocks a port or breaks fusion: CPU fallbacks, sync points, recompiles, transfers, idle gaps."""
from __future__ import annotations

import numpy as np
import pandas as pd

from neuron_studio.profiler.op_kinds import HOST_KINDS
from neuron_studio.profiler.recompile_causes import SHAPES

__all__ = ["cpu_fallbacks", "sync_points", "sync_places", "SYNC_PLACE", "recompiles", "shape_recompiles",
           "shape_compiles", "transfers", "idle_gaps"]

#: A sync place: one line of code where one op makes the host wait for one reason. Its occurrences (every
#: call, every profiled step) are one place, whatever module ran that line.
SYNC_PLACE = ("source", "op", "reason")


def cpu_fallbacks(ops: pd.DataFrame) -> pd.DataFrame:
    """Per op that needs the host (kind `host_fallback` or `host_round_trip`, profiler/op_kinds.py): count, host
    and modeled time, and the copies it implies. `kind` says which; `reason` is the coverage reason key (for a
    device op whose random mask the host draws: "host_rng_mask")."""
    sel = ops[ops["kind"].isin(HOST_KINDS)] if "kind" in ops else ops[ops["fallback"].notna()]
    cols = ["op", "kind", "reason", "count", "host_ns", "device_ns", "copy_bytes", "sources"]
    if sel.empty:
        return pd.DataFrame(columns=cols)
    sel = sel.assign(fallback=sel["fallback"].where(sel["fallback"].notna(), "host_rng_mask"))
    if "kind" not in sel:
        sel = sel.assign(kind="host_fallback")
    g = sel.groupby(["op", "kind", "fallback"], sort=False).agg(
        count=("seq", "size"), host_ns=("host_ns", "sum"), device_ns=("device_ns", "sum"),
        copy_bytes=("bytes", "sum"),
        sources=("source", lambda s: sorted({x for x in s if isinstance(x, str)})[:5])).reset_index()
    g = g.rename(columns={"fallback": "reason"})
    return g.sort_values("device_ns", ascending=False).reset_index(drop=True)[cols]


def sync_points(ops: pd.DataFrame, groups: list | None = None) -> pd.DataFrame:
    """Each op that made the host wait (and so closed an adaptive-eager fusion group), with its source line, its
    measured host time (`host_ns`: the call, wait included) and its modeled time (`device_ns`: the stall the
    model charges it on the device timeline, what the step breakdown counts as a sync stall)."""
    sel = ops[ops["sync"].notna()]
    if "tags" in sel:  # the profiler's own end-of-run synchronize is not the user's sync point
        sel = sel[~sel["tags"].fillna("").str.contains("timing_sync", regex=False)]
    cols = ["seq", "op", "reason", "source", "module", "breaks_group", "host_ns", "device_ns"]
    if sel.empty:
        return pd.DataFrame(columns=cols)
    boundary = set()
    for g in groups or ():
        seq = getattr(g, "boundary_seq", None)
        if seq is not None:
            boundary.add(int(seq))
    out = pd.DataFrame({
        "seq": sel["seq"].to_numpy(), "op": sel["op"].to_numpy(), "reason": sel["sync"].to_numpy(),
        "source": sel["source"].to_numpy(), "module": sel["module"].to_numpy(),
        "host_ns": sel["host_ns"].to_numpy(np.float64), "device_ns": sel["device_ns"].to_numpy(np.float64),
    })
    out["breaks_group"] = [int(s) in boundary for s in out["seq"]] if boundary else False
    return out[cols]


def sync_places(points: pd.DataFrame, steps: int, time: str | None) -> pd.DataFrame:
    """The sync points (`sync_points`) grouped per place (`SYNC_PLACE`: source line, op, reason), each with its
    occurrences per profiled step (`count`: 20 `.item()` calls per step read 20 whether 1 or 5 steps were
    profiled), the modules that ran it, whether it ended fusion groups, and the time it costs per step (`time_ns`)
    from the column `time` ("device_ns" modeled, "host_ns" measured; None: no time, `time_ns` is NaN).

    Ordered by time (costliest first) where known, then by count, then by first occurrence; the first place a
    step reaches comes first among equals."""
    cols = [*SYNC_PLACE, "modules", "count", "time_ns", "breaks_group", "first_seq"]
    if points.empty:
        return pd.DataFrame(columns=cols)
    per = max(1, int(steps))
    df = points.assign(source=points["source"].where(points["source"].notna(), None),
                       module=points["module"].fillna("").astype(str),
                       _t=points[time].astype(np.float64) if time else np.nan)
    g = df.groupby(list(SYNC_PLACE), sort=False, dropna=False)
    out = pd.DataFrame({
        "modules": g["module"].agg(lambda m: list(dict.fromkeys(m))),
        "count": g.size() / per,
        "time_ns": g["_t"].sum(min_count=1) / per,
        "breaks_group": g["breaks_group"].any(),
        "first_seq": g["seq"].min(),
    }).reset_index()
    out = out.sort_values(["time_ns", "count", "first_seq"], ascending=[False, False, True], na_position="last",
                          kind="stable")
    return out.reset_index(drop=True)[cols]


def recompiles(compiles: pd.DataFrame) -> pd.DataFrame:
    """Compiles of graphs compiled before, each with its `cause` ("shapes" when no earlier compile of the graph had
    its input shapes; else the guard that failed: profiler/recompile_causes.py), `reason` and Dynamo's `detail`."""
    if compiles.empty:
        return compiles.copy()
    return compiles[compiles["recompile"]].reset_index(drop=True)


def shape_recompiles(compiles: pd.DataFrame) -> pd.DataFrame:
    """The recompiles a new input shape caused (the ones padding to buckets removes)."""
    rc = recompiles(compiles)
    return rc[rc["cause"] == SHAPES].reset_index(drop=True) if len(rc) else rc


def shape_compiles(compiles: pd.DataFrame) -> pd.DataFrame:
    """The compiles that tell which input dimension varies: first compiles and the recompiles new shapes caused
    (a recompile for grad mode or a Python value has the shapes of an earlier compile)."""
    if compiles.empty:
        return compiles.copy()
    keep = ~compiles["recompile"].astype(bool) | (compiles["cause"] == SHAPES)
    return compiles[keep].reset_index(drop=True)


def transfers(ops: pd.DataFrame) -> pd.DataFrame:
    """Host<->device copies by direction and source line."""
    sel = ops[ops["transfer"].notna()]
    cols = ["direction", "source", "count", "bytes"]
    if sel.empty:
        return pd.DataFrame(columns=cols)
    g = sel.fillna({"source": ""}).groupby(["transfer", "source"], sort=False).agg(
        count=("seq", "size"), bytes=("transfer_bytes", "sum")).reset_index()
    return g.rename(columns={"transfer": "direction"}).sort_values("bytes", ascending=False).reset_index(drop=True)


def idle_gaps(ops: pd.DataFrame, *, min_gap_ns: int = 1000) -> pd.DataFrame:
    """Stretches where a NeuronCore does nothing between ops (waiting on the host or on a launch)."""
    rows = []
    for core, sel in ops[ops["device_ns"] > 0].groupby("core"):
        s = sel.sort_values("device_start_ns")
        starts = s["device_start_ns"].to_numpy(np.int64)
        ends = np.maximum.accumulate(s["device_end_ns"].to_numpy(np.int64))
        gaps = starts[1:] - ends[:-1]
        for i in np.nonzero(gaps >= min_gap_ns)[0]:
            rows.append({"core": int(core), "start_ns": int(ends[i]), "gap_ns": int(gaps[i]),
                         "before_op": s["op"].iloc[i + 1]})
    return pd.DataFrame(rows, columns=["core", "start_ns", "gap_ns", "before_op"])
