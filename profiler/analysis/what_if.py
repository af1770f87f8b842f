"""What-if advisor: the recorded ops re-modeled under another mode, on another chip, or with a hot op's NKI
kernel swapped in, without rerunning anything.

Modes and chips go through the NeuronCore model's public entry point (`model_run`) on the recorded op
columns; only the mode's *grouping input* is changed, and how well that is known is said per row:
- another chip, same mode: exact under the model (same ops, that chip's specs);
- eager ↔ adaptive: TorchNeuron's op-concatenation rules (profiler/model/adaptive_regions.py) over the recorded
  ops, sync points and step ends (approximate only in assuming a deep execution queue);
- an eager/adaptive trace as compile: graphs are assumed between the sync points, CPU fallbacks, host copies,
  collectives and forward/backward/optimizer boundaries the trace shows; graph breaks Dynamo would add and
  recompiles are not known from an eager trace;
- a compiled trace as eager/adaptive: the graphs' (AOT-decomposed) ops stand in for the eager ops.
Kernel rows subtract the hot path's modeled saving (`hot_path.attach_savings`, the kernel model's factor)
from the profile's own step. The profile's own mode and chip is its own figures, exactly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from neuron_studio.profiler.analysis import variant_cell as _vc

__all__ = ["WhatIfError", "Variant", "rank_rows", "MIN_SPEEDUP", "KINDS", "synthetic_graphs", "ops_for_mode",
           "what_if_frame", "run_line", "kernel_savings",
           "COLUMNS", "REMODEL_MAX_OPS", "RemodelSteps", "remodel_steps", "MEASURED", "SCALED", "scaled_to", "EXACT", "APPROX_GROUPING", "APPROX_GRAPHS", "APPROX_DECOMPOSED", "APPROX_KERNEL", "PROFILE"]

PROFILE = "the profile's own figures"
EXACT = "re-modeled: same ops on this chip (exact under the model)"
APPROX_GROUPING = ("re-modeled, approximate: TorchNeuron's op-concatenation rules (regions close at matmuls; in-place "
                   "ops, host waits and step ends split them) over the recorded ops, assuming the host keeps the "
                   "device's queue deep (a starving device flushes earlier)")
APPROX_GRAPHS = ("re-modeled, approximate: graphs assumed between the trace's sync points, CPU fallbacks, host "
                 "copies, collectives and forward/backward/optimizer boundaries, in-place updates inside them (as "
                 "TorchNeuron's backend keeps input mutations in the NEFF). Not known from an eager trace: the "
                 "compiled graph's own ops (TorchNeuron's decompositions, e.g. attention as matmul + softmax where "
                 "its NKI flash kernel does not apply; the compiled optimizer's bias-correction math on the "
                 "device), their order, Dynamo's graph breaks and recompiles. The range's low end keeps each "
                 "op's output on chip for the next op that reads it; its high end moves every op's bytes through "
                 "HBM. Run compile to know")
APPROX_DECOMPOSED = ("re-modeled, approximate: the compiled graphs' decomposed ops stand in for the eager ops")
APPROX_KERNEL = ("approximate: the hot path's modeled saving of the kernel (kernel model at a reference call) "
                 "subtracted from this profile's step")

COLUMNS = ["variant", "kind", "mode", "chip", "kernel", "step_time_ns", "step_time_low_ns", "step_time_high_ns",
           "speedup", "mfu", "cost_per_1m_steps_usd", "current", "basis", "run", "where", "cell", "advisable",
           "why_not", "compiles", "rank"]

#: What a row changes, from the smallest edit to the largest: the ranking breaks ties (at the speedup shown, one
#: decimal) towards the smaller change.
KINDS = ("profile", "code", "mode", "chip", "kernel")
_EFFORT = {"code": 0, "mode": 1, "kernel": 4}
_MODE_EFFORT = {"eager": 0, "adaptive": 1, "compile": 2}
#: A row counts as advice when it is predicted at least this much faster than the profile.
MIN_SPEEDUP = 1.05


#: The most ops the summary re-models (prof.what_if() re-models every step, on request): re-modeling 9 variants
#: costs about 1.8x the rest of the summary (benchmarks/bench_advisor.py, BENCHMARKS.md). A run with more ops is
#: re-modeled from its first whole steps within this many (`remodel_steps`), so how many steps were profiled does
#: not decide whether the summary has a what-if.
REMODEL_MAX_OPS = 50_000


class WhatIfError(ValueError):
    """The advisor cannot re-model this profile (names what is missing and how to get it)."""


@dataclass(frozen=True)
class RemodelSteps:
    """The profiled steps a what-if re-models: all of them (`steps` empty), or the first whole ones within an op
    limit, whose re-modeled figures are then scaled to the profile's mean step (`note` says so)."""

    steps: tuple[int, ...]   # the trace's step numbers re-modeled; () = every step
    profiled: int            # steps profiled
    ops: int                 # ops re-modeled
    max_ops: int | None

    @property
    def every_step(self) -> bool:
        return not self.steps

    @property
    def note(self) -> str | None:
        """Which steps the rows come from, when not all (None when all were re-modeled)."""
        if self.every_step:
            return None
        k = len(self.steps)
        numbers = f"step {self.steps[0]}" if k == 1 else f"steps {self.steps[0]}–{self.steps[-1]}"
        return (f"re-modeled rows come from the first {k} of the {self.profiled} profiled steps (trace {numbers}: "
                f"{self.ops:,} ops; the summary re-models at most {self.max_ops:,}), scaled by this profile's mean "
                f"step over those steps' own; prof.what_if() re-models all {self.profiled}")


