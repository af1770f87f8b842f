"""Many-rank benchmark: a synthetic job of 64 ranks × 1M events analysed with bounded memory, and its first 8
ranks against Holistic Trace Analysis' multi-rank load, side by side in one run.

The job is written by the benchmark (neuron_studio/testing/synthetic_job.py: per rank the launch events of
bench_trace_scale.py, blocking allreduces every `--launches-per-collective` launches, per-rank clock skew,
one injected straggler). Then, each in a fresh subprocess whose whole process tree's resident memory is
sampled every 0.1 s:

- ours, whole job:   analyze_job(DIR) on local worker processes (each takes one rank and exits): the
                     client's peak RSS (goal ≤ 2 GB), every worker's peak RSS while on its rank, and one
                     rank mapped alone in a fresh process (the bound a worker's peak is held to), the
                     straggler found vs the injected one, the clock skew recovered;
- ours, first 8:     the same on a directory holding the first `--hta-ranks` ranks;
- HTA, first 8:      TraceAnalysis(trace_dir=...) (its multi-rank parse) + get_temporal_breakdown +
                     get_comm_comp_overlap (visualize=False) on the same files.

    python benchmarks/bench_ranks.py [--ranks 64] [--events 1000000] [--dir /tmp/neuron-studio-ranks]
                                     [--workers N] [--hta-ranks 8] [--hta-python PATH] [--skip-hta]
                                     [--skip-job] [--timeout SECONDS] [--reuse]

HTA is not a dependency: install it into a separate virtualenv (`python -m venv hta-venv &&
hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0`) and pass its interpreter as --hta-python. The load
average is printed before and after: on a shared machine compare the ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

try:
    from neuron_studio.testing import synthetic_job as sj
except ImportError:    # the HTA worker runs this file in HTA's own virtualenv, which has no studio
    sj = None

CLIENT_GOAL_BYTES = 2 << 30


# -- the job ----------------------------------------------------------------------------------------------
def _spec(args: argparse.Namespace) -> sj.JobSpec:
    return sj.JobSpec(ranks=args.ranks, events_per_rank=args.events, launches_per_step=2000,
                      launches_per_collective=args.launches_per_collective, straggler=args.straggler,
                      allreduce_elems=16 * 1024 * 1024)


def _write_one(path: str, rank: int, spec: sj.JobSpec) -> int:
    return sj.write_rank(Path(path), rank, spec)


def generate(job: Path, spec: sj.JobSpec, reuse: bool) -> tuple[int, float]:
    """Write the job (2 processes); with --reuse keep files already written for this spec."""
    stamp = job.parent / f"{job.name}-spec.txt"
    want = json.dumps(spec.__dict__, sort_keys=True)
    names = [job / f"rank-{r}.pt.trace.json" for r in range(spec.ranks)]
    if reuse and stamp.exists() and stamp.read_text() == want and all(p.exists() for p in names):
        return sum(p.stat().st_size for p in names), 0.0
    job.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    t = time.perf_counter()
    with ProcessPoolExecutor(2) as pool:
        list(pool.map(_write_one, [str(p) for p in names], range(spec.ranks), [spec] * spec.ranks))
    stamp.write_text(want)
    return sum(p.stat().st_size for p in names), time.perf_counter() - t


# -- workers (each in its own process) --------------------------------------------------------------------
def _vmhwm() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def worker_ours(job: str, workers: int | None, straggler: int, max_skew_us: float, dask: bool = False) -> dict:
    """The job mapped on local worker processes, or (`dask`) on a Dask LocalCluster of as many worker
    processes (one thread each) started here: its scheduler and workers are this process's children."""
    import contextlib
    import hashlib

    from neuron_studio.profiler.job_map import analyze_job

    t0, c0 = time.perf_counter(), time.process_time()
    with contextlib.ExitStack() as stack:
        client = None
        if dask:
            from distributed import Client, LocalCluster

            cluster = stack.enter_context(LocalCluster(n_workers=workers or 2, threads_per_worker=1, processes=True,
                                                       dashboard_address=None, memory_limit=0))
            client = stack.enter_context(Client(cluster))
        res = analyze_job(job, workers=workers, client=client)
    a = res.analysis
    s = a.straggler
    al = a.alignment
    spec = sj.JobSpec(ranks=len(res.digests), max_skew_us=max_skew_us)
    skew_err = max(abs(al.corrections_ns.get(r, 0) + sj.skew_us(r, spec) * 1000) for r in al.corrections_ns) \
        if al is not None and al.method == "collective exits" else None
    digest_bytes = sum(len(b) for d in res.digests for b in d.to_payload().values())
    return {"seconds": time.perf_counter() - t0, "client_cpu_s": time.process_time() - c0,
            "map_s": res.map_seconds, "reduce_s": res.reduce_seconds,
            "client_peak_rss": _vmhwm(), "worker_peaks": res.worker_peak_rss_bytes, "engine": res.engine,
            "ranks": len(res.digests), "straggler": None if s is None else s.rank,
            "straggler_ok": s is not None and s.rank == straggler,
            "delayed": None if s is None else f"{s.op} #{s.index}",
            "alignment": None if al is None else al.method,
            "residual_skew_ns": None if al is None else al.residual_skew_ns, "skew_error_ns": skew_err,
            "digest_bytes": digest_bytes,
            # the report's ranks section, hashed: the same on local processes and on Dask
            "report_sha": hashlib.sha256(json.dumps(a.to_summary(), sort_keys=True, default=str).encode())
            .hexdigest()[:16],
            "slowest": a.slowest_collective}


