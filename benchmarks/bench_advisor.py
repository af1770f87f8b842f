"""Benchmark the step-time breakdown and the what-if advisor against the rest of the profile summary.

Builds a synthetic trace of N ops (the model benchmark's columns: 4 cores, syncs, fallbacks, compiled graphs)
over 10 steps, makes a Profile, and times, best of `--repeat`: `Profile.step_breakdown()` (which re-models the
run in the other modes of its chip when launch overhead is large), `Profile.what_if()` (3 modes x 3 chips), the
summary's what-if (`what_if(max_ops=REMODEL_MAX_OPS)`: the first whole steps within the limit) and the rest of
`to_summary()`. Prints one table with the ratio of each to the rest of the summary.

    python benchmarks/bench_advisor.py [--ops 100000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_model import synthetic  # noqa: E402

from neuron_studio.profiler import breakdown_summary  # noqa: E402
from neuron_studio.profiler.analysis.what_if import REMODEL_MAX_OPS  # noqa: E402
from neuron_studio.profiler.profile import Profile  # noqa: E402
from neuron_studio.profiler.trace import OPS_COLUMNS, Trace  # noqa: E402

STEPS = 10


def synthetic_trace(n: int) -> Trace:
    cols = synthetic(n)
    df = pd.DataFrame(cols)
    defaults = {"overload": None, "thread": 0, "input_shapes": "[]", "input_dtypes": None, "output_shapes": None,
                "output_dtypes": None, "is_inplace": False, "transfer": None, "transfer_bytes": 0.0,
                "deterministic": False, "phase": "forward", "module": "", "step": np.arange(n) * STEPS // n + 1}
    for c, v in defaults.items():
        df[c] = v
    df = df[list(OPS_COLUMNS)]
    return Trace(ops=df, meta={"chip": "trn2", "mode": "adaptive", "steps": STEPS, "backend": "emulated",
                               "warmup": 1})


def best_of(fn, repeat: int) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    trace = synthetic_trace(args.ops)

    def fresh() -> Profile:
        return Profile.from_trace(trace, kernel_lookup=None)

    def rest() -> None:  # the summary without the two blocks (they are cached per profile: patch them out)
        p = fresh()
        orig = breakdown_summary.breakdown_block, breakdown_summary.what_if_block
        import neuron_studio.profiler.profile_summary as ps
        ps.breakdown_block, ps.what_if_block = (lambda prof: {}), (lambda prof: {})
        try:
            p.to_summary()
        finally:
            ps.breakdown_block, ps.what_if_block = orig

    profs = [fresh() for _ in range(args.repeat)]
    it = iter(profs)
    t_rest = best_of(rest, args.repeat)
    t_bd = best_of(lambda: next(it).step_breakdown(), args.repeat)
    t_wi = best_of(lambda: fresh().what_if(), args.repeat)
    t_inline = best_of(lambda: fresh().what_if(max_ops=REMODEL_MAX_OPS), args.repeat)
    kept = fresh().what_if(max_ops=REMODEL_MAX_OPS).attrs["remodeled_steps"]
    print(f"{args.ops:,} ops, {STEPS} steps, trn2, adaptive; best of {args.repeat}")
    print(f"| part | s | vs rest of summary |\n|---|---|---|")
    print(f"| rest of `to_summary()` | {t_rest:.2f} | 1.00x |")
    print(f"| `step_breakdown()` | {t_bd:.2f} | {t_bd / t_rest:.2f}x |")
    print(f"| `what_if()` (9 variants) | {t_wi:.2f} | {t_wi / t_rest:.2f}x |")
    steps = f"steps {kept[0]}-{kept[-1]} of {STEPS}" if kept else f"all {STEPS} steps"
    print(f"| summary's what-if, {REMODEL_MAX_OPS:,}-op limit ({steps}) | {t_inline:.2f} | {t_inline / t_rest:.2f}x |")


if __name__ == "__main__":
    main()