def remodel_steps(step: np.ndarray, profiled: int, max_ops: int | None) -> RemodelSteps:
    """The steps to re-model within `max_ops` ops (None: no limit): every step when they fit, else the first whole
    steps that do (the what-if is per step). Raises WhatIfError, naming why, when not even one step fits or the
    trace's ops are not marked with its `profiled` steps (so no step can be taken apart)."""
    step = np.asarray(step)
    n = len(step)
    if max_ops is None or n <= max_ops:
        return RemodelSteps((), profiled, n, max_ops)
    values, counts = np.unique(step, return_counts=True)
    if len(values) != profiled:
        raise WhatIfError(
            f"not computed inline: the trace's {n:,} ops are more than the {max_ops:,} the summary re-models, and "
            f"they are marked with {len(values)} step number(s) for its {profiled} profiled step(s), so no whole "
            f"step can be re-modeled apart; call prof.what_if() to re-model them all")
    if counts[0] > max_ops:
        raise WhatIfError(
            f"not computed inline: one profiled step (step {int(values[0])}) is {int(counts[0]):,} ops, more than "
            f"the {max_ops:,} the summary re-models (nine variants of it would slow the output); call "
            f"prof.what_if()")
    k = int(np.searchsorted(np.cumsum(counts), max_ops, side="right"))
    return RemodelSteps(tuple(int(v) for v in values[:k]), profiled, int(counts[:k].sum()), max_ops)


@dataclass(frozen=True)
class Variant:
    """Per-step figures of one variant (ns, USD)."""

    mode: str
    chip: str
    step_time_ns: float
    low_ns: float | None
    high_ns: float | None
    mfu: float
    cost_per_1m_steps_usd: float


