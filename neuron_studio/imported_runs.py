"""Traces recorded elsewhere as studio runs: one trace, or a job's per-rank traces (files, a directory or a
glob), summarised and stored as a run the JupyterLab panel lists like any other (`neuron-studio import`,
`neuron-studio report TRACE|DIR`).

A job of several ranks goes through the map/reduce (`profiler.job_map`): each rank is read and digested by a
worker process (or a Dask worker when a scheduler or client is given), so the memory this process needs does
not grow with the number of ranks; the summary is the first rank's profile plus the job's ranks section."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["TraceSetError", "job_summary", "store_imported", "is_job"]

Targets = Sequence[str | os.PathLike]
#: Called on the client as ranks are mapped: (ranks done, ranks in the job).
Progress = Callable[[int, int], None]


class TraceSetError(ValueError):
    """The traces given are not one job's ranks (the message names the files)."""


def is_job(targets: Targets) -> bool:
    """Whether the targets name several ranks (several paths, a directory of per-rank traces, a glob)."""
    from neuron_studio.profiler.importers.job_inputs import is_job_target

    return len(targets) > 1 or any(is_job_target(t) for t in targets)


def _inputs(targets: Targets) -> list[Any]:
    from neuron_studio.profiler.importers.job_inputs import job_inputs

    return job_inputs(list(targets))


def _analyze(inputs: list[Any], *, scheduler: str | None, client: Any, workers: int | None,
             on_profile: Any = None, progress: Progress | None = None) -> Any:
    from neuron_studio.profiler.analysis.ranks import RankIdentityError
    from neuron_studio.profiler.job_map import analyze_job

    try:
        return analyze_job(inputs, scheduler=scheduler, client=client, workers=workers, on_profile=on_profile,
                           progress=progress)
    except RankIdentityError as e:
        raise TraceSetError(str(e)) from None


def _single_profile(path: str | os.PathLike) -> Any:
    from neuron_studio.profiler.job_map import read_rank

    (inp,) = _inputs([path])
    return read_rank(inp)[1]


def job_summary(targets: Targets, *, name: str | None = None, scheduler: str | None = None, client: Any = None,
                workers: int | None = None, perfetto: str | os.PathLike | None = None,
                progress: Progress | None = None) -> dict:
    """The report summary of one trace, or of a job's ranks (first rank's profile + the ranks section);
    `perfetto`: also write the whole job, aligned, as one Chrome trace there (`job_export`); `progress`
    hears of each rank mapped (a job only)."""
    targets = [targets] if isinstance(targets, (str, os.PathLike)) else list(targets)
    inputs = _inputs(targets)
    if len(inputs) == 1:
        prof = _single_profile(inputs[0].path)
        if perfetto is not None:
            prof.export_chrome_trace(perfetto)
        return prof.to_summary(name=name)
    job = _analyze(inputs, scheduler=scheduler, client=client, workers=workers, progress=progress)
    if perfetto is not None:
        from neuron_studio.profiler.job_export import export_job_trace

        export_job_trace(job, perfetto, workers=workers)
    return job.report_summary(name=name)


def store_imported(store: Any, paths: Targets, *, name: str | None = None, scheduler: str | None = None,
                   client: Any = None, workers: int | None = None,
                   progress: Progress | None = None) -> tuple[int, dict]:
    """Save imported traces as one run (one rank per trace, ordered by rank) with its summary; returns
    (run id, summary); `progress` hears of each rank mapped (a job only). Workers write each rank's tables straight into the store (it must be on a file system
    they share when the map runs on Dask)."""
    from neuron_studio._activate import save_rank
    from neuron_studio.job_tables import save_job_tables

    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    inputs = _inputs(paths)
    label = name or Path(paths[0]).name
    world = len(inputs)
    # one trace: read first, so the run is listed with the mode and chip it ran in (a compile-mode export
    # re-imports as compile); a job's ranks are read by the map, after the run exists
    prof = _single_profile(inputs[0].path) if world == 1 else None
    run_id = store.begin_run(cell_source="\n".join(str(p) for p in paths), name=label, notebook=None,
                             mode=prof.trace.mode if prof is not None else "eager",
                             chip=prof.summary.chip if prof is not None else "trn2", backend="imported",
                             ranks=world, options={"imported": [i.path for i in inputs]})
    try:
        if prof is not None:
            prof.run_id = run_id
            save_rank(store, run_id, prof, 0, 1)
            summary = prof.to_summary(run_id=run_id, name=label)
        else:
            job = _analyze(inputs, scheduler=scheduler, client=client, workers=workers,
                           on_profile=SaveRankTables(str(store.root), run_id), progress=progress)
            ranks = _ranks_of(job)
            order = sorted(ranks)
            positions = [order.index(r) for r in ranks]          # stored as positions 0..N-1, by rank
            finish_store_tables(store, run_id, job.inputs, positions)
            save_job_tables(store, run_id, job.analysis)           # rank order = stored positions
            summary = job.report_summary(name=label, run_id=run_id)
    except BaseException:
        store.finish_run(run_id, status="error", summary=None, step_time_ns=None, mfu=None, wall_s=0.0)
        raise
    store.finish_run(run_id, status="ok", summary=summary,
                     step_time_ns=int(summary["step_time_ns"]) if summary.get("step_time_ns") else None,
                     mfu=summary.get("mfu"), wall_s=0.0)
    return run_id, summary


@dataclass(frozen=True)
class SaveRankTables:
    """Run in each map worker: save its rank's tables into the run store under a per-input name (the rank is
    known only once every trace is read; `finish_store_tables` renames them)."""

    root: str
    run_id: int

    def __call__(self, inp: Any, prof: Any) -> None:
        from neuron_studio._activate import save_rank
        from neuron_studio.store import RunStore

        save_rank(RunStore(self.root), self.run_id, prof, _temp_rank(inp), 2)


def _temp_rank(inp: Any) -> int:
    """The table suffix a worker writes before ranks are known: far above any real rank."""
    return 1_000_000 + inp.position


def finish_store_tables(store: Any, run_id: int, inputs: Sequence[Any], positions: Sequence[int]) -> None:
    """Rename each input's tables to its rank position (`<table>_r<pos>`), and give position 0's the
    unsuffixed names too, as `save_rank` does for a job's rank 0."""
    from neuron_studio._activate import rank_table

    world = len(inputs)
    d = store.table_path(run_id, "ops").parent
    for inp, pos in zip(inputs, positions):
        tmp = f"_r{_temp_rank(inp)}"
        for f in sorted(d.glob(f"*{tmp}.parquet")):
            base = f.name[: -len(f"{tmp}.parquet")]
            final = store.table_path(run_id, rank_table(base, pos, world))
            os.replace(f, final)
            if pos == 0 and world > 1:                       # a copy, then an atomic rename
                plain = store.table_path(run_id, base)
                tmp_copy = plain.with_name(f".{plain.name}.copy")
                shutil.copyfile(final, tmp_copy)
                os.replace(tmp_copy, plain)


def _ranks_of(job: Any) -> list[int]:
    """Each input's resolved rank, in input order."""
    from neuron_studio.profiler.analysis.ranks import resolve_ranks

    return resolve_ranks(job.digests, job.inputs)[0]
