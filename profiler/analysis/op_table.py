"""Op table: where device and host time go, per aten op or per module path."""
from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from neuron_studio.profiler.analysis.group_mode import most_common

__all__ = ["op_table", "module_tree", "OP_TABLE_COLUMNS", "MEASURED_COLUMNS"]

OP_TABLE_COLUMNS = ["key", "count", "device_ns", "host_ns", "self_device_ns", "flops", "bytes", "engine", "bound",
                    "share", "per_step_device_ns", "kind", "region_splits"]


#: Added when the table ranks by measured time (ops recorded without shapes): the measured time per key, per step.
MEASURED_COLUMNS = ["measured_ns", "per_step_measured_ns"]


def op_table(ops: pd.DataFrame, *, by: str = "op", steps: int = 1, sort: str = "device_ns",
             top: int | None = None, ascending: bool = False, measured_ns: pd.Series | None = None,
             basis: str = "modeled device time") -> pd.DataFrame:
    """Aggregate per op name (`by="op"`) or module path (`by="module"`); `share` is of total device time.

    `measured_ns` (per row of `ops`): the measured time to rank by instead, for ops the model cannot size
    (recorded without shapes): the table gains `measured_ns`/`per_step_measured_ns`, `share` becomes the
    share of the measured time, and the default sort is by it. `basis` names it (`table.attrs["basis"]`)."""
    if by not in ("op", "module"):
        raise ValueError(f"by must be 'op' or 'module'; got {by!r}")
    measured = measured_ns is not None
    columns = OP_TABLE_COLUMNS + (MEASURED_COLUMNS if measured else [])
    if ops.empty:
        empty = pd.DataFrame(columns=columns)
        empty.attrs["basis"] = basis
        return empty
    if measured:
        ops = ops.assign(measured_ns=pd.Series(measured_ns).to_numpy(dtype="float64"))
    g = ops.groupby(by, sort=False, dropna=False)
    out = g.agg(
        count=("seq", "size"),
        device_ns=("device_ns", "sum"),
        host_ns=("host_ns", "sum"),
        flops=("flops", "sum"),
        bytes=("bytes", "sum"),
        **({"measured_ns": ("measured_ns", "sum")} if measured else {}),
    )
    out["engine"] = most_common(g, "engine", "")
    out["bound"] = most_common(g, "bound", "")
    out["kind"] = most_common(g, "kind", "") if "kind" in ops else ""
    # launch units this op ended (an in-place op, a host read, ...): where the user's code splits fused regions
    out["region_splits"] = g["region_splits"].sum() if "region_splits" in ops else 0
    out = out.reset_index().rename(columns={by: "key"})
    out["self_device_ns"] = out["device_ns"]
    if by == "module":
        # total = self + descendants' time, as in a module tree
        totals = {k: v for k, v in zip(out["key"], out["device_ns"])}
        out["device_ns"] = [sum(v for p, v in totals.items() if p == k or p.startswith(k + ".")) if k else totals[k]
                            for k in out["key"]]
    total = float(ops["device_ns"].sum()) or 1.0
    out["share"] = out["self_device_ns"] / total
    out["per_step_device_ns"] = out["self_device_ns"] / max(1, steps)
    if measured:
        out["share"] = out["measured_ns"] / (float(ops["measured_ns"].sum()) or 1.0)
        out["per_step_measured_ns"] = out["measured_ns"] / max(1, steps)
        sort = "measured_ns" if sort == "device_ns" else sort
    if sort not in out.columns:
        raise ValueError(f"cannot sort by {sort!r}; columns: {list(out.columns)}")
    out = out.sort_values(sort, ascending=ascending, kind="stable").reset_index(drop=True)
    out = out[columns]
    out = out.head(top) if top else out
    out.attrs["basis"] = basis
    return out


def module_tree(ops: pd.DataFrame, *, steps: int = 1, label: Callable[[str], str] | None = None) -> pd.DataFrame:
    """One row per module path with its depth and per-step calls, self and total device time, FLOPs and bytes (a
    tree view). Per step, like the op table's `per_step_device_ns`, so the tree reads the same whatever the number
    of profiled steps. `label` maps a recorded module to how views show it ("" -> "top level", `module_label`)."""
    t = op_table(ops, by="module", steps=steps)
    per = float(max(1, steps))
    keys = t["key"].fillna("").astype(str)
    out = pd.DataFrame({
        "key": keys.map(label) if label is not None else keys,
        "depth": keys.str.count(r"\."),
        "per_step_count": t["count"] / per,
        "per_step_self_device_ns": t["self_device_ns"] / per,
        "per_step_device_ns": t["device_ns"] / per,
        "per_step_flops": t["flops"] / per,
        "per_step_bytes": t["bytes"] / per,
        "share": t["share"],
    })
    return out.assign(_path=keys).sort_values("_path", kind="stable").drop(columns="_path").reset_index(drop=True)