def synthetic_graphs(trace_ops: pd.DataFrame) -> np.ndarray:
    """Graph ids for an op-by-op trace run as compile: maximal runs of ops on one core, within one step and
    phase, between rows that cannot be inside a graph (sync points, CPU fallbacks, host copies, collectives),
    which get -1 (they run eagerly)."""
    n = len(trace_ops)
    if not n:
        return np.zeros(0, dtype=np.int64)
    names = trace_ops["name"].astype(str)
    outside = (trace_ops["sync"].notna() | trace_ops["fallback"].notna() | trace_ops["transfer"].notna()
               | names.str.startswith("c10d::")).to_numpy()
    core = trace_ops["device_index"].to_numpy()
    key = pd.DataFrame({"core": core, "step": trace_ops["step"].to_numpy(),
                        "phase": trace_ops["phase"].fillna("").to_numpy()})
    graph = np.full(n, -1, dtype=np.int64)
    next_id = 0
    for _, idx in key.groupby("core", sort=False).indices.items():
        idx = np.sort(idx)
        k = key.iloc[idx]
        out = outside[idx]
        new = np.ones(len(idx), dtype=bool)
        new[1:] = ((k["step"].to_numpy()[1:] != k["step"].to_numpy()[:-1])
                   | (k["phase"].to_numpy()[1:] != k["phase"].to_numpy()[:-1]) | out[:-1])
        seg = np.cumsum(new) - 1 + next_id
        graph[idx] = np.where(out, -1, seg)
        next_id = int(seg.max()) + 1 if len(seg) else next_id
    # renumber the graphs actually used 0..k-1
    used = np.unique(graph[graph >= 0])
    graph[graph >= 0] = np.searchsorted(used, graph[graph >= 0])
    return graph


def ops_for_mode(trace_ops: pd.DataFrame, recorded_mode: str, mode: str) -> tuple[pd.DataFrame, str]:
    """The recorded ops as the model should see them in `mode`, and how well that is known."""
    has_graphs = bool(len(trace_ops)) and bool((trace_ops["graph"] >= 0).any())
    if mode == recorded_mode:
        return trace_ops, EXACT
    if mode == "compile":
        if has_graphs:
            return trace_ops, EXACT
        # in-place updates of a graph's inputs stay inside its NEFF (TorchNeuron's backend compiles with
        # keep_inference_input_mutations=True and aliases the output to the input buffer): no write-back copies
        return trace_ops.assign(graph=synthetic_graphs(trace_ops)).reset_index(drop=True), APPROX_GRAPHS
    if recorded_mode == "compile" and has_graphs:
        return trace_ops.assign(graph=np.full(len(trace_ops), -1, dtype=np.int64)), APPROX_DECOMPOSED
    return trace_ops, APPROX_GROUPING if mode == "adaptive" else EXACT


def kernel_savings(hot: Sequence[Any], steps: int, swappable: Sequence[str] = (),
                   only: Sequence[str] | None = None) -> list[dict]:
    """Per candidate kernel: the modeled saving per step of swapping it in wherever the hot path matched it
    (kernels that already run an op are not swaps).

    A module-level match (RMSNorm, gated MLP) saves once per module, however many of its ops are hot, so
    savings are summed over distinct scopes (an op, or a module), never per hot op."""
    per: dict[str, dict] = {}
    for h in hot:
        for k in h.kernels:
            s = k.get("saving_ns")
            name = str(k.get("kernel") or k.get("name"))
            if not s or k.get("kind") != "candidate" or (only is not None and name not in only and name.removesuffix("_kernel") not in only):
                continue
            scope = k.get("scope") or "op"
            key = (scope, h.op, h.module) if scope == "op" else (scope,)
            d = per.setdefault(name, {"kernel": name, "scopes": {}, "ops": []})
            d["scopes"][key] = float(s)
            if h.op not in d["ops"]:
                d["ops"].append(h.op)
    out = []
    for name, d in per.items():
        short = name.removesuffix("_kernel")
        run = (f'kernels.use(model, "{short}")  # from neuron_studio import kernels; then run the cell again'
               if short in swappable else None)
        out.append({"kernel": name, "op": ", ".join(d["ops"][:3]), "saving_ns": sum(d["scopes"].values()) / max(1, steps),
                    "run": run})
    return sorted(out, key=lambda d: -d["saving_ns"])


