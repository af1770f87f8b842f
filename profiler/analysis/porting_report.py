"""Porting readiness: what stands between this run and running well on Trainium, worst first."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from neuron_studio.profiler.analysis.fusion_regions import region_splits
from neuron_studio.profiler.recompile_causes import CAUSES, SHAPES, cause_fix
from neuron_studio.profiler.summary_numbers import usd_text
from neuron_studio.profiler.vocabulary import counted, source_label

__all__ = ["CheckItem", "PortingReport", "porting_report"]

_UNSUPPORTED_DTYPES = {
    "float64": "TorchNeuron casts float64 to float32 in eager mode (precision loss); use float32/bfloat16",
    "int64": "TorchNeuron casts int64 to int32 in eager mode (overflow beyond 2**31); use int32 indices",
    "complex64": "complex dtypes have no NeuronCore lowering; they run on CPU",
    "complex128": "complex dtypes have no NeuronCore lowering; they run on CPU",
}


@dataclass
class CheckItem:
    severity: str        # "error" (blocks a good port), "warning", "ok", "info"
    topic: str           # fallbacks | dynamic_shapes | recompiles | dtypes | sync_points | regions | graph_breaks | memory | compile_cache | efficiency | cost
    message: str
    fix: str = ""
    details: list[str] = field(default_factory=list)


@dataclass
class PortingReport:
    run_id: int | None
    chip: str
    mode: str
    items: list[CheckItem]
    mfu: float
    cost_per_1000_steps_usd: float
    h100_cost_per_1000_steps_usd: float
    modeled: bool = True

    @property
    def blocking(self) -> list[CheckItem]:
        return [i for i in self.items if i.severity == "error"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _at(source: Any) -> str:
    """An op source as every view writes it (`cell [N] line L` / `file.py:L`), "?" when unknown."""
    return source_label(source) if isinstance(source, str) and source else "?"


def porting_report(prof: Any) -> PortingReport:
    items: list[CheckItem] = []
    fb = prof.cpu_fallbacks()
    if len(fb):
        items.append(CheckItem(
            "error", "fallbacks", f"{int(fb['count'].sum())} op executions in {len(fb)} op types fall back to CPU",
            "replace them (a lowered op, a different formulation, or an NKI kernel) or move them out of the step",
            [f"{r.op} x{r.count}: {r.reason}" + (f" at {_at(r.sources[0])}" if r.sources else "")
             for r in fb.itertuples(index=False)]))
    else:
        items.append(CheckItem("ok", "fallbacks", "no CPU fallbacks"))
    ops = prof.ops
    dd = ops[ops["sync"] == "data_dependent"]
    every = prof.recompiles()
    by_shape = every["cause"] == SHAPES if len(every) else pd.Series([], dtype=bool)
    rc, other = (every[by_shape], every[~by_shape]) if len(every) else (every, every)
    if len(dd) or len(rc):
        det = [f"{r.op} at {_at(r.source)}: output shape depends on values" for r in dd.head(10).itertuples()]
        det += [f"recompile of {r.graph_key}: {r.reason}" for r in rc.itertuples(index=False)]
        items.append(CheckItem(
            "error" if len(rc) else "warning", "dynamic_shapes",
            f"{len(dd)} data-dependent-shape ops and {len(rc)} recompiles for new input shapes: compile needs "
            "static shapes",
            "pad or bucket inputs to a few fixed shapes; replace boolean masking/nonzero with masks (torch.where)",
            det))
    else:
        items.append(CheckItem("ok", "dynamic_shapes", "no data-dependent shapes or recompiles for new shapes"))
    if len(other):
        causes = list(dict.fromkeys(other["cause"].astype(str)))
        items.append(CheckItem(
            "warning", "recompiles",
            f"{len(other)} recompile{'s' if len(other) != 1 else ''} with unchanged input shapes "
            f"({', '.join(CAUSES.get(c, c) for c in causes)})",
            "; ".join(f"{CAUSES.get(c, c)}: {cause_fix(c)}" for c in causes),
            [f"recompile of {r.graph_key}: {r.reason}" for r in other.itertuples(index=False)]))
    dtypes = set()
    for col in ("input_dtypes", "output_dtypes"):  # what ops read, and what they make (factories read nothing)
        if col in prof.trace.ops.columns:
            for s in prof.trace.ops[col].dropna():
                dtypes.update(x for x in str(s).split(",") if x)
    bad = sorted(d for d in dtypes if d in _UNSUPPORTED_DTYPES)
    if bad:
        items.append(CheckItem("warning", "dtypes", f"dtypes with caveats on Trainium: {', '.join(bad)}",
                               "cast once, outside the step", [f"{d}: {_UNSUPPORTED_DTYPES[d]}" for d in bad]))
    else:
        items.append(CheckItem("ok", "dtypes", "all dtypes are native on the NeuronCores"))
    sp = prof.sync_places()      # one row per place, as the Issues tabs list them
    sp = sp[sp["reason"] != "synchronize"] if len(sp) else sp
    if len(sp):
        per_step = round(float(sp["count"].sum()), 1)
        items.append(CheckItem(
            "warning", "sync_points", f"{per_step:g} host sync{'' if per_step == 1 else 's'} per step "
            f"({', '.join(sorted(set(sp['reason'])))})",
            "each sync ends an adaptive-eager fusion group and stalls the host: accumulate on device, "
            "call .item() once per N steps",
            [f"{r.op} ({r.reason}, {r.count:g} per step) at {_at(r.source)}"
             for r in sp.head(10).itertuples(index=False)]))
    else:
        items.append(CheckItem("ok", "sync_points", "no host syncs inside the step"))
    items.extend(_region_items(prof))
    memory = _memory_item(prof)
    if memory is not None:
        items.append(memory)
    compiles = _compile_item(prof)
    if compiles is not None:
        items.append(compiles)
    mfu = float(prof.mfu)
    items.append(CheckItem(
        "info" if mfu >= 0.3 else "warning", "efficiency",
        f"{'modeled' if prof.modeled_figures else 'measured'} MFU {mfu * 100:.1f}% on {prof.summary.chip} "
        f"({counted(prof.launches_per_step, 'launch')} per step)",
        "" if mfu >= 0.3 else "see the hot path: launch-bound ops want fusion (adaptive/compile), "
                             "memory-bound ops want fused kernels"))
    c = prof.cost()
    items.append(CheckItem(
        "info", "cost", f"modeled cost per 1M steps: {usd_text(c.per_1m_steps_usd)} on {c.chip} " + (
            f"vs {usd_text(c.h100_per_1m_steps_usd)} on H100 (x{c.ratio_vs_h100:.2f})"
            if math.isfinite(c.h100_per_1m_steps_usd) else "(no H100 comparison for a measured run)"),
        "an estimate from public prices and the performance model, not a measurement"))
    order = {"error": 0, "warning": 1, "info": 2, "ok": 3}
    items.sort(key=lambda i: order.get(i.severity, 9))
    return PortingReport(run_id=prof.run_id, chip=prof.summary.chip, mode=prof.trace.mode, items=items, mfu=mfu,
                         cost_per_1000_steps_usd=c.per_1000_steps_usd,
                         h100_cost_per_1000_steps_usd=c.h100_per_1000_steps_usd)


def _compile_item(prof: Any) -> CheckItem | None:
    """Real TorchNeuron: the cell's NEFF compiles from torch_neuronx.metrics (measured); None elsewhere."""
    cc = prof.trace.meta.get("compile_cache")
    if not isinstance(cc, dict):
        return None
    graphs = cc.get("graphs") or []
    new = [g for g in graphs if g.get("new_shape")]
    details = [f"{g.get('op') or '?'} at {_at(g.get('source'))}: {g.get('shapes') or '?'}, "
               f"{(g.get('time_ns') or 0) / 1e6:.3g} ms, NEFF {g.get('neff_bytes') or 0:,} bytes"
               for g in (new or sorted(graphs, key=lambda g: -(g.get("time_ns") or 0)))[:10]]
    if new:
        return CheckItem("warning", "compile_cache", cc.get("line") or "new shapes recompiled",
                         "keep shapes fixed between steps (pad or bucket the batch); each new shape compiles new NEFFs",
                         details)
    return CheckItem("info", "compile_cache", cc.get("line") or "compile cache", "", details)


