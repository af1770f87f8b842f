"""The headline figures of a measured Neuron profile, each with the field it was measured from.

Neuron's Summary (Parquet `Summary`, JSON `summary`, summary-json) gives times in seconds and `*_percent` fields;
AWS's schema page calls their unit "percent" but every real summary holds 0-1 fractions
(`tensor_engine_active_time / total_time == tensor_engine_active_time_percent`). The scale is therefore checked
inside each summary: every `<x>_active_time` / `total_time` pair is compared with its `<x>_active_time_percent`;
when they agree as fractions (or as 0-100 percent) that scale is used and said; when they disagree, the times win
and a warning says so. Where no pair exists the fraction convention of real output is assumed and stated.

Utilization = active time / total time, as the Summary defines it (total_time includes idle start-up;
total_active_time does not). DMA is DMA: without `dma_active_time*` (or DMA rows) DMA utilization is "not
captured", never the Sync engine's figure.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from neuron_studio.profiler.timebase import seconds_to_ns
from neuron_studio.profiler.neuron_profile.values import ENGINES

__all__ = ["PercentScale", "percent_scale", "Figure", "SummaryFigures", "summary_figures", "ChipChoice",
           "resolve_chip", "instance_family", "SUMMARY_ENGINES"]

#: The engines the Summary has `<engine>_engine_active_time*` fields for: the compute engines and Sync (SP).
SUMMARY_ENGINES = ENGINES
_REL_TOL = 1e-2          # written values are rounded; a 100x scale error is far outside this


def _f(d: Mapping[str, Any], key: str) -> float | None:
    v = d.get(key)
    if isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class PercentScale:
    """How to read `*_percent` fields: value x `factor` = fraction. `basis` says why; `warnings` if disagreeing."""

    factor: float
    basis: str
    disagree: tuple[str, ...] = ()          # the pairs whose percent field matches neither scale

    @property
    def warnings(self) -> list[str]:
        if not self.disagree:
            return []
        return [f"Summary percent fields disagree with their own times ({', '.join(self.disagree)}): utilization "
                "is taken from active time / total_time; the percent fields were not used"]


def _pairs(summ: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    total = _f(summ, "total_time")
    out = []
    if not total or total <= 0:
        return out
    for key in sorted(summ):
        m = re.fullmatch(r"(.+_active_time)_percent", key)
        if not m:
            continue
        t, pct = _f(summ, m.group(1)), _f(summ, key)
        if t is not None and pct is not None:
            out.append((key, t / total, pct))
    return out


def percent_scale(summ: Mapping[str, Any]) -> PercentScale:
    """The scale of this summary's `*_percent` fields, checked against its own active/total times."""
    pairs = _pairs(summ)
    frac = [k for k, r, p in pairs if math.isclose(p, r, rel_tol=_REL_TOL, abs_tol=1e-12)]
    pct = [k for k, r, p in pairs if not math.isclose(p, r, rel_tol=_REL_TOL, abs_tol=1e-12)
           and math.isclose(p, 100 * r, rel_tol=_REL_TOL, abs_tol=1e-10)]
    bad = tuple(f"{k} = {p:.6g} vs {k[:-8]} / total_time = {r:.6g}" for k, r, p in pairs
                if k not in frac and k not in pct)
    if frac and not pct:
        return PercentScale(1.0, f"0-1 fractions (checked: {len(frac)} of {len(pairs)} active-time pairs agree)",
                            bad)
    if pct and not frac:
        return PercentScale(0.01, f"0-100 percent (checked: {len(pct)} of {len(pairs)} active-time pairs agree)",
                            bad)
    if pairs and not frac and not pct:
        return PercentScale(1.0, "unchecked: no active-time pair agrees with its percent field", bad)
    if frac and pct:
        return PercentScale(1.0, "mixed: some percent fields read as fractions, some as percent", bad)
    big = [k for k in summ if k.endswith("_percent") and (_f(summ, k) or 0.0) > 1.0 + 1e-9]
    if big:
        return PercentScale(0.01, f"0-100 percent (inferred: {big[0]} = {_f(summ, big[0]):.6g} > 1)")
    return PercentScale(1.0, "0-1 fractions assumed (AWS's summary convention; no active time to check against)")


@dataclass(frozen=True)
class Figure:
    """One figure with its provenance: `label` is measured / derived / not captured / unavailable."""

    value: float
    label: str
    source: str


@dataclass
class SummaryFigures:
    """Step time, per-engine busy time and utilization, MFU and MBU of one profile, each with its provenance."""

    step_ns: Figure
    busy_ns: dict[str, float] = field(default_factory=dict)
    utilization: dict[str, Figure] = field(default_factory=dict)
    mfu: Figure | None = None
    mbu: Figure | None = None
    scale: PercentScale | None = None


def _ns(seconds: float) -> float:
    return seconds_to_ns(seconds)