MEASURED = "measured: the profile's own figures"
SCALED = ("the measured step scaled by the model's ratio of this chip to the profiled one (the model is not fitted "
          "to this measurement; the ratio is what it predicts)")


def scaled_to(own: Variant, modeled_own: Variant, model: Callable[[pd.DataFrame, str, str], Variant]
              ) -> Callable[[pd.DataFrame, str, str], Variant]:
    """A model for a measured profile: each variant's modeled figures times measured/modeled of the profile's own
    configuration, so that the profile's own row would come out as measured."""
    k = own.step_time_ns / modeled_own.step_time_ns if modeled_own.step_time_ns > 0 else float("nan")

    def scaled(ops: pd.DataFrame, mode: str, chip: str) -> Variant:
        v = model(ops, mode, chip)
        return Variant(v.mode, v.chip, v.step_time_ns * k, None if v.low_ns is None else v.low_ns * k,
                       None if v.high_ns is None else v.high_ns * k, v.mfu / k if k else float("nan"),
                       v.cost_per_1m_steps_usd * k)

    return scaled


def run_line(mode: str, chip: str, steps: int | None = None, warmup: int | None = None,
             command: Sequence[str] | None = None, api_call: dict | None = None) -> str:
    """The line that runs this variant for real, in the form the profile was made with: for a script run
    (`command`: the command `neuron-studio run` launched) the `neuron-studio run` command line; for the Python API
    (`api_call`, the trace's `meta["api_call"]`: `profile(fn, ...)` or `with profile(...)`) that call; else (a
    `%%neuron` cell, an imported trace) a `%%neuron` line."""
    if command:
        import shlex

        return f"neuron-studio run {_cli_options(mode, chip, steps, warmup)} -- {shlex.join(command)}"
    if isinstance(api_call, dict):
        kw = f'mode="{mode}", chip="{chip}"'
        if api_call.get("form") == "with":      # steps are the user's own loop's
            return f"with profile({kw}{f', warmup={int(warmup)}' if warmup else ''}) as run:"
        kw += (f", steps={int(steps)}" if steps else "") + (f", warmup={int(warmup)}" if warmup is not None else "")
        return f"profile({api_call.get('fn') or 'lambda: ...'}, {kw})"
    return f"%%neuron {_cli_options(mode, chip, steps, warmup)}"


def _cli_options(mode: str, chip: str, steps: int | None, warmup: int | None) -> str:
    opts = f"--mode {mode} --chip {chip}"
    if steps:
        opts += f" --steps {int(steps)}"
    if warmup is not None:
        opts += f" --warmup {int(warmup)}"
    return opts


def _row(v: Variant, *, variant: str, kind: str, kernel: str | None, current_ns: float, current: bool, basis: str,
         run: str | None, cell: str | None = None, where: str | None = None, why_not: str | None = None,
         compiles: int | None = None) -> dict[str, Any]:
    return {"variant": variant, "kind": kind, "mode": v.mode, "chip": v.chip, "kernel": kernel,
            "step_time_ns": v.step_time_ns, "step_time_low_ns": v.low_ns, "step_time_high_ns": v.high_ns,
            "speedup": current_ns / v.step_time_ns if v.step_time_ns > 0 else float("nan"),
            "mfu": v.mfu, "cost_per_1m_steps_usd": v.cost_per_1m_steps_usd, "current": current, "basis": basis,
            "run": run, "where": where, "cell": cell, "advisable": why_not is None and not current, "why_not": why_not,
            "compiles": compiles, "rank": None}


