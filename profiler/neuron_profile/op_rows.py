"""Explorer rows -> one row per framework op: from `Instruction` (grouped per framework op, device time = union
of instruction intervals) or else from the leaves of `FrameworkNode`."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from neuron_studio.profiler.neuron_profile.nki_kernels import kernels_per_op
from neuron_studio.profiler.neuron_profile.tables import ExplorerTables
from neuron_studio.profiler.neuron_profile.profiler_json import hlo_instruction_name
from neuron_studio.profiler.neuron_profile.values import (
    ENGINES, STUDIO_ENGINE, engine_of, int_col, intervals_len, nki_file, num_col, numbers, span, split_path, str_col,
)

__all__ = ["OpRows", "ops_from_instructions", "ops_from_framework_nodes", "ops_from_executions"]


@dataclass
class OpRows:
    """One row per op, in the profile's own time base (not yet rebased or ordered): `start` and `span_end` are
    exact int64 ns (epoch ns stay exact), `active` the union of the op's instruction intervals in ns."""

    name: np.ndarray
    module: np.ndarray
    start: np.ndarray
    active: np.ndarray
    span_end: np.ndarray
    engine: np.ndarray
    flops: np.ndarray
    bytes_read: np.ndarray
    bytes_written: np.ndarray
    count: np.ndarray                      # instructions (or 1 per framework node)
    hlo: np.ndarray
    keys: list                             # per op: the grouping key (for kernel attribution)
    kernels: dict = field(default_factory=dict)   # key -> list of kernel dicts
    source: np.ndarray | None = None       # per op: framework source line (bir_debug_info_source_location)
    wait_ns: np.ndarray | None = None      # per op: summed semaphore wait (evt_wait_time_ns)
    phase: np.ndarray | None = None        # per op: forward / backward / optimizer when joined to PyTorch


