"""A many-rank job as one Chrome trace that opens in Perfetto: every rank's measured host ops on the job's
aligned clock, a process per rank (the straggler named), and each collective instance linked across ranks by
a flow (first arrival → … → last arrival).

Bounded like the analysis: each rank is read and written to a part file by a worker process (one rank at a
time per worker, `job_map.local_workers` of them); this process only joins the parts into one gzip stream,
adding the flows from the reduce's collective table. Times are µs (Chrome's unit) relative to the job's
first op; the clock alignment is the reduce's (`ClockAlignment`, named in the trace's metadata).

    export_job_trace(analyze_job("traces/"), "job.json.gz")
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

__all__ = ["export_job_trace", "write_rank_part"]

_FLOW_CAT = "collective"


def _esc(s: str) -> str:
    return json.dumps(s, ensure_ascii=True)


def write_rank_part(inp: RankInput, rank: int, offset_ns: int, origin_ns: int, path: str) -> int:
    """Write one rank's ops as Chrome events (comma-separated, no brackets) to `path`; returns the count."""
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
    return n


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
    from neuron_studio.profiler.job_map import local_workers

    a = job.analysis
    ranks = resolve_ranks(job.digests, job.inputs)[0]
    offsets = a.alignment.offsets_ns if a.alignment is not None else {r: 0 for r in ranks}
    origin = min(int(offsets.get(r, 0)) + int(d.meta.get("first_ns") or 0) for r, d in zip(ranks, job.digests))
    straggler = a.straggler.rank if a.straggler is not None else None
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".job-export-") as tmp:
        parts = [str(Path(tmp) / f"rank-{r}.part") for r in ranks]
        jobs = [(inp, r, int(offsets.get(r, 0)), origin, p) for inp, r, p in zip(job.inputs, ranks, parts)]
        if workers == 0:                  # in this process, one rank after the other (tests, tiny jobs)
            for args in jobs:
                write_rank_part(*args)
        else:
            ctx = multiprocessing.get_context("spawn")
            with cf.ProcessPoolExecutor(max_workers=workers or local_workers(job.inputs), mp_context=ctx) as pool:
                for f in [pool.submit(write_rank_part, *args) for args in jobs]:
                    f.result()
        meta = {"neuron_studio_job": {"ranks": sorted(ranks), "straggler": straggler,
                                      "alignment": None if a.alignment is None else a.alignment.to_dict(),
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
            flows = _flows(a.collectives, origin, _collective_threads(job, ranks))
            fh.write(",\n".join(flows) + ("\n" if flows else ""))
            if not flows:
                fh.write('{"ph":"M","name":"process_name","pid":-1,"args":{"name":"job"}}\n')
            fh.write("]}\n")
        os.replace(tmp_out, out)
    return out


def _collective_threads(job: Any, ranks: list[int]) -> dict[int, int]:
    """The host thread each rank issued its collectives on (flows must name the slice's thread)."""
    return {r: int(d.meta.get("collective_thread") or 0) for r, d in zip(ranks, job.digests)}