def worker_one_rank(path: str) -> dict:
    """One rank mapped alone in this fresh process: the memory one rank needs."""
    from neuron_studio.profiler.importers.job_inputs import job_inputs
    from neuron_studio.profiler.job_map import map_rank

    t0 = time.perf_counter()
    r = map_rank(job_inputs([path])[0])
    return {"seconds": time.perf_counter() - t0, "peak_rss": _vmhwm(), "ok": "payload" in r}


def worker_hta(trace_dir: str) -> dict:
    import logging

    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    t0, c0 = time.perf_counter(), time.process_time()
    analyzer = TraceAnalysis(trace_dir=trace_dir)
    t1 = time.perf_counter()
    tb = analyzer.get_temporal_breakdown(visualize=False)
    ov = analyzer.get_comm_comp_overlap(visualize=False)
    return {"seconds": time.perf_counter() - t0, "load_s": t1 - t0, "client_cpu_s": time.process_time() - c0,
            "client_peak_rss": _vmhwm(), "ranks": int(len(tb)), "overlap_rows": int(len(ov))}


# -- running a worker with its process tree's memory sampled ----------------------------------------------
def _tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                parts = fh.read().rsplit(")", 1)[1].split()
            ppid, pages = int(parts[1]), int(parts[21])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
        rss[int(d)] = pages * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, []))
    return total


