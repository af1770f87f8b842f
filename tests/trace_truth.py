"""Figures of a torch.profiler Chrome trace computed straight from its raw JSON, for tests.

Deliberately independent of the studio's importer: the JSON is parsed with the standard library, every
number as an exact `Decimal`, and each figure is a plain loop over the events written from the definition
below (no numpy, no shared helpers), so a test comparing the two catches a slip in either.

Definitions (the spec the importer is held to):

- CPU ops are complete events of category ``cpu_op`` (``Operator`` in 2021 traces). An *op* is one whose
  name is ``namespace::name[.overload]`` with a plain identifier namespace other than ``autograd``
  (``aten::mm``, ``c10d::allreduce_``, ``fbgemm::...``); wrapper nodes such as
  ``torch::autograd::AccumulateGrad`` or ``torch::distributed::reducer::mul_out`` are not ops.
  The ops counted are the outermost ones on each (pid, tid): not inside another op of that thread.
- A step is a ``ProfilerStep#N`` event on the CPU (``user_annotation``, or ``Operator``/``cpu_op`` in old
  traces); an op belongs to the step whose window contains its start on any thread of its process.
- GPU activity: categories ``kernel``/``Kernel`` (kernels), ``gpu_memcpy``/``Memcpy``, ``gpu_memset``/
  ``Memset``. A kernel is launched by the runtime event with the same ``correlation`` arg; that runtime event
  lies inside the op that launched it (same thread).
"""
from __future__ import annotations

import bisect
import gzip
import json
import re
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

_OP = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)::(?!.*::)\S.*$", re.DOTALL)     # any custom op name, one namespace
_COLLECTIVE_RANGE = re.compile(r"^(gloo|nccl|ucc|mpi|xccl):[a-z_0-9]+$")      # gloo:all_reduce
_CPU = {"cpu_op", "Operator"}
_STEP_CATS = {"user_annotation", "cpu_op", "Operator"}
_KERNEL = {"kernel", "Kernel"}
_MEMCPY = {"gpu_memcpy", "Memcpy"}
_MEMSET = {"gpu_memset", "Memset"}
_RUNTIME = {"cuda_runtime", "Runtime", "cuda_driver", "privateuse1_runtime"}


def path_of(name: str) -> Path:
    """A trace by file name: one the suite generates (tests/kineto_fixtures.py), else one of the traces
    recorded by others (`shared/traces`; the test skips, or fails in CI, without them)."""
    import kineto_fixtures
    import shared_data

    if name in kineto_fixtures.SYNTHETIC:
        return kineto_fixtures.synthetic_dir() / name
    return shared_data.require("traces") / name


def load(name: str) -> dict:
    data = path_of(name).read_bytes()
    raw = gzip.decompress(data) if name.endswith(".gz") else data
    doc = json.loads(raw, parse_float=Decimal)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def ns(v) -> int:
    """A µs value (int or Decimal) as integer nanoseconds, exactly (rounded half-even past 1 ns)."""
    return int((Decimal(v) * 1000).to_integral_value())


def _pid(v) -> str:
    return str(v)


def is_op_name(name: str) -> bool:
    m = _OP.match(name)
    return (bool(m) and m.group(1) != "autograd") or bool(_COLLECTIVE_RANGE.match(name))


