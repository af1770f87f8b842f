"""A many-rank job as one Chrome trace that opens in Perfetto: every rank's measured host ops on the job's
aligned clock, a process per rank (the straggler named), and each collective instance linked across ranks by
a flow (first arrival → … → last arrival).

Bounded like the analysis: each rank is read and written to a part file by a worker process (one rank at a
time per worker, `job_map.local_workers` of them); this process only joins the parts into one gzip stream,
adding the flows from the reduce's collective table. Times are µs (Chrome's unit) relative to the job's
first op; the clock alignment is the reduce's (`ClockAlignment`, named in the trace's metadata).

    export_job_trace(analyze_job("traces/"), "job.json.gz")
    export_stored_job(RunStore(root), run_id, "job.json.gz")   # a stored job: from its job tables, no new map

A stored job (`neuron-studio import DIR`) already has what the reduce adds (offsets, collectives, straggler) in
its job tables (`neuron_studio.job_tables`), so its export reads each rank once, to write its part.
"""
from __future__ import annotations

import concurrent.futures as cf
import gzip
import json
import multiprocessing
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from neuron_studio.profiler.importers.job_inputs import RankInput

__all__ = ["export_job_trace", "export_stored_job", "write_rank_part"]

_FLOW_CAT = "collective"


def _esc(s: str) -> str:
    return json.dumps(s, ensure_ascii=True)


def write_rank_part(inp: RankInput, rank: int, offset_ns: int, origin_ns: int, path: str) -> tuple[int, int]:
    """Write one rank's ops as Chrome events (comma-separated, no brackets) to `path`; returns the count and
    the host thread most of its collectives were issued on (0: none), which the flows must name."""
    from neuron_studio.profiler.analysis.rank_digest import _common_thread, collective_mask
    from neuron_studio.profiler.job_map import _release_memory, read_rank_trace

    trace = read_rank_trace(inp)
    ops = trace.ops
    shift = offset_ns - origin_ns
    ts = (ops["start_ns"].to_numpy(dtype=np.int64) + shift) / 1000.0
    dur = (ops["end_ns"].to_numpy(dtype=np.int64) - ops["start_ns"].to_numpy(dtype=np.int64)) / 1000.0
    names = ops["name"].astype(str).tolist()
    escaped = {nm: _esc(nm) for nm in set(names)}          # a rank has few distinct op names
    threads = ops["thread"].to_numpy(dtype=np.int64)
    seqs = ops["seq"].to_numpy(dtype=np.int64)
    coll_thread = _common_thread(threads[collective_mask(np.asarray(names, dtype=object))]) or 0
    n = 0
    with open(path, "w", encoding="ascii") as fh:
        parts = []
        for name, t, d, th, sq in zip(names, ts.tolist(), dur.tolist(), threads.tolist(), seqs.tolist()):
            parts.append(f'{{"ph":"X","pid":{rank},"tid":{th},"ts":{t:.3f},"dur":{d:.3f},"name":{escaped[name]},'
                         f'"cat":"op","args":{{"seq":{sq}}}}}')
            n += 1
            if len(parts) >= 50_000:
                fh.write(",\n".join(parts) + ",\n")
                parts = []
        if parts:
            fh.write(",\n".join(parts) + ",\n")
    del trace, ops
    _release_memory()                # the worker takes the next rank from a trimmed heap
    return n, int(coll_thread)


def _flows(coll: Any, origin_ns: int, threads: dict[int, int]) -> list[str]:
    """Per collective instance, a flow through every rank's arrival in arrival order (Perfetto binds each
    step to the enclosing slice: the rank's collective op)."""
    out = []
    if not len(coll):
        return out
    for fid, (_, rows) in enumerate(coll.sort_values(["key", "arrival_ns"]).groupby("key", sort=False), 1):
        rows = rows.sort_values("arrival_ns")
        k = len(rows)
        for i, (r, a) in enumerate(zip(rows["rank"].tolist(), rows["arrival_ns"].tolist())):
            ph = "s" if i == 0 else ("f" if i == k - 1 else "t")
            bp = ',"bp":"e"' if ph != "s" else ""
            out.append(f'{{"ph":"{ph}","id":{fid},"pid":{int(r)},"tid":{threads.get(int(r), 0)},'
                       f'"ts":{(int(a) - origin_ns) / 1000.0 + 0.001:.3f},"name":{_esc(str(rows["op"].iloc[0]))},'
                       f'"cat":"{_FLOW_CAT}"{bp}}}')
    return out