def _variant(cell: dict | None, run: str | None, run_id: Any) -> tuple[str | None, str | None]:
    """(the row's line, the new cell that runs it) given the profiled cell (`meta["cell"]`: its source and, per
    swappable kernel, the model variable to swap into); without a cell, the line alone."""
    if not run or not cell or not isinstance(cell.get("source"), str):
        return run, None
    kernel = _vc.kernel_lines(run)
    if kernel is not None:
        var = (cell.get("swap_targets") or {}).get(kernel[0].removesuffix("_kernel"))
        if not var:   # which of the cell's models holds the modules is not known: the snippet, no cell
            return run, None
        return f'kernels.use({var}, "{kernel[0]}")  # from neuron_studio import kernels', _vc.variant_cell(cell["source"], run, compare=run_id,
                                                                      model_var=var)
    new = _vc.variant_cell(cell["source"], run, compare=run_id)
    return new.split("\n", 1)[0], new


def what_if_frame(own: Variant, *, modes: Sequence[str], chips: Sequence[str], recorded_mode: str,
                  trace_ops: pd.DataFrame, model: Callable[[pd.DataFrame, str, str], Variant],
                  kernel_savings: Sequence[dict] = (), changes: Sequence[Any] = (), steps: int | None = None,
                  warmup: int | None = None, measured: bool = False, cell: dict | None = None, run_id: Any = None,
                  ops_for: Callable[[str], tuple[pd.DataFrame, str]] | None = None,
                  command: Sequence[str] | None = None, compile_why_not: str | None = None,
                  compiles: int | None = None, api_call: dict | None = None) -> pd.DataFrame:
    """One row per (mode, chip), one per PyTorch code change, one per kernel saving; `own` is the profile's own
    figures (its row); `rank` orders the advice (`rank_rows`).

    `model(ops, mode, chip)` re-models ops; `changes` are `code_changes.CodeChange`s (re-modeled in the profile's
    own mode on its chip); `kernel_savings` are dicts with kernel, op, saving_ns (per step) and run (the swap
    snippet, or None). `cell` (the trace's `meta["cell"]`, a `%%neuron` cell's run) makes each row's `run` the
    profiled line with the row's change and `cell` the whole new cell (`variant_cell`), which diffs against run
    `run_id`; `command` (a `neuron-studio run` script run) makes mode rows `neuron-studio run` command lines, and
    `api_call` (a profile made by the Python API, `meta["api_call"]`) the `profile(...)` call (`run_line`).
    `compile_why_not` (shapes are not static) keeps compile rows out of the advice, saying why. `compiles`: the graph
    compiles of a compile-mode profile that recompiles (its row and a code change's `compiles` say them; a change
    with fewer ranks first, `rank_rows`). `ops_for(mode)`
    gives `ops_for_mode(trace_ops, recorded_mode, mode)` (default: computed here, once per mode; a caller may
    keep them across calls)."""
    if ops_for is None:
        per_mode: dict[str, tuple[pd.DataFrame, str]] = {}

        def ops_for(mode: str) -> tuple[pd.DataFrame, str]:
            if mode not in per_mode:
                per_mode[mode] = ops_for_mode(trace_ops, recorded_mode, mode)
            return per_mode[mode]
    rows = []
    for mode in modes:
        for chip in chips:
            if mode == own.mode and chip == own.chip:
                own_line = run_line(mode, chip, steps, warmup, command, api_call)
                if cell and isinstance(cell.get("source"), str):
                    opts, _ = _vc.split_cell(cell["source"])
                    own_line = f"{_vc.MAGIC} {opts}".rstrip() if opts is not None else own_line
                rows.append(_row(own, variant="this profile", kind="profile", kernel=None, current_ns=own.step_time_ns,
                                 current=True, basis=MEASURED if measured else PROFILE, run=own_line, compiles=compiles))
                continue
            ops, basis = ops_for(mode)
            basis = SCALED if measured else basis
            v = model(ops, mode, chip)
            name = f"{mode} on {chip}"
            line, new = _variant(None if command else cell, run_line(mode, chip, steps, warmup, command, api_call),
                                  run_id)
            why = None
            if chip != own.chip:
                why = f"another chip (the profile ran on {own.chip}): for comparison"
            elif mode == "compile" and recorded_mode != "compile" and compile_why_not:
                why = compile_why_not
            rows.append(_row(v, variant=name, kind="chip" if chip != own.chip else "mode", kernel=None,
                             current_ns=own.step_time_ns, current=False, basis=basis, run=line, cell=new, why_not=why))
    if not measured:
        for c in changes:
            v = model(c.ops, own.mode, own.chip)
            after = c.compiles[1] if getattr(c, "compiles", None) else None
            rows.append(_row(v, variant=c.variant, kind="code", kernel=None, current_ns=own.step_time_ns,
                             current=False, basis=c.basis, run=c.line, where=c.where, cell=c.cell, compiles=after))
    for k in kernel_savings:
        saving = float(k["saving_ns"])
        new = max(own.step_time_ns - saving, 0.0)
        scale = new / own.step_time_ns if own.step_time_ns > 0 else 1.0
        v = Variant(own.mode, own.chip, new,
                    None if own.low_ns is None else max(own.low_ns - saving, 0.0),
                    None if own.high_ns is None else max(own.high_ns - saving, 0.0),
                    own.mfu / scale if scale > 0 else float("nan"), own.cost_per_1m_steps_usd * scale)
        line, new = _variant(cell, k.get("run"), run_id)
        rows.append(_row(v, variant=f"{k['kernel']} for {k['op']}", kind="kernel", kernel=str(k["kernel"]),
                         current_ns=own.step_time_ns, current=False, basis=APPROX_KERNEL, run=line, cell=new))
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["compiles"] = df["compiles"].astype("Int64")
    for col in ("kernel", "run", "where", "cell", "why_not"):   # missing stays None (pandas: NaN in a str column)
        df[col] = df[col].astype(object).where(df[col].notna(), None)
    df["rank"] = rank_rows(df)
    return df