def run_worker(args: list[str], python: str = sys.executable, timeout: float = 3600.0) -> dict:
    cmd = [python, __file__, "--worker", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            done.wait(0.1)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"worker {args[0]!r} did not finish within {timeout:.0f} s (--timeout)"}
    finally:
        done.set()
        th.join()
    if proc.returncode != 0:
        return {"error": (err.strip().splitlines() or ["?"])[-1][:300]}
    res = json.loads(out.strip().splitlines()[-1])
    res["tree_peak_rss"] = peak[0]
    return res


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _mb(b: float | None) -> str:
    return "-" if b is None else f"{b / 2**20:.0f} MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--events", type=int, default=1_000_000, help="events per rank")
    ap.add_argument("--launches-per-collective", type=int, default=500)
    ap.add_argument("--straggler", type=int, default=37)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/neuron-studio-ranks"))
    ap.add_argument("--workers", type=int, default=None, help="local map workers (default: sized to memory)")
    ap.add_argument("--hta-ranks", type=int, default=8)
    ap.add_argument("--hta-python", default=sys.executable)
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--skip-job", action="store_true", help="only the first-ranks comparison")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--dask", action="store_true", help="also map the first ranks on a Dask LocalCluster "
                    "(--workers worker processes) and compare its report with the local processes' one")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        kind, rest = args.worker[0], args.worker[1:]
        if kind == "ours":
            res = worker_ours(rest[0], int(rest[1]) or None, int(rest[2]), float(rest[3]), rest[4:5] == ["dask"])
        elif kind == "one":
            res = worker_one_rank(rest[0])
        else:
            res = worker_hta(rest[0])
        print(json.dumps(res))
        return

    spec = _spec(args)
    if spec.straggler is not None and spec.straggler >= spec.ranks:
        spec = sj.JobSpec(**{**spec.__dict__, "straggler": spec.ranks - 1})
    job = args.dir / "job"
    size, gen_s = generate(job, spec, args.reuse)
    first = args.dir / f"first{args.hta_ranks}"
    first.mkdir(parents=True, exist_ok=True)
    for r in range(min(args.hta_ranks, spec.ranks)):
        link = first / f"rank-{r}.pt.trace.json"
        if not link.exists():
            link.symlink_to(job / f"rank-{r}.pt.trace.json")
    print(f"job: {spec.ranks} ranks × {spec.launches * 5 + spec.collectives * 2:,} events, "
          f"{size / 1e9:.1f} GB of JSON ({'reused' if not gen_s else f'written in {gen_s:.0f} s'}); "
          f"{spec.collectives} allreduces per rank, straggler rank {spec.straggler}")
    print(f"load average (1/5/15 min) before: {_load()} on {os.cpu_count()} CPUs")
    to, w = args.timeout, str(args.workers or 0)
    rows: list[tuple[str, dict]] = []
    print(f"{'run':<18}{'wall s':>9}{'client CPU s':>14}{'client peak':>13}{'tree peak':>12}"
          f"{'max worker':>12}  detail", flush=True)

    def row(name: str, r: dict) -> None:
        rows.append((name, r))
        if "error" in r:
            print(f"{name:<18}  failed: {r['error']}", flush=True)
            return
        wp = max(r.get("worker_peaks") or [0]) or r.get("peak_rss")
        detail = {k: r[k] for k in ("engine", "straggler", "straggler_ok", "delayed", "alignment",
                                    "residual_skew_ns", "skew_error_ns", "digest_bytes", "report_sha", "load_s", "map_s",
                                    "reduce_s") if k in r}
        print(f"{name:<18}{r['seconds']:>9.1f}{r.get('client_cpu_s', 0):>14.1f}"
              f"{_mb(r.get('client_peak_rss')):>13}{_mb(r.get('tree_peak_rss')):>12}{_mb(wp):>12}  {detail}  "
              f"(load {_load()})", flush=True)

    row("one rank alone", run_worker(["one", str(job / "rank-0.pt.trace.json")], timeout=to))
    n8 = min(args.hta_ranks, spec.ranks)
    strag8 = spec.straggler if spec.straggler is not None and spec.straggler < n8 else -1
    row(f"ours, first {n8}", run_worker(["ours", str(first), w, str(strag8), str(spec.max_skew_us)], timeout=to))
    if args.dask:
        row(f"ours, first {n8}, Dask", run_worker(["ours", str(first), w, str(strag8), str(spec.max_skew_us), "dask"],
                                                  timeout=to))
    if not args.skip_hta:
        row(f"HTA, first {n8}", run_worker(["hta", str(first)], args.hta_python, timeout=to))
    if not args.skip_job:
        row(f"ours, {spec.ranks} ranks", run_worker(["ours", str(job), w, str(spec.straggler),
                                                     str(spec.max_skew_us)], timeout=to))
    print(f"load average after: {_load()}")
    res = dict(rows)
    one = res.get("one rank alone", {})
    big = res.get(f"ours, {spec.ranks} ranks")
    if big and "error" not in big:
        ok = big["client_peak_rss"] <= CLIENT_GOAL_BYTES
        print(f"goal, client peak RSS ≤ 2 GB: {'met' if ok else 'NOT met'} ({_mb(big['client_peak_rss'])})")
        if "error" not in one:
            worst = max(big["worker_peaks"])
            print(f"per-worker peak RSS: max {_mb(worst)} over {len(big['worker_peaks'])} ranks vs one rank alone "
                  f"{_mb(one['peak_rss'])} ({worst / one['peak_rss']:.2f}x)")
        print(f"straggler: found rank {big['straggler']} (injected {spec.straggler}): "
              f"{'found' if big['straggler_ok'] else 'NOT found'}")
    ours8, hta8 = res.get(f"ours, first {n8}"), res.get(f"HTA, first {n8}")
    if ours8 and hta8 and "error" not in ours8 and "error" not in hta8:
        print(f"ours / HTA on the first {n8} ranks: time {ours8['seconds'] / hta8['seconds']:.2f}x, "
              f"peak memory (process tree) {ours8['tree_peak_rss'] / hta8['tree_peak_rss']:.2f}x, "
              f"client process peak {ours8['client_peak_rss'] / hta8['client_peak_rss']:.2f}x")
    dask8 = res.get(f"ours, first {n8}, Dask")
    if ours8 and dask8 and "error" not in ours8 and "error" not in dask8:
        same = ours8["report_sha"] == dask8["report_sha"]
        print(f"Dask LocalCluster vs local processes on the first {n8} ranks: report "
              f"{'identical' if same else 'DIFFERENT'} (sha {dask8['report_sha']} vs {ours8['report_sha']}), "
              f"time {dask8['seconds'] / ours8['seconds']:.2f}x, process tree peak "
              f"{dask8['tree_peak_rss'] / ours8['tree_peak_rss']:.2f}x")
    failed = [n for n, r in rows if "error" in r]
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
