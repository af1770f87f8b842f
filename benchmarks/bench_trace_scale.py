"""Scale benchmark: import + full analysis of a 1,000,000-event trace: the streaming JSON reader, the
whole-document JSON reader it replaced, our Parquet directory, and Holistic Trace Analysis, in one run.

Generates one synthetic torch.profiler-style Chrome trace (what HTA reads): per launch a `cpu_op` with
"Input Dims"/"Input type", its `cuda_runtime` cudaLaunchKernel, the GPU `kernel` on stream 7, and the `ac2g`
flow pair linking them, plus ProfilerStep annotations; the same trace is also written as our Parquet
directory. Then, each in a fresh subprocess (seconds and CPU seconds after imports, peak RSS of the process
after the import and at the end):

- ours, JSON columnar:   read_trace(json) + Profile.from_trace + op_table + engine_utilization + hot_path
                         + roofline + cpu_fallbacks + sync_points + kernel_breakdown + temporal_breakdown
                         + gpu_vs_trainium (the default reader: streamed pieces through the columnar fast path)
- ours, JSON dicts:      the same with read_trace(json, columnar=False) (streamed pieces parsed into dicts)
- ours, JSON whole:      the same with read_trace_whole (parses the whole document first: the old reader)
- ours, Parquet:         the same from the Parquet directory
- HTA:                   TraceAnalysis(trace_dir=...) (parse) + get_gpu_kernel_breakdown(visualize=False)

    python benchmarks/bench_trace_scale.py [--events 1000000] [--dir /tmp/trace-scale] [--skip-hta]
                                           [--hta-python PATH] [--timeout SECONDS] [--reuse]

Each worker's report names the reader that took the file and, for a streamed file, how many pieces the
columnar fast path took and declined. Every worker runs under a timeout (a run that exceeds it is reported as
failed, naming the worker); --reuse keeps an existing trace of the requested size instead of regenerating it.

Goal: import ≤ 5 s and ≤ 1 GB peak RSS for the 1M-event JSON trace, ≤ 0.5x HTA's time. HTA is not a
dependency: install it into a separate virtualenv (`python -m venv hta-venv && hta-venv/bin/pip install
HolisticTraceAnalysis`) and pass its interpreter as --hta-python (default: this interpreter). The machine's
load average is printed before and after: on a shared machine compare the ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from neuron_studio.testing.kineto_writer import EventStream, LaunchOp, LaunchWriter

_OPS = [  # aten op, input dims, input types, kernel
    LaunchOp("aten::mm", [[512, 1024], [1024, 1024]], ["c10::BFloat16", "c10::BFloat16"],
             "ampere_bf16_s16816gemm_bf16_128x128", flops=2 * 512 * 1024 * 1024),
    LaunchOp("aten::addmm", [[1024], [512, 1024], [1024, 4096]], ["c10::BFloat16"] * 3,
             "sm80_xmma_gemm_bf16bf16_bf16f32"),
    LaunchOp("aten::add", [[512, 1024], [512, 1024], []], ["c10::BFloat16", "c10::BFloat16", "Scalar"],
             "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>"),
    LaunchOp("aten::mul", [[512, 4096], [512, 4096]], ["c10::BFloat16", "c10::BFloat16"],
             "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16>>"),
    LaunchOp("aten::gelu", [[512, 4096]], ["c10::BFloat16", ""],
             "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>"),
    LaunchOp("aten::_softmax", [[8, 16, 512, 512], [], []], ["float", "Scalar", "Scalar"],
             "void at::native::cunn_SoftMaxForward<4, float, float, float>"),
    LaunchOp("aten::native_layer_norm", [[512, 1024], [], [1024], [1024], []],
             ["c10::BFloat16", "", "c10::BFloat16", "c10::BFloat16", "Scalar"],
             "void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float>"),
    LaunchOp("aten::copy_", [[512, 1024], [512, 1024], []], ["float", "c10::BFloat16", "Scalar"],
             "void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda>"),
    LaunchOp("aten::sum", [[512, 1024], [], [], []], ["float", "", "Scalar", ""],
             "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>"),
    LaunchOp("aten::embedding", [[32000, 1024], [8, 512], [], [], []],
             ["c10::BFloat16", "long int", "Scalar", "Scalar", "Scalar"],
             "void at::native::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>"),
]
_STEP_LAUNCHES = 2000


def generate(path: Path, n_events: int) -> int:
    """Write the synthetic trace; returns the number of events written (5 per launch + step annotations)."""
    pid, tid, stream = 4242, 4242, 7
    launches = n_events // 5
    written = 0
    writer = LaunchWriter(_OPS, pid=pid, tid=tid, stream=stream, detailed=True)
    with open(path, "w") as fh:
        fh.write('{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},\n'
                 '"deviceProperties": [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 85000000000}],\n'
                 '"traceEvents": [\n')
        fh.write(f'{{"ph": "M", "name": "process_name", "pid": {pid}, "tid": 0, "args": {{"name": "python"}}}},\n'
                 f'{{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {{"name": "GPU 0"}}}}')
        written += 2
        t = 1_000_000.0           # µs
        gpu_t = t
        ext = 0
        step_len = _STEP_LAUNCHES * 12.0
        out = EventStream(fh)
        for k in range(launches):
            if k % _STEP_LAUNCHES == 0:
                s = k // _STEP_LAUNCHES
                out.add(f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{s}", "pid": {pid}, '
                        f'"tid": {tid}, "ts": {t - 0.5:.3f}, "dur": {step_len:.3f}, '
                        f'"args": {{"External id": {10**9 + s}}}}}')
                written += 1
            ext += 1
            lt = t + 2.0
            gpu_t = max(gpu_t, lt + 4.0)
            kdur = 6.0 + (k % 5)
            out.add(writer.launch(k % len(_OPS), k, ext, 100_000 + k, t, 9.0 + (k % 7) * 0.25, lt, gpu_t, kdur))
            gpu_t += kdur + 0.5
            t += 12.0
            written += 5
        out.close()
    return written


# -- workers (each runs in its own process) ------------------------------------------------------------------

def _rss_mb() -> float:
    """Peak resident memory of this process (VmHWM: unlike ru_maxrss it is not inherited across exec)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker_ours(path: str, whole: bool = False, columnar: bool = True) -> dict:
    from neuron_studio.profiler.importers import read_trace
    from neuron_studio.profiler.importers.read import read_trace_whole
    from neuron_studio.profiler.profile import Profile

    base = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    report: dict = {"reader": "whole"}
    trace = read_trace_whole(path) if whole else read_trace(path, columnar=columnar, report=report)
    t1, c1 = time.perf_counter(), time.process_time()
    import_rss = _rss_mb()
    prof = Profile.from_trace(trace, kernel_lookup=None)
    t2 = time.perf_counter()
    table = prof.op_table()
    prof.engine_utilization(bins=200)
    hot = prof.hot_path()
    prof.roofline()
    prof.cpu_fallbacks()
    prof.sync_points()
    kernels = prof.kernel_breakdown()          # what HTA's get_gpu_kernel_breakdown answers, plus the rest
    prof.temporal_breakdown()
    prof.gpu_vs_trainium()
    t3 = time.perf_counter()
    return {"seconds": t3 - t0, "import_s": t1 - t0, "import_cpu_s": c1 - c0, "model_s": t2 - t1,
            "analyses_s": t3 - t2, "import_peak_rss_mb": import_rss, "peak_rss_mb": _rss_mb(),
            "baseline_rss_mb": base, "ops": len(trace.ops), "host_events": len(trace.host),
            "top_op": str(table["key"].iloc[0]) if len(table) else None, "hot_ops": len(hot),
            "kernels": int(len(kernels)), "path": _path_of(report)}