def _effort(kind: str, mode: str) -> int:
    return _EFFORT.get(kind, 9) + (_MODE_EFFORT.get(mode, 0) if kind == "mode" else 0)


def rank_rows(df: pd.DataFrame) -> pd.Series:
    """The advice order (1 = do this first) of advisable rows predicted at least MIN_SPEEDUP faster, else <NA>.

    The one ranking both the step-time bar's verdict and the What if line read: fastest first at the precision the
    speedup is shown (one decimal); a tie goes to the smaller change (a PyTorch line, then adaptive eager, then
    compile, then an NKI kernel), then to the faster row, then by name.

    Before all of them, a change that compiles fewer graphs than a profile that recompiles (padding inputs to
    buckets), whatever its step time: each recompile costs compile time (modeled ~60 s per graph, reported apart
    from the step) that no step-time change of microseconds wins back, and each new input shape adds one; its row
    shows the padded step's own predicted time."""
    out = pd.Series(pd.NA, index=df.index, dtype="Int64")
    advisable = df["advisable"].astype(bool)
    own = df.loc[df["current"].astype(bool), "compiles"] if "compiles" in df else pd.Series(dtype="Int64")
    own_compiles = own.iloc[0] if len(own) and pd.notna(own.iloc[0]) else None
    fewer = pd.Series(False, index=df.index)
    if own_compiles is not None:
        fewer = df["compiles"].notna() & (df["compiles"].fillna(own_compiles) < own_compiles)
    ok = advisable & ((df["speedup"].astype(float) >= MIN_SPEEDUP) | fewer)
    cand = df[ok]
    if not len(cand):
        return out
    key = pd.DataFrame({"tier": [0 if f else 1 for f in fewer[ok]],
                        "shown": -cand["speedup"].astype(float).round(1),
                        "effort": [_effort(k, m) for k, m in zip(cand["kind"], cand["mode"])],
                        "exact": -cand["speedup"].astype(float), "name": cand["variant"].astype(str)},
                       index=cand.index)
    order = key.sort_values(["tier", "shown", "effort", "exact", "name"], kind="stable").index
    out.loc[order] = np.arange(1, len(order) + 1)
    return out
