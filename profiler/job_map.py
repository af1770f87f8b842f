"""Analyse a many-rank job with bounded memory: map each rank to a digest on worker processes (local by
default, a Dask cluster when given one), reduce the digests on the client.

    job = analyze_job("traces/")                                  # local processes, sized to memory
    job = analyze_job("traces/*.json.gz", client=distributed.Client("tcp://scheduler:8786"))
    job = analyze_job("traces/", scheduler="tcp://scheduler:8786")

A worker reads one rank (the streaming reader for Chrome traces), models it, digests it
(`analysis.rank_digest`) and returns the digest as Parquet bytes; the client keeps only digests (a few
thousand rows per rank) and writes them under `digest_dir` when given. Local workers are fresh (spawned)
processes that take one rank at a time and free it (collected, heap trimmed) before the next, so a worker's
memory is that of one rank; how
many run at once is sized from the machine's available memory and the largest rank (`local_workers`). On
Dask, each task is one rank; the trace paths must be readable from the workers (a shared file system), and
the report is the same either way (the reduce does not depend on where the map ran).

With `on_profile` (a picklable function), each worker also hands its rank's Profile to it before digesting
(`neuron-studio import` saves the rank's tables into the run store that way).
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from neuron_studio.profiler.analysis.rank_digest import RankDigest, write_digest
from neuron_studio.profiler.analysis.ranks import RankAnalysis, reduce_digests
from neuron_studio.profiler.importers.job_inputs import RankInput, job_inputs

__all__ = ["JobAnalysis", "analyze_job", "map_rank", "read_rank", "read_rank_trace", "local_workers", "memory_estimate",
           "JobMapError", "BYTES_PER_JSON_BYTE", "GZIP_RATIO"]

#: Called in the worker with each rank's input and Profile (e.g. to save its tables); must be picklable.
OnProfile = Callable[[RankInput, Any], None]

#: Peak resident bytes of a worker per byte of Chrome-trace JSON it reads and models (measured on the
#: 1M-event benchmark trace: ~1.0 GB peak for ~200 MB of JSON, rounded up) and the uncompressed size a
#: .json.gz file is assumed to have per compressed byte (kineto traces compress ~10x). Both only size how
#: many local workers run at once.
BYTES_PER_JSON_BYTE = 6.0
GZIP_RATIO = 10.0
#: Memory a worker needs besides its rank (interpreter, torch, pandas): measured ~350 MB, rounded up.
WORKER_BASE_BYTES = 512 << 20


class JobMapError(RuntimeError):
    """A rank's map failed: names the input and what went wrong."""


@dataclass
class JobAnalysis:
    """A job's reduce plus what the map did: digests, the first rank's full summary, per-worker peaks."""

    analysis: RankAnalysis
    digests: list[RankDigest]
    inputs: list[RankInput]
    summary: dict[str, Any] | None            # the lowest input's profile summary (the report's body)
    engine: str                               # "local processes (N)" | "dask (address)" | "in process"
    worker_peak_rss_bytes: list[int] = field(default_factory=list)   # per rank, the worker's peak while on it
    map_seconds: float = 0.0
    reduce_seconds: float = 0.0

    def report_summary(self, *, name: str | None = None, run_id: int | None = None) -> dict[str, Any]:
        """The job report: the first rank's summary plus the ranks section (JSON-safe)."""
        from neuron_studio.profiler.profile_summary import _finite

        s = dict(self.summary or {})
        if name is not None:
            s["name"] = name
        if run_id is not None:
            s["run_id"] = run_id
        block = self.analysis.to_summary()
        block["engine"] = self.engine
        block["inputs"] = [{"path": i.path, "kind": i.kind} for i in self.inputs]
        s["ranks_analysis"] = _finite(block)
        s["ranks"] = len(self.digests)
        return s


# -------------------------------------------------------------------------------------------- the map
def _clear_peak() -> None:
    """Reset this process's VmHWM to its current RSS, so the next reading is this task's peak (Linux)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_rss() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def read_rank(inp: RankInput) -> tuple[Any, Any]:
    """(Trace, Profile) of one rank's input, whatever its kind."""
    from neuron_studio.profiler.profile import Profile

    if inp.kind == "neuron-explorer":
        from neuron_studio.profiler.neuron_profile import load_neuron_profile

        prof = load_neuron_profile(inp.path)
        return prof.trace, prof
    trace = read_rank_trace(inp)
    return trace, Profile.from_trace(trace)