def export_job_trace(job: Any, path: str | os.PathLike, *, workers: int | None = None) -> Path:
    """Write `job` (a `job_map.JobAnalysis`) as one Chrome trace (`.gz`: gzip), written atomically; `workers`
    local processes write the ranks' parts (default `local_workers`; 0: this process)."""
    from neuron_studio.profiler.analysis.ranks import resolve_ranks

    a = job.analysis
    ranks = resolve_ranks(job.digests, job.inputs)[0]
    offsets = a.alignment.offsets_ns if a.alignment is not None else {r: 0 for r in ranks}
    firsts = {r: int(d.meta.get("first_ns") or 0) for r, d in zip(ranks, job.digests)}
    return _write_job(list(job.inputs), ranks, {r: int(offsets.get(r, 0)) for r in ranks}, firsts,
                      a.straggler.rank if a.straggler is not None else None,
                      None if a.alignment is None else a.alignment.to_dict(), a.collectives, path, workers)


def export_stored_job(store: Any, run_id: int, path: str | os.PathLike, *, workers: int | None = None) -> Path:
    """Write a stored many-rank run as `export_job_trace` writes its job, from the run's job tables (offsets,
    collectives, straggler) and each rank's stored ops: the ranks are not mapped again."""
    ranks_t = store.load_table(run_id, "job_ranks").to_pandas().sort_values("rank")
    coll = store.load_table(run_id, "job_collectives").to_pandas()
    summary = store.get_run(run_id).summary or {}
    alignment = (summary.get("ranks_analysis") or {}).get("alignment")
    tables = store.table_path(run_id, "ops").parent
    ranks = ranks_t["rank"].astype(int).tolist()
    positions = ranks_t["position"].astype(int).tolist()
    inputs = [RankInput(str(tables), "store-rank", i, pos, "file name", pos) for i, pos in enumerate(positions)]
    offsets = dict(zip(ranks, ranks_t["offset_ns"].astype(int).tolist()))
    firsts = dict(zip(ranks, ranks_t["first_ns"].astype(int).tolist()))
    flagged = ranks_t.loc[ranks_t["straggler"].astype(bool), "rank"].astype(int).tolist()
    return _write_job(inputs, ranks, offsets, firsts, flagged[0] if flagged else None, alignment, coll, path,
                      workers)


def _write_job(inputs: list[RankInput], ranks: list[int], offsets: dict[int, int], firsts: dict[int, int],
               straggler: int | None, alignment: dict | None, collectives: Any, path: str | os.PathLike,
               workers: int | None) -> Path:
    """The export itself: `inputs[i]` holds rank `ranks[i]`; `collectives` (key, op, rank, arrival_ns on the
    aligned clock) gives the flows."""
    from neuron_studio.profiler.job_map import local_workers

    origin = min(offsets[r] + firsts[r] for r in ranks)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".job-export-") as tmp:
        parts = [str(Path(tmp) / f"rank-{r}.part") for r in ranks]
        jobs = [(inp, r, offsets[r], origin, p) for inp, r, p in zip(inputs, ranks, parts)]
        if workers == 0:                  # in this process, one rank after the other (tests, tiny jobs)
            written = [write_rank_part(*args) for args in jobs]
        else:
            ctx = multiprocessing.get_context("spawn")
            with cf.ProcessPoolExecutor(max_workers=workers or local_workers(inputs), mp_context=ctx) as pool:
                written = [f.result() for f in [pool.submit(write_rank_part, *args) for args in jobs]]
        threads = {r: t for r, (_, t) in zip(ranks, written)}
        meta = {"neuron_studio_job": {"ranks": sorted(ranks), "straggler": straggler, "alignment": alignment,
                                      "clock": "measured host time of each rank, aligned; µs from the job's "
                                               "first op"}}
        tmp_out = Path(tmp) / "job.json"
        opener = gzip.open if out.name.endswith(".gz") else open
        with opener(tmp_out, "wt", encoding="ascii") as fh:
            fh.write('{"displayTimeUnit":"ns","metadata":' + json.dumps(meta, ensure_ascii=True)
                     + ',"traceEvents":[\n')
            for r in sorted(ranks):
                label = f"rank {r}" + (" (straggler)" if r == straggler else "")
                fh.write(f'{{"ph":"M","name":"process_name","pid":{r},"args":{{"name":{_esc(label)}}}}},\n'
                         f'{{"ph":"M","name":"process_sort_index","pid":{r},"args":{{"sort_index":{r}}}}},\n')
            for p in parts:
                with open(p, encoding="ascii") as part:
                    for chunk in iter(lambda: part.read(1 << 20), ""):
                        fh.write(chunk)
            flows = _flows(collectives, origin, threads)
            fh.write(",\n".join(flows) + ("\n" if flows else ""))
            if not flows:
                fh.write('{"ph":"M","name":"process_name","pid":-1,"args":{"name":"job"}}\n')
            fh.write("]}\n")
        os.replace(tmp_out, out)
    return out
