"""Emulated `neuron` device vs plain CPU eager, side by side in one run (not a test).

    python benchmarks/bench_device.py            # full run
    python benchmarks/bench_device.py --quick    # fewer repetitions
    python benchmarks/bench_device.py --glibc-default-heap   # leave glibc's heap thresholds dynamic

(a) per-op overhead: 10,000 small adds, µs per op above CPU, without and with an op-event subscriber
    (goals <= 1.5 µs without, <= 4 µs recording), and what a drain costs per event (outside the ops, once per
    profile): the recorded rows as the columns the profiler reads (`drain_columns`), and as OpEvent objects
    (`drain`, for code that wants one object per op); and what ending a profile costs per op (`Capture.stop`:
    drain, module/phase/source attribution and the ops table) after 100 steps of a small transformer block with
    AdamW (~11,000 ops);
(b) MLP 64x1024x1024: forward + backward + SGD step (goal <= 1.05x CPU), with the same optimizer
    implementation on both sides: PyTorch picks SGD's `foreach` implementation for parameters on a PrivateUse1
    device (as on TorchNeuron) and the per-parameter loop on CPU, so each is measured with `foreach=` set
    explicitly on both;
(c) transformer block d_model 512, seq 256, batch 8: forward + backward (goal <= 1.05x CPU);
(d) plain CPU MLP backward alone and while another thread holds an OpenMP thread pool: why the device's backward
    runs on the thread that calls it rather than on autograd's device thread (README, "The emulated device").
(b) and (c) print each side's forward, backward and optimizer times and minor page faults per step. The kernels
and shapes are the same on both sides, and so is the heap: glibc's default dynamic thresholds hand whichever side
frees a 4 MB gradient at the top of the heap its memory back to the OS each step, and that side then faults 2,016
pages in again per step (0.8x or 1.5x depending on which side it hits, run to run). The benchmark therefore fixes
glibc's mmap and trim thresholds (`mallopt`, the same for both sides) unless `--glibc-default-heap` is given.
CPU and neuron repetitions are interleaved and medians reported, so drift in machine load hits both.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import resource
import statistics
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


def bench_capture_stop(reps: int) -> list[tuple]:
    from neuron_studio.profiler.capture import Capture

    torch.manual_seed(0)
    model = PreNormBlock(128, 4).to("neuron")
    x = torch.randn(2, 32, 128).to("neuron")
    opt = torch.optim.AdamW(model.parameters())

    def step() -> None:
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    step()
    per_op = []
    for _ in range(max(3, reps // 2)):
        cap = Capture(host_events=False, record_memory=False)
        cap.start()
        for _ in range(100):
            step()
            cap.step()
        t0 = time.perf_counter()
        trace = cap.stop()
        per_op.append((time.perf_counter() - t0) / len(trace.ops) * 1e6)
    return [("(a) end of a profile: Capture.stop, ~11k ops", "per event", float("nan"), statistics.median(per_op),
             float("nan"), "drain + module/phase/source + ops table, once per profile")]


def make_step(case: str, dev: str, phases: list[tuple[float, ...]]):  # noqa: ANN201
    """One step of case (b) or (c) on `dev` (the same seed, model and data on both sides); each call appends
    the seconds of its forward, backward and optimizer step to `phases`."""
    torch.manual_seed(0)
    if case.startswith("mlp"):
        model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=case == "mlp-foreach")
        x = torch.randn(64, 1024).to(dev)
    else:
        model = PreNormBlock(512, 8).to(dev)
        x = torch.randn(8, 256, 512).to(dev)
        opt = None

    def step() -> None:
        t0 = time.perf_counter()
        if opt is not None:
            opt.zero_grad()
        else:
            model.zero_grad()
        loss = model(x).square().mean()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if opt is not None:
            opt.step()
        phases.append((t1 - t0, t2 - t1, time.perf_counter() - t2))

    return step


def steps_side_by_side(case: str, reps: int) -> tuple[dict[str, float], str]:
    """Median seconds per step on each side, and a note: page faults and forward/backward/optimizer times."""
    faults: dict[str, list[int]] = {"cpu": [], "neuron": []}
    phases: dict[str, list[tuple[float, ...]]] = {"cpu": [], "neuron": []}
    m = interleaved({k: faults_counted(make_step(case, k, phases[k]), faults[k]) for k in faults}, reps)
    med = {k: [statistics.median(p) * 1e3 for p in zip(*v[-reps:])] for k, v in phases.items()}
    names = ("fwd", "bwd", "opt") if case.startswith("mlp") else ("fwd", "bwd")
    split = ", ".join(f"{n} {med['cpu'][i]:.1f}/{med['neuron'][i]:.1f}" for i, n in enumerate(names))
    pf = {k: statistics.median(v) for k, v in faults.items()}
    return m, f"ms cpu/neuron: {split}; page faults/step {pf['cpu']:.0f}/{pf['neuron']:.0f}"


def bench_mlp(reps: int) -> list[tuple]:
    rows = []
    for case, foreach, why in (("mlp-foreach", True, "neuron's default"), ("mlp-loop", False, "CPU's default")):
        m, note = steps_side_by_side(case, reps)
        rows.append((f"(b) MLP 64x1024x1024 fwd+bwd+SGD foreach={foreach}", "ms/step", m["cpu"] * 1e3,
                     m["neuron"] * 1e3, m["neuron"] / m["cpu"], f"goal <= 1.05x; {why}; {note}"))
    return rows


def bench_second_pool(reps: int) -> list[tuple]:
    """Why the device's backward runs on the calling thread: plain CPU MLP backward steps, alone and while another
    thread holds an OpenMP pool of its own (as autograd's device thread did when it ran the device's CPU kernels)."""
    import threading

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
    x = torch.randn(64, 1024)

    def backward() -> float:
        model.zero_grad()
        loss = model(x).square().mean()
        t0 = time.perf_counter()
        loss.backward()
        return time.perf_counter() - t0

    def with_pool() -> float:
        ready, done = threading.Event(), threading.Event()

        def hold() -> None:
            torch.ones(1 << 22).add_(1)   # one parallel region: this thread now has its own pool
            ready.set()
            done.wait()

        t = threading.Thread(target=hold)
        t.start()
        ready.wait()
        try:
            return sum(backward() for _ in range(20)) / 20
        finally:
            done.set()
            t.join()

    m = interleaved({"alone": lambda: sum(backward() for _ in range(20)) / 20, "second pool": with_pool}, reps)
    return [("(d) CPU MLP backward, another thread holding an OpenMP pool", "ms/step", m["alone"] * 1e3,
             m["second pool"] * 1e3, m["second pool"] / m["alone"],
             "both columns plain CPU: 'neuron' = with the second pool; why neuron's backward runs on the caller")]


def bench_block(reps: int) -> list[tuple]:
    m, note = steps_side_by_side("block", reps)
    return [("(c) transformer block d512 s256 b8 fwd+bwd", "ms/step", m["cpu"] * 1e3, m["neuron"] * 1e3,
             m["neuron"] / m["cpu"], f"goal <= 1.05x; {note}")]


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
HEAP_MMAP_THRESHOLD, HEAP_TRIM_THRESHOLD = 32 << 20, 128 << 20


def fix_glibc_heap() -> str:
    """Fix glibc's mmap/trim thresholds for both sides (see the module docstring); what was done, for the header."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return "not glibc: heap thresholds left as they are"
    ok = libc.mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD) == 1 and libc.mallopt(M_TRIM_THRESHOLD,
                                                                                  HEAP_TRIM_THRESHOLD) == 1
    if not ok:
        return "glibc refused mallopt: heap thresholds left dynamic"
    return (f"glibc heap fixed for both sides (mmap threshold {HEAP_MMAP_THRESHOLD >> 20} MiB, trim threshold "
            f"{HEAP_TRIM_THRESHOLD >> 20} MiB; --glibc-default-heap to leave them dynamic)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--glibc-default-heap", action="store_true",
                   help="leave glibc's dynamic mmap/trim thresholds (one side may fault its heap in every step)")
    args = p.parse_args(argv)
    heap = "glibc heap thresholds dynamic (--glibc-default-heap)" if args.glibc_default_heap else fix_glibc_heap()
    reps = 5 if args.quick else 11
    load = os.getloadavg()
    block_reps = max(3, reps // 2)
    rows = (bench_small_adds(reps) + bench_capture_stop(reps) + bench_mlp(reps) + bench_block(block_reps)
            + bench_second_pool(reps))
    flags = "".join(f" --{f}" for f in ("quick", "glibc-default-heap") if getattr(args, f.replace("-", "_")))
    print(f"$ {COMMAND}{flags}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, neuron backend "
          f"{neuron_studio.device.backend()}, medians of interleaved repetitions; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start, {os.getloadavg()[0]:.2f} at end; {heap}")
    head = f"{'case':58} {'unit':14} {'cpu':>10} {'neuron':>10} {'ratio':>7}  note"
    print(head)
    print("-" * len(head))
    for case, unit, cpu, dev, ratio, note in rows:
        unit = {"no subscriber": "µs/op", "subscriber": "µs/op (sub)", "per event": "µs/event"}.get(unit, unit)
        print(f"{case:58} {unit:14} {cpu:10.3f} {dev:10.3f} {ratio:6.2f}x  {note}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
