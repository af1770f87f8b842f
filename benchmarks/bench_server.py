"""The JupyterLab extension's routes on a 1M-op run, served by a real Jupyter server (not a test).

    python benchmarks/bench_server.py                 # 1,000,000 ops, 4 concurrent clients
    python benchmarks/bench_server.py --ops 200000 --requests 20

Starts `jupyter server` on 127.0.0.1 (token auth, --allow-root) with this checkout's extension
(`extension/` first on PYTHONPATH) and a temporary run store holding one run with a synthetic
`device_ops` table, then fires requests at every route from several client threads at once: timeline
zooms (random windows, 200 bins, with one page of ops), the run list, the run detail and kernel-source.
Prints per route p50/p95 latency next to the 200 ms goal, and the cold first timeline request (reading
and sorting the table) next to a cached one. Goal: p95 < 200 ms per route while other requests are served.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import random
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python benchmarks/bench_server.py"
GOAL_MS = 200.0


def _device_ops(n: int, seed: int = 0) -> pa.Table:
    """n ops on 2 cores across the five engines, 50-2,000 ns each, back to back with small gaps."""
    rng = np.random.default_rng(seed)
    dur = rng.integers(50, 2000, n)
    start = np.cumsum(rng.integers(0, 400, n)) + 1_700_000_000_000_000_000 // 10**6
    engines = np.array(["tensor", "vector", "scalar", "gpsimd", "dma"])[rng.integers(0, 5, n)]
    return pa.table({
        "seq": np.arange(n, dtype=np.int64),
        "name": pa.array([f"aten::op{i % 997}" for i in range(n)]),
        "core": pa.array(rng.integers(0, 2, n), pa.int32()),
        "engine": pa.array(engines),
        "start_ns": start.astype(np.int64),
        "end_ns": (start + dur).astype(np.int64),
        "flops": rng.integers(0, 10**9, n),
        "bytes_read": rng.integers(0, 10**7, n),
        "bytes_written": rng.integers(0, 10**7, n),
        "bound": pa.array(np.where(rng.random(n) < 0.5, "compute", "memory")),
        "module": pa.array([f"layers.{i % 24}.mlp" for i in range(n)]),
        "source": pa.array(["train.py:42"] * n),
    })


def _seed_store(root: Path, n_ops: int) -> tuple[int, int, int]:
    sys.path.insert(0, str(ROOT / "extension"))
    from neuron_studio_lab import core

    (root / "bench.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    (root / "kernel.py").write_text("".join(f"# line {i}\n" for i in range(400)))
    store = core.run_store_module().RunStore(root / ".neuron_studio")
    for i in range(30):  # a realistic run list
        rid = store.begin_run(cell_source=f"step({i})", options={"steps": 5}, name=f"run{i}", notebook="bench.ipynb",
                              mode="adaptive", chip="trn2", backend="emulated")
        store.finish_run(rid, status="ok", summary={"step_time_ns": 1000 + i}, step_time_ns=1000 + i, mfu=0.3)
    table = _device_ops(n_ops)
    store.save_table(rid, "device_ops", table)
    lo = int(table.column("start_ns").to_numpy().min())
    hi = int(table.column("end_ns").to_numpy().max())
    return rid, lo, hi


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(root: Path, port: int, token: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "extension"), os.environ.get("PYTHONPATH", "")])}
    env.pop("NEURON_STUDIO_STORE", None)
    cmd = [sys.executable, "-m", "jupyter", "server", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--ServerApp.jpserver_extensions={'neuron_studio_lab': True}"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _get(base: str, token: str, path: str, params: dict) -> tuple[float, int]:
    query = "&".join(f"{k}={urllib.request.quote(str(v))}" for k, v in params.items())
    req = urllib.request.Request(f"{base}/neuron-studio/{path}?{query}", headers={"Authorization": f"token {token}"})
    began = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as resp:
        resp.read()
        status = resp.status
    return (time.perf_counter() - began) * 1000.0, status


def _wait_ready(base: str, token: str, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter server exited: {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        try:
            _get(base, token, "runs", {"path": "bench.ipynb"})
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("jupyter server did not answer in time")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--requests", type=int, default=40, help="requests per route")
    ap.add_argument("--clients", type=int, default=4, help="concurrent client threads")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="ns-bench-server-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        rid, lo, hi = _seed_store(root, args.ops)
        print(f"store seeded: {args.ops:,} ops in {time.perf_counter() - t:.1f} s")
        port, token = _free_port(), secrets.token_hex(16)
        base = f"http://127.0.0.1:{port}"
        proc = _start_server(root, port, token)
        try:
            _wait_ready(base, token, proc)
            nb = {"path": "bench.ipynb"}
            cold, _ = _get(base, token, f"runs/{rid}/timeline", {**nb, "bins": 200})
            rng = random.Random(0)

            def zoom() -> dict:
                width = max(1000, int((hi - lo) * rng.choice([1.0, 0.3, 0.05, 0.001, 1e-5])))
                start = rng.randint(lo, max(lo, hi - width))
                return {**nb, "bins": 200, "start_ns": start, "end_ns": start + width, "page": 0, "page_size": 100}

            jobs = []
            for _ in range(args.requests):
                jobs += [("timeline", f"runs/{rid}/timeline", zoom()), ("runs", "runs", nb),
                         ("run", f"runs/{rid}", nb), ("kernel-source", "kernel-source", {"file": "kernel.py", "line": 7})]
            rng.shuffle(jobs)
            lat: dict[str, list[float]] = {}
            began = time.perf_counter()
            with cf.ThreadPoolExecutor(args.clients) as pool:
                futures = {pool.submit(_get, base, token, path, params): route for route, path, params in jobs}
                for fut in cf.as_completed(futures):
                    ms, status = fut.result()
                    assert status == 200, (futures[fut], status)
                    lat.setdefault(futures[fut], []).append(ms)
            wall = time.perf_counter() - began
        finally:
            proc.terminate()
            proc.wait(30)

    print(f"\n{len(jobs)} requests from {args.clients} concurrent clients in {wall:.1f} s; run of {args.ops:,} ops\n")
    print(f"{'route':<16}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}{'p95 / goal':>12}")
    for route in ("timeline", "runs", "run", "kernel-source"):
        xs = sorted(lat[route])
        p95 = xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]
        print(f"{route:<16}{len(xs):>5}{statistics.median(xs):>10.1f}{p95:>10.1f}{p95 / GOAL_MS:>11.2f}x")
    warm = statistics.median(lat["timeline"])
    print(f"\ntimeline: first request (reads + sorts the table) {cold:.0f} ms vs cached median {warm:.1f} ms "
          f"({cold / warm:.0f}x)")


if __name__ == "__main__":
    main()
