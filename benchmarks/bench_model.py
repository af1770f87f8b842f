"""Benchmark the NeuronCore performance model: µs per op event for `model_run` in each mode (goal ≤ 2 µs).

Builds 1,000,000 synthetic op events as columns (no OpEvent objects), models them on Trn2 in eager,
adaptive and compile mode (also with the storages each op read and wrote, which the model list-schedules the ops
of a launch by), and prints one table. Also times the columnar import path (dict of derived
columns) and the one-pass OpEvent conversion on a smaller sample.

    python benchmarks/bench_model.py [--events 1000000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from neuron_studio.profiler.model import columns_from_mapping, events_to_columns, model_run

_NAMES = np.asarray(["aten::mm", "aten::addmm", "aten::add", "aten::mul", "aten::exp", "aten::gelu", "aten::sum",
                     "aten::_softmax", "aten::native_layer_norm", "aten::view", "aten::t", "aten::_to_copy",
                     "aten::clone", "aten::cat", "aten::gather", "aten::embedding", "aten::index_put_",
                     "aten::silu", "aten::div", "aten::_local_scalar_dense"], dtype=object)


def synthetic(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A dict of OpEvent-named + derived columns: 4 cores, a sync every ~500 ops, a fallback every ~5000,
    compiled graphs of 200 ops with a graph break every 10th graph."""
    rng = np.random.default_rng(seed)
    code = rng.integers(0, len(_NAMES) - 1, n)
    elems = rng.integers(1, 1 << 20, n).astype(np.float64)
    itemsize = rng.choice(np.asarray([2, 4], dtype=np.int8), n)
    sync = np.full(n, None, dtype=object)
    s_idx = rng.choice(n, n // 500, replace=False)
    sync[s_idx] = "item"
    code[s_idx] = len(_NAMES) - 1
    fallback = np.full(n, None, dtype=object)
    fallback[rng.choice(n, n // 5000, replace=False)] = "unsupported"
    source = np.full(n, None, dtype=object)
    source[s_idx] = "train.py:42"
    graph = np.arange(n) // 200
    graph[(graph % 10) == 9] = -1
    start = np.arange(n, dtype=np.int64) * 1_000
    return {
        "seq": np.arange(1, n + 1, dtype=np.int64), "name": _NAMES[code], "start_ns": start, "end_ns": start + 500,
        "device_index": (np.arange(n) // 1000 % 4).astype(np.int32), "flops": np.where(code < 2, elems * 512, 0.0),
        "in_bytes": elems * itemsize * 2, "out_bytes": elems * itemsize, "elems": elems, "itemsize": itemsize,
        "dtype_class": (itemsize == 4).astype(np.int8) * 2, "is_view": (code == 9) | (code == 10),
        "graph": graph, "sync": sync, "fallback": fallback, "source": source,
    }


def dependencies(n: int, seed: int = 1) -> dict[str, np.ndarray]:
    """reads/writes columns: op i writes storage i and reads the output of one of the 8 ops before it (and a
    weight, storage 0), so each launch has a few independent chains."""
    rng = np.random.default_rng(seed)
    back = rng.integers(1, 9, n)
    idx = np.arange(n)
    src = np.maximum(idx - back, 0) + 1
    reads = np.empty(n, dtype=object)
    writes = np.empty(n, dtype=object)
    for i in range(n):
        reads[i] = (0, int(src[i]))
        writes[i] = (i + 1,)
    return {"reads": reads, "writes": writes}


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = args.events
    data = synthetic(n)
    cols = columns_from_mapping(data)
    rows = [("columns_from_mapping (derived columns)", _best(lambda: columns_from_mapping(data), args.repeat), n)]
    for mode in ("eager", "adaptive", "compile"):
        rows.append((f"model_run mode={mode}", _best(lambda: model_run(cols, chip="trn2", mode=mode), args.repeat), n))
    rows.append(("model_run mode=adaptive from dict", _best(lambda: model_run(data, mode="adaptive"), args.repeat), n))
    # with the storages each op read and wrote: the ops of a launch are list-scheduled over the engines
    dep = columns_from_mapping({**data, **dependencies(n)})
    for mode in ("eager", "adaptive", "compile"):
        rows.append((f"model_run mode={mode} + reads/writes", _best(lambda: model_run(dep, chip="trn2", mode=mode),
                                                                   args.repeat), n))

    from neuron_studio.device.events import OpEvent

    k = min(n, 100_000)
    events = [OpEvent(seq=i, name="aten::add", overload="Tensor", start_ns=i, end_ns=i + 1, thread=0, device_index=0,
                      input_shapes=((64, 128), (64, 128)), input_dtypes=("bfloat16", "bfloat16"),
                      output_shapes=((64, 128),), output_dtypes=("bfloat16",)) for i in range(k)]
    rows.append(("events_to_columns (OpEvent objects)", _best(lambda: events_to_columns(events), args.repeat), k))

    print(f"{'step':<42} {'events':>10} {'total s':>9} {'us/op':>8}")
    for label, secs, count in rows:
        print(f"{label:<42} {count:>10,} {secs:>9.3f} {secs / count * 1e6:>8.3f}")
    r = model_run(cols, mode="adaptive")
    print(f"(adaptive: {r.summary.launches:,} launches, {len(r.groups):,} groups, "
          f"modeled step {r.summary.step_time_ns / 1e6:.1f} ms)")


if __name__ == "__main__":
    main()
