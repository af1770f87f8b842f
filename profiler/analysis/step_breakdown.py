"""Where the step time goes: one stacked bar per step that adds up to the step time, and what it implies.

Every instant of a step is given to exactly one category, in priority order (as XProf's overview and HTA's
temporal breakdown do): *engine compute* (any NeuronCore engine busy; overlapped engines and cores counted
once, the union of their busy intervals), *collectives*, *CPU fallbacks* (host-run ops and host-drawn random
masks of device ops), *sync stalls* (ops where the host waited for the device: `.item()`, `.cpu()`),
*host↔device transfers*, *launch overhead*, and *idle* (nothing of the above). So the parts add up to the
step exactly; a breakdown that does not is an error (`BreakdownError`), never a bar.

A category the data cannot tell (a measured profile's launch cost is inside its op times; a CUDA trace has
no NeuronCore fallbacks) is reported as not determined with the reason, never as a zero.

Pure: arrays in, dataclasses / DataFrames out. `Profile.step_breakdown()` feeds it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from neuron_studio.profiler.analysis.binning import interval_coverage, union_intervals
from neuron_studio.profiler.vocabulary import DEVICE_ENGINES, counted, source_label

__all__ = ["CATEGORIES", "LABELS", "BreakdownError", "BreakdownPart", "Recommendation", "StepBreakdown",
           "RowCategories", "breakdown_windows", "modeled_rows", "modeled_breakdown", "gpu_breakdown", "host_breakdown",
           "unavailable_breakdown", "recommend", "advice_text", "change_scope", "MEASURED_UNDETERMINED", "RECOMMEND_MIN_SHARE",
           "MAX_RECOMMENDATIONS"]

#: Priority order: an instant in several categories counts for the first. "idle" is what none covers.
CATEGORIES = ("compute", "collective", "fallback", "sync", "transfer", "launch")
LABELS = {"compute": "engine compute", "collective": "collectives", "fallback": "CPU fallbacks & host round trips",
          "sync": "sync stalls", "transfer": "host↔device transfers", "launch": "launch overhead", "idle": "idle"}
#: A category below this share of the step implies no recommendation.
RECOMMEND_MIN_SHARE = 0.15
#: At most this many recommendations: the one or two changes the breakdown points at.
MAX_RECOMMENDATIONS = 2
_TOL = 1e-6
_SNAP_NS = 1e-6


class BreakdownError(ValueError):
    """The parts of a step do not add up to the step (names the step and the difference)."""


@dataclass(frozen=True)
class BreakdownPart:
    """One category of the mean step: ns and share, or `determined=False` with the reason in `note`."""

    key: str
    label: str
    ns: float | None
    share: float | None
    determined: bool = True
    note: str | None = None


@dataclass(frozen=True)
class Recommendation:
    """A change the breakdown implies, and the rows that justify it (`tab`: optable | hot | fallbacks | syncs;
    `ops`: the op names of those rows)."""

    category: str
    share: float
    text: str
    tab: str
    ops: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StepBreakdown:
    """The mean step split into categories (`parts`, adding up to `step_time_ns`), each step's split
    (`per_step`: one row per step, one column per category, NaN where not determined), recommendations."""

    basis: str                      # "modeled device time" | "measured device time" | "measured GPU time" | ...
    step_time_ns: float | None
    parts: list[BreakdownPart]
    per_step: pd.DataFrame
    recommendations: list[Recommendation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def available(self) -> bool:
        return self.step_time_ns is not None

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(p) for p in self.parts])

    def part(self, key: str) -> BreakdownPart:
        for p in self.parts:
            if p.key == key:
                return p
        raise KeyError(f"no category {key!r}; categories: {[p.key for p in self.parts]}")


@dataclass(frozen=True)
class RowCategories:
    """Per-row intervals of one category (starts, ends) plus the op/source that owns each interval."""

    starts: np.ndarray
    ends: np.ndarray
    ops: np.ndarray
    sources: np.ndarray


def breakdown_windows(windows: np.ndarray, intervals: dict[str, tuple[np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """Split each window [start, end) (sorted, disjoint) into CATEGORIES + idle by priority.

    `intervals[cat]` are that category's (starts, ends); missing categories cover nothing. Returns one row per
    window with start_ns, end_ns, step_ns and one column per category and "idle"; raises BreakdownError when a
    window's parts do not add up to it."""
    w = np.asarray(windows, dtype=np.float64).reshape(-1, 2)
    edges = w.reshape(-1)
    if len(edges) > 2 and np.any(np.diff(edges) < 0):
        raise BreakdownError("step windows must be sorted and disjoint")
    out = pd.DataFrame({"start_ns": w[:, 0], "end_ns": w[:, 1], "step_ns": w[:, 1] - w[:, 0]})
    acc_s: list[np.ndarray] = []
    acc_e: list[np.ndarray] = []
    prev = np.zeros(len(w))
    for cat in CATEGORIES:
        s, e = intervals.get(cat, (np.zeros(0), np.zeros(0)))
        acc_s.append(np.asarray(s, dtype=np.float64))
        acc_e.append(np.asarray(e, dtype=np.float64))
        us, ue = union_intervals(np.concatenate(acc_s), np.concatenate(acc_e))
        cover = interval_coverage(edges, us, ue)[::2] if len(edges) else np.zeros(0)
        out[cat] = cover - prev
        prev = cover
    out["idle"] = out["step_ns"] - prev
    parts = out[list(CATEGORIES) + ["idle"]].to_numpy()
    bad = (parts < -_TOL * np.maximum(out["step_ns"].to_numpy()[:, None], 1.0)).any(axis=1)
    diff = np.abs(parts.sum(axis=1) - out["step_ns"].to_numpy())
    bad |= diff > _TOL * np.maximum(out["step_ns"].to_numpy(), 1.0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BreakdownError(f"step window {i}: parts {dict(zip(list(CATEGORIES) + ['idle'], parts[i]))} do not add "
                             f"up to its {out['step_ns'].iloc[i]} ns")
    # float round-off (a few 1e-10 ns) is not time: snap it to zero, keeping the sum exact
    out[list(CATEGORIES) + ["idle"]] = np.where(np.abs(parts) < _SNAP_NS, 0.0, parts)
    return out


def modeled_rows(device_ops: pd.DataFrame, trace_ops: pd.DataFrame,
                 kinds: np.ndarray | None = None) -> dict[str, RowCategories]:
    """Each op's intervals by category, from the device timeline (row i of both tables is the same op).

    The category follows the op's one classification (`kinds`: profiler/op_kinds.py names per row, computed
    from the trace when not given): device ops → compute, collectives → collectives, CPU fallbacks and host
    round trips → host work ("fallback"; a device op whose random mask the host draws counts its mask time
    there and the rest as compute), syncs → sync stalls, transfers → transfers."""
    n = len(device_ops)
    start = device_ops["start_ns"].to_numpy(np.float64)
    end = device_ops["end_ns"].to_numpy(np.float64)
    ovh = device_ops["launch_overhead_ns"].to_numpy(np.float64) if "launch_overhead_ns" in device_ops \
        else np.zeros(n)
    mask = device_ops["host_mask_ns"].to_numpy(np.float64) if "host_mask_ns" in device_ops else np.zeros(n)
    engine = device_ops["engine"].to_numpy(dtype=object)
    names = trace_ops["name"].astype(str).to_numpy(dtype=object)
    sources = trace_ops["source"].to_numpy(dtype=object)
    if kinds is None:
        from neuron_studio.profiler.analysis.frame import op_kind_codes
        from neuron_studio.profiler.op_kinds import kind_names

        kinds = kind_names(op_kind_codes(trace_ops, engine))
    kinds = np.asarray(kinds, dtype=object)
    coll = kinds == "collective"
    host_dev = (kinds == "host_round_trip") & np.isin(engine, DEVICE_ENGINES)   # device op, host-drawn mask
    fb = ((kinds == "host_fallback") | (kinds == "host_round_trip")) & ~host_dev
    sync = kinds == "sync"
    tr = kinds == "transfer"
    dev = ((kinds == "device") | host_dev) & np.isin(engine, DEVICE_ENGINES)
    mask = np.where(host_dev, np.minimum(mask, end - start), 0.0)

    def rows(sel: np.ndarray, s: np.ndarray, e: np.ndarray) -> RowCategories:
        sel = sel & (e > s)
        return RowCategories(s[sel], e[sel], names[sel], sources[sel])

    masked = mask > 0
    fb_rows = rows(fb, start, end)
    mask_rows = rows(masked, start, start + mask)
    return {
        "compute": rows(dev, start + mask, end),
        "collective": rows(coll, start, end),
        "fallback": RowCategories(np.concatenate((fb_rows.starts, mask_rows.starts)),
                                  np.concatenate((fb_rows.ends, mask_rows.ends)),
                                  np.concatenate((fb_rows.ops, mask_rows.ops)),
                                  np.concatenate((fb_rows.sources, mask_rows.sources))),
        "sync": rows(sync, start, end),
        "transfer": rows(tr, start, end),
        "launch": rows(ovh > 0, start - ovh, start),
    }


def _step_edges(trace_ops: pd.DataFrame, starts: np.ndarray, origin: float, end: float) -> np.ndarray:
    """Windows [boundary_k, boundary_k+1) of consecutive steps: step k starts where its first op (or launch)
    starts on any core; the first window starts at `origin`, the last ends at `end`."""
    steps = trace_ops["step"].to_numpy() if "step" in trace_ops and len(trace_ops) else np.zeros(0)
    ids = np.unique(steps)
    if len(ids) <= 1:
        return np.asarray([[origin, end]])
    first = pd.Series(starts).groupby(steps).min().reindex(ids).to_numpy(np.float64)
    bounds = np.clip(np.maximum.accumulate(first), origin, end)
    bounds[0] = origin
    edges = np.concatenate((bounds, [end]))
    return np.stack((edges[:-1], edges[1:]), axis=1)


def _parts(per_step: pd.DataFrame, steps: int, undetermined: dict[str, str],
           labels: dict[str, str] | None = None) -> tuple[float, list[BreakdownPart]]:
    step = float(per_step["step_ns"].sum()) / max(1, steps)
    labels = {**LABELS, **(labels or {})}
    out = []
    for cat in (*CATEGORIES, "idle"):
        if cat in undetermined:
            out.append(BreakdownPart(cat, labels[cat], None, None, False, undetermined[cat]))
            continue
        ns = float(per_step[cat].sum()) / max(1, steps)
        out.append(BreakdownPart(cat, labels[cat], ns, ns / step if step > 0 else 0.0))
    return step, out


def modeled_breakdown(device_ops: pd.DataFrame, trace_ops: pd.DataFrame, *, steps: int, step_time_ns: float,
                      basis: str = "modeled device time", undetermined: dict[str, str] | None = None,
                      kinds: np.ndarray | None = None) -> tuple[StepBreakdown, dict[str, RowCategories]]:
    """The breakdown of a NeuronCore timeline (modeled, or measured with `undetermined` categories).

    `step_time_ns` is the run's step time summed over the profiled steps (the model's: the last op's end on
    the busiest core); the windows cover [first op's start, first op's start + step_time_ns)."""
    undetermined = dict(undetermined or {})
    cats = modeled_rows(device_ops, trace_ops, kinds)
    ovh = device_ops["launch_overhead_ns"].to_numpy(np.float64) if "launch_overhead_ns" in device_ops \
        else np.zeros(len(device_ops))
    starts = device_ops["start_ns"].to_numpy(np.float64) - ovh
    origin = float(starts.min()) if len(starts) else 0.0
    origin = min(origin, 0.0) if basis.startswith("modeled") else origin
    end = origin + float(step_time_ns)
    last = float(device_ops["end_ns"].max()) if len(device_ops) else origin
    if not basis.startswith("modeled") and last > end:   # a measured step time that does not span its ops
        end = last
    if last > end + _TOL * max(end, 1.0):
        raise BreakdownError(f"an op ends at {last} ns, after the step time {step_time_ns} ns")
    windows = _step_edges(trace_ops, starts, origin, end)
    per_step = breakdown_windows(windows, {c: (r.starts, r.ends) for c, r in cats.items() if c not in undetermined})
    per_step.insert(0, "step", _step_ids(trace_ops, len(per_step)))
    for c in undetermined:
        per_step[c] = np.nan
    step, parts = _parts(per_step, steps, undetermined)
    notes = []
    if len(per_step) != steps:
        notes.append(f"{len(per_step)} step window(s) found in the trace for {steps} profiled step(s); the bar "
                     "is the run's time divided by the profiled steps")
    return StepBreakdown(basis, step, parts, per_step, notes=notes), cats


def _step_ids(trace_ops: pd.DataFrame, n: int) -> np.ndarray:
    if "step" in trace_ops and len(trace_ops):
        ids = np.unique(trace_ops["step"].to_numpy())
        if len(ids) == n:
            return ids
    return np.arange(n)


#: A profile measured on Trainium: what its device tables cannot separate (idle time includes these).
MEASURED_UNDETERMINED = {
    "launch": "not separable: measured op times include their launch; gaps between launches count as idle",
    "fallback": "not in the device profile: CPU fallbacks run on the host; their time counts as device idle",
    "sync": "not in the device profile: the host's waits show as device idle",
}

_GPU_UNDETERMINED = {
    "fallback": "not in a GPU trace: every op ran on the GPU or the host as recorded (no NeuronCore fallbacks)",
    "sync": "not determined: a CUDA trace records synchronize calls as host time; GPU idle time includes them",
    "launch": "not determined: kernel launch cost is host time that overlaps GPU work; GPU idle time includes "
              "launch-bound gaps",
}


def gpu_breakdown(activity: pd.DataFrame, windows: pd.DataFrame) -> StepBreakdown:
    """Measured GPU time per step (ProfilerStep windows, else the GPU span as one step): kernels → compute,
    NCCL/RCCL → collectives, memcpy/memset → transfers, nothing running → idle."""
    s = activity["start_ns"].to_numpy(np.int64)
    e = s + activity["dur_ns"].to_numpy(np.int64)
    kind = activity["kind"].to_numpy(dtype=object)
    notes = []
    if len(windows):
        w = np.array(windows.sort_values("start_ns")[["start_ns", "end_ns"]].to_numpy(np.float64))
        w[:-1, 1] = np.minimum(w[:-1, 1], w[1:, 0])
        ids = windows.sort_values("start_ns")["step"].to_numpy()
    else:
        w = np.asarray([[float(s.min()), float(e.max())]])
        ids = np.asarray([0])
        notes.append("no ProfilerStep#N windows: the GPU span from the first to the last activity is one step")
    base = {"compute": kind == "compute", "collective": kind == "communication", "transfer": kind == "memory"}
    intervals = {c: (s[m].astype(np.float64), e[m].astype(np.float64)) for c, m in base.items()}
    per_step = breakdown_windows(w, intervals)
    per_step.insert(0, "step", ids)
    for c in _GPU_UNDETERMINED:
        per_step[c] = np.nan
    step, parts = _parts(per_step, len(per_step), _GPU_UNDETERMINED)
    return StepBreakdown("measured GPU time", step, parts, per_step, notes=notes)


_HOST_UNDETERMINED = {
    "fallback": "not in a CPU-only trace: every op ran on the host as recorded (no device to fall back from)",
    "sync": "not in a CPU-only trace: there is no device to wait for",
    "transfer": "not in a CPU-only trace: there is no device memory to copy to or from",
    "launch": "not in a CPU-only trace: host ops are not launched on a device",
}
#: On a CPU-only trace the compute part is the host's own op time, not a NeuronCore engine's.
_HOST_LABELS = {"compute": "host ops"}


def _step_window_array(windows: pd.DataFrame, s: np.ndarray, e: np.ndarray, what: str
                       ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """ProfilerStep windows (sorted, clipped to be disjoint) and their step numbers; without windows the span
    from the first start to the last end of (s, e) as one step, said in a note."""
    if len(windows):
        w = np.array(windows.sort_values("start_ns")[["start_ns", "end_ns"]].to_numpy(np.float64))
        w[:-1, 1] = np.minimum(w[:-1, 1], w[1:, 0])
        return w, windows.sort_values("start_ns")["step"].to_numpy(), []
    return (np.asarray([[float(s.min()), float(e.max())]]), np.asarray([0]),
            [f"no ProfilerStep#N windows: the {what} span from the first to the last one is one step"])


def host_breakdown(ops: pd.DataFrame, windows: pd.DataFrame, collective: np.ndarray) -> StepBreakdown:
    """Measured host time per step of a CPU-only trace (no device activity; e.g. a gloo job): the ops'
    own intervals (outermost ops, as recorded) → host ops, collectives (`c10d::` ops and the backend's
    ranges such as `gloo:all_reduce`, which on a gloo trace run on their own thread) → collectives,
    nothing running → idle. What a device would add (fallbacks, syncs, transfers, launches) is not determined."""
    s = ops["start_ns"].to_numpy(np.int64)
    e = ops["end_ns"].to_numpy(np.int64)
    collective = np.asarray(collective, dtype=bool)
    w, ids, notes = _step_window_array(windows, s, e, "op")
    intervals = {"compute": (s[~collective].astype(np.float64), e[~collective].astype(np.float64)),
                 "collective": (s[collective].astype(np.float64), e[collective].astype(np.float64))}
    per_step = breakdown_windows(w, intervals)
    per_step.insert(0, "step", ids)
    for c in _HOST_UNDETERMINED:
        per_step[c] = np.nan
    step, parts = _parts(per_step, len(per_step), _HOST_UNDETERMINED, _HOST_LABELS)
    return StepBreakdown("measured host time", step, parts, per_step, notes=notes)


def unavailable_breakdown(reason: str) -> StepBreakdown:
    """No breakdown: the data cannot tell (says why, with every category not determined)."""
    parts = [BreakdownPart(c, LABELS[c], None, None, False, reason) for c in (*CATEGORIES, "idle")]
    return StepBreakdown("not available", None, parts, pd.DataFrame(), notes=[reason])


# -- recommendations ---------------------------------------------------------------------------------------
def _where(source: Any) -> str:
    label = source_label(source) if isinstance(source, str) else ""
    return f" at {label}" if label else ""


def _top(rows: RowCategories, k: int = 5) -> list[tuple[str, str | None, float]]:
    """The ops (and source lines) owning most of a category's time: [(op, source, ns)], largest first."""
    if not len(rows.starts):
        return []
    df = pd.DataFrame({"op": rows.ops, "source": pd.Series(rows.sources, dtype=object).fillna(""),
                       "ns": rows.ends - rows.starts})
    g = df.groupby(["op", "source"], sort=False)["ns"].sum().sort_values(ascending=False, kind="stable")
    return [(op, src or None, float(ns)) for (op, src), ns in g.head(k).items()]


_MODE_NAMES = {"eager": "eager", "adaptive": "adaptive eager", "compile": "compile"}
#: The breakdown categories each kind of what-if row shrinks (a code change names its own).
_ADDRESSES = {"mode": ("launch", "sync"), "kernel": ("compute", "fallback")}


def advice_text(row: dict) -> str:
    """A ranked what-if row as the fix a recommendation names: the change, the line that applies it, the speedup."""
    sp = f"predicted {float(row['speedup']):.1f}x faster: What if tab"
    run = row.get("run")
    if run and row.get("kind") == "code" and row.get("where"):
        run = f"{run} ({row['where']})"
    if row.get("kind") == "mode":
        name = _MODE_NAMES.get(str(row.get("mode")), str(row.get("mode")))
    elif row.get("kind") == "kernel":
        name = f"NKI kernel {row.get('kernel')}"
    else:
        name = str(row.get("variant"))
    return f"{name}: {run} ({sp})" if run else f"{name} ({sp})"


def change_scope(device_ops: pd.DataFrame, trace_ops: pd.DataFrame, targets: Any, *, steps: int,
                 step_time_ns: float) -> dict[str, Any] | None:
    """What a code change acts on, as a recommendation cites it: the share of the step its ops take on the device
    timeline (their launches included, overlaps counted once), their launches per step and the source line where
    most of that time is. `targets`: the (op, module) pairs the change rewrites; row i of both tables is the same
    op; `step_time_ns` is summed over the `steps`. None when no recorded op is a target."""
    targets = set(targets or ())
    if not targets or not len(trace_ops) or len(device_ops) != len(trace_ops) or step_time_ns <= 0:
        return None
    names = trace_ops["name"].astype(str).to_numpy(dtype=object)
    modules = trace_ops["module"].astype(str).to_numpy(dtype=object)
    sel = np.fromiter(((n, m) in targets for n, m in zip(names, modules)), dtype=bool, count=len(names))
    if not sel.any():
        return None
    end = device_ops["end_ns"].to_numpy(np.float64)[sel]
    ovh = device_ops["launch_overhead_ns"].to_numpy(np.float64)[sel] if "launch_overhead_ns" in device_ops \
        else np.zeros(int(sel.sum()))
    start = device_ops["start_ns"].to_numpy(np.float64)[sel] - ovh
    us, ue = union_intervals(start, end)
    ns = float((ue - us).sum())
    by_source = pd.Series(end - start).groupby(pd.Series(trace_ops["source"].to_numpy(dtype=object)[sel])
                                               .fillna("").astype(str).to_numpy()).sum()
    source = str(by_source.idxmax()) if len(by_source) and by_source.max() > 0 else ""
    return {"share": ns / step_time_ns, "ns": ns / max(1, steps), "launches": float((ovh > 0).sum()) / max(1, steps),
            "source": source or None}


def _scope_text(row: dict | None) -> str:
    """"the AdamW optimizer's ops take 38% of the step, their 48 launches included, at cell [33] line 3" from an
    advice row's `scope` (`change_scope`) and `acts_on`; "" when the row has none. The share counts the ops'
    launches (`change_scope`), so the text says so: beside "52% engine compute" (a category of the same step, no
    launches) a bare "71% of the step" reads as a contradiction."""
    scope = (row or {}).get("scope")
    what = (row or {}).get("acts_on")
    if not scope or not what:
        return ""
    share = f"{what} take {100 * float(scope['share']):.0f}% of the step"
    where = _where(scope.get("source"))
    if scope.get("launches"):
        share += f", their {counted(scope['launches'], 'launch')} included" + ("," if where else "")
    return f"{share}{where}"


def _addresses(row: dict) -> tuple[str, ...]:
    return tuple(row.get("addresses") or _ADDRESSES.get(str(row.get("kind")), ()))


def recommend(bd: StepBreakdown, rows: dict[str, RowCategories], *, mode: str, launches_per_step: float | None = None,
              hot: Sequence[Any] = (), fallback_ops: Sequence[str] = (), fallback_reasons: dict | None = None,
              advice: Sequence[dict] | None = None) -> list[Recommendation]:
    """The one or two changes the breakdown implies (categories at or above RECOMMEND_MIN_SHARE, largest
    first), each naming the fix and the rows that justify it.

    `advice`: the what-if advisor's rows in its ranking (`what_if.rank_rows`, best first; dicts with kind, mode,
    variant, run, speedup, and for a code change the categories it `addresses`, what it `acts_on`, the `scope` of
    those ops (`change_scope`) and their names, `target_ops`: the reason it cites). The largest category's fix is the
    first-ranked row, so the bar's verdict and the What if line name the same change; a later category names the
    best-ranked row that shrinks it. Without a ranked row a category gets the general fix (never an NKI kernel
    the advisor did not rank)."""
    out: list[Recommendation] = []
    computed = advice is not None
    advice = list(advice or [])
    used: set[str] = set()
    ranked = sorted((p for p in bd.parts if p.determined and p.share is not None and p.key != "idle"),
                    key=lambda p: -p.share)
    if advice:   # the first-ranked change leads, under the largest category it shrinks (if one is large enough)
        lead = next((p for p in ranked if p.share >= RECOMMEND_MIN_SHARE and p.key in _addresses(advice[0])), None)
        if lead is not None:
            ranked.remove(lead)
            ranked.insert(0, lead)
    modes_named: list[str] = []

    def ranked_pick(category: str) -> dict | None:
        if not out and advice:
            pick = advice[0]
        else:   # modes are alternatives to each other: after one mode, never a second
            pick = next((a for a in advice if a["variant"] not in used and category in _addresses(a)
                         and not (a.get("kind") == "mode" and modes_named)), None)
        if pick is None:
            return None
        used.add(pick["variant"])
        if pick.get("kind") == "mode":
            modes_named.append(str(pick.get("mode")))
        return pick

    for p in ranked:
        if p.share < RECOMMEND_MIN_SHARE or len(out) >= MAX_RECOMMENDATIONS:
            break
        pct = f"{100 * p.share:.0f}%"
        top = _top(rows[p.key]) if p.key in rows else []
        ops = list(dict.fromkeys(op for op, _, _ in top))
        op, src = (top[0][0], top[0][1]) if top else ("", None)
        pick = ranked_pick(p.key)
        fix = advice_text(pick) if pick is not None else None
        # a code change's reason is what it acts on (its ops' share and line), not the category's largest op
        scope = _scope_text(pick)
        cited = list((pick or {}).get("target_ops") or ()) if scope else []
        if p.key == "launch":
            n = f" ({counted(launches_per_step, 'launch')} per step)" if launches_per_step else ""
            out.append(Recommendation(p.key, p.share, f"{pct} launch overhead{n}{'; ' + scope if scope else ''} → "
                                      f"{fix or _launch_fix(mode, computed)}", "optable", cited or ops))
        elif p.key == "fallback":
            tab = "fallbacks" if op in set(fallback_ops) else "optable"
            reason = str((fallback_reasons or {}).get(op) or "")
            if reason == "host_round_trip_cast":
                general = ("a 64-bit cast done on the host (copied there and back): cast to int32/float32 on the CPU "
                           "before moving the tensor to the device")
            elif reason.startswith("host_round_trip"):
                general = "the op is copied to the CPU and back: use a form of it the device runs, or an NKI kernel"
            elif tab == "fallbacks":
                general = "a device lowering or an NKI kernel for it"
            else:
                general = "its random mask is drawn on the host: drop dropout here or draw masks on the device"
            how = fix or general
            out.append(Recommendation(p.key, p.share, f"{pct} CPU fallback in {op}{_where(src)} → {how}", tab, ops))
        elif p.key == "sync":
            how = fix or "move .item() / .cpu() / printing out of the step (or do it every N steps)"
            out.append(Recommendation(p.key, p.share, f"{pct} sync stalls in {op}{_where(src)} → {how}", "syncs", ops))
        elif p.key == "transfer":
            how = fix or "create tensors on the device and keep them there"
            out.append(Recommendation(p.key, p.share, f"{pct} host↔device transfers in {op}{_where(src)} → {how}",
                                      "optable", ops))
        elif p.key == "collective":
            how = fix or "overlap communication with compute (DDP bucket size, FSDP prefetch) or shard less"
            out.append(Recommendation(p.key, p.share, f"{pct} collectives in {op} → {how}", "optable", ops))
        elif p.key == "compute":
            h = next((h for h in hot if h.bound in ("compute", "memory")), None)   # engine-bound work
            if h is None and fix is None:
                continue
            if scope:
                out.append(Recommendation(p.key, p.share, f"{pct} engine compute; {scope} → {fix}", "hot", cited))
                continue
            where = f", most in {h.op}{_where(h.source)} ({h.bound}-bound)" if h is not None else ""
            general = str(getattr(h, "why", "") or "").partition(": ")[2] or "see the hot path"
            out.append(Recommendation(p.key, p.share, f"{pct} engine compute{where} → {fix or general}",
                                      "hot", [h.op] if h is not None else ops))
    return out


def recompile_recommendation(shapes: Sequence[Any], compile_ns: float | None, row: dict | None = None,
                             all_shapes: Sequence[Any] | None = None) -> Recommendation | None:
    """Recompiles of a compiled step caused by new input shapes (`shapes`: theirs; recompiles with another cause
    are `guard_recompile_recommendation`'s): pad to a few bucket shapes,
    with the padding line for the one dimension that varies (between `all_shapes`, every compile's input shapes,
    else between the recompiles' `shapes`); None without recompiles. Lengths already at bucket multiples are told
    so (each bucket compiles once). `row`: the advisor's bucketing row (`code_changes.bucket_shapes`, ranked first
    when it applies), whose compile counts and re-modeled step the text then names."""
    from neuron_studio.profiler.analysis.code_changes import BUCKET, pad_line, varying_dimension

    shapes = [s for s in shapes if isinstance(s, str) and s]
    if not shapes:
        return None
    n = len(shapes)
    fix = "pad inputs to a few bucket shapes so torch.compile sees a few shapes (or mark the varying dimension dynamic)"
    found = varying_dimension([s for s in (all_shapes if all_shapes is not None else shapes) if isinstance(s, str)])
    if found is not None:
        d, dims = found
        lengths = list(dict.fromkeys(v[d] for v in dims))
        seen = ", ".join(str(v) for v in lengths[:6]) + (", ..." if len(lengths) > 6 else "")
        if all(v % BUCKET == 0 for v in lengths):
            fix = (f"dimension {d} of the input is already at bucket lengths ({seen}): each bucket compiles once; "
                   "fewer, larger buckets compile less but pad more")
        else:
            fix = (f"pad dimension {d} of the input (seen as {seen}) to a few bucket lengths: "
                   f"{pad_line(len(dims[0]), d)} so torch.compile sees a few shapes")
    if row is not None and row.get("compiles") is not None:
        fix += (f" ({row['variant']}; the padded step predicted at {float(row['speedup']):.2f}x this step's speed: "
                "What if tab)")
    cost = _compile_cost(compile_ns)
    return Recommendation("recompile", 0.0, f"{n} recompile{'s' if n != 1 else ''} (a new input shape each) → "
                          f"{fix}{cost}", "syncs", [])


def _compile_cost(compile_ns: float | None) -> str:
    return f"; each costs ~{compile_ns / 1e9:.0f} s of compile time (modeled, not in the step time)" if compile_ns else ""


def guard_recompile_recommendation(causes: Sequence[str], compile_ns: float | None) -> Recommendation | None:
    """Recompiles that new input shapes did not cause (`causes`: each one's `recompile_causes.CAUSES` key): what
    changed and what keeps it from changing, per cause; None without any. Never the shapes advice."""
    from neuron_studio.profiler.recompile_causes import CAUSES, SHAPES, cause_fix

    counts: dict[str, int] = {}
    for c in causes:
        if isinstance(c, str) and c and c != SHAPES:
            counts[c] = counts.get(c, 0) + 1
    if not counts:
        return None
    n = sum(counts.values())
    parts = "; ".join(f"{CAUSES.get(c, c)}{f' x{k}' if k > 1 else ''} → {cause_fix(c)}" for c, k in counts.items())
    return Recommendation("recompile", 0.0, f"{n} recompile{'s' if n != 1 else ''} with unchanged input shapes: "
                          f"{parts}{_compile_cost(compile_ns)}", "syncs", [])


def _launch_fix(mode: str, remodeled: bool) -> str:
    """Launch overhead with no ranked row for it: what would remove it, said as a general fix."""
    if remodeled:   # the advisor re-modeled the modes and none is predicted faster
        return ("fewer sync points and graph breaks, so that each launch does more work (no other mode is "
                "predicted faster here: What if tab)")
    return {"eager": "adaptive eager or compile", "adaptive": "compile (one launch per graph)",
            "compile": "fewer graph breaks and sync points (one launch per graph)"}.get(mode, "fuse ops")