def complete(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def ops(doc: dict) -> list[dict]:
    """The outermost ops per thread, each as {name, pid, tid, start, end} in absolute ns."""
    by_thread: dict[tuple, list] = defaultdict(list)
    for e in complete(doc):
        if e.get("cat") in _CPU and is_op_name(e["name"]):
            s = ns(e["ts"])
            by_thread[(_pid(e.get("pid")), str(e.get("tid")))].append(
                {"name": e["name"], "pid": _pid(e.get("pid")), "tid": str(e.get("tid")), "start": s,
                 "end": s + ns(e.get("dur", 0))})
    out = []
    for evs in by_thread.values():
        evs.sort(key=lambda r: (r["start"], -r["end"]))
        open_end = None
        for r in evs:
            if open_end is not None and r["start"] >= open_end[0] and r["end"] <= open_end[1]:
                continue
            out.append(r)
            open_end = (r["start"], r["end"])
    out.sort(key=lambda r: r["start"])
    return out


def op_counts(doc: dict) -> Counter:
    return Counter(r["name"] for r in ops(doc))


def step_windows(doc: dict) -> list[tuple[int, str, int, int]]:
    """(step number, pid, start ns, end ns) of each CPU ProfilerStep#N."""
    out = []
    for e in complete(doc):
        name = e.get("name", "")
        if e.get("cat") in _STEP_CATS and name.startswith("ProfilerStep#") and name[13:].isdigit():
            s = ns(e["ts"])
            out.append((int(name[13:]), _pid(e.get("pid")), s, s + ns(e.get("dur", 0))))
    return sorted(out)


def ops_per_step(doc: dict) -> Counter:
    """Number of ops in each step (0: outside every step window)."""
    wins = step_windows(doc)
    c: Counter = Counter()
    for r in ops(doc):
        step = 0
        for n, pid, s, e in wins:
            if pid == r["pid"] and s <= r["start"] < e:
                step = n
        c[step] += 1
    return c


def mean_step_ns(doc: dict) -> float:
    wins = step_windows(doc)
    return sum(e - s for _, _, s, e in wins) / len(wins)


def distributed(doc: dict) -> dict:
    info = doc.get("distributedInfo") or {}
    return {"rank": info.get("rank"), "world_size": info.get("world_size")}


def gpu_events(doc: dict, cats: set) -> list[dict]:
    return [e for e in complete(doc) if e.get("cat") in cats]


def kernel_totals(doc: dict) -> dict[str, tuple[int, int]]:
    """kind → (count, total ns) for kernels, memcpy and memset."""
    out = {}
    for kind, cats in (("kernel", _KERNEL), ("memcpy", _MEMCPY), ("memset", _MEMSET)):
        evs = gpu_events(doc, cats)
        out[kind] = (len(evs), sum(ns(e.get("dur", 0)) for e in evs))
    return out


def gpu_ns_per_op_name(doc: dict) -> tuple[Counter, int]:
    """Measured GPU time (kernels, memcpy, memset) launched by each op name, and the total not attributable."""
    runtime = {}
    for e in complete(doc):
        if e.get("cat") in _RUNTIME and isinstance(e.get("args"), dict) and "correlation" in e["args"]:
            runtime[e["args"]["correlation"]] = e
    thread_ops: dict[tuple, list] = defaultdict(list)
    for r in ops(doc):
        thread_ops[(r["pid"], r["tid"])].append(r)
    per: Counter = Counter()
    orphan = 0
    for e in gpu_events(doc, _KERNEL | _MEMCPY | _MEMSET):
        d = ns(e.get("dur", 0))
        rt = runtime.get((e.get("args") or {}).get("correlation"))
        owner = None
        if rt is not None:
            t = ns(rt["ts"])
            evs = thread_ops[(_pid(rt.get("pid")), str(rt.get("tid")))]
            i = bisect.bisect_right([r["start"] for r in evs], t) - 1   # outermost ops do not overlap
            if i >= 0 and t + ns(rt.get("dur", 0)) <= evs[i]["end"]:
                owner = evs[i]["name"]
        if owner is None:
            orphan += d
        else:
            per[owner] += d
    return per, orphan


def kernel_kind(e: dict) -> str:
    name = e.get("name", "")
    if e.get("cat") in _MEMCPY | _MEMSET:
        return "memory"
    if "nccl" in name.lower() or "rccl" in name.lower():
        return "communication"
    return "compute"


def _union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _length(iv: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in iv)


def _minus(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Length of union(a) not covered by union(b): walk both sorted unions together."""
    a, b = _union(a), _union(b)
    total, j = 0, 0
    for s, e in a:
        covered = 0
        while j < len(b) and b[j][1] <= s:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            covered += min(e, b[k][1]) - max(s, b[k][0])
            k += 1
        total += (e - s) - covered
    return total


def temporal_breakdown(doc: dict) -> dict[str, int]:
    """GPU time over the span from the first to the last GPU activity: compute, communication (not also
    computing), memory (neither), idle (nothing running)."""
    evs = gpu_events(doc, _KERNEL | _MEMCPY | _MEMSET)
    iv = defaultdict(list)
    for e in evs:
        s = ns(e["ts"])
        iv[kernel_kind(e)].append((s, s + ns(e.get("dur", 0))))
    allv = iv["compute"] + iv["communication"] + iv["memory"]
    span = max(e for _, e in allv) - min(s for s, _ in allv)
    compute = _length(_union(iv["compute"]))
    comm = _minus(iv["communication"], iv["compute"])
    memory = _minus(iv["memory"], iv["compute"] + iv["communication"])
    busy = _length(_union(allv))
    return {"span": span, "compute": compute, "communication": comm, "memory": memory, "idle": span - busy}
