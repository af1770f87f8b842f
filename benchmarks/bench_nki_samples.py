"""Every AWS nki-samples kernel the interpreter runs: interpreter wall time and modeled kernel time, plus the
interpreter's speed on a 2048^3 bf16 matmul written in the tutorials' style.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_nki_samples.py [--shared DIR] [--chip trn2] [--only SUBSTR]

DIR holds AWS's nki-samples as `nki-samples/` (default: $NEURON_STUDIO_SHARED, else a `shared/` directory next
to the checkout, as for the tests).

Times are CPU seconds of this process (wall seconds in parentheses: on a shared, loaded machine wall time
mostly measures the other processes). One BLAS thread: on 2 shared cores, multi-threaded BLAS spins.
Inputs and references are the conformance test's (tests/test_nki_samples.py, at the tutorials' shapes).
Modeled time sums the traces of all kernel calls one sample makes (SPMD grid instances run back to back on one
NeuronCore in the model). The samples publish no latencies, so there is no published column to compare with.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from neuron_studio import kernels as K
from neuron_studio.kernels.interpreter import nki_imports

REPO = Path(__file__).resolve().parents[1]


def _test_module():
    sys.path.insert(0, str(REPO / "tests"))        # the module imports tests/shared_data.py
    spec = importlib.util.spec_from_file_location("conformance", REPO / "tests" / "test_nki_samples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load(samples: Path, rel: str):
    path = samples / rel
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"nki_sample_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(path.parent))
    return mod


def _matmul_2048(samples: Path, chip: str) -> None:
    mod = _load(samples, "src/nki_samples/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py")
    g = torch.Generator().manual_seed(0)
    a = torch.rand((2048, 2048), dtype=torch.bfloat16, generator=g)
    b = torch.rand((2048, 2048), dtype=torch.bfloat16, generator=g)
    for name, kernel in (("built-in matmul_kernel", K.matmul_kernel),
                         ("tutorial nki_matmul_fully_optimized_", mod.nki_matmul_fully_optimized_)):
        walls, cpus = [], []
        for _ in range(3):
            t0, c0 = time.perf_counter(), time.process_time()
            args = (a, b) if kernel is K.matmul_kernel else (a.T, b)
            _, trace = K.run(kernel, *args, chip=chip)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        print(f"| 2048³ bf16 matmul, {name} | cold {cpus[0]:.2f} s ({walls[0]:.2f} s), "
              f"warm {min(cpus[1:]):.2f} s ({min(walls[1:]):.2f} s) | "
              f"{K.kernel_time(trace).total_ns / 1e3:.0f} µs |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shared", default=None, help="directory holding nki-samples/ (default "
                        "$NEURON_STUDIO_SHARED or shared/ next to the checkout)")
    parser.add_argument("--chip", default="trn2", choices=("trn1", "trn2", "trn3"))
    parser.add_argument("--only", default="")
    opts = parser.parse_args(argv)
    if opts.shared:
        os.environ["NEURON_STUDIO_SHARED"] = opts.shared
    sys.path.insert(0, str(REPO / "tests"))
    import shared_data

    if shared_data.shared_path("nki-samples") is None:
        raise SystemExit("nki-samples not found: " + shared_data.missing_reason("nki-samples") + " (or pass --shared)")
    conf = _test_module()
    samples = conf.SAMPLES
    nki_imports.install()
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = opts.chip
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| kernel | shapes | interpreter CPU (wall) | modeled | max abs err |")
    print("|---|---|---|---|---|")
    for e in conf.MATCH:
        if opts.only not in f"{e['file']}::{e['kernel']}":
            continue
        mod = _load(samples, e["file"])
        with warnings.catch_warnings(), K.collect_traces() as traces:
            warnings.simplefilter("ignore")
            t0, c0 = time.perf_counter(), time.process_time()
            out, ref, _ = conf.CASES[e["case"]](mod, e["kernel"])
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        out = out.float().numpy() if isinstance(out, torch.Tensor) else np.asarray(out, np.float64)
        ref = ref.float().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref, np.float64)
        modeled = sum(K.kernel_time(t).total_ns for t in traces)
        print(f"| {Path(e['file']).stem}::{e['kernel']} | {e['shapes']} | {cpu:.2f} s ({wall:.2f} s) | "
              f"{modeled / 1e3:.1f} µs | {np.abs(out - ref).max():.2g} |", flush=True)
    print()
    print("| case | interpreter CPU (wall) | modeled |")
    print("|---|---|---|")
    _matmul_2048(samples, opts.chip)


if __name__ == "__main__":
    main()
