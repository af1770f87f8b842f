"""Emulated `neuron` device vs plain CPU eager, side by side in one run (not a test).

    python benchmarks/bench_device.py            # full run
    python benchmarks/bench_device.py --quick    # fewer repetitions

(a) per-op overhead: 10,000 small adds, µs per op above CPU, without and with an OpEvent subscriber
    (goals <= 1.5 µs without, <= 4 µs recording), and what turning the recorded rows into OpEvents costs
    per event when the subscription drains (outside the ops, once per profile);
(b) MLP 64x1024x1024: forward + backward + SGD step (goal <= 1.05x CPU);
(c) transformer block d_model 512, seq 256, batch 8: forward + backward (goal <= 1.05x CPU).
CPU and neuron repetitions are interleaved and medians reported, so drift in machine load hits both.
"""
from __future__ import annotations

import argparse
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

    drains: list[float] = []

    def dev_sub() -> None:
        with neuron_studio.device.subscribe(capacity=n) as sub:
            t0 = time.perf_counter()
            for _ in range(n):
                xn + xn
            t1 = time.perf_counter()
            assert len(sub.drain()) == n
            drains.append(time.perf_counter() - t1)
        return t1 - t0

    m = interleaved({"cpu": cpu, "neuron": dev, "neuron+sub": dev_sub}, reps)
    per = {k: v / n * 1e6 for k, v in m.items()}
    drain_us = statistics.median(drains) / n * 1e6
    return [
        ("(a) 10,000 adds, 16 floats", "no subscriber", per["cpu"], per["neuron"], per["neuron"] / per["cpu"],
         f"{per['neuron'] - per['cpu']:.2f} µs/op overhead (goal <= 1.5)"),
        ("(a) 10,000 adds, 16 floats", "subscriber", per["cpu"], per["neuron+sub"], per["neuron+sub"] / per["cpu"],
         f"{per['neuron+sub'] - per['cpu']:.2f} µs/op overhead (goal <= 4)"),
        ("(a) drain: recorded rows -> OpEvents", "per event", float("nan"), drain_us, float("nan"),
         "once per profile, outside the ops"),
    ]


def bench_mlp(reps: int) -> list[tuple]:
    def make(dev: str):  # noqa: ANN202
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(64, 1024).to(dev)

        def step() -> None:
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()

        return step

    m = interleaved({"cpu": make("cpu"), "neuron": make("neuron")}, reps)
    return [("(b) MLP 64x1024x1024 fwd+bwd+SGD", "ms/step", m["cpu"] * 1e3, m["neuron"] * 1e3,
             m["neuron"] / m["cpu"], "goal <= 1.05x")]


def bench_block(reps: int) -> list[tuple]:
    def make(dev: str):  # noqa: ANN202
        torch.manual_seed(0)
        model = PreNormBlock(512, 8).to(dev)
        x = torch.randn(8, 256, 512).to(dev)

        def step() -> None:
            model.zero_grad()
            model(x).square().mean().backward()

        return step

    m = interleaved({"cpu": make("cpu"), "neuron": make("neuron")}, reps)
    return [("(c) transformer block d512 s256 b8 fwd+bwd", "ms/step", m["cpu"] * 1e3, m["neuron"] * 1e3,
             m["neuron"] / m["cpu"], "goal <= 1.05x")]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = p.parse_args(argv)
    reps = 5 if args.quick else 11
    rows = bench_small_adds(reps) + bench_mlp(reps) + bench_block(max(3, reps // 2))
    print(f"$ {COMMAND}{' --quick' if args.quick else ''}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, neuron backend "
          f"{neuron_studio.device.backend()}, medians of interleaved repetitions")
    head = f"{'case':44} {'unit':14} {'cpu':>10} {'neuron':>10} {'ratio':>7}  note"
    print(head)
    print("-" * len(head))
    for case, unit, cpu, dev, ratio, note in rows:
        unit = {"no subscriber": "µs/op", "subscriber": "µs/op (sub)", "per event": "µs/event"}.get(unit, unit)
        print(f"{case:44} {unit:14} {cpu:10.3f} {dev:10.3f} {ratio:6.2f}x  {note}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