def _region_items(prof: Any) -> list[CheckItem]:
    """Where the user's code splits adaptive-eager regions (adaptive runs) and where Dynamo broke the graph
    (compile runs), each at its source line."""
    items: list[CheckItem] = []
    mode = prof.trace.mode
    if mode == "adaptive":
        reg = prof.fusion_regions()
        splits = region_splits(reg, prof.steps)
        if splits:
            details = [f"{d['op']} at {_at(d['source'])} ({d['per_step']:.0f} per step): {d['fix']}"
                       for d in splits[:10]]
            items.append(CheckItem("warning", "regions",
                                   f"{len(reg) / prof.steps:.0f} adaptive-eager launches per step; "
                                   f"{sum(d['per_step'] for d in splits):.0f} end where your code splits a region",
                                   "see fusion_regions(): in-place updates and host reads end a region", details))
        else:
            items.append(CheckItem("ok", "regions", "no region split by an in-place op or host read"))
    elif mode == "compile":
        gb = prof.graph_breaks()
        if len(gb):
            items.append(CheckItem("warning", "graph_breaks", f"{int(gb['count'].sum())} graph break(s) at "
                                   f"{len(gb)} line(s): ops between graphs run eagerly, one launch each",
                                   "remove the break at its line (see graph_breaks())",
                                   [f"{_at(r.source)}: {r.reason}" for r in gb.itertuples(index=False)]))
        else:
            items.append(CheckItem("ok", "graph_breaks", "no graph breaks"))
    return items


