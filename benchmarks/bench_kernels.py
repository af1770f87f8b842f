"""Interpreter wall time and modeled kernel time vs an op-level roofline, measured in one run.

    python benchmarks/bench_kernels.py [--chip trn2]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

try:
    from neuron_studio import kernels as K
except Exception:  # parent package not importable yet: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import kernels as K  # type: ignore[no-redef]


REPEATS = 3


def _bench(name: str, kernel, args, flops: float, nbytes: float, chip: str, **kwargs) -> None:
    walls = []
    for _ in range(REPEATS):  # first call is cold (page faults, BLAS thread start-up); report both
        t0 = time.perf_counter()
        _, trace = K.run(kernel, *args, chip=chip, **kwargs)
        walls.append(time.perf_counter() - t0)
    timing = K.kernel_time(trace)
    roof = K.roofline_ns(flops, nbytes, chip, "bfloat16")
    engines = ", ".join(f"{e}={ns / 1e3:.1f}us" for e, ns in timing.per_engine_ns.items() if ns)
    print(f"{name}: interpreter wall cold {walls[0]:.2f} s, warm {min(walls[1:]):.2f} s, "
          f"{len(trace)} instructions")
    print(f"  modeled {timing.total_ns / 1e3:.1f} us ({timing.bound_engine}-bound; {engines})")
    print(f"  roofline {roof / 1e3:.1f} us -> modeled/roofline {timing.total_ns / roof:.2f}x")
    top = timing.per_line[0]
    print(f"  hottest line {Path(top.file).name}:{top.line} {top.ns / 1e3:.1f} us over {top.instructions} instr")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chip", default="trn2", choices=("trn1", "trn2", "trn3"))
    opts = parser.parse_args(argv)
    torch.manual_seed(0)
    n = 2048
    a = torch.randn(n, n, dtype=torch.bfloat16)
    b = torch.randn(n, n, dtype=torch.bfloat16)
    _bench(f"matmul {n}x{n}x{n} bf16", K.matmul_kernel, (a, b), 2.0 * n ** 3, 3 * n * n * 2, opts.chip)
    nh, s, d = 8, 1024, 64
    q, k, v = (torch.randn(nh, s, d, dtype=torch.bfloat16) for _ in range(3))
    flops = 4.0 * nh * s * s * d / 2  # QK^T and PV, causal half
    _bench(f"flash attention causal heads={nh} seq={s} d={d} bf16", K.flash_attention_kernel, (q, k, v), flops,
           4 * nh * s * d * 2, opts.chip)


if __name__ == "__main__":
    main()