def _instruction_times(ins: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, duration) as exact int64 ns from start_ts plus end_ts and/or duration_ns."""
    start = int_col(ins, "start_ts", "Instruction.start_ts")
    end = int_col(ins, "end_ts", "Instruction.end_ts") if "end_ts" in ins.columns else None
    dur = None
    if "duration_ns" in ins.columns:
        d = pd.to_numeric(ins["duration_ns"], errors="coerce")
        if d.notna().all():
            dur = int_col(ins, "duration_ns", "Instruction.duration_ns")
        elif end is not None:
            dur = np.where(d.isna().to_numpy(), end - start, d.fillna(0).to_numpy(np.int64))
    if dur is None:
        dur = end - start if end is not None else np.zeros(len(ins), dtype=np.int64)
    if end is None:
        end = start + dur
    return start, end, dur


def _names(t: ExplorerTables, ins: pd.DataFrame, fid: np.ndarray) -> tuple[list[str], list[str]]:
    """Per instruction (op, module): the framework op (FrameworkInstruction name, else `layer`, both module
    paths), else the HLO instruction name, else the NKI kernel file, else "(unattributed)"."""
    fnames: dict[int, str] = {}
    fi = t.get("FrameworkInstruction")
    if fi is not None and "raw_framework_id" in fi.columns and "framework_name" in fi.columns:
        for k, v in zip(num_col(fi, "raw_framework_id", -1).astype(np.int64), str_col(fi, "framework_name")):
            if v and int(k) not in fnames:
                fnames[int(k)] = v
    verbatim, layer = str_col(ins, "op_name"), str_col(ins, "layer")
    hlo, nki = str_col(ins, "hlo_name"), str_col(ins, "nki_source_location")
    names, modules = [], []
    for i in range(len(ins)):
        f = int(fid[i])
        if verbatim[i]:
            nm, mod = verbatim[i], ""
        elif fnames.get(f) or layer[i]:
            nm, mod = split_path(fnames.get(f) or layer[i])
        elif hlo[i]:
            nm, mod = hlo_instruction_name(hlo[i]), ""
        elif nki_file(nki[i]) is not None:
            nm, mod = Path(nki_file(nki[i])[0]).name, ""
        else:
            nm, mod = (f"framework_op[{f}]" if f >= 0 else "(unattributed)"), ""
        names.append(nm)
        modules.append(mod)
    return names, modules


def ops_from_instructions(t: ExplorerTables) -> OpRows:
    """Instructions grouped per framework op (else per HLO name / NKI kernel): union of their intervals (exact
    int ns), busiest engine, source line and semaphore wait."""
    ins = t.get("Instruction")
    assert ins is not None
    start, end, dur = _instruction_times(ins)
    base = int(start.min()) if len(start) else 0      # offsets from here are small: exact in float64
    engine = np.asarray([engine_of(v) for v in str_col(ins, "engine")], dtype=object)
    fid = num_col(ins, "raw_framework_id", -1).astype(np.int64)
    names, modules = _names(t, ins, fid)
    df = pd.DataFrame({"fid": fid, "name": names, "module": modules, "start": (start - base).astype(np.float64),
                       "end": (end - base).astype(np.float64), "dur": dur.astype(np.float64), "engine": engine,
                       "flops": np.maximum(num_col(ins, "raw_flops") - num_col(ins, "flops_transpose"), 0.0),
                       "rd": num_col(ins, "hbm_read_bytes"), "wr": num_col(ins, "hbm_write_bytes"),
                       "hlo": [hlo_instruction_name(x) for x in str_col(ins, "hlo_name")],
                       "src": str_col(ins, "bir_debug_info_source_location"),
                       "wait": num_col(ins, "evt_wait_time_ns")})
    df["g"] = df.groupby(["fid", "name", "module"], sort=False).ngroup()
    # exact union of each op's instruction intervals: sum of max(0, end - max(start, max end so far in the op))
    srt = df.sort_values(["g", "start"], kind="stable")
    prev = srt.groupby("g")["end"].cummax().groupby(srt["g"]).shift(1)
    srt_active = np.maximum(0.0, srt["end"] - np.maximum(srt["start"], prev.fillna(-np.inf)))
    agg = pd.DataFrame({"g": srt["g"], "a": srt_active}).groupby("g")["a"].sum()
    grp = df.groupby("g", sort=True)
    first = grp.agg(name=("name", "first"), module=("module", "first"), fid=("fid", "first"),
                    start=("start", "min"), span_end=("end", "max"), flops=("flops", "sum"), rd=("rd", "sum"),
                    wr=("wr", "sum"), count=("dur", "size"), wait=("wait", "sum"))
    first["hlo"] = grp["hlo"].agg(lambda s: next((x for x in s if x), ""))
    first["src"] = grp["src"].agg(lambda s: next((x for x in s if x), ""))
    eng_time = df.pivot_table(index="g", columns="engine", values="dur", aggfunc="sum", fill_value=0.0)
    engine_g = eng_time.idxmax(axis=1).reindex(first.index).fillna("none")
    keys = [(int(f), str(nm), str(md)) for f, nm, md in zip(first["fid"], first["name"], first["module"])]
    ops = OpRows(
        name=first["name"].to_numpy(object), module=first["module"].to_numpy(object),
        start=first["start"].to_numpy(np.int64) + base, active=agg.reindex(first.index).to_numpy(np.float64),
        span_end=first["span_end"].to_numpy(np.int64) + base,
        engine=np.asarray([STUDIO_ENGINE.get(e, "none") for e in engine_g], dtype=object),
        flops=first["flops"].to_numpy(np.float64), bytes_read=first["rd"].to_numpy(np.float64),
        bytes_written=first["wr"].to_numpy(np.float64), count=first["count"].to_numpy(np.int64),
        hlo=first["hlo"].to_numpy(object), keys=keys, source=first["src"].to_numpy(object),
        wait_ns=first["wait"].to_numpy(np.float64),
    )
    ops.kernels = kernels_per_op(t, df["g"].to_numpy(), df["dur"].to_numpy(), keys)
    return ops


def ops_from_framework_nodes(t: ExplorerTables) -> OpRows:
    """The leaves of the FrameworkNode tree: union of `time_intervals`, the engine with the widest span."""
    fn = t.get("FrameworkNode")
    assert fn is not None
    if "framework_name" in fn.columns:
        paths = list(str_col(fn, "framework_name"))
        leaf = np.ones(len(fn), dtype=bool)
    else:
        node, parent = str_col(fn, "node_name"), str_col(fn, "parent_name")
        parent_of: dict[str, str] = {}
        for a, b in zip(node, parent):
            parent_of.setdefault(a, b)
        paths = []
        for a in node:
            segs, cur, seen = [a], parent_of.get(a), {a}
            while cur and cur not in seen and cur in parent_of:
                segs.append(cur)
                seen.add(cur)
                cur = parent_of.get(cur)
            paths.append("/".join(reversed(segs)))
        kids = str_col(fn, "children_names") if "children_names" in fn.columns else np.full(len(fn), "")
        leaf = np.asarray([not re.sub(r"[\[\]\s,]", "", k) for k in kids], dtype=bool)
    sel = np.flatnonzero(leaf)
    start = int_col(fn, "start_ts", "FrameworkNode.start_ts")[sel]
    end = int_col(fn, "end_ts", "FrameworkNode.end_ts")[sel] if "end_ts" in fn.columns else start
    ti = str_col(fn, "time_intervals")[sel] if "time_intervals" in fn.columns else np.full(len(sel), "")
    active = np.asarray([(intervals_len(v) if v else None) for v in ti], dtype=object)
    active = np.asarray([a if a is not None else max(0.0, e - s) for a, s, e in zip(active, start, end)],
                        dtype=np.float64)
    spans = np.zeros((len(sel), len(ENGINES)))
    for j, e in enumerate(ENGINES):
        c = f"total_time_{e}"
        if c in fn.columns:
            spans[:, j] = [span(v) for v in fn[c].to_numpy(object)[sel]]
        elif f"{e}_engine_instruction_count" in fn.columns:
            spans[:, j] = num_col(fn, f"{e}_engine_instruction_count")[sel] * 1e-9  # tie-break only
    engine = np.asarray([STUDIO_ENGINE[ENGINES[int(np.argmax(r))]] if r.max() > 0 else "none" for r in spans],
                        dtype=object)
    elems = np.asarray([sum(numbers(v)) for v in str_col(fn, "element_count_per_interval")[sel]]) \
        if "element_count_per_interval" in fn.columns else np.zeros(len(sel))
    telems = np.asarray([sum(numbers(v)) for v in str_col(fn, "transpose_element_count_per_interval")[sel]]) \
        if "transpose_element_count_per_interval" in fn.columns else np.zeros(len(sel))
    flops = 2.0 * np.maximum(elems - telems, 0.0)
    names, modules = zip(*[split_path(paths[i]) for i in sel]) if len(sel) else ((), ())
    return OpRows(
        name=np.asarray(names, dtype=object), module=np.asarray(modules, dtype=object), start=start, active=active,
        span_end=end, engine=engine, flops=flops, bytes_read=num_col(fn, "hbm_read_bytes")[sel],
        bytes_written=num_col(fn, "hbm_write_bytes")[sel], count=np.ones(len(sel), dtype=np.int64),
        hlo=np.full(len(sel), "", dtype=object), keys=[(-1, paths[i]) for i in sel],
    )


def ops_from_executions(t: ExplorerTables, ex: Any, labels: Any) -> OpRows:
    """One row per device execution (`executions.Executions`), named by its PyTorch op (`ExecutionLabels`): device
    time = union of the instructions that start inside its window (the window itself when the profile has no
    Instruction rows), engine = the one with the most instruction time, FLOPs and HBM bytes summed."""
    n = len(ex)
    active = (ex.end - ex.start).astype(np.float64)
    engine = np.full(n, "none", dtype=object)
    flops, rd, wr = np.zeros(n), np.zeros(n), np.zeros(n)
    count = np.ones(n, dtype=np.int64)
    hlo = np.full(n, "", dtype=object)
    wait = np.zeros(n)
    kernels: dict = {}
    keys = [(-2, int(i)) for i in range(n)]
    ins = t.get("Instruction")
    if ins is not None and len(ins):
        from neuron_studio.profiler.neuron_profile.executions import instruction_windows

        k = instruction_windows(ins, ex)
        start, end, dur = _instruction_times(ins)
        inside = k >= 0
        df = pd.DataFrame({"k": k[inside], "s": start[inside], "e": end[inside], "dur": dur[inside].astype(float),
                           "eng": [engine_of(v) for v in str_col(ins, "engine")[inside]],
                           "fl": np.maximum(num_col(ins, "raw_flops") - num_col(ins, "flops_transpose"), 0.0)[inside],
                           "rd": num_col(ins, "hbm_read_bytes")[inside], "wr": num_col(ins, "hbm_write_bytes")[inside],
                           "hlo": [hlo_instruction_name(x) for x in str_col(ins, "hlo_name")[inside]],
                           "wait": num_col(ins, "evt_wait_time_ns")[inside]})
        if len(df):
            g = df.groupby("k", sort=True)
            idx = g.size().index.to_numpy(np.int64)
            count[:] = 0
            count[idx] = g.size().to_numpy(np.int64)
            for col, arr in (("fl", flops), ("rd", rd), ("wr", wr), ("wait", wait)):
                arr[idx] = g[col].sum().to_numpy(np.float64)
            srt = df.sort_values(["k", "s"], kind="stable")
            prev = srt.groupby("k")["e"].cummax().groupby(srt["k"]).shift(1)
            part = np.maximum(0, srt["e"].to_numpy(np.int64) - np.maximum(
                srt["s"].to_numpy(np.int64), prev.fillna(np.iinfo(np.int64).min).to_numpy(np.int64)))
            active[idx] = pd.Series(part, index=srt.index).groupby(srt["k"]).sum().reindex(idx).to_numpy(np.float64)
            busiest = df.pivot_table(index="k", columns="eng", values="dur", aggfunc="sum", fill_value=0.0)
            engine[busiest.index.to_numpy(np.int64)] = [STUDIO_ENGINE.get(e, "none") for e in busiest.idxmax(axis=1)]
            hlo[idx] = g["hlo"].agg(lambda s: next((x for x in s if x), "")).to_numpy(object)
            gk = np.where(inside, k, n)
            kernels = kernels_per_op(t, gk, dur.astype(float), keys + [(-3, -1)])
            kernels.pop((-3, -1), None)
    return OpRows(
        name=np.asarray(labels.name, dtype=object), module=np.asarray(labels.module, dtype=object),
        start=ex.start.copy(), active=active, span_end=ex.end.copy(), engine=engine, flops=flops, bytes_read=rd,
        bytes_written=wr, count=count, hlo=hlo, keys=keys, kernels=kernels,
        source=np.asarray([s or "" for s in labels.source], dtype=object), wait_ns=wait,
        phase=np.asarray(labels.phase, dtype=object))