def _memory_item(prof: Any) -> CheckItem | None:
    """Will the step fit: the peak against HBM per logical core on the run's chip, every chip/LNC, and the
    levers (modeled). None when the run holds no memory record."""
    from neuron_studio.profiler.analysis.memory import NoMemoryDataError
    from neuron_studio.profiler.analysis.memory_forecast import fmt_bytes

    try:
        fc = prof.memory_forecast()
    except NoMemoryDataError:
        return None
    details = [f"{c.chip} LNC={c.lnc}: {fmt_bytes(c.capacity_bytes)} per logical core, "
               + (f"headroom {fmt_bytes(c.headroom_bytes)}" if c.fits else f"short by {fmt_bytes(-c.headroom_bytes)}")
               + ("" if c.fits_while_profiling is not False or not c.fits else
                  f" (not with DEVICE profiling's ~{fmt_bytes(c.profiling_reserve_bytes)} reserved)")
               for c in fc.chips]
    useful = [lv for lv in fc.levers if lv.saving_bytes > 0]
    details += [f"{lv.title}: saves {fmt_bytes(lv.saving_bytes)} -> peak {fmt_bytes(lv.peak_bytes)}"
                f"{'' if lv.fits else ' (still too big)'} (modeled)" for lv in useful[:3]]
    fitting = [lv for lv in useful if lv.fits]
    if not fc.fits:
        fix = (f"{fitting[0].title}: {fitting[0].how}" if fitting else
               "no single lever fits: combine them (e.g. checkpointing with a smaller batch) or shard over more cores")
        return CheckItem("error", "memory", fc.summary_line(), fix, details)
    if fc.fits_while_profiling is False:
        return CheckItem("warning", "memory", fc.summary_line(),
                         "profile with a smaller batch, or leave DEVICE mode out of NeuronConfig", details)
    return CheckItem("ok", "memory", fc.summary_line() + " (modeled headroom "
                     f"{fmt_bytes(fc.headroom_bytes)})", "", details)