def read_rank_trace(inp: RankInput) -> Any:
    """The Trace of one rank's input, not modeled (what the job's Perfetto export needs)."""
    if inp.kind == "neuron-explorer":
        from neuron_studio.profiler.neuron_profile import load_neuron_profile

        return load_neuron_profile(inp.path).trace
    if inp.kind == "store-rank":
        return _store_rank_trace(Path(inp.path), int(inp.store_rank))
    from neuron_studio.profiler.importers import read_trace

    return read_trace(inp.path)


def _store_rank_trace(d: Path, rank: int) -> Any:
    import json

    import pyarrow.parquet as pq

    from neuron_studio.profiler.trace import Trace

    def table(base: str) -> Any:
        p = d / f"{base}_r{rank}.parquet"
        return pq.read_table(p).to_pandas() if p.is_file() else None

    meta_df = table("meta")
    meta = json.loads(meta_df["json"].iloc[0]) if meta_df is not None else {}
    if meta.get("rank") is None:
        meta["rank"], meta["rank_source"] = rank, "stored table name"
    return Trace(ops=table("ops"), host=table("host"), compiles=table("compiles"), meta=meta, memory=table("memory"))


def map_rank(inp: RankInput, with_summary: bool = False, on_profile: OnProfile | None = None) -> dict[str, Any]:
    """The map task: one rank → its digest as payload (Parquet bytes), plus this task's peak RSS. Runs in a
    worker process (local or Dask); everything it returns is small."""
    from neuron_studio.profiler.analysis.rank_digest import digest_trace

    _clear_peak()
    t0 = time.perf_counter()
    try:
        trace, prof = read_rank(inp)
        digest = digest_trace(trace, prof, with_summary=with_summary, summary_name=Path(inp.path).name)
        if on_profile is not None:
            on_profile(inp, prof)
    except Exception as e:  # noqa: BLE001 - becomes JobMapError on the client, naming the input
        return {"error": f"{inp.label}: {type(e).__name__}: {str(e)[:500]}"}
    del trace, prof
    out = {"payload": digest.to_payload(), "peak_rss": _peak_rss(), "seconds": time.perf_counter() - t0}
    _release_memory()
    return out


