"""Emulated `neuron` device vs plain CPU eager, side by side in one run (not a test).

    python benchmarks/bench_device.py            # full run
    python benchmarks/bench_device.py --quick    # fewer repetitions

(a) per-op overhead: 10,000 small adds, µs per op above CPU, without and with an op-event subscriber
    (goals <= 1.5 µs without, <= 4 µs recording), and what a drain costs per event (outside the ops, once per
    profile): the recorded rows as the columns the profiler reads (`drain_columns`), and as OpEvent objects
    (`drain`, for code that wants one object per op);
(b) MLP 64x1024x1024: forward + backward + SGD step (goal <= 1.05x CPU), with the same optimizer
    implementation on both sides: PyTorch picks SGD's `foreach` implementation for parameters on a PrivateUse1
    device (as on TorchNeuron) and the per-parameter loop on CPU, so each is measured with `foreach=` set
    explicitly on both;
(c) transformer block d_model 512, seq 256, batch 8: forward + backward (goal <= 1.05x CPU), with the minor
    page faults per step of each side: the same kernels on the same shapes, but glibc may hand a step's large
    temporaries back to the OS and fault them in again on one side and not the other (PyTorch's autograd runs a
    non-CPU device's backward on its own worker thread, so the allocations come from another thread). The same
    case is re-run in a child process with glibc told to keep freed memory (GLIBC_TUNABLES, Linux/glibc only)
    so both sides allocate alike.
CPU and neuron repetitions are interleaved and medians reported, so drift in machine load hits both.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

import neuron_studio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.models.blocks import PreNormBlock  # noqa: E402

COMMAND = "python benchmarks/bench_device.py"


def _time(fn, n: int = 1) -> float:  # noqa: ANN001
    """Seconds per call; a case that returns a float reports the seconds of its measured part itself."""
    t0 = time.perf_counter()
    own = 0.0
    for _ in range(n):
        r = fn()
        own += r if isinstance(r, float) else 0.0
    return (own if own else time.perf_counter() - t0) / n


def interleaved(cases: dict, reps: int, n: int = 1, warmup: int = 2) -> dict[str, float]:
    """Median seconds per call of each case, alternating the cases every repetition."""
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(reps):
        for k, fn in cases.items():
            samples[k].append(_time(fn, n))
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_small_adds(reps: int) -> list[tuple]:
    x = torch.randn(16)
    xn = x.to("neuron")
    n = 10_000

    def cpu() -> None:
        for _ in range(n):
            x + x

    def dev() -> None:
        for _ in range(n):
            xn + xn

    sub = neuron_studio.device.subscribe(capacity=n)
    sub.close()

    drains: dict[str, list[float]] = {"columns": [], "objects": []}

    def recorded(form: str):  # noqa: ANN202
        def run() -> float:
            with neuron_studio.device.subscribe(capacity=n) as sub:
                t0 = time.perf_counter()
                for _ in range(n):
                    xn + xn
                t1 = time.perf_counter()
                got = sub.drain_columns() if form == "columns" else sub.drain()
                drains[form].append(time.perf_counter() - t1)
                assert len(got) == n
            return t1 - t0
        return run

    m = interleaved({"cpu": cpu, "neuron": dev, "neuron+sub": recorded("columns"),
                     "neuron+sub(objects)": recorded("objects")}, reps)
    per = {k: v / n * 1e6 for k, v in m.items()}
    drain_us = {k: statistics.median(v) / n * 1e6 for k, v in drains.items()}
    return [
        ("(a) 10,000 adds, 16 floats", "no subscriber", per["cpu"], per["neuron"], per["neuron"] / per["cpu"],
         f"{per['neuron'] - per['cpu']:.2f} µs/op overhead (goal <= 1.5)"),
        ("(a) 10,000 adds, 16 floats", "subscriber", per["cpu"], per["neuron+sub"], per["neuron+sub"] / per["cpu"],
         f"{per['neuron+sub'] - per['cpu']:.2f} µs/op overhead (goal <= 4)"),
        ("(a) drain: recorded rows -> columns", "per event", float("nan"), drain_us["columns"], float("nan"),
         "what the profiler reads; once per profile, outside the ops"),
        ("(a) drain: recorded rows -> OpEvent objects", "per event", float("nan"), drain_us["objects"],
         float("nan"), "Subscription.drain(), for code that wants objects"),
    ]


def faults_counted(fn, faults: list[int]):  # noqa: ANN001, ANN201
    """`fn` that appends the minor page faults of each call to `faults`."""
    def run():  # noqa: ANN202
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        r = fn()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        return r
    return run


def bench_mlp(reps: int) -> list[tuple]:
    def make(dev: str, foreach: bool):  # noqa: ANN202
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=foreach)
        x = torch.randn(64, 1024).to(dev)

        def step() -> None:
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()

        return step

    rows = []
    for foreach, why in ((True, "neuron's default (as TorchNeuron's)"), (False, "CPU's default")):
        m = interleaved({"cpu": make("cpu", foreach), "neuron": make("neuron", foreach)}, reps)
        rows.append((f"(b) MLP 64x1024x1024 fwd+bwd+SGD foreach={foreach}", "ms/step", m["cpu"] * 1e3,
                     m["neuron"] * 1e3, m["neuron"] / m["cpu"], f"goal <= 1.05x; both sides {why}"))
    return rows


BLOCK_CASE = "(c) transformer block d512 s256 b8 fwd+bwd"
# glibc: serve allocations up to 32 MiB from the heap and never trim it, so freed memory is reused, not refaulted
KEEP_FREED = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296"


def bench_block(reps: int) -> list[tuple]:
    def make(dev: str):  # noqa: ANN202
        torch.manual_seed(0)
        model = PreNormBlock(512, 8).to(dev)
        x = torch.randn(8, 256, 512).to(dev)

        def step() -> None:
            model.zero_grad()
            model(x).square().mean().backward()

        return step

    faults: dict[str, list[int]] = {"cpu": [], "neuron": []}
    m = interleaved({k: faults_counted(make(k), faults[k]) for k in faults}, reps)
    pf = {k: statistics.median(v) for k, v in faults.items()}
    keep = "GLIBC_TUNABLES" in os.environ
    return [(BLOCK_CASE + (", glibc keeping freed memory" if keep else ""), "ms/step", m["cpu"] * 1e3,
             m["neuron"] * 1e3, m["neuron"] / m["cpu"],
             f"goal <= 1.05x; page faults/step cpu {pf['cpu']:.0f}, neuron {pf['neuron']:.0f}")]


def block_keeping_freed_memory(reps: int) -> list[tuple]:
    """The block case in a child process whose glibc keeps freed memory (both sides allocate alike)."""
    if not sys.platform.startswith("linux"):
        return []
    env = dict(os.environ, GLIBC_TUNABLES=KEEP_FREED)
    out = subprocess.run([sys.executable, __file__, "--block-only", "--reps", str(reps)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return [tuple(row) for row in json.loads(out.strip().splitlines()[-1])]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--block-only", action="store_true", help=argparse.SUPPRESS)  # the child of case (c)
    p.add_argument("--reps", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    reps = args.reps or (5 if args.quick else 11)
    if args.block_only:
        print(json.dumps(bench_block(reps)))
        return
    load = os.getloadavg()
    block_reps = max(3, reps // 2)
    rows = (bench_small_adds(reps) + bench_mlp(reps) + bench_block(block_reps)
            + block_keeping_freed_memory(block_reps))
    print(f"$ {COMMAND}{' --quick' if args.quick else ''}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, neuron backend "
          f"{neuron_studio.device.backend()}, medians of interleaved repetitions; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    head = f"{'case':58} {'unit':14} {'cpu':>10} {'neuron':>10} {'ratio':>7}  note"
    print(head)
    print("-" * len(head))
    for case, unit, cpu, dev, ratio, note in rows:
        unit = {"no subscriber": "µs/op", "subscriber": "µs/op (sub)", "per event": "µs/event"}.get(unit, unit)
        print(f"{case:58} {unit:14} {cpu:10.3f} {dev:10.3f} {ratio:6.2f}x  {note}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
