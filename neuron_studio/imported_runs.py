"""Traces recorded elsewhere (torch.profiler Chrome traces, one per rank) as studio runs: profiles ordered by
the rank each trace names, one summary with the multi-rank analysis, and a stored run the JupyterLab panel
lists like any other (`neuron-studio import`, `neuron-studio report TRACE...`)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

__all__ = ["TraceSetError", "trace_profiles", "imported_summary", "store_imported"]


class TraceSetError(ValueError):
    """The traces given are not one job's ranks (the message names the files)."""


def trace_profiles(paths: Sequence[str | os.PathLike]) -> dict[int, Any]:
    """Read each trace and order them by the rank its `distributedInfo` names (files without one follow, in
    the order given). Keys are positions 0..N-1; each trace's meta keeps its own rank."""
    from neuron_studio.profiler.importers import read_trace
    from neuron_studio.profiler.profile import Profile

    traces = [(Path(p), read_trace(p)) for p in paths]
    seen: dict[int, Path] = {}
    for p, t in traces:
        r = t.meta.get("rank")
        if r is not None and r in seen:
            raise TraceSetError(f"{seen[r].name} and {p.name} both say they are rank {r}: not one job's ranks")
        if r is not None:
            seen[r] = p
    order = sorted(range(len(traces)), key=lambda i: (traces[i][1].meta.get("rank") is None,
                                                      traces[i][1].meta.get("rank") or 0, i))
    return {pos: Profile.from_trace(traces[i][1]) for pos, i in enumerate(order)}


def imported_summary(profiles: dict[int, Any], *, run_id: int | None = None, name: str | None = None) -> dict:
    """The first rank's summary, plus the multi-rank analysis (aligned on each trace's wall clock)."""
    from neuron_studio.profiler.analysis.ranks import analyze_ranks
    from neuron_studio.profiler.profile_summary import _finite

    first = profiles[min(profiles)]
    summary = first.to_summary(run_id=run_id, name=name)
    if len(profiles) > 1:
        order = sorted(profiles)
        ranks = [int(profiles[k].trace.meta.get("rank", k)) for k in order]
        ra = analyze_ranks([profiles[k].trace for k in order], {r: profiles[k] for r, k in zip(ranks, order)},
                           ranks=ranks)
        summary["ranks_analysis"] = _finite(ra.to_summary())
        summary["ranks"] = len(profiles)
    return summary


def store_imported(store: Any, paths: Sequence[str | os.PathLike], *, name: str | None = None) -> tuple[int, dict]:
    """Save imported traces as one run (one rank per trace) with its summary; returns (run id, summary)."""
    from neuron_studio._activate import save_rank

    profiles = trace_profiles(paths)
    first = profiles[min(profiles)]
    world = len(profiles)
    label = name or Path(paths[0]).name
    run_id = store.begin_run(cell_source="\n".join(str(p) for p in paths), name=label, notebook=None,
                             mode=first.trace.mode, chip=first.trace.chip, backend="imported", ranks=world,
                             options={"imported": [str(p) for p in paths]})
    for pos, prof in profiles.items():
        prof.run_id = run_id
        save_rank(store, run_id, prof, pos, world)
    summary = imported_summary(profiles, run_id=run_id, name=label)
    store.finish_run(run_id, status="ok", summary=summary,
                     step_time_ns=int(summary["step_time_ns"]) if summary.get("step_time_ns") else None,
                     mfu=summary.get("mfu"), wall_s=0.0)
    return run_id, summary
