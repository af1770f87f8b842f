"""What the real-hardware op log costs the host (not a test).

    python benchmarks/bench_framework_log.py

On real TorchNeuron, `%%neuron` runs the cell (warm-up included) under `FrameworkLog`: a TorchDispatchMode that
records every aten op's sequence number, thread, module and source line (the PyTorch side of TorchNeuron's
framework mapping, and where each NEFF compile happened). That is Python work per op on the host. This measures it
on plain CPU PyTorch (no device, no fake): the transformer-block training step (d_model 256, seq 128, batch 4,
fwd+bwd+AdamW), interleaved plain / logged rounds, medians of the step's process CPU time (less sensitive than wall
time to other work on a shared machine), and (b) the op log's own cost per op: 20,000 tiny adds plain vs logged.
On hardware the device time per op is far above a CPU kernel's, so the ratio there is lower than here; the
per-op cost is what carries over.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COMMAND = "python benchmarks/bench_framework_log.py"
ROUNDS = 5
STEPS = 5
TINY = 20_000


def main() -> None:
    import torch

    from neuron_studio.profiler.framework_log import FrameworkLog
    from tests.models.blocks import TransformerBlock

    torch.manual_seed(0)
    model = TransformerBlock(256, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(4, 128, 256)

    def step() -> None:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(2):
        step()
    plain, logged, n_ops = [], [], 0
    clock = time.process_time
    for _ in range(ROUNDS):
        t = clock()
        for _ in range(STEPS):
            step()
        plain.append((clock() - t) / STEPS)
        with FrameworkLog() as log:
            t = clock()
            for i in range(STEPS):
                log.step = i
                step()
            logged.append((clock() - t) / STEPS)
        n_ops = len(log.ops) // STEPS
    p, lg = statistics.median(plain), statistics.median(logged)
    a, b = torch.ones(4), torch.ones(4)
    tiny_plain, tiny_logged = [], []
    for _ in range(ROUNDS):
        t = clock()
        for _ in range(TINY):
            torch.add(a, b)
        tiny_plain.append(clock() - t)
        with FrameworkLog():
            t = clock()
            for _ in range(TINY):
                torch.add(a, b)
            tiny_logged.append(clock() - t)
    per_op = (statistics.median(tiny_logged) - statistics.median(tiny_plain)) / TINY
    print(f"{COMMAND}  (load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs; process CPU time)")
    print(f"{'(a) step, median of ' + str(ROUNDS) + ' x ' + str(STEPS):<34}{'plain':>12}{'op log':>12}{'ratio':>8}")
    print(f"{'transformer block fwd+bwd+AdamW':<34}{p * 1e3:>10.1f}ms{lg * 1e3:>10.1f}ms{lg / p:>8.2f}")
    print(f"    aten ops logged per step: {n_ops}")
    print(f"(b) op log cost per op ({TINY:,} tiny adds, median of {ROUNDS}): {per_op * 1e6:.1f} us "
          f"(plain add {statistics.median(tiny_plain) / TINY * 1e6:.1f} us)")


if __name__ == "__main__":
    main()