def _path_of(report: dict) -> str:
    if report.get("reader") != "stream":
        return report.get("reader", "?")
    return (f"stream: {report['pieces_fast']}/{report['pieces']} pieces columnar, "
            f"{report['pieces_declined']} declined")


def worker_hta(trace_dir: str) -> dict:
    import logging

    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    base = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    analyzer = TraceAnalysis(trace_dir=trace_dir)
    t1, c1 = time.perf_counter(), time.process_time()
    import_rss = _rss_mb()
    kernel_type_df, kernel_df = analyzer.get_gpu_kernel_breakdown(visualize=False)
    t2 = time.perf_counter()
    return {"seconds": t2 - t0, "import_s": t1 - t0, "import_cpu_s": c1 - c0, "analyses_s": t2 - t1,
            "import_peak_rss_mb": import_rss, "peak_rss_mb": _rss_mb(), "baseline_rss_mb": base,
            "kernels": int(len(kernel_df)),
            "top_kernel_type": str(kernel_type_df["kernel_type"].iloc[0]) if len(kernel_type_df) else None}


def _run_worker(kind: str, target: Path, python: str = sys.executable, timeout: float = 900.0) -> dict:
    cmd = [python, __file__, "--worker", kind, str(target)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"worker {kind!r} on {target} did not finish within {timeout:.0f} s (--timeout)"}
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/neuron-studio-trace-scale"))
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--hta-python", default=sys.executable, help="interpreter with HolisticTraceAnalysis installed")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds each worker may take")
    ap.add_argument("--reuse", action="store_true", help="keep an existing trace with the requested events")
    ap.add_argument("--worker", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        kind, target = args.worker
        res = worker_hta(target) if kind == "hta" else worker_ours(target, whole=kind == "ours-whole",
                                                                   columnar=kind != "ours-dicts")
        print(json.dumps(res))
        return

    from neuron_studio.profiler.export import to_parquet
    from neuron_studio.profiler.importers import read_trace

    hta_dir = args.dir / "hta"
    hta_dir.mkdir(parents=True, exist_ok=True)
    js = hta_dir / "rank0.trace.json"
    t = time.perf_counter()
    stamp = args.dir / "events.txt"
    kept = stamp.read_text().split() if args.reuse and js.exists() and stamp.exists() else []
    if kept[:1] == [str(args.events)] and kept[2:] == [str(js.stat().st_size)]:
        n = int(kept[1])
    else:
        n = generate(js, args.events)
        stamp.write_text(f"{args.events} {n} {js.stat().st_size}")
    gen_s = time.perf_counter() - t
    t = time.perf_counter()
    pq_dir = to_parquet(read_trace(js), args.dir / "trace.nstrace")
    conv_s = time.perf_counter() - t
    print(f"trace: {n:,} events, {js.stat().st_size / 1e6:.0f} MB JSON (generated in {gen_s:.1f} s); "
          f"Parquet {sum(f.stat().st_size for f in pq_dir.iterdir()) / 1e6:.1f} MB (converted in {conv_s:.1f} s)")
    print(f"load average (1/5/15 min) before: {_load()} on {os.cpu_count()} CPUs")

    to = args.timeout
    rows = [("JSON columnar", _run_worker("ours", js, timeout=to)),
            ("JSON dicts", _run_worker("ours-dicts", js, timeout=to)),
            ("JSON whole (old)", _run_worker("ours-whole", js, timeout=to)),
            ("Parquet", _run_worker("ours", pq_dir, timeout=to))]
    if not args.skip_hta:
        rows.append(("HTA (JSON)", _run_worker("hta", hta_dir, args.hta_python, timeout=to)))
    print(f"load average after: {_load()}")
    failed = [name for name, r in rows if "error" in r]
    print(f"{'tool':<18}{'total s':>9}{'import s':>10}{'import cpu s':>14}{'analyses s':>12}"
          f"{'RSS import MB':>15}{'peak RSS MB':>13}  detail")
    for name, r in rows:
        if "error" in r:
            print(f"{name:<18}  failed: {r['error']}")
            continue
        detail = {k: v for k, v in r.items() if k in ("ops", "host_events", "top_op", "kernels", "top_kernel_type",
                                                      "model_s", "path")}
        print(f"{name:<18}{r['seconds']:>9.2f}{r['import_s']:>10.2f}{r['import_cpu_s']:>14.2f}"
              f"{r['analyses_s']:>12.2f}{r['import_peak_rss_mb']:>15.0f}{r['peak_rss_mb']:>13.0f}  {detail}")
    res = dict(rows)
    for ref in ("JSON dicts", "JSON whole (old)", "HTA (JSON)"):
        base = res.get(ref)
        if not base or "error" in base:
            continue
        for name in ("JSON columnar", "Parquet"):
            r = res[name]
            if "error" not in r:
                print(f"{name} / {ref}: import time {r['import_s'] / base['import_s']:.2f}x, import CPU "
                      f"{r['import_cpu_s'] / base['import_cpu_s']:.2f}x, total {r['seconds'] / base['seconds']:.2f}x, "
                      f"peak memory {r['peak_rss_mb'] / base['peak_rss_mb']:.2f}x")
    r = res["JSON columnar"]
    if "error" not in r:
        ok = r["import_s"] <= 5.0 and r["import_peak_rss_mb"] <= 1024
        print(f"goal (import <= 5 s and <= 1 GB peak RSS): {'met' if ok else 'NOT met'} "
              f"({r['import_s']:.2f} s, {r['import_peak_rss_mb']:.0f} MB; load average {_load()})")
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