def summary_figures(summ: Mapping[str, Any], *, ops_busy_ns: Mapping[str, float], ops_span_ns: float | None,
                    dma_rows_busy_ns: float | None, flops: float, bytes_: float, peak_flops_per_s: float,
                    hbm_bytes_per_s: float, summary_name: str = "Summary") -> SummaryFigures:
    """Step time, per-engine busy time and utilization, MFU and MBU with the field each came from.

    `ops_busy_ns`: per studio engine, the union of the op rows' instruction time (used only where the Summary
    has no figure for that engine); `dma_rows_busy_ns`: union of DMA rows (None when the file has none)."""
    nan = float("nan")
    S = summary_name
    scale = percent_scale(summ)
    total_s = _f(summ, "total_time")
    if total_s:
        step = Figure(_ns(total_s), "measured", f"{S}.total_time")
    elif _f(summ, "total_exec_time"):
        step = Figure(_ns(_f(summ, "total_exec_time") or 0.0), "measured", f"{S}.total_exec_time")
    elif ops_span_ns:
        step = Figure(float(ops_span_ns), "derived", "span of the instruction rows (no Summary.total_time)")
    else:
        step = Figure(nan, "not captured", "no Summary.total_time and no instruction rows")
    out = SummaryFigures(step_ns=step, scale=scale)
    step_ns = step.value
    for eng in SUMMARY_ENGINES + ("dma",):
        prefix = "dma" if eng == "dma" else f"{eng}_engine"
        sec, pct = _f(summ, f"{prefix}_active_time"), _f(summ, f"{prefix}_active_time_percent")
        if sec is not None and total_s:
            busy = _ns(sec)
            fig = Figure(busy / step_ns, "measured", f"{S}.{prefix}_active_time / {S}.total_time")
        elif pct is not None and math.isfinite(step_ns):
            fig = Figure(pct * scale.factor, "measured", f"{S}.{prefix}_active_time_percent ({scale.basis})")
            busy = fig.value * step_ns
        elif eng == "dma" and dma_rows_busy_ns is not None and step_ns > 0:
            busy = float(dma_rows_busy_ns)
            fig = Figure(busy / step_ns, "derived", "derived: union of the DMA rows / step time")
        elif eng != "dma" and eng in ops_busy_ns and step_ns > 0:
            busy = float(ops_busy_ns[eng])
            fig = Figure(busy / step_ns, "derived", f"derived: union of the {eng} instruction rows / step time")
        else:
            what = "dma_active_time" if eng == "dma" else f"{prefix}_active_time"
            fig = Figure(nan, "not captured", f"not captured: the profile has no {what} (and no rows to derive it)")
            busy = nan
        if eng == "sync" and fig.label == "not captured":
            continue
        out.utilization[eng] = fig
        out.busy_ns[eng] = busy
    mfu_pct, mbu_pct = _f(summ, "mfu_estimated_percent"), _f(summ, "mbu_estimated_percent")
    if mfu_pct is not None:
        out.mfu = Figure(mfu_pct * scale.factor, "measured", f"{S}.mfu_estimated_percent ({scale.basis})")
    elif flops > 0 and peak_flops_per_s > 0 and step_ns > 0:
        out.mfu = Figure(flops / (peak_flops_per_s * step_ns * 1e-9), "derived",
                         "derived: model FLOPs / (peak FLOP/s x step time)")
    else:
        out.mfu = Figure(nan, "not captured", "not captured: no mfu_estimated_percent and no FLOP counts")
    if mbu_pct is not None:
        out.mbu = Figure(mbu_pct * scale.factor, "measured", f"{S}.mbu_estimated_percent ({scale.basis})")
    elif bytes_ > 0 and hbm_bytes_per_s > 0 and step_ns > 0:
        out.mbu = Figure(bytes_ / (hbm_bytes_per_s * step_ns * 1e-9), "derived",
                         "derived: HBM bytes / (HBM bandwidth x step time)")
    else:
        out.mbu = Figure(nan, "not captured", "not captured: no mbu_estimated_percent and no HBM byte counts")
    return out


# -- chip ---------------------------------------------------------------------------------------------------
def instance_family(instance_type: Any) -> str | None:
    """'trn1.2xlarge' -> 'trn1', 'trn1n.32xlarge' -> 'trn1', 'inf2.xlarge' -> 'inf2'; None when not Neuron."""
    m = re.match(r"\s*(trn|inf)(\d)", str(instance_type or "").lower())
    return f"{m.group(1)}{m.group(2)}" if m else None


@dataclass(frozen=True)
class ChipChoice:
    chip: str                       # a spec-table chip, another Neuron family ("inf2"), or "unknown"
    chip_from: str                  # where it was read ("Metadata.instance_type", "argument", ...)
    instance_type: str | None
    in_spec_table: bool
    warnings: tuple[str, ...] = ()


def resolve_chip(chip: str | None, sources: list[tuple[str, Mapping[str, Any]]], known: tuple[str, ...]) -> ChipChoice:
    """The chip: the `chip` argument, else the first `instance_type` among `sources` ((label, row) pairs in the
    order the format puts them), else "unknown" (with a warning naming what to pass)."""
    found = [(label, str(row.get("instance_type"))) for label, row in sources
             if isinstance(row.get("instance_type"), str) and row.get("instance_type")]
    itype = found[0][1] if found else None
    fam = instance_family(itype)
    warns: list[str] = []
    if chip:
        c = chip.lower()
        if fam and fam != c:
            warns.append(f"chip={chip!r} overrides the profile's instance type {itype!r}")
        return ChipChoice(c, "argument", itype, c in known, tuple(warns))
    if itype is not None:
        c = fam or "unknown"
        if c not in known:
            warns.append(f"the profile was captured on {itype!r}, which has no entry in the spec table: peaks "
                         "come from the profile's Metadata where present, cost is unavailable")
        return ChipChoice(c, f"{found[0][0]}.instance_type", itype, c in known, tuple(warns))
    warns.append("the profile does not record the instance type, so the chip is unknown: peaks and cost are "
                 "unavailable; pass chip='trn1' (or trn2/trn3) to load_neuron_profile to cost it")
    return ChipChoice("unknown", "not recorded in the profile", None, False, tuple(warns))