def _release_memory() -> None:
    """Give the rank's memory back before the worker takes the next one: collect, then return free heap
    pages to the OS (glibc's malloc_trim; elsewhere a no-op)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


# -------------------------------------------------------------------------------------------- engines
def summary_input(inputs: Sequence[RankInput]) -> int:
    """Which input's full profile summary becomes the report's body: the lowest rank its name states, else
    the first input (its distributedInfo is not known before it is read)."""
    return min(range(len(inputs)), key=lambda i: (inputs[i].name_rank is None, inputs[i].name_rank or 0, i)) \
        if inputs else 0


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 << 30


def memory_estimate(inp: RankInput) -> int:
    """Bytes one worker is expected to need for this input (see `BYTES_PER_JSON_BYTE`)."""
    p = Path(inp.path)
    if p.is_dir():
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        return WORKER_BASE_BYTES + int(size * 4)   # Parquet expands ~4x into pandas
    size = p.stat().st_size * (GZIP_RATIO if p.name.lower().endswith(".gz") else 1.0)
    return WORKER_BASE_BYTES + int(size * BYTES_PER_JSON_BYTE)


def local_workers(inputs: Sequence[RankInput], *, available: int | None = None, cpus: int | None = None) -> int:
    """How many local workers run at once: as many as the CPUs, fewer when the largest rank's estimate times
    the count would not fit in 80 % of the available memory; at least one."""
    available = _available_memory() if available is None else available
    cpus = (os.cpu_count() or 1) if cpus is None else cpus
    need = max((memory_estimate(i) for i in inputs), default=WORKER_BASE_BYTES)
    return max(1, min(cpus, len(inputs), int(0.8 * available) // max(need, 1)))


def _run_local(inputs: Sequence[RankInput], workers: int, on_profile: OnProfile | None,
               progress: Callable[[int, int], None] | None) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")      # a fresh interpreter per worker: no inherited memory
    out: list[dict | None] = [None] * len(inputs)
    # long-lived workers (CPython 3.11's max_tasks_per_child can hang the executor when workers are
    # replaced): each task starts from a collected, trimmed heap, so a worker's peak is one rank's
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        first = summary_input(inputs)
        futs = {pool.submit(map_rank, inp, i == first, on_profile): i for i, inp in enumerate(inputs)}
        for done, fut in enumerate(cf.as_completed(futs), 1):
            out[futs[fut]] = fut.result()
            if progress:
                progress(done, len(inputs))
    return out  # type: ignore[return-value]


def _run_dask(client: Any, inputs: Sequence[RankInput], on_profile: OnProfile | None,
              progress: Callable[[int, int], None] | None) -> list[dict]:
    from distributed import as_completed

    first = summary_input(inputs)
    stamp = f"{os.getpid()}-{time.time_ns()}"
    futs = [client.submit(map_rank, inp, i == first, on_profile, key=f"neuron-studio-digest-{stamp}-{i}", pure=False)
            for i, inp in enumerate(inputs)]
    index = {f.key: i for i, f in enumerate(futs)}
    out: list[dict | None] = [None] * len(inputs)
    for done, fut in enumerate(as_completed(futs), 1):
        out[index[fut.key]] = fut.result()
        fut.release()
        if progress:
            progress(done, len(inputs))
    return out  # type: ignore[return-value]


def _dask_client(scheduler: str) -> Any:
    try:
        from distributed import Client
    except ImportError:
        raise JobMapError("a Dask scheduler was given but dask.distributed is not installed: "
                          "pip install 'neuron-studio[dask]'") from None
    return Client(scheduler)


def analyze_job(targets: str | os.PathLike | Sequence[str | os.PathLike] | Sequence[RankInput], *,
                client: Any = None, scheduler: str | None = None, workers: int | None = None,
                digest_dir: str | os.PathLike | None = None, on_profile: OnProfile | None = None,
                progress: Callable[[int, int], None] | None = None) -> JobAnalysis:
    """Map every rank of the job to a digest, then reduce (see the module doc). `client` (a
    `distributed.Client`) or `scheduler` (its address) run the map on Dask; else `workers` local processes
    (default `local_workers`); `workers=0` maps in this process (tests, tiny jobs)."""
    if isinstance(targets, (str, os.PathLike)):
        targets = [targets]
    given = list(targets)
    inputs = given if given and all(isinstance(t, RankInput) for t in given) else job_inputs(given)
    t0 = time.perf_counter()
    own_client = None
    if client is None and scheduler:
        client = own_client = _dask_client(scheduler)
    try:
        if client is not None:
            engine = f"dask ({getattr(client.scheduler, 'address', None) or 'cluster'})"
            results = _run_dask(client, inputs, on_profile, progress)
        elif workers == 0:
            engine = "in process"
            first = summary_input(inputs)
            results = [map_rank(inp, i == first, on_profile) for i, inp in enumerate(inputs)]
        else:
            n = workers or local_workers(inputs)
            engine = f"local processes ({n})"
            results = _run_local(inputs, n, on_profile, progress)
    finally:
        if own_client is not None:
            own_client.close()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise JobMapError(f"{len(errors)} of {len(inputs)} rank(s) could not be read: " + "; ".join(errors[:5]))
    digests = [RankDigest.from_payload(r["payload"]) for r in results]
    if digest_dir is not None:
        for inp, r in zip(inputs, results):
            write_digest(r["payload"], Path(digest_dir) / f"input-{inp.position:05d}")
    map_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    analysis = reduce_digests(digests, inputs)
    summary = next((d.summary for d in digests if d.summary is not None), None)
    return JobAnalysis(analysis=analysis, digests=digests, inputs=inputs, summary=summary, engine=engine,
                       worker_peak_rss_bytes=[int(r.get("peak_rss") or 0) for r in results],
                       map_seconds=map_s, reduce_seconds=time.perf_counter() - t1)
